"""GangScheduling, built by the production builder from the default policy, against a
ClusterCache fed with watch events (cases from upstream's gangscheduling_test.go)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from polsched.api import load_policy
from polsched.cluster.cache import ClusterCache
from polsched.framework import events as ev
from polsched.framework.cycle_state import CycleState
from polsched.framework.interfaces import Handle, PlacementProgress, PodGroupInfo
from polsched.framework.status import Code
from polsched.framework.types import PodInfo
from polsched.framework.waiting_pods import WaitingPod
from polsched.objects import Json
from polsched.plugins import CATALOG
from polsched.plugins.gang_scheduling import PERMIT_TIMEOUT, GangScheduling
from polsched.scheduler.pipelines import build_pipeline
from tests.builders import make_pod


def pod_group(name: str = "g", min_count: int | None = 2, ns: str = "ns") -> Json:
    policy: Json = {"gang": {"minCount": min_count}} if min_count is not None \
        else {"basic": {}}
    return {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": ns, "generation": 1},
            "spec": {"schedulingPolicy": policy}}


def member(name: str, group: str | None = "g", node_name: str = "", ns: str = "ns") -> Json:
    p = make_pod().name(name).namespace(ns).uid(f"uid-{name}").container(image="x").node(node_name)
    if group is not None:
        p.pod_group(group)
    return p.obj()


def setup(served: bool = True) -> tuple[ClusterCache, GangScheduling, dict[str, WaitingPod],
                                        list[list[str]]]:
    cache = ClusterCache(None)
    cache.pod_groups.served = served
    waiting: dict[str, WaitingPod] = {}
    activated: list[list[str]] = []
    handle = Handle(listers=cache.listers, pod_groups=cache.pod_groups, waiting_pods=waiting,
                    activate=lambda pods: activated.append([p.key for p in pods]))
    pipeline = build_pipeline(load_policy({
        "apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
        "metadata": {"name": "s"}, "spec": {}}, CATALOG), handle)
    (gang,) = [p for p in pipeline.pre_enqueue_plugins if isinstance(p, GangScheduling)]
    # The pipeline runs it at Permit and PlacementFeasible too.
    assert gang in pipeline.plugins.permit and gang in pipeline.plugins.placement_feasible
    return cache, gang, waiting, activated


def info(p: Json) -> PodInfo:
    return PodInfo.from_json(p)


def test_pre_enqueue_waits_for_the_pod_group_then_for_min_count() -> None:
    cache, gang, _, _ = setup()
    cache.on_pod_event("ADDED", member("a"))
    st = gang.pre_enqueue(info(member("a")))
    assert st.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert st.message == 'waiting for pods\'s pod group "g" to appear in scheduling queue'
    cache.on_pod_group_event("ADDED", pod_group(min_count=2))
    st = gang.pre_enqueue(info(member("a")))
    assert st.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert st.message == "waiting for minCount pods from a gang to appear in scheduling queue"
    cache.on_pod_event("ADDED", member("b"))
    assert gang.pre_enqueue(info(member("a"))).ok
    # A pod of no group, and a member of a basic group, go in at once.
    assert gang.pre_enqueue(info(member("plain", group=None))).ok
    cache.on_pod_group_event("ADDED", pod_group("basic", min_count=None))
    assert gang.pre_enqueue(info(member("x", group="basic"))).ok


def test_without_pod_groups_served_it_lets_every_pod_through() -> None:
    cache, gang, _, _ = setup(served=False)
    assert gang.pre_enqueue(info(member("a"))).ok
    st, timeout = gang.permit(CycleState(), info(member("a")), "n1")
    assert st.ok and timeout == 0.0
    assert gang.group_key(info(member("a"))) is None


@pytest.mark.parametrize(("min_count", "remaining", "scheduled", "code", "message"), [
    (3, 1, 1, Code.UNSCHEDULABLE, "minCount (3) cannot be satisfied: 1 scheduled, 1 remaining"),
    (3, 2, 0, Code.UNSCHEDULABLE, "minCount (3) cannot be satisfied: 0 scheduled, 2 remaining"),
    (3, 2, 1, Code.WAIT, "minCount (3) is not yet satisfied: 1 scheduled, 2 remaining"),
    (3, 0, 3, Code.SUCCESS, ""),
    (None, 1, 0, Code.WAIT, "minCount (1) is not yet satisfied: 0 scheduled, 1 remaining"),
    (None, 0, 1, Code.SUCCESS, ""),
])
def test_placement_feasible(min_count: int | None, remaining: int, scheduled: int,
                            code: Code, message: str) -> None:
    _, gang, _, _ = setup()
    group = PodGroupInfo("ns", "g", pod_group(min_count=min_count))
    st = gang.placement_feasible(CycleState(), group, PlacementProgress(remaining, scheduled))
    assert (st.code, st.message) == (code, message)


def test_permit_waits_for_min_count_assumed_then_allows_the_waiters() -> None:
    async def run() -> None:
        cache, gang, waiting, activated = setup()
        cache.on_pod_group_event("ADDED", pod_group(min_count=2))
        for n in ("a", "b", "c"):
            cache.on_pod_event("ADDED", member(n))
        a = cache.assume(cache.pods["ns/a"], "n1")
        st, timeout = gang.permit(CycleState(), a, "n1")
        assert (st.code, st.message, timeout) == (
            Code.WAIT, "waiting for minCount pods from a gang to be scheduled", PERMIT_TIMEOUT)
        assert timeout == 300.0  # permitTimeoutDuration, 5 minutes
        # The group's unscheduled members are activated (b and c).
        assert sorted(activated[-1]) == ["ns/b", "ns/c"]
        waiter = waiting[a.uid] = WaitingPod(a, {"GangScheduling": timeout})
        b = cache.assume(cache.pods["ns/b"], "n1")
        st, _ = gang.permit(CycleState(), b, "n1")
        assert st.ok
        assert (await asyncio.wait_for(waiter.wait(), 1)).ok
        # Forgetting b puts the group below minCount again.
        cache.forget(b)
        assert cache.pod_groups.state("ns/g").scheduled_pods_count == 1

    asyncio.run(run())


def test_a_bound_member_counts_as_scheduled() -> None:
    cache, gang, _, _ = setup()
    cache.on_pod_group_event("ADDED", pod_group(min_count=2))
    cache.on_pod_event("ADDED", member("a", node_name="n1"))  # bound before a crash
    cache.on_pod_event("ADDED", member("b"))
    state = cache.pod_groups.state("ns/g")
    assert (state.all_pods_count, state.scheduled_pods_count) == (2, 1)
    b = cache.assume(cache.pods["ns/b"], "n1")
    assert gang.permit(CycleState(), b, "n1")[0].ok


def hint(gang: GangScheduling, event: ev.ClusterEvent, p: PodInfo, old: Any,
         new: Any) -> ev.QueueingHint:
    (registered,) = [e for e in gang.events_to_register() if e.event == event]
    assert registered.hint is not None
    return registered.hint(p, old, new)


def test_queueing_hints() -> None:
    _, gang, _, _ = setup()
    a = info(member("a"))
    assert hint(gang, ev.UNSCHEDULED_POD_ADD, a, None, info(member("b"))) is ev.QUEUE
    assert hint(gang, ev.ASSIGNED_POD_ADD, a, None, info(member("b", node_name="n"))) \
        is ev.QUEUE
    assert hint(gang, ev.UNSCHEDULED_POD_ADD, a, None, info(member("c", "other"))) \
        is ev.QUEUE_SKIP
    assert hint(gang, ev.UNSCHEDULED_POD_ADD, a, None, info(member("d", None))) \
        is ev.QUEUE_SKIP
    assert hint(gang, ev.POD_GROUP_ADD, a, None, pod_group()) is ev.QUEUE
    assert hint(gang, ev.POD_GROUP_ADD, a, None, pod_group("other")) is ev.QUEUE_SKIP
    update = ev.POD_GROUP_UPDATE
    assert hint(gang, update, a, pod_group(min_count=3), pod_group(min_count=2)) is ev.QUEUE
    assert hint(gang, update, a, pod_group(min_count=2), pod_group(min_count=3)) \
        is ev.QUEUE_SKIP
    assert hint(gang, update, a, pod_group(min_count=2), pod_group(min_count=2)) \
        is ev.QUEUE_SKIP
    # A switch between gang and basic is QueueSkip, as upstream.
    assert hint(gang, update, a, pod_group(min_count=2), pod_group(min_count=None)) \
        is ev.QUEUE_SKIP
    assert hint(gang, update, a, pod_group("other", 3), pod_group("other", 1)) \
        is ev.QUEUE_SKIP


def test_it_can_be_disabled() -> None:
    pipeline = build_pipeline(load_policy({
        "apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
        "metadata": {"name": "s"}, "spec": {"disabledPlugins": ["GangScheduling"]}}, CATALOG))
    assert "GangScheduling" not in [p.name for p in pipeline.pre_enqueue_plugins]
    assert not pipeline.plugins.placement_feasible


def test_bound_gangs_counts_gangs_with_min_count_members_bound() -> None:
    cache, _, _, _ = setup()
    cache.on_pod_group_event("ADDED", pod_group("g", min_count=2))
    cache.on_pod_group_event("ADDED", pod_group("basic", min_count=None))
    for name, group, node in (("a", "g", "n1"), ("b", "g", ""), ("x", "basic", "n1")):
        raw = member(name, group, node_name=node)
        raw["spec"]["schedulerName"] = "s"
        cache.on_pod_event("ADDED", raw)
    assert cache.pod_groups.bound_gangs("s") == 0  # one of two bound; basic never counts
    raw = member("b", "g", node_name="n1")
    raw["spec"]["schedulerName"] = "s"
    cache.on_pod_event("MODIFIED", raw)
    assert cache.pod_groups.bound_gangs("s") == 1
    assert cache.pod_groups.bound_gangs("other") == 0
    cache.on_pod_event("DELETED", raw)
    assert cache.pod_groups.bound_gangs("s") == 0


def test_a_pending_member_for_a_scheduler_not_served_here_does_not_count() -> None:
    """Upstream adds an unassigned member to its group state only when the scheduler is
    responsible for it (addPodToSchedulingQueue -> AddPodGroupMember): a member whose
    schedulerName nobody here serves does not make up minCount until it is bound."""
    cache, gang, _, _ = setup()
    served = {"default-scheduler"}
    cache.pod_groups.responsible = served.__contains__
    cache.on_pod_group_event("ADDED", pod_group(min_count=2))
    other = member("other")
    other["spec"]["schedulerName"] = "nobody"
    cache.on_pod_event("ADDED", other)
    cache.on_pod_event("ADDED", member("a"))
    st = gang.pre_enqueue(info(member("a")))
    assert st.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert st.message == "waiting for minCount pods from a gang to appear in scheduling queue"
    assert [p.name for p in cache.pod_groups.state("ns/g").unscheduled_pods()] == ["a"]
    # The count is cached per state change (a gang's members all ask it on every queue
    # move): a changed answer of `responsible` without the engine's notice is not seen.
    served.add("nobody")
    assert not gang.pre_enqueue(info(member("a"))).ok
    cache.pod_groups.responsible_changed()  # as the engine does when a profile appears
    assert gang.pre_enqueue(info(member("a"))).ok
    served.discard("nobody")
    cache.pod_groups.responsible_changed()
    other["spec"]["nodeName"] = "n1"  # bound by its own scheduler: assigned, counted
    cache.on_pod_event("MODIFIED", other)
    assert gang.pre_enqueue(info(member("a"))).ok
