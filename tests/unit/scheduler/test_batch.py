"""OpportunisticBatching (scheduler.batch; kube-scheduler's framework/runtime/batch.go):
a pod alike the one before it is placed on the hint from that pod's ranking, with the
decisions a full search would make; pods that cannot be signed never are."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from polsched.cluster import featuregates
from polsched.framework import signers
from polsched.framework.interfaces import Handle
from polsched.framework.runtime import Pipeline
from polsched.framework.types import NodeInfo, PodInfo, Snapshot
from polsched.scheduler import metrics
from polsched.scheduler.algorithm import SearchLimits, schedule_pod
from polsched.scheduler.batch import MAX_BATCH_AGE, OpportunisticBatch
from polsched.scheduler.pipelines import build_pipeline
from tests.builders import make_node, make_pod
from tests.unit.pipelines import load

pytestmark = pytest.mark.unit

GATES = frozenset({signers.OPPORTUNISTIC_BATCHING})
# scheduler_perf batching/scheduler-config-no-topology.yaml: PodTopologySpread without
# default constraints, so that pods without constraints of their own can be signed.
NO_DEFAULT_SPREAD: dict[str, Any] = {"name": "PodTopologySpread",
                                     "args": {"defaultingType": "List",
                                              "defaultConstraints": []}}


def pipeline(default_spread: bool = False, seed: int = 1) -> Pipeline:
    import random

    policy = load() if default_spread else load(
        filters=[NO_DEFAULT_SPREAD], scorers=[{**NO_DEFAULT_SPREAD, "weight": 2}])
    return build_pipeline(policy, Handle(features=GATES), rng=random.Random(seed))


def nodes(n: int, cpu: str = "4") -> list[NodeInfo]:
    # Memory differs per node, so that the nodes' scores rarely tie (the choice among tied
    # nodes is random on both sides).
    return [make_node().name(f"n{i}").allocatable(
        {"cpu": cpu, "memory": f"{5 + 9 * i}Gi", "pods": "110"}).info() for i in range(n)]


def hostport_pod(i: int) -> PodInfo:
    """templates/pod-hostport-80.yaml: one pod per node."""
    return make_pod().name(f"p{i}").namespace("ns").uid(f"u{i}").containers([{
        "name": "pause", "image": "registry.k8s.io/pause:3.10.1",
        "ports": [{"containerPort": 80, "hostPort": 80}],
        "resources": {"requests": {"cpu": "100m", "memory": "100Mi"}}}]).info()


def small_pod(i: int, cpu: str = "1") -> PodInfo:
    return make_pod().name(f"p{i}").namespace("ns").uid(f"u{i}").req(
        cpu=cpu, memory="3Gi").info()


def place(snapshot: Snapshot, pod: PodInfo, node: str) -> None:
    """What assume does to the cache: the pod counts on its node from now on."""
    info = snapshot.get(node)
    assert info is not None
    bound = PodInfo.from_json({**pod.raw, "spec": {**pod.raw["spec"], "nodeName": node}})
    info.add_pod(bound)


def run(pl: Pipeline, snapshot: Snapshot, pods: list[PodInfo],
        batch: OpportunisticBatch | None, first_cycle: int = 1) -> list[str | None]:
    out: list[str | None] = []
    for cycle, pod in enumerate(pods, first_cycle):
        result = asyncio.run(schedule_pod(pl, pod, snapshot,
                                          limits=SearchLimits(batch=batch, cycle=cycle)))
        out.append(result.node)
        if result.node is not None:
            place(snapshot, pod, result.node)
    return out


def flushed(reason: str) -> float:
    return metrics.BATCH_CACHE_FLUSHED.values.get(
        (("profile", "test"), ("reason", reason)), 0.0)


def test_under_the_default_policy_no_pod_is_signed() -> None:
    # PodTopologySpread's system default constraints make every pod unsignable, as
    # upstream's SignPod: kube-scheduler's default profile never batches, and polsched's
    # default pipeline knows it once, when it is built.
    pl = pipeline(default_spread=True)
    assert not pl.signable
    assert pl.sign_pod(small_pod(0)) is None


def test_alike_pods_sign_alike_and_a_different_request_signs_apart() -> None:
    pl = pipeline()
    assert pl.sign_pod(small_pod(0)) == pl.sign_pod(small_pod(1)) is not None
    assert pl.sign_pod(small_pod(2, cpu="2")) != pl.sign_pod(small_pod(0))


@pytest.mark.parametrize("spec", [
    {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {}, "topologyKey": "kubernetes.io/hostname"}]}}},
    {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone",
                                    "whenUnsatisfiable": "DoNotSchedule"}]},
    {"resourceClaims": [{"name": "gpu", "resourceClaimName": "c"}]},
], ids=["inter-pod affinity", "spread constraints", "DRA claims"])
def test_upstreams_exclusions_are_not_signed(spec: dict[str, Any]) -> None:
    pl = pipeline()
    pod = make_pod().name("p").namespace("ns").req(cpu="1").spec(**spec).info()
    assert pl.sign_pod(pod) is None


def test_a_pipeline_with_a_plugin_that_cannot_sign_signs_no_pod() -> None:
    policy = load(filters=[NO_DEFAULT_SPREAD, {"name": "NodeLabel", "args": {
        "requirements": [{"key": "tier", "operator": "Exists"}]}}],
        scorers=[{**NO_DEFAULT_SPREAD, "weight": 2}])
    pl = build_pipeline(policy, Handle(features=GATES))
    assert not pl.signable
    assert pl.sign_pod(small_pod(0)) is None


def test_hostport_conflict_places_every_pod_as_a_full_search_and_batches_the_rest() -> None:
    # scheduler_perf batching HostPortConflict 10Nodes_10Pods: one pod per node.
    pods = [hostport_pod(i) for i in range(10)]
    pl = pipeline()
    batch = OpportunisticBatch(pl, "test")
    batched = run(pl, Snapshot(nodes(10)), pods, batch)
    full = run(pipeline(), Snapshot(nodes(10)), pods, None)
    assert batched == full
    assert len(set(batched)) == 10
    # The first pod is searched in full; each later one takes its hint.
    assert batch.batched_pods == 9


def test_pods_that_fit_twice_rescore_the_last_node_and_decide_as_a_full_search() -> None:
    # Two 1-CPU pods per 2-CPU node: the last chosen node still fits the next pod, is
    # re-scored and competes with the kept ones (refreshHintCandidates).
    pods = [small_pod(i) for i in range(12)]
    pl = pipeline()
    batch = OpportunisticBatch(pl, "test")
    before = metrics.BATCH_RESCORE_ATTEMPTS.values.get((("profile", "test"),), 0.0)
    batched = run(pl, Snapshot(nodes(6, cpu="2")), pods, batch)
    full = run(pipeline(), Snapshot(nodes(6, cpu="2")), pods, None)
    assert batched == full
    assert metrics.BATCH_RESCORE_ATTEMPTS.values[(("profile", "test"),)] > before
    assert batch.batched_pods > 0


def test_a_pod_with_another_signature_gets_no_hint() -> None:
    pl = pipeline()
    batch = OpportunisticBatch(pl, "test")
    before = flushed("pod_incompatible")
    run(pl, Snapshot(nodes(4)), [small_pod(0), small_pod(1, cpu="2")], batch)
    assert batch.batched_pods == 0
    assert flushed("pod_incompatible") == before + 1


def test_a_cycle_in_between_drops_the_ranking() -> None:
    pl = pipeline()
    batch = OpportunisticBatch(pl, "test")
    snapshot = Snapshot(nodes(4))
    before = flushed("pod_skipped")
    run(pl, snapshot, [small_pod(0)], batch, first_cycle=1)
    run(pl, snapshot, [small_pod(1)], batch, first_cycle=3)  # cycle 2 was another pod's
    assert batch.batched_pods == 0
    assert flushed("pod_skipped") == before + 1


def test_a_ranking_older_than_the_batch_age_is_not_used() -> None:
    now = [0.0]
    pl = pipeline()
    batch = OpportunisticBatch(pl, "test", clock=lambda: now[0])
    snapshot = Snapshot(nodes(4))
    before = flushed("expired")
    run(pl, snapshot, [small_pod(0)], batch, first_cycle=1)
    now[0] += MAX_BATCH_AGE + 0.01
    run(pl, snapshot, [small_pod(1)], batch, first_cycle=2)
    assert batch.batched_pods == 0
    assert flushed("expired") == before + 1


def test_a_hint_does_not_move_the_round_robin_start() -> None:
    # 200 nodes: the search stops after numFeasibleNodesToFind (100) and moves the start;
    # a pod placed on its hint searched no node, as upstream.
    pl = pipeline()
    batch = OpportunisticBatch(pl, "test")
    snapshot = Snapshot(nodes(200))
    run(pl, snapshot, [hostport_pod(0)], batch, first_cycle=1)
    start = pl.next_start
    assert start != 0
    run(pl, snapshot, [hostport_pod(1)], batch, first_cycle=2)
    assert batch.batched_pods == 1
    assert pl.next_start == start


def test_the_gate_is_on_by_default_and_can_be_turned_off() -> None:
    assert signers.OPPORTUNISTIC_BATCHING in featuregates.scheduler_features({})
    off = {featuregates.ENV: "OpportunisticBatching=false"}
    assert signers.OPPORTUNISTIC_BATCHING not in featuregates.scheduler_features(off)


def test_a_hint_among_tied_nodes_says_how_many_tied() -> None:
    # Identical nodes: after the first pod, the kept nodes all score alike, and the hint
    # is one of them at random (conformance counts such a pod as a tie).
    pl = pipeline()
    batch = OpportunisticBatch(pl, "test")
    snapshot = Snapshot([make_node().name(f"n{i}").allocatable(
        {"cpu": "4", "memory": "8Gi", "pods": "110"}).info() for i in range(4)])
    first = asyncio.run(schedule_pod(pl, hostport_pod(0), snapshot,
                                     limits=SearchLimits(batch=batch, cycle=1)))
    assert first.node is not None and first.hint_ties == 0
    place(snapshot, hostport_pod(0), first.node)
    second = asyncio.run(schedule_pod(pl, hostport_pod(1), snapshot,
                                      limits=SearchLimits(batch=batch, cycle=2)))
    assert batch.batched_pods == 1
    assert second.hint_ties == 3


def test_a_rejected_hint_counts_among_the_processed_nodes_as_upstream() -> None:
    # evaluateNominatedNode records the hint's rejection in the search's NodeToStatus:
    # when the search then stops before the hint's node, nextStartNodeIndex moves one
    # node further than the search alone would move it.
    pl = pipeline()
    batch = OpportunisticBatch(pl, "test")
    snapshot = Snapshot([make_node().name(f"n{i:03d}").allocatable(
        {"cpu": "4", "memory": "8Gi", "pods": "110"}).info() for i in range(200)])
    run(pl, snapshot, [hostport_pod(0)], batch, first_cycle=1)
    assert pl.next_start == 100  # numFeasibleNodesToFind: 100 of 200 nodes
    for i in range(100):  # every node the first search saw now holds port 80
        place(snapshot, hostport_pod(1000 + i), f"n{i:03d}")
    before = batch.batched_pods
    got = run(pl, snapshot, [hostport_pod(1)], batch, first_cycle=2)
    assert batch.batched_pods == before  # the hint was rejected
    assert got[0] is not None and int(got[0][1:]) >= 100
    # The search visited nodes 100..199 (100 feasible found) and the hint's node counts.
    assert pl.next_start == (100 + 100 + 1) % 200
