"""One policy's pathological pods cannot stall another's (issue 36: the time budget, the
fair share of the loop, bounded pods), against the operator run as its ServiceAccount on
a real API server.

The attacker's pods stay within the pod bounds (64 required anti-affinity terms of 64
requirements each, the bounds exactly) but make InterPodAffinity's PreFilter walk every
bound pod for each of 4096 requirements, afresh on every attempt (a namespaceSelector in
the terms keeps the counts from being memoised): about 0.1-1 s an attempt against the
victim's 200 bound pods. The operator runs with --attempt-budget 0.02, so every attacker
attempt ends on the budget. A third pod over the bounds (65 terms) is refused before it
is queued. Meanwhile the victim policy binds all of its pods; the assertions are
properties (all bound, the messages), never times.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import NodeFactory, unique
from tests.e2e.operators import Harness, pod_manifest, response_json, wait_for, zone_policy

pytestmark = pytest.mark.e2e

BUDGET = "0.02"
R = "requiredDuringSchedulingIgnoredDuringExecution"


def expensive_terms(n: int) -> list[dict[str, Any]]:
    """`n` anti-affinity terms that match every pod (64 DoesNotExist requirements each),
    in every namespace through a namespaceSelector (so their counts are not memoised)."""
    return [{"labelSelector": {"matchExpressions": [
                {"key": f"attack.example/k{t}-{j}", "operator": "DoesNotExist"}
                for j in range(64)]},
             "namespaceSelector": {"matchExpressions": [
                 {"key": "kubernetes.io/metadata.name", "operator": "Exists"}]},
             "topologyKey": f"attack.example/t{t}"} for t in range(n)]


def attacker_pod(name: str, scheduler: str, terms: int) -> dict[str, Any]:
    pod = pod_manifest(name, scheduler)
    pod["spec"]["affinity"] = {"podAntiAffinity": {R: expensive_terms(terms)}}
    return pod


def events(h: Harness, namespace: str, pod: str) -> list[str]:
    resp = h.core.list_namespaced_event(namespace, _preload_content=False)
    return [str(e.get("message") or "") for e in response_json(resp)["items"]
            if e.get("reason") == "FailedScheduling" and e["involvedObject"]["name"] == pod]


def pod_scheduled(h: Harness, namespace: str, pod: str) -> dict[str, Any]:
    obj = response_json(h.core.read_namespaced_pod(pod, namespace, _preload_content=False))
    for c in obj.get("status", {}).get("conditions") or ():
        if c.get("type") == "PodScheduled":
            return dict(c)
    return {}


def test_pathological_pods_end_on_the_budget_while_another_policy_binds_all(
        harness: Harness, namespace: str, nodes: NodeFactory) -> None:
    h = harness
    rid = unique("budget")
    for i in range(4):
        nodes(f"{rid}-n{i}", labels={"zone": "a"})
    h.operator(f"{rid}-op", "--attempt-budget", BUDGET)
    victim = h.apply_policy(zone_policy(f"{rid}-victim", "a"))
    attacker = h.apply_policy(zone_policy(f"{rid}-attacker", "a"))
    h.wait_ready(victim)
    h.wait_ready(attacker)
    # The pods the attacker's terms walk: 200 of the victim's, bound first.
    h.create_pods(namespace, [f"v{i}" for i in range(200)], victim)
    wait_for(lambda: len(h.bound(namespace)) >= 200 or None, 120, "200 victim pods bound")

    attackers = [f"attack{i}" for i in range(3)]
    for name in attackers:
        # The client takes a dict body too; its type hints name only V1Pod.
        h.core.create_namespaced_pod(namespace, attacker_pod(name, attacker, 64),  # type: ignore[arg-type]
                                     _preload_content=False)
    h.core.create_namespaced_pod(namespace, attacker_pod("wide", attacker, 65),  # type: ignore[arg-type]
                                 _preload_content=False)
    later = [f"w{i}" for i in range(100)]
    h.create_pods(namespace, later, victim)

    # Every victim pod binds while the attackers' pods are tried and cut off.
    bound = wait_for(lambda: b if len(b := h.bound(namespace)) >= 300 else None, 120,
                     "the victim's 300 pods bound")
    assert set(bound) == {*(f"v{i}" for i in range(200)), *later}

    for name in attackers:
        message = wait_for(lambda n=name: next(  # type: ignore[misc]
            (m for m in events(h, namespace, n) if "time budget" in m), None), 60,
            f"{name}: a FailedScheduling naming the time budget")
        print(f"{name}: {message}")
        assert f"used its time budget of {BUDGET}s (--attempt-budget)" in message
        condition = pod_scheduled(h, namespace, name)
        assert (condition.get("status"), condition.get("reason")) == ("False", "SchedulerError")
        assert "time budget" in str(condition.get("message"))

    refused = wait_for(lambda: (c := pod_scheduled(h, namespace, "wide")).get("message")
                       and c, 60, "the pod over the bounds refused")
    print("wide:", refused["message"])
    assert refused["reason"] == "Unschedulable"
    assert str(refused["message"]).startswith(
        f"spec.affinity.podAntiAffinity.{R} has 65 terms, over the bound of 64 ")
    assert any("over the bound of 64" in m for m in events(h, namespace, "wide"))
    assert not set(h.bound(namespace)) & {*attackers, "wide"}
