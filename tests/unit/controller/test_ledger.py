"""polsched.controller.policies.ledger: the persisted (bindsTotal, lastBindTime) pair of several
schedulers at once, fed by a real ClusterCache (no API server: pods go in as watch
events). The whole operator path (SIGKILL, failover) is tested in tests/e2e."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable
from typing import Any, cast

import pytest

from polsched.cluster.cache import ClusterCache
from polsched.cluster.client import ApiClient
from polsched.controller.policies import ledger as ledger_mod
from polsched.controller.policies.ledger import BindLedger
from polsched.scheduler.binder import Binder
from tests.builders import make_node, make_pod

pytestmark = pytest.mark.unit

SECOND = "2026-11-23T03:00:00Z"


def node(name: str) -> dict[str, Any]:
    return (make_node().name(name).resource_version("1").spec()
            .allocatable({"cpu": "4", "memory": "8Gi", "pods": "110"}).obj())


def pod(name: str, scheduler: str, node_name: str = "", bound_at: str = "") -> dict[str, Any]:
    p = (make_pod().name(name).namespace("ns").uid(f"uid-{name}")
         .resource_version("2" if node_name else "1").scheduler(scheduler)
         .container(image="img").phase("Pending"))
    if node_name:
        p.node(node_name).status(conditions=[{"type": "PodScheduled", "status": "True",
                                              "lastTransitionTime": bound_at}])
    return p.obj()


class FakeClock:
    """The ledger's clock and timers, moved by the test: advance() runs the callbacks that
    fall due, in order, each at its own time. No test sleeps or depends on the machine's
    speed."""

    def __init__(self) -> None:
        self.now = 1000.0
        self._timers: list[tuple[float, int, Callable[..., None], tuple[Any, ...]]] = []
        self._seq = itertools.count()

    def __call__(self) -> float:
        return self.now

    def call_later(self, delay: float, callback: Callable[..., None], *args: Any) -> None:
        heapq.heappush(self._timers, (self.now + delay, next(self._seq), callback, args))

    def advance(self, seconds: float) -> None:
        until = self.now + seconds
        while self._timers and self._timers[0][0] <= until:
            when, _, callback, args = heapq.heappop(self._timers)
            self.now = max(self.now, when)
            callback(*args)
        self.now = until


def ledger_with(cache: ClusterCache, clock: FakeClock, **kw: Any) -> BindLedger:
    return BindLedger(cache, clock=clock, call_later=clock.call_later, **kw)


SETTLE = ledger_mod.SETTLE_SECONDS


def test_each_scheduler_settles_on_its_own_assumed_pods_and_its_own_delay() -> None:
    """One timer per second serves every scheduler, but a scheduler's second is blocked
    only by its own assumed pods, and a scheduler that saw the second later waits its
    own SETTLE_SECONDS after that."""
    clock = FakeClock()
    cache = ClusterCache(None)
    cache.on_node_event("ADDED", node("n1"))
    changed: list[str] = []
    ledger = ledger_with(cache, clock, on_change=changed.append)
    ledger.open_many({"a": (0, None), "b": (10, None), "c": (0, None)})
    # b has a bind in flight when the second is snapshotted: it blocks b, not a.
    cache.on_pod_event("ADDED", pod("pb-slow", "b"))
    cache.assume(cache.pods["ns/pb-slow"], "n1")
    cache.on_pod_event("ADDED", pod("pa", "a", "n1", SECOND))
    cache.on_pod_event("ADDED", pod("pb", "b", "n1", SECOND))
    assert ledger.total("a") == 1 and ledger.total("b") == 11
    clock.advance(SETTLE * 0.4)
    cache.on_pod_event("ADDED", pod("pc", "c", "n1", SECOND))  # c sees it later
    clock.advance(SETTLE * 0.6 - 0.01)
    assert ledger.persistable("a") == (0, "")  # not yet SETTLE_SECONDS
    clock.advance(0.01)
    assert ledger.persistable("a") == (1, SECOND)
    assert ledger.persistable("b") == (10, "")  # blocked by pb-slow
    # c's second is not settled yet: its own delay has not passed.
    assert ledger.persistable("c") == (0, "")
    clock.advance(SETTLE * 0.4)
    assert ledger.persistable("c") == (1, SECOND)
    cache.on_pod_event("MODIFIED", pod("pb-slow", "b", "n1", SECOND))  # confirmed
    assert ledger.persistable("b") == (12, SECOND)
    assert {"a", "b", "c"} <= set(changed)


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


def test_a_bind_seen_after_its_second_settled_is_counted_late(
        caplog: pytest.LogCaptureFixture) -> None:
    """A bind whose watch event comes after its second was folded into the pair (its
    pod was neither assumed nor uncertain then: e.g. a bind answered 5xx that landed,
    seen by a relist after an outage) is counted in the base, not dropped; binds up to
    the watermark the account was opened with stay out (they are in that base)."""
    opened = "2026-11-23T02:59:59Z"
    clock = FakeClock()

    async def main() -> None:
        cache = ClusterCache(None)
        cache.on_node_event("ADDED", node("n1"))
        ledger = ledger_with(cache, clock)
        ledger.open("s", 5, opened)
        cache.on_pod_event("ADDED", pod("a", "s", "n1", SECOND))
        clock.advance(SETTLE)
        assert ledger.persistable("s") == (6, SECOND)
        with caplog.at_level("WARNING", logger="polsched.controller.policies.ledger"):
            cache.on_pod_event("ADDED", pod("late", "s", "n1", SECOND))
            cache.on_pod_event("ADDED", pod("old", "s", "n1", opened))
        assert ledger.total("s") == 7
        assert ledger.persistable("s") == (7, SECOND)
        assert "ns/late" in caplog.text and "ns/old" not in caplog.text
        # The same pod again (a relist's MODIFIED of a bound pod) is not a new bind.
        cache.on_pod_event("MODIFIED", pod("late", "s", "n1", SECOND) | {
            "metadata": {"name": "late", "namespace": "ns", "uid": "uid-late",
                         "resourceVersion": "3"}})
        assert ledger.total("s") == 7

    asyncio.run(main())


def test_an_uncertain_bind_whose_pod_is_seen_bound_does_not_block() -> None:
    """A bind that ended without an answer after its pod's watch event had arrived (the
    answer lost, the bind landed) is no longer uncertain: the ledger saw the bind. It
    must not hold the second back for UNCERTAIN_SECONDS."""
    clock = FakeClock()

    async def main() -> None:
        cache = ClusterCache(None)
        cache.on_node_event("ADDED", node("n1"))
        binder = Binder(cast(ApiClient, None))
        ledger = ledger_with(cache, clock, binder=binder)
        ledger.open("s", 0, None)
        cache.on_pod_event("ADDED", pod("p", "s"))
        cache.assume(cache.pods["ns/p"], "n1")
        cache.on_pod_event("MODIFIED", pod("p", "s", "n1", SECOND))  # the watch: bound
        binder.uncertain["ns/p"] = time.monotonic()  # then the attempt's error came
        # Another pod whose bind ended unanswered and is not seen bound still blocks.
        cache.on_pod_event("ADDED", pod("q", "s"))
        binder.uncertain["ns/q"] = time.monotonic()
        clock.advance(SETTLE)
        assert ledger.persistable("s") == (0, "")  # q: it may still show up
        cache.on_pod_event("MODIFIED", pod("q", "s", "n1", SECOND))
        assert ledger.persistable("s") == (2, SECOND)

    asyncio.run(main())


def test_a_second_held_back_long_is_logged_with_what_holds_it(
        caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    cache = ClusterCache(None)
    cache.on_node_event("ADDED", node("n1"))
    ledger = ledger_with(cache, clock)
    ledger.open("s", 0, None)
    cache.on_pod_event("ADDED", pod("slow", "s"))
    cache.assume(cache.pods["ns/slow"], "n1")
    cache.on_pod_event("ADDED", pod("a", "s", "n1", SECOND))
    with caplog.at_level("INFO", logger="polsched.controller.policies.ledger"):
        clock.advance(ledger_mod.LONG_WAIT_SECONDS - 0.01)
        assert "not settled" not in caplog.text
        clock.advance(SETTLE)  # the next poll after LONG_WAIT_SECONDS says it, once
        assert "ns/slow" in caplog.text and SECOND in caplog.text
        clock.advance(10 * SETTLE)
    assert caplog.text.count("not settled") == 1
