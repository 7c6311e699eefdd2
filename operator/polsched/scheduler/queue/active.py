"""activeQ (upstream's active_queue.go): the entities ready to be scheduled, highest
priority first, then the earliest time each last entered the queue (PrioritySort on
QueuedPodInfo.Timestamp), then the order they came in."""

from __future__ import annotations

import heapq

from polsched.scheduler.queue.types import Entry, QueuedPodGroup, extra


class ActiveQueue:
    def __init__(self) -> None:
        # heap of (-priority, timestamp, order, seq, key); stale entries skipped on pop. A
        # pod's order is its seq; a group's is fixed when its timestamp is set, so that a
        # member joining it does not send it behind entities of the same timestamp.
        self._heap: list[tuple[int, float, int, int, str]] = []
        # Entities by queue key: a pod ("namespace/name") or a pod group ("podgroup:...").
        self.entries: dict[str, Entry] = {}
        # A group's members beyond its first (size() in O(1)): a group's members only
        # change while it is out of the queues.
        self.extra = 0

    def size(self) -> int:
        """How many pods wait here, a group counting its members."""
        return len(self.entries) + self.extra

    def push(self, qp: Entry) -> None:
        """In, under its current seq (set by the caller)."""
        self.entries[qp._qkey] = qp
        self.extra += extra(qp)
        order = qp._order if isinstance(qp, QueuedPodGroup) else qp._seq
        heapq.heappush(self._heap, (-qp.priority, qp.timestamp, order, qp._seq, qp._qkey))

    def remove(self, qp: Entry) -> None:
        """Out; its heap entry goes stale."""
        del self.entries[qp._qkey]
        self.extra -= extra(qp)

    def pop(self) -> Entry | None:
        """The first entity, taken out; None when empty."""
        heap = self._heap
        while heap:
            *_, seq, key = heapq.heappop(heap)
            cand = self.entries.get(key)
            if cand is None or cand._seq != seq:
                continue
            self.remove(cand)
            return cand
        return None
