"""The hot path's shared values: framework.status.shared (one Status per code and reasons,
labelled once per plugin), PodInfo's fields computed at construction, and NodeInfo copies
(framework.runtime.node_copy) that leave framework.types.NODE_CHANGES alone."""

from __future__ import annotations

import pytest

from polsched.framework.runtime import node_copy
from polsched.framework.status import Code, Status, shared
from polsched.framework.types import NODE_CHANGES, PodInfo
from tests.builders import make_node, make_pod

pytestmark = pytest.mark.unit


def test_shared_status_is_one_object_and_labels_like_a_fresh_one() -> None:
    a = shared(Code.UNSCHEDULABLE, ("Insufficient cpu",))
    assert a is shared(Code.UNSCHEDULABLE, ("Insufficient cpu",))
    assert a == Status(Code.UNSCHEDULABLE, ("Insufficient cpu",))
    assert a is not shared(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, ("Insufficient cpu",))
    fit = a.with_plugin("NodeResourcesFit")
    assert fit == Status(Code.UNSCHEDULABLE, ("Insufficient cpu",), "NodeResourcesFit")
    assert a.with_plugin("NodeResourcesFit") is fit
    other = a.with_plugin("Expression#2")
    assert other.plugin == "Expression#2" and other.reasons == a.reasons
    assert a.plugin == ""  # the shared one itself is never labelled


def test_a_fresh_status_is_labelled_afresh() -> None:
    st = Status(Code.UNSCHEDULABLE, ("x",))
    one, two = st.with_plugin("P"), st.with_plugin("P")
    assert one == two == Status(Code.UNSCHEDULABLE, ("x",), "P")
    assert st.with_plugin("Q").plugin == "Q"
    labelled = Status(Code.UNSCHEDULABLE, ("x",), "R")
    assert labelled.with_plugin("P") is labelled


def test_pod_key_and_affinity_flags_are_set_at_construction() -> None:
    plain = make_pod().name("p").namespace("ns").req(cpu="100m").info()
    assert plain.key == "ns/p"
    assert not plain.has_affinity and not plain.has_required_anti_affinity
    raw = make_pod().name("q").req(cpu="100m").obj()
    raw["spec"]["affinity"] = {"podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"a": "b"}},
             "topologyKey": "kubernetes.io/hostname"}]}}
    anti = PodInfo.from_json(raw)
    assert anti.has_affinity and anti.has_required_anti_affinity
    raw["spec"]["affinity"] = {"podAffinity": {}, "nodeAffinity": {"x": 1}}
    assert not PodInfo.from_json(raw).has_affinity  # an empty podAffinity: none
    raw["spec"]["affinity"] = {"podAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1}]}}
    soft = PodInfo.from_json(raw)
    assert soft.has_affinity and not soft.has_required_anti_affinity


def test_a_copy_changes_without_naming_the_node_in_node_changes() -> None:
    node = make_node().name("n-copy").capacity({"cpu": "4"}).info()
    pod = make_pod().name("p").req(cpu="1").node("n-copy").info()
    start = NODE_CHANGES.position
    trial = node_copy(node)
    trial.add_pod(pod)
    trial.remove_pod(pod)
    assert NODE_CHANGES.since(start) == []
    assert node.pods == {} and trial.generation < 0
    node.add_pod(pod)
    assert NODE_CHANGES.since(start) == ["n-copy"]
