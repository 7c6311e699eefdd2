"""`polsched explain` agrees with the scheduler: the engine binds a pod on the real API
server, then explain (live, and offline from the same objects) names the same node."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from polsched.cluster.client import ApiClient
from tests.conftest import Cluster, NodeFactory, unique
from tests.e2e.scheduling import (
    RUN,
    bound_node,
    example,
    nodes_ready,
    pod_manifest,
    run_engine,
    write_yaml,
)

pytestmark = pytest.mark.e2e

POLSCHED = Path(sys.executable).parent / "polsched"
PRIORITY = "priority.lixueduan.com"


def explain(cluster: Cluster, *args: str) -> dict[str, object]:
    p = subprocess.run([str(POLSCHED), "explain", *args, "-o", "json"], capture_output=True,
                       text=True, env=cluster.env, timeout=60)
    assert p.returncode == 0, p.stderr
    out: dict[str, object] = json.loads(p.stdout)
    return out


def test_explain_names_the_node_the_scheduler_bound_to(
        cluster: Cluster, namespace: str, nodes: NodeFactory, tmp_path: Path) -> None:
    rid = unique("expl")
    low = nodes(f"{rid}-low", labels={RUN: rid, PRIORITY: "1"})
    high = nodes(f"{rid}-high", labels={RUN: rid, PRIORITY: "10"})
    mid = nodes(f"{rid}-mid", labels={RUN: rid, PRIORITY: "5"})
    unlabelled = nodes(f"{rid}-none", labels={RUN: rid})
    policy = example("label-priority.yaml", f"{rid}-sched")
    # In the cluster too, so that live explain finds it by the pod's schedulerName; no
    # operator runs in this test, the engine below schedules.
    cluster.apply(policy)
    pod = pod_manifest(namespace, "web", f"{rid}-sched", rid, cpu="100m")
    bound: list[str] = []

    async def body(client: ApiClient) -> None:
        await nodes_ready(client, [low, high, mid, unlabelled])
        await client.post(f"/api/v1/namespaces/{namespace}/pods", pod)
        bound.append(await bound_node(client, namespace, "web"))

    try:
        run_engine(cluster, [policy], body)
        assert bound == [high]

        live = explain(cluster, "web", "-n", namespace)
        assert live["winner"] == bound[0]
        assert live["decidingScorer"] == "NodeLabelValue"
        verdicts = {n["name"]: n for n in live["nodes"]}  # type: ignore[attr-defined]
        assert verdicts[unlabelled]["filter"]["plugin"] == "NodeLabel"
        assert verdicts[high]["scores"]["NodeLabelValue"] == {
            "raw": 10, "normalized": 100, "weighted": 200}

        # Offline, from the same objects as files.
        ours = [cluster.kubectl_json("get", "node", n) for n in (low, high, mid, unlabelled)]
        got = cluster.kubectl_json("get", "pod", "web", "-n", namespace)
        offline = explain(
            cluster, "--policy", write_yaml(tmp_path / "policy.yaml", [policy]),
            "--nodes", write_yaml(tmp_path / "nodes.yaml", ours),
            "--pod", write_yaml(tmp_path / "pod.yaml", [got]))
        assert offline["winner"] == bound[0]
    finally:
        cluster.kubectl("delete", "schedulingpolicy", policy["metadata"]["name"],
                        "--wait=false", check=False)
