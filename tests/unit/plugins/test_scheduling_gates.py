"""SchedulingGates: in the default profile, disable-able, built by the production builder."""

from __future__ import annotations

from typing import Any

import pytest

from polsched.api import load_policy
from polsched.api.model import PolicyError
from polsched.framework.status import Code
from polsched.framework.types import PodInfo
from polsched.plugins import CATALOG
from polsched.scheduler.pipelines import build_pipeline
from tests.builders import make_pod

pytestmark = pytest.mark.unit


def policy(spec: dict[str, Any]) -> Any:
    return load_policy({"apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
                        "metadata": {"name": "p"}, "spec": spec}, CATALOG)


def pod(**spec: Any) -> PodInfo:
    return make_pod().name("p").namespace("ns").uid("u").container().spec(**spec).info()


def test_the_default_profile_gates_pods_with_scheduling_gates() -> None:
    pipeline = build_pipeline(policy({}))
    # Upstream order (default_plugins.go): SchedulingGates, DynamicResources, then
    # DefaultPreemption (async preemption), then GangScheduling (applyGangScheduling).
    assert [p.name for p in pipeline.pre_enqueue_plugins] == ["SchedulingGates",
                                                             "DynamicResources",
                                                             "DefaultPreemption",
                                                             "GangScheduling"]
    gates = pipeline.pre_enqueue_plugins[0]
    st = gates.pre_enqueue(pod(schedulingGates=[{"name": "a"}, {"name": "b/c"}]))
    # schedulinggates.PreEnqueue: UnschedulableAndUnresolvable, Go's %v of the names
    assert st.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert st.message == "waiting for scheduling gates: [a b/c]"
    assert gates.pre_enqueue(pod()).ok
    assert gates.pre_enqueue(pod(schedulingGates=[])).ok


@pytest.mark.parametrize("spec", [{"disabledPlugins": ["SchedulingGates"]},
                                  {"disabledPlugins": ["*"]}, {"defaultPlugins": False}])
def test_it_can_be_disabled(spec: dict[str, Any]) -> None:
    # DefaultPreemption's own PreEnqueue stays while preemption is on (it is not one of
    # the default filters and scorers that defaultPlugins: false turns off).
    names = [p.name for p in build_pipeline(policy(spec)).pre_enqueue_plugins]
    assert "SchedulingGates" not in names
    want = {"*": [], "SchedulingGates": ["DynamicResources", "DefaultPreemption",
                                         "GangScheduling"]}
    assert names == want.get((spec.get("disabledPlugins") or [""])[0], ["DefaultPreemption"])


def test_it_is_not_a_filter_or_scorer() -> None:
    with pytest.raises(PolicyError, match="SchedulingGates has no filter extension point"):
        policy({"filters": [{"name": "SchedulingGates"}]})
