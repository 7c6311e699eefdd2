"""PodTopologySpread filter and scorer.

Scenarios follow kube-scheduler's pkg/scheduler/framework/plugins/podtopologyspread/
filtering_test.go (TestSingleConstraint, TestMultipleConstraints, minDomains and node
inclusion policy cases) and scoring_test.go (TestPodTopologySpreadScore); expected scores
are worked out from scoring.go's formula in each test's docstring.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from polsched.framework import (
    SKIP,
    Code,
    CycleState,
    NodeInfo,
    PodInfo,
    Snapshot,
    Status,
)
from polsched.plugins import pod_topology_spread as pts
from tests.builders import make_node, make_pod
from tests.unit.pipelines import args_errors, build_plugin

pytestmark = pytest.mark.unit

HOST = "kubernetes.io/hostname"
ZONE = "zone"
FOO = {"foo": ""}


# -- builders -------------------------------------------------------------------------------

def constraint(key: str, max_skew: int = 1, when: str = "DoNotSchedule",
               selector: Any = None, **extra: Any) -> dict[str, Any]:
    sel = {"matchExpressions": [{"key": "foo", "operator": "Exists"}]} \
        if selector is None else selector
    return {"maxSkew": max_skew, "topologyKey": key, "whenUnsatisfiable": when,
            "labelSelector": sel, **extra}


def pod(name: str, labels: Mapping[str, str] | None = None, node: str = "",
        ns: str = "default", constraints: Sequence[dict[str, Any]] = (),
        node_selector: Mapping[str, str] | None = None,
        tolerations: Sequence[dict[str, Any]] = (), deleting: bool = False) -> PodInfo:
    p = make_pod().name(name).namespace(ns).labels(labels or {})
    if deleting:
        p.terminating("2026-01-01T00:00:00Z")
    return (p.node(node).spec(topologySpreadConstraints=list(constraints))
            .node_selector(node_selector or {}).tolerations(tolerations).container().info())


def node(name: str, zone: str | None = None, taints: Sequence[dict[str, Any]] = (),
         **labels: str) -> NodeInfo:
    n = make_node().name(name).labels({HOST: name, **labels})
    if zone is not None:
        n.label(ZONE, zone)
    return n.taints(taints).info()


def cluster(nodes: Sequence[NodeInfo], pods: Mapping[str, int] | Sequence[PodInfo],
            labels: Mapping[str, str] = FOO) -> Snapshot:
    """pods: node name -> number of matching pods to put there, or explicit pods."""
    by_name = {n.name: n for n in nodes}
    if isinstance(pods, Mapping):
        for node_name, count in pods.items():
            for i in range(count):
                by_name[node_name].add_pod(pod(f"{node_name}-{i}", labels, node_name))
    else:
        for p in pods:
            by_name[p.node_name].add_pod(p)
    return Snapshot(list(nodes))


def four_nodes() -> list[NodeInfo]:
    return [node("node-a", "zone1"), node("node-b", "zone1"),
            node("node-x", "zone2"), node("node-y", "zone2")]


def run_filter(incoming: PodInfo, snap: Snapshot,
               args: Mapping[str, Any] | None = None) -> tuple[Status, dict[str, Status]]:
    plugin = build_plugin(pts.NAME, args)
    state = CycleState()
    pre = plugin.pre_filter(state, incoming, snap)
    if pre.code is not Code.SUCCESS:
        return pre, {}
    statuses = {n.name: plugin.filter(state, incoming, n) for n in snap}
    # The form the pipeline's per-node loop calls gives the same statuses.
    bound = plugin.bind_filter(state, incoming)
    if bound is not None:
        assert {n.name: bound(n) for n in snap} == statuses
    # The nodes it names for the pipeline (NodeSetFilter) pass, and when it names one
    # status for the others, they fail with it.
    passing = plugin.filter_nodes(state, incoming, snap)
    if passing is not None:
        rejection = plugin.filter_rejection(state, incoming)
        for n in snap:
            if n.name in passing:
                assert statuses[n.name].ok
            elif rejection is not None:
                assert statuses[n.name] == rejection
    return pre, statuses


def feasible(statuses: Mapping[str, Status]) -> list[str]:
    return sorted(n for n, s in statuses.items() if s.ok)


def run_score(incoming: PodInfo, snap: Snapshot, nodes: Sequence[NodeInfo] | None = None,
              args: Mapping[str, Any] | None = None) -> Status | dict[str, int]:
    plugin = build_plugin(pts.NAME, args)
    state = CycleState()
    nodes = list(snap) if nodes is None else list(nodes)
    pre: Status = plugin.pre_score(state, incoming, nodes, snap)
    if pre.code is not Code.SUCCESS:
        return pre
    scores = plugin.score_nodes(state, incoming, nodes)
    assert isinstance(scores, list)
    assert plugin.normalize_score(state, incoming, scores).ok
    return {n.name: s for n, s in zip(nodes, scores, strict=True)}


SKEW_FAIL = (Code.UNSCHEDULABLE, ("node(s) didn't match pod topology spread constraints",))
LABEL_FAIL = (Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
              ("node(s) didn't match pod topology spread constraints (missing required label)",))


def outcome(st: Status) -> tuple[Code, tuple[str, ...]]:
    return st.code, st.reasons


# -- filter ---------------------------------------------------------------------------------

def test_no_existing_pods_all_nodes_fit() -> None:
    _, st = run_filter(pod("p", FOO, constraints=[constraint(ZONE)]), cluster(four_nodes(), {}))
    assert feasible(st) == ["node-a", "node-b", "node-x", "node-y"]


def test_one_zone_constraint_rejects_the_crowded_zone() -> None:
    """zone1 holds 3 matching pods, zone2 2: placing in zone1 would give skew 3+1-2 > 1."""
    snap = cluster(four_nodes(), {"node-a": 2, "node-b": 1, "node-y": 2})
    _, st = run_filter(pod("p", FOO, constraints=[constraint(ZONE)]), snap)
    assert feasible(st) == ["node-x", "node-y"]
    assert outcome(st["node-a"]) == SKEW_FAIL


def test_pod_not_matching_its_own_selector_adds_no_skew() -> None:
    snap = cluster(four_nodes(), {"node-a": 2, "node-b": 1, "node-y": 2})
    _, st = run_filter(pod("p", {"bar": ""}, constraints=[constraint(ZONE)]), snap)
    assert feasible(st) == ["node-a", "node-b", "node-x", "node-y"]


def test_node_without_the_topology_key_is_unresolvable() -> None:
    nodes = [*four_nodes(), node("node-nozone")]
    _, st = run_filter(pod("p", FOO, constraints=[constraint(ZONE)]), cluster(nodes, {}))
    assert outcome(st["node-nozone"]) == LABEL_FAIL


def test_multiple_constraints_each_must_hold_and_need_every_key() -> None:
    """Zones hold 2 and 2 (maxSkew 2 fits everywhere); per host the minimum is node-b's 0,
    so only node-b fits the hostname constraint. A node without a hostname label is
    unresolvable although it has a zone."""
    nodes = [*four_nodes(), make_node().name("anon").label(ZONE, "zone2").info()]
    snap = cluster(nodes, {"node-a": 2, "node-x": 1, "node-y": 1})
    incoming = pod("p", FOO, constraints=[constraint(ZONE, max_skew=2), constraint(HOST)])
    _, st = run_filter(incoming, snap)
    assert feasible(st) == ["node-b"]
    assert outcome(st["node-x"]) == SKEW_FAIL
    assert outcome(st["anon"]) == LABEL_FAIL


def test_only_pods_of_the_same_namespace_count() -> None:
    pods = [pod("o1", FOO, "node-a", ns="other"), pod("o2", FOO, "node-a", ns="other"),
            pod("d1", FOO, "node-x"), pod("d2", FOO, "node-y")]
    _, st = run_filter(pod("p", FOO, constraints=[constraint(ZONE)]), cluster(four_nodes(), pods))
    assert feasible(st) == ["node-a", "node-b"]


def test_terminating_pods_do_not_count() -> None:
    pods = [pod("t1", FOO, "node-a", deleting=True), pod("t2", FOO, "node-a", deleting=True),
            pod("x1", FOO, "node-x")]
    _, st = run_filter(pod("p", FOO, constraints=[constraint(ZONE)]), cluster(four_nodes(), pods))
    assert feasible(st) == ["node-a", "node-b"]


def test_min_domains_treats_global_minimum_as_zero() -> None:
    """Two eligible zones with one pod each: minDomains 3 > 2 domains makes the global
    minimum 0, so any zone would reach skew 2."""
    snap = cluster(four_nodes(), {"node-a": 1, "node-x": 1})
    _, without = run_filter(pod("p", FOO, constraints=[constraint(ZONE)]), snap)
    assert len(feasible(without)) == 4
    _, st = run_filter(pod("p", FOO, constraints=[constraint(ZONE, minDomains=3)]), snap)
    assert feasible(st) == []
    assert outcome(st["node-a"]) == SKEW_FAIL


def test_node_affinity_policy_honor_ignores_nodes_the_pod_cannot_use() -> None:
    """node-x (zone2, empty) does not match the pod's nodeSelector: with Honor zone2 is not
    a domain, so zone1 is the minimum and node-a fits; with Ignore zone2's 0 is the
    minimum and node-a does not."""
    nodes = [node("node-a", "zone1", disk="ssd"), node("node-x", "zone2")]
    snap = cluster(nodes, {"node-a": 1})
    honor = pod("p", FOO, constraints=[constraint(ZONE)], node_selector={"disk": "ssd"})
    _, st = run_filter(honor, snap)
    assert st["node-a"].ok
    ignore = pod("p", FOO, constraints=[constraint(ZONE, nodeAffinityPolicy="Ignore")],
                 node_selector={"disk": "ssd"})
    _, st = run_filter(ignore, snap)
    assert outcome(st["node-a"]) == SKEW_FAIL


def test_node_affinity_policy_honors_required_node_affinity_terms() -> None:
    nodes = [node("node-a", "zone1", disk="ssd"), node("node-x", "zone2", disk="hdd")]
    snap = cluster(nodes, {"node-a": 1})
    incoming = pod("p", FOO, constraints=[constraint(ZONE)])
    incoming.affinity["nodeAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "disk", "operator": "In", "values": ["ssd"]}]}]}}
    _, st = run_filter(incoming, snap)
    assert st["node-a"].ok


def test_node_taints_policy_honor_ignores_untolerated_nodes() -> None:
    taint = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
    nodes = [node("node-a", "zone1"), node("node-x", "zone2", taints=[taint])]
    snap = cluster(nodes, {"node-a": 1})
    # Default Ignore: the tainted zone2 counts with 0 pods.
    _, st = run_filter(pod("p", FOO, constraints=[constraint(ZONE)]), snap)
    assert outcome(st["node-a"]) == SKEW_FAIL
    honor = [constraint(ZONE, nodeTaintsPolicy="Honor")]
    _, st = run_filter(pod("p", FOO, constraints=honor), snap)
    assert st["node-a"].ok
    tolerating = pod("p", FOO, constraints=honor,
                     tolerations=[{"key": "dedicated", "operator": "Exists"}])
    _, st = run_filter(tolerating, snap)
    assert outcome(st["node-a"]) == SKEW_FAIL


def test_match_label_keys_count_only_the_same_revision() -> None:
    old = {"foo": "", "rev": "1"}
    snap = cluster(four_nodes(), {"node-a": 2}, labels=old)
    new_pod_labels = {"foo": "", "rev": "2"}
    _, plain = run_filter(pod("p", new_pod_labels, constraints=[constraint(ZONE)]), snap)
    assert feasible(plain) == ["node-x", "node-y"]
    keyed = [constraint(ZONE, matchLabelKeys=["rev"])]
    _, st = run_filter(pod("p", new_pod_labels, constraints=keyed), snap)
    assert feasible(st) == ["node-a", "node-b", "node-x", "node-y"]


def test_empty_selector_counts_no_pods() -> None:
    """labels.Selector.Empty(): countPodsMatchSelector returns 0 for a selector without
    requirements, though the incoming pod itself matches it."""
    snap = cluster(four_nodes(), {"node-a": 3})
    _, st = run_filter(pod("p", FOO, constraints=[constraint(ZONE, selector={})]), snap)
    assert len(feasible(st)) == 4


def test_prefilter_skips_without_hard_constraints() -> None:
    snap = cluster(four_nodes(), {})
    pre, _ = run_filter(pod("p", FOO), snap)
    assert pre == SKIP
    pre, _ = run_filter(pod("p", FOO, constraints=[constraint(ZONE, when="ScheduleAnyway")]),
                        snap)
    assert pre == SKIP


def test_malformed_selector_is_an_error() -> None:
    bad = constraint(ZONE, selector={"matchExpressions": [{"key": "foo", "operator": "Nope"}]})
    pre, _ = run_filter(pod("p", FOO, constraints=[bad]), cluster(four_nodes(), {}))
    assert pre.code is Code.ERROR
    assert "spec.topologySpreadConstraints[0].labelSelector" in pre.message


# -- scoring --------------------------------------------------------------------------------

def soft(key: str, max_skew: int = 1, **extra: Any) -> dict[str, Any]:
    return constraint(key, max_skew, "ScheduleAnyway", **extra)


def test_score_no_existing_pods_all_max() -> None:
    snap = cluster([node("node-a"), node("node-b")], {})
    assert run_score(pod("p", FOO, constraints=[soft(HOST)]), snap) == {
        "node-a": 100, "node-b": 100}


def test_score_hostname_constraint_four_candidates() -> None:
    """weight ln(4+2); raw = round(count * weight): 11, 7, 0, 4; normalized
    100 * (max + min - raw) / max with max 11, min 0."""
    nodes = [node("node-a"), node("node-b"), node("node-c"), node("node-d")]
    snap = cluster(nodes, {"node-a": 6, "node-b": 4, "node-d": 2})
    assert run_score(pod("p", FOO, constraints=[soft(HOST)]), snap) == {
        "node-a": 0, "node-b": 36, "node-c": 100, "node-d": 63}


def test_score_max_skew_waters_down_differences() -> None:
    """maxSkew 3 adds 2 to every raw score: raw 3 and 2 give 66 and 100 instead of 0 and
    100."""
    snap = cluster([node("node-a"), node("node-b")], {"node-a": 1})
    assert run_score(pod("p", FOO, constraints=[soft(HOST, max_skew=3)]), snap) == {
        "node-a": 66, "node-b": 100}
    assert run_score(pod("p", FOO, constraints=[soft(HOST)]), snap) == {
        "node-a": 0, "node-b": 100}


def test_score_zone_counts_pods_on_infeasible_nodes_too() -> None:
    """Only node-a and node-x are feasible, but zone1 counts node-b's pods: zone1 3, zone2 1;
    weight ln(2+2); raw 4 and 1; normalized 25 and 100."""
    nodes = four_nodes()
    snap = cluster(nodes, {"node-a": 1, "node-b": 2, "node-y": 1})
    got = run_score(pod("p", FOO, constraints=[soft(ZONE)]), snap, nodes=[nodes[0], nodes[2]])
    assert got == {"node-a": 25, "node-x": 100}


def test_score_nodes_without_the_key_get_zero() -> None:
    nodes = [node("node-a", "zone1"), node("node-nozone")]
    snap = cluster(nodes, {})
    assert run_score(pod("p", FOO, constraints=[soft(ZONE)]), snap) == {
        "node-a": 100, "node-nozone": 0}


def test_score_skips_without_soft_constraints() -> None:
    snap = cluster(four_nodes(), {"node-a": 1})
    assert run_score(pod("p", FOO), snap) == SKIP
    assert run_score(pod("p", FOO, constraints=[constraint(ZONE)]), snap) == SKIP


def test_system_defaulting_applies_no_constraints_without_owner_listers() -> None:
    """System default constraints need a selector from the pod's owners; with none the
    plugin has nothing to do for a pod without constraints."""
    snap = cluster(four_nodes(), {"node-a": 3})
    assert run_score(pod("p", FOO), snap, args={"defaultingType": "System"}) == SKIP


# -- args -----------------------------------------------------------------------------------

def test_default_args() -> None:
    assert pts.SPEC.default_args == {"defaultingType": "System"}
    assert pts.parse_args(None).default_constraints == pts.SYSTEM_DEFAULT_CONSTRAINTS
    listed = pts.parse_args({"defaultingType": "List", "defaultConstraints": [
        {"maxSkew": 2, "topologyKey": ZONE, "whenUnsatisfiable": "ScheduleAnyway"}]})
    assert listed.defaulting_type == "List"
    assert len(listed.default_constraints) == 1


GOOD = {"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule"}


@pytest.mark.parametrize("args,path", [
    ({"defaultingType": "Sometimes"}, "defaultingType"),
    ({"defaultConstraints": [GOOD]}, "defaultingType"),
    ({"defaultingType": "List", "defaultConstraints": [{**GOOD, "maxSkew": 0}]},
     "defaultConstraints[0].maxSkew"),
    ({"defaultingType": "List", "defaultConstraints": [{**GOOD, "topologyKey": ""}]},
     "defaultConstraints[0].topologyKey"),
    ({"defaultingType": "List", "defaultConstraints": [{**GOOD, "whenUnsatisfiable": "x"}]},
     "defaultConstraints[0].whenUnsatisfiable"),
    ({"defaultingType": "List",
      "defaultConstraints": [{**GOOD, "labelSelector": {"matchLabels": {"a": "b"}}}]},
     "defaultConstraints[0].labelSelector"),
    ({"defaultingType": "List", "defaultConstraints": [GOOD, GOOD]}, "defaultConstraints[1]"),
    ({"defaultingType": "List", "defaultConstraints": [{**GOOD, "nodeTaintsPolicy": "Maybe"}]},
     "defaultConstraints[0].nodeTaintsPolicy"),
    ({"defaultingType": "List", "defaultConstraints": "zone"}, "defaultConstraints"),
    ({"defaultConstraint": []}, "defaultConstraint"),
])
def test_invalid_args_name_the_field(args: dict[str, Any], path: str) -> None:
    for point in ("filter", "score"):
        assert args_errors(pts.NAME, args, point=point) == [f"args.{path}"]


def test_one_plugin_instance_sees_cluster_changes_between_cycles() -> None:
    """Per-node counts are memoized across cycles on the node's generation: a pod bound
    between two cycles changes the next cycle's result."""
    plugin = build_plugin(pts.NAME)
    snap = cluster(four_nodes(), {"node-a": 1, "node-x": 1})
    incoming = pod("p", FOO, constraints=[constraint(ZONE)])

    def cycle() -> list[str]:
        state = CycleState()
        assert plugin.pre_filter(state, incoming, snap).ok
        return feasible({n.name: plugin.filter(state, incoming, n) for n in snap})

    assert cycle() == ["node-a", "node-b", "node-x", "node-y"]
    snap.by_name["node-b"].add_pod(pod("late", FOO, "node-b"))
    assert cycle() == ["node-x", "node-y"]
    # Another namespace: different counts, separately memoized.
    other = pod("q", FOO, ns="other", constraints=[constraint(ZONE)])
    state = CycleState()
    assert plugin.pre_filter(state, other, snap).ok
    assert all(plugin.filter(state, other, n).ok for n in snap)


def test_add_and_remove_pod_update_the_prefilter_state() -> None:
    """filtering.go AddPod/RemovePod (updateWithPod): matching pods of the incoming pod's
    namespace move the domain counts and so the global minimum."""
    plugin = build_plugin(pts.NAME)
    a, x = node("node-a", "zone1"), node("node-x", "zone2")
    snap = cluster([a, x], {"node-a": 1})
    incoming = pod("p", FOO, constraints=[constraint(ZONE)])
    state = CycleState()
    assert plugin.pre_filter(state, incoming, snap).ok
    assert not plugin.filter(state, incoming, a).ok   # zone1 1, zone2 0: skew 2
    other = pod("o", FOO, "node-x")
    assert plugin.add_pod(state, incoming, other, x).ok
    assert plugin.filter(state, incoming, a).ok       # 1 and 1
    elsewhere = pod("e", FOO, "node-x", ns="other")   # another namespace: not counted
    plugin.remove_pod(state, incoming, elsewhere, x)
    assert plugin.filter(state, incoming, a).ok
    plugin.remove_pod(state, incoming, other, x)
    assert not plugin.filter(state, incoming, a).ok


# -- system default constraints (buildDefaultConstraints, helper.DefaultSelector) ---------

WEB = {"app": "web"}


def service(name: str, selector: Mapping[str, str] | None, ns: str = "default") -> dict[str, Any]:
    spec: dict[str, Any] = {} if selector is None else {"selector": dict(selector)}
    return {"kind": "Service", "metadata": {"name": name, "namespace": ns}, "spec": spec}


def owned(p: PodInfo, kind: str, name: str, api_version: str = "apps/v1") -> PodInfo:
    raw = dict(p.raw)
    raw["metadata"] = {**raw["metadata"], "ownerReferences": [
        {"apiVersion": api_version, "kind": kind, "name": name, "controller": True}]}
    return PodInfo.from_json(raw)


def default_scores(incoming: PodInfo, objects: Sequence[dict[str, Any]],
                   existing: int = 2) -> Status | list[int]:
    """PodTopologySpread's normalized scores of nodes a (zone1, holding `existing` web
    pods) and x (zone2), built with listers holding `objects`."""
    plugin = build_plugin(pts.NAME, point="score", objects=objects)
    nodes = [node("node-a", "zone1"), node("node-x", "zone2")]
    snap = cluster(nodes, {"node-a": existing}, labels=WEB)
    state = CycleState()
    pre: Status = plugin.pre_score(state, incoming, nodes, snap)
    if pre.code is not Code.SUCCESS:
        return pre
    scores = plugin.score_nodes(state, incoming, nodes)
    assert isinstance(scores, list)
    assert plugin.normalize_score(state, incoming, scores).ok
    return scores


def test_pods_of_a_service_are_spread_by_default() -> None:
    incoming = pod("web-3", WEB)
    assert default_scores(incoming, [service("web", WEB)]) == [40, 100]
    # Without a Service (or controller) selecting it, the default selector is empty: no
    # default constraints, as upstream.
    assert default_scores(incoming, []) == SKIP
    # A Service with no selector selects nothing; one of another namespace is not used.
    assert default_scores(incoming, [service("a", None), service("b", WEB, ns="other")]) \
        == SKIP


def test_pods_of_a_deployment_are_spread_by_their_replicaset() -> None:
    rs = {"kind": "ReplicaSet", "metadata": {"name": "web-5d9", "namespace": "default"},
          "spec": {"selector": {"matchLabels": WEB}}}
    incoming = owned(pod("web-3", WEB), "ReplicaSet", "web-5d9")
    assert default_scores(incoming, [rs]) == [40, 100]
    # The owner must be known to the listers.
    assert default_scores(incoming, []) == SKIP
    rc = {"kind": "ReplicationController",
          "metadata": {"name": "web", "namespace": "default"}, "spec": {"selector": WEB}}
    assert default_scores(owned(pod("web-3", WEB), "ReplicationController", "web", "v1"),
                          [rc]) == [40, 100]


def test_default_constraints_never_filter() -> None:
    """The system defaults are ScheduleAnyway: PreFilter has nothing to do."""
    plugin = build_plugin(pts.NAME, objects=[service("web", WEB)])
    nodes = [node("node-a", "zone1"), node("node-x", "zone2")]
    snap = cluster(nodes, {"node-a": 5}, labels=WEB)
    assert plugin.pre_filter(CycleState(), pod("web-9", WEB), snap).code is Code.SKIP


def test_domain_counts_equal_a_count_over_every_node_as_pods_and_nodes_change() -> None:
    """The running counts (per node class, shared by pods whose node affinity differs)
    give, cycle after cycle while pods and nodes come and go, what counting every node
    gives: nodes with every topologyKey that the constraint's node inclusion policy lets
    in, their matching pods of the pod's namespace, per domain."""
    import random

    rng = random.Random(7)
    plugin = build_plugin(pts.NAME)
    zones, regions = ["z1", "z2", "z3", "z4"], ["r1", "r2"]

    def random_node(i: int) -> NodeInfo:
        labels: dict[str, Any] = {}
        if rng.random() < 0.9:
            labels["region"] = rng.choice(regions)
        return node(f"n{i}", rng.choice(zones) if rng.random() < 0.9 else None, **labels)

    nodes = [random_node(i) for i in range(30)]
    snap = Snapshot(list(nodes))
    placed = 0

    def expr() -> dict[str, Any]:
        key = rng.choice([ZONE, "region"])
        op = rng.choice(["In", "NotIn", "Exists", "DoesNotExist"])
        out: dict[str, Any] = {"key": key, "operator": op}
        if op in ("In", "NotIn"):
            out["values"] = rng.sample(zones if key == ZONE else regions, 2)
        return out

    for cycle in range(60):
        # the cluster changes between cycles: pods come and go, a node is replaced
        for _ in range(rng.randrange(4)):
            n = rng.choice(snap.nodes)
            placed += 1
            n.add_pod(pod(f"e{placed}", {"foo": "", "g": rng.choice("ab")}, n.name,
                          ns=rng.choice(["default", "other"]), deleting=rng.random() < 0.1))
        if cycle % 10 == 9:
            old = snap.nodes[rng.randrange(len(snap.nodes))]
            fresh = random_node(int(old.name[1:]))
            for p in old.pods.values():
                fresh.add_pod(p)
            snap = Snapshot([fresh if n is old else n for n in snap.nodes])
        spread = [constraint(ZONE, 2, selector={"matchLabels": {"g": rng.choice("ab")}},
                             nodeAffinityPolicy=rng.choice(["Honor", "Ignore"]))]
        if rng.random() < 0.5:
            spread.append(constraint("region", 1))
        incoming = pod("p", {"foo": "", "g": "a"}, constraints=spread,
                       node_selector={"region": "r1"} if rng.random() < 0.2 else None)
        terms = [{"matchExpressions": [expr() for _ in range(rng.randrange(1, 3))]}
                 for _ in range(rng.randrange(0, 3))]
        if terms:
            if rng.random() < 0.1:
                terms[0]["matchFields"] = [{"key": "metadata.name", "operator": "In",
                                            "values": ["n1"]}]
            incoming.raw["spec"]["affinity"] = {"nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}
            incoming = PodInfo.from_json(incoming.raw)

        state = CycleState()
        assert plugin.pre_filter(state, incoming, snap).ok
        got = [c.counts for c in state.read(pts.PRE_FILTER_KEY)]
        compiled = pts.pod_constraints(incoming, "DoNotSchedule")
        affinity = pts.required_node_affinity(incoming)
        want: list[dict[str, int]] = [{} for _ in compiled]
        for n in snap.nodes:
            if not all(c.topology_key in n.labels for c in compiled):
                continue
            for i, c in enumerate(compiled):
                if c.honor_node_affinity and not affinity(n):
                    continue
                value = n.labels[c.topology_key]
                want[i][value] = want[i].get(value, 0) + pts.count_matching(
                    n, c.selector, incoming.namespace)
        assert got == want, cycle
