"""NodeAffinity, shaped after upstream
pkg/scheduler/framework/plugins/nodeaffinity/node_affinity_test.go
(TestNodeAffinity, TestNodeAffinityPriority) and component-helpers
scheduling/corev1/nodeaffinity/nodeaffinity_test.go."""

from __future__ import annotations

from typing import Any

import pytest

from polsched.framework import CycleState, NodeInfo, PodInfo, Snapshot, Status
from polsched.framework.interfaces import PreFilterResult
from polsched.framework.status import Code
from polsched.plugins import node_affinity
from polsched.plugins.node_affinity import (
    ERR_REASON_CONFLICT,
    ERR_REASON_ENFORCED,
    ERR_REASON_POD,
)
from tests.builders import make_node, make_pod
from tests.unit.pipelines import args_errors, build_plugin

pytestmark = pytest.mark.unit

REQ = "requiredDuringSchedulingIgnoredDuringExecution"
PREF = "preferredDuringSchedulingIgnoredDuringExecution"


def pod(node_selector: dict[str, str] | None = None,
        affinity: dict[str, Any] | None = None) -> PodInfo:
    p = make_pod().name("p").namespace("ns")
    if node_selector is not None:
        p.node_selector(node_selector)
    if affinity is not None:
        p.affinity({"nodeAffinity": affinity})
    return p.info()


def required(*terms: dict[str, Any]) -> dict[str, Any]:
    return {REQ: {"nodeSelectorTerms": list(terms)}}


def expr(key: str, op: str, *values: str) -> dict[str, Any]:
    r: dict[str, Any] = {"key": key, "operator": op}
    if values:
        r["values"] = list(values)
    return r


def node(name: str = "node1", labels: dict[str, str] | None = None) -> NodeInfo:
    return make_node().name(name).labels(labels or {}).info()


def run_filter(p: PodInfo, n: NodeInfo, args: dict[str, Any] | None = None,
               ) -> tuple[Code, tuple[str, ...]]:
    plugin = build_plugin(node_affinity.NAME, args)
    state = CycleState()
    pre = plugin.pre_filter(state, p, Snapshot([n]))
    if isinstance(pre, PreFilterResult):
        pass  # the node names matchFields gives; Filter still checks (see the pipeline tests)
    elif pre.code is Code.SKIP:
        return Code.SUCCESS, ()
    elif not pre.ok:
        return pre.code, pre.reasons
    st = plugin.filter(state, p, n)
    return st.code, st.reasons


FITS = (Code.SUCCESS, ())
NO_MATCH = (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (ERR_REASON_POD,))

FILTER_CASES: list[tuple[str, PodInfo, dict[str, str], tuple[Code, tuple[str, ...]]]] = [
    ("missing labels", pod({"foo": "bar"}), {}, NO_MATCH),
    ("same labels", pod({"foo": "bar"}), {"foo": "bar"}, FITS),
    ("node labels are superset", pod({"foo": "bar"}), {"foo": "bar", "baz": "blah"}, FITS),
    ("node labels are subset", pod({"foo": "bar", "baz": "blah"}), {"foo": "bar"}, NO_MATCH),
    ("matchExpressions In matches", pod(affinity=required(
        {"matchExpressions": [expr("foo", "In", "bar", "value2")]})), {"foo": "bar"}, FITS),
    ("matchExpressions Gt matches", pod(affinity=required(
        {"matchExpressions": [expr("kernel-version", "Gt", "0204")]})),
     {"kernel-version": "0206"}, FITS),
    ("matchExpressions NotIn matches", pod(affinity=required(
        {"matchExpressions": [expr("mem-type", "NotIn", "DDR", "DDR2")]})),
     {"mem-type": "DDR3"}, FITS),
    ("matchExpressions Exists matches", pod(affinity=required(
        {"matchExpressions": [expr("GPU", "Exists")]})), {"GPU": "NVIDIA-GRID-K1"}, FITS),
    ("affinity that doesn't match the node's labels", pod(affinity=required(
        {"matchExpressions": [expr("foo", "In", "value1", "value2")]})), {"foo": "bar"},
     NO_MATCH),
    ("empty matchExpressions match no objects", pod(affinity=required(
        {"matchExpressions": []})), {"foo": "bar"}, NO_MATCH),
    ("no affinity schedules onto a node", pod(), {"foo": "bar"}, FITS),
    ("affinity without required node selector schedules onto a node",
     pod(affinity={}), {"foo": "bar"}, FITS),
    ("multiple matchExpressions ANDed that match", pod(affinity=required(
        {"matchExpressions": [expr("GPU", "Exists"), expr("GPU", "NotIn", "AMD", "INTER")]})),
     {"GPU": "NVIDIA-GRID-K1"}, FITS),
    ("multiple matchExpressions ANDed that don't match", pod(affinity=required(
        {"matchExpressions": [expr("GPU", "Exists"), expr("GPU", "In", "AMD", "INTER")]})),
     {"GPU": "NVIDIA-GRID-K1"}, NO_MATCH),
    ("multiple terms ORed, one matches", pod(affinity=required(
        {"matchExpressions": [expr("foo", "In", "bar", "value2")]},
        {"matchExpressions": [expr("diffkey", "In", "wrong", "value2")]})),
     {"foo": "bar"}, FITS),
    ("affinity and nodeSelector both match", pod({"foo": "bar"}, required(
        {"matchExpressions": [expr("foo", "Exists")]})), {"foo": "bar"}, FITS),
    ("affinity matches but nodeSelector doesn't", pod({"foo": "bar"}, required(
        {"matchExpressions": [expr("foo", "Exists")]})), {"foo": "barrrrrr"}, NO_MATCH),
    ("an invalid value in the affinity term matches no node", pod(affinity=required(
        {"matchExpressions": [expr("foo", "NotIn", "invalid value: ___@#$%^")]})),
     {"foo": "bar"}, NO_MATCH),
    ("an invalid term is skipped, a valid one still matches", pod(affinity=required(
        {"matchExpressions": [expr("foo", "Bogus", "x")]},
        {"matchExpressions": [expr("foo", "In", "bar")]})), {"foo": "bar"}, FITS),
    ("matchFields In matches the node name", pod(affinity=required(
        {"matchFields": [expr("metadata.name", "In", "node1")]})), {}, FITS),
    ("matchFields In doesn't match the node name", pod(affinity=required(
        {"matchFields": [expr("metadata.name", "In", "node2")]})), {}, NO_MATCH),
    ("two terms: matchFields doesn't match, matchExpressions matches", pod(affinity=required(
        {"matchFields": [expr("metadata.name", "In", "node2")]},
        {"matchExpressions": [expr("foo", "In", "bar")]})), {"foo": "bar"}, FITS),
    ("one term: matchFields doesn't match, matchExpressions matches", pod(affinity=required(
        {"matchFields": [expr("metadata.name", "In", "node2")],
         "matchExpressions": [expr("foo", "In", "bar")]})), {"foo": "bar"}, NO_MATCH),
    ("one term: both matchFields and matchExpressions match", pod(affinity=required(
        {"matchFields": [expr("metadata.name", "In", "node1")],
         "matchExpressions": [expr("foo", "In", "bar")]})), {"foo": "bar"}, FITS),
    ("two terms: neither matches", pod(affinity=required(
        {"matchFields": [expr("metadata.name", "In", "node2")]},
        {"matchExpressions": [expr("foo", "In", "not-match-to-bar")]})), {"foo": "bar"},
     NO_MATCH),
    ("matchFields with two values is invalid and matches nothing", pod(affinity=required(
        {"matchFields": [expr("metadata.name", "In", "node1", "node2")]})), {}, NO_MATCH),
    ("two conflicting matchFields requirements", pod(affinity=required(
        {"matchFields": [expr("metadata.name", "In", "node1"),
                         expr("metadata.name", "In", "node2")]})), {"foo": "bar"},
     (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (ERR_REASON_CONFLICT,))),
]


@pytest.mark.parametrize(("p", "labels", "want"), [c[1:] for c in FILTER_CASES],
                         ids=[c[0] for c in FILTER_CASES])
def test_filter(p: PodInfo, labels: dict[str, str],
                want: tuple[Code, tuple[str, ...]]) -> None:
    assert run_filter(p, node("node1", labels)) == want


def test_two_terms_of_node_name_affinity_each_fit_their_node() -> None:
    p = pod(affinity=required({"matchFields": [expr("metadata.name", "In", "node1")]},
                              {"matchFields": [expr("metadata.name", "In", "node2")]}))
    assert run_filter(p, node("node2")) == FITS
    assert run_filter(p, node("node3")) == NO_MATCH


ADDED_ZONE = {"addedAffinity": {REQ: {"nodeSelectorTerms": [
    {"matchExpressions": [expr("zone", "In", "foo")]}]}}}


def test_matches_added_affinity_and_pods_node_affinity() -> None:
    p = pod(affinity=required({"matchExpressions": [expr("foo", "In", "bar")]}))
    assert run_filter(p, node("n", {"foo": "bar", "zone": "foo"}), ADDED_ZONE) == FITS


def test_matches_added_affinity_but_not_pods_node_affinity() -> None:
    p = pod(affinity=required({"matchExpressions": [expr("foo", "In", "bar")]}))
    assert run_filter(p, node("n", {"zone": "foo"}), ADDED_ZONE) == NO_MATCH


def test_doesnt_match_added_affinity() -> None:
    assert run_filter(pod(), node("n", {"zone": "bar"}), ADDED_ZONE) == (
        Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (ERR_REASON_ENFORCED,))


def test_prefilter_skips_pod_without_selector_or_required_affinity() -> None:
    plugin = build_plugin(node_affinity.NAME)
    assert plugin.pre_filter(CycleState(), pod(), Snapshot([])).code is Code.SKIP
    plugin = build_plugin(node_affinity.NAME, ADDED_ZONE)
    assert plugin.pre_filter(CycleState(), pod(), Snapshot([])).ok


def test_filter_matches_correctly_even_if_prefilter_is_not_called() -> None:
    plugin = build_plugin(node_affinity.NAME)
    p = pod({"foo": "bar"})
    assert plugin.filter(CycleState(), p, node("n", {"foo": "bar"})).ok
    assert plugin.filter(CycleState(), p, node("n", {})).rejected


# -- score ---------------------------------------------------------------------------------

LABEL1 = {"foo": "bar"}
LABEL2 = {"key": "value"}
LABEL3 = {"az": "az1"}
LABEL4 = {"abc": "az11", "def": "az22"}
LABEL5 = {"foo": "bar", "key": "value", "az": "az1"}

AFFINITY1 = {PREF: [{"weight": 2, "preference": {
    "matchExpressions": [expr("foo", "In", "bar")]}}]}
AFFINITY2 = {PREF: [
    {"weight": 2, "preference": {"matchExpressions": [expr("foo", "In", "bar")]}},
    {"weight": 4, "preference": {"matchExpressions": [expr("key", "In", "value")]}},
    {"weight": 5, "preference": {"matchExpressions": [
        expr("foo", "In", "bar"), expr("key", "In", "value"), expr("az", "In", "az1")]}},
]}


def score(p: PodInfo, nodes: list[NodeInfo], args: dict[str, Any] | None = None,
          ) -> list[int] | Code:
    plugin = build_plugin(node_affinity.NAME, args)
    state = CycleState()
    pre: Status = plugin.pre_score(state, p, nodes, Snapshot(nodes))
    if not pre.ok:
        return pre.code
    scores = plugin.score_nodes(state, p, nodes)
    assert isinstance(scores, list)
    assert plugin.normalize_score(state, p, scores).ok
    return scores


def test_prescore_skips_when_node_affinity_is_nil() -> None:
    assert score(pod(), [node("node1", LABEL1)]) is Code.SKIP


def test_prescore_error_for_broken_preferred_affinity() -> None:
    p = pod(affinity={PREF: [{"weight": 2, "preference": {
        "matchExpressions": [expr("invalid key", "In", "bar")]}}]})
    plugin = build_plugin(node_affinity.NAME)
    st = plugin.pre_score(CycleState(), p, [], Snapshot([]))
    assert st.code is Code.ERROR
    assert "matchExpressions[0].key" in st.message


def test_no_node_matches_preferred_terms_all_zero() -> None:
    nodes = [node("node1", LABEL4), node("node2", LABEL2), node("node3", LABEL3)]
    assert score(pod(affinity=AFFINITY1), nodes) == [0, 0, 0]


def test_only_node1_matches_preferred_terms() -> None:
    nodes = [node("node1", LABEL1), node("node2", LABEL2), node("node3", LABEL3)]
    assert score(pod(affinity=AFFINITY1), nodes) == [100, 0, 0]


def test_all_nodes_match_with_different_priorities() -> None:
    nodes = [node("node1", LABEL1), node("node5", LABEL5), node("node2", LABEL2)]
    assert score(pod(affinity=AFFINITY2), nodes) == [18, 100, 36]


def test_added_affinity_scores() -> None:
    nodes = [node("node1", LABEL1), node("node2", LABEL2)]
    assert score(pod(), nodes, {"addedAffinity": AFFINITY1}) == [100, 0]


def test_added_affinity_and_pod_affinity_add_up() -> None:
    nodes = [node("node1", LABEL1), node("node2", LABEL2), node("node3", LABEL5)]
    args = {"addedAffinity": {PREF: [{"weight": 3, "preference": {
        "matchExpressions": [expr("key", "In", "value")]}}]}}
    assert score(pod(affinity=AFFINITY1), nodes, args) == [40, 60, 100]


def test_score_without_prescore() -> None:
    plugin = build_plugin(node_affinity.NAME)
    p = pod(affinity=AFFINITY2)
    nodes = [node("node1", LABEL1), node("node5", LABEL5), node("node2", LABEL2)]
    assert [plugin.score(CycleState(), p, n) for n in nodes] == [2, 11, 4]


def test_zero_weight_and_empty_preferences_are_ignored() -> None:
    p = pod(affinity={PREF: [{"weight": 0, "preference": {
        "matchExpressions": [expr("foo", "Exists")]}}, {"weight": 5, "preference": {}}]})
    assert score(p, [node("node1", LABEL1)]) is Code.SKIP


# -- args ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("args", "path"), [
    ({"addedAffinity": {REQ: {"nodeSelectorTerms": [
        {"matchExpressions": [expr("foo", "Bogus", "x")]}]}}},
     f"addedAffinity.{REQ}.nodeSelectorTerms[0].matchExpressions[0].operator"),
    ({"addedAffinity": {PREF: [{"weight": 1, "preference": {
        "matchFields": [expr("metadata.name", "Exists")]}}]}},
     f"addedAffinity.{PREF}[0].preference.matchFields[0].operator"),
    ({"addedAffinity": {PREF: [{"weight": 1, "preference": {
        "matchExpressions": [expr("foo", "In")]}}]}},
     f"addedAffinity.{PREF}[0].preference.matchExpressions[0].values"),
    ({"addedAffinity": {"podAffinity": {}}}, "addedAffinity.podAffinity"),
    ({"added": {}}, "added"),
])
def test_invalid_args_name_the_field(args: dict[str, Any], path: str) -> None:
    assert args_errors(node_affinity.NAME, args) == [f"args.{path}"]
