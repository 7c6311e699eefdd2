"""CEL cost bombs against the operator on a real API server (issue 26, finding 1).

A policy author writes a 12-level nested .all() over 10-element lists, once plainly and
once hidden behind // comments holding quotes and brackets (which fooled the old depth
counted over the text). Both are refused from the parsed expression: Valid=False naming
the field through the loader, "denied the request" through the webhook. A third policy's
expression is cheap, but a pod inflates the list it walks: that pod stays Pending with a
FailedScheduling naming the input bound. Meanwhile a plain policy in the same operator
binds every one of its pods: its pace is asserted as a property (all bound while the
others are refused or pending), not as a time.
"""

from __future__ import annotations

import json
import socket
from typing import Any

import pytest

from tests.conftest import NodeFactory, unique
from tests.e2e.operators import (
    GROUP,
    VERSION,
    Harness,
    pod_manifest,
    response_json,
    wait_for,
    zone_policy,
)

pytestmark = pytest.mark.e2e

L10 = "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]"


def bomb(depth: int, hide: bool) -> str:
    e = "true"
    for i in range(depth):
        comment = f" // it's x{i}'s turn: ').all(' ((\n" if hide else " "
        e = f"{L10}.all(x{i},{comment}{e})"
    return e


def expression_policy(name: str, expression: str) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "SchedulingPolicy",
            "metadata": {"name": name},
            "spec": {"schedulerName": name, "filters": [
                {"name": "Expression", "args": {"expression": "true"}},
                {"name": "Expression", "args": {"expression": expression}}]}}


def failed_scheduling(h: Harness, namespace: str, pod: str, containing: str = "") -> str:
    """The message of a FailedScheduling event of `pod` (one containing `containing`)."""
    resp = h.core.list_namespaced_event(namespace, _preload_content=False)
    for e in response_json(resp)["items"]:
        message = str(e.get("message") or "")
        if e.get("reason") == "FailedScheduling" and e["involvedObject"]["name"] == pod \
                and containing in message:
            return message
    return ""


def test_cost_bombs_are_refused_and_another_policy_keeps_binding(
        harness: Harness, namespace: str, nodes: NodeFactory) -> None:
    h = harness
    rid = unique("celbomb")
    for i in range(2):
        nodes(f"{rid}-n{i}", labels={"zone": "a"})
    h.operator(f"{rid}-op")
    plain = h.apply_policy(zone_policy(f"{rid}-plain", "a"))
    bombs = [h.apply_policy(expression_policy(f"{rid}-bomb", bomb(12, hide=False))),
             h.apply_policy(expression_policy(f"{rid}-hidden", bomb(12, hide=True)))]
    walker = h.apply_policy(expression_policy(
        f"{rid}-walker", "pod.spec.containers.all(c, c.image != 'forbidden')"))
    for name in bombs:
        def refused(n: str = name) -> dict[str, Any] | None:
            c = h.condition(n, "Valid")
            return c if c.get("status") == "False" else None

        valid = wait_for(refused, 30, f"{name} Valid=False")
        print(f"{name}: Valid=False: {valid['message']}")
        assert valid["reason"] == "InvalidSpec"
        assert "spec.filters[1].args.expression: estimated cost" in valid["message"]
        assert "exceeds the budget 100000" in valid["message"]
    h.wait_ready(walker)
    h.wait_ready(plain)

    # A pod inflating the list the walker's cheap expression walks: 65 containers > 64.
    inflated = pod_manifest("inflated", walker)
    base = inflated["spec"]["containers"][0]
    inflated["spec"]["containers"] = [{**base, "name": f"c{i}"} for i in range(65)]
    # The client takes a dict body too; its type hints name only V1Pod.
    h.core.create_namespaced_pod(namespace, inflated, _preload_content=False)  # type: ignore[arg-type]
    h.create_pod(namespace, "fits", walker)  # the same policy still binds a normal pod
    h.create_pods(namespace, [f"p{i}" for i in range(20)], plain)

    message = wait_for(lambda: failed_scheduling(h, namespace, "inflated"), 30,
                       "FailedScheduling for the inflated pod")
    print("inflated pod:", message)
    assert "pod.spec.containers has 65 items; the bound is 64" in message
    bound = wait_for(lambda: b if len(b := h.bound(namespace)) >= 21 else None, 60,
                     "the plain policy's 20 pods and the walker's normal pod bound")
    assert set(bound) == {"fits", *(f"p{i}" for i in range(20))}
    assert "inflated" not in h.bound(namespace)
    # the plain policy's status counts its binds: the bombs did not stop its loop
    wait_for(lambda: h.status(plain).get("boundPods", 0) >= 20, 30,
             "the plain policy's status counting 20 bound pods")


def test_a_pod_that_makes_a_cheap_expression_expensive_is_cut_off_at_run_time(
        harness: Harness, namespace: str, nodes: NodeFactory) -> None:
    """The expression loads (static estimate 65989 of 100000); a pod at the bounds (16
    containers of 35 env vars, a view of ~1800 values converted for every node) costs
    ~44000 units a node, so its attempt's budget of 1000000 runs out after ~22 of the 30
    nodes: the rest are not evaluated and the FailedScheduling says so. A plain policy
    binds all its pods meanwhile."""
    h = harness
    rid = unique("celrun")
    for i in range(30):
        nodes(f"{rid}-n{i:02d}", labels={"zone": "a"})
    h.operator(f"{rid}-op")
    plain = h.apply_policy(zone_policy(f"{rid}-plain", "a"))
    heavy = h.apply_policy(expression_policy(
        f"{rid}-heavy", "pod.spec.containers.all(c, c.env.all(v, v.name == node.metadata.name))"))
    h.wait_ready(heavy)
    h.wait_ready(plain)
    pod = pod_manifest("heavy", heavy)
    base = pod["spec"]["containers"][0]
    pod["spec"]["containers"] = [
        {**base, "name": f"c{i}", "env": [{"name": f"E{j}", "value": "x"} for j in range(35)]}
        for i in range(16)]
    # The client takes a dict body too; its type hints name only V1Pod.
    h.core.create_namespaced_pod(namespace, pod, _preload_content=False)  # type: ignore[arg-type]
    h.create_pods(namespace, [f"p{i}" for i in range(20)], plain)
    message = wait_for(lambda: failed_scheduling(h, namespace, "heavy", "budget"), 60,
                       "FailedScheduling naming the budget for the heavy pod")
    print("heavy pod:", message)
    assert "node(s) were not evaluated: the pod's Expression evaluations used their " \
           "budget of 1000000 cost units for one scheduling attempt" in message
    assert "node(s) didn't match expression" in message  # the nodes it did evaluate
    bound = wait_for(lambda: b if len(b := h.bound(namespace)) >= 20 else None, 60,
                     "the plain policy's 20 pods bound")
    assert set(bound) == {f"p{i}" for i in range(20)}


def test_the_webhook_refuses_the_hidden_bomb_naming_the_field(harness: Harness) -> None:
    h = harness
    rid = unique("celhook")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    h.operator(f"{rid}-op", "--webhook-listen", f"127.0.0.1:{port}")
    try:
        def configured() -> bool:
            p = h.cluster.kubectl("get", "validatingwebhookconfiguration", "polsched.io",
                                  "-o", "jsonpath={.webhooks[*].clientConfig.url}", check=False)
            return f"127.0.0.1:{port}" in p.stdout
        wait_for(configured, 30, "the ValidatingWebhookConfiguration", interval=0.2)
        body = expression_policy(f"{rid}-hidden", bomb(12, hide=True))
        p = h.cluster.kubectl("apply", "-f", "-", input=json.dumps(body), check=False)
        print("kubectl apply of the hidden bomb:", p.stderr.strip())
        assert p.returncode != 0
        assert "denied the request" in p.stderr
        assert "spec.filters[1].args.expression: estimated cost" in p.stderr
    finally:
        h.cluster.kubectl("delete", "validatingwebhookconfiguration", "polsched.io",
                          "--ignore-not-found", check=False)
