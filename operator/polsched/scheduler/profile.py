"""A profile: one policy's scheduler inside the engine (its pipeline, queue, event
recorder, counters and shadows), as kube-scheduler's profile.Map holds one framework per
schedulerName. The engine keeps the profiles and dispatches their cycles;
scheduler.schedule_one runs an attempt of one of them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from polsched.framework.runtime import Pipeline
from polsched.framework.types import PodInfo
from polsched.scheduler import metrics
from polsched.scheduler import queue as q
from polsched.scheduler.pipelines import pod_group_key_fn, pod_group_lookup_fn
from polsched.scheduler.recorder import EventRecorder
from polsched.scheduler.shadow import ShadowSet

if TYPE_CHECKING:
    from polsched.api.model import Policy


@dataclass
class Counters:
    """Monotonic counters persisted in the policy's status across restarts."""

    binds_total: int = 0
    unschedulable_attempts: int = 0
    last_bind_time: str | None = None
    # Preemptions started (a node nominated, victims evicted) and their victims.
    preemptions_total: int = 0
    preemption_victims: int = 0
    # "ns/name of the preemptor on NODE evicting ns/name, ..." of the latest preemption.
    last_preemption: str | None = None

    def catch_up(self, other: Counters) -> None:
        """Take the persisted counts where they are ahead: never move a counter back."""
        self.binds_total = max(self.binds_total, other.binds_total)
        self.unschedulable_attempts = max(self.unschedulable_attempts,
                                          other.unschedulable_attempts)
        self.last_bind_time = self.last_bind_time or other.last_bind_time
        self.preemptions_total = max(self.preemptions_total, other.preemptions_total)
        self.preemption_victims = max(self.preemption_victims, other.preemption_victims)


class Profile:
    """One policy's queue, pipeline, recorder and dispatch state."""

    def __init__(self, policy: Policy, pipeline: Pipeline, recorder: EventRecorder,
                 counters: Counters, journal: q.EventJournal | None = None) -> None:
        self.name = policy.scheduler_name
        self.policy = policy
        self.pipeline = pipeline
        self.recorder = recorder
        self.counters = counters
        self.queue = q.SchedulingQueue(journal=journal)
        self.queue.configure(pipeline.pre_enqueue_plugins, pipeline.queueing_hints(),
                             pod_group_key_fn(pipeline), pod_group_lookup_fn(pipeline))
        self.runnable = asyncio.Event()
        # Started: its pods are queued and the dispatcher takes its cycles (Engine._run).
        self.started = False
        self.stopped = False
        # In the dispatcher's ready deque; a cycle of an awaiting pipeline runs (its task).
        self.ready = False
        self.task: asyncio.Task[None] | None = None
        # When the queue's next backoff or leftover flush is due (the dispatcher's timer).
        self.due: asyncio.TimerHandle | None = None
        # Pending pods of namespaces the policy's namespaceSelector does not select.
        self.blocked: dict[str, PodInfo] = {}
        self.warned: set[str] = set()
        # Shadow policies deciding beside this one (scheduler.shadow).
        self.shadows = ShadowSet()
        # The pipeline applied last until it decides its first pod (the end of a hot
        # reload as users feel it); None once it has.
        self.undecided: Pipeline | None = pipeline
        self.applied_at = time.monotonic()  # when `undecided` was swapped in

    def namespace_selected(self, pod: PodInfo, namespaces: Mapping[str, Mapping[str, str]]
                           ) -> bool:
        sel = self.policy.namespace_selector
        if sel is None:
            return True
        labels = namespaces.get(pod.namespace)
        if labels is None:  # not seen yet: its automatic name label at least
            labels = {"kubernetes.io/metadata.name": pod.namespace}
        return sel(labels)

    def report_pending(self) -> None:
        """scheduler_pending_pods for this scheduler, from the queue's O(1) sizes; called
        after each change to the queue. Pods of namespaces the namespaceSelector leaves
        out count as gated: like pods with scheduling gates, they are never attempted."""
        active, backoff, unschedulable, gated = self.queue.sizes()
        name = self.name
        metrics.pending_pods(name, metrics.ACTIVE, active)
        metrics.pending_pods(name, metrics.BACKOFF, backoff)
        metrics.pending_pods(name, metrics.UNSCHEDULABLE_QUEUE, unschedulable)
        metrics.pending_pods(name, metrics.GATED, len(self.blocked) + gated)
        pending, incomplete = self.queue.group_sizes()
        metrics.pending_pods(name, metrics.PENDING, pending)
        metrics.pending_pods(name, metrics.INCOMPLETE, incomplete)
