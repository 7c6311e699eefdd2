"""The operator under a client-side budget on a real API server (kube-scheduler's
clientConnection qps/burst, --kube-api-qps/--kube-api-burst): with a tiny one it waits
for its tokens, says so as client-go does, and still binds every pod exactly once, with
its events and status."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Cluster, NodeFactory, unique
from tests.e2e.operators import Harness, wait_for, zone_policy

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def harness(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    h = Harness(cluster, Path(tmp_path_factory.mktemp("polsched-budget")))
    yield h
    h.reset()


def test_a_small_budget_slows_the_operator_but_binds_every_pod_once(
        harness: Harness, namespace: str, nodes: NodeFactory) -> None:
    h = harness
    rid = unique("budget")
    for i in range(2):
        nodes(f"{rid}-a{i}", labels={"zone": "a"})
    op = h.operator(f"{rid}-op", "--kube-api-qps", "5", "--kube-api-burst", "2",
                    "--metrics-listen", "")
    name = h.apply_policy(zone_policy(rid, "a"))
    h.wait_ready(name, 90)
    pods = [f"p{i}" for i in range(20)]
    h.create_pods(namespace, pods, rid)
    wait_for(lambda: len(h.bound(namespace)) == 20, 120, "20 pods bound")
    # Its start alone (a list and a watch per resource) is more than a burst of 2.
    assert "client-side throttling at QPS 5, burst 2" in op.log()
    wait_for(lambda: h.scheduled_events(namespace) == {p: 1 for p in pods}, 60,
             "one Scheduled event per pod")
    wait_for(lambda: h.status(name).get("boundPods") == 20, 60, "status counts 20 binds")
    assert op.alive()
