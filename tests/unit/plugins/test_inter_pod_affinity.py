"""InterPodAffinity filter and scorer.

Scenarios follow kube-scheduler's pkg/scheduler/framework/plugins/interpodaffinity/
filtering_test.go (TestRequiredAffinitySingleNode, TestRequiredAffinityMultipleNodes) and
scoring_test.go (TestPreferredAffinity, TestPreferredAffinityWithHardPodAffinitySymmetricWeight).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from polsched.api import PolicyError
from polsched.framework import (
    SKIP,
    Code,
    CycleState,
    NodeInfo,
    PodInfo,
    Snapshot,
    Status,
)
from polsched.plugins import inter_pod_affinity as ipa
from tests.builders import make_node, make_pod
from tests.unit.pipelines import build_plugin, load

pytestmark = pytest.mark.unit

REQ = "requiredDuringSchedulingIgnoredDuringExecution"
PREF = "preferredDuringSchedulingIgnoredDuringExecution"


# -- builders -------------------------------------------------------------------------------

def term(key: str, op: str, values: Sequence[str] = (), topology: str = "region",
         **extra: Any) -> dict[str, Any]:
    expr: dict[str, Any] = {"key": key, "operator": op}
    if values:
        expr["values"] = list(values)
    return {"labelSelector": {"matchExpressions": [expr]}, "topologyKey": topology, **extra}


def pod(name: str, labels: Mapping[str, str] | None = None, node: str = "", ns: str = "default",
        affinity: Sequence[dict[str, Any]] = (), anti: Sequence[dict[str, Any]] = (),
        pref_affinity: Sequence[tuple[int, dict[str, Any]]] = (),
        pref_anti: Sequence[tuple[int, dict[str, Any]]] = ()) -> PodInfo:
    aff: dict[str, Any] = {}
    if affinity or pref_affinity:
        aff["podAffinity"] = {
            REQ: list(affinity),
            PREF: [{"weight": w, "podAffinityTerm": t} for w, t in pref_affinity]}
    if anti or pref_anti:
        aff["podAntiAffinity"] = {
            REQ: list(anti),
            PREF: [{"weight": w, "podAffinityTerm": t} for w, t in pref_anti]}
    return (make_pod().name(name).namespace(ns).labels(labels or {}).node(node).affinity(aff)
            .container().info())


def cluster(nodes: Mapping[str, Mapping[str, str]], pods: Sequence[PodInfo]) -> Snapshot:
    infos = {name: make_node().name(name).labels(labels).info()
             for name, labels in nodes.items()}
    for p in pods:
        infos[p.node_name].add_pod(p)
    return Snapshot(list(infos.values()))


NODE1 = {"node1": {"region": "r1", "zone": "z11"}}
THREE = {
    "machine1": {"region": "China", "zone": "z1"},
    "machine2": {"region": "China", "zone": "z2"},
    "machine3": {"region": "India", "zone": "z3"},
}
SCAN = {"service": "securityscan"}
S1 = {"security": "S1"}


def namespaces(labels: Mapping[str, Mapping[str, str]]) -> list[dict[str, Any]]:
    """Namespace objects for the listers the plugin is built with."""
    return [{"kind": "Namespace", "metadata": {"name": n, "labels": dict(ls)}}
            for n, ls in labels.items()]


def run_filter(incoming: PodInfo, snap: Snapshot, args: Mapping[str, Any] | None = None,
               ns_labels: Mapping[str, Mapping[str, str]] | None = None,
               ) -> tuple[Status, dict[str, Status]]:
    plugin = build_plugin(ipa.NAME, args, objects=namespaces(ns_labels or {}))
    state = CycleState()
    pre = plugin.pre_filter(state, incoming, snap)
    if pre.code is not Code.SUCCESS:
        return pre, {}
    statuses = {n.name: plugin.filter(state, incoming, n) for n in snap}
    # The form the pipeline's per-node loop calls gives the same statuses.
    bound = plugin.bind_filter(state, incoming)
    if bound is not None:
        assert {n.name: bound(n) for n in snap} == statuses
    return pre, statuses


def run_score(incoming: PodInfo, snap: Snapshot, args: Mapping[str, Any] | None = None,
              ns_labels: Mapping[str, Mapping[str, str]] | None = None,
              ) -> Status | dict[str, int]:
    plugin = build_plugin(ipa.NAME, args, point="score",
                          objects=namespaces(ns_labels or {}))
    state = CycleState()
    nodes = list(snap)
    pre: Status = plugin.pre_score(state, incoming, nodes, snap)
    if pre.code is not Code.SUCCESS:
        return pre
    scores = plugin.score_nodes(state, incoming, nodes)
    assert isinstance(scores, list)
    assert plugin.normalize_score(state, incoming, scores).ok
    return {n.name: s for n, s in zip(nodes, scores, strict=True)}


AFFINITY_FAIL = (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, ("node(s) didn't match pod affinity rules",))
ANTI_FAIL = (Code.UNSCHEDULABLE, ("node(s) didn't match pod anti-affinity rules",))
EXISTING_FAIL = (Code.UNSCHEDULABLE,
                 ("node(s) didn't satisfy existing pods anti-affinity rules",))
OK = (Code.SUCCESS, ())


def outcome(st: Status) -> tuple[Code, tuple[str, ...]]:
    return st.code, st.reasons


# -- filter: one node (TestRequiredAffinitySingleNode) --------------------------------------

def test_pod_without_rules_skips_prefilter() -> None:
    pre, _ = run_filter(pod("p"), cluster(NODE1, []))
    assert pre == SKIP


@pytest.mark.parametrize("name,incoming,existing,want", [
    ("affinity In matches the existing pod",
     pod("p", S1, affinity=[term("service", "In", ["securityscan", "value2"])]),
     [pod("e", SCAN, "node1")], OK),
    ("affinity NotIn matches the existing pod",
     pod("p", S1, affinity=[term("service", "NotIn", ["securityscan3", "value3"])]),
     [pod("e", SCAN, "node1")], OK),
    ("affinity fails because the existing pod is in another namespace",
     pod("p", S1, affinity=[term("service", "In", ["securityscan"],
                                 namespaces=["DiffNameSpace"])]),
     [pod("e", SCAN, "node1", ns="ns")], AFFINITY_FAIL),
    ("affinity fails because the selector does not match the existing pod",
     pod("p", SCAN, affinity=[term("service", "In", ["antivirusscan", "value2"])]),
     [pod("e", SCAN, "node1")], AFFINITY_FAIL),
    ("affinity terms are ANDed: one unmatched term fails the node",
     pod("p", S1, affinity=[term("service", "Exists"),
                            term("service", "In", ["securityscan2"])]),
     [pod("e", SCAN, "node1")], AFFINITY_FAIL),
    ("affinity and anti-affinity both satisfied",
     pod("p", S1, affinity=[term("service", "In", ["securityscan"])],
         anti=[term("service", "In", ["antivirusscan"], topology="node")]),
     [pod("e", SCAN, "node1")], OK),
    ("anti-affinity against the existing pod in the same zone",
     pod("p", S1, affinity=[term("service", "In", ["securityscan"])],
         anti=[term("service", "In", ["securityscan"], topology="zone")]),
     [pod("e", SCAN, "node1")], ANTI_FAIL),
    ("the existing pod's anti-affinity rejects the incoming pod (symmetry)",
     pod("p", SCAN, affinity=[term("service", "In", ["securityscan"])]),
     [pod("e", SCAN, "node1", anti=[term("service", "In", ["securityscan"], topology="zone")])],
     EXISTING_FAIL),
    ("existing anti-affinity is checked when the incoming pod has no rules",
     pod("p", SCAN),
     [pod("e", SCAN, "node1", anti=[term("service", "In", ["securityscan"], topology="zone")])],
     EXISTING_FAIL),
    ("symmetry a1: incoming anti-affinity matches the existing pod first",
     pod("p", SCAN, anti=[term("service", "Exists", topology="zone"),
                          term("security", "Exists", topology="zone")]),
     [pod("e", S1, "node1", anti=[term("security", "Exists", topology="zone")])],
     ANTI_FAIL),
    ("symmetry a2: only the existing pod's term matches",
     pod("p", S1, anti=[term("security", "Exists", topology="zone")]),
     [pod("e", SCAN, "node1", anti=[term("service", "Exists", topology="zone"),
                                    term("security", "Exists", topology="zone")])],
     EXISTING_FAIL),
])
def test_required_affinity_single_node(name: str, incoming: PodInfo, existing: list[PodInfo],
                                       want: tuple[Code, tuple[str, ...]]) -> None:
    _, statuses = run_filter(incoming, cluster(NODE1, existing))
    assert outcome(statuses["node1"]) == want, name


def test_existing_anti_affinity_that_does_not_match_skips() -> None:
    existing = pod("e", SCAN, "node1",
                   anti=[term("service", "NotIn", ["securityscan"], topology="zone")])
    pre, _ = run_filter(pod("p", SCAN), cluster(NODE1, [existing]))
    assert pre.code is Code.SKIP


def test_malformed_selector_is_unresolvable_at_prefilter() -> None:
    bad = {"labelSelector": {"matchExpressions": [{"key": "a", "operator": "Bogus"}]},
           "topologyKey": "region"}
    pre, _ = run_filter(pod("p", affinity=[bad]), cluster(NODE1, []))
    assert pre.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert pre.message.startswith("parsing pod: ")
    assert "spec.affinity.podAffinity" in pre.message


def test_malformed_existing_pod_terms_are_ignored() -> None:
    bad = {"labelSelector": {"matchExpressions": [{"key": "a", "operator": "Bogus"}]},
           "topologyKey": "zone"}
    pre, _ = run_filter(pod("p", SCAN), cluster(NODE1, [pod("e", SCAN, "node1", anti=[bad])]))
    assert pre.code is Code.SKIP


# -- filter: several nodes (TestRequiredAffinityMultipleNodes) ------------------------------

def test_affinity_follows_topology_domain() -> None:
    """A pod with affinity to region of securityscan pods fits every node in that region and
    no node elsewhere."""
    snap = cluster(THREE, [pod("e", SCAN, "machine1")])
    _, st = run_filter(pod("p", affinity=[term("service", "In", ["securityscan"])]), snap)
    assert {n: outcome(s) for n, s in st.items()} == {
        "machine1": OK, "machine2": OK, "machine3": AFFINITY_FAIL}


def test_node_without_topology_key_fails_affinity() -> None:
    nodes = {**THREE, "nolabels": {}}
    snap = cluster(nodes, [pod("e", SCAN, "machine1")])
    _, st = run_filter(pod("p", affinity=[term("service", "In", ["securityscan"])]), snap)
    assert outcome(st["nolabels"]) == AFFINITY_FAIL


def test_anti_affinity_rejects_the_whole_zone_only() -> None:
    nodes = {"a": {"zone": "z1"}, "b": {"zone": "z1"}, "c": {"zone": "z2"}}
    snap = cluster(nodes, [pod("e", SCAN, "a")])
    _, st = run_filter(pod("p", anti=[term("service", "Exists", topology="zone")]), snap)
    assert {n: outcome(s) for n, s in st.items()} == {"a": ANTI_FAIL, "b": ANTI_FAIL, "c": OK}


def test_first_pod_of_a_self_affine_group_may_land_anywhere_with_the_key() -> None:
    """No pod matches anywhere and the pod matches its own term: allowed on nodes that have
    the topology key (satisfyPodAffinity's special case)."""
    nodes = {**THREE, "nolabels": {}}
    incoming = pod("p", SCAN, affinity=[term("service", "In", ["securityscan"])])
    _, st = run_filter(incoming, cluster(nodes, []))
    assert {n: outcome(s) for n, s in st.items()} == {
        "machine1": OK, "machine2": OK, "machine3": OK, "nolabels": AFFINITY_FAIL}


def test_self_affinity_exception_ends_once_a_matching_pod_exists() -> None:
    incoming = pod("p", SCAN, affinity=[term("service", "In", ["securityscan"])])
    _, st = run_filter(incoming, cluster(THREE, [pod("e", SCAN, "machine3")]))
    assert outcome(st["machine1"]) == AFFINITY_FAIL
    assert outcome(st["machine3"]) == OK


def test_first_pod_not_matching_its_own_term_is_not_excepted() -> None:
    incoming = pod("p", S1, affinity=[term("service", "In", ["securityscan"])])
    _, st = run_filter(incoming, cluster(THREE, []))
    assert all(outcome(s) == AFFINITY_FAIL for s in st.values())


# -- namespaces and label keys ---------------------------------------------------------------

def test_empty_namespace_selector_means_all_namespaces() -> None:
    snap = cluster(NODE1, [pod("e", SCAN, "node1", ns="other")])
    incoming = pod("p", affinity=[term("service", "Exists", namespaceSelector={})])
    _, st = run_filter(incoming, snap)
    assert outcome(st["node1"]) == OK


def test_namespace_selector_uses_namespace_labels_from_the_listers() -> None:
    snap = cluster(NODE1, [pod("e", SCAN, "node1", ns="team-a")])
    sel = {"matchLabels": {"team": "a"}}
    incoming = pod("p", affinity=[term("service", "Exists", namespaceSelector=sel)])
    labels = {"team-a": {"team": "a"}, "default": {}}
    _, with_lookup = run_filter(incoming, snap, ns_labels=labels)
    assert outcome(with_lookup["node1"]) == OK
    # Without namespace labels a non-empty namespaceSelector selects no namespace.
    _, without = run_filter(incoming, snap)
    assert outcome(without["node1"]) == AFFINITY_FAIL


def test_existing_pod_namespace_selector_matches_incoming_namespace_labels() -> None:
    existing = pod("e", SCAN, "node1", ns="infra", anti=[
        term("service", "Exists", topology="zone",
             namespaceSelector={"matchLabels": {"tier": "web"}})])
    snap = cluster(NODE1, [existing])
    labels = {"web": {"tier": "web"}, "batch": {"tier": "batch"}}
    _, st = run_filter(pod("p", SCAN, ns="web"), snap, ns_labels=labels)
    assert outcome(st["node1"]) == EXISTING_FAIL
    pre, _ = run_filter(pod("p", SCAN, ns="batch"), snap, ns_labels=labels)
    assert pre.code is Code.SKIP


def test_match_label_keys_restrict_to_pods_with_the_same_value() -> None:
    nodes = {"a": {"zone": "z1"}, "b": {"zone": "z2"}}
    snap = cluster(nodes, [pod("old", {"app": "web", "rev": "1"}, "a"),
                           pod("new", {"app": "web", "rev": "2"}, "b")])
    anti = term("app", "In", ["web"], topology="zone", matchLabelKeys=["rev"])
    _, st = run_filter(pod("p", {"app": "web", "rev": "2"}, anti=[anti]), snap)
    assert {n: outcome(s) for n, s in st.items()} == {"a": OK, "b": ANTI_FAIL}


def test_mismatch_label_keys_exclude_pods_with_the_same_value() -> None:
    nodes = {"a": {"zone": "z1"}, "b": {"zone": "z2"}}
    snap = cluster(nodes, [pod("t1", {"tenant": "t1"}, "a"), pod("t2", {"tenant": "t2"}, "b")])
    anti = term("tenant", "Exists", topology="zone", mismatchLabelKeys=["tenant"])
    _, st = run_filter(pod("p", {"tenant": "t1"}, anti=[anti]), snap)
    assert {n: outcome(s) for n, s in st.items()} == {"a": OK, "b": ANTI_FAIL}


# -- scoring (scoring_test.go) -----------------------------------------------------------------

def test_score_skips_without_any_affinity() -> None:
    snap = cluster(THREE, [pod("e", SCAN, "machine1")])
    assert run_score(pod("p"), snap) == SKIP


def test_preferred_affinity_favours_the_matching_region() -> None:
    snap = cluster(THREE, [pod("e", SCAN, "machine1")])
    incoming = pod("p", pref_affinity=[(5, term("service", "In", ["securityscan"]))])
    assert run_score(incoming, snap) == {"machine1": 100, "machine2": 100, "machine3": 0}


def test_preferred_anti_affinity_avoids_the_matching_zone() -> None:
    snap = cluster(THREE, [pod("e", SCAN, "machine1")])
    incoming = pod("p", pref_anti=[(5, term("service", "In", ["securityscan"],
                                            topology="zone"))])
    assert run_score(incoming, snap) == {"machine1": 0, "machine2": 100, "machine3": 100}


def test_min_max_normalization_of_mixed_weights() -> None:
    """Region China gets +5 from affinity, zone z1 -8 from anti-affinity: raw China/z1 = -3,
    China/z2 = 5, India = 0, scaled by (s - min) / (max - min)."""
    snap = cluster(THREE, [pod("e", SCAN, "machine1")])
    incoming = pod("p", pref_affinity=[(5, term("service", "Exists"))],
                   pref_anti=[(8, term("service", "Exists", topology="zone"))])
    assert run_score(incoming, snap) == {"machine1": 0, "machine2": 100, "machine3": 37}


def test_existing_pods_preferred_terms_are_symmetric() -> None:
    existing = pod("e", S1, "machine3",
                   pref_affinity=[(10, term("service", "In", ["securityscan"]))])
    snap = cluster(THREE, [existing])
    assert run_score(pod("p", SCAN), snap) == {"machine1": 0, "machine2": 0, "machine3": 100}
    # ...unless existing pods' preferences are ignored for pods without preferences.
    assert run_score(pod("p", SCAN), snap,
                     {"ignorePreferredTermsOfExistingPods": True}) == SKIP


def test_existing_pods_required_affinity_counts_with_hard_weight() -> None:
    existing = pod("e", S1, "machine1", affinity=[term("service", "In", ["securityscan"])])
    snap = cluster(THREE, [existing])
    assert run_score(pod("p", SCAN), snap) == {"machine1": 100, "machine2": 100, "machine3": 0}
    assert run_score(pod("p", SCAN), snap, {"hardPodAffinityWeight": 0}) == SKIP


def test_existing_pods_preferred_anti_affinity_lowers_the_score() -> None:
    existing = pod("e", S1, "machine1",
                   pref_anti=[(3, term("service", "Exists", topology="zone"))])
    snap = cluster(THREE, [existing])
    assert run_score(pod("p", SCAN), snap) == {"machine1": 0, "machine2": 100, "machine3": 100}


# -- args -------------------------------------------------------------------------------------

def test_default_args() -> None:
    assert ipa.SPEC.default_args == {"hardPodAffinityWeight": 1,
                                     "ignorePreferredTermsOfExistingPods": False}
    assert ipa.parse_args(None) == ipa.InterPodAffinityArgs(1, False)
    assert ipa.parse_args({}) == ipa.InterPodAffinityArgs(1, False)
    assert ipa.parse_args({"hardPodAffinityWeight": 100}).hard_pod_affinity_weight == 100


@pytest.mark.parametrize("args,path", [
    ({"hardPodAffinityWeight": 101}, "hardPodAffinityWeight"),
    ({"hardPodAffinityWeight": -1}, "hardPodAffinityWeight"),
    ({"hardPodAffinityWeight": "1"}, "hardPodAffinityWeight"),
    ({"hardPodAffinityWeight": True}, "hardPodAffinityWeight"),
    ({"ignorePreferredTermsOfExistingPods": "yes"}, "ignorePreferredTermsOfExistingPods"),
    ({"hardPodAfinityWeight": 1}, "hardPodAfinityWeight"),
])
def test_invalid_args_name_the_field(args: dict[str, Any], path: str) -> None:
    for point in ("filters", "scorers"):
        with pytest.raises(PolicyError) as err:
            entries: dict[str, Any] = {point: [{"name": ipa.NAME, "args": args}]}
            load(defaults=False, **entries)
        assert [e.path for e in err.value.errors] == [f"spec.{point}[0].args.{path}"]


# -- counts reused across cycles (node_memo.NodeMemo) -----------------------------------------

def test_one_plugin_instance_sees_cluster_changes_between_cycles() -> None:
    """Per-node counts are reused across cycles only while a node is unchanged: a pod added
    to or removed from a node, or a node replaced, is seen by the next cycle."""
    plugin = build_plugin(ipa.NAME)
    nodes = {"a": {"zone": "z1"}, "b": {"zone": "z2"}}
    snap = cluster(nodes, [])
    incoming = pod("p", {"app": "api"}, anti=[term("app", "In", ["web"], topology="zone")])
    existing_anti = pod("guard", {"role": "guard"}, "b",
                        anti=[term("app", "Exists", topology="zone")])

    def cycle() -> dict[str, tuple[Code, tuple[str, ...]]]:
        state = CycleState()
        assert plugin.pre_filter(state, incoming, snap).ok
        return {n.name: outcome(plugin.filter(state, incoming, n)) for n in snap}

    assert cycle() == {"a": OK, "b": OK}
    web = pod("web", {"app": "web"}, "a")
    snap.by_name["a"].add_pod(web)
    assert cycle() == {"a": ANTI_FAIL, "b": OK}
    snap.by_name["b"].add_pod(existing_anti)
    assert cycle() == {"a": ANTI_FAIL, "b": EXISTING_FAIL}
    snap.by_name["a"].remove_pod(web)
    assert cycle() == {"a": OK, "b": EXISTING_FAIL}
    fresh_b = make_node().name("b").label("zone", "z2").info()
    fresh_b.add_pod(pod("web2", {"app": "web"}, "b"))
    # A new NodeInfo whose generation happens to equal the old one's is still a new node.
    fresh_b.generation = snap.by_name["b"].generation
    snap = Snapshot([snap.by_name["a"], fresh_b])
    assert cycle() == {"a": OK, "b": ANTI_FAIL}


def test_one_scorer_instance_sees_cluster_changes_between_cycles() -> None:
    plugin = build_plugin(ipa.NAME, point="score")
    snap = cluster(THREE, [pod("e", SCAN, "machine1")])
    incoming = pod("p", pref_anti=[(5, term("service", "Exists", topology="zone"))])

    def cycle() -> dict[str, int]:
        state = CycleState()
        assert plugin.pre_score(state, incoming, list(snap), snap).ok
        scores = plugin.score_nodes(state, incoming, list(snap))
        assert isinstance(scores, list)
        plugin.normalize_score(state, incoming, scores)
        return {n.name: s for n, s in zip(snap, scores, strict=True)}

    assert cycle() == {"machine1": 0, "machine2": 100, "machine3": 100}
    snap.by_name["machine2"].add_pod(pod("e2", SCAN, "machine2"))
    assert cycle() == {"machine1": 0, "machine2": 0, "machine3": 100}


def test_prefilter_and_prescore_skip_without_walking_nodes_when_nobody_has_affinity() -> None:
    """With no (anti-)affinity in the cluster or the pod, both extension points Skip in
    O(1) from the snapshot's counts; with one existing anti-affinity pod they still look."""

    class NoWalk(Snapshot):
        __slots__ = ()

        @property
        def nodes(self) -> list[NodeInfo]:
            raise AssertionError("walked the nodes")

        @nodes.setter
        def nodes(self, value: list[NodeInfo]) -> None:
            pass

    plain = pod("p", {"app": "web"})
    snap = NoWalk([make_node().name("a").label("zone", "z1").info()])
    assert build_plugin(ipa.NAME).pre_filter(CycleState(), plain, snap).code is Code.SKIP
    scorer = build_plugin(ipa.NAME, point="score")
    assert scorer.pre_score(CycleState(), plain, [], snap).code is Code.SKIP

    guarded = cluster({"a": {"zone": "z1"}},
                      [pod("guard", {}, "a", anti=[term("app", "Exists", topology="zone")])])
    assert guarded.pods_with_required_anti_affinity == 1
    assert build_plugin(ipa.NAME).pre_filter(CycleState(), plain, guarded).code \
        is Code.SUCCESS


# -- PreFilterExtensions: AddPod / RemovePod ----------------------------------------------

def test_add_and_remove_pod_update_the_prefilter_state() -> None:
    """filtering.go AddPod/RemovePod (preemption's victims, nominated pods): the incoming
    pod's anti-affinity, its affinity and an added pod's own anti-affinity all follow."""
    plugin = build_plugin(ipa.NAME)
    nodes = {"a": {"zone": "z1"}, "b": {"zone": "z2"}}
    snap = cluster(nodes, [])
    a = snap.get("a")
    assert a is not None
    incoming = pod("p", {"app": "web"}, anti=[term("app", "In", ["web"], topology="zone")])
    state = CycleState()
    assert plugin.pre_filter(state, incoming, snap).ok
    assert plugin.filter(state, incoming, a).ok
    other = pod("w", {"app": "web"}, "a")
    assert plugin.add_pod(state, incoming, other, a).ok
    assert outcome(plugin.filter(state, incoming, a)) == ANTI_FAIL
    assert plugin.remove_pod(state, incoming, other, a).ok
    assert plugin.filter(state, incoming, a).ok

    # An added pod whose own anti-affinity rejects the incoming pod.
    plain = pod("q", {"app": "db"}, affinity=[term("app", "In", ["cache"], topology="zone")])
    state = CycleState()
    assert plugin.pre_filter(state, plain, snap).ok
    guard = pod("g", {"app": "cache"}, "a", anti=[term("app", "In", ["db"], topology="zone")])
    plugin.add_pod(state, plain, guard, a)
    assert outcome(plugin.filter(state, plain, a)) == EXISTING_FAIL
    # Removed, it neither rejects q nor satisfies q's affinity any more.
    plugin.remove_pod(state, plain, guard, a)
    assert outcome(plugin.filter(state, plain, a)) == AFFINITY_FAIL


def test_hostname_anti_affinity_both_ways_in_the_per_node_form() -> None:
    """scheduler_perf's anti-affinity shape: the incoming pod's term and existing pods'
    terms share the topologyKey kubernetes.io/hostname (the per-node form then reads the
    label once); the incoming pod's own term is checked first."""
    host = "kubernetes.io/hostname"
    green = {"color": "green"}
    nodes = {f"n{i}": {host: f"n{i}"} for i in range(1, 5)}
    away = [term("color", "In", ["green"], topology=host)]
    snap = cluster(nodes, [pod("g1", green, "n1", anti=away),
                           pod("guard", {"color": "red"}, "n2", anti=away),
                           pod("red", {"color": "red"}, "n3")])
    _, statuses = run_filter(pod("p", green, anti=away), snap)
    assert {n: outcome(s) for n, s in statuses.items()} == {
        "n1": ANTI_FAIL, "n2": EXISTING_FAIL, "n3": OK, "n4": OK}
