"""SchedulingQueue, with scenarios after kube-scheduler's
pkg/scheduler/backend/queue/scheduling_queue_test.go (priority order, backoff, moves on
cluster events, the moveRequestCycle, flushing unschedulable pods after 5 minutes)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from polsched.framework.types import PodInfo
from polsched.scheduler import queue as q

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def pod(name: str, priority: int = 0, created: str = "2026-01-01T00:00:00Z",
        **spec: Any) -> PodInfo:
    return PodInfo.from_json({
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}",
                     "creationTimestamp": created, "resourceVersion": "1"},
        "spec": {"schedulerName": "s", "priority": priority,
                 "containers": [{"name": "c", "image": "x"}], **spec},
    })


def fail(queue: q.SchedulingQueue, name: str, rejected: tuple[str, ...] = ("NodeLabel",)
         ) -> q.QueuedPod:
    """Pop `name` (it must be next) and report it unschedulable."""
    qp = queue.pop_nowait()
    assert qp is not None and qp.pod.name == name
    queue.add_unschedulable(qp, queue.scheduling_cycle, rejected)
    return qp


def test_pops_by_priority_then_creation_time() -> None:
    queue = q.SchedulingQueue(clock=Clock())
    queue.add(pod("low-old", 0, "2026-01-01T00:00:00Z"))
    queue.add(pod("high-new", 10, "2026-01-01T00:00:09Z"))
    queue.add(pod("low-older", 0, "2025-12-31T00:00:00Z"))
    queue.add(pod("high-old", 10, "2026-01-01T00:00:01Z"))
    order = []
    while (qp := queue.pop_nowait()) is not None:
        order.append(qp.pod.name)
    assert order == ["high-old", "high-new", "low-older", "low-old"]


def test_priority_update_reorders_active_pod() -> None:
    queue = q.SchedulingQueue(clock=Clock())
    queue.add(pod("a", 0))
    queue.add(pod("b", 0, "2026-01-02T00:00:00Z"))
    queue.add(pod("b", 5, "2026-01-02T00:00:00Z"))
    first = queue.pop_nowait()
    assert first is not None and first.pod.name == "b"
    assert queue.pop_nowait() is not None and queue.pop_nowait() is None  # "b" only once


def test_backoff_doubles_from_1s_to_10s() -> None:
    clock = Clock()
    queue = q.SchedulingQueue(clock=clock)
    queue.add(pod("p"))
    durations = []
    for _ in range(6):
        qp = queue.pop_nowait()
        assert qp is not None
        queue.add_unschedulable(qp, queue.scheduling_cycle, ["NodeLabel"])
        durations.append(queue.backoff_duration(qp))
        queue.move_all(q.NODE_ADD)  # into backoffQ: still backing off
        assert queue.where("ns/p") == "backoff"
        clock.now += durations[-1] - 0.01
        assert queue.pop_nowait() is None  # not before its backoff expires
        clock.now += 0.01
    assert durations == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]


def test_error_backoff_counts_consecutive_errors() -> None:
    clock = Clock()
    queue = q.SchedulingQueue(clock=clock)
    queue.add(pod("p"))
    qp = queue.pop_nowait()
    assert qp is not None
    queue.add_backoff(qp)
    assert queue.where("ns/p") == "backoff" and queue.backoff_duration(qp) == 1.0
    clock.now += 1.0
    qp = queue.pop_nowait()
    assert qp is not None
    queue.add_backoff(qp)
    assert queue.backoff_duration(qp) == 2.0


def test_unschedulable_waits_for_a_cluster_event() -> None:
    clock = Clock()
    queue = q.SchedulingQueue(clock=clock)
    queue.add(pod("p"))
    fail(queue, "p")
    assert queue.where("ns/p") == "unschedulable"
    clock.now += 60
    assert queue.pop_nowait() is None  # backoff long over, but nothing changed
    assert queue.move_all(q.NODE_ADD) == 1
    assert queue.where("ns/p") == "active"
    qp = queue.pop_nowait()
    assert qp is not None and qp.attempts == 2


@pytest.mark.parametrize("event", [q.NODE_ADD, q.NODE_UPDATE, q.ASSIGNED_POD_DELETE,
                                   q.POLICY_CHANGE])
def test_cluster_events_move_every_unschedulable_pod(event: str) -> None:
    clock = Clock()
    queue = q.SchedulingQueue(clock=clock)
    queue.add(pod("a"))
    queue.add(pod("b", created="2026-01-02T00:00:00Z"))
    fail(queue, "a")
    fail(queue, "b")
    clock.now += 5
    assert queue.move_all(event) == 2
    assert {queue.where("ns/a"), queue.where("ns/b")} == {"active"}


def test_assigned_pod_add_moves_only_pods_rejected_by_pod_affinity_plugins() -> None:
    clock = Clock()
    queue = q.SchedulingQueue(clock=clock)
    queue.add(pod("affinity"))
    queue.add(pod("resources", created="2026-01-02T00:00:00Z"))
    fail(queue, "affinity", ("InterPodAffinity",))
    fail(queue, "resources", ("NodeResourcesFit",))
    clock.now += 5
    assert queue.move_all(q.ASSIGNED_POD_ADD, {"InterPodAffinity", "PodTopologySpread"}) == 1
    assert queue.where("ns/affinity") == "active"
    assert queue.where("ns/resources") == "unschedulable"


def test_move_during_the_cycle_sends_the_pod_to_backoff_not_unschedulable() -> None:
    """moveRequestCycle: a node added while the pod was being scheduled must not be lost."""
    clock = Clock()
    queue = q.SchedulingQueue(clock=clock)
    queue.add(pod("p"))
    qp = queue.pop_nowait()
    assert qp is not None
    cycle = queue.scheduling_cycle
    queue.move_all(q.NODE_ADD)  # happens while "p" is in flight
    queue.add_unschedulable(qp, cycle, ["NodeResourcesFit"])
    assert queue.where("ns/p") == "backoff"
    clock.now += 1
    assert queue.pop_nowait() is qp


def test_unschedulable_pods_are_flushed_after_five_minutes() -> None:
    clock = Clock()
    queue = q.SchedulingQueue(clock=clock)
    queue.add(pod("p"))
    fail(queue, "p")
    clock.now += 299
    assert queue.pop_nowait() is None
    clock.now += 1
    qp = queue.pop_nowait()
    assert qp is not None and qp.pod.name == "p"


def test_a_pod_update_moves_it_but_a_status_update_does_not() -> None:
    clock = Clock()
    queue = q.SchedulingQueue(clock=clock)
    p = pod("p")
    queue.add(p)
    fail(queue, "p")
    clock.now += 5
    status_only = PodInfo.from_json({**p.raw, "metadata": {**p.raw["metadata"],
                                                            "resourceVersion": "2"},
                                     "status": {"conditions": [{"type": "PodScheduled"}]}})
    queue.add(status_only)
    assert queue.where("ns/p") == "unschedulable"
    relabelled = PodInfo.from_json({**p.raw, "metadata": {**p.raw["metadata"],
                                                          "labels": {"want": "you"}}})
    queue.add(relabelled)
    assert queue.where("ns/p") == "active"
    qp = queue.pop_nowait()
    assert qp is not None and qp.pod.labels == {"want": "you"}


def test_no_pod_is_queued_twice() -> None:
    clock = Clock()
    queue = q.SchedulingQueue(clock=clock)
    queue.add(pod("p"))
    queue.add(pod("p"))
    assert len(queue) == 1
    qp = queue.pop_nowait()
    assert qp is not None
    queue.add(pod("p"))  # an update while in flight does not queue it again
    assert len(queue) == 0 and queue.where("ns/p") == "in-flight"
    queue.add_unschedulable(qp, queue.scheduling_cycle, ["X"])
    queue.add(pod("p"))
    queue.move_all(q.NODE_ADD)
    queue.move_all(q.NODE_ADD)
    assert len(queue) == 1


def test_deleted_or_bound_pods_leave_every_queue() -> None:
    clock = Clock()
    queue = q.SchedulingQueue(clock=clock)
    for name in ("active", "backoff", "unsched"):
        queue.add(pod(name))
    queue.delete("ns/active")
    qp = queue.pop_nowait()
    assert qp is not None
    queue.add_backoff(qp)
    qp2 = queue.pop_nowait()
    assert qp2 is not None
    queue.add_unschedulable(qp2, queue.scheduling_cycle, ["X"])
    assert len(queue) == 2
    queue.delete(qp.key)
    queue.delete(qp2.key)
    assert len(queue) == 0
    clock.now += 400
    queue.move_all(q.NODE_ADD)
    assert queue.pop_nowait() is None


def test_a_pod_deleted_while_in_flight_is_not_requeued() -> None:
    queue = q.SchedulingQueue(clock=Clock())
    queue.add(pod("p"))
    qp = queue.pop_nowait()
    assert qp is not None
    queue.delete("ns/p")
    queue.add_unschedulable(qp, queue.scheduling_cycle, ["X"])
    assert queue.where("ns/p") is None
    queue.add(pod("q"))
    qp = queue.pop_nowait()
    assert qp is not None
    queue.delete("ns/q")
    queue.add_backoff(qp)
    assert queue.where("ns/q") is None


def test_restore_puts_a_paused_pod_back_uncounted() -> None:
    queue = q.SchedulingQueue(clock=Clock())
    queue.add(pod("p"))
    qp = queue.pop_nowait()
    assert qp is not None
    queue.restore(qp)
    assert queue.where("ns/p") == "active" and qp.attempts == 0


def test_pop_waits_for_a_pod_and_for_backoff() -> None:
    async def main() -> None:
        queue = q.SchedulingQueue(initial_backoff=0.05)
        waiter = asyncio.create_task(queue.pop())
        await asyncio.sleep(0.01)
        assert not waiter.done()
        queue.add(pod("p"))
        qp = await asyncio.wait_for(waiter, 1)
        queue.add_backoff(qp)
        again = await asyncio.wait_for(queue.pop(), 1)  # after its 50 ms backoff
        assert again is qp
        queue.close()
        with pytest.raises(q.QueueClosed):
            await queue.pop()

    asyncio.run(main())
