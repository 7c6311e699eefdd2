"""The cluster events kept for the pods in flight (upstream's inFlightEvents): an event
that happens while a pod is being scheduled is checked against its rejecting plugins when
it fails (determineSchedulingHintForInFlightPod), so no wake-up is lost. One EventJournal
is shared by the queues of an engine."""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any, Protocol

from polsched.framework import events as ev


class JournalReader(Protocol):
    """What the journal asks of a queue that reads it."""

    def oldest_in_flight(self) -> int | None: ...


@dataclass(frozen=True, slots=True)
class InFlightEvent:
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
        self._events: list[InFlightEvent] = []
        self.readers: list[JournalReader] = []
        self._trim_at = self.TRIM_AT

    def next(self) -> int:
        self.n += 1
        return self.n

    def append(self, event: ev.ClusterEvent, old: Any, new: Any) -> None:
        self.n += 1
        self._events.append(InFlightEvent(self.n, event, old, new))
        if len(self._events) >= self._trim_at:
            self._trim()

    def since(self, n: int) -> list[InFlightEvent]:
        """The events after number `n`, oldest first."""
        events = self._events
        return events[bisect.bisect_right(events, n, key=lambda e: e.n):]

    def __len__(self) -> int:
        return len(self._events)

    def _trim(self) -> None:
        """Forget the events that no pod in flight in any queue can still need; then
        trim again when the journal has doubled (amortised O(1) per event)."""
        froms = [n for n in (q.oldest_in_flight() for q in self.readers) if n is not None]
        if not froms:
            self._events.clear()
        else:
            del self._events[:bisect.bisect_right(self._events, min(froms),
                                                  key=lambda e: e.n)]
        self._trim_at = max(self.TRIM_AT, 2 * len(self._events))
