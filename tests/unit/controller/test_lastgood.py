"""polsched.controller.lastgood: the last good generation is recorded on the object and
runs when a process starts on a spec that does not load."""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

import pytest

from polsched.controller import conditions as cond
from polsched.controller import lastgood
from polsched.controller.policies import PolicyBook
from polsched.controller.reconciler import PolicyReconciler
from polsched.controller.status import StatusWriter
from polsched.scheduler.engine import Engine
from tests.unit.controller.fakes import FakeApi

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


def reconciler(api: FakeApi, records: bool) -> PolicyReconciler:
    engine = Engine(api)  # type: ignore[arg-type]
    writer = StatusWriter(api, lambda _: None, enabled=False)  # type: ignore[arg-type]
    return PolicyReconciler(api, engine, writer, records_last_good=records)  # type: ignore[arg-type]


def recorded(api: FakeApi) -> list[tuple[str, dict[str, Any]]]:
    return [(p, b) for p, b in api.patches if not p.endswith("/status")]


def test_the_operator_records_each_good_generation_once() -> None:
    async def run() -> None:
        api = FakeApi()
        r = reconciler(api, records=True)
        await r.observe(body(1, GOOD))
        patches = recorded(api)
        assert len(patches) == 1
        path, patch = patches[0]
        assert path == "/apis/polsched.io/v1alpha1/schedulingpolicies/p"
        assert patch["metadata"]["uid"] == "uid-p"
        assert lastgood.read(patch) == lastgood.LastGood(1, GOOD)
        # Our own write comes back as a watch event, then status events: no new write.
        raw = patch["metadata"]["annotations"][lastgood.ANNOTATION]
        await r.observe(body(1, GOOD, raw))
        await r.observe(body(1, GOOD, raw))
        # A bad edit is not recorded; the next good one is.
        await r.observe(body(2, BAD, raw))
        assert len(recorded(api)) == 1
        await r.observe(body(3, GOOD, raw))
        assert [lastgood.read(b) for _, b in recorded(api)][-1] == lastgood.LastGood(3, GOOD)
        assert len(recorded(api)) == 2
        await r.close()

    asyncio.run(run())


def test_a_dedicated_scheduler_does_not_write_the_record() -> None:
    async def run() -> None:
        api = FakeApi()
        r = reconciler(api, records=False)
        await r.observe(body(1, GOOD))
        assert recorded(api) == []
        await r.close()

    asyncio.run(run())


def test_after_a_restart_on_a_bad_spec_the_recorded_generation_runs() -> None:
    async def run() -> None:
        api = FakeApi()
        r = reconciler(api, records=True)
        await r.observe(body(5, BAD, lastgood.encode(3, GOOD)))
        rec = r.book.get("p")
        assert rec is not None
        view = r._view(rec, r.book.owners())
        assert view is not None
        assert view.observed_generation == 3 and view.running == "s"
        ready, reconciling, stalled, valid = view.conditions
        # Generation 3 schedules, but generation 5 will not run until it is fixed: kstatus
        # Stalled, not Ready, so `kubectl wait --for=condition=Ready` does not pass on it.
        assert (ready.type, ready.status, ready.reason) == (cond.READY, False, cond.INVALID_SPEC)
        assert "runs generation 3" in ready.message and ready.observed_generation == 5
        assert (stalled.type, stalled.status) == (cond.STALLED, True)
        assert (reconciling.type, reconciling.status) == (cond.RECONCILING, False)
        assert (valid.type, valid.status, valid.reason) == \
            (cond.VALID, False, cond.INVALID_SPEC)
        assert "spec.filters[0].args.expression" in valid.message
        assert "generation 3 keeps running" in valid.message
        assert valid.observed_generation == 5
        assert recorded(api) == []  # the record stays as it is
        await r.close()

    asyncio.run(run())
