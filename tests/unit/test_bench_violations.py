"""bench/violations.py: what `violations` counts per workload, on plain pod and node
objects shaped as the API server returns them (the workloads' own generators make them)."""

from __future__ import annotations

from typing import Any

import pytest
from bench import violations as v
from bench import workloads as wl

pytestmark = pytest.mark.unit

SCHED = "bench-polsched"


def bound(pod: dict[str, Any], node: int) -> v.PodView:
    pod["spec"]["nodeName"] = wl.node_name(node)
    return v.PodView.of(pod)


def nodes_of(w: wl.Workload) -> dict[str, dict[str, Any]]:
    return {wl.node_name(i): w.node(i) for i in range(w.nodes)}


# -- pod anti-affinity ----------------------------------------------------------------------
ANTI = wl.PodAntiAffinity("pod-anti-affinity", 10, 4, "")


def test_anti_affinity_counts_measured_pods_sharing_a_node_with_an_initial_green_pod() -> None:
    init = [v.PodView.of(p) for p in ANTI.init_pods(SCHED)]  # nodes 0 and 1
    assert [p.node for p in init] == [wl.node_name(0), wl.node_name(1)]
    measured = [bound(ANTI.pod(0, "polsched", SCHED), 1),   # beside init pod 1
                bound(ANTI.pod(1, "polsched", SCHED), 2),
                bound(ANTI.pod(2, "polsched", SCHED), 3)]
    verdict = v.check(ANTI, init + measured, nodes_of(ANTI))
    assert verdict.violations == 1
    assert verdict.by_kind == {"sharing a node with another green pod": 1}


def test_anti_affinity_counts_both_measured_pods_that_share_a_node() -> None:
    measured = [bound(ANTI.pod(0, "polsched", SCHED), 5), bound(ANTI.pod(1, "polsched", SCHED), 5),
                bound(ANTI.pod(2, "polsched", SCHED), 6)]
    assert v.check(ANTI, measured, nodes_of(ANTI)).violations == 2


def test_anti_affinity_ignores_pods_without_the_green_label() -> None:
    other = wl.perf_pod("other", SCHED, wl.OTHER_NAMESPACE, {"color": "red"})
    pods = [bound(other, 4), bound(ANTI.pod(0, "polsched", SCHED), 4)]
    assert v.check(ANTI, pods, nodes_of(ANTI)).violations == 0


# -- topology spreading -----------------------------------------------------------------------
SPREAD = wl.TopologySpreading("topology-spreading", 9, 30, "")  # 3 zones, nodes i % 3


def spread_pods(per_zone: tuple[int, int, int]) -> list[v.PodView]:
    out, k = [], 0
    for zone, count in enumerate(per_zone):
        for _ in range(count):
            out.append(bound(SPREAD.pod(k, "polsched", SCHED), zone))  # node i is zone i % 3
            k += 1
    return out


def test_topology_spreading_within_max_skew_is_no_violation() -> None:
    verdict = v.check(SPREAD, spread_pods((10, 5, 8)), nodes_of(SPREAD))
    assert verdict.violations == 0
    assert verdict.info["zone_skew"] == 5
    assert verdict.info["zone_counts"] == {"moon-1": 10, "moon-2": 5, "moon-3": 8}


def test_topology_spreading_counts_the_pods_beyond_max_skew() -> None:
    # the fewest is 2, so at most 7 per zone: 12 - 7 + 9 - 7 beyond
    verdict = v.check(SPREAD, spread_pods((12, 2, 9)), nodes_of(SPREAD))
    assert verdict.violations == 7
    assert verdict.info["zone_skew"] == 10


def test_topology_spreading_counts_an_empty_zone_and_ignores_initial_pods() -> None:
    init = [v.PodView.of(p) for p in SPREAD.init_pods(SCHED)]  # unlabelled, every zone
    verdict = v.check(SPREAD, init + spread_pods((6, 0, 0)), nodes_of(SPREAD))
    assert verdict.violations == 1
    assert verdict.info["zone_counts"]["moon-2"] == 0


# -- default spreading ------------------------------------------------------------------------
def test_default_spreading_reports_skews_and_never_violates() -> None:
    w = wl.DefaultSpreading("default-spreading", 6, 4, "")
    pods = [bound(w.pod(k, "polsched", SCHED), n) for k, n in enumerate((0, 0, 0, 1))]
    verdict = v.check(w, pods, nodes_of(w))
    assert verdict.violations == 0
    # zones: moon-1 has nodes 0 and 3 (3 pods), moon-2 nodes 1 and 4 (1), moon-3 none
    assert verdict.info["zone_skew"] == 3
    assert verdict.info["hostname_skew"] == 3


# -- mixed ----------------------------------------------------------------------------------
MIXED = wl.Mixed("mixed", 40, 10, "")


def mixed_pod(zones: list[int], tolerate: bool = False, cpu: str = "100m",
              memory: str = "128Mi") -> dict[str, Any]:
    p = wl.pod_base("m", SCHED)
    p["spec"]["containers"][0]["resources"] = {"requests": {"cpu": cpu, "memory": memory}}
    p["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": wl.ZONE, "operator": "In", "values": [f"zone-{z}" for z in zones]}]}]}}}
    if tolerate:
        p["spec"]["tolerations"] = [{"key": wl.TAINT_KEY, "operator": "Equal", "value": "true",
                                     "effect": "NoSchedule"}]
    return p


def test_mixed_pod_outside_its_required_zones() -> None:
    verdict = v.check(MIXED, [bound(mixed_pod([1, 2]), 3)], nodes_of(MIXED))  # zone-3
    assert verdict.by_kind["outside required zones"] == 1
    assert verdict.violations == 1
    assert v.check(MIXED, [bound(mixed_pod([1, 3]), 3)], nodes_of(MIXED)).violations == 0


def test_mixed_taint_counts_unless_tolerated() -> None:
    assert wl.node(19)["spec"]["taints"]  # zone-9, tainted
    verdict = v.check(MIXED, [bound(mixed_pod([9]), 19)], nodes_of(MIXED))
    assert verdict.by_kind["untolerated taint"] == 1
    assert v.check(MIXED, [bound(mixed_pod([9], tolerate=True), 19)],
                   nodes_of(MIXED)).violations == 0


def test_mixed_overcommitted_node_counts_once() -> None:
    # a bench node has 32 CPU and 128Gi: three pods of 12 CPU do not fit, two do
    pods = [bound(mixed_pod([0], cpu="12"), 0) for _ in range(3)]
    verdict = v.check(MIXED, pods, nodes_of(MIXED))
    assert verdict.by_kind["overcommitted nodes"] == 1
    assert verdict.violations == 1
    assert v.check(MIXED, pods[:2], nodes_of(MIXED)).violations == 0
    memory = [bound(mixed_pod([0], memory="100Gi"), 10) for _ in range(2)]
    assert v.check(MIXED, memory, nodes_of(MIXED)).by_kind["overcommitted nodes"] == 1


def test_mixed_generated_pods_on_a_node_they_allow_are_fine() -> None:
    """A pod from the workload's own generator, put on a node its rules allow."""
    nodes = nodes_of(MIXED)
    pods = []
    for k in range(10):
        p = v.PodView.of(MIXED.pod(k, "polsched", SCHED))
        ok = next(n for n in nodes if v.required_affinity_holds(p, nodes[n])
                  and not v.untolerated_taint(p, nodes[n]))
        pods.append(v.PodView(**{**p.__dict__, "node": ok}))
    assert v.check(MIXED, pods, nodes).violations == 0


# -- the first round's workloads, and the rules' parts ------------------------------------------
def test_first_round_rules_still_count_taints_and_labels() -> None:
    basic = wl.WORKLOADS["basic"]
    labels = wl.WORKLOADS["labels"]
    nodes = {wl.node_name(i): wl.node(i) for i in range(20)}
    pod = wl.pod_base("p", SCHED)
    assert v.check(basic, [bound(pod, 19)], nodes).violations == 1  # tainted
    assert v.check(basic, [bound(pod, 2)], nodes).violations == 0
    assert v.check(labels, [bound(pod, 2)], nodes).violations == 1  # bronze
    assert v.check(labels, [bound(pod, 0)], nodes).violations == 0  # gold
    # unbound pods and pods of the other namespace are not measured
    other = wl.pod_base("o", SCHED)
    other["metadata"]["namespace"] = wl.OTHER_NAMESPACE
    assert v.check(basic, [v.PodView.of(wl.pod_base("u", SCHED)), bound(other, 19)],
                   nodes).violations == 0


@pytest.mark.parametrize("toleration, tolerated", [
    ({"key": "k", "operator": "Equal", "value": "v", "effect": "NoSchedule"}, True),
    ({"key": "k", "operator": "Equal", "value": "w", "effect": "NoSchedule"}, False),
    ({"key": "k", "operator": "Exists"}, True),
    ({"operator": "Exists"}, True),
    ({"key": "k", "value": "v", "effect": "NoExecute"}, False),
    ({"key": "other", "operator": "Exists"}, False),
])
def test_toleration_matching(toleration: dict[str, str], tolerated: bool) -> None:
    taint = {"key": "k", "value": "v", "effect": "NoSchedule"}
    assert v.tolerated(taint, [toleration]) is tolerated


@pytest.mark.parametrize("quantity, milli", [("100m", 100), ("2", 2000), ("0.5", 500)])
def test_cpu_quantities(quantity: str, milli: int) -> None:
    assert v._milli(quantity) == milli


@pytest.mark.parametrize("quantity, size", [("128Mi", 128 * 2**20), ("1Gi", 2**30),
                                            ("1000", 1000), ("2k", 2000)])
def test_memory_quantities(quantity: str, size: int) -> None:
    assert v._bytes(quantity) == size


# -- gangs ---------------------------------------------------------------------------------
GANGS = wl.Gangs("gangs-of-3", 20, 0, "", groups=4, per_group=3)


def test_gang_workload_pods_name_their_group_and_the_warmup_pod_none() -> None:
    assert GANGS.pods == 12
    assert [GANGS.pod(i, "kube", SCHED)["spec"]["schedulingGroup"]["podGroupName"]
            for i in (0, 2, 3, 11)] == ["gang-0", "gang-0", "gang-1", "gang-3"]
    assert "schedulingGroup" not in GANGS.warmup_pod("kube", SCHED)["spec"]
    groups = [o for _, o in GANGS.extra_objects()]
    assert [g["spec"]["schedulingPolicy"]["gang"]["minCount"] for g in groups] == [3] * 4
    big = wl.Gangs("gangs-of-1000", 50, 0, "", groups=3, per_group=1000, scale_size=True)
    small = big.scaled(0.1)
    assert (small.nodes, small.groups, small.per_group, small.pods) == (5, 3, 100, 300)
    assert GANGS.scaled(0.5).pods == 6


def test_a_gang_bound_in_part_is_a_violation_whole_or_unbound_is_not() -> None:
    nodes = nodes_of(GANGS)
    pods = [GANGS.pod(i, "kube", SCHED) for i in range(GANGS.pods)]
    views = [bound(p, 0) if i < 3 or 6 <= i < 8 else v.PodView.of(p)
             for i, p in enumerate(pods)]  # gang-0 whole, gang-2 two of three
    verdict = v.check(GANGS, views, nodes)
    assert verdict.by_kind["gangs bound in part"] == 1
    assert verdict.violations == 1
    assert verdict.info == {"gangs_whole": 1, "gangs_unbound": 2}


def test_gang_workload_nodes_and_pods_are_scheduler_perfs() -> None:
    """podgroup/gangscheduling: createNodes with templates/node-default.yaml (4 CPU, 32Gi,
    110 pods, no taint) and templates/gang-pod.yaml (100m CPU, 100Mi); 41 members on one
    node overcommit its CPU, which the check counts."""
    n = GANGS.node(19)  # the 20th node: tainted in the other workloads
    assert n["spec"] == {} and n["status"]["allocatable"] == {
        "pods": "110", "cpu": "4", "memory": "32Gi"}
    assert GANGS.pod(0, "kube", SCHED)["spec"]["containers"][0]["resources"] == {
        "requests": {"cpu": "100m", "memory": "100Mi"}}
    full = wl.Gangs("gangs-of-3", 2, 0, "", groups=14, per_group=3)
    pods = [bound(full.pod(i, "kube", SCHED), 0) for i in range(41)]
    verdict = v.check(full, pods, nodes_of(full))
    assert verdict.by_kind["overcommitted nodes"] == 1
    assert verdict.by_kind["gangs bound in part"] == 1  # gang-13: 2 of 3
    assert verdict.violations == 2


# -- DRA ------------------------------------------------------------------------------------
DRA = wl.DynamicResources("dra", 4, 8, "", devices_per_node=3, init_claims_per_node=1)


def dra_claim(pod: dict[str, Any], node: int | None, device: int) -> dict[str, Any]:
    """The claim the resourceclaim controller makes for `pod`, allocated as a scheduler
    would on `node` (None: not allocated)."""
    pod["metadata"]["uid"] = "uid-" + pod["metadata"]["name"]
    c = DRA.generated_claim(pod)
    if node is not None:
        c["status"] = {"allocation": DRA.allocation(wl.node_name(node), DRA.pool(node),
                                                    f"basic-device-{device}")}
    return c


def test_dra_initial_claims_fill_nodes_from_their_first_device_and_never_twice() -> None:
    init = DRA.init_claims()
    assert len(init) == 4
    taken = [(r["pool"], r["device"]) for c in init
             for r in c["status"]["allocation"]["devices"]["results"]]
    assert len(set(taken)) == len(taken)
    assert v.check(DRA, [], nodes_of(DRA), init).violations == 0


def test_dra_counts_unallocated_claims_foreign_devices_and_devices_taken_twice() -> None:
    init = DRA.init_claims()
    first = init[0]["status"]["allocation"]["devices"]["results"][0]
    node_of_first = int(first["pool"].rsplit("-", 1)[-1])
    pods = [DRA.pod(i, "polsched", SCHED) for i in range(4)]
    claims = [dra_claim(pods[0], 2, 2),                       # fine
              dra_claim(pods[1], None, 0),                    # bound, claim not allocated
              dra_claim(pods[2], 3, 2),                       # bound to node 1: foreign
              dra_claim(pods[3], node_of_first, int(first["device"].rsplit("-", 1)[-1]))]
    views = [bound(pods[0], 2), bound(pods[1], 0), bound(pods[2], 1),
             bound(pods[3], node_of_first)]
    verdict = v.check(DRA, views, nodes_of(DRA), init + claims)
    assert verdict.by_kind == {"bound without an allocated claim": 1,
                               "device from another node": 1, "device allocated twice": 1}
    assert verdict.violations == 3
    assert verdict.info["allocated_devices"] == 4 + 2  # init + node 2 and node 3 devices


def test_dra_digests_compare_between_schedulers() -> None:
    init = DRA.init_claims()
    pods = [DRA.pod(i, "polsched", SCHED) for i in range(2)]
    a = v.check(DRA, [], nodes_of(DRA), init + [dra_claim(pods[0], 0, 2),
                                                 dra_claim(pods[1], 1, 2)]).info
    b = v.check(DRA, [], nodes_of(DRA), init + [dra_claim(pods[1], 0, 2),
                                                 dra_claim(pods[0], 1, 2)]).info
    c = v.check(DRA, [], nodes_of(DRA), init + [dra_claim(pods[0], 0, 2),
                                                 dra_claim(pods[1], 2, 2)]).info
    same = v.compare_allocations({"polsched": {"placement": a}, "kube": {"placement": b}})
    assert same is not None and same["identical"]  # which pod got which: a tie-break
    differ = v.compare_allocations({"polsched": {"placement": a}, "kube": {"placement": c}})
    assert differ is not None and not differ["identical"]
    assert v.compare_allocations({"polsched": {"placement": a}, "kube": {}}) is None
