"""Load-aware policies offline: `polsched simulate` previews them with the NodeMetrics of a
snapshot (`polsched snapshot --node-metrics`), the pods it places counting as in flight,
and `polsched explain` shows the usage it read and the nodes without metrics."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from polsched.commands import cli, snapshot
from tests.builders import make_node, make_pod

pytestmark = pytest.mark.unit

SCHED = "load-aware"


def policy() -> dict[str, Any]:
    return {"apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
            "metadata": {"name": SCHED},
            "spec": {"schedulerName": SCHED, "defaultPlugins": False,
                     "filters": [{"name": "NodeResourcesFit"}],
                     "scorers": [{"name": "LoadVariationRiskBalancing"}]}}


def node(name: str) -> dict[str, Any]:
    return (make_node().typed().name(name)
            .capacity({"cpu": "4", "memory": "8Gi", "pods": "110"}).obj())


def metrics(name: str, cpu: str, memory: str, stamp: str) -> dict[str, Any]:
    return {"apiVersion": "metrics.k8s.io/v1beta1", "kind": "NodeMetrics",
            "metadata": {"name": name}, "timestamp": stamp, "window": "10s",
            "usage": {"cpu": cpu, "memory": memory}}


def pod(name: str, created: str) -> dict[str, Any]:
    return (make_pod().typed().name(name).namespace("default").uid(f"uid-{name}")
            .created(created).scheduler(SCHED)
            .container(image="x", requests={"cpu": "1", "memory": "512Mi"}).phase("Pending")
            .obj())


def objects() -> list[dict[str, Any]]:
    return [node("hot"), node("warm"), node("cold"), node("ghost"),
            metrics("hot", "2500m", "2Gi", "2026-01-01T00:00:50Z"),
            metrics("warm", "1200m", "1Gi", "2026-01-01T00:01:00Z"),
            metrics("cold", "300m", "256Mi", "2026-01-01T00:01:00Z"),
            pod("p1", "2026-01-01T00:00:01Z"), pod("p2", "2026-01-01T00:00:02Z"),
            pod("p3", "2026-01-01T00:00:03Z")]


def test_snapshot_keeps_node_metrics_after_the_pods() -> None:
    doc = snapshot.as_list(objects())
    kinds = [o["kind"] for o in doc["items"]]
    assert kinds == ["Node"] * 4 + ["Pod"] * 3 + ["NodeMetrics"] * 3


def test_simulate_previews_a_load_aware_policy_with_the_snapshot_usage(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    snap = tmp_path / "cluster.json"
    snap.write_text(snapshot.dump(snapshot.as_list(objects()), "json"))
    cand = tmp_path / "policy.yaml"
    cand.write_text(yaml.safe_dump(policy()))
    code = cli.main(["simulate", "-f", str(cand), "--snapshot", str(snap), "-o", "json"])
    out = capsys.readouterr().out
    assert code == 0, out
    placed = {f"{d['namespace']}/{d['name']}": d["node"] for d in json.loads(out)["pods"]}
    # By hand (margin 1, sensitivity 1, one sample: sigma 0): cpu decides, mu =
    # (usage + in flight + 1000m) / 4000m. cold 0.325, then warm 0.55 beats cold's 0.575,
    # then cold 0.575 beats warm's 0.8. ghost has no metrics: score 0.
    assert placed == {"default/p1": "cold", "default/p2": "warm", "default/p3": "cold"}


def test_explain_offline_shows_usage_age_and_the_nodes_without_metrics(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    objs = objects()
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(yaml.safe_dump_all([o for o in objs if o["kind"] != "Pod"]))
    pods = tmp_path / "pod.yaml"
    pods.write_text(yaml.safe_dump(objs[-1]))
    pol = tmp_path / "policy.yaml"
    pol.write_text(yaml.safe_dump(policy()))
    code = cli.main(["explain", "--policy", str(pol), "--nodes", str(nodes), "--pod", str(pods)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "Node usage the load-aware scorers read (Metrics API):" in out
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines()
            if line.split() and line.split()[0] in ("hot", "warm", "cold", "ghost")
            and "%" in line}
    assert rows["hot"] == ["2500m", "(62.5%)", "2048Mi", "(25%)", "10s"]
    assert rows["cold"] == ["300m", "(7.5%)", "256Mi", "(3.1%)", "0s"]
    assert "no metrics for node ghost" in out
    assert "Winner: cold" in out
    code = cli.main(["explain", "--policy", str(pol), "--nodes", str(nodes), "--pod", str(pods),
                     "-o", "json"])
    doc = json.loads(capsys.readouterr().out)
    usage = {u["node"]: u for u in doc["nodeUsage"]}
    assert usage["warm"]["cpuMillicores"] == 1200 and usage["warm"]["sampleAgeSeconds"] == 0
    assert "no metrics for node ghost" in usage["ghost"]["note"]
    scores = {n["name"]: n["scores"]["LoadVariationRiskBalancing"]["raw"]
              for n in doc["nodes"] if n["feasible"]}
    # (1 - mu / 2) * 100 with the pod's 1 cpu: cold 83.75 -> 84, warm 72.5 -> 73 (Go
    # rounds half away from zero), hot 56.25 -> 56; ghost 0.
    assert scores == {"cold": 84, "warm": 73, "hot": 56, "ghost": 0}
