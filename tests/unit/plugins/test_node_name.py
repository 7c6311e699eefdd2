"""NodeName, shaped after upstream
pkg/scheduler/framework/plugins/nodename/node_name_test.go (TestNodeName)."""

from __future__ import annotations

import pytest

from polsched.framework import CycleState, Snapshot
from polsched.framework.interfaces import PreFilterResult
from polsched.framework.status import Code
from polsched.plugins import node_name
from polsched.plugins.node_name import ERR_REASON
from tests.builders import make_node, make_pod
from tests.unit.pipelines import args_errors, build_plugin

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("pod_node", "node_", "want"), [
    ("", "foo", Code.SKIP),            # no host specified: PreFilter skips, Filter not run
    ("foo", "foo", Code.SUCCESS),      # host matches
    ("bar", "foo", Code.UNSCHEDULABLE_AND_UNRESOLVABLE),  # host doesn't match
], ids=["no host specified", "host matches", "host doesn't match"])
def test_node_name(pod_node: str, node_: str, want: Code) -> None:
    plugin = build_plugin(node_name.NAME)
    state = CycleState()
    p = make_pod().name("p").node(pod_node).info()
    n = make_node().name(node_).info()
    pre = plugin.pre_filter(state, p, Snapshot([n]))
    if isinstance(pre, PreFilterResult):
        # As upstream v1.37: a pod naming a node is filtered against that node only.
        assert pre.node_names == frozenset({pod_node})
    elif pre.code is Code.SKIP:
        assert want is Code.SKIP
        # Filter would pass anyway if called.
        assert plugin.filter(state, p, n).ok
        return
    st = plugin.filter(state, p, n)
    assert st.code is want
    if want is not Code.SUCCESS:
        assert st.reasons == (ERR_REASON,)


def test_args_are_refused() -> None:
    assert args_errors(node_name.NAME, {"nodeName": "x"})
