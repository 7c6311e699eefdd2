"""`polsched explain` offline: the scheduler's pipeline run over files, every node's
filter verdict and every scorer's raw/normalized/weighted score shown, and the winner."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from polsched.api import load_policy
from polsched.commands import cli
from polsched.commands.explain import explain, read_objects
from polsched.framework.diagnosis import PluginScore
from polsched.plugins import CATALOG
from tests.builders import make_node, make_pod

pytestmark = pytest.mark.unit

KEY = "priority.lixueduan.com"
POLICY: dict[str, Any] = {
    "apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
    "metadata": {"name": "label-priority"},
    "spec": {"filters": [{"name": "NodeLabel",
                          "args": {"requirements": [{"key": KEY, "operator": "Exists"}]}}],
             "scorers": [{"name": "NodeLabelValue", "weight": 2,
                          "args": {"key": KEY, "default": 0}}]},
}


def node(name: str, labels: dict[str, str] | None = None, cpu: str = "4") -> dict[str, Any]:
    return (make_node().typed().name(name).labels(labels or {})
            .capacity({"cpu": cpu, "memory": "8Gi", "pods": "110"}).obj())


def pod(name: str, cpu: str = "1", node_name: str = "") -> dict[str, Any]:
    p = (make_pod().typed().name(name).namespace("default").uid(name)
         .scheduler("label-priority").container(image="x", requests={"cpu": cpu}))
    if node_name:
        p.node(node_name)
    return p.obj()


NODES = [node("n1", {KEY: "10"}), node("n2", {KEY: "5"}), node("n3")]


def test_winner_rejections_and_the_three_scores() -> None:
    report = asyncio.run(explain(load_policy(POLICY, CATALOG), pod("p"), NODES))
    assert report.winner == "n1"
    assert report.deciding_scorer == "NodeLabelValue"
    by = {n.name: n for n in report.nodes}
    assert by["n3"].rejected is not None and by["n3"].rejected.plugin == "NodeLabel"
    assert by["n1"].rejected is None and by["n2"].rejected is None
    # raw label value, min-max normalized, times weight 2
    assert by["n1"].scores["NodeLabelValue"] == PluginScore(10, 100, 200)
    assert by["n2"].scores["NodeLabelValue"] == PluginScore(5, 0, 0)
    assert by["n1"].total is not None and by["n2"].total is not None
    assert by["n1"].total - by["n2"].total >= 200


def test_bound_pods_are_counted_and_the_pod_itself_is_not() -> None:
    # n1 is full (4 cpu used): the winner becomes n2. The explained pod, already bound to
    # n2, does not count against n2.
    pods = [pod("big", cpu="4", node_name="n1"), pod("p", node_name="n2")]
    report = asyncio.run(explain(load_policy(POLICY, CATALOG), pod("p", node_name="n2"), NODES,
                                 pods))
    by = {n.name: n for n in report.nodes}
    assert by["n1"].rejected is not None
    assert by["n1"].rejected.plugin == "NodeResourcesFit"
    assert "Insufficient cpu" in by["n1"].rejected.reasons
    assert report.winner == "n2"


def test_no_node_fits_gives_kube_schedulers_message() -> None:
    report = asyncio.run(explain(load_policy(POLICY, CATALOG), pod("p", cpu="64"), NODES))
    assert report.winner is None
    assert report.message.startswith("0/3 nodes are available:")


def test_a_pod_over_the_bounds_is_explained_as_the_engine_refuses_it() -> None:
    wide = pod("wide")
    wide["spec"]["tolerations"] = [{"key": f"t{i}", "operator": "Exists"}
                                   for i in range(129)]
    report = asyncio.run(explain(load_policy(POLICY, CATALOG), wide, NODES))
    assert report.winner is None
    assert report.message.startswith("spec.tolerations has 129 tolerations, over the bound "
                                      "of 128 ")
    assert [n.name for n in report.nodes] == ["n1", "n2", "n3"]


def test_cli_table_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump(POLICY))
    # nodes as a List, the pod as one of several documents
    (tmp_path / "nodes.json").write_text(json.dumps({"kind": "List", "items": NODES}))
    (tmp_path / "pod.yaml").write_text(yaml.safe_dump_all([pod("other"), pod("p")]))
    base = ["explain", "--policy", str(tmp_path / "policy.yaml"), "--nodes",
            str(tmp_path / "nodes.json"), "--pod", str(tmp_path / "pod.yaml"), "p"]
    assert cli.main(base) == 0
    out = capsys.readouterr().out
    assert "Winner: n1 (deciding scorer: NodeLabelValue)" in out
    assert "NodeLabel" in out and "10/100/200" in out
    assert cli.main([*base, "-o", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["pod"] == "default/p"
    assert data["winner"] == "n1"
    n3 = next(n for n in data["nodes"] if n["name"] == "n3")
    assert n3["feasible"] is False and n3["filter"]["plugin"] == "NodeLabel"


def test_cli_says_what_is_missing(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["explain", "--nodes", "n.yaml"]) == 1
    assert "--policy, --pod" in capsys.readouterr().err


def test_read_objects_rejects_non_objects(tmp_path: Path) -> None:
    f = tmp_path / "x.yaml"
    f.write_text("- 1\n- 2\n")
    with pytest.raises(Exception, match="expected a Kubernetes object"):
        read_objects(str(f))


def test_a_preemptor_is_shown_its_candidates_victims_pdbs_and_the_deciding_rule(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def prio(p: dict[str, Any], value: int, labels: dict[str, str] | None = None
             ) -> dict[str, Any]:
        p["spec"]["priority"] = value
        p["metadata"]["labels"] = labels or {}
        return p

    policy = {"apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
              "metadata": {"name": "label-priority"}, "spec": {}}
    objs = [node("a", cpu="2"), node("b", cpu="2"), node("c", cpu="2"),
            prio(pod("a1", node_name="a"), 1), prio(pod("a2", node_name="a"), 1),
            prio(pod("b1", "2", node_name="b"), 1, {"app": "db"}),
            prio(pod("c1", "2", node_name="c"), 1),
            {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
             "metadata": {"name": "db", "namespace": "default"},
             "spec": {"selector": {"matchLabels": {"app": "db"}}},
             "status": {"disruptionsAllowed": 0}}]
    files = {"policy": [policy], "nodes": objs, "pod": [prio(pod("hi", "2"), 1000)]}
    paths = {k: str(tmp_path / f"{k}.yaml") for k in files}
    for k, docs in files.items():
        Path(paths[k]).write_text(yaml.safe_dump_all(docs))
    assert cli.main(["explain", "--policy", paths["policy"], "--nodes", paths["nodes"],
                     "--pod", paths["pod"], "-o", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    pre = out["preemption"]
    assert pre["chosen"] == "c"
    # a (2 victims) and c (1) break no PDB, b does; the same victim priorities: the sum
    assert pre["decidingRule"] == "smallest sum of victim priorities"
    by = {c["node"]: c for c in pre["candidates"]}
    assert [v["pod"] for v in by["c"]["victims"]] == ["default/c1"]
    assert by["b"]["numPDBViolations"] == 1
    assert by["b"]["victims"][0]["pdbViolations"] == ["default/db"]
    assert len(by["a"]["victims"]) == 2
    assert cli.main(["explain", "--policy", paths["policy"], "--nodes", paths["nodes"],
                     "--pod", paths["pod"]]) == 0
    text = capsys.readouterr().out
    assert "Preemption (DefaultPreemption):" in text
    assert "Nominated: c, evicting default/c1 (deciding rule:" in text
    assert "1 (default/b1 breaks default/db)" in text


def test_a_bound_pod_is_decided_again_without_its_old_nomination() -> None:
    """A bound pod is explained as a new pending pod: its spec.nodeName and the status its
    last decision left (phase, conditions, nominatedNodeName) are dropped. A stale
    nominatedNodeName would make DefaultPreemption find the pod ineligible, as if it still
    waited on that node for a victim terminating there (PodEligibleToPreemptOthers)."""
    def prio(p: dict[str, Any], value: int) -> dict[str, Any]:
        p["spec"]["priority"] = value
        return p

    dying = prio(pod("dying", "2", node_name="a"), 1)
    dying["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    dying["status"] = {"conditions": [{"type": "DisruptionTarget", "status": "True",
                                       "reason": "PreemptionByScheduler"}]}
    bound = prio(pod("hi", "2", node_name="gone"), 1000)  # its node was deleted since
    bound["status"] = {"phase": "Running", "nominatedNodeName": "a",
                       "conditions": [{"type": "PodScheduled", "status": "True"}]}
    policy = {"apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
              "metadata": {"name": "label-priority"}, "spec": {}}
    report = asyncio.run(explain(load_policy(policy, CATALOG), bound,
                                 [node("a", cpu="2"), node("b", cpu="2")],
                                 [dying, prio(pod("b1", "2", node_name="b"), 1)]))
    assert report.winner is None
    assert report.preemption is not None
    assert report.preemption.not_eligible == ""
    assert report.preemption.chosen in ("a", "b")
    assert bound["spec"]["nodeName"] == "gone"  # the object given is left as it was
    assert bound["status"]["nominatedNodeName"] == "a"


# -- DRA: the device-level answer ------------------------------------------------------------
def test_a_gpu_pod_gets_every_devices_verdict_per_node() -> None:
    """Why is my GPU pod Pending: per node, each device with the first check it fails
    (in use, the class's or the request's selector, a taint), or a candidate; and the
    devices the allocator picks where the claims fit."""
    driver = "gpu.example.com"
    gpu_class = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
                 "metadata": {"name": "gpu"},
                 "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]}}

    def gpu_slice(n: str, devices: list[dict[str, Any]]) -> dict[str, Any]:
        return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                "metadata": {"name": f"{n}-gpu"},
                "spec": {"driver": driver, "nodeName": n, "devices": devices,
                         "pool": {"name": n, "generation": 1, "resourceSliceCount": 1}}}

    def gpu(name: str, model: str, **extra: Any) -> dict[str, Any]:
        return {"name": name, "attributes": {"model": {"string": model}}, **extra}

    selector = f'device.attributes["{driver}"].model == "h100"'
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "metadata": {"name": "train", "namespace": "default", "uid": "c1"},
             "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                 "deviceClassName": "gpu", "allocationMode": "ExactCount", "count": 1,
                 "selectors": [{"cel": {"expression": selector}}]}}]}}}
    taint = {"key": "broken", "value": "ecc", "effect": "NoSchedule"}
    objects = [gpu_class, claim,
               gpu_slice("n1", [gpu("gpu-0", "a100"), gpu("gpu-1", "h100", taints=[taint])]),
               gpu_slice("n2", [gpu("gpu-0", "h100")])]
    p = pod("trainer")
    p["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "train"}]
    policy = {"apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
              "metadata": {"name": "gpus"}, "spec": {"schedulerName": "label-priority"}}
    report = asyncio.run(explain(load_policy(policy, CATALOG), p, [node("n1"), node("n2")],
                                 objects=objects))
    assert report.winner == "n2"
    assert report.devices["n1"] == [
        "  claim default/train, request gpu: wants 1 device(s) of class gpu; no candidate",
        f"    {driver}/n1/gpu-0: request gpu selector #0 is false: {selector}",
        f"    {driver}/n1/gpu-1: tainted (broken=ecc:NoSchedule), not tolerated",
        "  allocation: none (cannot allocate all claims)"]
    assert report.devices["n2"] == [
        "  claim default/train, request gpu: wants 1 device(s) of class gpu; 1 candidate(s): "
        f"{driver}/n2/gpu-0",
        f"  allocation: default/train/gpu: {driver}/n2/gpu-0"]
    assert report.to_json()["nodes"][0]["devices"] == report.devices["n1"]


def test_an_extended_resource_served_by_devices_gets_its_devices_verdicts() -> None:
    """DRAExtendedResource: per node, where the extended resource comes from (the node's
    device plugin or a DeviceClass's devices), then the special claim's request with
    every device's verdict, as for a claim of the pod's own."""
    driver = "gpu.example.com"
    gpu_class = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
                 "metadata": {"name": "gpu"},
                 "spec": {"extendedResourceName": "example.com/gpu",
                          "selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]}}
    gpu_slice = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                 "metadata": {"name": "n2-gpu"},
                 "spec": {"driver": driver, "nodeName": "n2",
                          "devices": [{"name": "gpu-0"}, {"name": "gpu-1"}],
                          "pool": {"name": "n2", "generation": 1, "resourceSliceCount": 1}}}
    p = pod("trainer")  # requests cpu too: the request's index is the resource's, 1
    p["spec"]["containers"][0]["resources"]["requests"]["example.com/gpu"] = "2"
    with_plugin = node("n1")
    with_plugin["status"]["allocatable"]["example.com/gpu"] = "4"
    policy = {"apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
              "metadata": {"name": "gpus"}, "spec": {"schedulerName": "label-priority"}}
    report = asyncio.run(explain(load_policy(policy, CATALOG), p,
                                 [with_plugin, node("n2"), node("n3")],
                                 objects=[gpu_class, gpu_slice]))
    assert report.devices["n1"] == [
        "  extended resource example.com/gpu (2): from the node's allocatable (a device "
        "plugin), not from devices"]
    assert report.devices["n2"] == [
        "  extended resource example.com/gpu (2): from devices of DeviceClass gpu (the node "
        "does not advertise it)",
        "  claim default/<extended-resources>, request container-0-request-1: wants 2 "
        f"device(s) of class gpu; 2 candidate(s): {driver}/n2/gpu-0, {driver}/n2/gpu-1",
        "  allocation: default/<extended-resources>/container-0-request-1: "
        f"{driver}/n2/gpu-0, default/<extended-resources>/container-0-request-1: "
        f"{driver}/n2/gpu-1"]
    assert report.devices["n3"][-1] == "  allocation: none (cannot allocate all claims)"
