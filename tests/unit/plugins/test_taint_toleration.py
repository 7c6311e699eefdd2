"""TaintToleration, shaped after upstream
pkg/scheduler/framework/plugins/tainttoleration/taint_toleration_test.go
(TestTaintTolerationFilter, TestTaintTolerationScore)."""

from __future__ import annotations

from typing import Any

import pytest

from polsched.framework import CycleState, NodeInfo, PodInfo, Snapshot
from polsched.framework.status import Code
from polsched.plugins import taint_toleration
from polsched.plugins.taint_toleration import ERR_REASON_UNTOLERATED
from tests.builders import make_node, make_pod
from tests.unit.pipelines import args_errors, build_plugin

pytestmark = pytest.mark.unit


def pod(tolerations: list[dict[str, Any]]) -> PodInfo:
    return make_pod().name("pod1").namespace("default").tolerations(tolerations).info()


def node(name: str, taints: list[dict[str, Any]]) -> NodeInfo:
    return make_node().name(name).taints(taints).info()


def run_filter(p: PodInfo, n: NodeInfo) -> tuple[Code, tuple[str, ...]]:
    plugin = build_plugin(taint_toleration.NAME)
    state = CycleState()
    assert plugin.pre_filter(state, p, Snapshot([n])).ok
    st = plugin.filter(state, p, n)
    return st.code, st.reasons


UNTOLERATED = (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (ERR_REASON_UNTOLERATED,))
FITS = (Code.SUCCESS, ())

FILTER_CASES = [
    ("a pod having no tolerations can't be scheduled onto a node with nonempty taints",
     [], [{"key": "dedicated", "value": "user1", "effect": "NoSchedule"}], UNTOLERATED),
    ("a pod which can be scheduled on a dedicated node assigned to user1 with effect NoSchedule",
     [{"key": "dedicated", "value": "user1", "effect": "NoSchedule"}],
     [{"key": "dedicated", "value": "user1", "effect": "NoSchedule"}], FITS),
    ("a pod which can't be scheduled on a dedicated node assigned to user2",
     [{"key": "dedicated", "operator": "Equal", "value": "user2", "effect": "NoSchedule"}],
     [{"key": "dedicated", "value": "user1", "effect": "NoSchedule"}], UNTOLERATED),
    ("a toleration with operator Exists tolerates the taints on the node",
     [{"key": "foo", "operator": "Exists", "effect": "NoSchedule"}],
     [{"key": "foo", "value": "bar", "effect": "NoSchedule"}], FITS),
    ("multiple tolerations tolerate all the taints",
     [{"key": "dedicated", "operator": "Equal", "value": "user2", "effect": "NoSchedule"},
      {"key": "foo", "operator": "Exists", "effect": "NoSchedule"}],
     [{"key": "dedicated", "value": "user2", "effect": "NoSchedule"},
      {"key": "foo", "value": "bar", "effect": "NoSchedule"}], FITS),
    ("key and value match but the non-empty effect doesn't",
     [{"key": "foo", "operator": "Equal", "value": "bar", "effect": "PreferNoSchedule"}],
     [{"key": "foo", "value": "bar", "effect": "NoSchedule"}], UNTOLERATED),
    ("key and value match and the empty effect tolerates every effect",
     [{"key": "foo", "operator": "Equal", "value": "bar"}],
     [{"key": "foo", "value": "bar", "effect": "NoSchedule"}], FITS),
    ("a PreferNoSchedule taint does not block an untolerating pod",
     [{"key": "dedicated", "operator": "Equal", "value": "user2", "effect": "NoSchedule"}],
     [{"key": "dedicated", "value": "user1", "effect": "PreferNoSchedule"}], FITS),
    ("a pod with no tolerations fits a node with only a PreferNoSchedule taint",
     [], [{"key": "dedicated", "value": "user1", "effect": "PreferNoSchedule"}], FITS),
    ("a NoExecute taint blocks like NoSchedule",
     [], [{"key": "k", "value": "v", "effect": "NoExecute"}], UNTOLERATED),
    ("an empty key with Exists tolerates every taint",
     [{"operator": "Exists"}], [{"key": "a", "value": "b", "effect": "NoExecute"},
                                {"key": "c", "effect": "NoSchedule"}], FITS),
    # TaintTolerationComparisonOperators is alpha and off by default: Gt/Lt tolerate nothing.
    ("Gt toleration cannot be used when the comparison feature gate is disabled",
     [{"key": "sla", "operator": "Gt", "value": "900", "effect": "NoSchedule"}],
     [{"key": "sla", "value": "950", "effect": "NoSchedule"}], UNTOLERATED),
    ("with mixed tolerations only Equal is honored when the gate is disabled",
     [{"key": "sla", "operator": "Gt", "value": "900", "effect": "NoSchedule"},
      {"key": "sla", "operator": "Equal", "value": "950", "effect": "NoSchedule"}],
     [{"key": "sla", "value": "950", "effect": "NoSchedule"}], FITS),
]


@pytest.mark.parametrize(("tolerations", "taints", "want"),
                         [c[1:] for c in FILTER_CASES], ids=[c[0] for c in FILTER_CASES])
def test_filter(tolerations: list[dict[str, Any]], taints: list[dict[str, Any]],
                want: tuple[Code, tuple[str, ...]]) -> None:
    assert run_filter(pod(tolerations), node("nodeA", taints)) == want


def test_filter_without_prefilter_state_still_checks_taints() -> None:
    plugin = build_plugin(taint_toleration.NAME, {})
    n = node("n", [{"key": "k", "effect": "NoSchedule"}])
    assert plugin.filter(CycleState(), pod([]), n).code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE


def score(p: PodInfo, nodes: list[NodeInfo]) -> list[int]:
    plugin = build_plugin(taint_toleration.NAME)
    state = CycleState()
    assert plugin.pre_score(state, p, nodes, Snapshot(nodes)).ok
    scores: list[int] = plugin.score_nodes(state, p, nodes)
    assert plugin.normalize_score(state, p, scores).ok
    return scores


PREFER = "PreferNoSchedule"


def test_score_tolerated_taints_score_higher_than_intolerable() -> None:
    p = pod([{"key": "foo", "operator": "Equal", "value": "bar", "effect": PREFER}])
    nodes = [node("nodeA", [{"key": "foo", "value": "bar", "effect": PREFER}]),
             node("nodeB", [{"key": "foo", "value": "blah", "effect": PREFER}])]
    assert score(p, nodes) == [100, 0]


def test_score_count_of_tolerated_taints_does_not_matter() -> None:
    p = pod([{"key": "cpu-type", "operator": "Equal", "value": "arm64", "effect": PREFER},
             {"key": "disk-type", "operator": "Equal", "value": "ssd", "effect": PREFER}])
    nodes = [node("nodeA", []),
             node("nodeB", [{"key": "cpu-type", "value": "arm64", "effect": PREFER}]),
             node("nodeC", [{"key": "cpu-type", "value": "arm64", "effect": PREFER},
                            {"key": "disk-type", "value": "ssd", "effect": PREFER}])]
    assert score(p, nodes) == [100, 100, 100]


def test_score_more_intolerable_taints_score_lower() -> None:
    p = pod([{"key": "foo", "operator": "Equal", "value": "bar", "effect": PREFER}])
    nodes = [node("nodeA", []),
             node("nodeB", [{"key": "cpu-type", "value": "arm64", "effect": PREFER}]),
             node("nodeC", [{"key": "cpu-type", "value": "arm64", "effect": PREFER},
                            {"key": "disk-type", "value": "ssd", "effect": PREFER}])]
    assert score(p, nodes) == [100, 50, 0]


def test_score_only_prefer_no_schedule_taints_and_tolerations_count() -> None:
    p = pod([{"key": "cpu-type", "operator": "Equal", "value": "arm64", "effect": "NoSchedule"},
             {"key": "disk-type", "operator": "Equal", "value": "ssd", "effect": "NoSchedule"}])
    nodes = [node("nodeA", []),
             node("nodeB", [{"key": "cpu-type", "value": "arm64", "effect": "NoSchedule"}]),
             node("nodeC", [{"key": "cpu-type", "value": "arm64", "effect": PREFER},
                            {"key": "disk-type", "value": "ssd", "effect": PREFER}])]
    assert score(p, nodes) == [100, 100, 0]


def test_score_no_taints_no_tolerations_every_node_max() -> None:
    nodes = [node("nodeA", []), node("nodeB", [])]
    assert score(pod([]), nodes) == [100, 100]


def test_args_are_refused() -> None:
    assert args_errors(taint_toleration.NAME, {"foo": 1})


def test_spec_has_filter_and_score() -> None:
    assert taint_toleration.SPEC.points == ("filter", "score")
    assert taint_toleration.SPEC.name == "TaintToleration"
