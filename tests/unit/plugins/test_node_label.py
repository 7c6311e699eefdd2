"""NodeLabel as a filter (requirements) and as a scorer (weighted preferred terms)."""

from __future__ import annotations

from typing import Any

import pytest

from polsched.framework import CycleState, NodeInfo
from polsched.framework.registry import ArgsError
from polsched.framework.status import Code
from polsched.plugins import node_label
from tests.builders import make_node, make_pod
from tests.unit.pipelines import build_plugin

pytestmark = pytest.mark.unit

POD = make_pod().name("p").namespace("ns").info()


def node(name: str, **labels: str) -> NodeInfo:
    return make_node().name(name).labels(labels).info()


def new_filter(args: dict[str, Any]) -> node_label.NodeLabelFilter:
    assert node_label.SPEC.filter is not None
    plugin = build_plugin(node_label.NAME, args)
    assert isinstance(plugin, node_label.NodeLabelFilter)
    return plugin


def new_scorer(args: dict[str, Any]) -> node_label.NodeLabelScorer:
    assert node_label.SPEC.score is not None
    plugin = build_plugin(node_label.NAME, args, point="score")
    assert isinstance(plugin, node_label.NodeLabelScorer)
    return plugin


def test_spec_has_both_points() -> None:
    assert node_label.SPEC.name == "NodeLabel"
    assert node_label.SPEC.points == ("filter", "score")


def test_exists_filter_passes_labelled_node_and_names_label_when_rejecting() -> None:
    f = new_filter({"requirements": [{"key": "priority.lixueduan.com", "operator": "Exists"}]})
    assert f.filter(CycleState(), POD, node("a", **{"priority.lixueduan.com": "3"})).ok
    st = f.filter(CycleState(), POD, node("b"))
    assert st.code is Code.UNSCHEDULABLE
    assert st.reasons == ("node(s) didn't match NodeLabel requirement "
                          "priority.lixueduan.com Exists",)


@pytest.mark.parametrize(("req", "labels", "ok"), [
    ({"key": "zone", "operator": "In", "values": ["a", "b"]}, {"zone": "b"}, True),
    ({"key": "zone", "operator": "In", "values": ["a", "b"]}, {"zone": "c"}, False),
    ({"key": "zone", "operator": "NotIn", "values": ["a"]}, {}, True),
    ({"key": "zone", "operator": "NotIn", "values": ["a"]}, {"zone": "a"}, False),
    ({"key": "gpu", "operator": "DoesNotExist"}, {"gpu": "1"}, False),
    ({"key": "prio", "operator": "Gt", "values": ["5"]}, {"prio": "6"}, True),
    ({"key": "prio", "operator": "Gt", "values": ["5"]}, {"prio": "5"}, False),
    ({"key": "prio", "operator": "Lt", "values": ["5"]}, {"prio": "x"}, False),
])
def test_operators(req: dict[str, Any], labels: dict[str, str], ok: bool) -> None:
    f = new_filter({"requirements": [req]})
    assert f.filter(CycleState(), POD, node("n", **labels)).ok is ok


def test_all_requirements_must_hold_and_first_failure_is_reported() -> None:
    f = new_filter({"requirements": [
        {"key": "zone", "operator": "In", "values": ["a", "b"]},
        {"key": "prio", "operator": "Gt", "values": ["5"]},
    ]})
    assert f.filter(CycleState(), POD, node("n", zone="a", prio="9")).ok
    assert f.filter(CycleState(), POD, node("n", zone="a", prio="1")).reasons == (
        "node(s) didn't match NodeLabel requirement prio Gt 5",)
    assert f.filter(CycleState(), POD, node("n", zone="c", prio="1")).reasons == (
        "node(s) didn't match NodeLabel requirement zone In (a, b)",)


@pytest.mark.parametrize(("args", "path"), [
    ({"requirements": [{"key": "k", "operator": "Equals"}]}, "requirements[0].operator"),
    ({"requirements": [{"key": "k", "operator": "Exists"},
                       {"key": "k", "operator": "In"}]}, "requirements[1].values"),
    ({"requirements": [{"operator": "Exists"}]}, "requirements[0].key"),
    ({"requirements": []}, "requirements"),
    ({}, "requirements"),
    ({"requirements": [{"key": "k", "operator": "Exists"}], "preferred": []}, "preferred"),
])
def test_filter_args_errors_name_the_field(args: dict[str, Any], path: str) -> None:
    with pytest.raises(ArgsError) as err:
        new_filter(args)
    assert err.value.path == path


def test_scorer_sums_weights_of_matching_terms_and_normalizes_by_max() -> None:
    s = new_scorer({"preferred": [
        {"weight": 10, "requirement": {"key": "ssd", "operator": "Exists"}},
        {"weight": 30, "requirement": {"key": "zone", "operator": "In", "values": ["a"]}},
    ]})
    nodes = [node("both", ssd="", zone="a"), node("zone", zone="a"), node("ssd", ssd=""),
             node("none")]
    state = CycleState()
    raw = s.score_nodes(state, POD, nodes)
    assert raw == [40, 30, 10, 0]
    assert isinstance(raw, list)
    assert s.normalize_score(state, POD, raw).ok
    assert raw == [100, 75, 25, 0]


@pytest.mark.parametrize(("args", "path"), [
    ({"preferred": [{"weight": 0, "requirement": {"key": "k", "operator": "Exists"}}]},
     "preferred[0].weight"),
    ({"preferred": [{"weight": 101, "requirement": {"key": "k", "operator": "Exists"}}]},
     "preferred[0].weight"),
    ({"preferred": [{"weight": True, "requirement": {"key": "k", "operator": "Exists"}}]},
     "preferred[0].weight"),
    ({"preferred": [{"weight": 1}]}, "preferred[0].requirement"),
    ({"preferred": [{"weight": 1, "requirement": {"key": "k", "operator": "Gt",
                                                  "values": ["x"]}}]},
     "preferred[0].requirement.values"),
    ({"preferences": []}, "preferences"),
    ({"requirements": []}, "requirements"),
])
def test_scorer_args_errors_name_the_field(args: dict[str, Any], path: str) -> None:
    with pytest.raises(ArgsError) as err:
        new_scorer(args)
    assert err.value.path == path
