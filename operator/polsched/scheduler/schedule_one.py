"""One pod's scheduling attempt, as kube-scheduler's pkg/scheduler/schedule_one.go
(scheduleOne, schedulingCycle, bindingCycle, handleSchedulingFailure).

An `Attempt` record carries one pod's attempt through the scheduling cycle (the search of
scheduler.algorithm, assume, Reserve, Permit) and the binding cycle (WaitOnPermit, PreBind,
Bind, PostBind), and `handle_failure` is the one place a failed attempt is recorded and
requeued (handleSchedulingFailure); `handle_binding_cycle_error` undoes an assumed pod
first (handleBindingCycleError). The pod-group cycle extends `ScheduleOne` in
scheduler.schedule_one_podgroup. The engine owns the profiles and calls
`schedule_one` for the next popped pod; the cycles change a profile only through its
methods and call back into the engine only through the small `EngineHooks` protocol.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from polsched.framework import events as ev
from polsched.framework.budget import (
    DEFAULT_ATTEMPT_BUDGET_SECONDS,
    BudgetExceeded,
    new_budget,
)
from polsched.framework.cycle_state import CycleState
from polsched.framework.diagnosis import (
    FitError,
    PipelineError,
    PostFilterResult,
    ScheduleResult,
)
from polsched.framework.interfaces import EVENT_RECORDER_KEY
from polsched.framework.runtime import Pipeline, PluginSet
from polsched.framework.status import SUCCESS, Code, Status
from polsched.framework.types import PodInfo
from polsched.framework.waiting_pods import WaitingPod
from polsched.preemption.executor import GroupPreemptor
from polsched.scheduler import metrics
from polsched.scheduler.algorithm import SearchLimits, schedule_pod, still_fits
from polsched.scheduler.binder import Binder, BindOutcome
from polsched.scheduler.queue.types import QueuedPod

if TYPE_CHECKING:
    from polsched.cluster.cache import ClusterCache
    from polsched.framework.nominator import Nominator
    from polsched.preemption.executor import Executor
    from polsched.scheduler.profile import Profile
    from polsched.scheduler.shadow import Verdicts

log = logging.getLogger(__name__)


# -- the attempt ---------------------------------------------------------------------------
# Annotations the Binding carries when ScheduleOne(annotate_decisions=True); the API server
# copies a Binding's annotations onto the pod (pkg/registry/core/pod/storage
# setPodNodeAndMetadata), so the record costs no extra API call. The scorer whose weighted
# score put the chosen node furthest ahead of the runner-up, "" when the node was the only
# feasible one or the best totals tied; and "feasible/evaluated" nodes.
DECIDING_SCORER_ANNOTATION = "polsched.io/deciding-scorer"
FEASIBLE_NODES_ANNOTATION = "polsched.io/feasible-nodes"
# On a pod placed on an OpportunisticBatching hint: how many kept nodes tied for it.
HINT_TIES_ANNOTATION = "polsched.io/hint-ties"
# How many times a decision is retried when its node filled up while extenders answered.
RECHECK_RETRIES = 3
# A binding cycle's nomination patch answered after this long is logged (it holds the
# member's bind, and for a gang the group is partly bound meanwhile).
SLOW_NOMINATION_SECONDS = 5.0


@dataclass
class Attempt:
    """One pod's scheduling attempt, from the pop to the end of its binding cycle (what
    upstream carries as the QueuedPodInfo, the ScheduleResult and the CycleState)."""

    profile: Profile
    queued: QueuedPod
    # The pod this attempt decides for: the cache's version at the start of the cycle,
    # and the one assumed (after extenders, the version the node was checked again for).
    pod: PodInfo
    # time.perf_counter() at the pop: scheduling_attempt_duration_seconds counts from it.
    started: float
    # The pipeline that decided (a hot reload swaps the profile's, not this one).
    pipeline: Pipeline | None = None
    result: ScheduleResult | None = None
    state: CycleState = field(default_factory=CycleState)
    # The pod's plugins of the binding cycle (its PluginSet), once a node is chosen.
    plugins: PluginSet | None = None
    node: str = ""
    # The pod as assumed on `node` (the cache's copy with spec.nodeName set).
    assumed: PodInfo | None = None
    waiting: WaitingPod | None = None
    # The shadow policies' verdicts on this pod (scheduler.shadow), compared after.
    verdicts: Verdicts | None = None
    annotations: Mapping[str, str] | None = None
    # In its binding cycle (counted in scheduler_goroutines{operation="binding"}).
    binding: bool = False
    # The engine's scheduling cycle of this attempt (upstream's CurrentCycle, counted over
    # every profile): OpportunisticBatching uses a ranking only in the very next cycle.
    cycle: int = 0


def reserve_and_permit(pipeline: Pipeline, state: CycleState, assumed: PodInfo, node: str,
                       plugins: PluginSet) -> tuple[Status, dict[str, float]]:
    """The scheduling cycle's Reserve, then Permit, for a pod assumed on `node`
    (assumeAndReserve, then RunPermitPlugins): Success, Wait with the waiting plugins'
    timeouts, or the rejection or error, after which every Reserve plugin has been
    unreserved (the caller forgets the assumed pod). `polsched simulate` runs the same."""
    st = pipeline.run_reserve_plugins_reserve(state, assumed, node, plugins)
    waits: dict[str, float] = {}
    if st.ok:
        st, waits = pipeline.run_permit_plugins(state, assumed, node, plugins)
    if not st.ok and st.code is not Code.WAIT:
        pipeline.run_reserve_plugins_unreserve(state, assumed, node, plugins)
    return st, waits


def rejection(st: Status, node: str) -> FitError:
    """A Reserve, Permit or PreBind rejection on the chosen node as handle_failure records
    it (NumAllNodes 1): its message is the pod's FailedScheduling message."""
    return FitError(1, {node: st})


class EngineHooks(Protocol):
    """What an attempt needs of the engine that owns the profiles."""

    def enqueue(self, profile: Profile, pod: PodInfo) -> None:
        """Queue `pod` in the profile (or park it when its namespace is not selected)."""
    def move(self, event: ev.ClusterEvent, old: Any = None, new: Any = None,
             pre_check: Callable[[PodInfo], bool] | None = None) -> None:
        """MoveAllToActiveOrBackoffQueue on every profile's queue."""
    def changed(self, scheduler_name: str) -> None:
        """The profile's stats changed."""
    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run `coro` in the background, awaited when the engine stops."""
    def is_live(self, profile: Profile) -> bool:
        """The profile still runs (not removed, nor replaced by another)."""
    def activate_preemptors(self) -> None:
        """Preemptors whose victims may be gone run DefaultPreemption's PreEnqueue again
        (Activate)."""


@dataclass(frozen=True)
class AttemptSettings:
    """How every attempt of an engine runs: `annotate_decisions` (the Binding carries the
    decision's annotations), `attempt_budget` (seconds each attempt's search may take,
    framework.budget; None or 0: no budget)."""
    annotate_decisions: bool = False
    attempt_budget: float | None = DEFAULT_ATTEMPT_BUDGET_SECONDS


class ScheduleOne:
    """scheduleOne and its cycles, for every profile of one engine. Holds the parts the
    attempts share: the cache, the binder, the nominator, the preemption executor and the
    pods that Permit plugins hold."""

    def __init__(self, hooks: EngineHooks, cache: ClusterCache, binder: Binder,
                 nominator: Nominator, preemption: Executor,
                 waiting_pods: MutableMapping[str, WaitingPod],
                 settings: AttemptSettings = AttemptSettings()) -> None:
        self._hooks = hooks
        self.attempt_budget = settings.attempt_budget
        self._cache = cache
        self._binder = binder
        self._nominator = nominator
        self._preemption = preemption
        self._waiting_pods = waiting_pods
        self._annotate = settings.annotate_decisions
        self._bindings = 0  # binding cycles under way, every profile's
        # Scheduling cycles begun, every profile's (SchedulingQueue's schedulingCycle is
        # one counter for all profiles upstream: a pod of another profile in between
        # ends a batch).
        self.cycles = 0

    # -- skipPodSchedule -----------------------------------------------------------------
    def current(self, pod: PodInfo) -> PodInfo | None:
        """The cache's version of the pod if it still needs scheduling (skipPodSchedule)."""
        current = self._cache.pods.get(pod.key)
        if current is None or current.uid != pod.uid or current.node_name or current.terminal:
            return None
        if current.deleting:
            return None
        if self._cache.is_assumed(current.key):
            return None
        return current

    # -- scheduleOne ---------------------------------------------------------------------
    async def schedule_one(self, profile: Profile, qp: QueuedPod) -> None:
        """scheduleOne for a popped pod: the scheduling cycle, then the binding cycle in
        the background when it has anything to wait for. A bug fails the attempt as an
        error, never the scheduling loop."""
        self.cycles += 1
        a = Attempt(profile, qp, qp.pod, time.perf_counter(), cycle=self.cycles)
        qp.initial_attempt = qp.initial_attempt or a.started
        if not profile.runnable.is_set():
            profile.restore(qp)
            return
        try:
            await self.scheduling_cycle(a)
        except asyncio.CancelledError as err:
            task = asyncio.current_task()
            if task is None or task.cancelling():
                raise  # the loop (or the cycle's task) is being stopped
            # Raised by a plugin or an extender call, not a cancellation of this task:
            # re-raised, it would end the scheduling loop of every policy.
            log.error("scheduling %s failed: a CancelledError nobody asked for", qp.key,
                      exc_info=err)
            self.handle_failure(a, Status.error("internal error: CancelledError"))
        except Exception as err:  # a bug must not stop the scheduler
            log.exception("scheduling %s failed", qp.key)
            self.handle_failure(a, Status.error(f"internal error: {err}"))

    async def scheduling_cycle(self, a: Attempt) -> None:
        """schedulingCycle: decide, assume, Reserve, Permit; then hand the pod to the
        binding cycle."""
        s, qp = a.profile, a.queued
        pod = self.current(qp.pod)
        if pod is None:
            s.done(qp)
            return
        qp.pod = a.pod = pod
        if not s.namespace_selected(pod, self._cache.namespaces):
            s.done(qp)
            self._hooks.enqueue(s, pod)
            return
        if not await self._decide(a):
            return
        if not s.runnable.is_set():  # paused or lost leadership during the cycle
            s.restore(qp)
            return
        self._assume_reserve_permit(a)

    async def _decide(self, a: Attempt) -> bool:
        """The search on the cache's snapshot (with the shadows beside it). True when a
        node was chosen (a.node); otherwise the attempt has ended."""
        s, qp = a.profile, a.queued
        snapshot = self._cache.snapshot
        if not snapshot.nodes:
            # schedulingAlgorithm: ErrNoNodesAvailable is UnschedulableAndUnresolvable
            # (PodScheduled reason Unschedulable), not a SchedulerError; any node event
            # moves the pod back.
            self.handle_failure(a, Status.unresolvable(), FitError(0))
            return False
        # Shadows decide first, on the snapshot the live pipeline decides on next.
        a.verdicts = await s.shadow_verdicts(a.pod, snapshot)
        for _ in range(RECHECK_RETRIES):
            pipeline = a.pipeline = s.pipeline  # a swap takes effect at the next decision
            began = time.perf_counter()
            try:
                result = a.result = await schedule_pod(
                    pipeline, a.pod, snapshot,
                    limits=SearchLimits(new_budget(self.attempt_budget),
                                        batch=s.batch_for(pipeline), cycle=a.cycle))
            except PipelineError as err:
                if isinstance(err, BudgetExceeded):
                    metrics.budget_exceeded(s.name)
                self.handle_failure(a, Status.error(str(err)))
                return False
            metrics.scheduling_algorithm(time.perf_counter() - began)
            if s.undecided is pipeline:
                s.first_decision(a.pod, result.node, qp.timestamp)
            if result.node is None:
                if a.verdicts:
                    s.shadows_unschedulable(a.pod, a.verdicts)
                self.handle_failure(a, Status.unschedulable(), result.fit_error)
                return False
            if not pipeline.extenders:
                a.node = result.node
                return True
            # Other cycles ran while extenders answered: check again.
            current = self.current(a.pod)
            if current is None:
                s.done(qp)
                return False
            if still_fits(pipeline, current, self._cache.snapshot, result.node):
                a.pod, a.node = current, result.node
                return True
        self.handle_failure(a, Status.error(
            "the chosen node filled up while extenders answered; retrying"))
        return False

    def _assume_reserve_permit(self, a: Attempt) -> None:
        """assumeAndReserve, then Permit (prepareForBindingCycle), then the bind: at once
        through the binder when nothing waits, or in the binding cycle's task."""
        s, pipeline, result = a.profile, a.pipeline, a.result
        assert pipeline is not None and result is not None
        if self._annotate:
            annotations = {DECIDING_SCORER_ANNOTATION: result.deciding_scorer,
                           FEASIBLE_NODES_ANNOTATION:
                               f"{result.feasible_nodes}/{result.evaluated_nodes}"}
            if result.hint_ties:
                annotations[HINT_TIES_ANNOTATION] = str(result.hint_ties)
            a.annotations = annotations
        if result.state is not None:
            a.state = result.state
        plugins = a.plugins = pipeline.plugins_for(a.pod)
        assumed = a.assumed = self._cache.assume(a.pod, a.node)
        self._nominator.remove(a.pod.key)  # DeleteNominatedPodIfExists
        if a.verdicts:
            s.shadows_assumed(assumed, a.verdicts)
        if plugins.binding:
            st, waits = reserve_and_permit(pipeline, a.state, assumed, a.node, plugins)
            if st.code is Code.WAIT:
                a.waiting = WaitingPod(assumed, waits)
                self._waiting_pods[assumed.uid] = a.waiting
                st = SUCCESS
            if not st.ok:
                self._cache.forget(assumed)
                # The attempt bound nothing: its verdicts are not compared.
                s.shadows_bind_ended(a.pod, None)
                self.handle_failure(a, st)
                return
            if a.waiting is not None or plugins.pre_bind or plugins.post_bind:
                # The binding cycle in the background; other pods go on being scheduled.
                self._binding_started(a)
                self._hooks.spawn(self.binding_cycle(a))
                return
        self._binding_started(a)
        self._binder.bind(assumed, a.node,
                          lambda outcome, message: self.bind_done(a, outcome, message),
                          pipeline.extenders, annotations=a.annotations, lane=s.name)

    async def binding_cycle(self, a: Attempt) -> None:
        """schedule_one.go bindingCycle: WaitOnPermit, PreBind, Bind, PostBind."""
        assert a.assumed is not None and a.pipeline is not None and a.plugins is not None
        assumed, pipeline = a.assumed, a.pipeline
        try:
            # NominatedNodeNameForExpectation: PreBindPreFlight; when PreBind has work or
            # the pod waits on Permit, the pod is nominated to its node first.
            pre = pipeline.run_pre_bind_pre_flights(a.state, assumed, a.node, a.plugins)
            if pre.code is Code.ERROR:
                self.handle_binding_cycle_error(a, pre)
                return
            if pre.ok or a.waiting is not None:
                began = time.monotonic()
                await a.profile.nominate_for_binding(assumed, a.node)
                took = time.monotonic() - began
                if took >= SLOW_NOMINATION_SECONDS:
                    log.warning("nominating %s to %s before its binding took %.1fs",
                                assumed.key, a.node, took)
            if a.waiting is not None:
                began = time.monotonic()
                try:
                    st = await a.waiting.wait()
                finally:
                    self._waiting_pods.pop(assumed.uid, None)
                metrics.permit_waited(st.code, time.monotonic() - began)
                if not st.ok:
                    self.handle_binding_cycle_error(a, st)
                    return
            a.state.write(EVENT_RECORDER_KEY, a.profile.recorder)
            st = await pipeline.run_pre_bind_plugins(a.state, assumed, a.node, a.plugins)
            if not st.ok:
                self.handle_binding_cycle_error(a, st)
                return
            bound: asyncio.Future[tuple[BindOutcome, str]] = \
                asyncio.get_running_loop().create_future()

            def done(outcome: BindOutcome, message: str) -> None:
                if not bound.done():
                    bound.set_result((outcome, message))

            self._binder.bind(assumed, a.node, done, pipeline.extenders,
                              annotations=a.annotations, lane=a.profile.name)
            outcome, message = await bound
        except asyncio.CancelledError:
            self._binding_ended(a)
            raise
        except Exception as err:  # a bug must not leave the pod assumed
            log.exception("binding cycle of %s failed", assumed.key)
            self.handle_binding_cycle_error(a, Status.error(f"internal error: {err}"))
            return
        self.bind_done(a, outcome, message)

    def _binding_started(self, a: Attempt) -> None:
        """runBindingCycle's Goroutines{binding} Inc: the attempt's binding cycle began."""
        if not a.binding:
            a.binding = True
            self._bindings += 1
            metrics.goroutines(metrics.BINDING, self._bindings)

    def _binding_ended(self, a: Attempt) -> None:
        if a.binding:
            a.binding = False
            self._bindings -= 1
            metrics.goroutines(metrics.BINDING, self._bindings)

    def bind_done(self, a: Attempt, outcome: BindOutcome, message: str) -> None:
        """The Binder's answer: PostBind and the counts when bound; otherwise the pod
        is forgotten and requeued (or left alone when it went away)."""
        self._binding_ended(a)
        s, qp, assumed = a.profile, a.queued, a.assumed
        assert assumed is not None and a.pipeline is not None and a.plugins is not None
        s.shadows_bind_ended(assumed, a.node if outcome is BindOutcome.BOUND else None)
        if outcome is BindOutcome.BOUND:
            if a.plugins.post_bind:
                a.pipeline.run_post_bind_plugins(a.state, assumed, a.node, a.plugins)
            # As upstream's PodScheduled: from the pop to the end of the binding.
            metrics.schedule_attempt(s.name, metrics.SCHEDULED,
                                     time.perf_counter() - a.started)
            # A pod group's members are popped with their group: their first attempt is
            # this one unless an earlier one set it.
            metrics.pod_scheduled(qp.attempts,
                                  time.perf_counter() - (qp.initial_attempt or a.started))
            s.bound(qp, assumed, a.node)
            self._hooks.changed(s.name)
            return
        if a.plugins.reserve:
            a.pipeline.run_reserve_plugins_unreserve(a.state, assumed, a.node, a.plugins)
        self._cache.forget(assumed)
        if outcome is BindOutcome.DROPPED:  # never sent: back to the queue, untouched
            s.restore(qp)
            return
        if outcome is not BindOutcome.FAILED:
            # Bound elsewhere (409) or deleted (404): it leaves; never bind it twice. A pod
            # recreated under the same name is a new pod and is queued as such. Upstream
            # counts any failed binding as an error attempt (handleBindingCycleError).
            metrics.schedule_attempt(s.name, metrics.ERROR, time.perf_counter() - a.started)
            s.done(qp)
            current = self._cache.pods.get(assumed.key)
            if current is not None and current.uid != assumed.uid and not current.node_name \
                    and not current.terminal and self._hooks.is_live(s):
                self._hooks.enqueue(s, current)
            return
        # The assumed pod's resources are free again (handleBindingCycleError).
        self._hooks.move(ev.ASSIGNED_POD_DELETE, assumed, None)
        self.handle_failure(a, Status.error(message))

    # -- failures ------------------------------------------------------------------------
    def handle_binding_cycle_error(self, a: Attempt, st: Status) -> None:
        """handleBindingCycleError: Unreserve in reverse, forget the assumed pod (its
        resources are free again: an AssignedPodDelete for the other pods), then the
        failure handler."""
        self._binding_ended(a)
        assumed = a.assumed
        assert assumed is not None and a.pipeline is not None and a.plugins is not None
        a.pipeline.run_reserve_plugins_unreserve(a.state, assumed, a.node, a.plugins)
        self._cache.forget(assumed)
        # The attempt bound nothing: its verdicts are not compared.
        a.profile.shadows_bind_ended(a.pod, None)
        if st.rejected:
            self.handle_failure(a, st)
            self._hooks.move(ev.ASSIGNED_POD_DELETE, assumed, None,
                             pre_check=lambda p: p.uid != assumed.uid)
        else:
            self._hooks.move(ev.ASSIGNED_POD_DELETE, assumed, None)
            self.handle_failure(a, st)

    def handle_failure(self, a: Attempt, st: Status, fit_error: FitError | None = None,
                       *, group: bool = False, nominate: str | None = None) -> None:
        """handleSchedulingFailure, the one failure handler of an attempt. A rejection
        (Unschedulable, UnschedulableAndUnresolvable) parks the pod among the
        unschedulable pods, keyed by the plugins that rejected it (the search's
        diagnosis, or the rejecting Reserve/Permit/PreBind plugin on the chosen node),
        with PodScheduled reason Unschedulable, and applies the PostFilter's nomination
        and preemption; anything else backs off with reason SchedulerError. Both record
        FailedScheduling and the attempt's metric. `group`: a pod-group member rejected
        with its group's status (pod_group_cycle); `nominate`: a member's nomination by
        its group's PodGroupPostFilter (None: none, as any rejected member)."""
        s, qp = a.profile, a.queued
        elapsed = time.perf_counter() - a.started
        if not st.rejected:
            metrics.schedule_attempt(s.name, metrics.ERROR, elapsed)
            s.scheduling_error(qp, st.message)
            return
        if group:
            # A member rejected with its group's status (errPodGroupUnschedulable): the
            # group's message, no rejecting plugin, the nomination cleared.
            metrics.schedule_attempt(s.name, metrics.UNSCHEDULABLE, elapsed)
            self._nominator.add(qp.pod, nominate or "")
            s.unschedulable(qp, (), st.message, nominate or "")
            self._hooks.changed(s.name)
            return
        if fit_error is None:
            fit_error = rejection(st, a.node)
        post = a.result.post_filter if a.result is not None else None
        metrics.schedule_attempt(s.name, metrics.UNSCHEDULABLE, elapsed)
        nominated = None if post is None else post.nominated_node
        if nominate is not None:  # the group's PodGroupPostFilter nominated it
            nominated = nominate
            self._nominator.add(qp.pod, nominate)
        elif post is not None:
            metrics.preemption_attempt()
            if nominated is not None:  # AddNominatedPod: set, or cleared by ""
                self._nominator.add(qp.pod, nominated)
        if post is not None and nominated and post.victims:
            # Started before the pod is requeued, as upstream's PostFilter starts it: its
            # PreEnqueue (DefaultPreemption) then keeps it out of activeQ meanwhile.
            self._preempt(a, nominated, post)
        s.unschedulable(qp, fit_error.rejecting_plugins(), fit_error.message, nominated)
        self._hooks.changed(s.name)

    def _preempt(self, a: Attempt, node_name: str, post: PostFilterResult) -> None:
        """Evict the victims in the background (async preemption); a failed API call
        tries the pod again at once."""
        s = a.profile

        def retry(preemptor: PodInfo) -> None:  # an API call failed: try again now
            if self._hooks.is_live(s) and s.retry(preemptor):
                current = self.current(preemptor)
                if current is not None:
                    self._hooks.enqueue(s, current)

        self.actuate_preemption(s, a.pod, f"{a.pod.key} on {node_name}", node_name,
                                post.victims, retry)

    def actuate_preemption(self, s: Profile, preemptor: PodInfo | GroupPreemptor,
                           description: str, node_name: str, victims: Sequence[PodInfo],
                           retry: Callable[[PodInfo], None]) -> None:
        """The preemption's bookkeeping for a pod and for a pod group alike: counted in
        the policy's status (`description`: who, on which node), then the victims evicted
        in the background by the executor; `retry` when an API call failed."""
        s.preemption_started(description, victims)
        self._preemption.actuate(s.name, s.recorder, preemptor, node_name, victims, retry,
                                 self._hooks.activate_preemptors)
