"""backoffQ (upstream's backoff_queue.go): the entities that failed recently, each until
its backoff expires: 1 s after the first failure, doubling up to 10 s (for a pod group
the maximum grows with the square root of its members), then rounded up to the next
whole-second ordering window (KEP-5142). With PopFromBackoffQ, the first entity that
plugins rejected (not one that failed with an error) may leave early when activeQ is
empty."""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterator

from polsched.scheduler.queue.types import Entry, QueuedPodGroup, extra

DEFAULT_POD_INITIAL_BACKOFF = 1.0
DEFAULT_POD_MAX_BACKOFF = 10.0
# backoff_queue.go backoffQOrderingWindowDuration (KEP-5142, with PopFromBackoffQ): backoff
# ends on whole-second windows.
BACKOFF_ORDERING_WINDOW = 1.0


class BackoffQueue:
    def __init__(self, initial_backoff: float, max_backoff: float, window: float,
                 wall_offset: Callable[[], float]) -> None:
        self._initial_backoff = initial_backoff
        self._max_backoff = max_backoff
        self._window = window
        # Where the queue's clock's 0 falls on the wall clock (the windows are aligned
        # on the wall clock's seconds, as upstream's time.Truncate).
        self._wall_offset = wall_offset
        # heap of (expiry, -priority, timestamp, seq, key)
        self._heap: list[tuple[float, int, float, int, str]] = []
        self.entries: dict[str, Entry] = {}
        self.extra = 0

    def size(self) -> int:
        return len(self.entries) + self.extra

    def duration(self, qp: Entry) -> float:
        """backoff_queue.go calculateBackoffDuration: 1 s, 2 s, 4 s, ... up to 10 s; for a
        pod group the maximum grows with the square root of its queued members."""
        count = qp.consecutive_errors or qp.unschedulable_count
        if count == 0:
            return 0.0
        max_backoff = self._max_backoff
        if isinstance(qp, QueuedPodGroup) and len(qp.members) > 1:
            max_backoff *= math.sqrt(len(qp.members))
        d: float = self._initial_backoff * float(2 ** min(count - 1, 62))
        return min(d, max_backoff)

    def expiry(self, qp: Entry) -> float:
        """When the pod stops backing off. With PopFromBackoffQ, upstream truncates the
        expiry to its ordering window and the pod backs off while that window has not
        passed (alignToWindow, isEntityBackingoff): it leaves at the start of the window
        after the one its backoff ends in, 1-2 s after a first failure. A group's expiry
        is computed once and kept until its counters change (BackoffExpiration)."""
        if isinstance(qp, QueuedPodGroup) and qp._expiry is not None:
            return qp._expiry
        duration = self.duration(qp)
        t = qp.timestamp + duration
        w = self._window
        if duration and w > 0:
            off = self._wall_offset()
            t = (math.floor((t + off) / w) + 1) * w - off
        if isinstance(qp, QueuedPodGroup) and duration:
            qp._expiry = t
        return t

    def backing_off(self, qp: Entry, now: float) -> bool:
        return self.expiry(qp) > now

    def push(self, qp: Entry) -> None:
        """In, under its current seq (set by the caller)."""
        self.entries[qp._qkey] = qp
        self.extra += extra(qp)
        heapq.heappush(self._heap, (self.expiry(qp), -qp.priority, qp.timestamp, qp._seq,
                                    qp._qkey))

    def remove(self, qp: Entry) -> None:
        """Out; its heap entry goes stale."""
        del self.entries[qp._qkey]
        self.extra -= extra(qp)

    def pop_completed(self, now: float) -> Iterator[Entry]:
        """Each entity whose backoff has expired by `now`, taken out one at a time
        (flushBackoffQCompleted)."""
        heap = self._heap
        while heap and heap[0][0] <= now:
            *_, seq, key = heapq.heappop(heap)
            qp = self.entries.get(key)
            if qp is None or qp._seq != seq:
                continue
            self.remove(qp)
            yield qp

    def pop_rejected(self) -> Entry | None:
        """PopFromBackoffQ: the first entity that plugins rejected (not one that failed
        with an error), taken out (its heap entry goes stale once the caller gives it a
        new seq); None when there is none."""
        best: tuple[float, int, float, int, str] | None = None
        for entry in self._heap:
            qp = self.entries.get(entry[4])
            if qp is None or qp._seq != entry[3] or not qp.rejected_by:
                continue
            if best is None or entry < best:
                best = entry
        if best is None:
            return None
        qp = self.entries.pop(best[4])
        self.extra -= extra(qp)
        return qp

    def next_expiry(self) -> float | None:
        """When the first backoff expires (stale heap entries dropped); None: empty."""
        heap = self._heap
        while heap and (self.entries.get(heap[0][4]) is None
                        or self.entries[heap[0][4]]._seq != heap[0][3]):
            heapq.heappop(heap)
        return heap[0][0] if heap else None
