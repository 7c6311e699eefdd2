"""A profile: one policy's scheduler inside the engine (its pipeline, queue, event
recorder, counters and shadows), as kube-scheduler's profile.Map holds one framework per
schedulerName. The engine keeps the profiles and dispatches their cycles;
scheduler.schedule_one runs an attempt of one of them.

A profile changes only through its own methods: what an attempt records (an error, a
rejection, a bind, a preemption, the first decision of a pipeline), what the engine
queues or parks, and a hot reload's swap. Its queue reports its own sizes (on_sizes):
the scheduler_pending_pods gauges follow every change without their callers' help.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from polsched.framework import pod_bounds
from polsched.framework.runtime import Pipeline
from polsched.framework.types import PodInfo
from polsched.objects import Json
from polsched.scheduler import metrics
from polsched.scheduler.batch import OpportunisticBatch, new_batch
from polsched.scheduler.pipelines import pod_group_key_fn, pod_group_lookup_fn
from polsched.scheduler.queue.journal import EventJournal
from polsched.scheduler.queue.scheduling_queue import SchedulingQueue
from polsched.scheduler.queue.types import GroupOutcome, QueuedPod
from polsched.scheduler.recorder import (
    REASON_SCHEDULER_ERROR,
    REASON_UNSCHEDULABLE,
    WARNING,
    EventRecorder,
    rfc3339,
)
from polsched.scheduler.shadow import ShadowSet, Verdicts

if TYPE_CHECKING:
    from polsched.api.model import Policy
    from polsched.framework.types import Snapshot

log = logging.getLogger(__name__)


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
                 counters: Counters, journal: EventJournal | None = None) -> None:
        self.name = policy.scheduler_name
        self.policy = policy
        self.pipeline = pipeline
        # OpportunisticBatching's kept ranking, for the pipeline it was kept with.
        self._batch: OpportunisticBatch | None = None
        self.recorder = recorder
        self.counters = counters
        self.queue = SchedulingQueue(journal=journal)
        self.queue.configure(pipeline.pre_enqueue_plugins, pipeline.queueing_hints(),
                             pod_group_key_fn(pipeline), pod_group_lookup_fn(pipeline))
        self.queue.on_sizes = self.report_pending
        self.runnable = asyncio.Event()
        # Started: its pods are queued and the dispatcher takes its cycles (Engine._run).
        self.started = False
        self.stopped = False
        # In the dispatcher's ready heap; a cycle of an awaiting pipeline runs (its task).
        self.ready = False
        # The loop time this policy's cycles were charged, in ns (Engine._run's fair
        # share): the ready policy charged least goes next.
        self.vtime = 0
        self.task: asyncio.Task[None] | None = None
        # When the queue's next backoff or leftover flush is due (the dispatcher's timer).
        self.due: asyncio.TimerHandle | None = None
        # Pending pods of namespaces the policy's namespaceSelector does not select.
        self.blocked: dict[str, PodInfo] = {}
        # Pending pods over framework.pod_bounds' bounds, never attempted: key -> the
        # message their FailedScheduling and PodScheduled condition say.
        self.refused: dict[str, str] = {}
        self.warned: set[str] = set()
        # Shadow policies deciding beside this one (scheduler.shadow).
        self.shadows = ShadowSet()
        # The pipeline applied last until it decides its first pod (the end of a hot
        # reload as users feel it); None once it has.
        self.undecided: Pipeline | None = pipeline
        self.applied_at = time.monotonic()  # when `undecided` was swapped in

    def namespace_selected(self, pod: PodInfo, namespaces: Mapping[str, Mapping[str, str]]
                           ) -> bool:
        return namespace_selected(self.policy, pod, namespaces)

    def report_pending(self) -> None:
        """scheduler_pending_pods for this scheduler, from the queue's O(1) sizes; called
        by the queue after each change (on_sizes) and when the parked pods change. Pods
        of namespaces the namespaceSelector leaves out count as gated: like pods with
        scheduling gates, they are never attempted."""
        active, backoff, unschedulable, gated = self.queue.sizes()
        pending, incomplete = self.queue.group_sizes()
        sizes = (active, backoff, unschedulable,
                 len(self.blocked) + len(self.refused) + gated, pending, incomplete)
        name = self.name
        for queue, n in zip(_PENDING_QUEUES, sizes, strict=True):
            metrics.pending_pods(name, queue, n)
        metrics.unschedulable_pool(name, self.queue.unschedulable_pods)

    def batch_for(self, pipeline: Pipeline) -> OpportunisticBatch | None:
        """The profile's OpportunisticBatch for `pipeline` (a new one after a hot reload,
        as upstream's new framework; batch.new_batch says when there is none)."""
        if self._batch is None or self._batch.pipeline is not pipeline:
            self._batch = new_batch(pipeline, self.name)
            if self._batch is None:
                return None
        return self._batch

    # -- what the engine changes ---------------------------------------------------------
    def swap(self, policy: Policy, pipeline: Pipeline) -> None:
        """A hot reload: the new policy's pipeline replaces the old one (one reference;
        a cycle under way keeps the pipeline it decides with)."""
        self.policy = policy
        self.pipeline = pipeline
        self.undecided = pipeline
        self.applied_at = time.monotonic()
        self.queue.configure(pipeline.pre_enqueue_plugins, pipeline.queueing_hints(),
                             pod_group_key_fn(pipeline), pod_group_lookup_fn(pipeline))

    def enqueue(self, pod: PodInfo, namespaces: Mapping[str, Mapping[str, str]]) -> None:
        """Queue `pod`, or park it among `blocked` when the policy's namespaceSelector
        does not select its namespace (warned once, unless a PreEnqueue plugin gates it).
        A pod over the bounds of framework.pod_bounds is refused first, before any
        PreEnqueue plugin: kept among `refused`, never attempted, with a FailedScheduling
        and PodScheduled=False naming the field (once per message)."""
        over = pod_bounds.violation(pod.spec)
        refused_before = self.refused.pop(pod.key, None)
        was_parked = self.blocked.pop(pod.key, None) is not None
        if over:
            self.refused[pod.key] = over
            if refused_before != over:
                metrics.pod_refused(self.name)
                self.recorder.failed_scheduling(pod, over)
                self.recorder.set_pod_scheduled_false(pod, REASON_UNSCHEDULABLE, over)
            self.queue.delete(pod.key, pod.uid)
            # Parked and refused pods both count as gated: the count moved only if the
            # pod was neither before.
            changed = refused_before is None and not was_parked
        else:
            selected = self.namespace_selected(pod, namespaces)
            if selected:
                self.queue.add(pod)
            else:
                self.queue.delete(pod.key, pod.uid)
                self.blocked[pod.key] = pod
                # A gated pod is left alone, even by this warning (SchedulingGates): the
                # queue's PreEnqueue says which, as it would if the pod were queued.
                if pod.key not in self.warned and not self.queue.gating_plugin(pod):
                    self.warned.add(pod.key)
                    self.recorder.event(
                        pod, WARNING, "FailedScheduling", "Scheduling",
                        not_selected_message(self.policy, pod))
            # The parked pods (counted as gated) changed.
            changed = selected is was_parked or refused_before is not None
        if changed:
            self.report_pending()

    def unpark(self, namespace: str | None = None) -> list[PodInfo]:
        """The parked pods (of `namespace`, or all) leave `blocked`, for enqueue() to
        decide again (the namespaceSelector or the namespace's labels changed); enqueue
        reports the sizes."""
        pods = [p for p in self.blocked.values()
                if namespace is None or p.namespace == namespace]
        for pod in pods:
            del self.blocked[pod.key]
        return pods

    def remove_pending(self, pod: PodInfo) -> None:
        """The pod is gone (deleted, bound by another, or no longer ours): out of the queue
        and the parked pods."""
        self.blocked.pop(pod.key, None)
        self.refused.pop(pod.key, None)
        self.warned.discard(pod.key)
        self.queue.delete(pod.key, pod.uid)  # reports the sizes, the parked pods' too

    # -- what an attempt records (scheduler.schedule_one) -------------------------------
    def scheduling_error(self, qp: QueuedPod, message: str) -> None:
        """handleSchedulingFailure for an error: backoff, FailedScheduling and
        PodScheduled False with reason SchedulerError."""
        self.queue.add_backoff(qp)
        self.recorder.failed_scheduling(qp.pod, message)
        self.recorder.set_pod_scheduled_false(qp.pod, REASON_SCHEDULER_ERROR, message)

    def unschedulable(self, qp: QueuedPod, rejected_by: Iterable[str], message: str,
                      nominated: str | None) -> None:
        """handleSchedulingFailure for a rejection: counted, parked among the
        unschedulable pods keyed by the plugins that rejected it, FailedScheduling and
        PodScheduled False with reason Unschedulable (and the nomination, None: kept)."""
        self.counters.unschedulable_attempts += 1
        self.queue.add_unschedulable(qp, rejected_by)
        self.recorder.failed_scheduling(qp.pod, message)
        self.recorder.set_pod_scheduled_false(qp.pod, REASON_UNSCHEDULABLE, message,
                                              nominated)

    def bound(self, qp: QueuedPod, assumed: PodInfo, node: str) -> None:
        """The binding cycle bound the pod: it leaves the queue, counted, the Scheduled
        event."""
        self.queue.done(qp)
        self.counters.binds_total += 1
        self.counters.last_bind_time = rfc3339(time.time())
        self.recorder.scheduled(assumed, node)

    def done(self, qp: QueuedPod) -> None:
        """The attempt ended without a requeue (the pod went away or was bound elsewhere)."""
        self.queue.done(qp)

    def restore(self, qp: QueuedPod) -> None:
        """The attempt did not run (paused, or its bind never sent): back as it was."""
        self.queue.restore(qp)

    def activate(self, keys: Iterable[str]) -> int:
        """These pods go to activeQ (a failed preemption call retries them at once)."""
        return self.queue.activate(keys)

    def retry(self, pod: PodInfo) -> bool:
        """Take the queued `pod` out to be queued again at once; False when not queued."""
        if pod.key not in self.queue:
            return False
        self.queue.delete(pod.key, pod.uid)
        return True

    def group_done(self, key: str, outcome: GroupOutcome) -> None:
        """The pod group's cycle ended (AddAttemptedPodGroupIfNeeded)."""
        self.queue.group_done(key, outcome)

    def preemption_started(self, preemptor: str, victims: Iterable[PodInfo]) -> None:
        """Count a preemption (its victims are being evicted) for the policy's status;
        `preemptor` says who on which node ("ns/name on NODE", "pod group ns/name")."""
        keys = [v.key for v in victims]
        c = self.counters
        c.preemptions_total += 1
        c.preemption_victims += len(keys)
        c.last_preemption = f"{preemptor} evicting " + ", ".join(keys)

    def set_pod_group_condition(self, namespace: str, name: str, patch: Json) -> None:
        """Patch the PodGroup's PodGroupInitiallyScheduled condition."""
        self.recorder.set_pod_group_condition(namespace, name, patch)

    async def nominate_for_binding(self, pod: PodInfo, node: str) -> None:
        """NominatedNodeNameForExpectation: the pod nominated to its node before PreBind."""
        await self.recorder.nominate_for_binding(pod, node)

    def first_decision(self, pod: PodInfo, node: str | None, queued_at: float) -> None:
        """The pipeline of the policy's generation made its first decision (a node chosen
        or none fits): the hot reload is in effect for users. Logged and exported as
        polsched_policy_first_decision_{generation,timestamp_seconds} (wall clock: the
        bench compares it with the time its PATCH was answered), and how long after the
        swap (polsched_policy_first_decision_wait_seconds: the rest of a reload's time was
        spent before the engine had the pipeline). Of that wait, the part before the pod
        it decided entered the queue (`queued_at`, the queue's monotonic clock) had no pod
        to decide: polsched_policy_first_decision_idle_seconds."""
        self.undecided = None
        generation = self.policy.generation
        now = time.time()
        wait = time.monotonic() - self.applied_at
        metrics.first_decision(self.policy.name, generation, now, wait,
                               idle=min(max(0.0, queued_at - self.applied_at), wait))
        log.info("SchedulingPolicy %s generation %d decided its first pod %s (%s)",
                 self.policy.name, generation, pod.key,
                 f"node {node}" if node is not None else "unschedulable")

    # -- the shadows deciding beside the policy (scheduler.shadow) ---------------------
    async def shadow_verdicts(self, pod: PodInfo, snapshot: Snapshot) -> Verdicts | None:
        """The shadows' decisions for `pod` (None: no shadow)."""
        return await self.shadows.decide(pod, snapshot) if self.shadows else None

    def shadows_unschedulable(self, pod: PodInfo, verdicts: Verdicts) -> None:
        self.shadows.unschedulable(pod, verdicts, rfc3339(time.time()))

    def shadows_assumed(self, pod: PodInfo, verdicts: Verdicts) -> None:
        self.shadows.assumed(pod, verdicts)

    def shadows_bind_ended(self, pod: PodInfo, node: str | None) -> None:
        """The attempt's bind ended: on `node`, or None (nothing bound, nothing compared)."""
        if self.shadows:
            self.shadows.bind_ended(pod, node, rfc3339(time.time()) if node else "")


# scheduler_pending_pods' queue label of each of report_pending's sizes, in order.
_PENDING_QUEUES = (metrics.ACTIVE, metrics.BACKOFF, metrics.UNSCHEDULABLE_QUEUE,
                   metrics.GATED, metrics.PENDING, metrics.INCOMPLETE)


def namespace_selected(policy: Policy, pod: PodInfo,
                       namespaces: Mapping[str, Mapping[str, str]]) -> bool:
    """Whether `policy` schedules `pod` at all (spec.namespaceSelector over its namespace's
    labels): the engine queues the pods it selects and parks the others; `polsched
    simulate` asks the same."""
    sel = policy.namespace_selector
    if sel is None:
        return True
    labels = namespaces.get(pod.namespace)
    if labels is None:  # not seen yet: its automatic name label at least
        labels = {"kubernetes.io/metadata.name": pod.namespace}
    return sel(labels)


def not_selected_message(policy: Policy, pod: PodInfo) -> str:
    """The FailedScheduling warning a pod parked by the namespaceSelector gets."""
    return (f'namespace "{pod.namespace}" is not selected by spec.namespaceSelector of '
            f'SchedulingPolicy "{policy.name}": the pod stays Pending; label the namespace '
            "or change the selector")
