"""polsched.controller.policies.book: the last good spec survives a bad edit, and the older
policy keeps a contested schedulerName."""

from __future__ import annotations

from typing import Any

import pytest

from polsched.controller.policies.book import PolicyBook

pytestmark = pytest.mark.unit


def body(name: str, generation: int = 1, created: str = "2026-01-01T00:00:00Z",
         uid: str = "", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
            "metadata": {"name": name, "uid": uid or f"uid-{name}", "generation": generation,
                         "creationTimestamp": created},
            "spec": spec}


BAD_CEL = [{"name": "Expression", "args": {"expression": "node.metadata.name =="}}]


def test_a_bad_edit_keeps_the_last_good_policy() -> None:
    book = PolicyBook()
    rec, loaded = book.observe(body("p", 1))
    assert loaded and rec.loaded is not None and rec.error is None
    good = rec.loaded
    rec, loaded = book.observe(body("p", 2, filters=BAD_CEL))
    assert loaded
    assert rec.loaded is good and rec.generation == 2
    assert rec.error is not None
    assert rec.error.errors[0].path == "spec.filters[0].args.expression"


def test_the_same_generation_is_not_loaded_again() -> None:
    book = PolicyBook()
    first, _ = book.observe(body("p", 1))
    again, loaded = book.observe({**body("p", 1), "status": {"bindsTotal": 3}})
    assert not loaded and again.loaded is first.loaded
    assert again.status == {"bindsTotal": 3}


def test_the_older_policy_owns_a_contested_scheduler_name() -> None:
    book = PolicyBook()
    book.observe(body("young", created="2026-01-02T00:00:00Z", schedulerName="s"))
    book.observe(body("old", created="2026-01-01T00:00:00Z", schedulerName="s"))
    assert book.owner_of("s") == "old"
    book.forget("old")
    assert book.owner_of("s") == "young"


def test_an_invalid_policy_still_claims_its_name() -> None:
    book = PolicyBook()
    rec, _ = book.observe(body("p", schedulerName="s", filters=BAD_CEL))
    assert rec.loaded is None and rec.claimed == "s"
    assert book.owner_of("s") == "p"


def test_a_recreated_policy_starts_from_scratch() -> None:
    book = PolicyBook()
    book.observe(body("p", 1, uid="a"))
    rec, loaded = book.observe(body("p", 1, uid="b", filters=BAD_CEL))
    assert loaded and rec.loaded is None
