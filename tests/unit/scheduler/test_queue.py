"""SchedulingQueue, with scenarios after kube-scheduler's
pkg/scheduler/backend/queue/scheduling_queue_test.go (priority order, backoff, moves on
cluster events, events while in flight, flushing unschedulable pods after 5 minutes,
PreEnqueue gating, PopFromBackoffQ, pods recreated under the same name)."""

from __future__ import annotations

from typing import Any

import pytest

from polsched.framework import events as ev
from polsched.framework.types import PodInfo
from polsched.scheduler.queue.scheduling_queue import SchedulingQueue
from polsched.scheduler.queue.types import Location, QueuedPod
from polsched.scheduler.queue.unschedulable import UNSCHEDULABLE_FLUSH_PERIOD
from tests.builders import make_pod

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


NODE_UPDATE = ev.ClusterEvent(ev.Resource.NODE, ev.ActionType.UPDATE)


def pod(name: str, priority: int = 0, created: str = "2026-01-01T00:00:00Z",
        uid: str = "", **spec: Any) -> PodInfo:
    return (make_pod().name(name).namespace("ns").uid(uid or f"uid-{name}").created(created)
            .resource_version("1").scheduler("s").priority(priority).container(image="x")
            .spec(**spec).info())


def fail(queue: SchedulingQueue, name: str, rejected: tuple[str, ...] = ("NodeLabel",)
         ) -> QueuedPod:
    """Pop `name` (it must be next) and report it unschedulable."""
    qp = queue.pop_nowait()
    assert qp is not None and qp.pod.name == name
    queue.add_unschedulable(qp, rejected)
    return qp


def test_pops_by_priority_then_the_time_the_pod_entered_the_queue() -> None:
    """Defect 6: PrioritySort orders equal priorities by QueuedPodInfo.Timestamp (when the
    pod last entered the queue), not by creationTimestamp."""
    clock = Clock()
    queue = SchedulingQueue(clock=clock)
    for name, priority, created in (("low-first", 0, "2026-01-03T00:00:00Z"),
                                    ("high-first", 10, "2026-01-03T00:00:00Z"),
                                    ("low-second", 0, "2025-12-31T00:00:00Z"),
                                    ("high-second", 10, "2026-01-01T00:00:00Z")):
        queue.add(pod(name, priority, created))
        clock.now += 1
    order = []
    while (qp := queue.pop_nowait()) is not None:
        order.append(qp.pod.name)
    assert order == ["high-first", "high-second", "low-first", "low-second"]


def test_a_pod_that_failed_goes_behind_pods_queued_since() -> None:
    """Its timestamp is refreshed when it comes back, as upstream's
    AddUnschedulablePodIfNotPresent."""
    clock = Clock()
    queue = SchedulingQueue(clock=clock)
    queue.add(pod("old", created="2020-01-01T00:00:00Z"))
    clock.now += 1
    queue.add(pod("new", created="2026-01-01T00:00:00Z"))
    clock.now += 1
    fail(queue, "old")  # queued first, tried first, failed after "new" was queued
    clock.now += 60
    queue.move(ev.NODE_ADD)
    assert [queue.pop_nowait().pod.name for _ in range(2)] == ["new", "old"]  # type: ignore[union-attr]


def test_priority_update_reorders_active_pod() -> None:
    queue = SchedulingQueue(clock=Clock())
    queue.add(pod("a", 0))
    queue.add(pod("b", 0, "2026-01-02T00:00:00Z"))
    queue.add(pod("b", 5, "2026-01-02T00:00:00Z"))
    first = queue.pop_nowait()
    assert first is not None and first.pod.name == "b"
    assert queue.pop_nowait() is not None and queue.pop_nowait() is None  # "b" only once


def test_backoff_doubles_from_1s_to_10s() -> None:
    clock = Clock()
    # Without PopFromBackoffQ, to see the backoff itself.
    queue = SchedulingQueue(clock=clock, pop_from_backoff=False)
    queue.add(pod("p"))
    durations = []
    for _ in range(6):
        qp = queue.pop_nowait()
        assert qp is not None
        queue.add_unschedulable(qp, ["NodeLabel"])
        durations.append(queue.backoff_duration(qp))
        queue.move(ev.NODE_ADD)  # into backoffQ: still backing off
        assert queue.where("ns/p") == "backoff"
        clock.now += durations[-1] - 0.01
        assert queue.pop_nowait() is None  # not before its backoff expires
        clock.now += 0.01
    assert durations == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]


def test_error_backoff_counts_consecutive_errors() -> None:
    clock = Clock()
    queue = SchedulingQueue(clock=clock)
    queue.add(pod("p"))
    qp = queue.pop_nowait()
    assert qp is not None
    queue.add_backoff(qp)
    assert queue.where("ns/p") == "backoff" and queue.backoff_duration(qp) == 1.0
    clock.now += 2.0  # the ordering window after the one the 1 s backoff ends in
    qp = queue.pop_nowait()
    assert qp is not None
    queue.add_backoff(qp)
    assert queue.backoff_duration(qp) == 2.0


def test_unschedulable_waits_for_a_cluster_event() -> None:
    clock = Clock()
    queue = SchedulingQueue(clock=clock)
    queue.add(pod("p"))
    fail(queue, "p")
    assert queue.where("ns/p") == "unschedulable"
    clock.now += 60
    assert queue.pop_nowait() is None  # backoff long over, but nothing changed
    assert queue.move(ev.NODE_ADD) == 1
    assert queue.where("ns/p") == "active"
    qp = queue.pop_nowait()
    assert qp is not None and qp.attempts == 2


@pytest.mark.parametrize("event", [ev.NODE_ADD, NODE_UPDATE, ev.ASSIGNED_POD_DELETE,
                                   ev.EVENT_POLICY_CHANGE])
def test_without_hints_cluster_events_move_every_unschedulable_pod(
        event: ev.ClusterEvent) -> None:
    """Plugins that register no events (no EnqueueExtensions) are registered for all."""
    clock = Clock()
    queue = SchedulingQueue(clock=clock)
    queue.add(pod("a"))
    queue.add(pod("b", created="2026-01-02T00:00:00Z"))
    fail(queue, "a")
    fail(queue, "b")
    queue.configure(hints=ev.hint_map({"NodeLabel": object()}))
    clock.now += 5
    assert queue.move(event) == 2
    assert {queue.where("ns/a"), queue.where("ns/b")} == {"active"}


def test_an_event_during_the_cycle_sends_the_pod_to_backoff_not_unschedulable() -> None:
    """inFlightEvents: a node added while the pod was being scheduled must not be lost."""
    clock = Clock()
    queue = SchedulingQueue(clock=clock, pop_from_backoff=False)
    queue.add(pod("p"))
    qp = queue.pop_nowait()
    assert qp is not None
    queue.move(ev.NODE_ADD)  # happens while "p" is in flight
    queue.add_unschedulable(qp, ["NodeResourcesFit"])
    assert queue.where("ns/p") == "backoff"
    assert queue.in_flight_events() == 0  # nothing in flight: nothing kept
    clock.now += 1
    assert queue.pop_nowait() is qp


def test_unschedulable_pods_are_flushed_after_five_minutes() -> None:
    clock = Clock()
    queue = SchedulingQueue(clock=clock)
    queue.add(pod("p"))
    fail(queue, "p")
    clock.now += 299
    assert queue.pop_nowait() is None
    # Checked every 30 s, as upstream's flushUnschedulableEntitiesLeftover.
    clock.now += UNSCHEDULABLE_FLUSH_PERIOD
    qp = queue.pop_nowait()
    assert qp is not None and qp.pod.name == "p"


def test_a_pod_update_moves_it_but_a_status_update_does_not() -> None:
    clock = Clock()
    queue = SchedulingQueue(clock=clock)
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
    queue = SchedulingQueue(clock=clock)
    queue.add(pod("p"))
    queue.add(pod("p"))
    assert len(queue) == 1
    qp = queue.pop_nowait()
    assert qp is not None
    queue.add(pod("p"))  # an update while in flight does not queue it again
    assert len(queue) == 0 and queue.where("ns/p") == "in-flight"
    queue.add_unschedulable(qp, ["X"])
    queue.add(pod("p"))
    queue.move(ev.NODE_ADD)
    queue.move(ev.NODE_ADD)
    assert len(queue) == 1


def test_deleted_or_bound_pods_leave_every_queue() -> None:
    clock = Clock()
    queue = SchedulingQueue(clock=clock)
    for name in ("active", "backoff", "unsched"):
        queue.add(pod(name))
    queue.delete("ns/active")
    qp = queue.pop_nowait()
    assert qp is not None
    queue.add_backoff(qp)
    qp2 = queue.pop_nowait()
    assert qp2 is not None
    queue.add_unschedulable(qp2, ["X"])
    assert len(queue) == 2
    queue.delete(qp.key)
    queue.delete(qp2.key)
    assert len(queue) == 0
    clock.now += 400
    queue.move(ev.NODE_ADD)
    assert queue.pop_nowait() is None


def test_a_pod_deleted_while_in_flight_is_not_requeued() -> None:
    queue = SchedulingQueue(clock=Clock())
    queue.add(pod("p"))
    qp = queue.pop_nowait()
    assert qp is not None
    queue.delete("ns/p")
    queue.add_unschedulable(qp, ["X"])
    assert queue.where("ns/p") is None
    queue.add(pod("q"))
    qp = queue.pop_nowait()
    assert qp is not None
    queue.delete("ns/q")
    queue.add_backoff(qp)
    assert queue.where("ns/q") is None


def test_restore_puts_a_paused_pod_back_uncounted() -> None:
    queue = SchedulingQueue(clock=Clock())
    queue.add(pod("p"))
    qp = queue.pop_nowait()
    assert qp is not None
    queue.restore(qp)
    assert queue.where("ns/p") == "active" and qp.attempts == 0


def test_a_pod_that_may_be_popped_wakes_the_loop_and_backoff_says_when() -> None:
    """on_wake (the engine's scheduling loop gives the policy a turn) on a pod added and
    on one moved to backoff; next_due says when a queue found empty has a pod again;
    a closed queue wakes nobody."""
    clock = Clock()
    queue = SchedulingQueue(clock=clock, initial_backoff=1.0, backoff_window=1.0)
    woken: list[int] = []
    queue.on_wake = lambda: woken.append(1)
    assert queue.pop_nowait() is None and queue.next_due() is None
    queue.add(pod("p"))
    assert len(woken) == 1
    qp = queue.pop_nowait()
    assert qp is not None
    queue.add_backoff(qp)
    assert len(woken) == 2 and queue.where("ns/p") == "backoff"
    assert queue.pop_nowait() is None  # backing off
    due = queue.next_due()
    assert due is not None and 0 < due <= 2.0
    clock.now += due
    assert queue.pop_nowait() is qp  # out of backoff into activeQ (a wake too), popped
    before = len(woken)
    queue.close()
    queue.add(pod("r"))
    assert len(woken) == before


class Gate:
    """A PreEnqueue plugin as SchedulingGates: gated while the pod has gates."""

    NAME = "SchedulingGates"
    name = NAME

    def __init__(self) -> None:
        self.calls = 0

    def pre_enqueue(self, p: PodInfo) -> Any:
        from polsched.plugins.scheduling_gates import SchedulingGates
        self.calls += 1
        return SchedulingGates().pre_enqueue(p)


def test_a_gated_pod_waits_outside_the_active_queue_until_its_gates_go() -> None:
    clock = Clock()
    queue = SchedulingQueue(clock=clock)
    gate = Gate()
    queue.configure(pre_enqueue=[gate])  # type: ignore[list-item]
    gated = pod("g", schedulingGates=[{"name": "example.com/hold"}])
    queue.add(gated)
    assert queue.where("ns/g") == "gated"
    assert queue.sizes() == (0, 0, 0, 1)
    assert queue.pop_nowait() is None
    clock.now += 400  # the 5-minute flush runs PreEnqueue again: still gated
    assert queue.pop_nowait() is None and queue.where("ns/g") == "gated"
    queue.move(ev.NODE_ADD)
    assert queue.where("ns/g") == "gated"
    relabelled = pod("g", schedulingGates=[{"name": "example.com/hold"}])
    relabelled.raw["metadata"]["labels"] = {"a": "b"}
    queue.add(PodInfo.from_json(relabelled.raw))
    assert queue.where("ns/g") == "gated"
    queue.add(pod("g"))  # the gates are removed
    assert queue.where("ns/g") == "active" and queue.sizes() == (1, 0, 0, 0)
    qp = queue.pop_nowait()
    assert qp is not None and qp.attempts == 1


def test_a_pod_recreated_while_its_predecessor_is_in_flight_is_queued() -> None:
    """Defect 3: a StatefulSet pod deleted and recreated under the same name while the old
    one is being scheduled is a new pod: queued now; the old one is never requeued."""
    queue = SchedulingQueue(clock=Clock())
    queue.add(pod("web-0", uid="old"))
    old = queue.pop_nowait()
    assert old is not None
    queue.delete("ns/web-0", "old")
    queue.add(pod("web-0", uid="new"))
    assert queue.where("ns/web-0") == "active"
    queue.add_unschedulable(old, ["NodeResourcesFit"])  # the old cycle ends
    new = queue.pop_nowait()
    assert new is not None and new.uid == "new"
    assert queue.pop_nowait() is None


def test_a_recreated_pod_replaces_its_predecessor_without_a_delete_event() -> None:
    """The watch may show the new pod before (or without) the old one's deletion."""
    queue = SchedulingQueue(clock=Clock())
    queue.add(pod("web-0", uid="old"))
    old = queue.pop_nowait()
    assert old is not None
    queue.add(pod("web-0", uid="new"))
    queue.done(old)
    new = queue.pop_nowait()
    assert new is not None and new.uid == "new"
    # and when the old one is still queued, the new one replaces it
    queue.add(pod("web-1", uid="a"))
    queue.add(pod("web-1", uid="b"))
    qp = queue.pop_nowait()
    assert qp is not None and qp.uid == "b" and queue.pop_nowait() is None


def test_pop_from_backoff_when_active_is_empty() -> None:
    """PopFromBackoffQ: a pod rejected by plugins does not wait out its backoff while
    there is nothing else to do; a pod that failed with an error does."""
    clock = Clock()
    queue = SchedulingQueue(clock=clock)
    queue.add(pod("rejected"))
    queue.add(pod("error", created="2026-01-02T00:00:00Z"))
    clock.now += 1
    queue.add(pod("later"))
    a = queue.pop_nowait()
    b = queue.pop_nowait()
    assert a is not None and b is not None
    queue.move(ev.NODE_ADD)  # while in flight
    queue.add_unschedulable(a, ["NodeResourcesFit"])
    queue.add_backoff(b)
    assert queue.where("ns/rejected") == "backoff" and queue.where("ns/error") == "backoff"
    assert queue.pop_nowait().pod.name == "later"  # type: ignore[union-attr]
    again = queue.pop_nowait()
    assert again is a
    assert queue.pop_nowait() is None  # the error one waits its backoff
    clock.now += 1
    assert queue.pop_nowait() is None  # ... until its ordering window has passed
    clock.now += 1
    assert queue.pop_nowait() is b


def test_backoff_ends_at_the_ordering_window_after_it_expires() -> None:
    """backoff_queue.go with PopFromBackoffQ: the expiry is truncated to its 1 s window and
    the pod backs off until that window has passed (isEntityBackingoff), so a 1 s backoff
    from 1000.3 ends at 1002.0, not 1001.3; without PopFromBackoffQ it ends at 1001.3."""
    for pop_from_backoff, ends in ((True, 1002.0), (False, 1001.3)):
        clock = Clock()
        clock.now = 1000.3
        queue = SchedulingQueue(clock=clock, pop_from_backoff=pop_from_backoff)
        queue.add(pod("p"))
        qp = queue.pop_nowait()
        assert qp is not None
        queue.add_backoff(qp)  # an error: PopFromBackoffQ does not shortcut it
        assert queue.backoff_expiry(qp) == pytest.approx(ends)
        clock.now = ends - 0.01
        assert queue.pop_nowait() is None and queue.where("ns/p") == "backoff"
        clock.now = ends
        again = queue.pop_nowait()
        assert again is not None and again.pod.name == "p"


def test_backoff_windows_are_the_wall_clocks_seconds_with_the_monotonic_clock() -> None:
    """Upstream truncates to windows of the wall clock (time.Truncate) and flushes on its
    second boundaries; the production queue (monotonic clock) ends a backoff on those
    same boundaries, so that polsched and kube-scheduler retry a group at the same
    moment, not up to a second apart (the gang family's min_increase at seed 1)."""
    import time as _time

    queue = SchedulingQueue()  # the engine's: time.monotonic
    queue.add(pod("p"))
    qp = queue.pop_nowait()
    assert qp is not None
    queue.add_backoff(qp)
    expiry = queue.backoff_expiry(qp)
    on_wall = expiry + (_time.time() - _time.monotonic())
    assert abs(on_wall - round(on_wall)) < 0.01
    assert 1.0 <= expiry - qp.timestamp <= 2.0 + 0.01


def test_a_preemptor_waits_gated_until_activated_once_its_preemption_is_done() -> None:
    """DefaultPreemption's PreEnqueue (the production plugin) keeps a pod whose victims
    are being evicted out of activeQ; activate_gated lets it in once they are gone, as
    upstream's Activate after async preemption."""
    from polsched.plugins.default_preemption import NAME, DefaultPreemption

    clock = Clock()
    running = {"uid-p"}
    plugin = DefaultPreemption(preempting=running.__contains__)
    queue = SchedulingQueue(clock=clock)
    queue.configure(pre_enqueue=[plugin], hints=ev.hint_map(
        {NAME: plugin, "NodeResourcesFit": object()}))
    queue.add(pod("p"))
    assert queue.where("ns/p") == Location.GATED
    assert queue.activate_gated(NAME) == 0  # still evicting: stays gated
    assert queue.where("ns/p") == Location.GATED
    queue.add(pod("other"))  # other pods are not held
    assert queue.where("ns/other") == Location.ACTIVE
    running.clear()
    assert queue.activate_gated("SchedulingGates") == 0  # another plugin's gate: no
    assert queue.activate_gated(NAME) == 1
    assert queue.where("ns/p") == Location.ACTIVE


def test_the_queue_runs_the_one_pre_enqueue_for_pods_it_holds_and_pods_it_does_not() -> None:
    """runPreEnqueuePlugins lives in the queue only: the engine asks `gating_plugin` about a
    pod it keeps out of the queue (a namespace the namespaceSelector leaves out), and gets
    the plugin that would gate it if queued, with the queue left as it was. Plugins from
    the production builder's default policy, in their order (SchedulingGates first)."""
    from polsched.api import load_policy
    from polsched.plugins import CATALOG
    from polsched.scheduler.pipelines import build_pipeline

    pipeline = build_pipeline(load_policy({
        "apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
        "metadata": {"name": "s"}, "spec": {}}, CATALOG))
    queue = SchedulingQueue(clock=Clock())
    queue.configure(pipeline.pre_enqueue_plugins, pipeline.queueing_hints())
    held = pod("held", schedulingGates=[{"name": "example.com/hold"}])
    assert queue.gating_plugin(held) == "SchedulingGates"
    assert queue.gating_plugin(pod("free")) == ""
    assert len(queue) == 0 and queue.sizes() == (0, 0, 0, 0)  # asking queues nothing
    # The same answer gates the pod once it is queued, and names the rejecting plugin.
    queue.add(held)
    assert queue.where("ns/held") == Location.GATED
    qp = queue.get("ns/held")
    assert qp is not None and qp.gating_plugin == "SchedulingGates"
    assert "SchedulingGates" in qp.rejected_by
    # Without the plugin in the policy, nothing gates it, in or out of the queue.
    bare = build_pipeline(load_policy({
        "apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
        "metadata": {"name": "s"}, "spec": {"disabledPlugins": ["SchedulingGates"]}},
        CATALOG))
    queue.configure(bare.pre_enqueue_plugins, bare.queueing_hints())
    assert queue.gating_plugin(held) == ""
