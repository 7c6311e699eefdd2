"""One object's status patches land in the order the scheduler decided them
(scheduler/recorder.py, EventRecorder's lanes), as upstream's synchronous updatePod and
updatePodGroupCondition: against a real HTTP server on 127.0.0.1 standing in for a loaded
API server, a PodGroup's False condition whose first try fails (500) is retried and
answered before the True decided after it is sent, so the True is what stays; another
object's patches do not wait behind it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web

from polsched.cluster.client import ApiClient
from polsched.scheduler import recorder
from tests.builders import make_pod

pytestmark = pytest.mark.unit

GROUP = "/apis/scheduling.k8s.io/v1beta1/namespaces/ns/podgroups/gang/status"


def condition(status: str, reason: str) -> dict[str, Any]:
    return {"type": "PodGroupInitiallyScheduled", "status": status, "reason": reason,
            "message": "", "observedGeneration": 0,
            "lastTransitionTime": "2026-11-27T00:00:00Z"}


class StatusServer:
    """Records each status patch as (path, status of its first condition) in arrival
    order; fails the first patch of `flaky` with a 500 (an overloaded API server); holds
    the patches of `held` until `release` is set."""

    def __init__(self, flaky: str = "", held: str = "") -> None:
        self.flaky, self.held = flaky, held
        self.release = asyncio.Event()
        self.arrived: list[tuple[str, str]] = []
        self.changed = asyncio.Event()

    async def handle(self, request: web.Request) -> web.Response:
        body = json.loads(await request.read())
        conds = body["status"]["conditions"]
        self.arrived.append((request.path, conds[0].get("status", "")))
        self.changed.set()
        if request.path == self.flaky:
            self.flaky = ""
            return web.json_response({"kind": "Status", "code": 500,
                                      "message": "etcdserver: request timed out"},
                                     status=500)
        if request.path == self.held:
            await self.release.wait()
        return web.json_response({})

    async def until(self, check: Callable[[], bool], timeout: float = 10) -> None:
        async with asyncio.timeout(timeout):
            while not check():
                self.changed.clear()
                await self.changed.wait()


def run(server: StatusServer,
        body: Callable[[recorder.EventRecorder], Awaitable[None]]) -> None:
    async def main() -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", server.handle)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        port = runner.addresses[0][1]
        client = ApiClient(f"http://127.0.0.1:{port}")
        rec = recorder.EventRecorder(client, "order", concurrency=8)
        try:
            await body(rec)
        finally:
            server.release.set()
            await rec.close(timeout=30)
            await client.close()
            await runner.cleanup()
    asyncio.run(main())


def test_a_retried_false_lands_before_the_true_decided_after_it() -> None:
    server = StatusServer(flaky=GROUP)

    async def body(rec: recorder.EventRecorder) -> None:
        # A first attempt rejects the gang; the attempt after preemption binds it.
        rec.set_pod_group_condition("ns", "gang", condition("False", "Unschedulable"))
        rec.set_pod_group_condition("ns", "gang", condition("True", "Scheduled"))
        await server.until(lambda: len(server.arrived) == 3)
        # The False failed, was retried (after at least 0.5 s) and answered; only then
        # the True went: the last one the object got, as upstream's order gives it.
        assert server.arrived == [(GROUP, "False"), (GROUP, "False"), (GROUP, "True")]

    run(server, body)


def test_another_objects_patches_do_not_wait() -> None:
    pod_path = "/api/v1/namespaces/ns/pods/p/status"
    server = StatusServer(held=GROUP)

    async def body(rec: recorder.EventRecorder) -> None:
        rec.set_pod_group_condition("ns", "gang", condition("False", "Unschedulable"))
        rec.set_pod_group_condition("ns", "gang", condition("True", "Scheduled"))
        pod = make_pod().name("p").namespace("ns").uid("u-p").container(image="i").info()
        rec.set_pod_scheduled_false(pod, recorder.REASON_UNSCHEDULABLE, "no")
        # The PodGroup's first patch is held: its second waits, the pod's goes.
        await server.until(lambda: (pod_path, "False") in server.arrived)
        assert server.arrived.count((GROUP, "True")) == 0
        assert rec.pending_writes == 1  # the True, held behind the False in flight
        server.release.set()
        await server.until(lambda: (GROUP, "True") in server.arrived)
        assert [a for a in server.arrived if a[0] == GROUP] == \
            [(GROUP, "False"), (GROUP, "True")]

    run(server, body)
