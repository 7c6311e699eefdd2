"""The state of one SchedulingQueue and the moves every part of it makes: where an entity
waits (activeQ, backoffQ, the unschedulable pool, in flight, held for its pod group),
PreEnqueue, the queueing hints, and the moves between the queues. The pod-group parts
(pod_groups.py) and the queue's own surface (scheduling_queue.py) build on it."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar, cast

from polsched.framework import events as ev
from polsched.framework.interfaces import PreEnqueuePlugin
from polsched.framework.types import PodInfo
from polsched.objects import Json
from polsched.scheduler.queue.active import ActiveQueue
from polsched.scheduler.queue.backoff import (
    BACKOFF_ORDERING_WINDOW,
    DEFAULT_POD_INITIAL_BACKOFF,
    DEFAULT_POD_MAX_BACKOFF,
    BackoffQueue,
)
from polsched.scheduler.queue.journal import EventJournal, InFlightEvent
from polsched.scheduler.queue.types import (
    Entry,
    HintMap,
    Location,
    QueuedPod,
    QueuedPodGroup,
    Strategy,
)
from polsched.scheduler.queue.unschedulable import (
    DEFAULT_POD_MAX_IN_UNSCHEDULABLE_PODS_DURATION,
    UnschedulablePods,
)

_Method = TypeVar("_Method", bound=Callable[..., Any])


def changes_sizes(method: _Method) -> _Method:
    """A method that may change the queue's sizes: `on_sizes` is called after it, so the
    queue reports scheduler_pending_pods itself instead of each of its callers."""

    @functools.wraps(method)
    def changing(self: QueueCore, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        finally:
            if self.on_sizes is not None:
                self.on_sizes()

    return cast(_Method, changing)


class QueueCore:
    """The queue's state and the moves every part of it makes; see the module docstring."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        initial_backoff: float = DEFAULT_POD_INITIAL_BACKOFF,
        max_backoff: float = DEFAULT_POD_MAX_BACKOFF,
        max_in_unschedulable: float = DEFAULT_POD_MAX_IN_UNSCHEDULABLE_PODS_DURATION,
        pop_from_backoff: bool = True,
        backoff_window: float = BACKOFF_ORDERING_WINDOW,
        journal: EventJournal | None = None,
    ) -> None:
        self._clock = clock
        # Shared with the engine's other queues (EventJournal): move(journaled=True) then
        # keeps nothing itself.
        self._journal = journal
        if journal is not None:
            journal.readers.append(self)
        # Upstream truncates backoff times to windows of the wall clock (time.Truncate),
        # and flushes backoffQ on the wall clock's second boundaries: with the monotonic
        # clock, the windows are aligned the same way (time.time() - time.monotonic() is
        # where monotonic time 0 falls on the wall clock). Another clock (tests): none.
        self._active = ActiveQueue()
        self._backoff = BackoffQueue(
            initial_backoff, max_backoff, backoff_window if pop_from_backoff else 0.0,
            _monotonic_to_wall if clock is time.monotonic else _no_offset)
        self._unschedulable = UnschedulablePods()
        # The pool's entries, read-only for the engine: a queue with no unschedulable pod
        # has nothing for a journaled move() to do, and the engine skips the call (every
        # bind's event visits every policy's queue: 250 000 calls with 50 policies).
        self.unschedulable_pods: Mapping[str, Entry] = self._unschedulable.entries
        self._max_in_unschedulable = max_in_unschedulable
        self._pop_from_backoff = pop_from_backoff
        self._seq = 0
        # In flight, by uid; and the uid in flight per key.
        self._in_flight: dict[str, QueuedPod] = {}
        self._in_flight_keys: dict[str, str] = {}
        # Events seen while pods were in flight (inFlightEvents), oldest first.
        self._events: list[InFlightEvent] = []
        self._event_n = 0
        self.scheduling_cycle = 0
        self._next_leftover_flush = 0.0
        self._pre_enqueue: tuple[PreEnqueuePlugin, ...] = ()
        # None until configured: every plugin is registered for every event.
        self._hints: HintMap | None = None
        # event -> the plugins that registered a matching event (memo, per configuration)
        self._interest: dict[ev.ClusterEvent, frozenset[str]] = {}
        # Called whenever a pod may have become poppable: the engine's scheduling loop
        # gives the policy a turn (a queue found empty is polled again at next_due()).
        self.on_wake: Callable[[], None] | None = None
        # Called after each method that may change sizes() or group_sizes() (the owner
        # sets its pending-pods gauges from them, when they changed).
        self.on_sizes: Callable[[], None] | None = None
        # The pod group a pod belongs to ("namespace/name"), None for a plain pod (set by
        # configure when the pipeline runs GangScheduling on a cluster serving PodGroups).
        self._group_of: Callable[[PodInfo], str | None] | None = None
        # The PodGroup object of a group key (None: not observed yet); None: every group
        # exists, with its first member's priority (tests without a cache).
        self._pod_group: Callable[[str], Json | None] | None = None
        # Groups queued in activeQ, backoffQ or the unschedulable pool, by group key; and
        # the group of each of their members, by pod key.
        self._groups: dict[str, QueuedPodGroup] = {}
        self._member_of: dict[str, QueuedPodGroup] = {}
        # The groups in their pod-group cycle, and the members that arrived or came back
        # meanwhile (pendingPodGroupPods), merged back by group_done.
        self._groups_in_flight: dict[str, QueuedPodGroup] = {}
        self._group_pending: dict[str, dict[str, QueuedPod]] = {}
        # Members whose PodGroup is not observed yet (incompletePodGroupPods).
        self._incomplete: dict[str, dict[str, QueuedPod]] = {}
        # The group pop_nowait popped last, until pop_group claims it.
        self._popped_group: QueuedPodGroup | None = None

    # -- where an entity waits --------------------------------------------------------------
    def __contains__(self, key: object) -> bool:
        """A pod of that key waits in activeQ, backoffQ or the unschedulable pool (alone or
        in its queued group), or waits for its group's cycle or PodGroup."""
        if (key in self._active.entries or key in self._backoff.entries
                or key in self._unschedulable.entries):
            return True
        if not isinstance(key, str):
            return False
        return key in self._member_of or self._held(key) is not None

    def _held(self, key: str) -> tuple[Location, QueuedPod] | None:
        """A member waiting for its group's cycle to end, or for its PodGroup."""
        for loc, area in ((Location.PENDING, self._group_pending),
                          (Location.INCOMPLETE, self._incomplete)):
            for held in area.values():
                qp = held.get(key)
                if qp is not None:
                    return loc, qp
        return None

    def _location(self, entry: Entry) -> Location | None:
        k = entry._qkey
        if k in self._unschedulable.entries:
            return Location.GATED if entry.gated else Location.UNSCHEDULABLE
        if k in self._active.entries:
            return Location.ACTIVE
        if k in self._backoff.entries:
            return Location.BACKOFF
        return None

    def oldest_in_flight(self) -> int | None:
        """The event number at the earliest pop of the pods in flight (None: none)."""
        if not self._in_flight:
            return None
        return min(p._events_from for p in self._in_flight.values())

    # -- backoff --------------------------------------------------------------------------
    def backoff_duration(self, qp: Entry) -> float:
        """backoff_queue.go calculateBackoffDuration (BackoffQueue.duration)."""
        return self._backoff.duration(qp)

    def backoff_expiry(self, qp: Entry) -> float:
        """When the entity stops backing off (BackoffQueue.expiry)."""
        return self._backoff.expiry(qp)

    # -- PreEnqueue ---------------------------------------------------------------------
    def gating_plugin(self, pod: PodInfo, first: str = "") -> str:
        """runPreEnqueuePlugins (scheduling_queue.go), the queue's one PreEnqueue runner:
        the name of the first plugin that does not let `pod` in ("" when all do), trying
        `first` (the plugin that gated it last time) before the others. The engine asks it
        too, for a pod it keeps out of the queue (a namespace the policy's
        namespaceSelector does not select), to leave a gated pod without a warning."""
        plugins = self._pre_enqueue
        if first:
            plugins = (*(p for p in plugins if p.name == first),
                       *(p for p in plugins if p.name != first))
        for p in plugins:
            if not p.pre_enqueue(pod).ok:
                return p.name
        return ""

    def _run_pre_enqueue(self, qp: Entry) -> None:
        """PreEnqueue for a queued pod: the first plugin that does not succeed gates it
        (and counts as a rejecting plugin). For a group, every member runs it and the
        group is gated when any member is (runPreEnqueuePlugins: the last gated member's
        plugin)."""
        if isinstance(qp, QueuedPodGroup):
            gate = ""
            for m in qp.members:
                self._run_pre_enqueue(m)
                gate = m.gating_plugin or gate
            qp.gating_plugin = gate
            return
        gate = qp.gating_plugin = self.gating_plugin(qp.pod, qp.gating_plugin)
        if gate:
            qp.rejected_by = qp.rejected_by | {gate}

    # -- moving between the queues --------------------------------------------------------
    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def _park(self, qp: Entry) -> None:
        """Into the unschedulable pool (gated or not)."""
        self._unschedulable.park(qp, self._hints)

    def _take(self, qp: Entry) -> Location | None:
        """Take a waiting entity out of its queue (deleteFromAnyQueue); where it was."""
        loc = self._location(qp)
        if loc is Location.ACTIVE:
            self._active.remove(qp)
        elif loc is Location.BACKOFF:
            self._backoff.remove(qp)
        elif loc is not None:
            self._unschedulable.unpark(qp._qkey)
        qp._seq = self._next_seq()
        return loc

    def _move_to_active(self, qp: Entry, from_backoff: bool = False) -> bool:
        """moveToActiveQ: PreEnqueue first (not again for a pod leaving backoffQ, which ran
        it on entering); a gated pod goes to the unschedulable pool instead."""
        if not from_backoff:
            self._run_pre_enqueue(qp)
        if qp.gated:
            self._park(qp)
            return False
        self._unschedulable.unpark(qp._qkey)
        qp._seq = self._next_seq()
        self._active.push(qp)
        self._wake()
        return True

    def _move_to_backoff(self, qp: Entry) -> bool:
        """moveToBackoffQ: with PopFromBackoffQ, PreEnqueue runs on entering backoffQ."""
        if self._pop_from_backoff:
            self._run_pre_enqueue(qp)
            if qp.gated:
                self._park(qp)
                return False
        self._unschedulable.unpark(qp._qkey)
        qp._seq = self._next_seq()
        self._backoff.push(qp)
        self._wake()
        return True

    def _requeue(self, qp: Entry, strategy: Strategy, now: float) -> Location:
        """requeueEntityWithQueueingStrategy; returns where the pod went."""
        if strategy is Strategy.SKIP:
            self._park(qp)
            return Location.UNSCHEDULABLE
        if strategy is Strategy.AFTER_BACKOFF and self._backoff.backing_off(qp, now):
            return Location.BACKOFF if self._move_to_backoff(qp) else Location.UNSCHEDULABLE
        return Location.ACTIVE if self._move_to_active(qp) else Location.UNSCHEDULABLE

    def _wake(self) -> None:
        if self.on_wake is not None:
            self.on_wake()

    # -- queueing hints -------------------------------------------------------------------
    def worth_requeuing(self, qp: Entry, event: ev.ClusterEvent, old: Any,
                        new: Any) -> Strategy:
        """isPodWorthRequeuing: Queue from one of the pod's rejecting plugins for this
        event; a pod with no rejecting plugin (an error, or only extenders rejected it)
        moves on any event. A group moves when any member would
        (isEntityWorthRequeuing)."""
        if isinstance(qp, QueuedPodGroup):
            for m in qp.members:
                if self.worth_requeuing(m, event, old, new) is not Strategy.SKIP:
                    return Strategy.AFTER_BACKOFF
            return Strategy.SKIP
        rejected = qp.rejected_by
        if not rejected:
            return Strategy.AFTER_BACKOFF
        if event.is_wildcard:
            if isinstance(new, PodInfo) and new.uid != qp.uid:
                return Strategy.SKIP  # a wildcard event for another pod
            return Strategy.AFTER_BACKOFF
        for plugin in rejected:
            registered = self._registered(plugin)
            if registered is None:
                # Not a plugin of this pipeline (any more): do not strand the pod.
                return Strategy.AFTER_BACKOFF
            for eh in registered:
                if not eh.event.matches(event):
                    continue
                if ev.run_hint(plugin, eh.hint, qp.pod, old, new) is ev.QUEUE:
                    return Strategy.AFTER_BACKOFF
        return Strategy.SKIP

    def _registered(self, plugin: str) -> Sequence[ev.ClusterEventWithHint] | None:
        if self._hints is None:
            return ev.ALL_EVENTS
        return self._hints.get(plugin)

    def _interested(self, event: ev.ClusterEvent) -> frozenset[str] | None:
        """The plugins that registered an event matching `event`; None: every plugin
        (unconfigured, or a wildcard event)."""
        if event.is_wildcard or self._hints is None:
            return None
        got = self._interest.get(event)
        if got is None:
            got = frozenset(p for p, registered in self._hints.items()
                            if any(eh.event.matches(event) for eh in registered))
            self._interest[event] = got
        return got

    def _updated_parked(self, entry: Entry, qp: QueuedPod, pod: PodInfo,
                        now: float) -> None:
        """A pod of a parked entity (itself, or a member of a parked group) was updated:
        its update events may move the entity (Update: isEntityWorthRequeuing)."""
        prev = qp.pod
        qp.pod = pod
        if not pod_updated(prev.raw, pod.raw):
            return  # status only (our own condition patch): nothing new
        for e in ev.pod_update_events(pod, prev, target=True):
            strategy = self.worth_requeuing(entry, e, prev, pod)
            if strategy is Strategy.SKIP:
                continue
            self._unschedulable.unpark(entry._qkey)
            if self._requeue(entry, strategy, now) is not Location.UNSCHEDULABLE:
                break

    # -- the pods in flight ----------------------------------------------------------------
    def _record(self, event: ev.ClusterEvent, old: Any, new: Any, uid: str = "") -> None:
        """Keep the event for the pods in flight (addEventIfAnyInFlight)."""
        if not self._in_flight:
            return
        self._event_n = self._journal.next() if self._journal is not None \
            else self._event_n + 1
        self._events.append(InFlightEvent(self._event_n, event, old, new, uid))

    def _fly(self, qp: QueuedPod, events_from: int) -> None:
        qp._gone = False
        qp._events_from = events_from
        self._in_flight[qp.uid] = qp
        self._in_flight_keys[qp.key] = qp.uid

    def _finish(self, qp: QueuedPod) -> bool:
        """Leave flight (Done); False when the pod is gone meanwhile (do not requeue)."""
        self._land(qp)
        if qp._gone:
            return False
        return self._in_flight_keys.get(qp.key) is None and qp.key not in self

    def _land(self, qp: QueuedPod) -> None:
        if self._in_flight.pop(qp.uid, None) is not None \
                and self._in_flight_keys.get(qp.key) == qp.uid:
            del self._in_flight_keys[qp.key]
        if not self._in_flight:
            self._events.clear()
        elif self._events and self._events[0].n <= qp._events_from:
            oldest = min(p._events_from for p in self._in_flight.values())
            i = 0
            while i < len(self._events) and self._events[i].n <= oldest:
                i += 1
            del self._events[:i]

    def _in_flight_strategy(self, qp: QueuedPod) -> Strategy:
        """determineSchedulingHintForInFlightPod."""
        if not qp.rejected_by:
            return Strategy.AFTER_BACKOFF
        for e in self._events:
            if e.n <= qp._events_from or (e.uid and e.uid != qp.uid):
                continue
            if self.worth_requeuing(qp, e.event, e.old, e.new) is not Strategy.SKIP:
                return Strategy.AFTER_BACKOFF
        if self._journal is not None:
            for e in self._journal.since(qp._events_from):
                interested = self._interested(e.event)
                if interested is not None and not interested:
                    continue  # not kept by move() when no plugin of ours cares
                if self.worth_requeuing(qp, e.event, e.old, e.new) is not Strategy.SKIP:
                    return Strategy.AFTER_BACKOFF
        return Strategy.SKIP


def _monotonic_to_wall() -> float:
    return time.time() - time.monotonic()


def _no_offset() -> float:
    return 0.0


_IGNORED_META = ("resourceVersion", "generation", "managedFields", "finalizers")


def pod_updated(old: Json, new: Json) -> bool:
    """isPodUpdated (scheduling_queue.go before queueing hints took over): a change other
    than status, resourceVersion, generation, managedFields or finalizers. Our own
    PodScheduled condition patch is not one, so it never retries the pod it reports on."""
    if old.get("spec") != new.get("spec"):
        return True
    # The one status change a plugin waits for (DynamicResources' claims from templates,
    # UpdatePodGeneratedResourceClaim).
    if ((old.get("status") or {}).get("resourceClaimStatuses")
            != (new.get("status") or {}).get("resourceClaimStatuses")):
        return True
    om, nm = old.get("metadata") or {}, new.get("metadata") or {}
    keys = (om.keys() | nm.keys()).difference(_IGNORED_META)
    return any(om.get(k) != nm.get(k) for k in keys)
