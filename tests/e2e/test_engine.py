"""The engine against a real kube-apiserver (kwok plays the kubelets): the issue's
scenarios (a) label rule, (b) 300 pods on 10 nodes, (c) taints and node affinity, (d) CEL.

Each test runs an Engine in its own event loop with a policy loaded exactly as the
operator loads it, and creates its own nodes (unique names, labelled with the test's run
id; every pod selects that label so nodes of other tests never take part) and namespace.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import pytest

from polsched.api import load_policy
from polsched.api.model import Policy
from polsched.cluster.cache import ClusterCache
from polsched.cluster.client import ApiClient
from polsched.objects import Json
from polsched.plugins import CATALOG
from polsched.scheduler import metrics
from polsched.scheduler.engine import Engine
from tests.builders import make_pod
from tests.conftest import Cluster, NodeFactory, unique
from tests.e2e.rbac import operator_kubeconfig
from tests.e2e.scheduling import eventually, nodes_ready

pytestmark = pytest.mark.e2e

RUN = "e2e.polsched.io/run"
PRIORITY = "e2e.polsched.io/priority"


def policy(name: str, spec: Json) -> Policy:
    return load_policy({"apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
                        "metadata": {"name": name, "generation": 1, "uid": unique("uid")},
                        "spec": spec}, CATALOG)


def run(cluster: Cluster, policies: list[Policy],
        body: Callable[[ApiClient, Engine], Awaitable[None]]) -> None:
    async def main() -> None:
        client = ApiClient.from_kubeconfig(cluster.kubeconfig)
        # The engine as the operator's ServiceAccount under the shipped RBAC.
        engine_client = ApiClient.from_kubeconfig(str(operator_kubeconfig(cluster)))
        engine = Engine(engine_client)
        try:
            await engine.start()
            for p in policies:
                engine.apply(p)
            await body(client, engine)
        finally:
            await engine.stop()
            await client.close()
            await engine_client.close()

    asyncio.run(main())


async def create_pod(client: ApiClient, ns: str, name: str, scheduler: str, run_id: str,
                     cpu: str | None = None, **spec: Any) -> Json:
    selector = {RUN: run_id, **spec.pop("nodeSelector", {})}
    return await client.post(f"/api/v1/namespaces/{ns}/pods", (
        make_pod().typed().name(name).namespace(ns).scheduler(scheduler)
        .container(image="busybox", requests={"cpu": cpu} if cpu else None)
        .node_selector(selector).zero_termination_grace_period().spec(**spec).obj()))


async def get_pod(client: ApiClient, ns: str, name: str) -> Json:
    return await client.get(f"/api/v1/namespaces/{ns}/pods/{name}")


async def events(client: ApiClient, ns: str, reason: str, pod: str | None = None
                 ) -> list[Json]:
    got = await client.get(f"/apis/events.k8s.io/v1/namespaces/{ns}/events")
    return [e for e in got.get("items") or () if e.get("reason") == reason
            and (pod is None or e["regarding"]["name"] == pod)]


async def node_of(client: ApiClient, ns: str, name: str) -> str:
    return str((await get_pod(client, ns, name))["spec"].get("nodeName") or "")


async def label_node(client: ApiClient, node: str, labels: dict[str, str]) -> None:
    await client.patch(f"/api/v1/nodes/{node}", {"metadata": {"labels": labels}}, "merge")


def test_a_prefetched_cache_applies_its_lists_at_start_and_watches_on_from_them(
        cluster: Cluster, namespace: str, nodes: NodeFactory) -> None:
    """`polsched run` sends the cache's lists before its engine exists (controller.process.boot,
    ClusterCache.prefetch). Nothing is applied before start(); a pod created after the
    lists were answered reaches the engine through the watch from their resourceVersion;
    a prefetched cache stopped without start() leaves no list running."""
    rid = unique("pre")
    a = nodes(f"{rid}-a", labels={RUN: rid})
    sched = f"{rid}-sched"

    async def main() -> None:
        client = ApiClient.from_kubeconfig(cluster.kubeconfig)
        try:
            await nodes_ready(client, [a])
            await create_pod(client, namespace, "listed", sched, rid)
            cache = ClusterCache(client)
            cache.prefetch()
            assert cache._lists is not None
            await asyncio.gather(*cache._lists.values())  # every list answered
            assert not cache.synced and not cache.pods and not cache.snapshot.nodes
            await create_pod(client, namespace, "watched", sched, rid)
            engine = Engine(client, cache=cache)
            assert engine.cache is cache
            try:
                await engine.start()
                assert f"{namespace}/listed" in cache.pods
                engine.apply(policy(sched, {}))
                for name in ("listed", "watched"):
                    assert await eventually(partial(node_of, client, namespace, name)) == a
            finally:
                await engine.stop()

            dropped = ClusterCache(client)
            dropped.prefetch()
            assert dropped._lists is not None
            lists = list(dropped._lists.values())
            await dropped.stop()
            assert lists and all(f.done() for f in lists)
            assert dropped._lists is None and not dropped.synced
        finally:
            await client.close()

    asyncio.run(main())


def test_label_rule_waits_for_the_label_then_prefers_the_higher_value(
        cluster: Cluster, namespace: str, nodes: NodeFactory) -> None:
    """(a) NodeLabel filter + NodeLabelValue scorer."""
    rid = unique("lbl")
    a = nodes(f"{rid}-a", labels={RUN: rid})
    b = nodes(f"{rid}-b", labels={RUN: rid})
    sched = f"{rid}-sched"
    p = policy(sched, {
        "filters": [{"name": "NodeLabel", "args": {"requirements": [
            {"key": PRIORITY, "operator": "Exists"}]}}],
        "scorers": [{"name": "NodeLabelValue", "weight": 2,
                     "args": {"key": PRIORITY, "default": 0}}],
    })

    async def body(client: ApiClient, engine: Engine) -> None:
        await nodes_ready(client, [a, b])
        created = await create_pod(client, namespace, "first", sched, rid)
        failed = await eventually(lambda: events(client, namespace, "FailedScheduling",
                                                 "first"), what="FailedScheduling")
        note = failed[0]["note"]
        assert f"node(s) didn't match NodeLabel requirement {PRIORITY} Exists" in note
        assert failed[0]["type"] == "Warning" and failed[0]["action"] == "Scheduling"
        assert failed[0]["reportingController"] == sched
        pod = await get_pod(client, namespace, "first")
        assert not pod["spec"].get("nodeName")
        cond = await eventually(lambda: _scheduled_condition(client, namespace, "first"),
                                what="PodScheduled condition")
        assert cond["status"] == "False" and cond["reason"] == "Unschedulable"
        assert cond["message"] == note

        await label_node(client, a, {PRIORITY: "1"})
        assert await eventually(lambda: node_of(client, namespace, "first")) == a
        pod = await get_pod(client, namespace, "first")
        assert pod["metadata"]["uid"] == created["metadata"]["uid"]  # not recreated
        scheduled = await eventually(lambda: events(client, namespace, "Scheduled", "first"))
        assert scheduled[0]["note"] == f"Successfully assigned {namespace}/first to {a}"
        assert scheduled[0]["type"] == "Normal" and scheduled[0]["action"] == "Binding"

        await label_node(client, b, {PRIORITY: "10"})

        async def engine_sees_b_at_10() -> bool:
            # The node and pod watches are separate streams: on a loaded machine the new
            # pod can arrive before b's label does, and then a is (rightly) the best node.
            info = engine.cache.snapshot.get(b)
            return info is not None and info.labels.get(PRIORITY) == "10"

        await eventually(engine_sees_b_at_10, what="the engine seeing b's new priority")
        await create_pod(client, namespace, "second", sched, rid)
        assert await eventually(lambda: node_of(client, namespace, "second")) == b

        async def counted() -> bool:  # the watch may show the bind before its answer
            stats = engine.stats(sched)
            return stats.binds_total == 2 and stats.bound_pods == 2
        await eventually(counted, what="binds_total and bound_pods at 2")
        assert engine.stats(sched).unschedulable_attempts >= 1

    run(cluster, [p], body)


def test_a_reload_takes_over_the_unchanged_plugins_and_decides_by_the_new_spec(
        cluster: Cluster, namespace: str, nodes: NodeFactory) -> None:
    """Engine.apply() of a new generation (as the operator's reconciler calls it): the
    plugins whose entry did not change are the running pipeline's, warm; the changed
    one is built anew, and the next pod is decided by the new spec."""
    rid = unique("reuse")
    low = nodes(f"{rid}-low", labels={RUN: rid, PRIORITY: "1"})
    high = nodes(f"{rid}-high", labels={RUN: rid, PRIORITY: "10"})
    sched = f"{rid}-sched"

    def spec(reverse: bool) -> Json:
        return {"scorers": [{"name": "NodeLabelValue", "weight": 5,
                             "args": {"key": PRIORITY, "reverse": reverse}}]}

    async def body(client: ApiClient, engine: Engine) -> None:
        await nodes_ready(client, [low, high])
        await create_pod(client, namespace, "before", sched, rid)
        assert await eventually(lambda: node_of(client, namespace, "before")) == high
        old = engine.pipeline(sched)
        gen2 = load_policy({"apiVersion": "polsched.io/v1alpha1",
                            "kind": "SchedulingPolicy",
                            "metadata": {"name": sched, "generation": 2,
                                         "uid": unique("uid")},
                            "spec": spec(reverse=True)}, CATALOG)
        engine.apply(gen2)
        new = engine.pipeline(sched)
        assert new is not old
        kept = {id(e.plugin) for e in old.filters} | {id(e.plugin) for e in old.scorers}
        assert all(id(e.plugin) in kept for e in new.filters)
        assert [e.name for e in new.scorers if id(e.plugin) not in kept] == \
            ["NodeLabelValue"]
        await create_pod(client, namespace, "after", sched, rid)
        assert await eventually(lambda: node_of(client, namespace, "after")) == low
        # Each pod bound once: one Scheduled event each.
        await eventually(lambda: _n_events(client, namespace, 2),
                         what="two Scheduled events")
        assert sorted(e["regarding"]["name"]
                      for e in await events(client, namespace, "Scheduled")) == \
            ["after", "before"]

    run(cluster, [policy(sched, spec(reverse=False))], body)


async def _n_events(client: ApiClient, ns: str, n: int) -> bool:
    return len(await events(client, ns, "Scheduled")) == n


async def _scheduled_condition(client: ApiClient, ns: str, name: str) -> Json | None:
    pod = await get_pod(client, ns, name)
    for c in pod.get("status", {}).get("conditions") or ():
        if c["type"] == "PodScheduled":
            return dict(c)
    return None


def test_300_pods_of_500m_fill_10_nodes_of_4_cpu_exactly(
        cluster: Cluster, namespace: str, nodes: NodeFactory) -> None:
    """(b) 80 bound, no node overcommitted, the rest FailedScheduling Insufficient cpu."""
    rid = unique("fill")
    names = [nodes(f"{rid}-{i}", cpu="4", memory="64Gi", labels={RUN: rid})
             for i in range(10)]
    sched = f"{rid}-sched"
    p = policy(sched, {})

    async def body(client: ApiClient, engine: Engine) -> None:
        await nodes_ready(client, names)
        sem = asyncio.Semaphore(20)

        async def make(i: int) -> None:
            async with sem:
                await create_pod(client, namespace, f"p{i:03d}", sched, rid, cpu="500m")

        await asyncio.gather(*(make(i) for i in range(300)))

        async def settled() -> bool:
            return (engine.stats(sched).bound_pods == 80
                    and engine.stats(sched).unschedulable_attempts >= 220)

        await eventually(settled, timeout=120, what="80 bound and 220 unschedulable")

        async def idle() -> bool:
            # Every pod is bound or parked as unschedulable and no binding cycle is under
            # way: nothing more can bind until a cluster event moves a pod.
            def pending(queue: str) -> float:
                return metrics.PENDING_PODS.values.get(
                    (("profile", sched), ("queue", queue)), 0.0)

            return (pending(metrics.ACTIVE) == 0 and pending(metrics.BACKOFF) == 0
                    and pending(metrics.UNSCHEDULABLE_QUEUE) == 220
                    and metrics.GOROUTINES.values.get(
                        (("operation", metrics.BINDING),), 0.0) == 0)

        await eventually(idle, timeout=60, what="every pod bound or parked, no bind under way")
        pods = (await client.get(f"/api/v1/namespaces/{namespace}/pods"))["items"]
        per_node: dict[str, int] = {}
        for pod in pods:
            n = pod["spec"].get("nodeName")
            if n:
                per_node[n] = per_node.get(n, 0) + 500
        assert sum(per_node.values()) == 80 * 500
        assert set(per_node) <= set(names)
        assert all(m <= 4000 for m in per_node.values()), per_node
        unbound = {pod["metadata"]["name"] for pod in pods if not pod["spec"].get("nodeName")}
        assert len(unbound) == 220

        async def all_reported() -> set[str]:
            failed = await events(client, namespace, "FailedScheduling")
            return unbound - {e["regarding"]["name"] for e in failed
                              if "Insufficient cpu" in e["note"]}

        missing = await eventually(lambda: _empty(all_reported()), timeout=60,
                                   what="FailedScheduling for every unbound pod")
        assert missing is True
        failed = await events(client, namespace, "FailedScheduling")
        assert all(e["note"].startswith("0/") for e in failed)
        assert engine.stats(sched).binds_total == 80

    run(cluster, [p], body)


async def _empty(coro: Awaitable[set[str]]) -> bool:
    return not await coro


def test_taints_tolerations_and_node_affinity(
        cluster: Cluster, namespace: str, nodes: NodeFactory) -> None:
    """(c) TaintToleration and NodeAffinity (required and preferred) as upstream."""
    rid = unique("taint")
    tainted = nodes(f"{rid}-gpu", labels={RUN: rid, "zone": "z0"},
                    taints=[{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}])
    z1 = nodes(f"{rid}-z1", labels={RUN: rid, "zone": "z1"})
    z2 = nodes(f"{rid}-z2", labels={RUN: rid, "zone": "z2"})
    sched = f"{rid}-sched"
    p = policy(sched, {})
    toleration = [{"key": "dedicated", "operator": "Equal", "value": "gpu",
                   "effect": "NoSchedule"}]

    def zone_affinity(kind: str, zone: str) -> Json:
        term = {"matchExpressions": [{"key": "zone", "operator": "In", "values": [zone]}]}
        if kind == "required":
            return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                                     {"nodeSelectorTerms": [term]}}}
        return {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution":
                                 [{"weight": 100, "preference": term}]}}

    async def body(client: ApiClient, engine: Engine) -> None:
        await nodes_ready(client, [tainted, z1, z2])
        await create_pod(client, namespace, "untolerated", sched, rid,
                         nodeSelector={"zone": "z0"})
        failed = await eventually(lambda: events(client, namespace, "FailedScheduling",
                                                 "untolerated"))
        assert failed[0]["note"].startswith("0/")
        assert "1 node(s) had untolerated taint(s)"  # v1.37 wording in failed[0]["note"]

        await create_pod(client, namespace, "tolerating", sched, rid,
                         nodeSelector={"zone": "z0"}, tolerations=toleration)
        assert await eventually(lambda: node_of(client, namespace, "tolerating")) == tainted

        await create_pod(client, namespace, "required", sched, rid,
                         affinity=zone_affinity("required", "z2"))
        assert await eventually(lambda: node_of(client, namespace, "required")) == z2

        await create_pod(client, namespace, "preferred", sched, rid,
                         affinity=zone_affinity("preferred", "z1"))
        assert await eventually(lambda: node_of(client, namespace, "preferred")) == z1
        assert not await node_of(client, namespace, "untolerated")

    run(cluster, [p], body)


def test_cel_filter_on_pod_name_and_cel_score_on_node_name(
        cluster: Cluster, namespace: str, nodes: NodeFactory) -> None:
    """(d) Expression filter and scorer decide as written."""
    rid = unique("c")  # "c-xxxxxx": 8 characters
    short = nodes(f"{rid}-a", labels={RUN: rid})            # 10 characters
    long_ = nodes(f"{rid}-bbbbbbb", labels={RUN: rid})      # 16 characters
    sched = f"{rid}-sched"
    p = policy(sched, {
        "filters": [{"name": "Expression", "args": {
            "expression": "size(pod.metadata.name) <= 5",
            "message": "pod name is longer than 5"}}],
        "scorers": [{"name": "Expression", "weight": 5,
                     "args": {"expression": "20 - size(node.metadata.name)"}}],
    })

    async def body(client: ApiClient, engine: Engine) -> None:
        await nodes_ready(client, [short, long_])
        await create_pod(client, namespace, "short", sched, rid)
        await create_pod(client, namespace, "muchtoolong", sched, rid)
        assert await eventually(lambda: node_of(client, namespace, "short")) == short
        failed = await eventually(lambda: events(client, namespace, "FailedScheduling",
                                                 "muchtoolong"))
        assert "pod name is longer than 5" in failed[0]["note"]
        assert not await node_of(client, namespace, "muchtoolong")
        for i in range(3):  # every short-named pod prefers the shorter node name
            await create_pod(client, namespace, f"s{i}", sched, rid)
            assert await eventually(lambda: node_of(client, namespace, f"s{i}")) == short  # noqa: B023
        assert long_ != short

    run(cluster, [p], body)


def test_policies_that_start_together_run_one_cycle_per_io_poll(
        cluster: Cluster, namespace: str, nodes: NodeFactory) -> None:
    """Many policies with pending pods, all made runnable at once (leadership taken at the
    start): the event loop polls I/O (bind answers, watch events) between every two
    scheduling cycles, across policies, as with one policy. Counted by the loop's
    selector: every cycle starts after a poll that no other cycle started after. And the
    policies take their cycles in turn."""
    rid = unique("turns")
    names = [nodes(f"{rid}-{i}", cpu="32", labels={RUN: rid}) for i in range(3)]
    scheds = [f"{rid}-s{k}" for k in range(4)]

    async def body(client: ApiClient, engine: Engine) -> None:
        await nodes_ready(client, names)
        engine.set_leader(None, False)  # nothing runs until all have their pods
        for sched in scheds:
            engine.apply(policy(sched, {}))
        await asyncio.gather(*(create_pod(client, namespace, f"p{k}-{i}", sched, rid,
                                          cpu="10m")
                               for k, sched in enumerate(scheds) for i in range(8)))

        async def all_pending() -> bool:
            return sum(engine.stats(s).pending_pods for s in scheds) == 32

        await eventually(all_pending, what="32 pods pending in the cache")
        loop: Any = asyncio.get_running_loop()
        selector: Any = loop._selector
        polls = [0]
        select = selector.select

        def counted(timeout: float | None = None) -> Any:
            polls[0] += 1
            return select(timeout)

        selector.select = counted
        cycles_after: list[int] = []  # the poll count at each cycle's start
        order: list[str] = []  # the policy of each cycle

        def observed(scheduler_name: str) -> None:
            cycles_after.append(polls[0])
            order.append(scheduler_name)

        engine.on_cycle(observed)
        try:
            engine.set_leader(None, True)  # all four at once

            async def bound() -> bool:
                return sum(engine.stats(s).bound_pods for s in scheds) == 32

            await eventually(bound, timeout=60, what="32 pods bound")
        finally:
            selector.select = select
        assert len(cycles_after) >= 32
        assert len(set(cycles_after)) == len(cycles_after), cycles_after
        # In turn: while every policy has pods, none runs a second cycle before the
        # others have run one (kube-scheduler's one loop pops one pod at a time).
        for start in range(0, 32, 4):
            assert sorted(order[start:start + 4]) == sorted(scheds), order

    run(cluster, [], body)
