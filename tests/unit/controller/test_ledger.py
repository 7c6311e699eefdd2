"""polsched.controller.ledger: the persisted (bindsTotal, lastBindTime) pair of several
schedulers at once, fed by a real ClusterCache (no API server: pods go in as watch
events). The whole operator path (SIGKILL, failover) is tested in tests/e2e."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from polsched.cluster.cache import ClusterCache
from polsched.controller import ledger as ledger_mod
from polsched.controller.ledger import BindLedger

pytestmark = pytest.mark.unit

SECOND = "2026-11-23T03:00:00Z"


def node(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": "1"}, "spec": {},
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}}}


def pod(name: str, scheduler: str, node_name: str = "", bound_at: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {"schedulerName": scheduler,
                            "containers": [{"name": "c", "image": "img"}]}
    status: dict[str, Any] = {"phase": "Pending"}
    if node_name:
        spec["nodeName"] = node_name
        status["conditions"] = [{"type": "PodScheduled", "status": "True",
                                 "lastTransitionTime": bound_at}]
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}",
                         "resourceVersion": "2" if node_name else "1"},
            "spec": spec, "status": status}


async def until(condition: Any, timeout: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        assert loop.time() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


def test_each_scheduler_settles_on_its_own_assumed_pods_and_its_own_delay(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """One timer per second serves every scheduler, but a scheduler's second is blocked
    only by its own assumed pods, and a scheduler that saw the second later waits its
    own SETTLE_SECONDS after that."""
    monkeypatch.setattr(ledger_mod, "SETTLE_SECONDS", 0.3)

    async def main() -> None:
        cache = ClusterCache(None)
        cache.on_node_event("ADDED", node("n1"))
        changed: list[str] = []
        ledger = BindLedger(cache, on_change=changed.append)
        ledger.open_many({"a": (0, None), "b": (10, None), "c": (0, None)})
        # b has a bind in flight when the second is snapshotted: it blocks b, not a.
        cache.on_pod_event("ADDED", pod("pb-slow", "b"))
        cache.assume(cache.pods["ns/pb-slow"], "n1")
        cache.on_pod_event("ADDED", pod("pa", "a", "n1", SECOND))
        cache.on_pod_event("ADDED", pod("pb", "b", "n1", SECOND))
        assert ledger.total("a") == 1 and ledger.total("b") == 11
        await asyncio.sleep(0.2)
        cache.on_pod_event("ADDED", pod("pc", "c", "n1", SECOND))  # c sees it later
        await until(lambda: ledger.persistable("a") == (1, SECOND))
        assert ledger.persistable("b") == (10, "")  # blocked by pb-slow
        # c's second is not settled yet: its own delay has not passed.
        assert ledger.persistable("c") == (0, "")
        await until(lambda: ledger.persistable("c") == (1, SECOND))
        cache.on_pod_event("MODIFIED", pod("pb-slow", "b", "n1", SECOND))  # confirmed
        assert ledger.persistable("b") == (12, SECOND)
        assert {"a", "b", "c"} <= set(changed)

    asyncio.run(main())


def test_open_many_recovers_each_schedulers_binds_after_its_watermark() -> None:
    async def main() -> None:
        cache = ClusterCache(None)
        cache.on_node_event("ADDED", node("n1"))
        for i, (sched, at) in enumerate([("a", "2026-11-23T03:00:00Z"),
                                         ("a", "2026-11-23T03:00:05Z"),
                                         ("b", "2026-11-23T03:00:01Z"),
                                         ("x", "2026-11-23T03:00:09Z")]):
            cache.on_pod_event("ADDED", pod(f"p{i}", sched, "n1", at))
        ledger = BindLedger(cache)
        ledger.open_many({"a": (7, "2026-11-23T03:00:02Z"), "b": (3, None)})
        assert ledger.total("a") == 8  # only the bind after the watermark is new
        assert ledger.total("b") == 4
        assert ledger.total("x") is None  # no account opened

    asyncio.run(main())


def test_a_new_policys_watermark_is_the_second_before_its_creation() -> None:
    assert ledger_mod.before_creation("2026-11-23T03:00:00Z") == "2026-11-23T02:59:59Z"
    assert ledger_mod.before_creation("2026-01-01T00:00:00Z") == "2025-12-31T23:59:59Z"
    # Unreadable or missing: no watermark, every bound pod counts (the old behaviour).
    assert ledger_mod.before_creation("") == ""
    assert ledger_mod.before_creation("yesterday") == ""
    # Binds of the creation second count, the second before it does not.
    async def main() -> None:
        cache = ClusterCache(None)
        cache.on_node_event("ADDED", node("n1"))
        cache.on_pod_event("ADDED", pod("before", "s", "n1", "2026-11-23T02:59:59Z"))
        cache.on_pod_event("ADDED", pod("same", "s", "n1", "2026-11-23T03:00:00Z"))
        ledger = BindLedger(cache)
        ledger.open("s", 0, ledger_mod.before_creation("2026-11-23T03:00:00Z"))
        assert ledger.total("s") == 1

    asyncio.run(main())
