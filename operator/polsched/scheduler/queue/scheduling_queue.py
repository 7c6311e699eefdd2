"""SchedulingQueue: the pending pods of one scheduler, as kube-scheduler's PriorityQueue
(pkg/scheduler/backend/queue/scheduling_queue.go) with queueing hints, PreEnqueue and
PopFromBackoffQ.

Where a pod waits (at most one place, or in flight):
- activeQ: ready to schedule; highest priority first, then the earliest time it last
  entered the queue (PrioritySort on QueuedPodInfo.Timestamp);
- backoffQ: failed recently; leaves for activeQ when its backoff expires (1 s after the
  first failure, doubling up to 10 s, then rounded up to the next whole-second ordering
  window, KEP-5142). When activeQ is empty, a pod that was rejected by
  plugins (not one that failed with an error) is popped from backoffQ at once
  (PopFromBackoffQ);
- unschedulable: rejected by plugins, or gated by a PreEnqueue plugin. It moves back only
  on a cluster event for which one of the plugins that rejected it (its gating plugin for
  a gated pod) gives the hint Queue; a pod with no recorded plugin moves on any event. Every
  pod is flushed back after 5 minutes there (podMaxInUnschedulablePodsDuration), gated ones
  through PreEnqueue again.
Events that happen while a pod is in flight are kept and checked against its rejecting
plugins when it fails (determineSchedulingHintForInFlightPod), so no wake-up is lost.

A pod is identified by "namespace/name" in the queues and by uid in flight: a pod deleted
and recreated under the same name while its predecessor is in flight (a StatefulSet pod)
is a new pod and is queued at once.

Single-threaded asyncio: no locks, nothing awaits. The engine's scheduling loop pops with
pop_nowait(), is told by on_wake when a pod may have become poppable, and asks next_due()
when a queue found empty has one again. The clock is injectable for tests.

The package follows upstream's files: types.py (QueuedPodInfo, QueuedPodGroupInfo),
active.py, backoff.py, unschedulable.py, journal.py (inFlightEvents), core.py (the state
and the moves between the queues, PreEnqueue, the hints), pod_groups.py (the pod-group
parts), and this module: the SchedulingQueue the engine uses.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from polsched.framework import events as ev
from polsched.framework.interfaces import PreEnqueuePlugin
from polsched.framework.types import PodInfo
from polsched.objects import Json
from polsched.scheduler.queue.core import changes_sizes, pod_updated
from polsched.scheduler.queue.pod_groups import PodGroupQueue
from polsched.scheduler.queue.types import (
    GROUP_PREFIX,
    Entry,
    HintMap,
    Location,
    QueuedPod,
    QueuedPodGroup,
    Strategy,
    pod_entry,
    pods_of,
)
from polsched.scheduler.queue.unschedulable import UNSCHEDULABLE_FLUSH_PERIOD


class SchedulingQueue(PodGroupQueue):
    """The pending pods of one scheduler (PriorityQueue); see the module docstring."""

    # -- the policy's plugins -------------------------------------------------------------
    def configure(self, pre_enqueue: Sequence[PreEnqueuePlugin] = (),
                  hints: HintMap | None = None,
                  group_of: Callable[[PodInfo], str | None] | None = None,
                  pod_group: Callable[[str], Json | None] | None = None) -> None:
        """The pipeline's PreEnqueue plugins and queueing hints (on every apply), how to
        tell a pod group's members (None: every pod is scheduled alone) and how to find a
        group's PodGroup object by its key (None: every group counts as observed)."""
        self._group_of = group_of
        self._pod_group = pod_group
        self._pre_enqueue = tuple(pre_enqueue)
        self._hints = dict(hints) if hints is not None else None
        self._interest.clear()
        self._unschedulable.reindex(self._hints)
        if group_of is None:
            self._dissolve_groups()
        else:
            self._regroup()

    # -- introspection ----------------------------------------------------------------
    def __len__(self) -> int:
        """How many pods wait in activeQ, backoffQ and the unschedulable pool (a group
        counts its members)."""
        return sum(self.sizes())

    def where(self, key: str) -> Location | None:
        """Where the pod of that key waits (a group member: where its group waits); None:
        not queued."""
        g = self._member_of.get(key)
        if g is not None:
            return self._location(g)
        qp = self._unschedulable.entries.get(key)
        if qp is not None:
            return Location.GATED if qp.gated else Location.UNSCHEDULABLE
        for name, d in ((Location.ACTIVE, self._active.entries),
                        (Location.BACKOFF, self._backoff.entries),
                        (Location.IN_FLIGHT, self._in_flight_keys)):
            if key in d:
                return name
        held = self._held(key)
        return held[0] if held is not None else None

    def get(self, key: str) -> QueuedPod | None:
        """The queued (or in-flight) pod of that key."""
        g = self._member_of.get(key)
        if g is not None:
            return g.member(key)
        for d in (self._active.entries, self._backoff.entries,
                  self._unschedulable.entries):
            qp = d.get(key)
            if isinstance(qp, QueuedPod):
                return qp
        uid = self._in_flight_keys.get(key)
        if uid is not None:
            return self._in_flight.get(uid)
        held = self._held(key)
        return held[1] if held is not None else None

    def gated_by(self, key: str) -> str:
        """The PreEnqueue plugin keeping the pod of that key out of activeQ: a member's is
        its group's (the group is gated when any member is); "" when not gated."""
        entry: Entry | None = self._member_of.get(key) or self.get(key)
        return entry.gating_plugin if entry is not None else ""

    def group(self, key: str) -> QueuedPodGroup | None:
        """The pod group entity of that group key ("namespace/name"), queued or in its
        cycle."""
        return self._groups.get(key) or self._groups_in_flight.get(key)

    def sizes(self) -> tuple[int, int, int, int]:
        """How many pods wait in activeQ, backoffQ, unschedulable and gated, a group
        counting its members as upstream's QueuedEntitiesRecorder does (O(1), for the
        scheduler_pending_pods gauge)."""
        return (self._active.size(), self._backoff.size(), *self._unschedulable.sizes())

    def group_sizes(self) -> tuple[int, int]:
        """How many members wait for their group's cycle to end (pending) and for their
        PodGroup (incomplete): scheduler_pending_pods{queue="pending"|"incomplete"}."""
        return (sum(len(h) for h in self._group_pending.values()),
                sum(len(h) for h in self._incomplete.values()))

    def keys(self) -> set[str]:
        """Every pod waiting or in flight."""
        keys = {k for d in (self._active.entries, self._backoff.entries,
                            self._unschedulable.entries) for k in d
                if not k.startswith(GROUP_PREFIX)}
        keys.update(self._member_of, self._in_flight_keys)
        for area in (self._group_pending, self._incomplete):
            for held in area.values():
                keys.update(held)
        return keys

    def in_flight_events(self) -> int:
        return len(self._events)

    # -- what the cache's events do -------------------------------------------------------
    @changes_sizes
    def add(self, pod: PodInfo) -> None:
        """A pending pod was added or updated (Add / Update)."""
        key = pod.key
        now = self._clock()
        uid = self._in_flight_keys.get(key)
        if uid is not None:
            flying = self._in_flight[uid]
            if uid == pod.uid:
                # Kept for when it fails: the update may be what it needed.
                prev = flying.pod
                if pod_updated(prev.raw, pod.raw):
                    for e in ev.pod_update_events(pod, prev, target=True):
                        self._record(e, prev, pod, uid)
                flying.pod = pod
                return
            # Its predecessor is in flight: that one is gone, this one is new.
            flying._gone = True
        group = self._group_of(pod) if self._group_of is not None else None
        if group is not None:
            self._add_group_pod(group, pod, now)
            return
        for d in (self._active.entries, self._backoff.entries):
            qp = pod_entry(d, key)
            if qp is None:
                continue
            if qp.uid != pod.uid:
                del d[key]
                break
            prev_priority = qp.pod.priority
            qp.pod = pod
            if d is self._active.entries and prev_priority != pod.priority:
                self._move_to_active(qp, from_backoff=True)  # the old heap entry goes stale
            return
        qp = pod_entry(self._unschedulable.entries, key)
        if qp is not None:
            if qp.uid != pod.uid:
                self._unschedulable.unpark(key)
            else:
                self._updated_parked(qp, qp, pod, now)
                return
        self._move_to_active(QueuedPod(pod, timestamp=now))

    @changes_sizes
    def delete(self, key: str, uid: str | None = None) -> None:
        """The pod was deleted, bound (by us or elsewhere) or finished: it leaves. With
        `uid`, only that pod (not a successor under the same name)."""
        for area in (self._group_pending, self._incomplete):
            for held in area.values():
                qp = held.get(key)
                if qp is not None and (uid is None or qp.uid == uid):
                    del held[key]
        g = self._member_of.get(key)
        if g is not None:
            member = g.member(key)
            if member is not None and (uid is None or member.uid == uid):
                self._remove_member(g, key)
        for d in (self._active.entries, self._backoff.entries):
            qp = pod_entry(d, key)
            if qp is not None and (uid is None or qp.uid == uid):
                del d[key]
        qp = pod_entry(self._unschedulable.entries, key)
        if qp is not None and (uid is None or qp.uid == uid):
            self._unschedulable.unpark(key)
        flying_uid = self._in_flight_keys.get(key)
        if flying_uid is not None and (uid is None or flying_uid == uid):
            self._in_flight[flying_uid]._gone = True

    @changes_sizes
    def move(self, event: ev.ClusterEvent, old: Any = None, new: Any = None,
             pre_check: Callable[[PodInfo], bool] | None = None,
             journaled: bool = False) -> int:
        """MoveAllToActiveOrBackoffQueue: the unschedulable pods this event may help go back
        (to backoffQ while backing off). Returns how many moved. `journaled`: the event is
        in the shared EventJournal already, so it is not kept here for the pods in flight."""
        if not self._unschedulable.entries:
            if journaled:
                return 0
            # Nothing to move: only keep the event for the pods in flight, if a plugin cares.
            # The engine calls this for every cluster event on every policy's queue, so
            # with many policies this is the common case (issue 15, many-policies).
            if self._in_flight:
                interested = self._interested(event)
                if interested is None or interested:
                    self._record(event, old, new)
            return 0
        interested = self._interested(event)
        if interested is not None and not interested:
            return 0  # no plugin cares (isEventOfInterest): not even kept for in-flight pods
        now = self._clock()
        moved = 0
        if interested is None:
            candidates = list(self._unschedulable.entries.values())
        else:
            candidates = self._unschedulable.interested(interested)
        for qp in candidates:
            if pre_check is not None and not any(
                    pre_check(m.pod) for m in pods_of(qp)):
                continue
            if qp.gated and not event.is_wildcard and not any(
                    eh.event.matches(event)
                    for eh in self._registered(qp.gating_plugin) or ()):
                continue
            strategy = self.worth_requeuing(qp, event, old, new)
            if strategy is Strategy.SKIP:
                continue
            self._unschedulable.unpark(qp._qkey)
            if self._requeue(qp, strategy, now) is not Location.UNSCHEDULABLE:
                moved += 1
        if not journaled:
            self._record(event, old, new)
        return moved

    # -- what the scheduling loop does ----------------------------------------------------
    @changes_sizes
    def flush(self) -> None:
        """Backoff-completed pods to activeQ; pods unschedulable for longer than 5 minutes
        back (flushBackoffQCompleted, flushUnschedulableEntitiesLeftover)."""
        now = self._clock()
        for qp in self._backoff.pop_completed(now):
            self._move_to_active(qp, from_backoff=self._pop_from_backoff)
        if now < self._next_leftover_flush:
            return
        self._next_leftover_flush = now + UNSCHEDULABLE_FLUSH_PERIOD
        limit = now - self._max_in_unschedulable
        stale = [qp for qp in self._unschedulable.entries.values()
                 if max(qp.timestamp, qp.flush_timestamp) <= limit]
        for qp in stale:
            qp.flush_timestamp = now
            event = ev.EVENT_UNSCHEDULABLE_TIMEOUT
            strategy = self.worth_requeuing(qp, event, None, None)
            self._unschedulable.unpark(qp._qkey)
            self._requeue(qp, strategy, now)

    @changes_sizes
    def pop_nowait(self) -> QueuedPod | None:
        """The next entity to schedule, now in flight; None when nothing can go now. A pod
        group is popped as one unit: every queued member is in flight and the first in
        upstream's order is returned; pop_group then gives the group."""
        self.flush()
        qp = self._active.pop()
        if qp is None and self._pop_from_backoff and self._backoff.entries:
            qp = self._backoff.pop_rejected()
            if qp is not None:
                qp._seq = self._next_seq()  # its heap entry goes stale
        if qp is None:
            return None
        self.scheduling_cycle += 1
        events_from = self._journal.n if self._journal is not None else self._event_n
        qp.attempts += 1
        if isinstance(qp, QueuedPodGroup):
            # IncAttempts of the group and of every member; all in flight.
            self._groups.pop(qp.key, None)
            self._groups_in_flight[qp.key] = qp
            for m in qp.members:
                m.attempts += 1
                self._fly(m, events_from)
                self._member_of.pop(m.key, None)
            qp.sort()
            self._popped_group = qp
            return qp.members[0]
        self._fly(qp, events_from)
        return qp

    @changes_sizes
    def activate(self, keys: Iterable[str]) -> int:
        """Activate: these pods go to activeQ from backoffQ or the unschedulable pool
        (PreEnqueue runs again for a gated one); a group member activates its whole group.
        Returns how many moved."""
        moved = 0
        for key in keys:
            g = self._member_of.get(key)
            entry: Entry | None = g
            if entry is None:
                entry = (pod_entry(self._unschedulable.entries, key)
                         or pod_entry(self._backoff.entries, key))
            if entry is None:
                continue
            loc = self._location(entry)
            if loc in (Location.UNSCHEDULABLE, Location.GATED):
                self._unschedulable.unpark(entry._qkey)
                if self._move_to_active(entry):
                    moved += 1
            elif loc is Location.BACKOFF:
                self._backoff.remove(entry)
                if self._move_to_active(entry, from_backoff=True):
                    moved += 1
        return moved

    def next_due(self) -> float | None:
        """Seconds until a backoff expires or an unschedulable pod is flushed."""
        due = self._backoff.next_expiry()
        if self._unschedulable.entries:
            flush_at = self._next_leftover_flush
            due = flush_at if due is None else min(due, flush_at)
        if due is None:
            return None
        return max(due - self._clock(), 0.001)

    @changes_sizes
    def done(self, qp: QueuedPod) -> None:
        """The pod's cycle ended with a bind, or it needs nothing more (Done)."""
        self._land(qp)

    @changes_sizes
    def add_unschedulable(self, qp: QueuedPod, rejected_by: Iterable[str] = ()) -> None:
        """Rejected by plugins, or failed (AddUnschedulablePodIfNotPresent): no rejecting
        plugin means an error (counts a consecutive error; retried after backoff on any
        event). A pod group member goes back into its group (addUnschedulablePodGroupMember:
        while the group is in its cycle, to pendingPodGroupPods), which group_done requeues
        as a whole."""
        qp.rejected_by = frozenset(rejected_by)
        member = self._group_of is not None and self._group_of(qp.pod) is not None
        strategy = Strategy.SKIP if member else self._in_flight_strategy(qp)
        if not self._finish(qp):
            return
        now = self._clock()
        if qp.rejected_by:
            qp.unschedulable_count += 1
            qp.consecutive_errors = 0
        else:
            qp.consecutive_errors += 1
        qp.timestamp = now
        qp.flush_timestamp = 0.0
        if member:
            self._add_member(qp, now)
            return
        self._requeue(qp, strategy, now)

    @changes_sizes
    def activate_gated(self, plugin: str) -> int:
        """Activate: the pods `plugin`'s PreEnqueue keeps out run their PreEnqueue again,
        and go to activeQ when it lets them in (upstream's Handle.Activate, which async
        preemption calls once a preemptor's victims are evicted). Returns how many moved."""
        if not self._unschedulable.gated:
            return 0
        moved = 0
        for key in self._unschedulable.gated_keys(plugin):
            qp = self._unschedulable.entries.get(key)
            if qp is None or qp.gating_plugin != plugin:
                continue
            self._unschedulable.unpark(key)
            if self._move_to_active(qp):
                moved += 1
        return moved

    @changes_sizes
    def add_backoff(self, qp: QueuedPod) -> None:
        """The cycle or the binding failed with an error: retry after backoff."""
        self.add_unschedulable(qp, ())

    @changes_sizes
    def restore(self, qp: QueuedPod) -> None:
        """Put a popped pod back as it was, uncounted (the scheduler is paused). A group
        member waits for its group (group_done with GroupOutcome.RESTORED)."""
        if not self._finish(qp):
            return
        qp.attempts -= 1
        if self._group_of is not None and self._group_of(qp.pod) is not None:
            self._add_member(qp, self._clock())
            return
        self._move_to_active(qp, from_backoff=True)

    @changes_sizes
    def close(self) -> None:
        """The policy is gone: its queue no longer takes the journal's events."""
        self.on_wake = None
        if self._journal is not None and self in self._journal.readers:
            self._journal.readers.remove(self)
