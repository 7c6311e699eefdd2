"""NodeLabelValue: a label's number as the raw score, min-max normalized."""

from __future__ import annotations

from typing import Any

import pytest

from polsched.framework import CycleState, NodeInfo
from polsched.framework.registry import ArgsError
from polsched.plugins import node_label_value
from polsched.plugins.node_label_value import parse_number
from tests.builders import make_node, make_pod
from tests.unit.pipelines import build_plugin

pytestmark = pytest.mark.unit

KEY = "priority.lixueduan.com"
POD = make_pod().name("p").namespace("ns").info()


def node(name: str, value: str | None = None) -> NodeInfo:
    return make_node().name(name).labels({} if value is None else {KEY: value}).info()


def new(args: dict[str, Any]) -> node_label_value.NodeLabelValue:
    assert node_label_value.SPEC.score is not None
    assert node_label_value.SPEC.filter is None
    plugin = build_plugin(node_label_value.NAME, args, point="score")
    assert isinstance(plugin, node_label_value.NodeLabelValue)
    return plugin


def run(plugin: node_label_value.NodeLabelValue, nodes: list[NodeInfo]) -> tuple[list[int],
                                                                                  list[int]]:
    state = CycleState()
    raw = plugin.score_nodes(state, POD, nodes)
    assert isinstance(raw, list)
    shown = list(raw)
    assert plugin.normalize_score(state, POD, raw).ok
    return shown, raw


def test_label_value_is_raw_score_and_min_max_normalized() -> None:
    shown, norm = run(new({"key": KEY}), [node("a", "10"), node("b", "5"), node("c", "0")])
    assert shown == [10, 5, 0]
    assert norm == [100, 50, 0]


def test_missing_and_non_numeric_values_score_default() -> None:
    p = new({"key": KEY, "default": 4})
    shown, norm = run(p, [node("a", "8"), node("b"), node("c", "high"), node("d", "nan"),
                          node("e", "0")])
    assert shown == [8, 4, 4, 4, 0]
    assert norm == [100, 50, 50, 50, 0]


def test_fractions_are_normalized_exactly() -> None:
    shown, norm = run(new({"key": KEY}), [node("a", "0.5"), node("b", "0.25"),
                                          node("c", "0")])
    assert norm == [100, 50, 0]


def test_negative_default_below_every_label() -> None:
    _, norm = run(new({"key": KEY, "default": -10}), [node("a", "10"), node("b")])
    assert norm == [100, 0]


def test_reverse_gives_lowest_value_the_highest_score() -> None:
    _, norm = run(new({"key": KEY, "reverse": True}),
                  [node("a", "10"), node("b", "5"), node("c", "0")])
    assert norm == [0, 50, 100]


def test_all_equal_values_express_no_preference() -> None:
    _, norm = run(new({"key": KEY}), [node("a", "3"), node("b", "3")])
    assert norm == [0, 0]
    _, norm = run(new({"key": KEY, "reverse": True}), [node("a"), node("b")])
    assert norm == [0, 0]


@pytest.mark.parametrize(("text", "value"), [
    ("7", 7.0), ("0.5", 0.5), ("1e3", 1000.0), ("007", 7.0),
    ("inf", None), ("nan", None), ("1_000", None), ("0x10", None), ("", None), (None, None),
])
def test_parse_number(text: str | None, value: float | None) -> None:
    assert parse_number(text) == value


@pytest.mark.parametrize(("args", "path"), [
    ({}, "key"),
    ({"key": ""}, "key"),
    ({"key": KEY, "default": "1"}, "default"),
    ({"key": KEY, "default": True}, "default"),
    ({"key": KEY, "reverse": "yes"}, "reverse"),
    ({"key": KEY, "weight": 1}, "weight"),
])
def test_args_errors_name_the_field(args: dict[str, Any], path: str) -> None:
    with pytest.raises(ArgsError) as err:
        new(args)
    assert err.value.path == path


def test_batch_scores_equal_per_node_values_across_cache_limits(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """score_nodes reads a table of label value -> score: it must give value() for every
    node (absent, non-numeric, decimals, the default applied), also when the table
    overflows its limit and is refilled."""
    monkeypatch.setattr(node_label_value, "_CACHE_LIMIT", 5)
    plugin = new({"key": KEY, "default": -2.5})
    values = [None, "x", "1", "0.5", "1e3", "nan", "-7", "3", "1", None, "12", "0.25"]
    for start in range(len(values)):
        nodes = [node(f"n{i}", v) for i, v in enumerate(values[start:] + values[:start])]
        state = CycleState()
        raw = plugin.score_nodes(state, POD, nodes)
        assert raw == [round(plugin.value(n)) for n in nodes]
        assert state.get(plugin._state_key) == [plugin.value(n) for n in nodes]
