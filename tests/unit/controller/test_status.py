"""polsched.controller.status: what a status write contains, monotonic counters, and
batching of many engine notifications into few PATCHes."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from polsched.controller.conditions import Condition
from polsched.controller.status import StatusView, StatusWriter, changed_fields, compose
from polsched.scheduler.engine import SchedulerStats
from tests.unit.controller.fakes import FakeApi

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


def test_many_notifications_one_patch_and_the_last_count_written() -> None:
    async def scenario() -> tuple[FakeApi, list[dict[str, Any]]]:
        api = FakeApi()
        current = {"binds": 0}
        writer = StatusWriter(api, lambda _: stats(binds=current["binds"],  # type: ignore[arg-type]
                                                    bound=current["binds"]),
                              interval=0.2)
        writer.update("p", VIEW, {})
        await asyncio.sleep(0.05)  # the first (urgent) write
        for _ in range(500):  # 500 binds, each notifying
            current["binds"] += 1
            writer.touch("p")
            await asyncio.sleep(0)
        await asyncio.sleep(0.5)
        await writer.close()
        return api, [body["status"] for _, body in api.patches]

    api, bodies = asyncio.run(scenario())
    assert len(bodies) <= 3, bodies
    assert bodies[-1]["bindsTotal"] == 500 and bodies[-1]["boundPods"] == 500
    assert all(path.endswith("/schedulingpolicies/p/status") for path, _ in api.patches)


def test_a_new_pipeline_is_written_without_waiting_for_the_interval() -> None:
    async def scenario() -> list[dict[str, Any]]:
        api = FakeApi()
        gen = {"g": 3}
        writer = StatusWriter(api, lambda _: stats(generation=gen["g"]),  # type: ignore[arg-type]
                              interval=5.0)
        writer.update("p", VIEW, {})
        await asyncio.sleep(0.05)
        gen["g"] = 4
        writer.update("p", StatusView("s", "s", 4, None, (READY,)), {})
        await asyncio.sleep(0.05)
        bodies = [body["status"] for _, body in api.patches]
        writer.drop("p")
        return bodies

    bodies = asyncio.run(scenario())
    assert [b.get("observedGeneration") for b in bodies] == [3, 4]


def test_a_disabled_writer_writes_nothing_until_enabled() -> None:
    async def scenario() -> tuple[int, int]:
        api = FakeApi()
        writer = StatusWriter(api, lambda _: stats(), enabled=False)  # type: ignore[arg-type]
        writer.update("p", VIEW, {})
        await asyncio.sleep(0.05)
        before = len(api.patches)
        writer.set_enabled(True)
        await asyncio.sleep(0.05)
        after = len(api.patches)
        writer.drop("p")
        return before, after

    assert asyncio.run(scenario()) == (0, 1)
