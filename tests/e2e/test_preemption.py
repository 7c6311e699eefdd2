"""Priority preemption on the real API server, with kwok nodes, as kube-scheduler does it.

A high-priority pod that fits nowhere evicts the fewest lower-priority pods on the node
whose eviction breaks no PodDisruptionBudget, and is bound there once they are gone; the
victims get the DisruptionTarget condition and the Preempted event. preemptionPolicy
Never and equal priorities evict nothing, with kube-scheduler's FailedScheduling text.
While victims terminate, the room they free is kept for the preemptor. `polsched explain`
shows a preemptor its candidates, victims and the rule that chose.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from polsched.api import load_policy
from polsched.cluster.client import ApiClient
from polsched.extender.client import HTTPExtender
from polsched.objects import Json
from polsched.plugins import CATALOG
from polsched.scheduler import metrics
from polsched.scheduler.engine import Engine
from tests.builders import make_pod
from tests.conftest import Cluster, NodeFactory, node_manifest, unique
from tests.e2e.rbac import operator_kubeconfig
from tests.e2e.scheduling import RUN, bound_node, eventually, failed_scheduling, pod_manifest
from tests.e2e.test_failed_scheduling_parity import (  # noqa: F401 (fixture)
    both_schedulers,
    kube_scheduler,
)
from tests.unit.extender.fake_extender import FakeExtender

pytestmark = pytest.mark.e2e
POLSCHED = Path(sys.executable).parent / "polsched"


@pytest.fixture
def classes(cluster: Cluster) -> Iterator[dict[str, str]]:
    """PriorityClasses of this test: low (100), high (1000), never (1000, Never)."""
    rid = unique("prio")
    names = {"low": f"{rid}-low", "high": f"{rid}-high", "never": f"{rid}-never"}
    for key, value in (("low", 100), ("high", 1000), ("never", 1000)):
        pc: Json = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                    "metadata": {"name": names[key]}, "value": value}
        if key == "never":
            pc["preemptionPolicy"] = "Never"
        cluster.apply(pc)
    yield names
    cluster.kubectl("delete", "priorityclass", *names.values(), "--wait=false", check=False)


def policy(name: str) -> Json:
    return {"apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
            "metadata": {"name": name, "generation": 1, "uid": unique("uid")},
            "spec": {"schedulerName": name}}


def bound_pod(ns: str, name: str, node: str, cpu: str, priority_class: str,
              labels: dict[str, str] | None = None, grace: int = 0) -> Json:
    """A pod already on `node` (no scheduler involved): a would-be victim."""
    return (make_pod().typed().name(name).namespace(ns).labels(labels or {}).node(node)
            .spec(priorityClassName=priority_class, terminationGracePeriodSeconds=grace)
            .container(image="busybox", requests={"cpu": cpu}).obj())


def run_with_engine(cluster: Cluster, name: str,
                    body: Callable[[ApiClient, Engine], Awaitable[None]],
                    extenders: tuple[Json, ...] = ()) -> None:
    """An Engine (the operator's scheduling core) running `name`'s policy during body,
    with one HTTPExtender per spec.extenders entry, as the operator's reconciler. The
    engine authenticates as the operator's ServiceAccount; `body` gets an admin client."""
    async def main() -> None:
        client = ApiClient.from_kubeconfig(cluster.kubeconfig)
        # As the operator in a cluster: its ServiceAccount under the shipped RBAC (the
        # admin kubeconfig hid that no role could delete a victim, issue 26 finding 3).
        engine_client = ApiClient.from_kubeconfig(str(operator_kubeconfig(cluster)))
        engine = Engine(engine_client)
        loaded = load_policy(policy(name) | {"spec": {"schedulerName": name,
                                                      "extenders": list(extenders)}}, CATALOG)
        exts = [HTTPExtender(cfg) for cfg in loaded.extenders]
        try:
            await engine.start()
            engine.apply(loaded, extenders=exts)
            await body(client, engine)
        finally:
            await engine.stop()
            for e in exts:
                await e.close()
            await client.close()
            await engine_client.close()

    asyncio.run(main())


class PodLog:
    """Every version of the namespace's pods seen on a watch (the last one of a pod that
    kwok deleted at once still shows what the scheduler wrote before)."""

    def __init__(self, client: ApiClient, ns: str) -> None:
        self.client, self.ns = client, ns
        self.last: dict[str, Json] = {}
        self.deleted: set[str] = set()
        self.task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> PodLog:
        listed = await self.client.get(f"/api/v1/namespaces/{self.ns}/pods")
        for p in listed["items"]:
            self.last[p["metadata"]["name"]] = p
        rv = listed["metadata"]["resourceVersion"]

        async def watch() -> None:
            async for kind, obj in self.client.watch(f"/api/v1/namespaces/{self.ns}/pods",
                                                     resource_version=rv):
                self.last[obj["metadata"]["name"]] = obj
                if kind == "DELETED":
                    self.deleted.add(obj["metadata"]["name"])

        self.task = asyncio.ensure_future(watch())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.task is not None
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self.task


async def events(client: ApiClient, ns: str, reason: str) -> list[Json]:
    got = await client.get(f"/apis/events.k8s.io/v1/namespaces/{ns}/events")
    return [e for e in got["items"] if e.get("reason") == reason]


def condition(pod: Json, kind: str) -> Json | None:
    return next((c for c in (pod.get("status") or {}).get("conditions") or ()
                 if c.get("type") == kind), None)


def test_high_priority_pod_evicts_fewest_victims_on_the_node_that_breaks_no_pdb(
        cluster: Cluster, namespace: str, nodes: NodeFactory, classes: dict[str, str]) -> None:
    rid = unique("pre")
    two, guarded, one = (nodes(f"{rid}-{n}", cpu="2", labels={RUN: rid})
                         for n in ("two", "guarded", "one"))
    low = classes["low"]
    for p in (bound_pod(namespace, "two-a", two, "1", low),
              bound_pod(namespace, "two-b", two, "1", low),
              bound_pod(namespace, "guarded-db", guarded, "2", low, {"app": "db"}),
              bound_pod(namespace, "one-c", one, "2", low)):
        cluster.apply(p)
    # No disruption controller runs here: the PDB's status stays empty, which is
    # disruptionsAllowed 0 to a scheduler, as for a PDB at its minimum.
    cluster.apply({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                   "metadata": {"name": "db", "namespace": namespace},
                   "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "db"}}}})
    name = f"{rid}-sched"
    metrics.reset()

    async def body(client: ApiClient, engine: Engine) -> None:
        async with PodLog(client, namespace) as log:
            pre = pod_manifest(namespace, "preemptor", name, rid, cpu="2",
                               priorityClassName=classes["high"])
            created = await client.post(f"/api/v1/namespaces/{namespace}/pods", pre)
            uid = created["metadata"]["uid"]
            assert await bound_node(client, namespace, "preemptor", timeout=60) == one
            await eventually(lambda: asyncio.sleep(0, "one-c" in log.deleted),
                             what="the victim deleted")
            victim = log.last["one-c"]
        # Only the victim went; the PDB-guarded pod and the two cheaper-per-pod ones stay.
        left = {p["metadata"]["name"] for p in
                (await client.get(f"/api/v1/namespaces/{namespace}/pods"))["items"]}
        assert left == {"two-a", "two-b", "guarded-db", "preemptor"}
        dt = condition(victim, "DisruptionTarget")
        assert dt is not None and dt["status"] == "True"
        assert dt["reason"] == "PreemptionByScheduler"
        assert dt["message"] == f"{name}: preempting to accommodate a higher priority pod"
        (ev,) = [e for e in await events(client, namespace, "Preempted")
                 if e["regarding"]["name"] == "one-c"]
        assert ev["note"] == f"Preempted by pod {uid} on node {one}"
        assert ev["type"] == "Normal" and ev["action"] == "Preempting"
        assert ev["related"]["name"] == "preemptor" and ev["related"]["uid"] == uid
        stats = engine.stats(name)
        assert stats.preemptions_total == 1 and stats.preemption_victims == 1
        assert stats.last_preemption == f"{namespace}/preemptor on {one} evicting " \
                                        f"{namespace}/one-c"
        text = metrics.exposition()
        assert "scheduler_preemption_attempts_total 1" in text
        assert "scheduler_preemption_victims_count 1" in text

    run_with_engine(cluster, name, body)


def test_an_extenders_preempt_verb_gets_the_candidates_and_has_the_last_word(
        cluster: Cluster, namespace: str, nodes: NodeFactory, classes: dict[str, str]) -> None:
    """preemptVerb: the extender is sent every candidate with its victims (UIDs, it is
    nodeCacheCapable) and keeps only the node DefaultPreemption would not have chosen."""
    rid = unique("ext")
    two, one = (nodes(f"{rid}-{n}", cpu="2", labels={RUN: rid}) for n in ("two", "one"))
    low = classes["low"]
    for p in (bound_pod(namespace, "a", two, "1", low), bound_pod(namespace, "b", two, "1", low),
              bound_pod(namespace, "c", one, "2", low)):
        cluster.apply(p)

    def preempt(body: Json) -> Json:
        return {"NodeNameToMetaVictims": {two: body["NodeNameToMetaVictims"][two]}}

    ext = FakeExtender({"/preempt": preempt}).start()
    name = f"{rid}-sched"
    try:
        async def body(client: ApiClient, engine: Engine) -> None:
            base = f"/api/v1/namespaces/{namespace}/pods"
            await client.post(base, pod_manifest(namespace, "pre", name, rid, cpu="2",
                                                 priorityClassName=classes["high"]))
            assert await bound_node(client, namespace, "pre", timeout=60) == two
            left = {p["metadata"]["name"] for p in (await client.get(base))["items"]}
            assert left == {"c", "pre"}
            uids = {p["metadata"]["name"]: p["metadata"]["uid"]
                    for p in cluster.kubectl_json("get", "pods", "-n", namespace)["items"]}
            sent = ext.bodies("/preempt")[0]
            offered = sent["NodeNameToMetaVictims"]
            assert set(offered) == {two, one}
            assert [v["UID"] for v in offered[one]["Pods"]] == [uids["c"]]
            assert len(offered[two]["Pods"]) == 2

        run_with_engine(cluster, name, body, extenders=(
            {"urlPrefix": ext.url, "preemptVerb": "preempt", "nodeCacheCapable": True},))
    finally:
        ext.stop()


def test_never_and_equal_priority_evict_nothing_with_kube_schedulers_text(
        cluster: Cluster, nodes: NodeFactory, classes: dict[str, str],
        kube_scheduler: Any) -> None:  # noqa: F811
    rid = unique("noevict")
    held = unique("held")
    cluster.kubectl("create", "namespace", held)
    full = [nodes(f"{rid}-{i}", cpu="1", labels={RUN: rid}) for i in range(2)]
    try:
        for i, n in enumerate(full):
            cluster.apply(bound_pod(held, f"v{i}", n, "1", classes["low"]))

        def make(ns: str, scheduler: str) -> list[Json]:
            return [pod_manifest(ns, "never", scheduler, rid, cpu="1",
                                 priorityClassName=classes["never"]),
                    pod_manifest(ns, "equal", scheduler, rid, cpu="1",
                                 priorityClassName=classes["low"])]

        kube, ours = both_schedulers(cluster, kube_scheduler, make, bound=0)
        assert any("preemption: not eligible due to preemptionPolicy=Never." in n
                   for n in kube), kube
        assert any("No preemption victims found for incoming pod" in n for n in kube), kube
        assert ours == kube
        pods = cluster.kubectl_json("get", "pods", "-n", held, "-o", "json")["items"]
        assert sorted(p["metadata"]["name"] for p in pods) == ["v0", "v1"]
        assert all(condition(p, "DisruptionTarget") is None for p in pods)
        assert all(not p["metadata"].get("deletionTimestamp") for p in pods)
    finally:
        cluster.kubectl("delete", "pods", "--all", "-n", held, "--force", "--grace-period=0",
                        "--wait=false", check=False)
        cluster.kubectl("delete", "namespace", held, "--wait=false", check=False)


def test_a_preemptors_failed_scheduling_text_is_kube_schedulers(
        cluster: Cluster, nodes: NodeFactory, classes: dict[str, str],
        kube_scheduler: Any) -> None:  # noqa: F811
    """While it waits for its victim, the preemptor's FailedScheduling note is word for
    word kube-scheduler's ("... preemption: found a potential placement ...")."""
    rid = unique("found")
    node = nodes(f"{rid}-0", cpu="1", labels={RUN: rid})
    notes: dict[str, str] = {}

    async def preempt(client: ApiClient, ns: str, scheduler: str) -> None:
        await client.post(f"/api/v1/namespaces/{ns}/pods",
                          bound_pod(ns, "victim", node, "1", classes["low"]))
        await client.post(f"/api/v1/namespaces/{ns}/pods",
                          pod_manifest(ns, "pre", scheduler, rid, cpu="1",
                                       priorityClassName=classes["high"]))
        assert await bound_node(client, ns, "pre", timeout=60) == node
        notes[scheduler] = await failed_scheduling(client, ns, "pre")

    kube_ns, ours_ns = unique("kube"), unique("ours")
    for ns in (kube_ns, ours_ns):
        cluster.kubectl("create", "namespace", ns)
    kube_name, ours_name = unique("kube-pre"), unique("polsched-pre")
    try:
        ks = kube_scheduler(kube_name)

        async def kube_side() -> None:
            async with ApiClient.from_kubeconfig(cluster.kubeconfig) as client:
                await preempt(client, kube_ns, kube_name)

        asyncio.run(kube_side())
        ks.stop()
        cluster.kubectl("delete", "pods", "--all", "-n", kube_ns, "--force",
                        "--grace-period=0")
        run_with_engine(cluster, ours_name,
                        lambda client, _engine: preempt(client, ours_ns, ours_name))
        assert "preemption: found a potential placement for pod on node" in notes[kube_name]
        assert notes[ours_name] == notes[kube_name]
    finally:
        for ns in (kube_ns, ours_ns):
            cluster.kubectl("delete", "pods", "--all", "-n", ns, "--force",
                            "--grace-period=0", "--wait=false", check=False)
            cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def test_while_victims_terminate_no_other_pod_takes_the_freed_room(
        cluster: Cluster, namespace: str, classes: dict[str, str]) -> None:
    rid = unique("hold")
    # A node kwok does not play: a deleted pod on it stays Terminating (its grace period
    # runs, no kubelet confirms) until the test removes it, as a slow kubelet would.
    node = f"{rid}-slow"
    manifest = node_manifest(node, cpu="2", labels={RUN: rid})
    del manifest["metadata"]["annotations"]
    cluster.apply(manifest)
    name = f"{rid}-sched"
    try:
        cluster.apply(bound_pod(namespace, "victim", node, "2", classes["low"], grace=300))

        async def body(client: ApiClient, engine: Engine) -> None:
            base = f"/api/v1/namespaces/{namespace}/pods"
            pre = pod_manifest(namespace, "preemptor", name, rid, cpu="2",
                               priorityClassName=classes["high"])
            await client.post(base, pre)

            async def terminating() -> Json | None:
                v = await client.get(f"{base}/victim")
                return v if v["metadata"].get("deletionTimestamp") else None

            victim = await eventually(terminating, what="the victim terminating")
            assert condition(victim, "DisruptionTarget") is not None

            async def nominated() -> str:
                p = await client.get(f"{base}/preemptor")
                return str(p["status"].get("nominatedNodeName") or "")

            assert await eventually(nominated, what="the preemptor nominated") == node
            # A lower-priority pod that fits only where the victim was.
            other = pod_manifest(namespace, "other", name, rid, cpu="1",
                                 priorityClassName=classes["low"])
            await client.post(base, other)
            assert "Insufficient cpu" in await failed_scheduling(client, namespace, "other")
            # The victim goes; the room is the preemptor's, not the other pod's.
            await client.delete(f"{base}/victim", {"gracePeriodSeconds": 0})
            assert await bound_node(client, namespace, "preemptor", timeout=60) == node
            p = await client.get(f"{base}/other")
            assert not p["spec"].get("nodeName")

        run_with_engine(cluster, name, body)
    finally:
        cluster.kubectl("delete", "pods", "--all", "-n", namespace, "--force",
                        "--grace-period=0", check=False)
        cluster.kubectl("delete", "node", node, "--wait=false", check=False)


def test_explain_shows_a_preemptor_its_candidates_victims_and_the_deciding_rule(
        cluster: Cluster, namespace: str, nodes: NodeFactory, classes: dict[str, str]) -> None:
    rid = unique("why")
    two, one = nodes(f"{rid}-two", cpu="2", labels={RUN: rid}), \
        nodes(f"{rid}-one", cpu="2", labels={RUN: rid})
    low = classes["low"]
    for p in (bound_pod(namespace, "a", two, "1", low), bound_pod(namespace, "b", two, "1", low),
              bound_pod(namespace, "c", one, "2", low)):
        cluster.apply(p)
    name = f"{rid}-sched"
    cluster.apply(policy(name) | {"metadata": {"name": name}})  # no operator: stays Pending
    try:
        cluster.apply(pod_manifest(namespace, "pre", name, rid, cpu="2",
                                   priorityClassName=classes["high"]))
        out = subprocess.run([str(POLSCHED), "explain", "pre", "-n", namespace, "-o", "json"],
                             capture_output=True, text=True, env=cluster.env, timeout=60)
        assert out.returncode == 0, out.stderr
        pre = json.loads(out.stdout)["preemption"]
        assert pre["chosen"] == one
        assert pre["decidingRule"] == "smallest sum of victim priorities"
        by = {c["node"]: [v["pod"] for v in c["victims"]] for c in pre["candidates"]}
        assert by == {two: [f"{namespace}/a", f"{namespace}/b"], one: [f"{namespace}/c"]}
        assert all(r["reasons"] for r in pre["notCandidates"].values())
        text = subprocess.run([str(POLSCHED), "explain", "pre", "-n", namespace],
                              capture_output=True, text=True, env=cluster.env, timeout=60)
        assert f"Nominated: {one}, evicting {namespace}/c (deciding rule: smallest sum" \
            in text.stdout, text.stdout
    finally:
        cluster.kubectl("delete", "schedulingpolicy", name, "--wait=false", check=False)
