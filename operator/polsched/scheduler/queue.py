"""SchedulingQueue: the pending pods of one scheduler, like kube-scheduler's PriorityQueue
(pkg/scheduler/backend/queue/scheduling_queue.go), without queueing hints.

Three places a pod can wait, and it is in at most one of them (or in flight):
- activeQ: ready to schedule, highest priority first, then oldest creationTimestamp;
- backoffQ: failed recently; leaves for activeQ when its backoff expires (1 s after the
  first failure, doubling up to 10 s);
- unschedulable: no node fitted; it waits for a cluster event that may help (a node added
  or updated, a pod deleted, the policy changed) and is flushed back at least every
  5 minutes (podMaxInUnschedulablePodsDuration).
A pod failing while a move request happened during its cycle goes to backoffQ instead of
unschedulable (upstream's moveRequestCycle), so no wake-up is lost.

Single-threaded asyncio: no locks; only `pop` awaits. The clock is injectable for tests.
"""

from __future__ import annotations

import asyncio
import heapq
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from polsched.framework.types import Json, PodInfo

DEFAULT_POD_INITIAL_BACKOFF = 1.0
DEFAULT_POD_MAX_BACKOFF = 10.0
DEFAULT_POD_MAX_IN_UNSCHEDULABLE_PODS_DURATION = 300.0

# Cluster events (framework.ClusterEvent labels) that move unschedulable pods.
NODE_ADD = "NodeAdd"
NODE_UPDATE = "NodeUpdate"
ASSIGNED_POD_ADD = "AssignedPodAdd"
ASSIGNED_POD_DELETE = "AssignedPodDelete"
POLICY_CHANGE = "PolicyChange"
NAMESPACE_CHANGE = "NamespaceChange"
UNSCHEDULABLE_TIMEOUT = "UnschedulableTimeout"


class QueueClosed(Exception):
    pass


@dataclass(eq=False)
class QueuedPod:
    """framework.QueuedPodInfo: a pod and its scheduling history."""

    pod: PodInfo
    # When it last entered the queue (or failed); the backoff counts from here.
    timestamp: float
    attempts: int = 0
    unschedulable_count: int = 0
    consecutive_errors: int = 0
    # Plugins that rejected it in its last attempt (moves on AssignedPodAdd use them).
    rejected_by: frozenset[str] = frozenset()
    _seq: int = field(default=0, repr=False)

    @property
    def key(self) -> str:
        return self.pod.key


class SchedulingQueue:
    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        initial_backoff: float = DEFAULT_POD_INITIAL_BACKOFF,
        max_backoff: float = DEFAULT_POD_MAX_BACKOFF,
        max_in_unschedulable: float = DEFAULT_POD_MAX_IN_UNSCHEDULABLE_PODS_DURATION,
    ) -> None:
        self._clock = clock
        self._initial_backoff = initial_backoff
        self._max_backoff = max_backoff
        self._max_in_unschedulable = max_in_unschedulable
        self._seq = 0
        # heap of (-priority, creationTimestamp, seq, key); stale entries skipped on pop
        self._active_heap: list[tuple[int, str, int, str]] = []
        self._active: dict[str, QueuedPod] = {}
        self._backoff_heap: list[tuple[float, int, str]] = []
        self._backoff: dict[str, QueuedPod] = {}
        self._unschedulable: dict[str, QueuedPod] = {}
        self._in_flight: dict[str, QueuedPod] = {}
        # In flight and deleted (or bound elsewhere) meanwhile: do not requeue.
        self._gone: set[str] = set()
        # In flight and updated meanwhile: a failure goes to backoffQ, not unschedulable.
        self._updated: set[str] = set()
        self.scheduling_cycle = 0
        self._move_request_cycle = -1
        self._wakeup: asyncio.Event | None = None
        self._closed = False

    # -- introspection ----------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._active) + len(self._backoff) + len(self._unschedulable)

    def __contains__(self, key: object) -> bool:
        return key in self._active or key in self._backoff or key in self._unschedulable

    def where(self, key: str) -> str | None:
        """"active", "backoff", "unschedulable", "in-flight" or None."""
        for name, d in (("active", self._active), ("backoff", self._backoff),
                        ("unschedulable", self._unschedulable), ("in-flight", self._in_flight)):
            if key in d:
                return name
        return None

    def sizes(self) -> tuple[int, int, int]:
        """How many pods wait in activeQ, backoffQ and unschedulable (O(1), for the
        scheduler_pending_pods gauge)."""
        return len(self._active), len(self._backoff), len(self._unschedulable)

    def keys(self) -> set[str]:
        """Every pod waiting or in flight."""
        return {*self._active, *self._backoff, *self._unschedulable, *self._in_flight}

    # -- backoff --------------------------------------------------------------------------
    def backoff_duration(self, qp: QueuedPod) -> float:
        """backoff_queue.go calculateBackoffDuration: 1 s, 2 s, 4 s, ... up to 10 s."""
        count = qp.consecutive_errors or qp.unschedulable_count
        if count == 0:
            return 0.0
        d: float = self._initial_backoff * float(2 ** min(count - 1, 62))
        return min(d, self._max_backoff)

    def backoff_expiry(self, qp: QueuedPod) -> float:
        return qp.timestamp + self.backoff_duration(qp)

    def _backing_off(self, qp: QueuedPod, now: float) -> bool:
        return self.backoff_expiry(qp) > now

    # -- moving between the queues --------------------------------------------------------
    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def _push_active(self, qp: QueuedPod) -> None:
        qp._seq = self._next_seq()
        self._active[qp.key] = qp
        heapq.heappush(self._active_heap,
                       (-qp.pod.priority, qp.pod.creation, qp._seq, qp.key))
        self._wake()

    def _push_backoff(self, qp: QueuedPod) -> None:
        qp._seq = self._next_seq()
        self._backoff[qp.key] = qp
        heapq.heappush(self._backoff_heap, (self.backoff_expiry(qp), qp._seq, qp.key))
        self._wake()

    def _requeue(self, qp: QueuedPod, now: float) -> None:
        """To backoffQ while backing off, else to activeQ (requeuePodWithQueueingStrategy)."""
        if self._backing_off(qp, now):
            self._push_backoff(qp)
        else:
            self._push_active(qp)

    def _wake(self) -> None:
        if self._wakeup is not None:
            self._wakeup.set()

    # -- what the cache's events do -------------------------------------------------------
    def add(self, pod: PodInfo) -> None:
        """A pending pod was added or updated (Add / Update)."""
        key = pod.key
        now = self._clock()
        qp = self._in_flight.get(key)
        if qp is not None:
            if _pod_updated(qp.pod.raw, pod.raw):
                self._updated.add(key)
            qp.pod = pod
            return
        qp = self._active.get(key)
        if qp is not None:
            old = qp.pod
            qp.pod = pod
            if old.priority != pod.priority or old.creation != pod.creation:
                self._push_active(qp)  # the old heap entry goes stale
            return
        qp = self._backoff.get(key)
        if qp is not None:
            qp.pod = pod
            return
        qp = self._unschedulable.get(key)
        if qp is not None:
            updated = _pod_updated(qp.pod.raw, pod.raw)
            qp.pod = pod
            if updated:  # the pod itself changed: it may fit now
                del self._unschedulable[key]
                self._requeue(qp, now)
            return
        self._push_active(QueuedPod(pod, timestamp=now))

    def delete(self, key: str) -> None:
        """The pod was deleted, bound (by us or elsewhere) or finished: it leaves."""
        self._active.pop(key, None)
        self._backoff.pop(key, None)
        self._unschedulable.pop(key, None)
        if key in self._in_flight:
            self._gone.add(key)

    def move_all(self, event: str, only_rejected_by: Iterable[str] | None = None) -> int:
        """MoveAllToActiveOrBackoffQueue: unschedulable pods go back (to backoffQ while
        backing off). With `only_rejected_by`, only pods one of those plugins rejected.
        Returns how many moved."""
        self._move_request_cycle = self.scheduling_cycle
        now = self._clock()
        plugins = frozenset(only_rejected_by) if only_rejected_by is not None else None
        moved = [qp for qp in self._unschedulable.values()
                 if plugins is None or (qp.rejected_by & plugins)]
        for qp in moved:
            del self._unschedulable[qp.key]
            self._requeue(qp, now)
        return len(moved)

    # -- what the scheduling loop does ----------------------------------------------------
    def flush(self) -> None:
        """Backoff-completed pods to activeQ; pods unschedulable for longer than 5 minutes
        back (flushBackoffQCompleted, flushUnschedulablePodsLeftover)."""
        now = self._clock()
        heap = self._backoff_heap
        while heap and heap[0][0] <= now:
            _, seq, key = heapq.heappop(heap)
            qp = self._backoff.get(key)
            if qp is None or qp._seq != seq:
                continue
            del self._backoff[key]
            self._push_active(qp)
        limit = now - self._max_in_unschedulable
        stale = [qp for qp in self._unschedulable.values() if qp.timestamp <= limit]
        for qp in stale:
            del self._unschedulable[qp.key]
            self._requeue(qp, now)

    def pop_nowait(self) -> QueuedPod | None:
        """The next pod to schedule, now in flight; None when activeQ is empty."""
        self.flush()
        heap = self._active_heap
        while heap:
            _, _, seq, key = heapq.heappop(heap)
            qp = self._active.get(key)
            if qp is None or qp._seq != seq:
                continue
            del self._active[key]
            qp.attempts += 1
            self.scheduling_cycle += 1
            self._in_flight[key] = qp
            self._gone.discard(key)
            self._updated.discard(key)
            return qp
        return None

    async def pop(self) -> QueuedPod:
        """Wait for the next pod to schedule. Raises QueueClosed after close()."""
        if self._wakeup is None:
            self._wakeup = asyncio.Event()
        while True:
            if self._closed:
                raise QueueClosed()
            qp = self.pop_nowait()
            if qp is not None:
                return qp
            self._wakeup.clear()
            delay = self._next_due()
            try:
                await asyncio.wait_for(self._wakeup.wait(), delay)
            except TimeoutError:
                pass

    def _next_due(self) -> float | None:
        """Seconds until a backoff expires or an unschedulable pod is flushed."""
        due: float | None = None
        heap = self._backoff_heap
        while heap and (self._backoff.get(heap[0][2]) is None
                        or self._backoff[heap[0][2]]._seq != heap[0][1]):
            heapq.heappop(heap)
        if heap:
            due = heap[0][0]
        if self._unschedulable:
            oldest = min(qp.timestamp for qp in self._unschedulable.values())
            flush_at = oldest + self._max_in_unschedulable
            due = flush_at if due is None else min(due, flush_at)
        if due is None:
            return None
        return max(due - self._clock(), 0.001)

    def _finish(self, qp: QueuedPod) -> bool:
        """Leave flight; False when the pod is gone meanwhile (do not requeue)."""
        key = qp.key
        self._in_flight.pop(key, None)
        if key in self._gone:
            self._gone.discard(key)
            self._updated.discard(key)
            return False
        return key not in self

    def done(self, qp: QueuedPod) -> None:
        """The pod's cycle ended with a bind (or it needs nothing more)."""
        self._in_flight.pop(qp.key, None)
        self._gone.discard(qp.key)
        self._updated.discard(qp.key)

    def add_unschedulable(self, qp: QueuedPod, cycle: int,
                          rejected_by: Iterable[str] = ()) -> None:
        """No node fitted (AddUnschedulablePodIfNotPresent). `cycle` is the
        scheduling_cycle read when the pod was popped."""
        if not self._finish(qp):
            return
        now = self._clock()
        qp.unschedulable_count += 1
        qp.consecutive_errors = 0
        qp.timestamp = now
        qp.rejected_by = frozenset(rejected_by)
        updated = qp.key in self._updated
        self._updated.discard(qp.key)
        if self._move_request_cycle >= cycle or updated:
            self._push_backoff(qp)
        else:
            self._unschedulable[qp.key] = qp

    def add_backoff(self, qp: QueuedPod, *, error: bool = True) -> None:
        """The cycle or the bind failed with an error: retry after backoff."""
        if not self._finish(qp):
            return
        self._updated.discard(qp.key)
        if error:
            qp.consecutive_errors += 1
        qp.timestamp = self._clock()
        self._push_backoff(qp)

    def restore(self, qp: QueuedPod) -> None:
        """Put a popped pod back as it was, uncounted (the scheduler is paused)."""
        if not self._finish(qp):
            return
        self._updated.discard(qp.key)
        qp.attempts -= 1
        self._push_active(qp)

    def close(self) -> None:
        self._closed = True
        self._wake()


_IGNORED_META = ("resourceVersion", "generation", "managedFields", "finalizers")


def _pod_updated(old: Json, new: Json) -> bool:
    """scheduling_queue.go isPodUpdated: a change other than status, resourceVersion,
    generation, managedFields or finalizers (our own condition patch is not one)."""
    if old.get("spec") != new.get("spec"):
        return True
    om, nm = old.get("metadata") or {}, new.get("metadata") or {}
    keys = (om.keys() | nm.keys()).difference(_IGNORED_META)
    return any(om.get(k) != nm.get(k) for k in keys)
