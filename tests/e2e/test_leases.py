"""Leader election on a real coordination.k8s.io/v1 Lease (polsched.controller.process.leases).

One holder at a time; takeover only after expiry or release; a restarted process with the
same identity takes its lease back at once; a stale write loses on resourceVersion. And
issue 11's defect 3: a holder whose renew hangs (a stalling proxy between it and the API
server) steps down at its renew deadline, before anyone else can take the lease, and the
binds it had queued are dropped, never sent.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from polsched.api import load_policy
from polsched.cluster.client import ApiClient
from polsched.controller.process.leases import LeaseElector, LeaseThread, LeaseTiming, lease_path
from polsched.extender.client import HTTPExtender
from polsched.objects import Json
from polsched.plugins import CATALOG
from polsched.scheduler.engine import Engine
from tests.conftest import Cluster, NodeFactory, unique
from tests.e2e.proxy import StallingProxy
from tests.e2e.scheduling import RUN, eventually, nodes_ready, pod_manifest
from tests.unit.extender.fake_extender import FakeExtender

pytestmark = pytest.mark.e2e



def elector(client: ApiClient, ns: str, identity: str, duration: int = 15) -> LeaseElector:
    return LeaseElector(client, namespace=ns, name="l", identity=identity,
                        timing=LeaseTiming(duration))


def run(cluster: Cluster, body: Any) -> Any:
    async def main() -> Any:
        client = ApiClient.from_kubeconfig(cluster.kubeconfig)
        try:
            return await body(client)
        finally:
            await client.close()

    return asyncio.run(asyncio.wait_for(main(), 120))


async def spec(client: ApiClient, ns: str) -> Json:
    got: Json = (await client.get(lease_path(ns, "l")))["spec"]
    return got


def test_first_candidate_creates_and_holds_the_lease(cluster: Cluster, namespace: str) -> None:
    async def body(client: ApiClient) -> None:
        a, b = elector(client, namespace, "a"), elector(client, namespace, "b")
        assert await a.try_acquire_or_renew()
        assert not await b.try_acquire_or_renew()
        s = await spec(client, namespace)
        assert s["holderIdentity"] == "a" and s["leaseDurationSeconds"] == 15
        assert await a.try_acquire_or_renew()  # renew

    run(cluster, body)


def test_takeover_after_the_holder_stops_renewing(cluster: Cluster, namespace: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [1000.0]
    monkeypatch.setattr("polsched.controller.process.leases.time.monotonic", lambda: clock[0])

    async def body(client: ApiClient) -> None:
        a, b = elector(client, namespace, "a"), elector(client, namespace, "b")
        assert await a.try_acquire_or_renew()
        assert not await b.try_acquire_or_renew()
        clock[0] += 14
        assert not await b.try_acquire_or_renew()  # not expired yet, as b observed it
        clock[0] += 2
        assert await b.try_acquire_or_renew()
        s = await spec(client, namespace)
        assert s["holderIdentity"] == "b" and s["leaseTransitions"] == 1
        assert not await a.try_acquire_or_renew()  # a sees b's fresh record

    run(cluster, body)


def test_a_released_lease_is_taken_at_once(cluster: Cluster, namespace: str) -> None:
    async def body(client: ApiClient) -> None:
        a, b = elector(client, namespace, "a"), elector(client, namespace, "b")
        assert await a.try_acquire_or_renew()
        assert not await b.try_acquire_or_renew()
        await a.release()
        assert await b.try_acquire_or_renew()

    run(cluster, body)


def test_same_identity_takes_its_lease_back(cluster: Cluster, namespace: str) -> None:
    async def body(client: ApiClient) -> None:
        assert await elector(client, namespace, "op").try_acquire_or_renew()
        assert await elector(client, namespace, "op").try_acquire_or_renew()  # restarted

    run(cluster, body)


def test_a_stale_write_loses_on_resource_version(cluster: Cluster, namespace: str) -> None:
    async def body(client: ApiClient) -> None:
        a, b = elector(client, namespace, "a"), elector(client, namespace, "b")
        assert await a.try_acquire_or_renew()
        await a.release()
        real_get = client.get

        async def get_then_race(path: str, params: Any = None) -> Json:
            obj = await real_get(path)
            # Someone else writes between our read and our write.
            other = await real_get(path)
            other["spec"]["holderIdentity"] = "c"
            await client.put(path, other)
            return obj

        client.get = get_then_race  # type: ignore[method-assign]
        try:
            assert not await b.try_acquire_or_renew()
        finally:
            client.get = real_get  # type: ignore[method-assign]
        assert (await spec(client, namespace))["holderIdentity"] == "c"

    run(cluster, body)


def test_run_reports_transitions_and_releases_on_stop(cluster: Cluster,
                                                      namespace: str) -> None:
    seen: list[bool] = []

    async def body(client: ApiClient) -> None:
        e = LeaseElector(client, namespace=namespace, name="l", identity="a",
                         on_change=seen.append, timing=LeaseTiming(renew_period=0.05))
        task = asyncio.create_task(e.run())
        await eventually(lambda: _true(seen), what="leading")
        e.stop()
        await task
        assert (await spec(client, namespace))["holderIdentity"] == ""

    run(cluster, body)
    assert seen == [True, False]


async def _true(seen: list[Any]) -> bool:
    return bool(seen)

def test_a_lease_thread_renews_while_the_callers_loop_is_busy(cluster: Cluster,
                                                              namespace: str) -> None:
    """The operator's elector runs on its own thread and loop (LeaseThread, as client-go's
    goroutine): while the caller's loop runs CPU-bound work without yielding (50 policies'
    decisions and watch events under load), the lease is still renewed, leadership never
    flips, and the lease is released on stop."""
    seen: list[bool] = []

    async def body(client: ApiClient) -> None:
        t = LeaseThread(lambda: ApiClient.from_kubeconfig(cluster.kubeconfig),
                        namespace=namespace, name="l", identity="a",
                        on_change=seen.append, timing=LeaseTiming(renew_period=0.05))
        task = asyncio.create_task(t.run())
        await eventually(lambda: _true(seen), what="leading")
        renewed = [(await spec(client, namespace))["renewTime"]]
        # The caller's loop is busy (holds the GIL but for the switch interval) until the
        # thread has renewed twice more, seen from this thread through the elector's
        # deadline; the lease object then says so too.
        last, moved = t.valid_until(), 0
        give_up = time.monotonic() + 60  # a bound for a broken thread, not a speed check
        while moved < 2 and time.monotonic() < give_up:
            sum(range(1000))
            if t.valid_until() != last:
                last, moved = t.valid_until(), moved + 1
        assert moved == 2 and t.leading
        renewed.append((await spec(client, namespace))["renewTime"])
        assert renewed[1] > renewed[0]
        assert seen == [True]  # never lost meanwhile
        t.stop()
        await task
        assert (await spec(client, namespace))["holderIdentity"] == ""

    run(cluster, body)
    assert seen == [True, False]


# -- defect 3: a renew that hangs ---------------------------------------------------------

@pytest.fixture
def proxy(cluster: Cluster) -> Iterator[StallingProxy]:
    p = StallingProxy.for_kubeconfig(cluster.kubeconfig).start()
    yield p
    p.stop()


def test_a_hanging_renew_steps_down_before_anyone_takes_over_and_drops_queued_binds(
        cluster: Cluster, namespace: str, nodes: NodeFactory, proxy: StallingProxy,
        tmp_path: Path) -> None:
    """Leader A reaches the API server through a proxy that then stalls; B goes direct.
    A's binds go through a bind extender that holds the first one, so the others wait in
    A's queue. A must step down at its renew deadline, before B can take the lease, and
    drop the queued binds without sending them; B then binds every pod, each once."""
    rid = unique("lease")
    names = [nodes(f"{rid}-{i}", labels={RUN: rid}) for i in range(2)]
    release = threading.Event()
    a_binds: list[str] = []

    def hold(args: Json) -> Json:
        a_binds.append(args["PodName"])
        release.wait(60)
        return {"Error": "released"}

    ext = FakeExtender({"/bind": hold}).start()
    via_proxy = proxy.kubeconfig(cluster.kubeconfig, tmp_path / "proxy.kubeconfig")
    events: list[tuple[str, bool, float]] = []
    pods = [f"p{i}" for i in range(5)]

    def policy(bind_url: str | None) -> Json:
        extenders = [{"urlPrefix": bind_url, "bindVerb": "bind", "httpTimeout": "60s"}] \
            if bind_url else []
        return {"apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
                "metadata": {"name": rid, "generation": 1, "uid": unique("uid")},
                "spec": {"schedulerName": rid, "extenders": extenders}}

    async def main() -> None:
        clients = [ApiClient.from_kubeconfig(via_proxy),
                   ApiClient.from_kubeconfig(cluster.kubeconfig)]
        engines: list[Engine] = []
        electors: list[LeaseElector] = []
        tasks: list[asyncio.Task[None]] = []
        exts: list[HTTPExtender] = []
        try:
            await nodes_ready(clients[1], names)
            for who, client, url in (("a", clients[0], ext.url), ("b", clients[1], None)):
                engine = Engine(client, identity=who, bind_concurrency=1)
                engine.set_leader(None, False)
                loaded = load_policy(policy(url), CATALOG)
                e = [HTTPExtender(cfg) for cfg in loaded.extenders]
                exts.extend(e)
                engine.apply(loaded, extenders=e)
                await engine.start()

                # The operator's wiring (controller.operator.operate).
                def on_change(leading: bool, who: str = who, engine: Engine = engine) -> None:
                    if not leading:
                        engine.set_leader(None, False)
                    events.append((who, leading, time.monotonic()))
                    if leading:
                        engine.set_leader(None, True)

                el = LeaseElector(client, namespace=namespace, name="sched", identity=who,
                                  on_change=on_change, timing=LeaseTiming(4, 0.5))
                engine.binder.deadline = el.valid_until
                engines.append(engine)
                electors.append(el)
                tasks.append(asyncio.create_task(el.run()))
                if who == "a":
                    await eventually(lambda: _true([x for x in events if x[0] == "a"]),
                                     what="a leads")
            direct = clients[1]
            for name in pods:
                await direct.post(f"/api/v1/namespaces/{namespace}/pods",
                                  pod_manifest(namespace, name, rid, rid))

            async def holding() -> bool:
                return len(a_binds) == 1 and engines[0].binder.in_flight == len(pods)

            await eventually(holding, what="a holding one bind and queueing the others")
            proxy.stall()

            async def all_bound() -> bool:
                got = await direct.list_all(f"/api/v1/namespaces/{namespace}/pods")
                return all(p["spec"].get("nodeName") for p in got["items"])

            await eventually(all_bound, timeout=60, what="b binding every pod")
            a_down = [t for who, leading, t in events if who == "a" and not leading]
            b_up = [t for who, leading, t in events if who == "b" and leading]
            assert a_down and b_up, events
            assert a_down[0] < b_up[0], "two leaders at once"
            assert a_binds == [a_binds[0]], "a sent binds after it stepped down"
            assert engines[0].binder.in_flight == 0
        finally:
            release.set()
            proxy.resume()
            for el in electors:
                el.stop()
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for engine in engines:
                await engine.stop()
            for x in exts:
                await x.close()
            for c in clients:
                await c.close()

    try:
        asyncio.run(asyncio.wait_for(main(), 120))
    finally:
        release.set()
        ext.stop()
    events_core = [e for e in _scheduled_events(cluster, namespace)]
    assert sorted(events_core) == sorted(pods)  # each pod bound and announced once


def _scheduled_events(cluster: Cluster, ns: str) -> list[str]:
    got = cluster.kubectl_json("get", "events.events.k8s.io", "-n", ns)
    return [e["regarding"]["name"] for e in got["items"] if e.get("reason") == "Scheduled"]


def test_a_huge_observed_lease_duration_is_capped(cluster: Cluster, namespace: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 36: one write of leaseDurationSeconds 2147483647 by whoever may write the
    Lease parked every candidate for decades; a candidate honours at most twice its own."""
    clock = [1000.0]
    monkeypatch.setattr("polsched.controller.process.leases.time.monotonic", lambda: clock[0])

    async def body(client: ApiClient) -> None:
        squatter, b = elector(client, namespace, "squatter"), elector(client, namespace, "b")
        assert await squatter.try_acquire_or_renew()
        lease = await client.get(lease_path(namespace, "l"))
        lease["spec"]["leaseDurationSeconds"] = 2147483647
        await client.put(lease_path(namespace, "l"), lease)
        assert not await b.try_acquire_or_renew()
        clock[0] += 29
        assert not await b.try_acquire_or_renew()
        clock[0] += 2
        assert await b.try_acquire_or_renew()
        assert (await spec(client, namespace))["holderIdentity"] == "b"

    run(cluster, body)
