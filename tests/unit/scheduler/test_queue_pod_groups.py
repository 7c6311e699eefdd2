"""SchedulingQueue with pod groups: a group is popped as one unit (members in upstream's
order), a member that arrives while its group is in its cycle waits and is queued after
it (pendingPodGroupPods), and Activate moves pending members to activeQ."""

from __future__ import annotations

from polsched.framework.podgroups import pod_group_key
from polsched.framework.types import PodInfo
from polsched.scheduler import queue as q


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def pod(name: str, group: str | None = "g", priority: int = 0) -> PodInfo:
    spec: dict[str, object] = {"schedulerName": "s", "priority": priority,
                               "containers": [{"name": "c", "image": "x"}]}
    if group is not None:
        spec["schedulingGroup"] = {"podGroupName": group}
    return PodInfo.from_json({"metadata": {"name": name, "namespace": "ns",
                                           "uid": f"uid-{name}", "resourceVersion": "1"},
                              "spec": spec})


def queue() -> tuple[q.SchedulingQueue, Clock]:
    clock = Clock()
    queue = q.SchedulingQueue(clock=clock)
    queue.configure(group_of=pod_group_key)
    return queue, clock


def test_a_group_is_popped_as_one_unit_in_upstreams_member_order() -> None:
    qu, clock = queue()
    for name in ("a", "b", "plain", "c"):
        qu.add(pod(name, None if name == "plain" else "g"))
        clock.now += 1
    qu.add(pod("other", "h"))
    first = qu.pop_nowait()
    assert first is not None
    group = qu.pop_group(first)
    assert group is not None and group.key == "ns/g"
    assert [m.pod.name for m in group.members] == ["a", "b", "c"]
    assert all(qu.where(m.key) is q.Location.IN_FLIGHT for m in group.members)
    # The plain pod and the other group are left, one entity each.
    plain = qu.pop_nowait()
    assert plain is not None and plain.pod.name == "plain" and qu.pop_group(plain) is None
    other = qu.pop_nowait()
    assert other is not None
    other_group = qu.pop_group(other)
    assert other_group is not None and [m.pod.name for m in other_group.members] == ["other"]


def test_a_member_arriving_during_its_groups_cycle_is_queued_after_it() -> None:
    qu, _ = queue()
    qu.add(pod("a"))
    first = qu.pop_nowait()
    assert first is not None
    group = qu.pop_group(first)
    assert group is not None
    qu.add(pod("late"))
    assert "ns/late" not in qu and qu.pop_nowait() is None  # held while the group runs
    for m in group.members:
        qu.add_unschedulable(m, ("NodeResourcesFit",))
    qu.group_done(group.key)
    assert qu.where("ns/late") is q.Location.ACTIVE


def test_a_held_member_deleted_meanwhile_is_not_queued() -> None:
    qu, _ = queue()
    qu.add(pod("a"))
    first = qu.pop_nowait()
    assert first is not None
    group = qu.pop_group(first)
    assert group is not None
    qu.add(pod("late"))
    qu.delete("ns/late")
    qu.done(first)
    qu.group_done(group.key)
    assert "ns/late" not in qu


def test_activate_moves_unschedulable_and_backoff_pods_to_active() -> None:
    qu, _ = queue()
    qu.add(pod("a"))
    qu.add(pod("b", "h"))
    for _ in range(2):
        qp = qu.pop_nowait()
        assert qp is not None
        qu.add_unschedulable(qp, ("NodeResourcesFit",))
    assert qu.where("ns/a") is q.Location.UNSCHEDULABLE
    assert qu.activate(["ns/a", "ns/missing"]) == 1
    assert qu.where("ns/a") is q.Location.ACTIVE
