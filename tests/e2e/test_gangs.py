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
- After a crash between two Bindings, the bound member counts toward minCount and the
  next process binds the rest.
- A hot reload, a lost lease and a stop reject a gang's Permit waiters together, and
  nothing stays assumed (a test plugin, Hold, keeps the members waiting at Permit).

One control plane for all (tests/e2e/conftest.py `gated`, shared with test_feature_gates).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from polsched.api import load_policy
from polsched.cluster.client import ApiClient
from polsched.framework.cycle_state import CycleState
from polsched.framework.interfaces import FilterPlugin, Handle, PermitPlugin
from polsched.framework.registry import Catalog, PluginSpec, Registry
from polsched.framework.status import SUCCESS, Code, Status
from polsched.framework.types import NodeInfo, PodInfo
from polsched.framework.waiting_pods import WaitingPod
from polsched.plugins import (
    CATALOG,
    DEFAULT_FILTERS,
    DEFAULT_PRE_ENQUEUE,
    DEFAULT_SCORERS,
    REGISTRY,
)
from polsched.scheduler.engine import Engine
from tests.conftest import Cluster, node_manifest, unique
from tests.e2e.rbac import (
    OPERATOR_NAMESPACE,
    OPERATOR_SA,
    install_rbac,
    service_account_kubeconfig,
)
from tests.e2e.scheduling import RUN, eventually, pod_manifest
from tests.e2e.test_rbac import DEDICATED, GANG_MAY, GANG_MAY_NOT, OPERATOR, wrong

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


def test_rbac_is_kube_schedulers_for_pod_groups(gang_cluster: tuple[Cluster, Path]) -> None:
    c, _ = gang_cluster
    for user in (OPERATOR, DEDICATED):
        assert wrong(c, user, GANG_MAY, GANG_MAY_NOT) == [], user


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

        # As the oracle's (docs/gangs.md): DefaultPreemption's PodGroupPostFilter finds no
        # pod of lower priority to preempt, and says so.
        group_msg = ("minCount (2) cannot be satisfied: 1 scheduled, 0 remaining, "
                     "pod group preemption: No preemption victims found for incoming "
                     "preemptor")
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


def test_after_a_crash_between_two_bindings_the_next_cycle_places_the_rest(
        gang_cluster: tuple[Cluster, Path]) -> None:
    """A scheduler that died after posting the first member's Binding and before the
    others (the API has no transaction over Bindings): the new process lists the bound
    member as assigned, counts it toward minCount, and binds the rest."""
    c, kubeconfig = gang_cluster
    rid = unique("crash")
    node = f"{rid}-n"
    c.kubectl("create", "namespace", rid)
    c.apply(node_manifest(node, cpu="4", labels={RUN: rid}))
    scheduler = unique("polsched-crash")

    async def main() -> None:
        admin = ApiClient.from_kubeconfig(c.kubeconfig)
        g = Gang(admin, rid, scheduler, rid)
        try:
            await g.pod_group("trio", 3)
            for m in ("c1", "c2", "c3"):
                await g.member(m, "trio", "1")
            # What the dead scheduler managed to do: c1's Binding.
            await admin.post(f"/api/v1/namespaces/{rid}/pods/c1/binding", {
                "apiVersion": "v1", "kind": "Binding",
                "metadata": {"name": "c1", "namespace": rid},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node}})
            operator = ApiClient.from_kubeconfig(str(kubeconfig))
            engine = Engine(operator)
            try:
                await engine.start()
                state = engine.cache.pod_groups.state(f"{rid}/trio")
                # Before a profile serves their schedulerName only the bound member counts
                # (upstream counts a pending member only when responsibleForPod).
                assert (state.all_pods_count, len(state.assigned)) == (1, 1)
                engine.apply(load_policy(held_policy(scheduler, 1, False), CATALOG))
                assert (state.all_pods_count, len(state.assigned)) == (3, 1)
                for m in ("c2", "c3"):
                    assert await bound(g, m) == node
            finally:
                await engine.stop()
                await operator.close()
        finally:
            await admin.close()

    try:
        asyncio.run(main())
    finally:
        c.kubectl("delete", "namespace", rid, "--wait=false", check=False)
        c.kubectl("delete", "node", node, "--wait=false", check=False)


# -- nothing partial: Permit waiters are rejected together -------------------------------
class Hold(FilterPlugin, PermitPlugin):
    """A test plugin that holds every pod at Permit (10 minutes), so that a gang's members
    stay waiting after GangScheduling allowed them: what a hot reload, a lost lease or a
    stop must then reject together."""

    NAME = "Hold"

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        return SUCCESS

    def permit(self, state: CycleState, pod: PodInfo, node_name: str) -> tuple[Status, float]:
        return Status(Code.WAIT, ("held by the test",)), 600.0


def _hold(args: Mapping[str, Any] | None, handle: Handle) -> Hold:
    return Hold()


CATALOG_WITH_HOLD = Catalog(
    Registry([*(s for n in REGISTRY.names() if (s := REGISTRY.get(n)) is not None),
              PluginSpec(name="Hold", filter=_hold)]),
    DEFAULT_FILTERS, DEFAULT_SCORERS, DEFAULT_PRE_ENQUEUE)


def held_policy(name: str, generation: int, hold: bool) -> Json:
    spec: Json = {"filters": [{"name": "Hold"}]} if hold else {}
    return {"apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
            "metadata": {"name": name, "generation": generation, "uid": "uid-" + name},
            "spec": spec}


@pytest.mark.parametrize("trigger", ["reload", "lost-lease", "stop"])
def test_a_gangs_permit_waiters_are_rejected_together(
        gang_cluster: tuple[Cluster, Path], trigger: str) -> None:
    c, kubeconfig = gang_cluster
    rid = unique("held")
    node = f"{rid}-n"
    c.kubectl("create", "namespace", rid)
    c.apply(node_manifest(node, cpu="4", labels={RUN: rid}))
    scheduler = unique("polsched-held")

    async def main() -> None:
        admin = ApiClient.from_kubeconfig(c.kubeconfig)
        operator = ApiClient.from_kubeconfig(str(kubeconfig))
        engine = Engine(operator)
        g = Gang(admin, rid, scheduler, rid)
        stopped = False
        try:
            await engine.start()
            engine.apply(load_policy(held_policy(scheduler, 1, True), CATALOG_WITH_HOLD))
            await g.pod_group("pair", 2)
            await g.member("h1", "pair", "1")
            await g.member("h2", "pair", "1")

            async def both_held() -> list[WaitingPod] | None:
                held = [w for w in engine.waiting_pods.values()
                        if w.pod.scheduler_name == scheduler]
                # GangScheduling allowed both; only Hold keeps them.
                return held if len(held) == 2 and all(
                    w.pending_plugins == ["Hold"] for w in held) else None

            held = await eventually(both_held, 60, what="both members held at Permit")
            if trigger == "reload":
                engine.apply(load_policy(held_policy(scheduler, 2, False), CATALOG))
            elif trigger == "lost-lease":
                engine.set_leader(None, False)
            else:
                await engine.stop()
                stopped = True
            # One synchronous pass: both decided (rejected) before anything else ran.
            assert [w.pending_plugins for w in held] == [[], []]
            for w in held:
                st = await w.wait()
                assert st.code is Code.UNSCHEDULABLE, st

            async def nothing_assumed() -> bool:
                return not engine.cache.assumed_keys(scheduler)

            assert await eventually(nothing_assumed, 30, what="the members forgotten")
            if trigger == "reload":
                # The new pipeline (without Hold) places the gang whole.
                for m in ("h1", "h2"):
                    assert await bound(g, m) == node
            else:
                assert await g.node_of("h1") == "" and await g.node_of("h2") == ""
        finally:
            if not stopped:
                await engine.stop()
            await operator.close()
            await admin.close()

    try:
        asyncio.run(main())
    finally:
        c.kubectl("delete", "namespace", rid, "--wait=false", check=False)
        c.kubectl("delete", "node", node, "--wait=false", check=False)
