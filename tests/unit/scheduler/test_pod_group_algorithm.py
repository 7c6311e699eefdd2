"""The pod-group algorithm (scheduler.schedule_one.pod_group_algorithm) with the default
policy's pipeline from the production builder, on a ClusterCache fed with watch events:
a gang that fits is placed whole, one that cannot be is rejected with upstream's texts,
and the simulation leaves nothing assumed or reserved either way."""

from __future__ import annotations

import asyncio

from polsched.api import load_policy
from polsched.cluster.cache import ClusterCache
from polsched.framework.interfaces import Handle, PodGroupInfo
from polsched.framework.status import Code
from polsched.framework.types import PodInfo
from polsched.objects import Json
from polsched.plugins import CATALOG
from polsched.scheduler.pipelines import build_pipeline
from polsched.scheduler.schedule_one import (
    PodGroupResult,
    pod_group_algorithm,
    pod_group_post_filter,
)


def node(name: str, cpu: str = "4") -> Json:
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "spec": {}, "status": {"allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110"}}}


def pod_group(min_count: int | None) -> Json:
    policy: Json = {"gang": {"minCount": min_count}} if min_count is not None \
        else {"basic": {}}
    return {"metadata": {"name": "g", "namespace": "ns", "generation": 1},
            "spec": {"schedulingPolicy": policy}}


def member(name: str, cpu: str) -> Json:
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"},
            "spec": {"schedulingGroup": {"podGroupName": "g"},
                     "containers": [{"name": "c", "image": "x",
                                     "resources": {"requests": {"cpu": cpu}}}]}}


def run(min_count: int | None, cpus: list[str], nodes: int = 1) -> tuple[ClusterCache,
                                                                        PodGroupResult]:
    cache = ClusterCache(None)
    cache.pod_groups.served = True
    for i in range(nodes):
        cache.on_node_event("ADDED", node(f"n{i}"))
    cache.on_pod_group_event("ADDED", pod_group(min_count))
    for i, cpu in enumerate(cpus):
        cache.on_pod_event("ADDED", member(f"m{i}", cpu))
    pipeline = build_pipeline(load_policy({
        "apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
        "metadata": {"name": "s"}, "spec": {}}, CATALOG),
        Handle(listers=cache.listers, pod_groups=cache.pod_groups))
    group = PodGroupInfo("ns", "g", pod_group(min_count))
    pods = [cache.pods[f"ns/m{i}"] for i in range(len(cpus))]
    return cache, asyncio.run(pod_group_algorithm(pipeline, cache, group, pods))


def assert_nothing_assumed(cache: ClusterCache) -> None:
    assert not cache.assumed_keys_by_scheduler()
    assert all(not n.pods for n in cache.snapshot.nodes)
    assert cache.pod_groups.state("ns/g").scheduled_pods_count == 0


def test_a_gang_that_fits_is_placed_whole_and_the_simulation_is_reverted() -> None:
    cache, out = run(2, ["2", "2"])
    assert out.status.ok
    assert [(m.status.ok, m.node) for m in out.members] == [(True, "n0"), (True, "n0")]
    assert_nothing_assumed(cache)


def test_a_gang_that_cannot_fit_is_rejected_with_upstreams_texts() -> None:
    # The case docs/gangs.md observed with kube-scheduler: one node with 4 CPUs, two
    # members of 3 CPUs, minCount 2.
    cache, out = run(2, ["3", "3"])
    assert out.status.code is Code.UNSCHEDULABLE
    assert out.status.message == "minCount (2) cannot be satisfied: 1 scheduled, 0 remaining"
    first, second = out.members
    assert first.status.ok and first.node == "n0"
    assert second.status.code is Code.UNSCHEDULABLE and second.fit_error is not None
    assert second.fit_error.message == "0/1 nodes are available: 1 Insufficient cpu."
    assert_nothing_assumed(cache)


def test_unschedulable_early_when_too_few_members_are_left() -> None:
    cache, out = run(3, ["5", "1", "1"])
    # The first does not fit: 0 scheduled + 2 remaining < 3, the others are not tried.
    assert out.status.message == "minCount (3) cannot be satisfied: 0 scheduled, 2 remaining"
    assert len(out.members) == 1
    assert_nothing_assumed(cache)


def test_a_basic_group_places_what_fits() -> None:
    cache, out = run(None, ["3", "3"])
    assert out.status.ok
    assert [m.status.ok for m in out.members] == [True, False]
    assert_nothing_assumed(cache)


def test_no_members_to_try_is_unschedulable_before_any_search() -> None:
    cache, out = run(2, [])
    assert out.status.code is Code.UNSCHEDULABLE
    assert out.status.message == ("pod group is unschedulable, minCount (2) cannot be "
                                  "satisfied: 0 scheduled, 0 remaining")
    assert not out.members
    assert_nothing_assumed(cache)


def post_filter_message(spec: Json, bound_priority: int | None,
                        preemption_policy: str | None = None) -> str | None:
    cache = ClusterCache(None)
    cache.on_node_event("ADDED", node("n0"))
    if bound_priority is not None:
        cache.on_pod_event("ADDED", {
            "metadata": {"name": "low", "namespace": "ns", "uid": "uid-low"},
            "spec": {"nodeName": "n0", "priority": bound_priority,
                     "containers": [{"name": "c", "image": "x"}]}})
    raw = member("m0", "1")
    if preemption_policy:
        raw["spec"]["preemptionPolicy"] = preemption_policy
    pipeline = build_pipeline(load_policy({
        "apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
        "metadata": {"name": "s"}, "spec": spec}, CATALOG), Handle(listers=cache.listers))
    group = PodGroupInfo("ns", "g", {**pod_group(2), "spec": {
        **pod_group(2)["spec"], "priority": 10}})
    st = pod_group_post_filter(pipeline, cache.snapshot, group, [PodInfo.from_json(raw)])
    return None if st is None else st.message


def test_pod_group_post_filter_as_far_as_polsched_follows_it() -> None:
    none_found = "pod group preemption: No preemption victims found for incoming preemptor"
    assert post_filter_message({}, None) == none_found
    assert post_filter_message({}, 10) == none_found  # equal priority: not a victim
    assert post_filter_message({}, 5) is None  # victims to choose: not built, nothing said
    assert post_filter_message({}, None, "Never") == \
        "pod group preemption: not eligible due to preemptionPolicy=Never."
    # Preemption off: no PodGroupPostFilter plugin, an empty reason (as upstream appends).
    assert post_filter_message({"disabledPlugins": ["DefaultPreemption"]}, None) == ""


def test_explain_says_why_a_gang_does_not_fit_as_a_whole() -> None:
    from polsched.explain import explain, format_report

    members = [member("m0", "3"), member("m1", "3")]
    report = asyncio.run(explain(
        load_policy({"apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
                     "metadata": {"name": "s"}, "spec": {}}, CATALOG),
        members[0], [node("n0")], members[1:],
        objects=[{**pod_group(2), "kind": "PodGroup"}]))
    gang = report.gang
    assert gang is not None and not gang.fits
    assert [(m.pod, m.node) for m in gang.members] == [("ns/m0", "n0"), ("ns/m1", None)]
    assert gang.members[1].reason == "0/1 nodes are available: 1 Insufficient cpu."
    assert gang.message == ("minCount (2) cannot be satisfied: 1 scheduled, 0 remaining, "
                            "pod group preemption: No preemption victims found for "
                            "incoming preemptor")
    text = format_report(report)
    assert "PodGroup ns/g (gang, minCount 2): 0 member(s) already scheduled, 1 of 2" in text
    assert "The group does not fit: minCount (2) cannot be satisfied" in text
    # The single pod alone fits n0: its own verdict is kept beside the group's.
    assert report.winner == "n0"
