"""polsched.controller.policies.status: what a status write contains, monotonic counters, and
the ledger's pair. The writer's PATCHes are tested against the real API server
(tests/e2e/test_status_writer.py)."""

from __future__ import annotations

import pytest

from polsched.controller.policies.conditions import Condition
from polsched.controller.policies.status import StatusView, changed_fields, compose
from polsched.scheduler.engine import SchedulerStats

pytestmark = pytest.mark.unit

READY = Condition("Ready", True, "Running", "runs", 3)
VIEW = StatusView("s", "s", 3, None, (READY,))


def stats(binds: int = 0, bound: int = 0, pending: int = 0, unsched: int = 0,
          generation: int = 3) -> SchedulerStats:
    return SchedulerStats("s", bound, pending, binds, unsched, "2026-01-01T00:00:00Z",
                          generation, {"filters": ["NodeLabel"], "scorers": [], "extenders": []})


def test_compose_reads_counts_from_the_engine() -> None:
    out = compose(VIEW, stats(binds=7, bound=5, pending=2, unsched=1), {}, "T")
    assert out["boundPods"] == 5 and out["pendingPods"] == 2
    assert out["bindsTotal"] == 7 and out["unschedulableAttempts"] == 1
    assert out["observedGeneration"] == 3
    assert out["pipeline"] == {"filters": ["NodeLabel"], "scorers": [], "extenders": []}
    assert out["lastBindTime"] == "2026-01-01T00:00:00Z"


def test_counters_never_go_backwards() -> None:
    # The object says 100 (persisted by an earlier process); the engine counts 3 so far.
    out = compose(VIEW, stats(binds=3, unsched=0), {"bindsTotal": 100,
                                                     "unschedulableAttempts": 9}, "T")
    assert out["bindsTotal"] == 100 and out["unschedulableAttempts"] == 9


def test_a_policy_that_does_not_run_leaves_counts_alone() -> None:
    view = StatusView("s", None, None, None,
                      (Condition("Ready", False, "SchedulerNameConflict", "x", 1),))
    out = compose(view, None, {"boundPods": 4}, "T")
    assert "boundPods" not in out and "observedGeneration" not in out
    assert changed_fields(out, {"boundPods": 4, "schedulerName": "s"}) == \
        {"conditions": out["conditions"]}


def test_the_ledgers_pair_replaces_the_engines_count() -> None:
    # The engine counted 9 in memory; the ledger can vouch for 7 up to a second W.
    out = compose(VIEW, stats(binds=9), {"bindsTotal": 5}, "T",
                  binds=(7, "2026-11-23T03:00:00Z"))
    assert out["bindsTotal"] == 7 and out["lastBindTime"] == "2026-11-23T03:00:00Z"
    # Never below what the object says.
    out = compose(VIEW, stats(binds=9), {"bindsTotal": 8}, "T", binds=(7, ""))
    assert out["bindsTotal"] == 8


def test_many_policies_share_a_budget_of_count_writes() -> None:
    """One policy writes its counts every interval; fifty that all write share
    STATUS_WRITES_PER_SECOND, so each waits policies / budget seconds; one that writes
    among idle ones keeps the interval, and a policy that stopped writing stops counting
    once the longest period has passed."""
    import asyncio

    from polsched.controller.policies.status import STATUS_WRITES_PER_SECOND, StatusWriter

    async def main() -> tuple[float, float, float, float, float]:
        # Disabled: the slots' tasks wait and never call the client; a write's end is
        # set on the slot as _loop sets it after a flush.
        writer = StatusWriter(None, lambda _: None, interval=0.3,  # type: ignore[arg-type]
                              enabled=False)
        view = StatusView("s", "s", 1, None, ())
        writer.update("p0", view, {})
        one = writer.period(now=100.0)
        for i in range(1, 50):
            writer.update(f"p{i}", view, {})
        slots = writer._slots
        slots["p0"].last_write = 99.0
        one_of_fifty = writer.period(now=100.0)
        for slot in slots.values():
            slot.last_write = 95.0
        fifty = writer.period(now=100.0)
        for i in range(25):
            slots[f"p{i}"].last_write = 80.0  # half of them last wrote 20 s ago
        half = writer.period(now=100.0)
        idle = writer.period(now=200.0)
        await writer.close()
        return one, one_of_fifty, fifty, half, idle

    one, one_of_fifty, fifty, half, idle = asyncio.run(main())
    assert one == 0.3
    assert one_of_fifty == 0.3
    assert fifty == 50 / STATUS_WRITES_PER_SECOND
    assert half == 25 / STATUS_WRITES_PER_SECOND
    assert idle == 0.3


def test_a_status_echo_adopts_only_counters_that_are_ahead() -> None:
    """StatusWriter.observed (the reconciler's path for an event of a generation already
    seen, most often our own write coming back): counters ahead of the slot's are taken,
    the slot is marked for a write only then."""
    import asyncio

    from polsched.controller.policies.status import StatusWriter

    async def main() -> None:
        writer = StatusWriter(None, lambda _: None,  # type: ignore[arg-type]
                              enabled=True)
        writer.update("p", VIEW, {"bindsTotal": 5, "lastBindTime": "T5"})
        slot = writer._slots["p"]
        if slot.task is not None:  # no client: this test never writes
            slot.task.cancel()
        slot.dirty.clear()
        writer.observed("p", {"bindsTotal": 5, "lastBindTime": "T5"})  # our own echo
        assert not slot.dirty.is_set()
        writer.observed("p", {"bindsTotal": 4})  # behind: ignored
        assert not slot.dirty.is_set() and writer.written("p")["bindsTotal"] == 5
        writer.observed("p", {"bindsTotal": 9, "lastBindTime": "T9",
                              "unschedulableAttempts": 2})  # another replica wrote more
        assert slot.dirty.is_set()
        assert writer.written("p")["bindsTotal"] == 9
        assert writer.written("p")["lastBindTime"] == "T9"
        assert writer.written("p")["unschedulableAttempts"] == 2
        writer.observed("nobody", {"bindsTotal": 1})  # no slot: nothing
        writer._slots.clear()

    asyncio.run(main())


def test_a_policy_that_never_bound_still_gets_binds_total_written() -> None:
    """A standby (or a replica not yet leading) that sees the policy's status before any
    count was written takes no bindsTotal from it: once it writes, bindsTotal 0 is in
    the patch (the chaos suite's slow-extender attacker, which never binds, showed none)."""
    import asyncio

    from polsched.controller.policies.status import StatusWriter

    async def main() -> None:
        writer = StatusWriter(None, lambda _: None,  # type: ignore[arg-type]
                              enabled=False)
        writer.update("p", VIEW, {})
        writer.observed("p", {"conditions": [{"type": "Ready", "status": "True"}]})
        written = dict(writer.written("p"))
        await writer.close()
        assert "bindsTotal" not in written
        patch = changed_fields(compose(VIEW, stats(), written, "T"), written)
        assert patch["bindsTotal"] == 0

    asyncio.run(main())


def test_metrics_available_follows_the_engine_and_goes_with_the_load_aware_scorers() -> None:
    from dataclasses import replace

    missing = replace(stats(), node_metrics=(
        False, "NodesWithoutMetrics", "no metrics for node n3 (last seen 3m ago): 1 of 3 "
        "nodes get the neutral score of the load-aware scorers"))
    out = compose(VIEW, missing, {}, "T1")
    cond = {c["type"]: c for c in out["conditions"]}["MetricsAvailable"]
    assert (cond["status"], cond["reason"], cond["lastTransitionTime"]) == (
        "False", "NodesWithoutMetrics", "T1")
    assert "no metrics for node n3 (last seen 3m ago)" in cond["message"]
    fresh = replace(stats(), node_metrics=(True, "MetricsFresh", "fresh metrics for all 3"))
    out = compose(VIEW, fresh, out, "T2")
    cond = {c["type"]: c for c in out["conditions"]}["MetricsAvailable"]
    assert (cond["status"], cond["lastTransitionTime"]) == ("True", "T2")
    # The policy no longer has a load-aware scorer: the condition goes.
    out = compose(VIEW, stats(), out, "T3")
    assert "MetricsAvailable" not in {c["type"] for c in out["conditions"]}
