"""The client's request budget and the watches' retry delays (cluster.backoff): the
token bucket lets a burst through and then paces requests at QPS (an injected clock); the
reflector's backoff doubles from 0.8 s to 30 s with jitter and starts over after two
minutes; and a watch against a real HTTP server on 127.0.0.1 that answers 429 with
Retry-After waits what the server asked, and its other retries are jittered."""

from __future__ import annotations

import asyncio
import json
import random

import pytest
from aiohttp import web

from polsched.cluster.backoff import Backoff, TokenBucket, parse_retry_after, retry_delay
from polsched.cluster.cache import NODES, ClusterCache
from polsched.cluster.client import ApiClient, ApiError, ClientLimits

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_token_bucket_lets_the_burst_through_then_paces_at_qps() -> None:
    clock = Clock()
    bucket = TokenBucket(50, 100, clock=clock)
    waits = [bucket.reserve() for _ in range(100)]
    assert waits == [0.0] * 100  # the burst: no request waits
    # The next ones are due one every 1/50 s, in the order they asked.
    nxt = [bucket.reserve() for _ in range(5)]
    assert nxt == pytest.approx([0.02, 0.04, 0.06, 0.08, 0.10])
    assert bucket.throttled == 5
    # A second later 50 tokens came back, minus the 5 reserved ahead.
    clock.now += 1.0
    assert [bucket.reserve() for _ in range(45)] == [0.0] * 45
    assert bucket.reserve() == pytest.approx(0.02)


def test_token_bucket_refills_no_more_than_its_burst() -> None:
    clock = Clock()
    bucket = TokenBucket(5, 10, clock=clock)
    for _ in range(10):
        bucket.reserve()
    clock.now += 3600  # an hour idle refills 10, not 18000
    assert [bucket.reserve() for _ in range(10)] == [0.0] * 10
    assert bucket.reserve() == pytest.approx(0.2)


def test_a_client_with_qps_throttles_a_burst_of_real_requests() -> None:
    """Against a real local server: 30 requests at once through a client of QPS 50 and burst 10:
    ten go at once, the others (about twenty) waited for tokens; the event bucket is apart."""
    async def ok(_: web.Request) -> web.Response:
        return web.json_response({"kind": "Status"})

    async def body(base: str) -> ApiClient:
        client = ApiClient(base, limits=ClientLimits(qps=50, burst=10))
        try:
            await asyncio.gather(*(client.get("/x") for _ in range(30)))
            await client.patch("/x", {}, events=True)
        finally:
            await client.close()
        return client

    client = run_server(ok, body)
    assert client.limiter is not None and client.event_limiter is not None
    # 20 when the 30 tasks take their tokens within one refill (1/50 s); a loaded machine
    # can stretch that start by a few refills, which only lets a few more through at once.
    assert 15 <= client.limiter.throttled <= 20
    assert client.event_limiter.throttled == 0


def test_reflector_backoff_doubles_to_the_cap_with_jitter() -> None:
    clock = Clock()
    # rand() = 0: the base delays, exactly client-go's sequence.
    base = Backoff(clock=clock, rand=lambda: 0.0)
    assert [base.step() for _ in range(8)] == pytest.approx(
        [0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0])
    # rand() just under 1: each delay up to twice its base (Jitter 1.0).
    high = Backoff(clock=clock, rand=lambda: 0.999)
    assert [high.step() for _ in range(3)] == pytest.approx([0.8 * 1.999, 1.6 * 1.999, 3.2 * 1.999])
    # Real randomness: within [base, 2 x base) and not all alike.
    rng = random.Random(7)
    delays = [Backoff(clock=clock, rand=rng.random).step() for _ in range(20)]
    assert all(0.8 <= d < 1.6 for d in delays)
    assert len({round(d, 6) for d in delays}) > 10


def test_reflector_backoff_starts_over_after_two_minutes() -> None:
    clock = Clock()
    b = Backoff(clock=clock, rand=lambda: 0.0)
    for _ in range(6):
        b.step()
    clock.now += 119
    assert b.step() == pytest.approx(30.0)  # 119 s: still backing off
    clock.now += 2
    assert b.step() == pytest.approx(0.8)   # 121 s since it started: reset


def test_retry_after_wins_over_a_shorter_backoff_and_only_on_429_and_5xx() -> None:
    b = Backoff(rand=lambda: 0.0)
    assert retry_delay(b, 5.0) == 5.0
    assert retry_delay(b, 0.5) == pytest.approx(1.6)  # the backoff is longer
    assert parse_retry_after(429, "3") == 3.0
    assert parse_retry_after(503, " 2 ") == 2.0
    assert parse_retry_after(409, "3") is None
    assert parse_retry_after(429, "Wed, 21 Oct 2015 07:28:00 GMT") is None
    assert parse_retry_after(429, "100000") == 60.0  # bounded


# -- a watch against a real server ----------------------------------------------------------

def run_server(handler: object, body: object) -> ApiClient:
    async def main() -> ApiClient:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", handler)  # type: ignore[arg-type]
        # Watches the test leaves open are not waited for at the end.
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        try:
            return await body(f"http://127.0.0.1:{port}")  # type: ignore[operator, no-any-return]
        finally:
            await runner.cleanup()
    return asyncio.run(main())


class NodeWatchServer:
    """An API server for ClusterCache: every list is empty; the node watch answers the
    scripted statuses in turn (429 with Retry-After, 500 without), then streams one node
    and holds the stream open; other watches just stay open."""

    def __init__(self, script: list[tuple[int, str | None]]) -> None:
        self.script = script
        self.node_watches = 0
        self.node_seen = asyncio.Event()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if request.query.get("watch") != "true":
            return web.json_response({"kind": "List", "metadata": {"resourceVersion": "1"},
                                      "items": []})
        if request.path == NODES:
            self.node_watches += 1
            if self.script:
                status, retry_after = self.script.pop(0)
                headers = {"Retry-After": retry_after} if retry_after else {}
                return web.json_response(
                    {"kind": "Status", "code": status, "reason": "TooManyRequests"
                     if status == 429 else "InternalError", "message": "busy"},
                    status=status, headers=headers)
        resp = web.StreamResponse()
        await resp.prepare(request)
        if request.path == NODES:
            node = {"metadata": {"name": "n1", "resourceVersion": "2"},
                    "status": {"allocatable": {"cpu": "1", "pods": "10"}}}
            await resp.write(json.dumps({"type": "ADDED", "object": node}).encode() + b"\n")
            self.node_seen.set()
        await asyncio.sleep(3600)
        return resp


def test_a_watch_answered_429_waits_the_retry_after_then_backs_off_with_jitter() -> None:
    server = NodeWatchServer([(429, "7"), (429, "7"), (500, None), (500, None)])
    slept: list[float] = []

    async def sleep(delay: float) -> None:  # records the delay, lets the test run fast
        slept.append(delay)
        await asyncio.sleep(0)

    async def body(base: str) -> ApiClient:
        # the watch loop's own handling
        client = ApiClient(base, limits=ClientLimits(max_retries=0))
        rng = random.Random(3)
        cache = ClusterCache(client, backoff=lambda: Backoff(rand=rng.random), sleep=sleep)
        try:
            await cache.start()
            await asyncio.wait_for(server.node_seen.wait(), 30)
            assert cache.node_info("n1") is not None
        finally:
            await cache.stop()
            await client.close()
        return client

    run_server(server.handle, body)
    assert server.node_watches == 5
    # Retry-After 7 s wins over the first two backoff steps (0.8-1.6 s, 1.6-3.2 s); the
    # 500s then wait the backoff's next steps, jittered: [3.2, 6.4) and [6.4, 12.8).
    assert slept[:2] == [7.0, 7.0]
    assert 3.2 <= slept[2] < 6.4 and slept[2] != 3.2
    assert 6.4 <= slept[3] < 12.8 and slept[3] != 6.4
    assert len(slept) == 4


def test_a_request_answered_429_with_retry_after_is_retried() -> None:
    """ApiClient.request honours Retry-After itself (client-go with_retry.go), at most
    max_retries times; an answer without it is not retried."""
    answers = [429, 429, 200]
    seen: list[int] = []

    async def handle(_: web.Request) -> web.Response:
        status = answers.pop(0)
        seen.append(status)
        if status == 429:
            return web.json_response({"kind": "Status", "code": 429}, status=429,
                                     headers={"Retry-After": "0"})
        return web.json_response({"kind": "Pod"})

    async def body(base: str) -> ApiClient:
        async with ApiClient(base) as client:
            assert (await client.get("/api/v1/pods"))["kind"] == "Pod"
        return client

    run_server(handle, body)
    assert seen == [429, 429, 200]

    async def always_429(_: web.Request) -> web.Response:
        return web.json_response({"kind": "Status", "code": 429}, status=429,
                                 headers={"Retry-After": "0"})

    async def gives_up(base: str) -> ApiClient:
        async with ApiClient(base, limits=ClientLimits(max_retries=2)) as client:
            with pytest.raises(ApiError) as err:
                await client.get("/x")
            assert err.value.status == 429 and err.value.retry_after == 0.0
        return client

    run_server(always_429, gives_up)
