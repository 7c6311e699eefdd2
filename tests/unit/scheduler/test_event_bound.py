"""The event recorder's bound (scheduler/recorder.py, as client-go's event broadcaster):
against a real HTTP server on 127.0.0.1 that holds every event write, a flood of events
leaves at most 1000 waiting, the rest are dropped and counted in
polsched_events_dropped_total; a pod's new events beyond the spam filter's burst are
dropped too, while repeats of one event only count up its series; and PodScheduled
patches are never dropped."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
from aiohttp import web

from polsched.cluster.client import ApiClient
from polsched.framework.types import PodInfo
from polsched.scheduler import metrics, recorder
from tests.builders import make_pod
from tests.e2e.scheduling import eventually

pytestmark = pytest.mark.unit


def pod(i: int) -> PodInfo:
    return (make_pod().name(f"p{i}").namespace("ns").uid(f"u-{i}").resource_version("1")
            .container(image="i").info())


class HoldingServer:
    """Answers nothing until released; counts what arrived."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.events = 0
        self.patches = 0

    async def handle(self, request: web.Request) -> web.Response:
        if "/events" in request.path:
            self.events += 1
        else:
            self.patches += 1
        await self.release.wait()
        return web.json_response({})


def run(body: Callable[[ApiClient, HoldingServer], Awaitable[None]]) -> None:
    async def main() -> None:
        server = HoldingServer()
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", server.handle)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        port = runner.addresses[0][1]
        client = ApiClient(f"http://127.0.0.1:{port}")
        try:
            await body(client, server)
        finally:
            server.release.set()
            await client.close()
            await runner.cleanup()
    asyncio.run(main())


def dropped(controller: str, reason: str) -> float:
    labels = (("controller", controller), ("reason", reason))
    return metrics.EVENTS_DROPPED.values.get(labels, 0.0)


def test_a_flood_of_events_is_bounded_and_the_drops_counted() -> None:
    async def body(client: ApiClient, server: HoldingServer) -> None:
        rec = recorder.EventRecorder(client, "flood", concurrency=2)
        before = dropped("flood", "queue_full")
        for i in range(3000):  # 3000 pods fail at once while the API server is stuck
            rec.failed_scheduling(pod(i), "0/5 nodes are available")

        async def writers_busy() -> bool:  # the two writers took their first write
            return server.events == 2

        await eventually(writers_busy, timeout=10, what="both writers holding a write")
        assert rec.queued_events <= recorder.MAX_QUEUED_EVENTS
        assert server.events <= 2
        # 2 writes were taken by the writers as the flood came in at most, so at least
        # 3000 - 1000 - 2 were dropped, each counted once.
        assert rec.dropped >= 3000 - recorder.MAX_QUEUED_EVENTS - 2
        assert dropped("flood", "queue_full") - before == rec.dropped
        # Pod conditions still queue: they are the pods' state.
        rec.set_pod_scheduled_false(pod(1), recorder.REASON_UNSCHEDULABLE, "no")
        assert rec.pending_writes == rec.queued_events + 1
        server.release.set()
        await rec.close(timeout=30)
        assert server.patches == 1
        assert server.events == 3000 - rec.dropped

    run(body)


def test_the_spam_filter_stops_one_pods_flood_of_distinct_events() -> None:
    async def body(client: ApiClient, server: HoldingServer) -> None:
        rec = recorder.EventRecorder(client, "spam", concurrency=4)
        before = dropped("spam", "spam")
        p = pod(1)
        for i in range(40):  # 40 different notes about one pod
            rec.failed_scheduling(p, f"0/{i} nodes are available")
        assert rec.dropped == 40 - recorder.SPAM_BURST
        assert dropped("spam", "spam") - before == 40 - recorder.SPAM_BURST
        # The same event again only counts up its series: not filtered, nothing new.
        for _ in range(100):
            rec.failed_scheduling(p, "0/0 nodes are available")
        assert rec.dropped == 40 - recorder.SPAM_BURST
        # Another pod has its own budget.
        rec.failed_scheduling(pod(2), "0/1 nodes are available")
        assert rec.dropped == 40 - recorder.SPAM_BURST
        server.release.set()
        await rec.close(timeout=30)

    run(body)


def test_the_spam_filter_refills_and_forgets_the_least_recent_objects() -> None:
    f = recorder.SpamFilter(burst=2, qps=1 / 300, size=3)
    assert [f.allow("a", 0.0) for _ in range(3)] == [True, True, False]
    assert f.allow("a", 299.0) is False
    assert f.allow("a", 301.0) is True  # one token in 5 minutes
    for k in ("b", "c", "d"):  # "a" is now the least recently seen: forgotten
        f.allow(k, 302.0)
    assert f.allow("a", 302.0) is True  # a fresh bucket
    assert len(f._buckets) == 3


def test_recorders_sharing_a_budget_are_bounded_together() -> None:
    """The engine's policies share one budget, as kube-scheduler's profiles share one
    broadcaster: two floods fill 1000 between them, not 1000 each."""
    async def body(client: ApiClient, server: HoldingServer) -> None:
        budget = recorder.EventBudget()
        a = recorder.EventRecorder(client, "a", concurrency=1, budget=budget)
        b = recorder.EventRecorder(client, "b", concurrency=1, budget=budget)
        for i in range(800):
            a.failed_scheduling(pod(i), "no")
            b.failed_scheduling(pod(10_000 + i), "no")
        assert budget.queued <= recorder.MAX_QUEUED_EVENTS
        assert a.queued_events + b.queued_events == budget.queued
        assert a.dropped + b.dropped >= 1600 - recorder.MAX_QUEUED_EVENTS - 2
        server.release.set()
        await a.close(timeout=30)
        await b.close(timeout=30)
        assert budget.queued == 0

    run(body)


def test_close_ends_with_an_event_recorded_while_it_closes() -> None:
    """A binding cycle that unwinds while the recorder closes (a gang's Permit waiter,
    rejected by a stop) records its FailedScheduling then: close still ends, its writer
    and its series flusher stopped too (issue 29: Engine.stop hung awaiting them)."""
    async def body(client: ApiClient, server: HoldingServer) -> None:
        rec = recorder.EventRecorder(client, "closing", concurrency=2)
        rec.failed_scheduling(pod(1), "0/1 nodes are available")  # held by the server
        closing = asyncio.get_running_loop().create_task(rec.close(timeout=0.5))
        for _ in range(5):  # close cancels the flusher and waits for its writes
            await asyncio.sleep(0)
        assert not closing.done()
        rec.failed_scheduling(pod(2), "rejected: the scheduler is stopping")
        rec.set_pod_scheduled_false(pod(2), recorder.REASON_UNSCHEDULABLE, "rejected")
        done, _ = await asyncio.wait({closing}, timeout=10)  # not cancelled on timeout
        assert closing in done, "close() did not end"
        closing.result()

    run(body)
