"""Load-aware scoring against the real chain: a pod's usage annotation -> kwok's
ClusterResourceUsage and Metric -> kwok's emulated /metrics/resource -> metrics-server ->
APIService v1beta1.metrics.k8s.io -> polsched's node metrics watcher -> the scorers.

This module starts its own control plane with `hack/cluster.sh up` and POLSCHED_METRICS=1
(or reuses `make cluster METRICS=1`'s when POLSCHED_METRICS_KUBECONFIG is set), so the
other suites keep the plain, faster one. Every expected placement is computed here, by
hand, from the usage the Metrics API served, with Trimaran's formulas written out.

Three nodes of 4 cpu / 8Gi carry a "load" pod each (bound directly, as another scheduler
would), annotated with the usage kwok reports for it:

    hot    2500m  2Gi     62.5% cpu
    warm   1000m  1Gi     25%
    cold    300m  256Mi   7.5%
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from polsched.api import load_policy
from polsched.cluster.client import ApiClient
from polsched.framework import resources as res
from polsched.plugins import CATALOG
from polsched.scheduler.engine import Engine
from tests.builders import make_pod
from tests.conftest import HACK, Cluster, _wait_ready, install_crds, node_manifest, unique
from tests.e2e.scheduling import RUN, bound_node, eventually, nodes_ready

pytestmark = pytest.mark.e2e

INTERVAL = 2  # metricsIntervalSeconds of the test policies
LOADS = {"hot": ("2500m", "2Gi"), "warm": ("1000m", "1Gi"), "cold": ("300m", "256Mi")}
NODE_CPU = 4000.0
NODE_MEM = 8 * 1024.0 ** 3
USAGE_CPU = "kwok.x-k8s.io/usage-cpu"
USAGE_MEM = "kwok.x-k8s.io/usage-memory"


@pytest.fixture(scope="module")
def metrics_cluster() -> Iterator[Cluster]:
    bin_dir = Path(subprocess.run([str(HACK / "build.sh")], check=True, capture_output=True,
                                  text=True).stdout.strip())
    reuse = os.environ.get("POLSCHED_METRICS_KUBECONFIG")
    if reuse:
        c = Cluster(reuse, bin_dir)
        _wait_ready(c)
        install_crds(c)
        yield c
        return
    env = {**os.environ, "POLSCHED_METRICS": "1"}
    with tempfile.TemporaryDirectory(prefix="polsched-e2e-metrics-") as d:
        up = subprocess.run([str(HACK / "cluster.sh"), "up", d], capture_output=True,
                            text=True, env=env)
        if up.returncode != 0:
            subprocess.run([str(HACK / "cluster.sh"), "down", d], capture_output=True)
            raise RuntimeError(f"the control plane with METRICS=1 did not start:\n{up.stderr}")
        try:
            c = Cluster(str(Path(d) / "kubeconfig"), bin_dir)
            _wait_ready(c)
            install_crds(c)
            yield c
        finally:
            subprocess.run([str(HACK / "cluster.sh"), "down", d], capture_output=True)


class World:
    """The three loaded nodes of one test module, their load pods and a namespace."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.rid = unique("load")
        self.ns = self.rid
        self.nodes = {k: f"{self.rid}-{k}" for k in LOADS}

    def kind_of(self, node: str) -> str:
        for k, n in self.nodes.items():
            if n == node:
                return k
        raise AssertionError(f"bound to {node!r}, not one of {self.nodes}")


@pytest.fixture(scope="module")
def world(metrics_cluster: Cluster) -> Iterator[World]:
    w = World(metrics_cluster)
    metrics_cluster.kubectl("create", "namespace", w.ns)
    for kind, name in w.nodes.items():
        # Only an allocatable, as the README's tour: kwok's node-initialize adds the rest
        # and the metrics-path annotation.
        manifest = node_manifest(name, cpu="4", memory="8Gi", labels={RUN: w.rid})
        del manifest["status"]["capacity"]
        metrics_cluster.apply(manifest)
        cpu, mem = LOADS[kind]
        metrics_cluster.apply(
            make_pod().typed().name(f"load-{kind}").namespace(w.ns)
            .annotation(USAGE_CPU, cpu).annotation(USAGE_MEM, mem).node(name)
            .zero_termination_grace_period().container(image="busybox").obj())
    yield w
    metrics_cluster.kubectl("delete", "pods", "--all", "-n", w.ns, "--force",
                            "--grace-period=0", "--wait=false", check=False)
    metrics_cluster.kubectl("delete", "namespace", w.ns, "--wait=false", check=False)
    metrics_cluster.kubectl("delete", "node", *w.nodes.values(), "--wait=false", check=False)


async def served(client: ApiClient) -> dict[str, tuple[float, float]]:
    """Every node's (cpu millicores, memory bytes) as the Metrics API serves it now."""
    got = await client.get("/apis/metrics.k8s.io/v1beta1/nodes")
    return {i["metadata"]["name"]: (float(res.parse_quantity(i["usage"]["cpu"]) * 1000),
                                    float(res.parse_quantity(i["usage"]["memory"])))
            for i in got.get("items") or ()}


async def settled(client: ApiClient, w: World,
                  want: dict[str, float] | None = None) -> dict[str, tuple[float, float]]:
    """Wait until the API serves each node's load pod's cpu (within 5%); return the usage."""
    want = want or {k: float(res.to_int("cpu", LOADS[k][0])) for k in LOADS}

    async def check() -> dict[str, tuple[float, float]] | None:
        now = await served(client)
        ok = all(w.nodes[k] in now and abs(now[w.nodes[k]][0] - v) <= 0.05 * v
                 for k, v in want.items())
        return {k: now[n] for k, n in w.nodes.items()} if ok else None

    result: dict[str, tuple[float, float]] = await eventually(
        check, timeout=120, what=f"the Metrics API serving {want}")
    return result


def policy(name: str, scorer: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
            "metadata": {"name": name, "generation": 1, "uid": unique("uid")},
            # The fencing filters stay (the operator's default tenancy refuses a policy
            # without them); the nodes here have no taints and none is cordoned.
            "spec": {"schedulerName": name, "defaultPlugins": False,
                     "filters": [{"name": "NodeUnschedulable"}, {"name": "TaintToleration"},
                                 {"name": "NodeAffinity"}, {"name": "NodeResourcesFit"}],
                     "scorers": [{"name": scorer, "weight": 1,
                                  "args": {"metricsIntervalSeconds": INTERVAL, **args}}]}}


def run(cluster: Cluster, body: Callable[[Engine, ApiClient], Awaitable[None]]) -> None:
    async def main() -> None:
        client = ApiClient.from_kubeconfig(cluster.kubeconfig)
        engine = Engine(client)
        try:
            await engine.start()
            await body(engine, client)
        finally:
            await engine.stop()
            await client.close()

    asyncio.run(main())


def pod(w: World, name: str, scheduler: str, cpu: str, memory: str | None = None
        ) -> dict[str, Any]:
    requests = {"cpu": cpu, **({"memory": memory} if memory else {})}
    return (make_pod().typed().name(name).namespace(w.ns).scheduler(scheduler)
            .node_selector({RUN: w.rid}).zero_termination_grace_period()
            .container(image="busybox", requests=requests).obj())


async def watcher_has_loads(engine: Engine, w: World) -> bool:
    return all(engine.node_metrics.node_load(n) is not None for n in w.nodes.values())


async def watcher_cpu(engine: Engine, node: str) -> float:
    load = engine.node_metrics.node_load(node)
    return load.cpu.latest if load is not None else 0.0


def go_round(x: float) -> int:
    return int(x + 0.5)


# -- the formulas, by hand ---------------------------------------------------------------

def tlp_score(usage_m: float, pod_m: float, in_flight_m: float, target: float) -> int:
    u = 100 * (usage_m + pod_m + in_flight_m) / NODE_CPU
    if u > target:
        return 0 if u > 100 else go_round(target * (100 - u) / (100 - target))
    return go_round((100 - target) * u / target + target)


def lvrb_score(cpu_m: float, mem: float, req_m: float, req_mem: float) -> float:
    """Margin 1, sensitivity 1, a settled node (deviation 0): min over cpu and memory of
    (1 - (mu + sigma) / 2) * 100."""
    def one(used: float, req: float, cap: float) -> float:
        mu = min(max((used + req) / cap, 0), 1)
        return (1 - mu / 2) * 100
    return min(one(cpu_m, req_m, NODE_CPU), one(mem, req_mem, NODE_MEM))


def argmax(scores: dict[str, float]) -> str:
    best = max(scores.values())
    winners = [k for k, v in scores.items() if v == best]
    assert len(winners) == 1, f"a tie in the hand-computed scores {scores}"
    return winners[0]


# -- the tests ---------------------------------------------------------------------------

def test_load_variation_risk_balancing_spreads_a_burst_over_the_least_used_nodes(
        world: World) -> None:
    w = world
    name = f"{w.rid}-lvrb"

    async def body(engine: Engine, client: ApiClient) -> None:
        await nodes_ready(client, list(w.nodes.values()))
        usage = await settled(client, w)
        engine.apply(load_policy(policy(name, "LoadVariationRiskBalancing", {}), CATALOG))
        await eventually(lambda: watcher_has_loads(engine, w), timeout=30,
                         what="the watcher's first samples")
        # Three pods of 1 cpu / 512Mi at once. Each bound pod is in flight on its node
        # (its usage is not in the sample yet): its request is added to the node's usage.
        placed: list[str] = []
        expected: list[str] = []
        flight = {k: (0.0, 0.0) for k in LOADS}
        for _ in range(3):
            scores = {k: lvrb_score(usage[k][0] + flight[k][0], usage[k][1] + flight[k][1],
                                    1000, 512 * 1024 ** 2) for k in LOADS}
            pick = argmax(scores)
            expected.append(pick)
            flight[pick] = (flight[pick][0] + 1000, flight[pick][1] + 512 * 1024 ** 2)
        for i in range(3):
            await client.post(f"/api/v1/namespaces/{w.ns}/pods",
                              pod(w, f"lvrb-{i}", name, "1", "512Mi"))
        for i in range(3):
            node = await bound_node(client, w.ns, f"lvrb-{i}")
            placed.append(w.kind_of(node))
        # By hand: cold (7.5% + 25%), then warm (25% + 25% beats cold's 7.5% + 50%), then
        # cold again (57.5% against warm's 75%); without the pods in flight all three would
        # go to cold.
        assert expected == ["cold", "warm", "cold"]
        assert placed == expected
        stats = engine.stats(name)
        assert stats.node_metrics is not None and stats.node_metrics[0] is True, stats

    run(w.cluster, body)


def test_target_load_packing_packs_to_the_target_follows_usage_and_reloads(
        world: World) -> None:
    w = world
    name = f"{w.rid}-tlp"

    async def body(engine: Engine, client: ApiClient) -> None:
        await nodes_ready(client, list(w.nodes.values()))
        usage = await settled(client, w)
        engine.apply(load_policy(policy(name, "TargetLoadPacking", {"targetUtilization": 40}),
                                 CATALOG))
        await eventually(lambda: watcher_has_loads(engine, w), timeout=30,
                         what="the watcher's first samples")
        # The pod requests 100m and sets no limit: predicted 150m (x 1.5). The scheduler's
        # own pods bound in this test are in flight (150m each) on their nodes.
        mine: dict[str, int] = dict.fromkeys(LOADS, 0)

        async def place(i: int, target: float, now: dict[str, tuple[float, float]]) -> str:
            scores: dict[str, float] = {
                k: tlp_score(now[k][0], 150, 150 * mine[k], target) for k in LOADS}
            want = argmax(scores)
            await client.post(f"/api/v1/namespaces/{w.ns}/pods",
                              pod(w, f"tlp-{i}", name, "100m"))
            node = await bound_node(client, w.ns, f"tlp-{i}")
            got = w.kind_of(node)
            assert got == want, (scores, now)
            mine[got] += 1
            return got

        # warm (25% -> 28.75%: 83, then 32.5%: 89) is closest below the 40% target; cold
        # (11.25%: 57), hot is over it (66.25%: 23).
        assert [await place(i, 40, usage) for i in range(2)] == ["warm", "warm"]

        # The load on warm rises to 3000m: within one polling interval of the API serving
        # it, the next pod goes to cold, with no restart.
        w.cluster.kubectl("annotate", "pod", "-n", w.ns, "load-warm", f"{USAGE_CPU}=3000m",
                          "--overwrite")
        want = {k: float(res.to_int("cpu", LOADS[k][0])) for k in LOADS}
        want["warm"] = 3000.0
        usage = await settled(client, w, want)
        seen_at = time.monotonic()
        async def watcher_sees_it() -> bool:
            return await watcher_cpu(engine, w.nodes["warm"]) > 2900

        await eventually(watcher_sees_it, timeout=INTERVAL + 3,
                         what="the watcher reading warm's new usage")
        assert time.monotonic() - seen_at <= INTERVAL + 3
        assert await place(2, 40, usage) == "cold"

        # Editing the args hot-reloads: with an 80% target, hot (66.25%: 97) packs.
        engine.apply(load_policy(policy(name, "TargetLoadPacking", {"targetUtilization": 80}),
                                 CATALOG))
        assert await place(3, 80, usage) == "hot"

    run(w.cluster, body)


def test_a_node_without_metrics_gets_the_neutral_score_and_is_reported(
        metrics_cluster: Cluster, world: World) -> None:
    w = world
    name = f"{w.rid}-missing"
    # A node kwok does not manage: no kubelet endpoint, so metrics-server never serves it.
    ghost = f"{w.rid}-ghost"
    manifest = node_manifest(ghost, cpu="4", memory="8Gi", labels={RUN: w.rid})
    manifest["metadata"]["annotations"] = {}
    metrics_cluster.apply(manifest)

    async def body(engine: Engine, client: ApiClient) -> None:
        engine.apply(load_policy(policy(name, "LoadVariationRiskBalancing", {}), CATALOG))
        await eventually(lambda: watcher_has_loads(engine, w), timeout=30,
                         what="the watcher's first samples")
        stats = engine.stats(name)
        assert stats.node_metrics is not None
        ok, reason, message = stats.node_metrics
        assert (ok, reason) == (False, "NodesWithoutMetrics"), stats.node_metrics
        assert f"no metrics for node {ghost} (never seen)" in message
        # The ghost scores 0 (Trimaran's minimum), so a pod goes to a node with metrics.
        await client.post(f"/api/v1/namespaces/{w.ns}/pods",
                          pod(w, "m-0", name, "100m"))
        assert await bound_node(client, w.ns, "m-0") != ghost

    try:
        run(metrics_cluster, body)
    finally:
        metrics_cluster.kubectl("delete", "node", ghost, "--wait=false", check=False)


def test_the_operator_reads_usage_as_its_service_account_reports_it_and_reloads_an_edit(
        metrics_cluster: Cluster, world: World, tmp_path: Path) -> None:
    """`polsched run` with manifests/rbac's permissions (metrics.k8s.io nodes included):
    the policy's status says MetricsAvailable=True, and a `kubectl patch` of the scorer's
    args (TargetLoadPacking's target 40% -> 80%) moves the next pod where the formula
    says, with no restart."""
    from tests.e2e.operators import POLSCHED, Harness, wait_for

    w = world
    h = Harness(metrics_cluster, tmp_path)
    name = f"{w.rid}-op"
    body = policy(name, "TargetLoadPacking", {"targetUtilization": 40})
    del body["metadata"]["generation"], body["metadata"]["uid"]
    try:
        h.operator(f"{w.rid}-operator")
        h.apply_policy(body)
        h.wait_ready(name, timeout=60)
        fresh = wait_for(lambda: h.condition(name, "MetricsAvailable").get("status") == "True"
                         and h.condition(name, "MetricsAvailable"), 60,
                         "MetricsAvailable=True on the policy")
        assert fresh["reason"] == "MetricsFresh", fresh

        # The usage now (earlier tests of this module changed warm's), as served.
        want = {k: float(res.to_int("cpu", metrics_cluster.kubectl_json(
            "get", "pod", "-n", w.ns, f"load-{k}")["metadata"]["annotations"][USAGE_CPU]))
            for k in LOADS}

        async def read() -> dict[str, tuple[float, float]]:
            client = ApiClient.from_kubeconfig(metrics_cluster.kubeconfig)
            try:
                return await settled(client, w, want)
            finally:
                await client.close()

        usage = asyncio.run(read())

        def place(pod_name: str) -> str:
            metrics_cluster.apply(pod(w, pod_name, name, "100m"))
            node = wait_for(lambda: metrics_cluster.kubectl_json(
                "get", "pod", "-n", w.ns, pod_name)["spec"].get("nodeName"), 60,
                f"{pod_name} bound")
            return w.kind_of(str(node))

        # The operator's watcher counts as in flight only the pods it sees arrive: op-0.
        first = argmax({k: tlp_score(usage[k][0], 150, 0, 40) for k in LOADS})
        assert place("op-0") == first
        metrics_cluster.kubectl("patch", "schedulingpolicy", name, "--type=json", "-p",
                                '[{"op": "replace", "path": "/spec/scorers/0/args/'
                                'targetUtilization", "value": 80}]')
        wait_for(lambda: (h.status(name).get("observedGeneration") or 0) >= 2, 60,
                 "the edit observed")
        second = argmax({k: tlp_score(usage[k][0], 150, 150 if k == first else 0, 80)
                         for k in LOADS})
        assert second != first  # the edit is what moves it
        assert place("op-1") == second

        # `polsched explain` shows the usage the scorers read, with the sample's age.
        out = subprocess.run([POLSCHED, "explain", "op-1", "-n", w.ns], capture_output=True,
                             text=True, timeout=60,
                             env={**os.environ, "KUBECONFIG": metrics_cluster.kubeconfig})
        assert out.returncode == 0, out.stderr
        assert "Node usage the load-aware scorers read (Metrics API):" in out.stdout
        row = next(line.split() for line in out.stdout.splitlines()
                   if line.startswith(w.nodes["hot"] + " ") and "%" in line)
        assert abs(float(row[1].rstrip("m")) - usage["hot"][0]) <= 0.05 * usage["hot"][0]
        assert row[-1].endswith("s")  # the sample's age

        # Offline preview: `polsched snapshot --node-metrics`, then `polsched simulate`
        # of a pending pod with the 80% target decides as the live scheduler did.
        env = {**os.environ, "KUBECONFIG": metrics_cluster.kubeconfig}
        snap = tmp_path / "cluster.json"
        got = subprocess.run([POLSCHED, "snapshot", "--node-metrics", "--out", str(snap)],
                             capture_output=True, text=True, timeout=60, env=env)
        assert got.returncode == 0, got.stderr
        assert '"kind": "NodeMetrics"' in snap.read_text()
        metrics_cluster.apply(pod(w, "op-preview", "nobody-schedules-this", "100m"))
        candidate = tmp_path / "candidate.json"
        edited = policy(name, "TargetLoadPacking", {"targetUtilization": 80})
        edited["spec"]["schedulerName"] = "nobody-schedules-this"
        candidate.write_text(json.dumps(edited))
        got = subprocess.run([POLSCHED, "simulate", "-f", str(candidate), "--snapshot",
                              "live", "--baseline", "none", "-o", "json"],
                             capture_output=True, text=True, timeout=120, env=env)
        assert got.returncode == 0, got.stderr
        decided = {p["name"]: p["node"] for p in json.loads(got.stdout)["pods"]}
        # The live cluster's pods, op-0 and op-1 included, are bound already, and their
        # usage is in the sample (not in flight): by hand again.
        want_preview = argmax({k: tlp_score(usage[k][0], 150, 0, 80) for k in LOADS})
        assert decided["op-preview"] == w.nodes[want_preview]
    finally:
        h.reset()
