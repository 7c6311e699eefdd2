"""kube-scheduler parity defects of issue 10, each through the real API server and the real
engine: a policy loaded as the operator loads it, built by the engine's builder, pods
created with the API, decisions read back from the pods, their events and conditions.

Defect 10 (extender scores not clamped) is in test_extenders.py, next to its extender
fixture.
"""

from __future__ import annotations

from typing import Any

import pytest

from polsched.cluster.client import ApiClient
from polsched.objects import Json
from tests.builders import make_node, make_pod
from tests.conftest import Cluster, NodeFactory, unique
from tests.e2e.scheduling import (
    RUN,
    bound_node,
    eventually,
    failed_scheduling,
    nodes_ready,
    pod_manifest,
    run_engine,
)

pytestmark = pytest.mark.e2e

HOSTNAME = "kubernetes.io/hostname"
REQ = "requiredDuringSchedulingIgnoredDuringExecution"
PREF = "preferredDuringSchedulingIgnoredDuringExecution"


def policy(name: str, **spec: Any) -> Json:
    return {"apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
            "metadata": {"name": name, "generation": 1, "uid": unique("uid")},
            "spec": {"schedulerName": name, **spec}}


async def create(client: ApiClient, ns: str, name: str, scheduler: str, run_id: str,
                 **kw: Any) -> Json:
    return await client.post(f"/api/v1/namespaces/{ns}/pods",
                             pod_manifest(ns, name, scheduler, run_id, **kw))


async def place(client: ApiClient, ns: str, name: str, node: str, labels: dict[str, str],
                **spec: Any) -> None:
    """A pod already bound to `node` (spec.nodeName), as another scheduler left it."""
    await client.post(f"/api/v1/namespaces/{ns}/pods", (
        make_pod().typed().name(name).namespace(ns).labels(labels).node(node)
        .container(image="busybox").zero_termination_grace_period().spec(**spec).obj()))


async def pod_scheduled(client: ApiClient, ns: str, name: str) -> Json | None:
    pod = await client.get(f"/api/v1/namespaces/{ns}/pods/{name}")
    for c in pod.get("status", {}).get("conditions") or ():
        if c["type"] == "PodScheduled" and c.get("status") == "False":
            return dict(c)
    return None


@pytest.fixture
def labelled_namespace(cluster: Cluster) -> Any:
    """make(**labels) -> a fresh namespace with these labels, deleted after the test."""
    made: list[str] = []

    def make(**labels: str) -> str:
        name = unique("ns")
        cluster.apply({"apiVersion": "v1", "kind": "Namespace",
                       "metadata": {"name": name, "labels": labels}})
        made.append(name)
        return name

    yield make
    for name in made:
        cluster.kubectl("delete", "pods", "--all", "-n", name, "--force", "--grace-period=0",
                        "--wait=false", check=False)
        cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


# -- defects 1 and 9: namespaceSelector in pod (anti-)affinity ------------------------------

def test_required_affinity_with_namespace_selector_follows_pods_of_labelled_namespaces(
        cluster: Cluster, namespace: str, nodes: NodeFactory, labelled_namespace: Any,
        ) -> None:
    """Defect 1: the term's namespaceSelector selects the namespace of the `db` pod by its
    labels (from the cache's watch of namespaces), so `web` must join it on its node."""
    rid = unique("nsaff")
    a = nodes(f"{rid}-a", labels={RUN: rid})
    b = nodes(f"{rid}-b", labels={RUN: rid})
    team = labelled_namespace(team=rid)
    sched = f"{rid}-s"

    async def body(client: ApiClient) -> None:
        await nodes_ready(client, [a, b])
        await place(client, team, "db", b, {"app": "db"})
        await create(client, namespace, "web", sched, rid, affinity={"podAffinity": {REQ: [{
            "labelSelector": {"matchLabels": {"app": "db"}},
            "namespaceSelector": {"matchLabels": {"team": rid}},
            "topologyKey": HOSTNAME}]}})
        assert await bound_node(client, namespace, "web") == b

    run_engine(cluster, [policy(sched)], body)


def test_existing_anti_affinity_with_namespace_selector_keeps_pods_away(
        cluster: Cluster, namespace: str, nodes: NodeFactory, labelled_namespace: Any,
        ) -> None:
    """Defects 1 and 9: an existing pod's required anti-affinity selects `web` pods of
    namespaces labelled team=<rid>: `web` of such a namespace avoids its node, and where
    that node is the only one, the reason is upstream's existing-anti-affinity one."""
    rid = unique("nsanti")
    a = nodes(f"{rid}-a", labels={RUN: rid})
    b = nodes(f"{rid}-b", labels={RUN: rid})
    team = labelled_namespace(team=rid)
    sched = f"{rid}-s"

    async def body(client: ApiClient) -> None:
        await nodes_ready(client, [a, b])
        await place(client, namespace, "guard", a, {"app": "guard"}, affinity={
            "podAntiAffinity": {REQ: [{
                "labelSelector": {"matchLabels": {"app": "web"}},
                "namespaceSelector": {"matchLabels": {"team": rid}},
                "topologyKey": HOSTNAME}]}})
        for i in range(3):
            await create(client, team, f"web{i}", sched, rid, labels={"app": "web"})
        for i in range(3):
            assert await bound_node(client, team, f"web{i}") == b
        await create(client, team, "pinned", sched, rid, labels={"app": "web"},
                     nodeSelector={HOSTNAME: a})
        note = await failed_scheduling(client, team, "pinned")
        assert "1 node(s) didn't satisfy existing pods anti-affinity rules" in note, note
        assert "didn't match pod affinity rules" not in note
        # Defect 9's second half: preemption counts that node as one it tried (the guard
        # has no lower priority, so no victims), not as "not helpful".
        assert "preemption: " in note and "1 No preemption victims found for incoming pod" \
            in note, note

    run_engine(cluster, [policy(sched)], body)


# -- defect 4: Expression verdicts of a node deleted and recreated under its name -----------

def quiet_node(name: str, run_id: str, cpu: str, **labels: str) -> Json:
    """A node kwok does not manage: no status updates, so its object (and the cache's
    NodeInfo generation) stays as created."""
    return (make_node().typed().name(name).labels({RUN: run_id, HOSTNAME: name, **labels})
            .capacity({"cpu": cpu, "memory": "8Gi", "pods": "110"}).obj())


def test_a_recreated_node_does_not_inherit_the_deleted_nodes_expression_verdict(
        cluster: Cluster, namespace: str) -> None:
    """Defect 4: both versions of node `x` are generation 1 in the cache; the first carries
    ok=yes, the second does not. A pod evaluated on the first (and rejected only for its
    cpu) must not be bound to the second on the first one's cached verdict."""
    rid = unique("recreate")
    x = f"{rid}-x"
    sched = f"{rid}-s"
    p = policy(sched, defaultPlugins=False, filters=[
        {"name": "Expression", "args": {
            "expression": "'ok' in node.metadata.labels && node.metadata.labels['ok'] == 'yes'",
            "message": "node(s) are not ok"}},
        {"name": "NodeResourcesFit"}])

    async def body(client: ApiClient) -> None:
        await client.post("/api/v1/nodes", quiet_node(x, rid, "1", ok="yes"))
        await create(client, namespace, "big", sched, rid, cpu="2")
        note = await failed_scheduling(client, namespace, "big")
        assert "1 Insufficient cpu" in note, note
        await client.request("DELETE", f"/api/v1/nodes/{x}")

        async def gone() -> bool:
            got = await client.get("/api/v1/nodes",
                                   params={"fieldSelector": f"metadata.name={x}"})
            return not got.get("items")

        await eventually(gone, what=f"node {x} deleted")
        await client.post("/api/v1/nodes", quiet_node(x, rid, "4"))
        await create(client, namespace, "small", sched, rid, cpu="1")
        note = await failed_scheduling(client, namespace, "small")
        assert "1 node(s) are not ok" in note, note
        for name in ("big", "small"):
            pod = await client.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
            assert not pod["spec"].get("nodeName"), f"{name} bound on a stale verdict"

    try:
        run_engine(cluster, [p], body)
    finally:
        cluster.kubectl("delete", "node", x, "--wait=false", check=False)


# -- defect 5: an Error aborts the cycle; no nodes is UnschedulableAndUnresolvable ----------

def test_a_plugin_error_is_a_scheduler_error_not_a_rejection(
        cluster: Cluster, namespace: str, nodes: NodeFactory) -> None:
    """A preferred node affinity term the API server accepts but kube-scheduler cannot
    parse (Gt with a non-integer) makes NodeAffinity's PreScore return Error: upstream
    aborts the cycle, FailedScheduling carries "running PreScore plugin ..." and
    PodScheduled's reason is SchedulerError."""
    rid = unique("err")
    names = [nodes(f"{rid}-{i}", labels={RUN: rid}) for i in range(2)]
    sched = f"{rid}-s"

    async def body(client: ApiClient) -> None:
        await nodes_ready(client, names)
        await create(client, namespace, "odd", sched, rid, affinity={"nodeAffinity": {PREF: [
            {"weight": 1, "preference": {"matchExpressions": [
                {"key": "size", "operator": "Gt", "values": ["big"]}]}}]}})
        note = await failed_scheduling(client, namespace, "odd")
        assert note.startswith('running PreScore plugin "NodeAffinity": '), note
        cond = await eventually(lambda: pod_scheduled(client, namespace, "odd"),
                                what="PodScheduled=False")
        assert cond["reason"] == "SchedulerError"
        assert cond["message"] == note

    run_engine(cluster, [policy(sched)], body)


def test_no_nodes_is_unschedulable_not_a_scheduler_error(
        cluster: Cluster, namespace: str) -> None:
    """schedulingAlgorithm turns ErrNoNodesAvailable into UnschedulableAndUnresolvable:
    PodScheduled's reason is Unschedulable. Needs a cluster with no node at all, so it
    waits for the other tests' nodes to be gone."""
    rid = unique("nonodes")
    sched = f"{rid}-s"

    async def body(client: ApiClient) -> None:
        async def no_nodes() -> bool:
            return not (await client.get("/api/v1/nodes")).get("items")

        await eventually(no_nodes, timeout=60, what="a cluster without nodes")
        await create(client, namespace, "lonely", sched, rid)
        note = await failed_scheduling(client, namespace, "lonely")
        assert note == "no nodes available to schedule pods"
        cond = await eventually(lambda: pod_scheduled(client, namespace, "lonely"),
                                what="PodScheduled=False")
        assert (cond["reason"], cond["message"]) == ("Unschedulable", note)

    run_engine(cluster, [policy(sched)], body)


# -- defect 8: pod-level resources, NodeResourcesFit score as v1.37 ------------------------

def test_pod_level_resources_fit_score_counts_containers_as_v1_37(
        cluster: Cluster, namespace: str, nodes: NodeFactory) -> None:
    """v1.37's NodeResourcesFit score ignores spec.resources (NewFit's scorer has no
    pod-level resources): a pod asking 3 cpu at pod level scores as one asking nothing
    (100m / 200Mi), which LeastAllocated puts on the node with the most free memory (a),
    where counting the 3 cpu would pick the node with 64 cpu (b). BalancedAllocation,
    which does count them, is switched off to isolate the score."""
    rid = unique("podlvl")
    a = nodes(f"{rid}-a", cpu="4", memory="64Gi", labels={RUN: rid})
    b = nodes(f"{rid}-b", cpu="64", memory="2Gi", labels={RUN: rid})
    sched = f"{rid}-s"
    p = policy(sched, disabledPlugins=["NodeResourcesBalancedAllocation"])

    async def body(client: ApiClient) -> None:
        await nodes_ready(client, [a, b])
        await create(client, namespace, "pl", sched, rid,
                     resources={"requests": {"cpu": "3", "memory": "100Mi"}})
        assert await bound_node(client, namespace, "pl") == a
        # The filter does count them: 3 more cpu do not fit a's remaining 1.
        await create(client, namespace, "pl2", sched, rid,
                     resources={"requests": {"cpu": "3", "memory": "100Mi"}})
        assert await bound_node(client, namespace, "pl2") == b

    run_engine(cluster, [p], body)


# -- PodTopologySpread's system default constraints ----------------------------------------

def test_a_deployments_pods_spread_by_default(cluster: Cluster, namespace: str,
                                              nodes: NodeFactory) -> None:
    """kube-scheduler spreads a ReplicaSet's pods over nodes and zones without any
    topologySpreadConstraints (PodTopologySpread's System defaulting, selector from the
    owning ReplicaSet, read from the cache's watch of ReplicaSets). LeastAllocated alone
    would put all six on the big node."""
    rid = unique("spread")
    big = nodes(f"{rid}-big", cpu="64", memory="256Gi", labels={RUN: rid})
    small = [nodes(f"{rid}-s{i}", labels={RUN: rid}) for i in range(2)]
    sched = f"{rid}-s"
    labels = {"app": rid}

    async def body(client: ApiClient) -> None:
        rs = await client.post(f"/apis/apps/v1/namespaces/{namespace}/replicasets", {
            "apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": "web-5d9", "namespace": namespace},
            "spec": {"replicas": 0, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}})
        owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-5d9",
                 "uid": rs["metadata"]["uid"], "controller": True}
        await nodes_ready(client, [big, *small])
        placed = []
        for i in range(6):
            manifest = pod_manifest(namespace, f"web-{i}", sched, rid, cpu="100m",
                                    labels=labels)
            manifest["metadata"]["ownerReferences"] = [owner]
            await client.post(f"/api/v1/namespaces/{namespace}/pods", manifest)
            placed.append(await bound_node(client, namespace, f"web-{i}"))
        assert set(placed) == {big, *small}, placed

    run_engine(cluster, [policy(sched)], body)
