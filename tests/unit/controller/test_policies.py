"""polsched.controller.policies.book: the last good spec survives a bad edit, and the older
policy keeps a contested schedulerName."""

from __future__ import annotations

from typing import Any

import pytest

from polsched.api.admission import AdmissionRules
from polsched.api.tenancy import DEFAULT_NAME_GRACE_SECONDS, parse_tenancy
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


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_older_policy_owns_a_contested_scheduler_name() -> None:
    clock = Clock()
    book = PolicyBook(clock=clock)
    book.observe(body("young", created="2026-01-02T00:00:00Z", schedulerName="s"))
    book.observe(body("old", created="2026-01-01T00:00:00Z", schedulerName="s"))
    assert book.owner_of("s") == "old"
    book.forget("old")
    clock.now += DEFAULT_NAME_GRACE_SECONDS
    assert book.owner_of("s") == "young"


def test_a_deleted_owner_keeps_its_name_for_the_grace_period() -> None:
    # Team B's GitOps replace (delete, then create) must not hand B's pods to team A's
    # idle policy of the same schedulerName.
    clock = Clock()
    book = PolicyBook(clock=clock)
    book.observe(body("team-b", created="2026-01-01T00:00:00Z", schedulerName="s"))
    book.observe(body("team-a", created="2026-01-02T00:00:00Z", schedulerName="s"))
    book.forget("team-b")
    assert book.owner_of("s") is None and book.held()["s"][0] == "team-b"
    assert book.next_release() == DEFAULT_NAME_GRACE_SECONDS
    clock.now += 10
    book.observe(body("team-b", created="2026-01-03T00:00:00Z", uid="again",
                      schedulerName="s"))
    assert book.owner_of("s") == "team-b"  # the newest, yet the owner
    book.forget("team-b")
    clock.now += DEFAULT_NAME_GRACE_SECONDS - 1
    assert book.owner_of("s") is None
    clock.now += 1
    assert book.owner_of("s") == "team-a" and book.next_release() is None


def test_without_grace_the_next_claimant_owns_at_once() -> None:
    rules = AdmissionRules(tenancy=parse_tenancy({"nameGraceSeconds": 0}))
    book = PolicyBook(rules)
    book.observe(body("b", created="2026-01-01T00:00:00Z", schedulerName="s"))
    book.observe(body("a", created="2026-01-02T00:00:00Z", schedulerName="s"))
    book.forget("b")
    assert book.owner_of("s") == "a"


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


def conflicting(b: dict[str, Any]) -> dict[str, Any]:
    """`b` as the operator reported it: not the owner of its name."""
    return {**b, "status": {"conditions": [
        {"type": "Ready", "status": "False", "reason": "SchedulerNameConflict"}]}}


def test_a_re_created_owner_keeps_its_name_after_the_grace_period_and_a_restart() -> None:
    """Team B's replace makes it the newest claimant: team A's idle, older policy does
    not take the name once the grace period is over, nor when the operator restarts (a
    new book, from the objects and the record the first one kept)."""
    clock = Clock()
    book = PolicyBook(clock=clock)
    book.observe(body("team-b", created="2026-01-02T00:00:00Z", schedulerName="s"))
    assert book.owner_of("s") == "team-b"  # the operator syncs after each event
    book.observe(conflicting(body("team-a", created="2026-01-01T00:00:00Z",
                                  schedulerName="s")))
    assert book.owner_of("s") == "team-b"
    book.forget("team-b")
    recreated = body("team-b", created="2026-01-03T00:00:00Z", uid="again", schedulerName="s")
    book.observe(recreated)
    assert book.owner_of("s") == "team-b"  # held for it
    clock.now += DEFAULT_NAME_GRACE_SECONDS + 1
    assert not book.held() and book.owner_of("s") == "team-b"
    restarted = PolicyBook()
    restarted.restore_recorded(book.recorded())
    restarted.observe(conflicting(body("team-a", created="2026-01-01T00:00:00Z",
                                       schedulerName="s")))
    restarted.observe(recreated)
    assert restarted.owner_of("s") == "team-b"
    # With the owner gone for good, the one left owns it, whatever it was told before.
    later = PolicyBook(AdmissionRules(tenancy=parse_tenancy({"nameGraceSeconds": 0})))
    later.observe(conflicting(body("team-a", created="2026-01-01T00:00:00Z",
                                   schedulerName="s")))
    assert later.owner_of("s") == "team-a"


def test_a_hold_recorded_by_one_book_holds_in_the_next() -> None:
    """A restart within the grace period: the new book, given the record the old one
    wrote (held_until, as wall-clock ends), holds the name for the deleted owner for the
    rest of the grace period, and no longer than its own grace from now."""
    clock, wall = Clock(), 1_800_000_000.0
    book = PolicyBook(clock=clock)
    book.observe(body("team-b", created="2026-01-01T00:00:00Z", schedulerName="s"))
    book.observe(body("team-a", created="2026-01-02T00:00:00Z", schedulerName="s"))
    book.forget("team-b")
    clock.now += 100
    record = book.held_until(wall + 100)
    assert record == {"s": ("team-b", wall + DEFAULT_NAME_GRACE_SECONDS)}

    restarted = PolicyBook(clock=Clock())
    restarted.observe(body("team-a", created="2026-01-02T00:00:00Z", schedulerName="s"))
    assert restarted.owner_of("s") == "team-a"  # what a restart did before
    restarted.restore(record, wall + 150)
    assert restarted.owner_of("s") is None and restarted.held()["s"][0] == "team-b"
    assert restarted.next_release() == DEFAULT_NAME_GRACE_SECONDS - 150
    restarted.observe(body("team-b", created="2026-01-03T00:00:00Z", uid="again",
                           schedulerName="s"))
    assert restarted.owner_of("s") == "team-b"

    # A record past its end holds nothing; one reaching beyond the grace is cut to it.
    later = PolicyBook(clock=Clock())
    later.observe(body("team-a", created="2026-01-02T00:00:00Z", schedulerName="s"))
    later.restore(record, wall + DEFAULT_NAME_GRACE_SECONDS)
    assert later.owner_of("s") == "team-a"
    later.restore({"s": ("team-b", wall + 10**9)}, wall)
    assert later.next_release() == DEFAULT_NAME_GRACE_SECONDS


def ready(b: dict[str, Any]) -> dict[str, Any]:
    """`b` with a status saying it runs, as whoever may patch the status can write it."""
    return {**b, "status": {"conditions": [
        {"type": "Ready", "status": "True", "reason": "Scheduling"}]}}


def test_no_status_an_author_writes_moves_a_name() -> None:
    """Ownership reads no status: team A (older, idle) clears its SchedulerNameConflict
    report and says it runs, and marks team B's policy conflicting; B keeps its name, in
    this process and after a restart, and A is still the one refused."""
    clock = Clock()
    book = PolicyBook(clock=clock)
    book.observe(body("team-b", created="2026-01-02T00:00:00Z", schedulerName="s"))
    assert book.owner_of("s") == "team-b"  # the operator syncs after each event
    book.observe(conflicting(body("team-a", created="2026-01-01T00:00:00Z",
                                  schedulerName="s")))
    assert book.owner_of("s") == "team-b"
    book.observe(ready(body("team-a", created="2026-01-01T00:00:00Z", schedulerName="s")))
    book.observe(conflicting(body("team-b", created="2026-01-02T00:00:00Z",
                                  schedulerName="s")))
    assert book.owner_of("s") == "team-b"
    restarted = PolicyBook()
    restarted.restore_recorded(book.recorded())
    restarted.observe(ready(body("team-a", created="2026-01-01T00:00:00Z",
                                 schedulerName="s")))
    restarted.observe(conflicting(body("team-b", created="2026-01-02T00:00:00Z",
                                       schedulerName="s")))
    assert restarted.owner_of("s") == "team-b"
    # Annotations neither (the last-good record is the only one the operator reads).
    annotated = body("team-a", created="2026-01-01T00:00:00Z", schedulerName="s")
    annotated["metadata"]["annotations"] = {"polsched.io/owner": "team-a"}
    restarted.observe(annotated)
    assert restarted.owner_of("s") == "team-b"
