"""Engine: one scheduler per SchedulingPolicy, all sharing one cluster cache.

The operator builds on this surface: `apply` a loaded Policy to start its scheduler or
hot-swap its pipeline, `remove` it, `set_leader`, read `stats`, hear `on_change`.

The engine keeps the profiles (scheduler.profile: one per schedulerName, with its
pipeline, queue and recorder), leadership, and the dispatch: one scheduling loop takes the
next pod of each profile in turn and hands it to scheduler.schedule_one, which runs the
attempt (the search, assume, Reserve, Permit, the binding cycle, and the one failure
handler). Cluster events from the cache move the queues' pods (eventhandlers.go).

A swap builds the new Pipeline off to the side and replaces one reference: a cycle that
is under way finishes on the pipeline it started with. Awaiting an extender lets other
policies' cycles run, so when a pipeline has extenders the chosen node is filtered again
right before assuming (two policies never overcommit a node).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from polsched.cluster import featuregates
from polsched.cluster.cache import CacheListener, ClusterCache
from polsched.cluster.client import ApiClient
from polsched.cluster.node_metrics import DEFAULT_INTERVAL_SECONDS, NodeMetricsWatcher
from polsched.framework import events as ev
from polsched.framework import podgroups as pg
from polsched.framework.budget import DEFAULT_ATTEMPT_BUDGET_SECONDS
from polsched.framework.interfaces import Extender, Handle
from polsched.framework.listers import Kind
from polsched.framework.nominator import Nominator
from polsched.framework.runtime import Pipeline
from polsched.framework.types import Json, NodeInfo, PodInfo
from polsched.framework.waiting_pods import WaitingPod
from polsched.plugins.default_preemption import NAME as DEFAULT_PREEMPTION
from polsched.preemption.executor import Executor
from polsched.scheduler import load_status, metrics
from polsched.scheduler.binder import Binder, Deadline
from polsched.scheduler.pipelines import build_pipeline
from polsched.scheduler.profile import Counters, Profile
from polsched.scheduler.queue.journal import EventJournal
from polsched.scheduler.queue.types import Location, QueuedPod, QueuedPodGroup
from polsched.scheduler.recorder import EventBudget, EventRecorder
from polsched.scheduler.schedule_one import (
    DECIDING_SCORER_ANNOTATION,
    FEASIBLE_NODES_ANNOTATION,
    AttemptSettings,
)
from polsched.scheduler.schedule_one_podgroup import ScheduleOnePodGroup
from polsched.scheduler.shadow import DEFAULT_BUDGET, Shadow, ShadowStats

if TYPE_CHECKING:
    from polsched.api.model import Policy

log = logging.getLogger(__name__)

# stats("shadow:NAME"): the shadow policy NAME's agreement (":" is in no schedulerName).
SHADOW_PREFIX = "shadow:"
# The fair share of the scheduling loop (Engine._run): what one ordinary cycle is charged,
# and how long a cycle must hold the loop to be charged its own length instead. Far above
# an ordinary cycle (~1-20 ms at 5000 nodes), so ordinary policies keep strict turns.
TURN_NS = 1_000_000
LONG_CYCLE_NS = 50_000_000


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
    # Gang PodGroups of this scheduler with minCount members bound now (status.boundGangs).
    bound_gangs: int = 0


@dataclass(frozen=True)
class EngineOptions:
    """How the engine reports and feeds its decisions: the decision annotations on each
    Binding, the shadows' share of the CPU, how often node usage is polled for the
    load-aware scorers, and the time budget of one attempt."""

    annotate_decisions: bool = False
    shadow_budget: float = DEFAULT_BUDGET
    node_metrics_interval: float = DEFAULT_INTERVAL_SECONDS
    # Seconds one attempt's search may take (framework.budget); None or 0: no budget.
    attempt_budget: float | None = DEFAULT_ATTEMPT_BUDGET_SECONDS


class Engine(CacheListener):
    def __init__(self, client: ApiClient, *, identity: str = "polsched",
                 bind_concurrency: int = 96, cache: ClusterCache | None = None,
                 bind_deadline: Deadline | None = None,
                 options: EngineOptions = EngineOptions()) -> None:
        """`bind_deadline`: when set, the monotonic time by which every bind must have
        ended (the lease's renew deadline, controller.process.server)."""
        annotate_decisions = options.annotate_decisions
        shadow_budget = options.shadow_budget
        self.client = client
        self.shadow_budget = shadow_budget
        self.identity = identity
        self.annotate_decisions = annotate_decisions
        # A cache of the same client whose lists are already out (controller.process.boot), or
        # a new one; either way start() syncs it.
        self.cache = cache if cache is not None else ClusterCache(client)
        self.cache.add_listener(self)
        self.binder = Binder(client, concurrency=bind_concurrency, deadline=bind_deadline,
                             watched=self.cache.pods)
        # Event and condition writes in flight, all policies' recorders together: as many
        # as binds. Every bound pod's Scheduled event follows its bind; with 16 against 96
        # binds they were answered at a sixth of the binds' rate (by the loop or the API
        # server alike) and fell behind (13 229 of 30 000 at scale, bench/NOTES.md).
        self._event_concurrency = max(bind_concurrency, 1)
        self._event_writes = asyncio.Semaphore(self._event_concurrency)
        # Event writes waiting, across policies: bounded as one broadcaster's queue.
        self._event_budget = EventBudget()
        # Pods that Permit plugins hold, by uid, across policies (uids are unique).
        self.waiting_pods: dict[str, WaitingPod] = {}
        # Pods nominated to nodes by preemption (or by status.nominatedNodeName), counted
        # by every policy's filters; and preemption's API calls, off the scheduling loop.
        self.nominator = Nominator()
        self.preemption = Executor(client, self.nominator, self.cache.pods, self.waiting_pods)
        # Every profile's attempts (scheduleOne, its cycles and failure handling).
        self._attempts = ScheduleOnePodGroup(_Hooks(self), self.cache, self.binder,
                                             self.nominator, self.preemption,
                                             self.waiting_pods,
                                             AttemptSettings(annotate_decisions,
                                                             options.attempt_budget))
        # Node usage for the load-aware scorers: one watcher for every policy, polling
        # only while one of their plugins wants it.
        self.node_metrics = NodeMetricsWatcher(client,
                                               interval=options.node_metrics_interval)
        self.node_metrics.on_change = self._node_metrics_changed
        self.node_metrics.on_request = metrics.node_metrics_request
        # What every policy's plugins are built with (framework.Handle).
        self.handle = Handle(listers=self.cache.listers, api=client,
                             waiting_pods=self.waiting_pods, nominator=self.nominator,
                             preempting=self.preemption.running, load=self.node_metrics,
                             pod_groups=self.cache.pod_groups, activate=self._activate_pods,
                             features=featuregates.scheduler_features())
        self._schedulers: dict[str, Profile] = {}
        # A pending group member counts toward its group only when a profile here serves
        # its schedulerName (upstream's responsibleForPod before AddPodGroupMember).
        self.cache.pod_groups.responsible = self._schedulers.__contains__
        # The cluster events kept for pods in flight, once for every policy's queue.
        self._journal = EventJournal()
        # The scheduling loop of every policy (_run): the policies whose queue may have a
        # pod to pop, by the loop time they were charged (Profile.vtime), then in the
        # order they became ready: a heap of (vtime, sequence, profile).
        self._ready: list[tuple[int, int, Profile]] = []
        self._ready_seq = 0
        # The vtime of the policy whose cycle ran last: a policy that becomes ready starts
        # there, so time spent idle is no credit to spend later.
        self._vclock = 0
        self._wake_loop = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None
        # Leadership: a default for every scheduler and per-name overrides. A single
        # replica leads by default; an HA operator calls set_leader(None, False) first.
        self._leading_default = True
        self._leading: dict[str, bool] = {}
        self._callbacks: list[Callable[[str], None]] = []
        self._cycle_callbacks: list[Callable[[str], None]] = []
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
        did not catch): the process's /healthz says so (controller.process.health)."""
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
        # With no cycle left to run, the pods held at Permit (a gang's members waiting for
        # quorum) are rejected together and their binding cycles unwind (Unreserve,
        # forget, the failure's event and condition) before the parts they use close:
        # none is bound by a half-stopped engine. Awaited, not given two turns of the
        # loop: a binding cycle still in its nomination patch (on a loaded API server)
        # unwound while the recorder closed, and the series flusher its event started
        # then was awaited uncancelled (the engine's stop hung: issue 29's
        # test_gangs[stop]).
        self.reject_waiting(None, "rejected: the scheduler is stopping")
        for t in tasks:
            if t.done():  # ended on its own (a fault /healthz reported): stop the rest
                if not t.cancelled():
                    t.exception()
                continue
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        await self._await_background()
        await self.node_metrics.close()
        await self.binder.close()
        await self.preemption.close()
        for s in self._schedulers.values():
            await s.recorder.close()
        await self._await_background()  # what the closes left (a removed policy's close)
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
            s = Profile(policy, pipeline, recorder,
                           Counters(**vars(counters)) if counters else Counters(),
                           self._journal)
            self._schedulers[name] = s
            self.cache.pod_groups.responsible_changed()
            self._update_runnable(s)
            if self._started:
                self._start_scheduler(s)
        else:
            # Pods held at Permit were decided by the pipeline being replaced: all are
            # rejected together (a gang's waiters never split across two pipelines) and
            # the new pipeline decides them again.
            self.reject_waiting(name, f"rejected: SchedulingPolicy {policy.name} was "
                                      "reloaded")
            s.swap(policy, pipeline)
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

    def _reset(self, s: Profile, counters: Counters | None) -> None:
        if counters is not None:  # never let a stale status move a counter back
            s.counters.catch_up(counters)
        self._update_runnable(s)
        s.queue.move(ev.EVENT_POLICY_CHANGE)
        for pod in s.unpark():  # the namespaceSelector may select them now
            self._enqueue(s, pod)

    def remove(self, scheduler_name: str) -> None:
        """Stop the scheduler; its pods stay Pending, untouched."""
        s = self._schedulers.pop(scheduler_name, None)
        if s is None:
            return
        self.cache.pod_groups.responsible_changed()
        self.reject_waiting(scheduler_name, "rejected: the scheduler was removed")
        self._stop_scheduler(s)
        self._spawn(s.recorder.close())
        metrics.forget_profile(scheduler_name)
        metrics.forget_policy(s.policy.name)

    def apply_shadow(self, policy: Policy, live_policy: str, live_scheduler: str, *,
                     extenders: Sequence[Extender] = ()) -> None:
        """Attach (or swap) shadow `policy` to the scheduler of `live_scheduler`; it
        decides beside it and never binds (scheduler.shadow)."""
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
            # Held pods first, all in one pass: a gang's waiters are rejected together, so
            # none of them goes on to bind after the lease is gone (nothing partial).
            self.reject_waiting(scheduler_name, "rejected: the scheduler lost its lease")
            self.binder.drop_queued(scheduler_name)
        if scheduler_name is None:
            self._leading_default = leading
            self._leading.clear()
        else:
            self._leading[scheduler_name] = leading
        for s in self._schedulers.values():
            self._update_runnable(s)

    def reject_waiting(self, scheduler_name: str | None, message: str) -> int:
        """Reject every pod that Permit plugins hold for `scheduler_name` (None: for every
        scheduler) in one synchronous pass (RejectWaitingPod for each): a pod group's
        waiters are rejected together, before any of their binding cycles runs again.
        Each binding cycle then unreserves and forgets its pod and requeues it
        (handleBindingCycleError). Returns how many were rejected."""
        rejected = 0
        for waiting in list(self.waiting_pods.values()):
            if scheduler_name is None or waiting.pod.scheduler_name == scheduler_name:
                if waiting.reject("", message):
                    rejected += 1
        return rejected

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
                                               self.cache.snapshot),
            bound_gangs=self.cache.pod_groups.bound_gangs(scheduler_name))

    def pipeline(self, scheduler_name: str) -> Pipeline:
        """The pipeline a scheduler runs now (KeyError if none)."""
        return self._schedulers[scheduler_name].pipeline

    def on_change(self, callback: Callable[[str], None]) -> None:
        """`callback(schedulerName)` whenever that scheduler's stats change."""
        self._callbacks.append(callback)

    def on_cycle(self, callback: Callable[[str], None]) -> None:
        """`callback(schedulerName)` as each scheduling cycle starts, in the order the
        dispatcher runs them (tracing, and the tests of the dispatch's fairness)."""
        self._cycle_callbacks.append(callback)

    def scheduler_names(self) -> list[str]:
        return sorted(self._schedulers)

    # -- internals ------------------------------------------------------------------------
    def _is_leading(self, name: str) -> bool:
        return self._leading.get(name, self._leading_default)

    def _update_runnable(self, s: Profile) -> None:
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

    async def _await_background(self) -> None:
        """Wait for the binding cycles (and recorder closes) running in the background,
        those they start meanwhile included."""
        awaited: set[asyncio.Task[Any]] = set()
        while left := [t for t in self._background if t not in awaited]:
            for t in left:  # a task done meanwhile may still be in the set: once each
                awaited.add(t)
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await t

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

    def _start_scheduler(self, s: Profile, pending: Sequence[PodInfo] | None = None) -> None:
        if pending is None:
            pending = self._pending_by_scheduler(s.name).get(s.name, ())
        for pod in pending:
            self._enqueue(s, pod)
        s.report_pending()  # the gauges exist from the start, at 0 when nothing waits
        s.queue.on_wake = lambda: self._mark_ready(s)
        s.started = True
        self._mark_ready(s)

    def _stop_scheduler(self, s: Profile) -> None:
        s.queue.close()
        s.stopped = True
        if s.due is not None:
            s.due.cancel()
            s.due = None
        if s.task is not None:
            s.task.cancel()

    def _move(self, event: ev.ClusterEvent, old: Any = None, new: Any = None,
              pre_check: Callable[[PodInfo], bool] | None = None) -> None:
        """MoveAllToActiveOrBackoffQueue on every scheduler's queue; the event is kept
        once for the pods in flight of all (EventJournal), not once per queue."""
        self._journal.append(event, old, new)
        for s in self._schedulers.values():
            # A journaled move() on a queue without unschedulable pods returns 0 at once.
            if s.queue.unschedulable_pods:
                s.queue.move(event, old, new, pre_check, journaled=True)

    def _enqueue(self, s: Profile, pod: PodInfo) -> None:
        s.enqueue(pod, self.cache.namespaces)

    # CacheListener ----------------------------------------------------------------------
    def pending_pod_changed(self, pod: PodInfo, old: PodInfo | None) -> None:
        self.nominator.update(pod)
        s = self._schedulers.get(pod.scheduler_name)
        if s is not None and s.started:
            self._enqueue(s, pod)
        if old is None and self.cache.pod_groups.served:
            # addPodToSchedulingQueue with GenericWorkload: a new member may complete
            # the gang another member waits for.
            self._move(ev.UNSCHEDULED_POD_ADD, None, pod)

    def pod_group_changed(self, old: Json | None, new: Json | None) -> None:
        # AddPodGroup / DeletePodGroup first (members join or leave the queue as a
        # group), then the event's queueing hints.
        obj = new if new is not None else old
        if obj is not None and (old is None or new is None):
            key = pg.object_key(obj)
            for s in self._schedulers.values():
                if new is None:
                    s.queue.pod_group_deleted(key)
                else:
                    s.queue.pod_group_added(key)
        if self.cache.pod_groups.composite and (
                old is None or new is None or pg.parent_name(old) != pg.parent_name(new)):
            # A tree gained or lost a PodGroup (not a status write: those come often).
            for s in self._schedulers.values():
                s.queue.regroup_trees()
        if old is None:
            self._move(ev.POD_GROUP_ADD, None, new)
        elif new is None:
            self._move(ev.POD_GROUP_DELETE, old, None)
        else:
            self._move(ev.POD_GROUP_UPDATE, old, new)

    def composite_pod_group_changed(self, old: Json | None, new: Json | None) -> None:
        # AddCompositePodGroup / DeleteCompositePodGroup: the trees' roots may have
        # changed (members join their root or wait for it), then the event's hints.
        if old is None or new is None or pg.parent_name(old) != pg.parent_name(new):
            for s in self._schedulers.values():
                s.queue.regroup_trees()
        if old is None:
            self._move(ev.COMPOSITE_POD_GROUP_ADD, None, new)
        elif new is None:
            self._move(ev.COMPOSITE_POD_GROUP_DELETE, old, None)
        else:
            self._move(ev.COMPOSITE_POD_GROUP_UPDATE, old, new)

    def _activate_pods(self, pods: Sequence[PodInfo]) -> None:
        """Handle.Activate: these pending pods go to their queue's activeQ."""
        for pod in pods:
            s = self._schedulers.get(pod.scheduler_name)
            if s is not None:
                s.queue.activate([pod.key])

    def pending_pod_removed(self, pod: PodInfo) -> None:
        self.nominator.remove(pod.key)
        self.preemption.forget(pod.uid)
        s = self._schedulers.get(pod.scheduler_name)
        if s is not None:
            s.remove_pending(pod)
            waiting = self.waiting_pods.get(pod.uid)
            if waiting is not None:  # deletePodFromSchedulingQueue: RejectWaitingPod
                waiting.reject("", "removed")

    # Each cluster event moves the unschedulable pods that one of their rejecting plugins'
    # queueing hints says it may help (eventhandlers.go).
    def assigned_pod_added(self, pod: PodInfo) -> None:
        self._move(ev.ASSIGNED_POD_ADD, None, pod)

    def assigned_pod_updated(self, pod: PodInfo, old: PodInfo) -> None:
        for e in ev.pod_update_events(pod, old, target=False):
            self._move(e, old, pod)
        if pod.deleting:
            self._activate_preemptors()  # a victim terminating

    def assigned_pod_removed(self, pod: PodInfo) -> None:
        self._move(ev.ASSIGNED_POD_DELETE, pod, None)
        self._activate_preemptors()

    def _activate_preemptors(self) -> None:
        """Preemptors that DefaultPreemption's PreEnqueue keeps out (their victims were
        being evicted) run it again: those whose victims the cache shows gone or
        terminating go to activeQ (upstream's Activate after async preemption)."""
        for s in self._schedulers.values():
            s.queue.activate_gated(DEFAULT_PREEMPTION)

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
            for pod in s.unpark(name):
                self._enqueue(s, pod)

    def counts_changed(self, scheduler_name: str) -> None:
        if scheduler_name in self._schedulers:
            self._changed(scheduler_name)

    # The scheduling loop ----------------------------------------------------------------
    def _mark_ready(self, s: Profile) -> None:
        """The policy's queue may have a pod to pop (one was added or moved, a backoff
        expired, it became runnable, its cycle ended): give it a turn."""
        if s.ready or not s.started or s.stopped:
            return
        s.ready = True
        s.vtime = max(s.vtime, self._vclock)
        self._push_ready(s)
        self._wake_loop.set()

    def _push_ready(self, s: Profile) -> None:
        self._ready_seq += 1
        heapq.heappush(self._ready, (s.vtime, self._ready_seq, s))

    async def _run(self) -> None:
        """One loop for every policy, as kube-scheduler's one scheduleOne for all its
        profiles: a cycle of the next policy with a pod to pop, in turn, then the event
        loop polls I/O (watches, bind answers, the lease renewal) before the next cycle,
        not after one cycle of every policy. A task per policy handing a turn lock on cost
        an event-loop turn, a future and a wake-up per cycle (50 policies: ~4000 more loop
        turns for 5000 pods). A pipeline that awaits (extenders, shadows) runs its cycle in
        a task of its own, one at a time per policy: a slow extender holds its policy, not
        the others.

        The fair share: the next policy is the ready one charged the least loop time
        (Profile.vtime). A cycle is charged one TURN, unless it held the loop longer than
        LONG_CYCLE: then it is charged the time it took. So policies of ordinary pods take
        their cycles strictly in turn (one pod each, as upstream's one queue), and a
        policy whose pods are expensive (terms, CEL, devices: each attempt up to its time
        budget) waits until the others have been given as much time: with 1 s attempts
        against 1 ms ones, a thousand of the others' cycles for each of its own."""
        ready = self._ready
        while True:
            if not ready:
                self._wake_loop.clear()
                await self._wake_loop.wait()
                continue
            vtime, _, s = heapq.heappop(ready)
            if vtime != s.vtime:  # charged since it was queued (marked during its cycle)
                self._push_ready(s)
                continue
            self._vclock = max(self._vclock, vtime)
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
            entity: QueuedPod | QueuedPodGroup = qp
            try:
                entity = s.queue.pop_group(qp) or qp
            except Exception:  # a bug: the pod is scheduled alone
                log.exception("scheduler %s: popping %s's pod group failed", s.name, qp.key)
            if s.pipeline.extenders or s.shadows:
                s.vtime += TURN_NS  # its synchronous parts are short; its waits free
                s.task = asyncio.get_running_loop().create_task(
                    self._awaiting_cycle(s, entity), name=f"polsched-scheduler-{s.name}")
                continue
            began = time.perf_counter_ns()
            await self._cycle(s, entity)
            took = time.perf_counter_ns() - began
            s.vtime += took if took > LONG_CYCLE_NS else TURN_NS
            self._mark_ready(s)  # after the others charged less: they go first
            # Let watches, binds and the lease run between two cycles.
            await asyncio.sleep(0)

    def _arm_due(self, s: Profile) -> None:
        """Nothing to pop now: mark the policy ready again when its queue's next backoff
        expires or its unschedulable pods are due for the periodic flush (a pod added or
        moved before then marks it at once)."""
        if s.due is not None:
            s.due.cancel()
            s.due = None
        delay = s.queue.next_due()
        if delay is not None:
            s.due = asyncio.get_running_loop().call_later(delay, self._due, s)

    def _due(self, s: Profile) -> None:
        s.due = None
        self._mark_ready(s)

    async def _awaiting_cycle(self, s: Profile,
                              qp: QueuedPod | QueuedPodGroup) -> None:
        try:
            await self._cycle(s, qp)
        finally:
            s.task = None
            self._mark_ready(s)

    async def _cycle(self, s: Profile, qp: QueuedPod | QueuedPodGroup) -> None:
        for cb in self._cycle_callbacks:
            cb(s.name)
        if isinstance(qp, QueuedPodGroup):
            await self._attempts.schedule_pod_group(s, qp)
        else:
            await self._attempts.schedule_one(s, qp)

    def queue_state(self, scheduler_name: str, pod_key: str) -> Location | None:
        """Where a pending pod of that scheduler waits (None: not queued)."""
        s = self._schedulers.get(scheduler_name)
        return s.queue.where(pod_key) if s is not None else None

    def waiting_pod(self, uid: str) -> WaitingPod | None:
        """A pod that Permit plugins hold (framework.Handle GetWaitingPod)."""
        return self.waiting_pods.get(uid)


class _Hooks:
    """The engine as schedule_one.EngineHooks: what an attempt may ask of it."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def enqueue(self, profile: Profile, pod: PodInfo) -> None:
        self._engine._enqueue(profile, pod)

    def move(self, event: ev.ClusterEvent, old: Any = None, new: Any = None,
             pre_check: Callable[[PodInfo], bool] | None = None) -> None:
        self._engine._move(event, old, new, pre_check)

    def changed(self, scheduler_name: str) -> None:
        self._engine._changed(scheduler_name)

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        self._engine._spawn(coro)

    def is_live(self, profile: Profile) -> bool:
        return self._engine._schedulers.get(profile.name) is profile

    def activate_preemptors(self) -> None:
        self._engine._activate_preemptors()


__all__ = ["DECIDING_SCORER_ANNOTATION", "FEASIBLE_NODES_ANNOTATION", "SHADOW_PREFIX",
           "Counters", "Engine", "EngineOptions", "SchedulerStats"]
