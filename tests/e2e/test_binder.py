"""The binding step with a bind extender (schedule_one.go extendersBinding): an ignorable
binder extender that fails is skipped and the default binder binds (issue 10, defect 7);
a non-ignorable one that fails fails the bind, and the pod is retried."""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest

from polsched.cluster.client import ApiClient
from polsched.framework.types import PodInfo
from tests.builders import make_pod
from tests.conftest import Cluster, NodeFactory, unique
from tests.e2e.rbac import operator_kubeconfig
from tests.e2e.scheduling import RUN, bound_node, nodes_ready, run_engine
from tests.e2e.test_extenders import (
    StartExtender,
    create,
    event_note,
    node_name,
    policy,
    start_extender,
)
from tests.unit.extender.fake_extender import Answer

pytestmark = pytest.mark.e2e
__all__ = ["start_extender"]  # the fixture, used by name



def test_an_ignorable_bind_extender_that_fails_falls_back_to_the_default_binder(
        cluster: Cluster, namespace: str, nodes: NodeFactory,
        start_extender: StartExtender) -> None:
    rid = unique("bfb")
    names = [nodes(f"{rid}-{i}", labels={RUN: rid}) for i in range(2)]
    ext = start_extender({"/bind": lambda _body: Answer(500, b"binder is down")})
    broken = start_extender({"/bind": lambda _body: {"Error": "no capacity to bind"}})
    ignorable, strict = f"{rid}-ign", f"{rid}-strict"
    policies = [
        policy(ignorable, {"urlPrefix": ext.url, "bindVerb": "bind", "ignorable": True}),
        policy(strict, {"urlPrefix": broken.url, "bindVerb": "bind"}),
    ]

    async def body(client: ApiClient) -> None:
        await nodes_ready(client, names)
        await create(client, namespace, "fallback", ignorable, rid)
        await create(client, namespace, "stuck", strict, rid)
        assert await bound_node(client, namespace, "fallback") in names
        assert [b["PodName"] for b in ext.bodies("/bind")] == ["fallback"]
        # Not ignorable: the bind fails, the pod stays Pending, and says why.
        note = await event_note(client, namespace, "stuck", "FailedScheduling")
        assert "no capacity to bind" in note, note
        assert not await node_name(client, namespace, "stuck")

    run_engine(cluster, policies, body)


def test_queued_binds_go_out_highest_priority_first(
        cluster: Cluster, namespace: str, nodes: NodeFactory) -> None:
    """A preemptor decided behind a backlog of lower-priority pods is bound before them
    (kube-scheduler starts every binding cycle at once; here binds wait for a writer)."""
    import asyncio

    from polsched.scheduler.binder import Binder, BindOutcome

    rid = unique("bprio")
    node = nodes(f"{rid}-n")
    names = ["low-0", "low-1", "high", "low-2", "mid"]
    priorities = {"low-0": 0, "low-1": 0, "high": 1000, "low-2": 0, "mid": 10}

    async def main() -> None:
        client = ApiClient.from_kubeconfig(cluster.kubeconfig)
        # Binds as the operator's ServiceAccount; pods are made as the admin.
        operator = ApiClient.from_kubeconfig(str(operator_kubeconfig(cluster)))
        binder = Binder(operator, concurrency=1)
        try:
            pods = []
            for name in names:
                obj = await client.post(
                    f"/api/v1/namespaces/{namespace}/pods",
                    make_pod().typed().name(name).namespace(namespace).scheduler(rid)
                    .container(image="pause").obj())
                # The Priority admission plugin sets spec.priority from a class; the
                # binder reads it from the pod as the scheduler holds it.
                obj["spec"]["priority"] = priorities[name]
                pods.append(PodInfo.from_json(obj))
            order: list[tuple[str, BindOutcome]] = []

            def record(name: str, outcome: BindOutcome, _msg: str) -> None:
                order.append((name, outcome))

            for p in pods:  # queued in one go: the one writer starts after
                binder.bind(p, node, partial(record, p.name))
            await binder.close()
            assert order == [(n, BindOutcome.BOUND)
                             for n in ("high", "mid", "low-0", "low-1", "low-2")]
            for name in names:
                got = await client.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
                assert got["spec"]["nodeName"] == node
        finally:
            await binder.close()
            await client.close()
            await operator.close()

    asyncio.run(main())


async def pending_pod(client: ApiClient, namespace: str, name: str,
                      scheduler: str) -> PodInfo:
    """A pod created for `scheduler`, not yet bound (the binder tests bind it directly)."""
    return PodInfo.from_json(await client.post(
        f"/api/v1/namespaces/{namespace}/pods",
        make_pod().typed().name(name).namespace(namespace).scheduler(scheduler)
        .container(image="pause").obj()))


def test_a_lane_starts_writers_as_binds_find_them_busy(
        cluster: Cluster, namespace: str, nodes: NodeFactory) -> None:
    """Binds one after the other need one writer; a burst starts more, never more than
    `concurrency`, and every bind of it is sent."""
    import asyncio

    from polsched.scheduler.binder import Binder, BindOutcome

    rid = unique("blane")
    node = nodes(f"{rid}-n")

    async def main() -> None:
        client = ApiClient.from_kubeconfig(cluster.kubeconfig)
        # Binds as the operator's ServiceAccount; pods are made as the admin.
        operator = ApiClient.from_kubeconfig(str(operator_kubeconfig(cluster)))
        binder = Binder(operator, concurrency=4)
        try:
            async def pod(name: str) -> PodInfo:
                return await pending_pod(client, namespace, name, rid)

            outcomes: dict[str, BindOutcome] = {}

            async def bind_one(p: PodInfo) -> None:
                done = asyncio.Event()

                def record(outcome: BindOutcome, _msg: str) -> None:
                    outcomes[p.name] = outcome
                    done.set()
                binder.bind(p, node, record, lane=rid)
                await done.wait()

            for i in range(3):  # one at a time: the first writer is free for each
                await bind_one(await pod(f"seq-{i}"))
            assert binder.writers(rid) == 1
            burst = [await pod(f"burst-{i}") for i in range(10)]
            await asyncio.gather(*(bind_one(p) for p in burst))
            assert binder.writers(rid) == 4
            assert outcomes == {**{f"seq-{i}": BindOutcome.BOUND for i in range(3)},
                                **{p.name: BindOutcome.BOUND for p in burst}}
        finally:
            await binder.close()
            await client.close()
            await operator.close()

    asyncio.run(main())


def test_a_lane_starts_no_writer_that_could_only_wait_for_a_slot(
        cluster: Cluster, namespace: str, nodes: NodeFactory) -> None:
    """While every slot of the binder is taken, a lane that has a writer starts no more
    (50 policies started up to `concurrency` writers each behind the same slots); its
    binds all go out, and its writers grow once they get slots."""
    import asyncio

    from polsched.scheduler.binder import Binder, BindOutcome

    rid = unique("bslot")
    node = nodes(f"{rid}-n")

    async def main() -> None:
        client = ApiClient.from_kubeconfig(cluster.kubeconfig)
        # Binds as the operator's ServiceAccount; pods are made as the admin.
        operator = ApiClient.from_kubeconfig(str(operator_kubeconfig(cluster)))
        binder = Binder(operator, concurrency=4)
        try:
            async def pod(name: str) -> PodInfo:
                return await pending_pod(client, namespace, name, rid)

            outcomes: dict[str, BindOutcome] = {}
            all_done = asyncio.Event()
            pods = {lane: [await pod(f"{lane}-{i}") for i in range(10)] for lane in "ab"}

            def record(name: str) -> Any:
                def done(outcome: BindOutcome, _msg: str) -> None:
                    outcomes[name] = outcome
                    if len(outcomes) == 20:
                        all_done.set()
                return done

            for p in pods["a"]:
                binder.bind(p, node, record(p.name), lane="a")
            assert binder.writers("a") == 4
            while not binder.saturated:  # lane a's writers hold every slot
                await asyncio.sleep(0)
            for p in pods["b"]:
                binder.bind(p, node, record(p.name), lane="b")
            assert binder.writers("b") == 1
            await asyncio.wait_for(all_done.wait(), 60)
            assert outcomes == {p.name: BindOutcome.BOUND for ps in pods.values() for p in ps}
            assert 1 <= binder.writers("b") <= 4
        finally:
            await binder.close()
            await client.close()
            await operator.close()

    asyncio.run(main())


def test_write_connections_read_large_answers_with_their_small_tls_buffer(
        cluster: Cluster, namespace: str) -> None:
    """The binds' and events' TLS connections (cluster.http1) read into SSL_READ_BUFFER,
    not asyncio's 256 KiB: an answer many times larger still arrives whole, and the
    connection is reused for the next write."""
    import asyncio
    import json

    from polsched.cluster import http1

    async def main() -> None:
        client = ApiClient.from_kubeconfig(cluster.kubeconfig)
        try:
            path = f"/api/v1/namespaces/{namespace}/configmaps"
            for i in range(3):  # the API server echoes the ~200 KiB object back
                body = json.dumps({"apiVersion": "v1", "kind": "ConfigMap",
                                   "metadata": {"name": f"big-{i}"},
                                   "data": {"x": "y" * 200_000}}).encode()
                assert await client.send("POST", path, body) == 201
            writer = client._writer
            assert writer is not None and writer.opened == 1
            conn = writer._idle[-1]
            assert conn.transport is not None
            proto = getattr(conn.transport, "_ssl_protocol", None)
            assert proto is not None and proto.max_size == http1.SSL_READ_BUFFER
            got = await client.get(f"{path}/big-2")
            assert len(got["data"]["x"]) == 200_000
        finally:
            await client.close()

    asyncio.run(main())
