"""NodeDeclaredFeatures, ported from upstream
pkg/scheduler/framework/plugins/nodedeclaredfeatures/nodedeclaredfeatures_test.go
(TestPreFilter, TestFilter, TestEnqueueExtensionsNodeUpdate,
TestIsSchedulableAfterTargetPodUpdate, TestEventsToRegister) and the inference cases of
k8s.io/component-helpers nodedeclaredfeatures/features/*_test.go; then the plugin in the
default profile, built as the engine builds it."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Any

import pytest

from polsched import plugins
from polsched.framework import CycleState, NodeInfo, PodInfo, Snapshot
from polsched.framework import events as ev
from polsched.framework.status import Code
from polsched.objects import Json
from polsched.plugins import node_declared_features as ndf
from polsched.plugins.node_declared_features import (
    ERR_REASON_UNSATISFIED_REQUIREMENTS,
    PRE_FILTER_STATE_KEY,
    Feature,
    NodeDeclaredFeatures,
)
from polsched.scheduler.algorithm import schedule_pod
from tests.unit.pipelines import args_errors, build, build_plugin

pytestmark = pytest.mark.unit


def pod(name: str = "test-pod", **spec: Any) -> PodInfo:
    return PodInfo.from_json({"metadata": {"name": name, "namespace": "default", "uid": "123"},
                              "spec": {"containers": [{"name": "c", "image": "img"}], **spec}})


def node(name: str = "node-1", features: list[str] | None = None) -> Json:
    status: Json = {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}}
    if features is not None:
        status["declaredFeatures"] = features
    return {"metadata": {"name": name}, "status": status}


def mock(name: str, infer: bool | Callable[[Json], bool],
         max_version: ndf.Version | None = None) -> Feature:
    """ndftesting.MockFeature: a feature whose inference the test decides."""
    fn = infer if callable(infer) else (lambda spec: infer)
    return Feature(name, fn, max_version)


# -- TestPreFilter ---------------------------------------------------------------------
@pytest.mark.parametrize(("features", "version", "code", "state"), [
    pytest.param([mock("TestFeature1", True), mock("TestFeature2", False)], (1, 35, 0),
                 Code.SUCCESS, {"TestFeature1"}, id="pod with feature requirements"),
    pytest.param([mock("TestFeature1", True, (1, 38, 0)), mock("TestFeature2", True, (1, 38, 0))],
                 (1, 35, 0), Code.SUCCESS, {"TestFeature1", "TestFeature2"},
                 id="pod with multiple feature requirements"),
    pytest.param([mock("TestFeature1", False), mock("TestFeature2", False)], (1, 35, 0),
                 Code.SKIP, None, id="pod with no requirements"),
    pytest.param([mock("TestFeature1", True, (1, 33, 0)), mock("TestFeature2", False)],
                 (1, 34, 0), Code.SKIP, None, id="feature not required, version > MaxVersion"),
])
def test_pre_filter(features: list[Feature], version: ndf.Version, code: Code,
                    state: set[str] | None) -> None:
    plugin = NodeDeclaredFeatures(features, version)
    cycle = CycleState()
    assert plugin.pre_filter(cycle, pod(), Snapshot([])).code is code
    assert cycle.get(PRE_FILTER_STATE_KEY) == (frozenset(state) if state else None)


# -- TestFilter --------------------------------------------------------------------------
UNSATISFIED = (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (ERR_REASON_UNSATISFIED_REQUIREMENTS,))


@pytest.mark.parametrize(("declared", "reqs", "want"), [
    pytest.param(["FeatureA", "FeatureB"], ["FeatureA"], (Code.SUCCESS, ()),
                 id="node matches requirements"),
    pytest.param(["FeatureB"], ["FeatureA"], UNSATISFIED,
                 id="node does not match requirements"),
    pytest.param(["FeatureA", "FeatureB", "FeatureC"], ["FeatureA", "FeatureC"],
                 (Code.SUCCESS, ()), id="node with multiple features, pod requires subset"),
    pytest.param(None, ["FeatureA"], UNSATISFIED, id="node has no declared features"),
    pytest.param(["FeatureA"], ["FeatureA", "FeatureB"], UNSATISFIED,
                 id="node with some but not all required features"),
])
def test_filter(declared: list[str] | None, reqs: list[str],
                want: tuple[Code, tuple[str, ...]]) -> None:
    plugin = NodeDeclaredFeatures([mock(n, False) for n in ("FeatureA", "FeatureB", "FeatureC")])
    cycle = CycleState()
    cycle.write(PRE_FILTER_STATE_KEY, frozenset(reqs))
    st = plugin.filter(cycle, pod(), NodeInfo.from_json(node(features=declared)))
    assert (st.code, st.reasons) == want


def test_filter_without_pre_filter_state_is_an_error() -> None:
    st = NodeDeclaredFeatures().filter(CycleState(), pod(), NodeInfo.from_json(node()))
    assert st.code is Code.ERROR
    assert st.message == ('error reading "PreFilterNodeDeclaredFeatures" from cycle-state: '
                          "not found")


# -- TestEnqueueExtensionsNodeUpdate -------------------------------------------------------
@pytest.mark.parametrize(("old", "new", "hint"), [
    pytest.param(None, node(features=["FeatureA"]), ev.QUEUE, id="node add with feature"),
    pytest.param(node(), node(features=["FeatureA"]), ev.QUEUE, id="features added"),
    pytest.param(node(features=["FeatureA"]), node(features=["FeatureA"]), ev.QUEUE_SKIP,
                 id="features unchanged"),
])
def test_hint_after_node_change(old: Json | None, new: Json, hint: ev.QueueingHint) -> None:
    plugin = NodeDeclaredFeatures([])
    assert plugin._after_node_change(pod(), old, new) is hint


# -- TestIsSchedulableAfterTargetPodUpdate ---------------------------------------------------
def _labelled(spec: Json) -> bool:
    # Stands for the mock's answer sequence: the new pod (the one with a label) needs it.
    return bool(spec.get("hostname"))


@pytest.mark.parametrize(("old", "new", "hint"), [
    pytest.param(pod(), pod(hostname="x"), ev.QUEUE, id="pod update adds requirement"),
    pytest.param(pod(hostname="x"), pod(), ev.QUEUE, id="pod update removes requirement"),
    pytest.param(pod(), pod(), ev.QUEUE_SKIP, id="pod update with no change in requirements"),
])
def test_hint_after_target_pod_update(old: PodInfo, new: PodInfo,
                                      hint: ev.QueueingHint) -> None:
    plugin = NodeDeclaredFeatures([mock("TestFeature", _labelled)], (1, 35, 0))
    assert plugin._after_target_pod_update(pod(), old, new) is hint


def test_events_to_register() -> None:
    events = build_plugin(ndf.NAME).events_to_register()
    assert [(e.event.resource, e.event.action) for e in events] == [
        (ev.Resource.NODE, ev.ActionType.ADD | ev.ActionType.UPDATE_NODE_DECLARED_FEATURE),
        (ev.Resource.TARGET_POD, ev.ActionType.UPDATE)]


def test_a_node_update_that_changes_declared_features_is_its_own_event() -> None:
    """framework/events.go extractNodeFeaturesChange."""
    got = ev.node_update_events(node(features=["A", "B"]), node(features=["A"]))
    assert [e.action for e in got] == [ev.ActionType.UPDATE_NODE_DECLARED_FEATURE]
    assert ev.node_update_events(node(features=["A"]), node(features=["A"])) == []


# -- the registry's inference (component-helpers features/*_test.go) ------------------------
def restart_rule(action: str) -> Json:
    return {"name": "c", "image": "img", "restartPolicyRules": [
        {"action": action, "exitCodes": {"operator": "In", "values": [42]}}]}


@pytest.mark.parametrize(("spec", "want"), [
    pytest.param({}, set(), id="plain pod"),
    pytest.param({"containers": [restart_rule("RestartAllContainers")]},
                 {"RestartAllContainersOnContainerExits"}, id="container restart-all rule"),
    pytest.param({"initContainers": [restart_rule("RestartAllContainers")]},
                 {"RestartAllContainersOnContainerExits"}, id="init container restart-all rule"),
    pytest.param({"containers": [restart_rule("Restart")]}, set(), id="restart rule only"),
    pytest.param({"hostNetwork": True, "hostUsers": False},
                 {"UserNamespacesHostNetworkSupport"}, id="host network in a user namespace"),
    pytest.param({"hostNetwork": True}, set(), id="host network, hostUsers unset"),
    pytest.param({"hostNetwork": True, "hostUsers": True}, set(), id="host network, host users"),
    pytest.param({"hostUsers": False}, set(), id="user namespace without host network"),
    pytest.param({"containers": [{"name": "c", "volumeMounts": [
        {"name": "v", "mountPath": "/v", "bindMountOptions": ["nosuid"]}]}]},
        {"VolumeBindMountOptions"}, id="bind mount options"),
    pytest.param({"ephemeralContainers": [{"name": "e", "volumeMounts": [
        {"name": "v", "mountPath": "/v", "bindMountOptions": ["nosuid"]}]}]},
        {"VolumeBindMountOptions"}, id="bind mount options on an ephemeral container"),
    pytest.param({"containers": [{"name": "c", "volumeMounts": [
        {"name": "v", "mountPath": "/v"}]}]}, set(), id="volume mount without options"),
    pytest.param({"resources": {"requests": {"cpu": "1"}}}, set(),
                 id="pod-level resources: needed only to resize"),
])
def test_infer_for_pod_scheduling(spec: Json, want: set[str]) -> None:
    assert ndf.infer_for_pod_scheduling(spec) == frozenset(want)


def test_registry_is_upstreams_all_features_sorted() -> None:
    names = [f.name for f in ndf.ALL_FEATURES]
    assert names == sorted(names)
    assert len(names) == 9


# -- in the default profile -----------------------------------------------------------------
def test_default_profile_runs_it_after_dynamic_resources() -> None:
    filters = plugins.DEFAULT_FILTERS
    assert filters[-2:] == ("DynamicResources", "NodeDeclaredFeatures")
    assert ndf.NAME in plugins.REGISTRY.names("filter")


def test_default_profile_places_a_pod_only_on_a_node_declaring_its_feature() -> None:
    pl = build(rng=random.Random(1))
    nodes = [NodeInfo.from_json(node("old")),
             NodeInfo.from_json(node("other", ["VolumeBindMountOptions"])),
             NodeInfo.from_json(node("new", ["RestartAllContainersOnContainerExits"]))]
    p = pod(containers=[restart_rule("RestartAllContainers")])
    result = asyncio.run(schedule_pod(pl, p, Snapshot(nodes), explain=True))
    assert result.node == "new"
    alone = asyncio.run(schedule_pod(pl, p, Snapshot(nodes[:2]), explain=True))
    assert alone.fit_error is not None
    assert alone.fit_error.message.startswith(
        "0/2 nodes are available: 2 node(s) didn't match Pod's required features.")


def test_args_are_refused() -> None:
    assert args_errors(ndf.NAME, {"x": 1})
