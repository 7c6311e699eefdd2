"""The held-out check of `polsched simulate`: twelve pending pods created within one
second, a snapshot, a simulation of a policy not yet applied, then the policy applied to
the running operator: every bind is the one predicted.

The pods' names do not sort in their creation order (sim-p10 before sim-p2), so a
simulation that breaks the tie of equal creationTimestamps by name predicts other binds:
the engine takes them in the order its watch delivered them, etcd's creation order, which
the snapshot keeps (each pending pod's creation resourceVersion).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.conftest import Cluster, NodeFactory, unique
from tests.e2e.operators import Harness, wait_for
from tests.e2e.test_simulate import RANK, RUN, pod, polsched, ranked_policy

pytestmark = pytest.mark.e2e


@pytest.fixture
def harness(cluster: Cluster, tmp_path: Path) -> Iterator[Harness]:
    h = Harness(cluster, tmp_path)
    yield h
    h.reset()


def test_twelve_pods_of_one_second_bind_as_simulated(
        harness: Harness, namespace: str, nodes: NodeFactory, tmp_path: Path) -> None:
    h = harness
    rid = unique("order")
    # Six 1-CPU nodes ranked 1..6 and twelve 500m pods: the top rank takes the first two
    # pods the scheduler pops, the next rank the next two, and so on.
    for rank in range(1, 7):
        nodes(f"{rid}-r{rank}", cpu="1", labels={RUN: rid, RANK: str(rank)})
    h.operator(f"{rid}-op")
    # Another scheduler's policy Ready: the operator is up and watching pods before the
    # pods exist, as when a policy is applied to a running cluster.
    h.wait_ready(h.apply_policy(ranked_policy(f"{rid}-other", f"{rid}-other")), 30)

    names = [f"sim-p{i}" for i in range(1, 13)]
    for n in names:
        h.core.create_namespaced_pod(namespace, pod(n, rid, "500m"),  # type: ignore[arg-type]
                                     _preload_content=False)
    created = [p["metadata"]["creationTimestamp"] for p in h.pods(namespace)]
    # Ties on creationTimestamp (1 s resolution) are what a name order gets wrong; twelve
    # pods created back to back share seconds even on a loaded machine.
    assert len(set(created)) < len(created), created

    snap = tmp_path / "cluster.json"
    p = polsched(h.cluster, "snapshot", "--out", str(snap))
    assert p.returncode == 0, p.stderr
    candidate = ranked_policy(rid, rid)
    path = tmp_path / "candidate.yaml"
    path.write_text(yaml.safe_dump(candidate))
    p = polsched(h.cluster, "simulate", "-f", str(path), "--snapshot", str(snap), "-o",
                 "json")
    assert p.returncode == 0, p.stderr
    report = json.loads(p.stdout)
    predicted = {d["name"]: d["node"] for d in report["pods"]
                 if d["namespace"] == namespace}
    assert set(predicted) == set(names) and None not in predicted.values(), predicted
    # Nothing wrote the pods since their creation: the order is known.
    assert "orderUnknown" not in report["summary"], report["summary"]

    h.apply_policy(candidate)
    wait_for(lambda: len(h.bound(namespace)) == 12, 30, "12 pods bound")
    assert h.bound(namespace) == predicted
