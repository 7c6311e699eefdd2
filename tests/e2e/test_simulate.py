"""What-if before apply, on a real API server with the operator running:

- `polsched snapshot` of the live cluster, then `polsched simulate` of a changed policy
  against that file, gives exactly the decisions the operator makes once the change is
  applied, pod by pod;
- a simulate run (from the file, and live) changes nothing in the cluster: the pods, the
  policy and the namespace's events keep their resourceVersions;
- a shadow policy's agreement counters match the truth on a workload where it disagrees
  with the live policy on a known set of pods, and deleting it leaves no trace.

Every decision's top score is unique (NodeLabelValue on distinct ranks at weight 100
outweighs all default scorers together), so no tie-break draw can make two runs differ.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.builders import make_pod
from tests.conftest import Cluster, NodeFactory, unique
from tests.e2e.operators import POLSCHED, Harness, response_json, wait_for

pytestmark = pytest.mark.e2e

RUN = "e2e.polsched.io/run"
RANK = "e2e.polsched.io/rank"


def ranked_policy(name: str, rid: str, *, reverse: bool = False, paused: bool = False,
                  **spec: Any) -> dict[str, Any]:
    """Only this run's nodes; the highest rank wins (the lowest with `reverse`)."""
    return {
        "apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
        "metadata": {"name": name},
        "spec": {"schedulerName": rid, "paused": paused,
                 "filters": [{"name": "NodeLabel", "args": {"requirements": [
                     {"key": RUN, "operator": "In", "values": [rid]}]}}],
                 "scorers": [{"name": "NodeLabelValue", "weight": 100,
                              "args": {"key": RANK, "reverse": reverse}}],
                 **spec},
    }


def pod(name: str, scheduler: str, cpu: str, labels: dict[str, str] | None = None
        ) -> dict[str, Any]:
    return (make_pod().typed().name(name).labels(labels or {}).scheduler(scheduler)
            .zero_termination_grace_period()
            .container(image="registry.k8s.io/pause:3.10", requests={"cpu": cpu}).obj())


def polsched(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([POLSCHED, *args], capture_output=True, text=True,
                          env=cluster.env, timeout=120, check=False)


def versions(h: Harness, namespace: str, policy: str) -> dict[str, Any]:
    """resourceVersions of what a simulate run could write: the pods (binds, conditions),
    the namespace's events (and how many) and the policy (status)."""
    events = response_json(h.core.list_namespaced_event(namespace, _preload_content=False))
    return {"pods": {p["metadata"]["name"]: p["metadata"]["resourceVersion"]
                     for p in h.pods(namespace)},
            "events": sorted(e["metadata"]["resourceVersion"] for e in events["items"]),
            "policy": h.policy(policy)["metadata"]["resourceVersion"]}


def test_simulate_from_a_snapshot_matches_the_operator_pod_by_pod(
        harness: Harness, namespace: str, nodes: NodeFactory, tmp_path: Path) -> None:
    h = harness
    rid = unique("sim")
    # Four 1-CPU nodes ranked 1..4; 400m pods: two per node, nine pods, one left over.
    for rank in range(1, 5):
        nodes(f"{rid}-r{rank}", cpu="1", labels={RUN: rid, RANK: str(rank)})
    h.operator(f"{rid}-op")
    current = ranked_policy(rid, rid, paused=True)
    name = h.apply_policy(current)
    h.wait_ready(name, 30)  # the operator's start-up included
    # One at a time, so that the queue's order (creation time, then arrival) is the
    # names' order in both the operator and the snapshot.
    names = [f"p{i}" for i in range(9)]
    for n in names:
        # The client takes a dict body too; its type hints name only V1Pod.
        h.core.create_namespaced_pod(namespace, pod(n, rid, "400m"), _preload_content=False)  # type: ignore[arg-type]
    wait_for(lambda: h.status(name).get("pendingPods") == 9, 10, "9 pods pending")

    snap = tmp_path / "cluster.json"
    p = polsched(h.cluster, "snapshot", "--out", str(snap))
    assert p.returncode == 0, p.stderr
    assert "podgroups" not in p.stderr  # not served (GenericWorkload off): nothing to say
    objs = json.loads(snap.read_text())["items"]
    assert {o["metadata"]["name"] for o in objs if o["kind"] == "SchedulingPolicy"} >= {name}
    ours = [o for o in objs if o["kind"] == "Pod" and o["metadata"]["namespace"] == namespace]
    assert [o["metadata"]["name"] for o in ours] == names
    assert not any("managedFields" in o["metadata"] for o in objs)

    changed = ranked_policy(rid, rid, reverse=True)  # unpaused, lowest rank first
    candidate = tmp_path / "candidate.yaml"
    candidate.write_text(yaml.safe_dump(changed))
    before = versions(h, namespace, name)
    p = polsched(h.cluster, "simulate", "-f", str(candidate), "--snapshot", str(snap),
                 "-o", "json")
    assert p.returncode == 0, p.stderr
    report = json.loads(p.stdout)
    live_run = polsched(h.cluster, "simulate", "-f", str(candidate), "-o", "json")
    assert live_run.returncode == 0, live_run.stderr
    assert versions(h, namespace, name) == before, "simulate wrote to the cluster"

    simulated = {d["name"]: d["node"] for d in report["pods"] if d["namespace"] == namespace}
    assert simulated == {d["name"]: d["node"] for d in json.loads(live_run.stdout)["pods"]
                         if d["namespace"] == namespace}
    assert report["summary"]["scheduled"] == 8 and report["summary"]["unschedulable"] == 1
    assert [simulated[n] for n in names] == [f"{rid}-r{r}" for r in (1, 1, 2, 2, 3, 3, 4, 4)] \
        + [None]
    # Against the applied (current) policy, every pod that schedules moves.
    assert report["baseline"] == f"the current {name}"
    assert report["summary"]["moved"] == 8

    # Now apply the change for real: the operator must decide exactly that.
    h.cluster.apply(changed)
    wait_for(lambda: len(h.bound(namespace)) == 8, 20, "8 pods bound")
    wait_for(lambda: h.status(name).get("unschedulableAttempts", 0) >= 1, 10,
             "the ninth pod found unschedulable")
    bound = h.bound(namespace)
    assert {n: bound.get(n) for n in names} == simulated


def test_shadow_agreement_counters_match_the_truth(
        harness: Harness, namespace: str, nodes: NodeFactory) -> None:
    h = harness
    rid = unique("shadow")
    for rank in range(1, 5):
        nodes(f"{rid}-r{rank}", cpu="32", labels={RUN: rid, RANK: str(rank)})
    top, bottom = f"{rid}-r4", f"{rid}-r1"
    h.operator(f"{rid}-op")
    live = h.apply_policy(ranked_policy(rid, rid, allowedShadows=[f"{rid}-candidate"]))
    h.wait_ready(live, 30)  # the operator's start-up included
    # The candidate sends pods labelled flip=yes to the lowest rank instead (a NodeLabel
    # scorer for them outweighs its NodeLabelValue at weight 10, whose rank gaps of 333
    # still outweigh the default scorers' differences), and finds no node at all for pods
    # labelled gone=yes.
    shadow = ranked_policy(f"{rid}-candidate", rid, shadowOf=live)
    shadow["spec"]["scorers"] = [
        {"name": "NodeLabelValue", "weight": 10, "args": {"key": RANK}},
        {"name": "NodeLabel", "weight": 100, "args": {"preferred": [
            {"weight": 100, "requirement": {"key": RANK, "operator": "In", "values": ["1"]}}]},
         "when": {"podSelector": {"matchLabels": {"flip": "yes"}}}}]
    shadow["spec"]["filters"].append(
        {"name": "NodeLabel", "args": {"requirements": [
            {"key": "no-such-label", "operator": "Exists"}]},
         "when": {"podSelector": {"matchLabels": {"gone": "yes"}}}})
    sname = h.apply_policy(shadow)
    ready = wait_for(lambda: (c := h.condition(sname, "Ready")).get("status") == "True" and c,
                     10, "the shadow Ready")
    assert ready["reason"] == "Shadowing" and live in ready["message"]

    plain = [f"a{i}" for i in range(7)]
    flipped = [f"f{i}" for i in range(3)]
    gone = [f"g{i}" for i in range(2)]
    h.create_pods(namespace, plain, rid)
    h.create_pods(namespace, flipped, rid, labels={"flip": "yes"})
    h.create_pods(namespace, gone, rid, labels={"gone": "yes"})
    wait_for(lambda: len(h.bound(namespace)) == 12, 20, "12 pods bound")
    # The live policy is unchanged by its shadow: every pod on the top-ranked node.
    assert set(h.bound(namespace).values()) == {top}
    st = wait_for(lambda: (s := h.status(sname).get("shadow") or {}).get("decisions") == 12
                  and s, 10, "12 decisions compared")
    assert (st["agreed"], st["differentNode"], st["differentSchedulability"],
            st["skipped"], st["errors"]) == (7, 3, 2, 0, 0), st
    assert st["of"] == live
    last = st["lastDisagreements"]
    assert len(last) == 5
    for d in last:
        pod_name = d["pod"].split("/")[1]
        assert d["live"] == top
        assert d["shadow"] == (bottom if pod_name in flipped else "unschedulable"), d
    # The live policy's own status is untouched by the shadow.
    wait_for(lambda: h.status(live).get("bindsTotal") == 12, 5, "the live bindsTotal 12")
    assert "shadow" not in h.status(live)

    # Deleting the shadow leaves no trace: no more comparisons, nothing on the pods.
    h.cluster.kubectl("delete", "spol", sname)
    h.create_pods(namespace, ["late"], rid, labels={"flip": "yes"})
    wait_for(lambda: len(h.bound(namespace)) == 13, 10, "the late pod bound")
    assert h.bound(namespace)["late"] == top
    for p in h.pods(namespace):
        assert not any(k.startswith("polsched.io/") for k in
                       (p["metadata"].get("annotations") or {})), p["metadata"]
    assert all(n == 1 for n in h.scheduled_events(namespace).values())
    events = response_json(h.core.list_namespaced_event(namespace, _preload_content=False))
    assert not [e for e in events["items"] if sname in json.dumps(e)]
