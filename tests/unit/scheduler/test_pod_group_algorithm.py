"""The pod-group algorithm (scheduler.schedule_one_podgroup.pod_group_algorithm) with the default
policy's pipeline from the production builder, on a ClusterCache fed with watch events:
a gang that fits is placed whole, one that cannot be is rejected with upstream's texts,
and the simulation leaves nothing assumed or reserved either way."""

from __future__ import annotations

import asyncio

from polsched.api import load_policy
from polsched.cluster.cache import ClusterCache
from polsched.framework import listers as ls
from polsched.framework.interfaces import Handle, PodGroupInfo, PodGroupPostFilterResult
from polsched.framework.status import Code, Status
from polsched.objects import Json
from polsched.plugins import CATALOG
from polsched.scheduler.pipelines import build_pipeline
from polsched.scheduler.schedule_one_podgroup import (
    PodGroupResult,
    pod_group_algorithm,
    pod_group_post_filter,
)
from tests.builders import make_node, make_pod


def node(name: str, cpu: str = "4") -> Json:
    return (make_node().name(name).label("kubernetes.io/hostname", name).spec()
            .allocatable({"cpu": cpu, "memory": "8Gi", "pods": "110"}).obj())


def pod_group(min_count: int | None) -> Json:
    policy: Json = {"gang": {"minCount": min_count}} if min_count is not None \
        else {"basic": {}}
    return {"metadata": {"name": "g", "namespace": "ns", "generation": 1},
            "spec": {"schedulingPolicy": policy}}


def member(name: str, cpu: str) -> Json:
    return (make_pod().name(name).namespace("ns").uid(f"uid-{name}").pod_group("g")
            .container(image="x", requests={"cpu": cpu}).obj())


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


def bound(name: str, node_name: str, cpu: str, priority: int = 0,
          group: str | None = None, labels: dict[str, str] | None = None,
          started: str = "2026-01-01T00:00:00Z") -> Json:
    p = (make_pod().name(name).namespace("ns").uid(f"uid-{name}").labels(labels or {})
         .node(node_name).priority(priority).container(image="x", requests={"cpu": cpu}))
    if group is not None:
        p.pod_group(group)
    return p.phase("Running").status(startTime=started).obj()


def post_filter(spec: Json, cpus: list[str], others: list[Json], *, min_count: int = 2,
                nodes: int = 1, preemption_policy: str | None = None,
                objects: list[Json] | None = None, pdbs: list[Json] | None = None,
                ) -> tuple[ClusterCache, PodGroupPostFilterResult | None, Status]:
    """The rejected group's PodGroupPostFilter phase, as the engine runs it: the default
    policy's pipeline (or `spec`'s) from the production builder, a group of priority 10
    whose members request `cpus`, the `others` bound, on nodes of 4 CPUs."""
    cache = ClusterCache(None)
    cache.pod_groups.served = True
    for i in range(nodes):
        cache.on_node_event("ADDED", node(f"n{i}"))
    for obj in objects or []:
        cache.on_pod_group_event("ADDED", obj)
    for pdb in pdbs or []:
        cache.on_object_event(ls.POD_DISRUPTION_BUDGET, "ADDED", pdb)
    group_obj = {**pod_group(min_count), "spec": {**pod_group(min_count)["spec"],
                                                  "priority": 10}}
    cache.on_pod_group_event("ADDED", group_obj)
    for raw in others:
        cache.on_pod_event("ADDED", raw)
    for i, cpu in enumerate(cpus):
        raw = member(f"m{i}", cpu)
        raw["spec"]["priority"] = 10
        if preemption_policy:
            raw["spec"]["preemptionPolicy"] = preemption_policy
        cache.on_pod_event("ADDED", raw)
    pipeline = build_pipeline(load_policy({
        "apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
        "metadata": {"name": "s"}, "spec": spec}, CATALOG),
        Handle(listers=cache.listers, pod_groups=cache.pod_groups))
    group = PodGroupInfo("ns", "g", group_obj)
    pods = [cache.pods[f"ns/m{i}"] for i in range(len(cpus))]

    async def go() -> tuple[PodGroupPostFilterResult | None, Status]:
        outcome = await pod_group_algorithm(pipeline, cache, group, pods)
        assert outcome.status.code is Code.UNSCHEDULABLE
        return await pod_group_post_filter(pipeline, cache, group, pods, outcome)

    res, st = asyncio.run(go())
    return cache, res, st


DRA_DONE = "deallocation and deletion of ResourceClaims completed"


def test_no_lower_priority_pod_ends_the_phase_with_upstreams_text() -> None:
    for others in ([], [bound("same", "n0", "1", priority=10)]):
        _, res, st = post_filter({}, ["3", "3"], others)
        assert st.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE and res is None
        assert st.message == ("pod group preemption: No preemption victims found for "
                              "incoming preemptor")


def test_never_joins_dynamic_resources_reason() -> None:
    # DynamicResources ran PreFilter for the members, so its PodGroupPostFilter says it
    # is done (Unschedulable) and DefaultPreemption's reason follows it.
    _, res, st = post_filter({}, ["3", "3"], [bound("low", "n0", "1")],
                             preemption_policy="Never")
    assert st.code is Code.UNSCHEDULABLE and res is None
    assert st.message == (f"{DRA_DONE}, pod group preemption: not eligible due to "
                          "preemptionPolicy=Never.")


def test_without_default_preemption_only_dynamic_resources_runs() -> None:
    _, res, st = post_filter({"disabledPlugins": ["DefaultPreemption"]}, ["3", "3"], [])
    assert st.code is Code.UNSCHEDULABLE and st.message == DRA_DONE


def test_rejected_before_any_member_ran_prefilter_is_upstreams_not_found_error() -> None:
    # minCount 3 with two members: PlacementFeasible rejects before any member is
    # tried, DynamicResources' group state was never written (the min_increase quirk).
    _, res, st = post_filter({}, ["1", "1"], [bound("low", "n0", "1")], min_count=3)
    assert st.code is Code.ERROR and res is None
    assert st.message == 'error in "DynamicResources" PodGroupPostFilter plugins: not found'


def test_a_gang_preempts_a_lower_priority_pod_and_every_member_is_nominated() -> None:
    cache, res, st = post_filter({}, ["2", "2"], [bound("low", "n0", "2")])
    assert st.ok, st
    assert st.message == ("pod group preemption: found a placement for podgroup, "
                          "preempting 1 victims")
    assert res is not None
    assert [v.key for v in res.victims] == ["ns/low"]
    assert res.nominating == {"ns/m0": "n0", "ns/m1": "n0"}
    # The search left the snapshot as it was: the victim is still counted, nothing assumed.
    assert set(cache.snapshot.get("n0").pods) == {"ns/low"}  # type: ignore[union-attr]
    assert cache.snapshot.get("n0").requested["cpu"] == 2000  # type: ignore[union-attr]
    assert not cache.assumed_keys_by_scheduler()


def test_a_gang_that_cannot_fit_even_with_preemption_evicts_nothing() -> None:
    cache, res, st = post_filter({}, ["3", "3"], [bound("low", "n0", "1")])
    assert st.code is Code.UNSCHEDULABLE and res is None
    assert st.message == (f"{DRA_DONE}, pod group preemption: minCount (2) cannot be "
                          "satisfied: 1 scheduled, 0 remaining")
    assert set(cache.snapshot.get("n0").pods) == {"ns/low"}  # type: ignore[union-attr]


def test_victims_not_needed_are_reprieved() -> None:
    # n0 holds 3 CPUs of low priority, n1 1 CPU: the gang of 2 x 2 CPUs needs one node
    # emptied; whichever member lands on n0, only the 3-CPU pod has to go.
    _, res, st = post_filter({}, ["2", "2"], [bound("big", "n0", "3"),
                                              bound("small", "n1", "1")], nodes=2)
    assert st.ok, st
    assert res is not None and [v.key for v in res.victims] == ["ns/big"]
    assert sorted(res.nominating.values()) == ["n0", "n1"]


def test_a_pdb_protected_victim_is_reprieved_first() -> None:
    # Either low pod on n0 makes room. Without a PDB the one started earlier (more
    # important) is reprieved first and the other goes; a PodDisruptionBudget that
    # allows no disruption puts the protected one first, and then it stays.
    others = [bound("newer", "n0", "2", labels={"app": "keep"},
                    started="2026-02-01T00:00:00Z"),
              bound("older", "n0", "2", started="2026-01-01T00:00:00Z")]
    _, res, st = post_filter({}, ["2"], others, min_count=1)
    assert st.ok and res is not None and [v.key for v in res.victims] == ["ns/newer"]
    pdb = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
           "metadata": {"name": "keep", "namespace": "ns"},
           "spec": {"selector": {"matchLabels": {"app": "keep"}}},
           "status": {"disruptionsAllowed": 0}}
    _, res, st = post_filter({}, ["2"], others, min_count=1, pdbs=[pdb])
    assert st.ok and res is not None and [v.key for v in res.victims] == ["ns/older"]


def test_a_gang_victim_with_disruption_mode_all_goes_whole() -> None:
    victim_group = {"metadata": {"name": "v", "namespace": "ns", "generation": 1},
                    "spec": {"schedulingPolicy": {"gang": {"minCount": 2}},
                             "disruptionMode": {"all": {}}}}
    others = [bound("v0", "n0", "2", group="v"), bound("v1", "n1", "2", group="v")]
    _, res, st = post_filter({}, ["4"], others, min_count=1, nodes=2,
                             objects=[victim_group])
    assert st.ok, st
    assert res is not None and sorted(v.key for v in res.victims) == ["ns/v0", "ns/v1"]
    # Without disruptionMode each member is a victim of its own: one is enough.
    plain = {**victim_group, "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}}}
    _, res, st = post_filter({}, ["4"], others, min_count=1, nodes=2, objects=[plain])
    assert st.ok and res is not None and len(res.victims) == 1


def test_explain_says_why_a_gang_does_not_fit_as_a_whole() -> None:
    from polsched.commands.explain import explain, format_report

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


def test_an_ongoing_preemption_on_a_nominated_node_keeps_the_group_waiting() -> None:
    # A member is nominated to n0, where a lower-priority pod is terminating by
    # preemption: the group waits (Success), nominations kept, nothing new evicted.
    terminating = bound("going", "n0", "3")
    terminating["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    terminating["status"]["conditions"] = [{
        "type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}]
    cache = ClusterCache(None)
    cache.pod_groups.served = True
    cache.on_node_event("ADDED", node("n0"))
    group_obj = {**pod_group(2), "spec": {**pod_group(2)["spec"], "priority": 10}}
    cache.on_pod_group_event("ADDED", group_obj)
    cache.on_pod_event("ADDED", terminating)
    for i in range(2):
        raw = member(f"m{i}", "1")
        raw["spec"]["priority"] = 10
        raw["status"] = {"nominatedNodeName": "n0"}
        cache.on_pod_event("ADDED", raw)
    pipeline = build_pipeline(load_policy({
        "apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
        "metadata": {"name": "s"}, "spec": {}}, CATALOG),
        Handle(listers=cache.listers, pod_groups=cache.pod_groups))
    group = PodGroupInfo("ns", "g", group_obj)
    pods = [cache.pods[f"ns/m{i}"] for i in range(2)]

    async def go() -> tuple[PodGroupPostFilterResult | None, Status]:
        outcome = await pod_group_algorithm(pipeline, cache, group, pods)
        assert outcome.status.code is Code.UNSCHEDULABLE
        return await pod_group_post_filter(pipeline, cache, group, pods, outcome)

    res, st = asyncio.run(go())
    assert st.ok and st.message == "pod group preemption: ongoing preemption on nominated nodes"
    assert res is not None and not res.victims
    assert res.nominating == {"ns/m0": "n0", "ns/m1": "n0"}
