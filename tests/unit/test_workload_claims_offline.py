"""DRAWorkloadResourceClaims offline (`polsched simulate` and `polsched explain`, with the
gate in POLSCHED_FEATURE_GATES as the engine reads it): simulate leaves the claims as the
engine's PreBind would (allocated, reserved for the PodGroup), so the pods after a group
meet its claim allocated; explain says a member's claim is held for its PodGroup."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from polsched.api import load_policy
from polsched.commands.explain import explain
from polsched.plugins import CATALOG
from tests.unit.test_simulate_gangs import NS, SCHED, base, pod, pod_group, simulate

pytestmark = pytest.mark.unit

DRIVER = "gpu.example.com"
GATES = "GenericWorkload=true,DRAWorkloadResourceClaims=true"


def dra(device_node: str) -> list[dict[str, Any]]:
    return [
        {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu"},
         "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}},
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
         "metadata": {"name": f"{device_node}-gpu"},
         "spec": {"driver": DRIVER, "nodeName": device_node, "devices": [{"name": "gpu-0"}],
                  "pool": {"name": device_node, "generation": 1, "resourceSliceCount": 1}}},
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
         "metadata": {"name": "shared", "namespace": NS, "uid": "uid-shared",
                      "resourceVersion": "1"},
         "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
             "deviceClassName": "gpu", "allocationMode": "ExactCount", "count": 1}}]}}}]


def with_claim(p: dict[str, Any], name: str = "gpu") -> dict[str, Any]:
    p["spec"]["resourceClaims"] = [{"name": name, "resourceClaimName": "shared"}]
    return p


def group_with_claim() -> dict[str, Any]:
    g = pod_group("g", 2)
    g["metadata"]["uid"] = "uid-g"
    g["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "shared"}]
    return g


def test_simulate_leaves_the_groups_claim_allocated_for_the_pods_after_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    # n2 is preferred, but the one device is on n1: the gang goes there, and a later pod
    # naming the same claim (not a member) follows the claim's allocation to n1, as it
    # would once the gang's PreBind wrote it, instead of finding it in flight forever.
    monkeypatch.setenv("POLSCHED_FEATURE_GATES", GATES)
    objs = [*base(), *dra("n1"), group_with_claim(),
            with_claim(pod("a", "1", group="g", created=1)),
            with_claim(pod("b", "1", group="g", created=2)),
            with_claim(pod("later", "1", created=3))]
    code, out, err = simulate(tmp_path, capsys, objs)
    assert code == 0, err
    doc = json.loads(out)
    assert {p["name"]: p["node"] for p in doc["pods"]} == {"a": "n1", "b": "n1",
                                                           "later": "n1"}


def test_explain_says_a_members_claim_is_held_for_its_pod_group(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POLSCHED_FEATURE_GATES", GATES)
    objs = dra("n1")
    objs[2]["status"] = {
        "allocation": {"devices": {"results": [{"request": "gpu", "driver": DRIVER,
                                                "pool": "n1", "device": "gpu-0"}]},
                       "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                           {"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}},
        "reservedFor": [{"apiGroup": "scheduling.k8s.io", "resource": "podgroups",
                         "name": "g", "uid": "uid-g"}]}
    policy = load_policy({"apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
                          "metadata": {"name": "p"}, "spec": {"schedulerName": SCHED}},
                         CATALOG)
    nodes = [n for n in base() if n["kind"] == "Node"]
    member = with_claim(pod("a", "1", group="g"))
    report = asyncio.run(explain(policy, member, nodes, objects=[*objs, group_with_claim()]))
    assert report.devices["n2"][0] == (
        "  claim train/shared: already allocated (n1/gpu-0), usable on another node, "
        "reserved for its PodGroup g")
    monkeypatch.setenv("POLSCHED_FEATURE_GATES", "GenericWorkload=true")
    report = asyncio.run(explain(policy, member, nodes, objects=[*objs, group_with_claim()]))
    assert report.devices["n2"][0] == (
        "  claim train/shared: already allocated (n1/gpu-0), usable on another node")
