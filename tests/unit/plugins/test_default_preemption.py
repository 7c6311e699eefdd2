"""The DefaultPreemption PostFilter sentence, as upstream's preemption.go and
default_preemption.go produce it when preemption finds no candidate."""

from __future__ import annotations

from typing import Any

import pytest

from polsched.framework import FitError, NodeInfo, PodInfo, Snapshot, Status
from polsched.plugins.default_preemption import DefaultPreemption, preemption_message

pytestmark = pytest.mark.unit


def pod(name: str, cpu: str = "0", priority: int = 0, host_port: int = 0,
        **spec: Any) -> PodInfo:
    container: dict[str, Any] = {"name": "c", "resources": {"requests": {"cpu": cpu}}}
    if host_port:
        container["ports"] = [{"containerPort": host_port, "hostPort": host_port}]
    return PodInfo.from_json({
        "metadata": {"name": name, "namespace": "ns", "uid": name},
        "spec": {"containers": [container], "priority": priority, **spec}})


def node(name: str, cpu: str = "1", *pods: PodInfo) -> NodeInfo:
    n = NodeInfo.from_json({"metadata": {"name": name},
                            "status": {"allocatable": {"cpu": cpu, "pods": "110"}}})
    for p in pods:
        n.add_pod(p)
    return n


def insufficient_cpu() -> Status:
    return Status.unschedulable("Insufficient cpu").with_plugin("NodeResourcesFit")


def diagnosis(nodes: list[NodeInfo], status: Status) -> FitError:
    return FitError(len(nodes), {n.name: status for n in nodes})


def test_no_victims_anywhere() -> None:
    nodes = [node(f"n{i}") for i in range(10)]
    msg = preemption_message(pod("big", cpu="2"), Snapshot(nodes),
                             diagnosis(nodes, insufficient_cpu()))
    assert msg == ("preemption: 0/10 nodes are available: "
                   "10 No preemption victims found for incoming pod.")


def test_preemption_policy_never() -> None:
    nodes = [node("n1")]
    msg = preemption_message(pod("big", cpu="2", preemptionPolicy="Never"), Snapshot(nodes),
                             diagnosis(nodes, insufficient_cpu()))
    assert msg == "preemption: not eligible due to preemptionPolicy=Never."


def test_unresolvable_nodes_are_not_helped() -> None:
    nodes = [node(f"n{i}") for i in range(6)]
    taint = Status.unresolvable(
        "node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }")
    d = FitError(6, {n.name: (taint if i < 2 else insufficient_cpu())
                     for i, n in enumerate(nodes)})
    assert preemption_message(pod("big", cpu="2"), Snapshot(nodes), d) == (
        "preemption: 0/6 nodes are available: 2 Preemption is not helpful for scheduling, "
        "4 No preemption victims found for incoming pod.")


def test_nodes_without_a_status_are_not_helped() -> None:
    nodes = [node("n1"), node("n2")]
    d = FitError(2, {"n1": insufficient_cpu()})
    assert preemption_message(pod("big", cpu="2"), Snapshot(nodes), d) == (
        "preemption: 0/2 nodes are available: 1 No preemption victims found for incoming "
        "pod, 1 Preemption is not helpful for scheduling.")


def test_only_lower_priority_pods_are_victims() -> None:
    same = node("same", "1", pod("a", cpu="500m", priority=10))
    higher = node("higher", "1", pod("b", cpu="500m", priority=20))
    nodes = [same, higher]
    msg = preemption_message(pod("p", cpu="1", priority=10), Snapshot(nodes),
                             diagnosis(nodes, insufficient_cpu()))
    assert msg == ("preemption: 0/2 nodes are available: "
                   "2 No preemption victims found for incoming pod.")


def test_victims_too_small_leave_the_resource_reason() -> None:
    # 4 cpus: 3 taken by a higher-priority pod, 500m by a victim; the pod wants 2.
    n = node("n1", "4", pod("keep", cpu="3", priority=100), pod("victim", cpu="500m"))
    msg = preemption_message(pod("p", cpu="2", priority=50), Snapshot([n]),
                             diagnosis([n], insufficient_cpu()))
    assert msg == "preemption: 0/1 nodes are available: 1 Insufficient cpu."


def test_a_candidate_means_no_preemption_sentence() -> None:
    # Upstream would evict "victim" and nominate n1; its event has no preemption sentence.
    n = node("n1", "1", pod("victim", cpu="800m", priority=0))
    other = node("n2", "1")
    d = diagnosis([n, other], insufficient_cpu())
    assert preemption_message(pod("p", cpu="500m", priority=5), Snapshot([n, other]), d) == ""


def test_host_port_held_by_a_victim_is_a_candidate() -> None:
    n = node("n1", "1", pod("victim", host_port=8080))
    st = Status.unschedulable("node(s) didn't have free ports for the requested pod ports")
    d = diagnosis([n], st.with_plugin("NodePorts"))
    assert preemption_message(pod("p", host_port=8080, priority=1), Snapshot([n]), d) == ""
    keep = node("n1", "1", pod("keeper", host_port=8080, priority=9))
    assert preemption_message(pod("p", host_port=8080, priority=1), Snapshot([keep]), d) == (
        "preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod.")


def test_other_plugins_keep_their_reason_when_pods_are_removed() -> None:
    n = node("n1", "1", pod("victim"))
    st = Status.unschedulable("node(s) didn't match NodeLabel requirement gpu Exists")
    d = diagnosis([n], st.with_plugin("NodeLabel"))
    assert preemption_message(pod("p", priority=1), Snapshot([n]), d) == (
        "preemption: 0/1 nodes are available: "
        "1 node(s) didn't match NodeLabel requirement gpu Exists.")


def test_node_filter_sees_the_node_without_victims_and_leaves_the_live_node_alone() -> None:
    n = node("n1", "2", pod("victim", cpu="1"), pod("keeper", cpu="500m", priority=9))
    generation = n.generation
    seen: list[NodeInfo] = []

    def node_filter(p: PodInfo, trial: NodeInfo) -> Status:
        seen.append(trial)
        return Status.unschedulable("Insufficient cpu")

    msg = DefaultPreemption(node_filter)(pod("p", cpu="2", priority=5), Snapshot([n]),
                                         diagnosis([n], insufficient_cpu()))
    assert msg == "preemption: 0/1 nodes are available: 1 Insufficient cpu."
    (trial,) = seen
    assert sorted(trial.pods) == ["ns/keeper"]
    assert trial.requested["cpu"] == 500
    assert trial.generation < 0
    assert sorted(n.pods) == ["ns/keeper", "ns/victim"]
    assert n.requested["cpu"] == 1500 and n.generation == generation


def test_ignored_resources_do_not_block() -> None:
    n = node("n1", "1", pod("victim"))
    big = PodInfo.from_json({"metadata": {"name": "p", "namespace": "ns"}, "spec": {
        "priority": 1,
        "containers": [{"name": "c", "resources": {"requests": {"example.com/foo": "1"}}}]}})
    d = diagnosis([n], Status.unschedulable("Insufficient example.com/foo")
                  .with_plugin("NodeResourcesFit"))
    assert preemption_message(big, Snapshot([n]), d) == (
        "preemption: 0/1 nodes are available: 1 Insufficient example.com/foo.")
    ignoring = DefaultPreemption(ignored_resources=frozenset({"example.com/foo"}))
    assert ignoring(big, Snapshot([n]), d) == ""


def test_no_nodes_no_sentence() -> None:
    assert preemption_message(pod("p"), Snapshot([]), FitError(0)) == ""


def test_full_failed_scheduling_text_matches_upstream() -> None:
    nodes = [node(f"n{i}") for i in range(10)]
    d = diagnosis(nodes, insufficient_cpu())
    d.post_filter_msg = preemption_message(pod("big", cpu="2"), Snapshot(nodes), d)
    assert d.message == ("0/10 nodes are available: 10 Insufficient cpu. preemption: 0/10 "
                         "nodes are available: 10 No preemption victims found for incoming pod.")
