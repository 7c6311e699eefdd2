"""Engine: one scheduler per SchedulingPolicy, all sharing one cluster cache.

The operator builds on this surface: `apply` a loaded Policy to start its scheduler or
hot-swap its pipeline, `remove` it, `set_leader`, read `stats`, hear `on_change`.

Per policy, one task runs kube-scheduler's scheduleOne (schedule_one.go): pop the next pod,
run the pipeline against the cache's snapshot, assume the pod on the chosen node and hand
the bind to the Binder, which runs in the background. A failed attempt records
FailedScheduling and PodScheduled=False and parks the pod in the queue. Per pod the only
API calls are the bind and the event (plus the condition patch on failure).

A swap builds the new Pipeline off to the side and replaces one reference: a cycle that
is under way finishes on the pipeline it started with. Awaiting an extender lets other
policies' cycles run, so when a pipeline has extenders the chosen node is filtered again
right before assuming (two policies never overcommit a node).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from polsched.cluster.cache import CacheListener, ClusterCache
from polsched.cluster.client import ApiClient
from polsched.cluster.node_metrics import DEFAULT_INTERVAL_SECONDS, NodeMetricsWatcher
from polsched.framework import events as ev
from polsched.framework.cycle_state import CycleState
from polsched.framework.interfaces import Handle
from polsched.framework.listers import Kind
from polsched.framework.nominator import Nominator
from polsched.framework.pipeline import (
    Extender,
    FitError,
    Pipeline,
    PipelineError,
    PostFilterResult,
)
from polsched.framework.status import SUCCESS, Code, Status
from polsched.framework.types import Json, NodeInfo, PodInfo
from polsched.scheduler import binding_cycle as bc
from polsched.scheduler import load_status, metrics
from polsched.scheduler import queue as q
from polsched.scheduler.binder import Binder, BindOutcome
from polsched.scheduler.events import (
    REASON_SCHEDULER_ERROR,
    REASON_UNSCHEDULABLE,
    WARNING,
    EventBudget,
    EventRecorder,
    rfc3339,
)
from polsched.scheduler.pipelines import build_pipeline
from polsched.scheduler.preemption import Executor
from polsched.scheduler.shadow import DEFAULT_BUDGET, ShadowSet, ShadowStats

if TYPE_CHECKING:
    from polsched.api.model import Policy

log = logging.getLogger(__name__)

# How many times a decision is retried when its node filled up while extenders answered.
_RECHECK_RETRIES = 3
# Annotations the Binding carries when Engine(annotate_decisions=True); the API server
# copies a Binding's annotations onto the pod (pkg/registry/core/pod/storage
# setPodNodeAndMetadata), so the record costs no extra API call. The scorer whose weighted
# score put the chosen node furthest ahead of the runner-up, "" when the node was the only
# feasible one or the best totals tied; and "feasible/evaluated" nodes.
DECIDING_SCORER_ANNOTATION = "polsched.io/deciding-scorer"
FEASIBLE_NODES_ANNOTATION = "polsched.io/feasible-nodes"
# stats("shadow:NAME"): the shadow policy NAME's agreement (":" is in no schedulerName).
SHADOW_PREFIX = "shadow:"


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


@dataclass(frozen=True)
class SchedulerStats:
    scheduler_name: str
    bound_pods: int
    pending_pods: int
    binds_total: int
    unschedulable_attempts: int
    last_bind_time: str | None
    observed_generation: int
    pipeline: dict[str, list[str]] = field(default_factory=dict)
    paused: bool = False
    leading: bool = False
    preemptions_total: int = 0
    preemption_victims: int = 0
    last_preemption: str | None = None
    # A shadow policy's agreement (ShadowStats.to_status()); the counts above are unused.
    shadow: dict[str, Any] | None = None
    # For a policy with load-aware scorers: (available, reason, message) of its
    # MetricsAvailable condition (scheduler.load_status); None for the others.
    node_metrics: tuple[bool, str, str] | None = None


class _Scheduler:
    """One policy's queue, pipeline, recorder and loop."""

    def __init__(self, policy: Policy, pipeline: Pipeline, recorder: EventRecorder,
                 counters: Counters, journal: q.EventJournal | None = None) -> None:
        self.name = policy.scheduler_name
        self.policy = policy
        self.pipeline = pipeline
        self.recorder = recorder
        self.counters = counters
        self.queue = q.SchedulingQueue(journal=journal)
        self.queue.configure(pipeline.pre_enqueue_plugins, pipeline.queueing_hints())
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
        # The pipeline applied last until it decides its first pod (Engine._first_decision:
        # the end of a hot reload as users feel it); None once it has.
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


class Engine(CacheListener):
    def __init__(self, client: ApiClient, *, identity: str = "polsched",
                 bind_concurrency: int = 96, annotate_decisions: bool = False,
                 shadow_budget: float = DEFAULT_BUDGET,
                 cache: ClusterCache | None = None,
                 node_metrics_interval: float = DEFAULT_INTERVAL_SECONDS) -> None:
        self.client = client
        self.shadow_budget = shadow_budget
        self.identity = identity
        self.annotate_decisions = annotate_decisions
        # A cache of the same client whose lists are already out (controller.boot), or
        # a new one; either way start() syncs it.
        self.cache = cache if cache is not None else ClusterCache(client)
        self.cache.add_listener(self)
        self.binder = Binder(client, concurrency=bind_concurrency)
        # Event and condition writes in flight, all policies' recorders together: as many
        # as binds. Every bound pod's Scheduled event follows its bind; with 16 against 96
        # binds they were answered at a sixth of the binds' rate (by the loop or the API
        # server alike) and fell behind (13 229 of 30 000 at scale, bench/NOTES.md).
        self._event_concurrency = max(bind_concurrency, 1)
        self._event_writes = asyncio.Semaphore(self._event_concurrency)
        # Event writes waiting, across policies: bounded as one broadcaster's queue.
        self._event_budget = EventBudget()
        # What every policy's plugins are built with (framework.Handle).
        # Pods that Permit plugins hold, by uid, across policies (uids are unique).
        self.waiting_pods: dict[str, bc.WaitingPod] = {}
        # Pods nominated to nodes by preemption (or by status.nominatedNodeName), counted
        # by every policy's filters; and preemption's API calls, off the scheduling loop.
        self.nominator = Nominator()
        self.preemption = Executor(client, self.nominator, self.cache.pods, self.waiting_pods)
        # Preemptors popped while their victims were still going, out of the queue until
        # the cache shows them gone (DefaultPreemption's PreEnqueue gate): uid -> pod.
        self._gated: dict[str, tuple[_Scheduler, PodInfo]] = {}
        # Node usage for the load-aware scorers: one watcher for every policy, polling
        # only while one of their plugins wants it.
        self.node_metrics = NodeMetricsWatcher(client, interval=node_metrics_interval)
        self.node_metrics.on_change = self._node_metrics_changed
        self.node_metrics.on_request = metrics.node_metrics_request
        self.handle = Handle(listers=self.cache.listers, api=client,
                             waiting_pods=self.waiting_pods, nominator=self.nominator,
                             load=self.node_metrics)
        self._schedulers: dict[str, _Scheduler] = {}
        # The cluster events kept for pods in flight, once for every policy's queue.
        self._journal = q.EventJournal()
        # The scheduling loop of every policy (_run): the policies whose queue may have a
        # pod to pop, in turn.
        self._ready: collections.deque[_Scheduler] = collections.deque()
        self._wake_loop = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None
        # Leadership: a default for every scheduler and per-name overrides. A single
        # replica leads by default; an HA operator calls set_leader(None, False) first.
        self._leading_default = True
        self._leading: dict[str, bool] = {}
        self._callbacks: list[Callable[[str], None]] = []
        self._background: set[asyncio.Task[Any]] = set()
        self._started = False

    # -- lifecycle ----------------------------------------------------------------------
    async def start(self) -> None:
        """Start the watches; return once the cache has synced and schedulers run."""
        await self.cache.start()
        self._started = True
        # One pass over the cache's pods for every scheduler applied before the sync, not
        # one each (50 policies: 50 passes over every pod at start-up).
        pending = self._pending_by_scheduler()
        self._loop_task = asyncio.get_running_loop().create_task(
            self._run(), name="polsched-scheduling-loop")
        self.node_metrics.start()
        for s in self._schedulers.values():
            self._start_scheduler(s, pending.get(s.name, ()))

    def loop_alive(self) -> bool:
        """False once the scheduling loop has ended while the engine runs (a fault it
        did not catch): the process's /healthz says so (controller.health)."""
        task = self._loop_task
        return task is None or not task.done()

    async def stop(self) -> None:
        for s in self._schedulers.values():
            self._stop_scheduler(s)
        tasks = [s.task for s in self._schedulers.values() if s.task is not None]
        if self._loop_task is not None:
            self._loop_task.cancel()
            tasks.append(self._loop_task)
            self._loop_task = None
        for t in tasks:
            if t.done():  # ended on its own (a fault /healthz reported): stop the rest
                if not t.cancelled():
                    t.exception()
                continue
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        await self.node_metrics.close()
        await self.binder.close()
        await self.preemption.close()
        for s in self._schedulers.values():
            await s.recorder.close()
        for t in list(self._background):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        await self.cache.stop()
        self._started = False

    # -- the operator's surface -----------------------------------------------------------
    def apply(self, policy: Policy, *, extenders: Sequence[Extender] = (),
              counters: Counters | None = None) -> None:
        """Start a scheduler for policy.scheduler_name, or swap its pipeline atomically."""
        # The one construction `polsched explain` shares, so it explains this pipeline; the
        # plugins read the live cache's listers and PreBind writes through the client. A
        # reload takes over the running pipeline's unchanged plugins, warm.
        name = policy.scheduler_name
        s = self._schedulers.get(name)
        # Plugins equal to another policy's are shared with it (build_pipeline's `share`).
        pipeline = build_pipeline(policy, self.handle, extenders,
                                  reuse=s.pipeline if s is not None else None,
                                  share=[o.pipeline for n, o in self._schedulers.items()
                                         if n != name])
        if s is None:
            recorder = EventRecorder(self.client, name, concurrency=self._event_concurrency,
                                     shared=self._event_writes, budget=self._event_budget)
            s = _Scheduler(policy, pipeline, recorder,
                           Counters(**vars(counters)) if counters else Counters(),
                           self._journal)
            self._schedulers[name] = s
            self._update_runnable(s)
            if self._started:
                self._start_scheduler(s)
        else:
            s.policy = policy
            s.pipeline = pipeline  # the swap: one reference
            s.undecided = pipeline
            s.applied_at = time.monotonic()
            s.queue.configure(pipeline.pre_enqueue_plugins, pipeline.queueing_hints())
            self._reset(s, counters)
        self._changed(name)

    def reseed(self, scheduler_name: str, counters: Counters) -> None:
        """As apply() with the policy that runs: the counters (a new leader's, never
        moved back) and the queue as after a policy change, without building the same
        pipeline again (50 builds on every lease gained with 50 policies)."""
        s = self._schedulers.get(scheduler_name)
        if s is None:
            raise KeyError(scheduler_name)
        self._reset(s, counters)
        self._changed(scheduler_name)

    def _reset(self, s: _Scheduler, counters: Counters | None) -> None:
        if counters is not None:  # never let a stale status move a counter back
            s.counters.binds_total = max(s.counters.binds_total, counters.binds_total)
            s.counters.unschedulable_attempts = max(s.counters.unschedulable_attempts,
                                                    counters.unschedulable_attempts)
            s.counters.last_bind_time = s.counters.last_bind_time or counters.last_bind_time
            s.counters.preemptions_total = max(s.counters.preemptions_total,
                                               counters.preemptions_total)
            s.counters.preemption_victims = max(s.counters.preemption_victims,
                                                counters.preemption_victims)
        self._update_runnable(s)
        s.queue.move(ev.EVENT_POLICY_CHANGE)
        blocked, s.blocked = s.blocked, {}
        for pod in blocked.values():  # the namespaceSelector may select them now
            self._enqueue(s, pod)
        self._report_pending(s)

    def remove(self, scheduler_name: str) -> None:
        """Stop the scheduler; its pods stay Pending, untouched."""
        s = self._schedulers.pop(scheduler_name, None)
        if s is None:
            return
        self._stop_scheduler(s)
        self._spawn(s.recorder.close())
        metrics.forget_profile(scheduler_name)
        metrics.forget_policy(s.policy.name)

    def apply_shadow(self, policy: Policy, live_policy: str, live_scheduler: str, *,
                     extenders: Sequence[Extender] = ()) -> None:
        """Attach (or swap) shadow `policy` to the scheduler of `live_scheduler`; it
        decides beside it and never binds (scheduler.shadow)."""
        from polsched.scheduler.shadow import Shadow

        self.remove_shadow(policy.name)
        s = self._schedulers.get(live_scheduler)
        if s is None:
            raise KeyError(live_scheduler)
        s.shadows.budget = self.shadow_budget
        s.shadows.shadows[policy.name] = Shadow(policy, live_policy, self.handle, extenders)

    def remove_shadow(self, name: str) -> None:
        for s in self._schedulers.values():
            s.shadows.shadows.pop(name, None)

    def shadow_stats(self, name: str) -> ShadowStats | None:
        for s in self._schedulers.values():
            shadow = s.shadows.shadows.get(name)
            if shadow is not None:
                return shadow.stats
        return None

    def set_leader(self, scheduler_name: str | None, leading: bool) -> None:
        """Only a leader binds. None: every scheduler (and the default for new ones).
        Losing leadership drops the binds still queued before anything else runs: the
        next leader binds those pods (issue 11)."""
        if not leading:
            self.binder.drop_queued(scheduler_name)
        if scheduler_name is None:
            self._leading_default = leading
            self._leading.clear()
        else:
            self._leading[scheduler_name] = leading
        for s in self._schedulers.values():
            self._update_runnable(s)

    def stats(self, scheduler_name: str) -> SchedulerStats:
        if scheduler_name.startswith(SHADOW_PREFIX):  # a shadow policy's StatusView.running
            shadow = self.shadow_stats(scheduler_name[len(SHADOW_PREFIX):])
            if shadow is None:
                raise KeyError(scheduler_name)
            return SchedulerStats("", 0, 0, 0, 0, None, 0, shadow=shadow.to_status())
        s = self._schedulers.get(scheduler_name)
        bound = self.cache.bound_pods(scheduler_name)
        pending = self.cache.pending_pods(scheduler_name)
        if s is None:
            return SchedulerStats(scheduler_name, bound, pending, 0, 0, None, 0)
        c = s.counters
        return SchedulerStats(
            scheduler_name, bound, pending, c.binds_total, c.unschedulable_attempts,
            c.last_bind_time, s.policy.generation, s.pipeline.describe(),
            paused=s.policy.paused, leading=self._is_leading(scheduler_name),
            preemptions_total=c.preemptions_total, preemption_victims=c.preemption_victims,
            last_preemption=c.last_preemption,
            node_metrics=load_status.condition(self.node_metrics, s.pipeline,
                                               self.cache.snapshot))

    def pipeline(self, scheduler_name: str) -> Pipeline:
        """The pipeline a scheduler runs now (KeyError if none)."""
        return self._schedulers[scheduler_name].pipeline

    def on_change(self, callback: Callable[[str], None]) -> None:
        """`callback(schedulerName)` whenever that scheduler's stats change."""
        self._callbacks.append(callback)

    def scheduler_names(self) -> list[str]:
        return sorted(self._schedulers)

    # -- internals ------------------------------------------------------------------------
    def _is_leading(self, name: str) -> bool:
        return self._leading.get(name, self._leading_default)

    def _update_runnable(self, s: _Scheduler) -> None:
        if self._is_leading(s.name) and not s.policy.paused:
            s.runnable.set()
            self._mark_ready(s)
        else:
            s.runnable.clear()

    def _node_metrics_changed(self) -> None:
        # Nodes gained or lost fresh metrics: the policies that read them have a new
        # MetricsAvailable condition to write.
        for name, s in self._schedulers.items():
            if load_status.reads_load(self.node_metrics, s.pipeline):
                self._changed(name)

    def _changed(self, name: str) -> None:
        for cb in self._callbacks:
            try:
                cb(name)
            except Exception:
                log.exception("on_change callback failed")

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _pending_by_scheduler(self, name: str | None = None) -> dict[str, list[PodInfo]]:
        """The cache's pods that wait for a scheduler (of `name` only, if given), by
        scheduler name, in the cache's order."""
        out: dict[str, list[PodInfo]] = {}
        is_assumed = self.cache.is_assumed
        for pod in list(self.cache.pods.values()):
            if (name is None or pod.scheduler_name == name) and not pod.node_name \
                    and not pod.terminal and not is_assumed(pod.key):
                out.setdefault(pod.scheduler_name, []).append(pod)
        return out

    def _start_scheduler(self, s: _Scheduler, pending: Sequence[PodInfo] | None = None) -> None:
        if pending is None:
            pending = self._pending_by_scheduler(s.name).get(s.name, ())
        for pod in pending:
            self._enqueue(s, pod)
        self._report_pending(s)
        s.queue.on_wake = lambda: self._mark_ready(s)
        s.started = True
        self._mark_ready(s)

    def _stop_scheduler(self, s: _Scheduler) -> None:
        s.queue.close()
        s.stopped = True
        if s.due is not None:
            s.due.cancel()
            s.due = None
        if s.task is not None:
            s.task.cancel()

    def _report_pending(self, s: _Scheduler) -> None:
        """scheduler_pending_pods for this scheduler, from the queue's O(1) sizes; called
        after each change to the queue. Pods of namespaces the namespaceSelector leaves
        out count as gated: like pods with scheduling gates, they are never attempted."""
        active, backoff, unschedulable, gated = s.queue.sizes()
        name = s.name
        metrics.pending_pods(name, metrics.ACTIVE, active)
        metrics.pending_pods(name, metrics.BACKOFF, backoff)
        metrics.pending_pods(name, metrics.UNSCHEDULABLE_QUEUE, unschedulable)
        metrics.pending_pods(name, metrics.GATED, len(s.blocked) + gated)

    def _move(self, event: ev.ClusterEvent, old: Any = None, new: Any = None,
              pre_check: Callable[[PodInfo], bool] | None = None) -> None:
        """MoveAllToActiveOrBackoffQueue on every scheduler's queue; the event is kept
        once for the pods in flight of all (EventJournal), not once per queue."""
        self._journal.append(event, old, new)
        for s in self._schedulers.values():
            # A journaled move() on a queue without unschedulable pods returns 0 at once.
            if s.queue.unschedulable_pods and s.queue.move(event, old, new, pre_check,
                                                            journaled=True):
                self._report_pending(s)

    def _enqueue(self, s: _Scheduler, pod: PodInfo) -> None:
        if not s.namespace_selected(pod, self.cache.namespaces):
            s.queue.delete(pod.key, pod.uid)
            s.blocked[pod.key] = pod
            # A gated pod is left alone, even by this warning (SchedulingGates).
            gated = any(not p.pre_enqueue(pod).ok for p in s.pipeline.pre_enqueue_plugins)
            if pod.key not in s.warned and not gated:
                s.warned.add(pod.key)
                s.recorder.event(
                    pod, WARNING, "FailedScheduling", "Scheduling",
                    f'namespace "{pod.namespace}" is not selected by '
                    f'spec.namespaceSelector of SchedulingPolicy "{s.policy.name}": '
                    "the pod stays Pending; label the namespace or change the selector")
            return
        s.blocked.pop(pod.key, None)
        s.queue.add(pod)

    # CacheListener ----------------------------------------------------------------------
    def pending_pod_changed(self, pod: PodInfo, old: PodInfo | None) -> None:
        self.nominator.update(pod)
        s = self._schedulers.get(pod.scheduler_name)
        if s is not None and s.started:
            self._enqueue(s, pod)
            self._report_pending(s)

    def pending_pod_removed(self, pod: PodInfo) -> None:
        self.nominator.remove(pod.key)
        self.preemption.forget(pod.uid)
        self._gated.pop(pod.uid, None)
        s = self._schedulers.get(pod.scheduler_name)
        if s is not None:
            s.queue.delete(pod.key, pod.uid)
            s.blocked.pop(pod.key, None)
            waiting = self.waiting_pods.get(pod.uid)
            if waiting is not None:  # deletePodFromSchedulingQueue: RejectWaitingPod
                waiting.reject("", "removed")
            s.warned.discard(pod.key)
            self._report_pending(s)

    # Each cluster event moves the unschedulable pods that one of their rejecting plugins'
    # queueing hints says it may help (eventhandlers.go).
    def assigned_pod_added(self, pod: PodInfo) -> None:
        self._move(ev.ASSIGNED_POD_ADD, None, pod)

    def assigned_pod_updated(self, pod: PodInfo, old: PodInfo) -> None:
        for e in ev.pod_update_events(pod, old, target=False):
            self._move(e, old, pod)
        if self._gated and (pod.raw.get("metadata") or {}).get("deletionTimestamp"):
            self._release_gated()  # a victim terminating

    def assigned_pod_removed(self, pod: PodInfo) -> None:
        self._move(ev.ASSIGNED_POD_DELETE, pod, None)
        self._release_gated()

    def _release_gated(self) -> None:
        """Preemptors whose victims the cache now shows gone (or terminating) go back to
        the queue."""
        for uid, (s, pod) in list(self._gated.items()):
            if self.preemption.running(uid):
                continue
            del self._gated[uid]
            current = self._current(pod)
            if current is not None and self._schedulers.get(s.name) is s:
                self._enqueue(s, current)
                self._report_pending(s)

    def node_changed(self, node: NodeInfo, added: bool) -> None:
        if added:
            self._move(ev.NODE_ADD, None, node.raw)

    def node_updated(self, node: NodeInfo, old: Json) -> None:
        for e in ev.node_update_events(node.raw, old):
            self._move(e, old, node.raw)

    def node_removed(self, node: NodeInfo) -> None:
        self._move(ev.NODE_DELETE, node.raw, None)

    def object_changed(self, kind: Kind, old: Json | None, new: Json | None) -> None:
        for e in ev.object_events(kind.name, old, new):
            self._move(e, old, new)

    def namespace_changed(self, name: str, labels: Mapping[str, str]) -> None:
        for s in self._schedulers.values():
            pods = [p for p in s.blocked.values() if p.namespace == name]
            for pod in pods:
                self._enqueue(s, pod)
            if pods:
                self._report_pending(s)

    def counts_changed(self, scheduler_name: str) -> None:
        if scheduler_name in self._schedulers:
            self._changed(scheduler_name)

    # The scheduling loop ----------------------------------------------------------------
    def _mark_ready(self, s: _Scheduler) -> None:
        """The policy's queue may have a pod to pop (one was added or moved, a backoff
        expired, it became runnable, its cycle ended): give it a turn."""
        if s.ready or not s.started or s.stopped:
            return
        s.ready = True
        self._ready.append(s)
        self._wake_loop.set()

    async def _run(self) -> None:
        """One loop for every policy, as kube-scheduler's one scheduleOne for all its
        profiles: a cycle of the next policy with a pod to pop, in turn, then the event
        loop polls I/O (watches, bind answers, the lease renewal) before the next cycle,
        not after one cycle of every policy. A task per policy handing a turn lock on cost
        an event-loop turn, a future and a wake-up per cycle (50 policies: ~4000 more loop
        turns for 5000 pods). A pipeline that awaits (extenders, shadows) runs its cycle in
        a task of its own, one at a time per policy: a slow extender holds its policy, not
        the others."""
        ready = self._ready
        while True:
            if not ready:
                self._wake_loop.clear()
                await self._wake_loop.wait()
                continue
            s = ready.popleft()
            s.ready = False
            if s.stopped or s.task is not None or not s.runnable.is_set():
                continue  # becoming runnable, or its cycle's end, marks it ready again
            try:
                qp = s.queue.pop_nowait()
                if qp is None:
                    self._arm_due(s)
                    continue
            except Exception:  # a bug must not stop every policy's scheduling
                log.exception("scheduler %s: popping its queue failed", s.name)
                self._arm_due(s)
                continue
            if s.pipeline.extenders or s.shadows:
                s.task = asyncio.get_running_loop().create_task(
                    self._awaiting_cycle(s, qp), name=f"polsched-scheduler-{s.name}")
                continue
            await self._cycle(s, qp)
            self._mark_ready(s)  # at the back: the others with pods go first
            # Let watches, binds and the lease run between two cycles.
            await asyncio.sleep(0)

    def _arm_due(self, s: _Scheduler) -> None:
        """Nothing to pop now: mark the policy ready again when its queue's next backoff
        expires or its unschedulable pods are due for the periodic flush (a pod added or
        moved before then marks it at once)."""
        if s.due is not None:
            s.due.cancel()
            s.due = None
        delay = s.queue.next_due()
        if delay is not None:
            s.due = asyncio.get_running_loop().call_later(delay, self._due, s)

    def _due(self, s: _Scheduler) -> None:
        s.due = None
        self._mark_ready(s)

    async def _awaiting_cycle(self, s: _Scheduler, qp: q.QueuedPod) -> None:
        try:
            await self._cycle(s, qp)
        finally:
            s.task = None
            self._mark_ready(s)

    async def _cycle(self, s: _Scheduler, qp: q.QueuedPod) -> None:
        # The attempt's duration (scheduling_attempt_duration_seconds) counts from here.
        started = time.perf_counter()
        if not s.runnable.is_set():
            s.queue.restore(qp)
            self._report_pending(s)
            return
        self._report_pending(s)  # popped; backoffs that expired moved to activeQ
        try:
            await self._schedule_one(s, qp, started)
        except asyncio.CancelledError as err:
            task = asyncio.current_task()
            if task is None or task.cancelling():
                raise  # the loop (or the cycle's task) is being stopped
            # Raised by a plugin or an extender call, not a cancellation of this task:
            # re-raised, it would end the scheduling loop of every policy.
            log.error("scheduling %s failed: a CancelledError nobody asked for", qp.key,
                      exc_info=err)
            self._on_error(s, qp, "internal error: CancelledError", started)
        except Exception as err:  # a bug must not stop the scheduler
            log.exception("scheduling %s failed", qp.key)
            self._on_error(s, qp, f"internal error: {err}", started)

    def _current(self, pod: PodInfo) -> PodInfo | None:
        """The cache's version of the pod if it still needs scheduling (skipPodSchedule)."""
        current = self.cache.pods.get(pod.key)
        if current is None or current.uid != pod.uid or current.node_name or current.terminal:
            return None
        if (current.raw.get("metadata") or {}).get("deletionTimestamp"):
            return None
        if self.cache.is_assumed(current.key):
            return None
        return current

    async def _schedule_one(self, s: _Scheduler, qp: q.QueuedPod, started: float) -> None:
        pod = self._current(qp.pod)
        if pod is None:
            s.queue.done(qp)
            return
        qp.pod = pod
        if self.preemption.running(pod.uid):
            # Its victims are being evicted (DefaultPreemption's PreEnqueue): it leaves the
            # queue, uncounted as an attempt, until the cache shows them gone.
            s.queue.done(qp)
            self._gated[pod.uid] = (s, pod)
            self._report_pending(s)
            return
        if not s.namespace_selected(pod, self.cache.namespaces):
            s.queue.done(qp)
            self._enqueue(s, pod)
            self._report_pending(s)
            return
        snapshot = self.cache.snapshot
        if not snapshot.nodes:
            # schedulingAlgorithm: ErrNoNodesAvailable is UnschedulableAndUnresolvable
            # (PodScheduled reason Unschedulable), not a SchedulerError; any node event
            # moves the pod back.
            self._on_unschedulable(s, qp, FitError(0), started)
            return
        node_name: str | None = None
        pipeline = s.pipeline
        # Shadows decide first, on the snapshot the live pipeline decides on next.
        verdicts = await s.shadows.decide(pod, snapshot) if s.shadows else None
        for _ in range(_RECHECK_RETRIES):
            pipeline = s.pipeline  # a swap takes effect at the next decision
            try:
                result = await pipeline.schedule(pod, snapshot)
            except PipelineError as err:
                self._on_error(s, qp, str(err), started)
                return
            if s.undecided is pipeline:
                self._first_decision(s, pod, result.node, qp.timestamp)
            if result.node is None:
                if verdicts:
                    s.shadows.unschedulable(pod, verdicts, rfc3339(time.time()))
                self._on_unschedulable(s, qp, result.fit_error, started, result.post_filter)
                return
            if not pipeline.extenders:
                node_name = result.node
                break
            # Other cycles ran while extenders answered: check again.
            current = self._current(pod)
            if current is None:
                s.queue.done(qp)
                return
            if pipeline.still_fits(current, self.cache.snapshot, result.node):
                pod, node_name = current, result.node
                break
        if node_name is None:
            self._on_error(s, qp, "the chosen node filled up while extenders answered; retrying",
                           started)
            return
        if not s.runnable.is_set():  # paused or lost leadership during the cycle
            s.queue.restore(qp)
            self._report_pending(s)
            return
        annotations = None
        if self.annotate_decisions:
            annotations = {DECIDING_SCORER_ANNOTATION: result.deciding_scorer,
                           FEASIBLE_NODES_ANNOTATION:
                               f"{result.feasible_nodes}/{result.evaluated_nodes}"}
        state = result.state if result.state is not None else CycleState()
        plugins = pipeline.binding_plugins_for(pod)
        bp = bc.binding_plugins(plugins) if plugins else bc.NONE
        assumed = self.cache.assume(pod, node_name)
        self.nominator.remove(pod.key)  # DeleteNominatedPodIfExists
        if verdicts:
            s.shadows.assumed(assumed, verdicts)
        if bp:
            # Reserve, then Permit, still in the scheduling cycle (schedule_one.go
            # assumeAndReserve, prepareForBindingCycle).
            st = bc.run_reserve(bp, state, assumed, node_name)
            waiting: bc.WaitingPod | None = None
            if st.ok:
                st, waits = bc.run_permit(bp, state, assumed, node_name)
                if st.code is Code.WAIT:
                    waiting = bc.WaitingPod(assumed, waits)
                    self.waiting_pods[assumed.uid] = waiting
                    st = SUCCESS
            if not st.ok:
                bc.run_unreserve(bp, state, assumed, node_name)
                self.cache.forget(assumed)
                self._on_cycle_failure(s, qp, st, node_name, started)
                return
            if waiting is not None or bp.pre_bind or bp.post_bind:
                # The binding cycle in the background; other pods go on being scheduled.
                self._spawn(self._binding_cycle(s, qp, assumed, node_name, state, bp, waiting,
                                                pipeline.extenders, annotations, started))
                return
        self.binder.bind(
            assumed, node_name,
            lambda outcome, message: self._bind_done(s, qp, assumed, node_name, outcome,
                                                     message, started, state, bp),
            pipeline.extenders, annotations=annotations, lane=s.name)

    def _first_decision(self, s: _Scheduler, pod: PodInfo, node: str | None,
                        queued_at: float) -> None:
        """The pipeline of s.policy's generation made its first decision (a node chosen or
        none fits): the hot reload is in effect for users. Logged and exported as
        polsched_policy_first_decision_{generation,timestamp_seconds} (wall clock: the
        bench compares it with the time its PATCH was answered), and how long after the
        swap (polsched_policy_first_decision_wait_seconds: the rest of a reload's time was
        spent before the engine had the pipeline). Of that wait, the part before the pod
        it decided entered the queue (`queued_at`, the queue's monotonic clock) had no pod
        to decide: polsched_policy_first_decision_idle_seconds."""
        s.undecided = None
        generation = s.policy.generation
        now = time.time()
        wait = time.monotonic() - s.applied_at
        metrics.first_decision(s.policy.name, generation, now, wait,
                               idle=min(max(0.0, queued_at - s.applied_at), wait))
        log.info("SchedulingPolicy %s generation %d decided its first pod %s (%s)",
                 s.policy.name, generation, pod.key,
                 f"node {node}" if node is not None else "unschedulable")

    async def _binding_cycle(self, s: _Scheduler, qp: q.QueuedPod, assumed: PodInfo,
                             node_name: str, state: CycleState, bp: bc.BindingPlugins,
                             waiting: bc.WaitingPod | None, extenders: Sequence[Extender],
                             annotations: Mapping[str, str] | None, started: float) -> None:
        """schedule_one.go bindingCycle: WaitOnPermit, PreBind, Bind, PostBind."""
        try:
            if waiting is not None:
                try:
                    st = await waiting.wait()
                finally:
                    self.waiting_pods.pop(assumed.uid, None)
                if not st.ok:
                    self._binding_failed(s, qp, assumed, node_name, state, bp, st, started)
                    return
            st = await bc.run_pre_bind(bp, state, assumed, node_name)
            if not st.ok:
                self._binding_failed(s, qp, assumed, node_name, state, bp, st, started)
                return
            bound: asyncio.Future[tuple[BindOutcome, str]] = \
                asyncio.get_running_loop().create_future()

            def done(outcome: BindOutcome, message: str) -> None:
                if not bound.done():
                    bound.set_result((outcome, message))

            self.binder.bind(assumed, node_name, done, extenders, annotations=annotations,
                             lane=s.name)
            outcome, message = await bound
        except asyncio.CancelledError:
            raise
        except Exception as err:  # a bug must not leave the pod assumed
            log.exception("binding cycle of %s failed", assumed.key)
            self._binding_failed(s, qp, assumed, node_name, state, bp,
                                 Status.error(f"internal error: {err}"), started)
            return
        self._bind_done(s, qp, assumed, node_name, outcome, message, started, state, bp)

    def _on_cycle_failure(self, s: _Scheduler, qp: q.QueuedPod, st: Status, node_name: str,
                          started: float) -> None:
        """A Reserve/Permit/WaitOnPermit failure: a rejection is reported as a FitError on
        the one node (NumAllNodes 1), anything else as an error."""
        if s.shadows:  # the attempt bound nothing: its shadow verdicts are not compared
            s.shadows.bind_ended(qp.pod, None, "")
        if st.rejected:
            self._on_unschedulable(s, qp, FitError(1, {node_name: st}), started)
        else:
            self._on_error(s, qp, st.message, started)

    def _binding_failed(self, s: _Scheduler, qp: q.QueuedPod, assumed: PodInfo,
                        node_name: str, state: CycleState, bp: bc.BindingPlugins, st: Status,
                        started: float) -> None:
        """handleBindingCycleError: Unreserve in reverse, forget the assumed pod (its
        resources are free again: an AssignedPodDelete for the other pods), then the
        failure handler."""
        bc.run_unreserve(bp, state, assumed, node_name)
        self.cache.forget(assumed)
        if st.rejected:
            self._on_cycle_failure(s, qp, st, node_name, started)
            self._move(ev.ASSIGNED_POD_DELETE, assumed, None,
                       pre_check=lambda p: p.uid != assumed.uid)
        else:
            self._move(ev.ASSIGNED_POD_DELETE, assumed, None)
            self._on_cycle_failure(s, qp, st, node_name, started)

    def queue_state(self, scheduler_name: str, pod_key: str) -> str | None:
        """Where a pending pod of that scheduler waits: "active", "backoff",
        "unschedulable", "gated", "in-flight", or None (not queued)."""
        s = self._schedulers.get(scheduler_name)
        return s.queue.where(pod_key) if s is not None else None

    def waiting_pod(self, uid: str) -> bc.WaitingPod | None:
        """A pod that Permit plugins hold (framework.Handle GetWaitingPod)."""
        return self.waiting_pods.get(uid)

    def _bind_done(self, s: _Scheduler, qp: q.QueuedPod, assumed: PodInfo, node_name: str,
                   outcome: BindOutcome, message: str, started: float,
                   state: CycleState | None = None, bp: bc.BindingPlugins = bc.NONE) -> None:
        if s.shadows:
            s.shadows.bind_ended(assumed, node_name if outcome is BindOutcome.BOUND else None,
                                 rfc3339(time.time()))
        if outcome is BindOutcome.BOUND:
            if bp.post_bind and state is not None:
                bc.run_post_bind(bp, state, assumed, node_name)
            # As upstream's PodScheduled: from the pop to the end of the binding.
            metrics.schedule_attempt(s.name, metrics.SCHEDULED, time.perf_counter() - started)
            s.queue.done(qp)
            s.counters.binds_total += 1
            s.counters.last_bind_time = rfc3339(time.time())
            s.recorder.scheduled(assumed, node_name)
            self._changed(s.name)
            return
        if bp.reserve and state is not None:
            bc.run_unreserve(bp, state, assumed, node_name)
        self.cache.forget(assumed)
        if outcome is BindOutcome.DROPPED:  # never sent: back to the queue, untouched
            s.queue.restore(qp)
            self._report_pending(s)
            return
        if outcome is not BindOutcome.FAILED:
            # Bound elsewhere (409) or deleted (404): it leaves; never bind it twice. A pod
            # recreated under the same name is a new pod and is queued as such. Upstream
            # counts any failed binding as an error attempt (handleBindingCycleError).
            metrics.schedule_attempt(s.name, metrics.ERROR, time.perf_counter() - started)
            s.queue.done(qp)
            current = self.cache.pods.get(assumed.key)
            if current is not None and current.uid != assumed.uid and not current.node_name \
                    and not current.terminal and s is self._schedulers.get(s.name):
                self._enqueue(s, current)
                self._report_pending(s)
            return
        # The assumed pod's resources are free again (handleBindingCycleError).
        self._move(ev.ASSIGNED_POD_DELETE, assumed, None)
        self._on_error(s, qp, message, started)

    def _on_unschedulable(self, s: _Scheduler, qp: q.QueuedPod, fit_error: Any,
                          started: float, post: PostFilterResult | None = None) -> None:
        metrics.schedule_attempt(s.name, metrics.UNSCHEDULABLE, time.perf_counter() - started)
        nominated = None if post is None else post.nominated_node
        if post is not None:
            metrics.preemption_attempt()
            if nominated is not None:  # AddNominatedPod: set, or cleared by ""
                self.nominator.add(qp.pod, nominated)
        message: str = fit_error.message if fit_error is not None else "no node fits"
        # Diagnosis.UnschedulablePlugins: the rejecting plugins, and the PreFilter plugins
        # whose results left nodes out.
        rejected = {st.plugin for st in fit_error.node_statuses.values()} \
            | fit_error.unschedulable_plugins if fit_error is not None else set()
        s.counters.unschedulable_attempts += 1
        s.queue.add_unschedulable(qp, rejected)
        self._report_pending(s)
        s.recorder.failed_scheduling(qp.pod, message)
        s.recorder.set_pod_scheduled_false(qp.pod, REASON_UNSCHEDULABLE, message, nominated)
        if post is not None and nominated and post.victims:
            self._preempt(s, qp.pod, nominated, post)
        self._changed(s.name)

    def _preempt(self, s: _Scheduler, pod: PodInfo, node_name: str,
                 post: PostFilterResult) -> None:
        """Evict the victims in the background (async preemption); count it."""
        c = s.counters
        c.preemptions_total += 1
        c.preemption_victims += len(post.victims)
        c.last_preemption = f"{pod.key} on {node_name} evicting " + \
            ", ".join(v.key for v in post.victims)

        def retry(preemptor: PodInfo) -> None:  # an API call failed: try again now
            gated = self._gated.pop(preemptor.uid, None) is not None
            if self._schedulers.get(s.name) is s and (gated or preemptor.key in s.queue):
                s.queue.delete(preemptor.key, preemptor.uid)
                current = self._current(preemptor)
                if current is not None:
                    self._enqueue(s, current)
                    self._report_pending(s)

        self.preemption.actuate(s.name, s.recorder, pod, node_name, post.victims, retry,
                                self._release_gated)

    def _on_error(self, s: _Scheduler, qp: q.QueuedPod, message: str, started: float) -> None:
        metrics.schedule_attempt(s.name, metrics.ERROR, time.perf_counter() - started)
        s.queue.add_backoff(qp)
        self._report_pending(s)
        s.recorder.failed_scheduling(qp.pod, message)
        s.recorder.set_pod_scheduled_false(qp.pod, REASON_SCHEDULER_ERROR, message)
