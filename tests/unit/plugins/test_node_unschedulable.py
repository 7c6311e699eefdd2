"""NodeUnschedulable, shaped after upstream
pkg/scheduler/framework/plugins/nodeunschedulable/node_unschedulable_test.go
(TestNodeUnschedulable)."""

from __future__ import annotations

from typing import Any

import pytest

from polsched.framework import CycleState, NodeInfo, PodInfo, Snapshot
from polsched.framework.status import Code
from polsched.plugins import node_unschedulable
from polsched.plugins.node_unschedulable import ERR_REASON_UNSCHEDULABLE
from tests.builders import make_node, make_pod
from tests.unit.pipelines import args_errors, build_plugin

pytestmark = pytest.mark.unit


def pod(tolerations: list[dict[str, Any]] | None = None) -> PodInfo:
    return make_pod().name("p").spec(tolerations=tolerations).info()


def node(unschedulable: bool) -> NodeInfo:
    return make_node().name("n").unschedulable(unschedulable).info()


def run(p: PodInfo, n: NodeInfo) -> tuple[Code, tuple[str, ...]]:
    plugin = build_plugin(node_unschedulable.NAME)
    state = CycleState()
    pre = plugin.pre_filter(state, p, Snapshot([n]))
    if pre.code is Code.SKIP:
        return Code.SUCCESS, ()
    st = plugin.filter(state, p, n)
    return st.code, st.reasons


def test_does_not_schedule_pod_to_unschedulable_node() -> None:
    assert run(pod(), node(True)) == (Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
                                      (ERR_REASON_UNSCHEDULABLE,))


def test_schedules_pod_to_normal_node() -> None:
    assert run(pod(), node(False)) == (Code.SUCCESS, ())


def test_schedules_pod_with_toleration_to_unschedulable_node() -> None:
    p = pod([{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}])
    assert run(p, node(True)) == (Code.SUCCESS, ())


def test_prefilter_skips_a_pod_that_tolerates_the_taint() -> None:
    plugin = build_plugin(node_unschedulable.NAME, {})
    p = pod([{"operator": "Exists"}])
    assert plugin.pre_filter(CycleState(), p, Snapshot([])).code is Code.SKIP


def test_a_toleration_for_another_effect_does_not_help() -> None:
    p = pod([{"key": "node.kubernetes.io/unschedulable", "operator": "Exists",
              "effect": "NoExecute"}])
    assert run(p, node(True))[0] is Code.UNSCHEDULABLE_AND_UNRESOLVABLE


def test_filter_without_prefilter_checks_tolerations() -> None:
    plugin = build_plugin(node_unschedulable.NAME)
    p = pod([{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}])
    assert plugin.filter(CycleState(), p, node(True)).ok
    assert plugin.filter(CycleState(), pod(), node(True)).rejected


def test_args_are_refused() -> None:
    assert args_errors(node_unschedulable.NAME, {"x": 1})
