"""polsched.controller.policies.lastgood: the last good generation is recorded on the object and
runs when a process starts on a spec that does not load. What the reconciler writes is
tested against the real API server (tests/e2e/test_lastgood.py)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from polsched.controller.policies import lastgood
from polsched.controller.policies.book import PolicyBook

pytestmark = pytest.mark.unit

GOOD = {"schedulerName": "s", "filters": [{"name": "NodeLabel", "args": {"requirements": [
    {"key": "zone", "operator": "In", "values": ["a"]}]}}]}
BAD = {"schedulerName": "s", "filters": [
    {"name": "Expression", "args": {"expression": "node.metadata.name =="}}]}


def body(generation: int, spec: dict[str, Any], record: str | None = None,
         uid: str = "uid-p") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p", "uid": uid, "generation": generation,
                            "creationTimestamp": "2026-01-01T00:00:00Z"}
    if record is not None:
        meta["annotations"] = {lastgood.ANNOTATION: record,
                               "polsched.io/kopf-managed": "yes"}
    return {"apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
            "metadata": meta, "spec": copy.deepcopy(spec)}


def test_encode_is_compact_and_reads_back() -> None:
    raw = lastgood.encode(3, GOOD)
    assert " " not in raw.replace("node.metadata", "")
    assert json.loads(raw) == {"generation": 3, "spec": GOOD}
    rec = lastgood.read(body(4, BAD, raw))
    assert rec is not None and rec.generation == 3 and rec.spec == GOOD


@pytest.mark.parametrize("raw", ["not json", "[]", '{"generation": 0, "spec": {}}',
                                 '{"generation": true, "spec": {}}',
                                 '{"generation": 1, "spec": []}'])
def test_a_malformed_record_is_ignored(raw: str) -> None:
    assert lastgood.read(body(2, BAD, raw)) is None
    rec, _ = PolicyBook().observe(body(2, BAD, raw))
    assert rec.loaded is None and rec.error is not None


def test_starting_on_a_bad_spec_loads_the_recorded_generation() -> None:
    rec, reloaded = PolicyBook().observe(body(5, BAD, lastgood.encode(3, GOOD)))
    assert reloaded
    assert rec.error is not None
    assert rec.error.errors[0].path == "spec.filters[0].args.expression"
    assert rec.loaded is not None
    assert rec.loaded.generation == 3 and rec.generation == 5
    assert rec.loaded.uid == "uid-p" and rec.loaded.name == "p"
    assert rec.loaded_spec == GOOD
    assert rec.recorded == 3


def test_the_memory_wins_over_the_record() -> None:
    book = PolicyBook()
    first, _ = book.observe(body(4, GOOD))
    rec, _ = book.observe(body(5, BAD, lastgood.encode(3, GOOD)))
    assert rec.loaded is first.loaded and rec.loaded is not None
    assert rec.loaded.generation == 4


def test_a_good_spec_ignores_the_record() -> None:
    rec, _ = PolicyBook().observe(body(5, GOOD, lastgood.encode(3, BAD)))
    assert rec.error is None and rec.loaded is not None and rec.loaded.generation == 5


def test_a_record_that_no_longer_loads_falls_back_to_nothing() -> None:
    rec, _ = PolicyBook().observe(body(5, BAD, lastgood.encode(3, BAD)))
    assert rec.loaded is None and rec.error is not None


def test_a_record_newer_than_the_object_is_ignored() -> None:
    rec, _ = PolicyBook().observe(body(2, BAD, lastgood.encode(3, GOOD)))
    assert rec.loaded is None


def labels(n: int) -> list[dict[str, Any]]:
    return [{"name": "NodeLabel", "args": {"requirements": [
        {"key": f"k{i}", "operator": "Exists"}]}} for i in range(n)]


def test_a_record_beyond_the_crds_bounds_is_not_restored() -> None:
    # Issue 36: the annotation is author-writable and the API server never checks it;
    # 65 filters load, but the CRD allows 64.
    over = {"schedulerName": "s", "filters": labels(65)}
    rec, _ = PolicyBook().observe(body(5, BAD, lastgood.encode(3, over)))
    assert rec.loaded is None and rec.error is not None
    at_bound = {"schedulerName": "s", "filters": labels(64)}
    rec, _ = PolicyBook().observe(body(5, BAD, lastgood.encode(3, at_bound)))
    assert rec.loaded is not None and rec.loaded.generation == 3
