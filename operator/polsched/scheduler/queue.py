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
"""

from __future__ import annotations

import bisect
import enum
import heapq
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from polsched.framework import events as ev
from polsched.framework.interfaces import PreEnqueuePlugin
from polsched.framework.types import PodInfo
from polsched.objects import Json

DEFAULT_POD_INITIAL_BACKOFF = 1.0
DEFAULT_POD_MAX_BACKOFF = 10.0
DEFAULT_POD_MAX_IN_UNSCHEDULABLE_PODS_DURATION = 300.0
# backoff_queue.go backoffQOrderingWindowDuration (KEP-5142, with PopFromBackoffQ): backoff
# ends on whole-second windows.
BACKOFF_ORDERING_WINDOW = 1.0
# How often the unschedulable pool is checked for pods that waited too long (Run:
# flushUnschedulableEntitiesLeftover every 30 s).
UNSCHEDULABLE_FLUSH_PERIOD = 30.0

# Plugin label -> the events it registered, with hints (framework.events.hint_map).
HintMap = Mapping[str, Sequence[ev.ClusterEventWithHint]]


class Location(enum.StrEnum):
    """Where a pod waits in the queue (SchedulingQueue.where)."""

    ACTIVE = "active"
    BACKOFF = "backoff"
    UNSCHEDULABLE = "unschedulable"
    # Among the unschedulable pods, kept out by a PreEnqueue plugin (SchedulingGates).
    GATED = "gated"
    # Popped: its attempt is under way.
    IN_FLIGHT = "in-flight"


class Strategy(enum.IntEnum):
    """queueingStrategy: what an event does for an unschedulable pod."""

    SKIP = 0
    AFTER_BACKOFF = 1
    IMMEDIATELY = 2


@dataclass(eq=False)
class QueuedPod:
    """framework.QueuedPodInfo: a pod and its scheduling history."""

    pod: PodInfo
    # When it last entered the queue (or failed); orders activeQ, backoff counts from it.
    timestamp: float
    attempts: int = 0
    unschedulable_count: int = 0
    consecutive_errors: int = 0
    # Plugins that rejected it in its last attempt (or gate it); empty after an error.
    rejected_by: frozenset[str] = frozenset()
    # The PreEnqueue plugin that keeps it out of activeQ ("" when not gated).
    gating_plugin: str = ""
    # When it was moved back by the 5-minute flush last.
    flush_timestamp: float = 0.0
    _seq: int = field(default=0, repr=False)
    # In flight: the in-flight event counter when it was popped.
    _events_from: int = field(default=0, repr=False)
    # In flight: deleted (or bound elsewhere) meanwhile; never requeued.
    _gone: bool = field(default=False, repr=False)
    # "namespace/name": the same for every version of the pod this entry holds.
    key: str = field(default="", init=False)
    # The unschedulable pool's index entries of this pod (SchedulingQueue._index_add).
    _indexed: tuple[str, ...] = field(default=(), repr=False)
    # Its pod group's key, once asked (spec.schedulingGroup is immutable); "" none.
    _group: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.key = self.pod.key

    @property
    def uid(self) -> str:
        return self.pod.uid

    @property
    def gated(self) -> bool:
        return bool(self.gating_plugin)


@dataclass(eq=False)
class QueuedPodGroup:
    """framework.QueuedPodGroupInfo: the members of one pod group popped together for
    one pod-group cycle, in upstream's order (PodGroupMemberPodsOrderingFunc: higher
    priority, then more attempts, then the earlier timestamp). Each member is an ordinary
    QueuedPod in flight: the cycle ends each one's attempt (done, add_unschedulable,
    add_backoff, restore) and then calls SchedulingQueue.group_done(key)."""

    key: str  # "namespace/podGroupName"
    members: list[QueuedPod]

    @property
    def namespace(self) -> str:
        return self.key.partition("/")[0]

    @property
    def name(self) -> str:
        return self.key.partition("/")[2]


@dataclass(frozen=True, slots=True)
class _InFlightEvent:
    n: int
    event: ev.ClusterEvent
    old: Any
    new: Any
    # A TargetPod update: only for the pod with this uid.
    uid: str = ""


class EventJournal:
    """The cluster events kept for pods in flight (inFlightEvents), shared by the queues
    of one engine. kube-scheduler has one queue for all its profiles, so an event is kept
    once; with a queue per policy, keeping it in each queue cost O(policies) per event
    (every bind's watch event, with 50 policies 8% of the operator's CPU: issue 15,
    many-policies). A queue numbers its own events (policy changes, updates of a pod in
    flight) from the same counter, and reads the journal's events after its pod's pop
    through its own plugins' interest, as if it had kept them itself."""

    TRIM_AT = 256

    def __init__(self) -> None:
        self.n = 0
        self._events: list[_InFlightEvent] = []
        self._queues: list[SchedulingQueue] = []
        self._trim_at = self.TRIM_AT

    def next(self) -> int:
        self.n += 1
        return self.n

    def append(self, event: ev.ClusterEvent, old: Any, new: Any) -> None:
        self.n += 1
        self._events.append(_InFlightEvent(self.n, event, old, new))
        if len(self._events) >= self._trim_at:
            self._trim()

    def since(self, n: int) -> list[_InFlightEvent]:
        """The events after number `n`, oldest first."""
        events = self._events
        return events[bisect.bisect_right(events, n, key=lambda e: e.n):]

    def __len__(self) -> int:
        return len(self._events)

    def _trim(self) -> None:
        """Forget the events that no pod in flight in any queue can still need; then
        trim again when the journal has doubled (amortised O(1) per event)."""
        froms = [n for n in (q.oldest_in_flight() for q in self._queues) if n is not None]
        if not froms:
            self._events.clear()
        else:
            del self._events[:bisect.bisect_right(self._events, min(froms),
                                                  key=lambda e: e.n)]
        self._trim_at = max(self.TRIM_AT, 2 * len(self._events))


class SchedulingQueue:
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
            journal._queues.append(self)
        self._backoff_window = backoff_window if pop_from_backoff else 0.0
        self._initial_backoff = initial_backoff
        self._max_backoff = max_backoff
        self._max_in_unschedulable = max_in_unschedulable
        self._pop_from_backoff = pop_from_backoff
        self._seq = 0
        # heap of (-priority, timestamp, seq, key); stale entries skipped on pop
        self._active_heap: list[tuple[int, float, int, str]] = []
        self._active: dict[str, QueuedPod] = {}
        # heap of (expiry, -priority, timestamp, seq, key)
        self._backoff_heap: list[tuple[float, int, float, int, str]] = []
        self._backoff: dict[str, QueuedPod] = {}
        self._unschedulable: dict[str, QueuedPod] = {}
        # The same dict, read-only for the engine: a queue with no unschedulable pod has
        # nothing for a journaled move() to do, and the engine skips the call (every
        # bind's event visits every policy's queue: 250 000 calls with 50 policies).
        self.unschedulable_pods: Mapping[str, QueuedPod] = self._unschedulable
        self._gated = 0
        # In flight, by uid; and the uid in flight per key.
        self._in_flight: dict[str, QueuedPod] = {}
        self._in_flight_keys: dict[str, str] = {}
        # Events seen while pods were in flight (inFlightEvents), oldest first.
        self._events: list[_InFlightEvent] = []
        self._event_n = 0
        self.scheduling_cycle = 0
        self._next_leftover_flush = 0.0
        self._pre_enqueue: tuple[PreEnqueuePlugin, ...] = ()
        # None until configured: every plugin is registered for every event.
        self._hints: HintMap | None = None
        # event -> the plugins that registered a matching event (memo, per configuration)
        self._interest: dict[ev.ClusterEvent, frozenset[str]] = {}
        # rejecting plugin (or "*") -> keys of the parked pods it rejected
        self._index: dict[str, set[str]] = {}
        # Called whenever a pod may have become poppable: the engine's scheduling loop
        # gives the policy a turn (a queue found empty is polled again at next_due()).
        self.on_wake: Callable[[], None] | None = None
        # The pod group a pod belongs to ("namespace/name"), None for a plain pod (set by
        # configure when the pipeline runs GangScheduling on a cluster serving PodGroups).
        self._group_of: Callable[[PodInfo], str | None] | None = None
        # The groups in their pod-group cycle, and the members that arrived meanwhile
        # (pendingPodGroupPods), merged back by group_done.
        self._groups_in_flight: set[str] = set()
        self._group_pending: dict[str, dict[str, PodInfo]] = {}

    # -- the policy's plugins -------------------------------------------------------------
    def configure(self, pre_enqueue: Sequence[PreEnqueuePlugin] = (),
                  hints: HintMap | None = None,
                  group_of: Callable[[PodInfo], str | None] | None = None) -> None:
        """The pipeline's PreEnqueue plugins and queueing hints (on every apply), and
        how to tell a pod group's members (None: every pod is scheduled alone)."""
        self._group_of = group_of
        self._pre_enqueue = tuple(pre_enqueue)
        self._hints = dict(hints) if hints is not None else None
        self._interest.clear()
        self._reindex()

    # -- introspection ----------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._active) + len(self._backoff) + len(self._unschedulable)

    def __contains__(self, key: object) -> bool:
        return key in self._active or key in self._backoff or key in self._unschedulable

    def where(self, key: str) -> Location | None:
        """Where the pod of that key waits; None: not queued."""
        qp = self._unschedulable.get(key)
        if qp is not None:
            return Location.GATED if qp.gated else Location.UNSCHEDULABLE
        for name, d in ((Location.ACTIVE, self._active), (Location.BACKOFF, self._backoff),
                        (Location.IN_FLIGHT, self._in_flight_keys)):
            if key in d:
                return name
        return None

    def get(self, key: str) -> QueuedPod | None:
        """The queued (or in-flight) pod of that key."""
        for d in (self._active, self._backoff, self._unschedulable):
            qp = d.get(key)
            if qp is not None:
                return qp
        uid = self._in_flight_keys.get(key)
        return self._in_flight.get(uid) if uid is not None else None

    def sizes(self) -> tuple[int, int, int, int]:
        """How many pods wait in activeQ, backoffQ, unschedulable and gated (O(1), for the
        scheduler_pending_pods gauge)."""
        return (len(self._active), len(self._backoff),
                len(self._unschedulable) - self._gated, self._gated)

    def keys(self) -> set[str]:
        """Every pod waiting or in flight."""
        return {*self._active, *self._backoff, *self._unschedulable, *self._in_flight_keys}

    def in_flight_events(self) -> int:
        return len(self._events)

    def oldest_in_flight(self) -> int | None:
        """The event number at the earliest pop of the pods in flight (None: none)."""
        if not self._in_flight:
            return None
        return min(p._events_from for p in self._in_flight.values())

    # -- backoff --------------------------------------------------------------------------
    def backoff_duration(self, qp: QueuedPod) -> float:
        """backoff_queue.go calculateBackoffDuration: 1 s, 2 s, 4 s, ... up to 10 s."""
        count = qp.consecutive_errors or qp.unschedulable_count
        if count == 0:
            return 0.0
        d: float = self._initial_backoff * float(2 ** min(count - 1, 62))
        return min(d, self._max_backoff)

    def backoff_expiry(self, qp: QueuedPod) -> float:
        """When the pod stops backing off. With PopFromBackoffQ, upstream truncates the
        expiry to its ordering window and the pod backs off while that window has not
        passed (alignToWindow, isEntityBackingoff): it leaves at the start of the window
        after the one its backoff ends in, 1-2 s after a first failure."""
        duration = self.backoff_duration(qp)
        t = qp.timestamp + duration
        w = self._backoff_window
        if duration and w > 0:
            return (math.floor(t / w) + 1) * w
        return t

    def _backing_off(self, qp: QueuedPod, now: float) -> bool:
        return self.backoff_expiry(qp) > now

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

    def _run_pre_enqueue(self, qp: QueuedPod) -> None:
        """PreEnqueue for a queued pod: the first plugin that does not succeed gates it
        (and counts as a rejecting plugin)."""
        gate = qp.gating_plugin = self.gating_plugin(qp.pod, qp.gating_plugin)
        if gate:
            qp.rejected_by = qp.rejected_by | {gate}

    # -- moving between the queues --------------------------------------------------------
    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def _park(self, qp: QueuedPod) -> None:
        """Into the unschedulable pool (gated or not)."""
        if qp.key in self._unschedulable:
            self._unpark(qp.key)
        self._unschedulable[qp.key] = qp
        if qp.gated:
            self._gated += 1
        self._index_add(qp)

    def _unpark(self, key: str) -> QueuedPod | None:
        qp = self._unschedulable.pop(key, None)
        if qp is not None:
            if qp.gated:
                self._gated -= 1
            for plugin in qp._indexed:
                keys = self._index.get(plugin)
                if keys is not None:
                    keys.discard(key)
            qp._indexed = ()
        return qp

    def _index_add(self, qp: QueuedPod) -> None:
        """Index the parked pod by its rejecting plugins, so that an event visits only
        the pods one of whose plugins registered it; a pod with no rejecting plugin, or one
        this pipeline does not know (an extender), is visited by every event ("*")."""
        hints = self._hints
        rejected = qp.rejected_by
        if hints is None or not rejected or any(p not in hints for p in rejected):
            qp._indexed = ("*",)
        else:
            qp._indexed = tuple(rejected)
        for plugin in qp._indexed:
            self._index.setdefault(plugin, set()).add(qp.key)

    def _reindex(self) -> None:
        self._index.clear()
        for qp in self._unschedulable.values():
            self._index_add(qp)

    def _move_to_active(self, qp: QueuedPod, from_backoff: bool = False) -> bool:
        """moveToActiveQ: PreEnqueue first (not again for a pod leaving backoffQ, which ran
        it on entering); a gated pod goes to the unschedulable pool instead."""
        if not from_backoff:
            self._run_pre_enqueue(qp)
        if qp.gated:
            self._park(qp)
            return False
        self._unpark(qp.key)
        qp._seq = self._next_seq()
        self._active[qp.key] = qp
        heapq.heappush(self._active_heap,
                       (-qp.pod.priority, qp.timestamp, qp._seq, qp.key))
        self._wake()
        return True

    def _move_to_backoff(self, qp: QueuedPod) -> bool:
        """moveToBackoffQ: with PopFromBackoffQ, PreEnqueue runs on entering backoffQ."""
        if self._pop_from_backoff:
            self._run_pre_enqueue(qp)
            if qp.gated:
                self._park(qp)
                return False
        self._unpark(qp.key)
        qp._seq = self._next_seq()
        self._backoff[qp.key] = qp
        heapq.heappush(self._backoff_heap, (self.backoff_expiry(qp), -qp.pod.priority,
                                            qp.timestamp, qp._seq, qp.key))
        self._wake()
        return True

    def _requeue(self, qp: QueuedPod, strategy: Strategy, now: float) -> Location:
        """requeueEntityWithQueueingStrategy; returns where the pod went."""
        if strategy is Strategy.SKIP:
            self._park(qp)
            return Location.UNSCHEDULABLE
        if strategy is Strategy.AFTER_BACKOFF and self._backing_off(qp, now):
            return Location.BACKOFF if self._move_to_backoff(qp) else Location.UNSCHEDULABLE
        return Location.ACTIVE if self._move_to_active(qp) else Location.UNSCHEDULABLE

    def _wake(self) -> None:
        if self.on_wake is not None:
            self.on_wake()

    # -- queueing hints -------------------------------------------------------------------
    def worth_requeuing(self, qp: QueuedPod, event: ev.ClusterEvent, old: Any,
                        new: Any) -> Strategy:
        """isPodWorthRequeuing: Queue from one of the pod's rejecting plugins for this
        event; a pod with no rejecting plugin (an error, or only extenders rejected it)
        moves on any event."""
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

    # -- what the cache's events do -------------------------------------------------------
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
                if _pod_updated(prev.raw, pod.raw):
                    for e in ev.pod_update_events(pod, prev, target=True):
                        self._record(e, prev, pod, uid)
                flying.pod = pod
                return
            # Its predecessor is in flight: that one is gone, this one is new.
            flying._gone = True
        if self._groups_in_flight and self._group_of is not None:
            group = self._group_of(pod)
            if group is not None and group in self._groups_in_flight and key not in self:
                # Its group is in its cycle: merged back after it (pendingPodGroupPods).
                self._group_pending.setdefault(group, {})[key] = pod
                return
        for d in (self._active, self._backoff):
            qp = d.get(key)
            if qp is None:
                continue
            if qp.uid != pod.uid:
                del d[key]
                break
            prev_priority = qp.pod.priority
            qp.pod = pod
            if d is self._active and prev_priority != pod.priority:
                self._move_to_active(qp, from_backoff=True)  # the old heap entry goes stale
            return
        qp = self._unschedulable.get(key)
        if qp is not None:
            if qp.uid != pod.uid:
                self._unpark(key)
            else:
                prev = qp.pod
                qp.pod = pod
                if not _pod_updated(prev.raw, pod.raw):
                    return  # status only (our own condition patch): nothing new
                for e in ev.pod_update_events(pod, prev, target=True):
                    strategy = self.worth_requeuing(qp, e, prev, pod)
                    if strategy is Strategy.SKIP:
                        continue
                    self._unpark(key)
                    if self._requeue(qp, strategy, now) is not Location.UNSCHEDULABLE:
                        break
                return
        self._move_to_active(QueuedPod(pod, timestamp=now))

    def delete(self, key: str, uid: str | None = None) -> None:
        """The pod was deleted, bound (by us or elsewhere) or finished: it leaves. With
        `uid`, only that pod (not a successor under the same name)."""
        for pending in self._group_pending.values():
            held = pending.get(key)
            if held is not None and (uid is None or held.uid == uid):
                del pending[key]
        for d in (self._active, self._backoff):
            qp = d.get(key)
            if qp is not None and (uid is None or qp.uid == uid):
                del d[key]
        qp = self._unschedulable.get(key)
        if qp is not None and (uid is None or qp.uid == uid):
            self._unpark(key)
        flying_uid = self._in_flight_keys.get(key)
        if flying_uid is not None and (uid is None or flying_uid == uid):
            self._in_flight[flying_uid]._gone = True

    def move(self, event: ev.ClusterEvent, old: Any = None, new: Any = None,
             pre_check: Callable[[PodInfo], bool] | None = None,
             journaled: bool = False) -> int:
        """MoveAllToActiveOrBackoffQueue: the unschedulable pods this event may help go back
        (to backoffQ while backing off). Returns how many moved. `journaled`: the event is
        in the shared EventJournal already, so it is not kept here for the pods in flight."""
        if not self._unschedulable:
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
            candidates = list(self._unschedulable.values())
        else:
            keys = set(self._index.get("*", ()))
            for plugin in interested:
                keys.update(self._index.get(plugin, ()))
            candidates = [self._unschedulable[k] for k in keys]
        for qp in candidates:
            if pre_check is not None and not pre_check(qp.pod):
                continue
            if qp.gated and not event.is_wildcard and not any(
                    eh.event.matches(event)
                    for eh in self._registered(qp.gating_plugin) or ()):
                continue
            strategy = self.worth_requeuing(qp, event, old, new)
            if strategy is Strategy.SKIP:
                continue
            self._unpark(qp.key)
            if self._requeue(qp, strategy, now) is not Location.UNSCHEDULABLE:
                moved += 1
        if not journaled:
            self._record(event, old, new)
        return moved

    def _record(self, event: ev.ClusterEvent, old: Any, new: Any, uid: str = "") -> None:
        """Keep the event for the pods in flight (addEventIfAnyInFlight)."""
        if not self._in_flight:
            return
        self._event_n = self._journal.next() if self._journal is not None \
            else self._event_n + 1
        self._events.append(_InFlightEvent(self._event_n, event, old, new, uid))

    # -- what the scheduling loop does ----------------------------------------------------
    def flush(self) -> None:
        """Backoff-completed pods to activeQ; pods unschedulable for longer than 5 minutes
        back (flushBackoffQCompleted, flushUnschedulableEntitiesLeftover)."""
        now = self._clock()
        heap = self._backoff_heap
        while heap and heap[0][0] <= now:
            *_, seq, key = heapq.heappop(heap)
            qp = self._backoff.get(key)
            if qp is None or qp._seq != seq:
                continue
            del self._backoff[key]
            self._move_to_active(qp, from_backoff=self._pop_from_backoff)
        if now < self._next_leftover_flush:
            return
        self._next_leftover_flush = now + UNSCHEDULABLE_FLUSH_PERIOD
        limit = now - self._max_in_unschedulable
        stale = [qp for qp in self._unschedulable.values()
                 if max(qp.timestamp, qp.flush_timestamp) <= limit]
        for qp in stale:
            qp.flush_timestamp = now
            event = ev.EVENT_UNSCHEDULABLE_TIMEOUT
            strategy = self.worth_requeuing(qp, event, None, None)
            self._unpark(qp.key)
            self._requeue(qp, strategy, now)

    def _pop_backoff(self) -> QueuedPod | None:
        """PopFromBackoffQ: activeQ is empty; the first pod of backoffQ that plugins
        rejected (not one that failed with an error) goes now."""
        best: tuple[float, int, float, int, str] | None = None
        for entry in self._backoff_heap:
            qp = self._backoff.get(entry[4])
            if qp is None or qp._seq != entry[3] or not qp.rejected_by:
                continue
            if best is None or entry < best:
                best = entry
        if best is None:
            return None
        qp = self._backoff.pop(best[4])
        qp._seq = self._next_seq()  # its heap entry goes stale
        return qp

    def pop_nowait(self) -> QueuedPod | None:
        """The next pod to schedule, now in flight; None when nothing can go now."""
        self.flush()
        heap = self._active_heap
        qp: QueuedPod | None = None
        while heap:
            _, _, seq, key = heapq.heappop(heap)
            cand = self._active.get(key)
            if cand is None or cand._seq != seq:
                continue
            del self._active[key]
            qp = cand
            break
        if qp is None and self._pop_from_backoff and self._backoff:
            qp = self._pop_backoff()
        if qp is None:
            return None
        qp.attempts += 1
        self.scheduling_cycle += 1
        qp._gone = False
        qp._events_from = self._journal.n if self._journal is not None else self._event_n
        self._in_flight[qp.uid] = qp
        self._in_flight_keys[qp.key] = qp.uid
        return qp

    def pop_group(self, qp: QueuedPod) -> QueuedPodGroup | None:
        """After pop_nowait: when `qp` is a pod group member, its group as one unit, with
        every other member waiting in activeQ, backoffQ or among the unschedulable pods
        (not one a PreEnqueue plugin keeps out), all now in flight; None for a plain pod.
        The group stays in its cycle until group_done."""
        if self._group_of is None:
            return None
        key = self._group_of(qp.pod)
        if key is None:
            return None
        members = [qp]
        group_of = self._group_of

        def group(o: QueuedPod) -> str:
            if o._group is None:
                o._group = group_of(o.pod) or ""
            return o._group

        for d in (self._active, self._backoff, self._unschedulable):
            for other in [o for o in d.values() if group(o) == key]:
                if other.gated:
                    continue
                if d is self._unschedulable:
                    self._unpark(other.key)
                else:
                    del d[other.key]  # its heap entry goes stale
                    other._seq = self._next_seq()
                other.attempts += 1
                other._gone = False
                other._events_from = qp._events_from
                self._in_flight[other.uid] = other
                self._in_flight_keys[other.key] = other.uid
                members.append(other)
        members.sort(key=lambda m: (-m.pod.priority, -m.attempts, m.timestamp, m.key))
        self._groups_in_flight.add(key)
        return QueuedPodGroup(key, members)

    def group_done(self, key: str) -> None:
        """The group's cycle ended (AddAttemptedPodGroupIfNeeded): the members that arrived
        meanwhile are queued now."""
        self._groups_in_flight.discard(key)
        for pod in self._group_pending.pop(key, {}).values():
            self.add(pod)

    def activate(self, keys: Iterable[str]) -> int:
        """Activate: these pods go to activeQ from backoffQ or the unschedulable pool
        (PreEnqueue runs again for a gated one). Returns how many moved."""
        moved = 0
        for key in keys:
            qp = self._unschedulable.get(key)
            if qp is not None:
                self._unpark(key)
                if self._move_to_active(qp):
                    moved += 1
                continue
            qp = self._backoff.pop(key, None)
            if qp is not None and self._move_to_active(qp, from_backoff=True):
                moved += 1
        return moved

    def next_due(self) -> float | None:
        """Seconds until a backoff expires or an unschedulable pod is flushed."""
        due: float | None = None
        heap = self._backoff_heap
        while heap and (self._backoff.get(heap[0][4]) is None
                        or self._backoff[heap[0][4]]._seq != heap[0][3]):
            heapq.heappop(heap)
        if heap:
            due = heap[0][0]
        if self._unschedulable:
            flush_at = self._next_leftover_flush
            due = flush_at if due is None else min(due, flush_at)
        if due is None:
            return None
        return max(due - self._clock(), 0.001)

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

    def done(self, qp: QueuedPod) -> None:
        """The pod's cycle ended with a bind, or it needs nothing more (Done)."""
        self._land(qp)

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

    def add_unschedulable(self, qp: QueuedPod, rejected_by: Iterable[str] = ()) -> None:
        """Rejected by plugins, or failed (AddUnschedulablePodIfNotPresent): no rejecting
        plugin means an error (counts a consecutive error; retried after backoff on any
        event)."""
        qp.rejected_by = frozenset(rejected_by)
        strategy = self._in_flight_strategy(qp)
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
        self._requeue(qp, strategy, now)

    def activate_gated(self, plugin: str) -> int:
        """Activate: the pods `plugin`'s PreEnqueue keeps out run their PreEnqueue again,
        and go to activeQ when it lets them in (upstream's Handle.Activate, which async
        preemption calls once a preemptor's victims are evicted). Returns how many moved."""
        if not self._gated:
            return 0
        keys = self._index.get(plugin, set()) | self._index.get("*", set())
        moved = 0
        for key in list(keys):
            qp = self._unschedulable.get(key)
            if qp is None or qp.gating_plugin != plugin:
                continue
            self._unpark(key)
            if self._move_to_active(qp):
                moved += 1
        return moved

    def add_backoff(self, qp: QueuedPod) -> None:
        """The cycle or the binding failed with an error: retry after backoff."""
        self.add_unschedulable(qp, ())

    def restore(self, qp: QueuedPod) -> None:
        """Put a popped pod back as it was, uncounted (the scheduler is paused)."""
        if not self._finish(qp):
            return
        qp.attempts -= 1
        self._move_to_active(qp, from_backoff=True)

    def close(self) -> None:
        """The policy is gone: its queue no longer takes the journal's events."""
        self.on_wake = None
        if self._journal is not None and self in self._journal._queues:
            self._journal._queues.remove(self)


_IGNORED_META = ("resourceVersion", "generation", "managedFields", "finalizers")


def _pod_updated(old: Json, new: Json) -> bool:
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
