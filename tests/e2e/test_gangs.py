"""Gang scheduling (issue 29) against the gated control plane (GenericWorkload on): PodGroups
of scheduling.k8s.io/v1beta1 and their member pods, scheduled by polsched's default policy
running as the operator's ServiceAccount (manifests/rbac: kube-scheduler's podgroups
grants are the ones under test).

- A gang that fits binds whole, and its PodGroup gets PodGroupInitiallyScheduled=True.
- A gang that cannot fit binds nothing, its members get upstream's FailedScheduling texts,
  the PodGroup gets the condition False/Unschedulable, and nothing it simulated stays
  assumed: a plain pod then fits where the members were tried.
- A lone member of a gang waits at PreEnqueue without any event, and binds with the next.
- Lowering a waiting gang's minCount requeues its members.

One control plane for all (tests/e2e/conftest.py `gated`, shared with test_feature_gates).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from polsched.api import load_policy
from polsched.cluster.client import ApiClient
from polsched.plugins import CATALOG
from polsched.scheduler.engine import Engine
from tests.conftest import Cluster, node_manifest, unique
from tests.e2e.rbac import (
    OPERATOR_NAMESPACE,
    OPERATOR_SA,
    install_rbac,
    service_account_kubeconfig,
)
from tests.e2e.scheduling import RUN, eventually, pod_manifest

pytestmark = pytest.mark.e2e
Json = dict[str, Any]
GROUPS = "/apis/scheduling.k8s.io/v1beta1"


@pytest.fixture(scope="module")
def gang_cluster(gated: tuple[Cluster, Path], tmp_path_factory: pytest.TempPathFactory
                 ) -> tuple[Cluster, Path]:
    """The gated control plane with the shipped RBAC, and the operator's kubeconfig."""
    c, _ = gated
    install_rbac(c)
    kubeconfig = service_account_kubeconfig(
        c, OPERATOR_NAMESPACE, OPERATOR_SA,
        tmp_path_factory.mktemp("gangs") / "operator.kubeconfig")
    return c, kubeconfig


class Gang:
    """One test's namespace, node(s), scheduler name and PodGroup helpers."""

    def __init__(self, client: ApiClient, ns: str, scheduler: str, rid: str) -> None:
        self.client, self.ns, self.scheduler, self.rid = client, ns, scheduler, rid

    async def pod_group(self, name: str, min_count: int | None) -> Json:
        policy: Json = {"gang": {"minCount": min_count}} if min_count is not None \
            else {"basic": {}}
        return await self.client.post(f"{GROUPS}/namespaces/{self.ns}/podgroups", {
            "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": self.ns},
            "spec": {"schedulingPolicy": policy}})

    async def member(self, name: str, group: str, cpu: str) -> None:
        await self.client.post(f"/api/v1/namespaces/{self.ns}/pods", pod_manifest(
            self.ns, name, self.scheduler, self.rid, cpu,
            schedulingGroup={"podGroupName": group}))

    async def plain(self, name: str, cpu: str) -> None:
        await self.client.post(f"/api/v1/namespaces/{self.ns}/pods",
                               pod_manifest(self.ns, name, self.scheduler, self.rid, cpu))

    async def node_of(self, pod: str) -> str:
        p = await self.client.get(f"/api/v1/namespaces/{self.ns}/pods/{pod}")
        return str(p["spec"].get("nodeName") or "")

    async def events(self, pod: str) -> list[tuple[str, str]]:
        got = await self.client.get(f"/apis/events.k8s.io/v1/namespaces/{self.ns}/events")
        return [(str(e.get("reason")), str(e.get("note") or ""))
                for e in got.get("items") or () if e["regarding"]["name"] == pod]

    async def condition(self, group: str) -> Json | None:
        pg = await self.client.get(f"{GROUPS}/namespaces/{self.ns}/podgroups/{group}")
        for c in (pg.get("status") or {}).get("conditions") or ():
            if c.get("type") == "PodGroupInitiallyScheduled":
                return dict(c, generation=pg["metadata"].get("generation"))
        return None


async def bound(g: Gang, pod: str) -> str:
    return str(await eventually(lambda: g.node_of(pod), 60, what=f"{pod} bound"))


def run(gang_cluster: tuple[Cluster, Path], nodes: list[tuple[str, str]],
        body: Callable[[Gang, list[str]], Awaitable[None]]) -> None:
    """Nodes (name suffix, cpu), a namespace, and an engine running the default policy as
    the operator's ServiceAccount while `body` acts as the admin."""
    c, kubeconfig = gang_cluster
    rid = unique("gang")
    ns = rid
    names = [f"{rid}-{suffix}" for suffix, _ in nodes]
    c.kubectl("create", "namespace", ns)
    c.apply([node_manifest(n, cpu=cpu, labels={RUN: rid})
             for n, (_, cpu) in zip(names, nodes, strict=True)])
    scheduler = unique("polsched-gang")

    async def main() -> None:
        admin = ApiClient.from_kubeconfig(c.kubeconfig)
        operator = ApiClient.from_kubeconfig(str(kubeconfig))
        engine = Engine(operator)
        try:
            await engine.start()
            assert engine.cache.pod_groups.served  # discovery found PodGroups
            engine.apply(load_policy({
                "apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
                "metadata": {"name": scheduler, "generation": 1, "uid": unique("uid")},
                "spec": {}}, CATALOG))
            await body(Gang(admin, ns, scheduler, rid), names)
        finally:
            await engine.stop()
            await operator.close()
            await admin.close()

    try:
        asyncio.run(main())
    finally:
        c.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        c.kubectl("delete", "node", *names, "--wait=false", check=False)


def test_a_gang_that_fits_binds_whole(gang_cluster: tuple[Cluster, Path]) -> None:
    async def body(g: Gang, nodes: list[str]) -> None:
        await g.pod_group("workers", 3)
        for i in range(3):
            await g.member(f"w{i}", "workers", "1")

        async def all_bound() -> list[str] | None:
            got = [await g.node_of(f"w{i}") for i in range(3)]
            return got if all(got) else None

        assert await eventually(all_bound, 60, what="the gang bound") == nodes * 3

        async def scheduled() -> Json | None:
            cond = await g.condition("workers")
            return cond if cond and cond["status"] == "True" else None

        cond = await eventually(scheduled, 30, what="PodGroupInitiallyScheduled=True")
        assert (cond["reason"], cond["message"]) == ("Scheduled", "")
        # observedGeneration is the PodGroup's generation (unset here, as the API server
        # sets none on PodGroups: 0, omitted), as upstream's updatePodGroupCondition.
        assert cond.get("observedGeneration", 0) == (cond["generation"] or 0), cond
        for i in range(3):
            assert [r for r, _ in await g.events(f"w{i}")] == ["Scheduled"]

    run(gang_cluster, [("n", "4")], body)


def test_a_gang_that_cannot_fit_binds_and_holds_nothing(
        gang_cluster: tuple[Cluster, Path]) -> None:
    """docs/gangs.md's oracle case: one node with 4 CPUs, minCount 2, members of 3."""
    async def body(g: Gang, nodes: list[str]) -> None:
        await g.pod_group("big", 2)
        await g.member("b1", "big", "3")
        await g.member("b2", "big", "3")

        async def failed(pod: str) -> str:
            notes = [n for r, n in await g.events(pod) if r == "FailedScheduling"]
            return notes[0] if notes else ""

        group_msg = "minCount (2) cannot be satisfied: 1 scheduled, 0 remaining"
        first = await eventually(lambda: failed("b1"), 60, what="b1 FailedScheduling")
        second = await eventually(lambda: failed("b2"), 60, what="b2 FailedScheduling")
        # The member that fit in the simulation carries the group's message; the other
        # its own FitError (which of the two is tried first is upstream's order).
        assert sorted([first, second]) == sorted([
            f"pod group is unschedulable, {group_msg}",
            "0/1 nodes are available: 1 Insufficient cpu."])

        async def rejected() -> Json | None:
            cond = await g.condition("big")
            return cond if cond and cond["status"] == "False" else None

        cond = await eventually(rejected, 30, what="PodGroupInitiallyScheduled=False")
        assert (cond["reason"], cond["message"]) == ("Unschedulable", group_msg)
        assert await g.node_of("b1") == "" and await g.node_of("b2") == ""
        # Nothing the simulation assumed stayed: a plain pod of 3 CPUs fits the node.
        await g.plain("after", "3")
        assert await eventually(lambda: g.node_of("after"), 60, what="after bound") == nodes[0]
        assert await g.node_of("b1") == "" and await g.node_of("b2") == ""

    run(gang_cluster, [("n", "4")], body)


def test_a_lone_member_waits_at_pre_enqueue_without_events(
        gang_cluster: tuple[Cluster, Path]) -> None:
    async def body(g: Gang, nodes: list[str]) -> None:
        await g.pod_group("pair", 2)
        await g.member("m1", "pair", "1")
        # A plain pod created after m1 binds: the engine saw m1 first (one pod watch).
        await g.plain("probe", "1")
        assert await eventually(lambda: g.node_of("probe"), 60, what="probe bound") == nodes[0]
        assert await g.node_of("m1") == ""
        assert await g.events("m1") == []  # held at PreEnqueue: no event at all
        assert await g.condition("pair") is None
        await g.member("m2", "pair", "1")
        for m in ("m1", "m2"):
            assert await bound(g, m) == nodes[0]

    run(gang_cluster, [("n", "4")], body)


def test_lowering_min_count_requeues_the_members(gang_cluster: tuple[Cluster, Path]) -> None:
    async def body(g: Gang, nodes: list[str]) -> None:
        await g.pod_group("trio", 3)
        await g.member("t1", "trio", "1")
        await g.member("t2", "trio", "1")
        await g.plain("probe", "1")
        assert await eventually(lambda: g.node_of("probe"), 60, what="probe bound")
        assert await g.node_of("t1") == "" and await g.node_of("t2") == ""
        await g.client.patch(f"{GROUPS}/namespaces/{g.ns}/podgroups/trio",
                             {"spec": {"schedulingPolicy": {"gang": {"minCount": 2}}}},
                             "merge")
        for m in ("t1", "t2"):
            assert await bound(g, m) == nodes[0]

    run(gang_cluster, [("n", "4")], body)
