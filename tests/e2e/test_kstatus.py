"""A policy's conditions as GitOps tools read them (kstatus): `kubectl wait
--for=condition=Ready` after an edit returns only once the new generation runs, and the
Argo CD health check (manifests/argocd) says Healthy, Progressing and Degraded for the
statuses the operator really writes."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from tests.conftest import NodeFactory, unique
from tests.e2e.argocd import health
from tests.e2e.operators import Harness, wait_for, zone_policy


def kubectl_wait_ready(h: Harness, name: str) -> subprocess.Popen[str]:
    return subprocess.Popen(["kubectl", "--kubeconfig", h.cluster.kubeconfig, "wait",
                             "--for=condition=Ready", f"spol/{name}", "--timeout=60s"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_kubectl_wait_after_an_edit_waits_for_the_new_generation(
        harness: Harness, nodes: NodeFactory) -> None:
    h = harness
    rid = unique("kwait")
    nodes(f"{rid}-a", labels={"zone": "a"})
    nodes(f"{rid}-b", labels={"zone": "b"})
    identity = f"{rid}-op"
    op = h.operator(identity)
    name = h.apply_policy(zone_policy(rid, "a"))
    h.wait_ready(name, 30)  # includes the operator's start-up
    seen: dict[str, dict[str, Any]] = {"healthy": h.policy(name)}

    # The edit lands while no operator runs: the status still says generation 1 is Ready.
    op.stop()
    h.cluster.apply(zone_policy(rid, "b"))
    edited = h.policy(name)
    assert edited["metadata"]["generation"] == 2
    assert edited["status"]["observedGeneration"] == 1
    assert h.condition(name, "Ready")["status"] == "True"
    seen["progressing"] = edited
    waiter = kubectl_wait_ready(h, name)
    try:
        # kubectl has read the object (a Ready=True condition of generation 1) and waits.
        wait_for(lambda: waiter.poll() is None and h.policy(name)["metadata"]["generation"] == 2,
                 5, "kubectl wait running")
        with pytest.raises(subprocess.TimeoutExpired):
            waiter.wait(3)  # bounded: it must still be waiting, not a timing assertion
        h.operator(identity)  # the same identity takes its Lease back at once
        out, err = waiter.communicate(timeout=60)
    finally:
        if waiter.poll() is None:
            waiter.kill()
    assert waiter.returncode == 0, err
    print("kubectl wait:", out.strip())
    status = h.status(name)
    assert status["observedGeneration"] == 2
    ready = h.condition(name, "Ready")
    assert (ready["status"], ready["observedGeneration"]) == ("True", 2)
    seen["healthy again"] = h.policy(name)

    # An edit that does not load: Ready=False and Stalled=True for generation 3.
    bad = zone_policy(rid, "a")
    bad["spec"]["filters"].append(
        {"name": "Expression", "args": {"expression": "node.metadata.name =="}})
    h.cluster.apply(bad)
    wait_for(lambda: h.condition(name, "Stalled").get("observedGeneration") == 3, 10,
             "Stalled for generation 3")
    seen["degraded"] = h.policy(name)
    p = subprocess.run(["kubectl", "--kubeconfig", h.cluster.kubeconfig, "wait",
                        "--for=condition=Ready", f"spol/{name}", "--timeout=2s"],
                       capture_output=True, text=True)
    assert p.returncode != 0  # never Ready: generation 3 does not run

    # The Argo CD health check on those real objects, with a real Lua interpreter.
    verdicts = {k: health(obj) for k, obj in seen.items()}
    print(json.dumps(verdicts, indent=1))
    assert verdicts["healthy"][0] == "Healthy"
    assert verdicts["progressing"][0] == "Progressing"
    assert "generation 2" in verdicts["progressing"][1]
    assert verdicts["healthy again"][0] == "Healthy"
    assert verdicts["degraded"][0] == "Degraded"
    assert "spec.filters[1].args.expression" in verdicts["degraded"][1]


def test_argocd_health_of_a_policy_nobody_has_seen_is_progressing() -> None:
    assert health({"apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
                   "metadata": {"name": "x", "generation": 1}, "spec": {}})[0] == "Progressing"
