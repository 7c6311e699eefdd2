"""One scheduling attempt, as kube-scheduler's pkg/scheduler/schedule_one.go.

The search (schedulePod): the pod's nominated node first (evaluateNominatedNode), then
PreFilter and Filter over the nodes from where the previous search stopped until enough
feasible nodes are found (findNodesThatFitPod), the filter extenders
(findNodesThatPassExtenders), PreScore, Score, NormalizeScore, the weights and the
prioritize extenders (prioritizeNodes), and a random pick among the best (selectHost).
Pure: it runs the plugins through framework.runtime on a snapshot, and awaits only
extenders. The engine, explain, simulate, the shadows and the benchmarks all decide here.

The attempt (scheduleOne): an `Attempt` record carries one pod's attempt through the
scheduling cycle (the search, assume, Reserve, Permit) and the binding cycle (WaitOnPermit,
PreBind, Bind, PostBind), and `handle_failure` is the one place a failed attempt is
recorded and requeued (handleSchedulingFailure); `handle_binding_cycle_error` undoes an
assumed pod first (handleBindingCycleError). The engine owns the profiles and calls
`ScheduleOne.schedule_one` for the next popped pod; the cycles call back into the engine
only through the small `EngineHooks` protocol.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import operator
import time
from collections.abc import Callable, Coroutine, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from polsched.framework import events as ev
from polsched.framework import podgroups as pgs
from polsched.framework.cycle_state import CycleState
from polsched.framework.diagnosis import (
    Explanation,
    FitError,
    NodeScore,
    PipelineError,
    PluginScore,
    PostFilterResult,
    ScheduleResult,
)
from polsched.framework.interfaces import (
    EVENT_RECORDER_KEY,
    MAX_EXTENDER_PRIORITY,
    MAX_NODE_SCORE,
    Extender,
    ExtenderError,
    NodeSetFilter,
    PlacementProgress,
    PodGroupInfo,
    PodGroupPostFilterResult,
    ProposedAssignment,
)
from polsched.framework.runtime import Pipeline, PluginSet, Scores, filter_error, go_list
from polsched.framework.selectors import NodeSet
from polsched.framework.status import SUCCESS, Code, Status
from polsched.framework.types import NodeInfo, PodInfo, Snapshot
from polsched.framework.waiting_pods import WaitingPod
from polsched.objects import Json
from polsched.plugins.default_preemption import NAME as DEFAULT_PREEMPTION
from polsched.plugins.pod_group_preemption import CLUSTER_DOMAIN
from polsched.scheduler import metrics
from polsched.scheduler import queue as q
from polsched.scheduler.binder import Binder, BindOutcome
from polsched.scheduler.recorder import REASON_SCHEDULER_ERROR, REASON_UNSCHEDULABLE, rfc3339

if TYPE_CHECKING:
    from polsched.cluster.cache import ClusterCache
    from polsched.framework.nominator import Nominator
    from polsched.scheduler.preemption import Executor
    from polsched.scheduler.profile import Profile
    from polsched.scheduler.shadow import Verdicts

log = logging.getLogger(__name__)

_node_name = operator.attrgetter("name")

MIN_FEASIBLE_NODES_TO_FIND = 100
MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND = 5


def num_feasible_nodes_to_find(percentage: int, num_all_nodes: int) -> int:
    """schedule_one.go numFeasibleNodesToFind; percentage 0 means adaptive."""
    if num_all_nodes < MIN_FEASIBLE_NODES_TO_FIND:
        return num_all_nodes
    if percentage == 0:
        percentage = 50 - num_all_nodes // 125
        if percentage < MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND:
            percentage = MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND
    n = num_all_nodes * percentage // 100
    return max(n, MIN_FEASIBLE_NODES_TO_FIND)


# -- the search ----------------------------------------------------------------------------
async def schedule_pod(pipeline: Pipeline, pod: PodInfo, snapshot: Snapshot,
                       explain: bool = False, post_filter: bool = True,
                       group_state: CycleState | None = None) -> ScheduleResult:
    """schedule_one.go schedulePod: decide a node for `pod`, or say why none fits (the
    PostFilter plugins, DefaultPreemption among them, run then). Raises PipelineError when
    a plugin or a non-ignorable extender fails (the pod is retried with backoff).
    `explain` evaluates every node and keeps every score (polsched explain).
    `post_filter` False: no PostFilter for a member tried in a pod-group cycle
    (schedulingAlgorithm with IsPodGroupSchedulingCycle); `group_state` is then the
    group's CycleState, which the member's own links to (GetPodGroupSchedulingCycle)."""
    n_all = len(snapshot.nodes)
    if n_all == 0:
        return ScheduleResult(None, fit_error=FitError(0))
    plugins = pipeline.plugins_for(pod)
    if pipeline.nominator is not None and not explain:
        nominated_first = await evaluate_nominated_node(pipeline, pod, snapshot, plugins,
                                                        group_state)
        if nominated_first is not None:
            # evaluateNominatedNode: the node preemption made room on is tried before
            # the others; when it fits it is the only feasible node looked at.
            node_name, nominated_state = nominated_first
            return ScheduleResult(node_name, 1, 1, state=nominated_state)
    state = CycleState(group_state)
    feasible, diagnosis = find_nodes_that_fit_pod(pipeline, state, pod, snapshot, plugins,
                                                  explain)
    evaluated = len(feasible) + len(diagnosis.node_statuses)
    if feasible and pipeline.extenders:
        feasible = await find_nodes_that_pass_extenders(pipeline, pod, feasible, diagnosis)
    explanation = None
    if explain:
        explanation = Explanation(filters=dict(diagnosis.node_statuses))
        if diagnosis.absent_status is not None:  # the nodes a PreFilterResult left out
            seen = {n.name for n in feasible}
            for n in snapshot.nodes:
                if n.name not in seen:
                    explanation.filters.setdefault(n.name, diagnosis.absent_status)
    if not feasible:
        if not post_filter:
            return ScheduleResult(None, evaluated, 0, diagnosis, explanation=explanation)
        # Upstream runs PostFilter after a PreFilter rejection too.
        post = await pipeline.run_post_filter_plugins(state, pod, snapshot, diagnosis,
                                                      plugins)
        if post is not None:
            diagnosis.post_filter_msg = post.message
        return ScheduleResult(None, evaluated, 0, diagnosis, explanation=explanation,
                              post_filter=post)
    if len(feasible) == 1 and not explain:
        return ScheduleResult(feasible[0].name, evaluated, 1, state=state)
    scores = await prioritize_nodes(pipeline, state, pod, feasible, snapshot, plugins,
                                    explain)
    best = select_host(pipeline, scores.totals)
    result = ScheduleResult(feasible[best].name, evaluated, len(feasible), state=state)
    result.deciding_scorer = deciding_scorer(best, scores.totals, scores.weighted)
    if explanation is not None:
        for i, node in enumerate(feasible):
            ns = NodeScore(node.name, scores.totals[i])
            for s in plugins.scorers:
                if s.name in scores.explained:
                    raw, normalized = scores.explained[s.name]
                    ns.plugins[s.name] = PluginScore(raw[i], normalized[i],
                                                     scores.weighted[s.name][i])
            for e in pipeline.extenders:
                if e.name in scores.weighted:
                    ns.plugins[e.name] = PluginScore(0, 0, scores.weighted[e.name][i])
            explanation.scores.append(ns)
        result.explanation = explanation
    return result


async def evaluate_nominated_node(pipeline: Pipeline, pod: PodInfo, snapshot: Snapshot,
                                  plugins: PluginSet, group_state: CycleState | None = None
                                  ) -> tuple[str, CycleState] | None:
    """evaluateNominatedNode: the pod's nominated node (and the cycle's state) when it
    passes PreFilter, the filters (with the other nominated pods) and the filter
    extenders; None otherwise (the full search follows, with a fresh CycleState)."""
    assert pipeline.nominator is not None
    node_name = pipeline.nominator.node_of(pod.key) or pod.nominated_node
    node = snapshot.get(node_name) if node_name else None
    if node is None:
        return None
    state = CycleState(group_state)
    st, narrowed = pipeline.run_pre_filter_plugins(state, pod, snapshot, plugins)
    if not st.ok or (narrowed.node_names is not None
                     and node_name not in narrowed.node_names):
        return None
    st = pipeline.run_filters_with_nominated(state, pod, node, plugins,
                                             pipeline.nominated_pods_on(pod, node_name))
    if not st.ok:
        return None
    if pipeline.extenders:
        feasible = await find_nodes_that_pass_extenders(pipeline, pod, [node],
                                                        FitError(len(snapshot.nodes)))
        if not feasible:
            return None
    return node_name, state


def still_fits(pipeline: Pipeline, pod: PodInfo, snapshot: Snapshot, node_name: str) -> bool:
    """PreFilter, then every filter on one node, against the snapshot as it is now: the
    check before assume after a cycle awaited extenders and the cluster moved on."""
    node = snapshot.get(node_name)
    if node is None:
        return False
    state = CycleState()
    plugins = pipeline.plugins_for(pod)
    st, result = pipeline.run_pre_filter_plugins(state, pod, snapshot, plugins)
    if not st.ok or (result.node_names is not None and node_name not in result.node_names):
        return False
    return pipeline.run_filter_plugins(state, pod, node, plugins).ok


def find_nodes_that_fit_pod(pipeline: Pipeline, state: CycleState, pod: PodInfo,
                            snapshot: Snapshot, plugins: PluginSet, explain: bool = False,
                            ) -> tuple[list[NodeInfo], FitError]:
    """schedule_one.go findNodesThatFitPod without the extenders: PreFilter, then Filter
    over the nodes from where the previous search stopped (pipeline.next_start) until
    numFeasibleNodesToFind feasible nodes are found (every node with `explain`)."""
    filters = plugins.filters
    all_nodes = snapshot.nodes
    n_all = len(all_nodes)
    diagnosis = FitError(n_all)
    st, pre_result = pipeline.run_pre_filter_plugins(state, pod, snapshot, plugins)
    if not st.ok:
        diagnosis.pre_filter_msg = st.message
        diagnosis.node_statuses = {n.name: st for n in all_nodes}
        diagnosis.unschedulable_plugins = {st.plugin, *pre_result.plugins}
        return [], diagnosis
    nodes = all_nodes
    if pre_result.node_names is not None:
        # Only the nodes PreFilter allowed (those that exist); the others are absent from
        # node_statuses and counted under absent_status, as upstream's NodeToStatus.
        get = snapshot.get
        nodes = [n for n in (get(name) for name in sorted(pre_result.node_names))
                 if n is not None]
        diagnosis.absent_status = Status.unresolvable(
            f"node(s) didn't satisfy plugin(s) {go_list(pre_result.plugins)}")
        diagnosis.unschedulable_plugins.update(pre_result.plugins)
    n_nodes = len(nodes)
    to_find = n_nodes if explain else num_feasible_nodes_to_find(
        pipeline.percentage_of_nodes_to_score, n_nodes)
    feasible: list[NodeInfo] = []
    statuses = diagnosis.node_statuses
    start = pipeline.next_start % n_nodes if n_nodes else 0
    processed = 0
    # run_filters inlined: this loop runs per pod x node, so the skips and the entries'
    # names are resolved once per pod, not per node.
    skip = state.skip_filter
    # The filters that can name the nodes they pass (NodeSetFilter) do it once for the
    # whole cluster: a node in every such set runs only the other filters; a node
    # outside runs them all in order, so its status is the one Filter gives.
    passing: NodeSet | None = None
    # The filters each node in `passing` runs, as functions of the node.
    rest: list[tuple[str, Callable[[NodeInfo], Status]]] = []
    # For the nodes outside `passing`: every filter in order, those with a NodeSet
    # as a membership test (a node in a filter's set passes it without the call).
    outside_chain: list[tuple[str, Callable[[CycleState, PodInfo, NodeInfo], Status],
                              NodeSet | None, Status | None]] = []
    for f in filters:
        if f.name in skip:
            continue
        plugin = f.plugin
        ns = rejection = None
        if n_nodes > 1 and isinstance(plugin, NodeSetFilter):
            ns = plugin.filter_nodes(state, pod, snapshot)
            if ns is not None:
                rejection = plugin.filter_rejection(state, pod)
        outside_chain.append((f.name, plugin.filter, ns, rejection))
        if ns is None:
            bound = plugin.bind_filter(state, pod)
            rest.append((f.name, bound if bound is not None
                         else functools.partial(plugin.filter, state, pod)))
        else:
            passing = ns if passing is None else passing.and_(ns)
    pass_names: frozenset[str] | set[str] = frozenset()
    outside = True  # no NodeSet: every node runs `rest`, which is every filter
    if passing is not None:
        pass_names, outside = passing.names, passing.complement
    success = Code.SUCCESS
    error = Code.ERROR
    # Filters return a few shared Status constants; each gets its plugin once per pod.
    labelled: dict[tuple[int, str], Status] = {}
    keep: list[Status] = []  # the keys' statuses, alive so their ids stay unique

    def reject(node_name: str, name: str, st: Status) -> None:
        if st.code is error:
            raise filter_error(name, st)
        if st.plugin:
            statuses[node_name] = st
            return
        key = (id(st), name)
        wp = labelled.get(key)
        if wp is None:
            wp = labelled[key] = st.with_plugin(name)
            keep.append(st)
        statuses[node_name] = wp

    def passes_outside(node: NodeInfo, node_name: str) -> bool:
        """A node some NodeSetFilter left out: the first rejection in filter order,
        or True (a NodeSet may leave out a node its Filter passes)."""
        for name, fn, ns, rejection in outside_chain:
            if ns is not None:
                if (node_name in ns.names) is not ns.complement:
                    continue
                if rejection is not None:
                    reject(node_name, name, rejection)
                    return False
            st = fn(state, pod, node)
            if st.code is not success:
                reject(node_name, name, st)
                return False
        return True

    nominated = pipeline.nominated_pods(pod)
    if not nominated and not rest and n_nodes:
        # Every filter left is a NodeSetFilter (alike plain pods): the nodes inside
        # `passing` are feasible without a call, so only the nodes outside it are
        # visited, in the same order and with the same stop as the loop below.
        order = (nodes[start:] + nodes[:start]) if start else nodes
        flags = map(pass_names.__contains__, map(_node_name, order))
        if not outside:
            flags = map(operator.not_, flags)
        # A node outside is rejected by the first filter whose set leaves it out: when
        # that filter's rejection is shared (filter_rejection) it is looked up here;
        # otherwise passes_outside calls the filters in order.
        chain: list[tuple[frozenset[str] | set[str], bool, Status | None]] = []
        for name, _fn, ns, rejection in outside_chain:
            if ns is None or (rejection is not None and rejection.code is error):
                break
            chain.append((ns.names, ns.complement,
                          None if rejection is None else rejection.with_plugin(name)))
        shared = chain if len(chain) == len(outside_chain) else None
        prev = 0
        for p in itertools.compress(range(n_nodes), flags):
            need = to_find - len(feasible)
            if p - prev >= need:
                break
            feasible.extend(order[prev:p])
            node = order[p]
            node_name = node.name
            prev = p + 1
            if shared is not None:
                first: Status | None = None
                for names, complement, shared_rejection in shared:
                    if (node_name in names) is complement:
                        first = shared_rejection
                        break
                if first is not None:
                    statuses[node_name] = first
                    continue
            if passes_outside(node, node_name):
                feasible.append(node)
                if len(feasible) >= to_find:
                    break
        else:
            p = -1
        if p < 0 or len(feasible) < to_find:  # the stop is among the passing nodes
            end = min(prev + to_find - len(feasible), n_nodes)
            feasible.extend(order[prev:end])
            prev = end
        if n_all:
            pipeline.next_start = (pipeline.next_start + prev) % n_all
        return feasible, diagnosis
    for node in (nodes[start:] + nodes[:start]) if start else nodes:
        processed += 1
        node_name = node.name
        if nominated and node_name in nominated:
            st = pipeline.run_filters_with_nominated(state, pod, node, plugins,
                                                 nominated[node_name])
            if st.ok:
                feasible.append(node)
                if len(feasible) >= to_find:
                    break
            else:
                statuses[node_name] = st
            continue
        if (node_name in pass_names) is outside:
            # Rejected by some NodeSetFilter: the first rejection in filter order.
            if passes_outside(node, node_name):
                feasible.append(node)
                if len(feasible) >= to_find:
                    break
            continue
        for name, bound_fn in rest:
            st = bound_fn(node)
            if st.code is not success:
                reject(node_name, name, st)
                break
        else:
            feasible.append(node)
            if len(feasible) >= to_find:
                break
    if n_all:
        pipeline.next_start = (pipeline.next_start + processed) % n_all
    return feasible, diagnosis


async def prioritize_nodes(pipeline: Pipeline, state: CycleState, pod: PodInfo,
                           nodes: list[NodeInfo], snapshot: Snapshot, plugins: PluginSet,
                           explain: bool = False) -> Scores:
    """prioritizeNodes: PreScore, Score (normalized and weighted), then the prioritize
    extenders' weighted scores added."""
    pipeline.run_pre_score_plugins(state, pod, nodes, snapshot, plugins)
    scores = pipeline.run_score_plugins(state, pod, nodes, plugins, explain)
    if pipeline.extenders:
        await _extender_prioritize(pipeline, pod, nodes, scores)
    return scores


def select_host(pipeline: Pipeline, totals: list[int]) -> int:
    """selectHost: the highest total; ties broken uniformly at random.

    Upstream draws once per tie as it goes (reservoir sampling); one draw among the
    counted ties is the same uniform choice, with list methods instead of a Python loop
    and a random call per tie (most nodes tie when pods are alike)."""
    best = max(totals)
    ties = totals.count(best)
    i = totals.index(best)
    if ties > 1:
        for _ in range(pipeline.rng.randrange(ties)):
            i = totals.index(best, i + 1)
    return i


async def find_nodes_that_pass_extenders(pipeline: Pipeline, pod: PodInfo,
                                         feasible: list[NodeInfo], diagnosis: FitError
                                         ) -> list[NodeInfo]:
    """findNodesThatPassExtenders: each interested filter extender in turn."""
    for ext in pipeline.extenders:
        if not feasible:
            break
        if not ext.is_filter() or not ext.is_interested(pod):
            continue
        try:
            feasible, failed, unresolvable = await ext.filter(pod, feasible)
        except ExtenderError as err:
            if ext.ignorable:
                continue
            raise PipelineError(Status.error(str(err)).with_plugin(ext.name)) from err
        statuses = diagnosis.node_statuses
        for name, reason in unresolvable.items():
            statuses[name] = Status.unresolvable(reason).with_plugin(ext.name)
        for name, reason in failed.items():
            if name not in unresolvable:
                statuses[name] = Status.unschedulable(reason).with_plugin(ext.name)
    return feasible


async def _extender_prioritize(pipeline: Pipeline, pod: PodInfo, nodes: list[NodeInfo],
                               scores: Scores) -> None:
    """Prioritize extenders run concurrently; their errors are ignored (upstream)."""
    exts: list[Extender] = [e for e in pipeline.extenders
                            if e.is_prioritizer() and e.is_interested(pod)]
    if not exts:
        return
    results: list[dict[str, int] | BaseException]
    if len(exts) == 1:  # the usual case: no task and gather for one call
        try:
            results = [await exts[0].prioritize(pod, nodes)]
        except Exception as err:  # noqa: BLE001 - ignored, as gather's below
            results = [err]
    else:
        results = await asyncio.gather(*(e.prioritize(pod, nodes) for e in exts),
                                       return_exceptions=True)
    index = {n.name: i for i, n in enumerate(nodes)}
    totals = scores.totals
    for ext, got in zip(exts, results, strict=True):
        if isinstance(got, BaseException):
            continue
        weighted = [0] * len(nodes)
        factor = ext.weight * (MAX_NODE_SCORE // MAX_EXTENDER_PRIORITY)
        get = index.get
        for host, score in got.items():
            i = get(host)
            if i is not None:
                v = score * factor
                weighted[i] = v
                totals[i] += v
        scores.weighted[ext.name] = weighted


def deciding_scorer(best: int, totals: list[int],
                    weighted: Mapping[str, Sequence[int]]) -> str:
    """The scorer whose weighted score put the winner furthest ahead of the runner-up."""
    if len(totals) < 2:
        return ""
    others = list(totals)
    others[best] = min(totals) - 1  # the first highest of the others, without a key function
    runner = others.index(max(others))
    if totals[runner] == totals[best]:
        return ""  # a tie: no scorer decided, the draw among the tied nodes did
    lead = {name: s[best] - s[runner] for name, s in weighted.items()}
    name, margin = max(lead.items(), key=lambda kv: kv[1], default=("", 0))
    return name if margin > 0 else ""


# -- the pod-group algorithm (schedule_one_podgroup.go) ------------------------------------
# errPodGroupUnschedulable
POD_GROUP_UNSCHEDULABLE = "pod group is unschedulable"


@dataclass
class MemberResult:
    """algorithmResult: one member's outcome in a pod-group cycle's simulation: Success
    with the node it was assumed on (and the search's result and CycleState, which its
    binding cycle goes on with), or its own rejection (with its FitError) or error."""

    pod: PodInfo
    status: Status
    result: ScheduleResult | None = None
    fit_error: FitError | None = None
    node: str = ""
    state: CycleState = field(default_factory=CycleState)


@dataclass
class PodGroupResult:
    """podGroupAlgorithmResult: the group's status (Success: submit the members that fit;
    Unschedulable: reject every member; Error) and the results of the members tried, in
    order (the others were not tried)."""

    status: Status
    members: list[MemberResult] = field(default_factory=list)
    # The status members that were not tried get: the group's before PodGroupPostFilter
    # appends its message (completePodGroupAlgorithmResult clones it first, then
    # applyPodGroupPostFilterResult appends to the group's only). None: `status`.
    untried: Status | None = None
    # The group's CycleState (podGroupCycleState), which every member's links to: what
    # the PodGroupPostFilter plugins read (DynamicResources' members' states).
    state: CycleState = field(default_factory=CycleState)


async def pod_group_algorithm(pipeline: Pipeline, cache: ClusterCache, group: PodGroupInfo,
                              pods: Sequence[PodInfo]) -> PodGroupResult:
    """runRootSchedulingAlgorithm + podGroupSchedulingDefaultAlgorithm: PlacementFeasible
    first (Remaining = the members to try, Scheduled = the group's assumed and bound
    members), then each member in order on the cache's snapshot (filters and scores, no
    PostFilter), assumed and reserved so that the next one sees it, PlacementFeasible after
    each. A final Wait is Unschedulable; Success with nothing scheduled too. Everything
    assumed or reserved is reverted before this returns, whatever happens (try/finally):
    the algorithm is a simulation."""
    group_plugins = pipeline.plugins
    cycle_state = CycleState()
    out = PodGroupResult(Status.unschedulable(POD_GROUP_UNSCHEDULABLE), state=cycle_state)
    reverts: list[Callable[[], None]] = []
    try:
        gstate = cache.pod_groups.state(f"{group.namespace}/{group.name}")
        progress = PlacementProgress(len(pods), gstate.scheduled_pods_count)
        st = pipeline.run_placement_feasible_plugins(cycle_state, group, progress,
                                                     group_plugins)
        if st.code is Code.ERROR:
            out.status = Status.error(f"failed to evaluate placement feasibility: {st.message}")
            return out
        if st.code is Code.UNSCHEDULABLE:
            out.status = Status.unschedulable(POD_GROUP_UNSCHEDULABLE, *st.reasons)
            return out
        status = st
        any_scheduled = False
        for pod in pods:
            res = await _member_algorithm(pipeline, cache, pod, reverts, cycle_state)
            out.members.append(res)
            if not res.status.ok and not res.status.rejected:
                status = Status.error("failed to schedule other pod from a pod group: "
                                      f"{res.status.message}")
                break
            progress = PlacementProgress(progress.remaining - 1,
                                         progress.scheduled + (1 if res.status.ok else 0))
            st = pipeline.run_placement_feasible_plugins(cycle_state, group, progress,
                                                         group_plugins)
            if st.code is Code.ERROR:
                status = Status.error(f"failed to evaluate placement feasibility: {st.message}")
                break
            status = st
            if st.code is Code.UNSCHEDULABLE:
                break
            any_scheduled = any_scheduled or res.status.ok
        if status.code is Code.WAIT:
            status = Status.unschedulable(POD_GROUP_UNSCHEDULABLE, *status.reasons)
        if status.ok and not any_scheduled:
            # The framework requires at least 1 pod to be scheduled.
            status = Status.unschedulable(POD_GROUP_UNSCHEDULABLE)
        out.status = status
        return out
    finally:
        for revert in reversed(reverts):
            revert()


async def _member_algorithm(pipeline: Pipeline, cache: ClusterCache, pod: PodInfo,
                            reverts: list[Callable[[], None]],
                            group_state: CycleState | None = None) -> MemberResult:
    """podGroupPodSchedulingAlgorithm: the search for one member (no PostFilter), then
    assume + Reserve with a revert (assumeAndReserveWithRevert)."""
    snapshot = cache.snapshot
    if not snapshot.nodes:
        return MemberResult(pod, Status.unresolvable(), fit_error=FitError(0))
    try:
        result = await schedule_pod(pipeline, pod, snapshot, post_filter=False,
                                    group_state=group_state)
    except PipelineError as err:
        return MemberResult(pod, Status.error(str(err)))
    if result.node is None:
        return MemberResult(pod, Status.unschedulable(), result, result.fit_error)
    node = result.node
    state = result.state if result.state is not None else CycleState()
    plugins = pipeline.plugins_for(pod)
    assumed = cache.assume(pod, node)
    st = pipeline.run_reserve_plugins_reserve(state, assumed, node, plugins)

    def revert() -> None:
        pipeline.run_reserve_plugins_unreserve(state, assumed, node, plugins)
        cache.forget(assumed)

    if not st.ok:
        revert()
        if st.rejected:
            return MemberResult(pod, st, result, FitError(1, {node: st}), node, state)
        return MemberResult(pod, st, result, node=node, state=state)
    reverts.append(revert)
    return MemberResult(pod, SUCCESS, result, node=node, state=state)


async def pod_group_verdict(pipeline: Pipeline, cache: ClusterCache, group: PodGroupInfo,
                            pods: Sequence[PodInfo]) -> tuple[PodGroupResult, Status]:
    """The pod-group cycle's decision without acting on it (polsched explain and simulate):
    pod_group_algorithm, then for a rejected group the PodGroupPostFilter phase, whose
    error becomes the group's status and whose message is otherwise appended
    (applyPodGroupPostFilterResult). Nothing is evicted or deallocated: the pipeline of an
    offline tool has no API writer, and DefaultPreemption only chooses victims. Returns the
    algorithm's result (its status untouched) and the group's final status."""
    outcome = await pod_group_algorithm(pipeline, cache, group, pods)
    status = outcome.status
    if status.code is Code.UNSCHEDULABLE:
        _, pst = await pod_group_post_filter(pipeline, cache, group, pods, outcome)
        status = pst if pst.code is Code.ERROR else \
            Status(status.code, (*status.reasons, pst.message), status.plugin)
    return outcome, status


async def pod_group_post_filter(pipeline: Pipeline, cache: ClusterCache, group: PodGroupInfo,
                                pods: Sequence[PodInfo], outcome: PodGroupResult,
                                ran: list[tuple[str, Code]] | None = None,
                                ) -> tuple[PodGroupPostFilterResult | None, Status]:
    """podGroupCycle's RunPodGroupPostFilterPlugins for a rejected group: the group's
    CycleState of the cycle that rejected it, and a function that reruns the algorithm
    (with a fresh group CycleState, everything it assumes reverted) for DefaultPreemption's
    victim search."""

    async def rerun() -> tuple[list[ProposedAssignment], Status]:
        again = await pod_group_algorithm(pipeline, cache, group, pods)
        st = again.status
        if st.reasons and st.reasons[0] == POD_GROUP_UNSCHEDULABLE:
            # errPodGroupUnschedulable is the status's error, not one of its reasons.
            st = Status(st.code, st.reasons[1:], st.plugin)
        return [ProposedAssignment(m.pod, m.node if m.status.ok else "", m.state)
                for m in again.members], st

    return await pipeline.run_pod_group_post_filter_plugins(
        outcome.state, group, pods, cache.snapshot, rerun, pipeline.plugins, ran)


def validate_pod_group(groups: pgs.PodGroups, info: PodGroupInfo, queued: Sequence[PodInfo],
                       scheduler_name: str) -> str:
    """validatePodGroup (PodGroupPreemptionPolicy off): the same schedulerName, the group's
    priority and one preemption policy for every member, queued or already scheduled (in
    `groups`), and a profile (`scheduler_name`) for them; "" when valid, else upstream's
    error text. The engine's pod-group cycle and `polsched simulate` both ask it."""
    spec = info.pod_group.get("spec") or {}
    priority = spec.get("priority")
    group_priority = priority if isinstance(priority, int) else 0
    name = ""
    preemption = ""

    def validate(pod: PodInfo) -> str:
        nonlocal preemption
        if pod.scheduler_name != name:
            return ("all pods in a single pod group should have the same "
                    f".spec.schedulerName set, got: {_go_q(pod.scheduler_name)} and "
                    f"{_go_q(name)}")
        if pod.priority != group_priority:
            return ("all pods in a single pod group should have the same priority as "
                    f"the pod group's priority, got {pod.priority} and {group_priority}")
        policy = pod.spec.get("preemptionPolicy") or "PreemptLowerPriority"
        if not preemption:
            preemption = policy
        elif policy != preemption:
            return ("all pods in a single pod group should have the same preemption "
                    f"policy, got {policy} and {preemption}")
        return ""

    for pod in queued:
        if not name:
            name = pod.scheduler_name
        err = validate(pod)
        if err:
            return err
    state = groups.state(f"{info.namespace}/{info.name}")
    for pod in state.scheduled_pods():
        err = validate(pod)
        if err:
            return err
    if name != scheduler_name:
        return f"profile not found for scheduler name {_go_q(name)}"
    return ""


# -- the attempt ---------------------------------------------------------------------------
# Annotations the Binding carries when ScheduleOne(annotate_decisions=True); the API server
# copies a Binding's annotations onto the pod (pkg/registry/core/pod/storage
# setPodNodeAndMetadata), so the record costs no extra API call. The scorer whose weighted
# score put the chosen node furthest ahead of the runner-up, "" when the node was the only
# feasible one or the best totals tied; and "feasible/evaluated" nodes.
DECIDING_SCORER_ANNOTATION = "polsched.io/deciding-scorer"
FEASIBLE_NODES_ANNOTATION = "polsched.io/feasible-nodes"
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
    queued: q.QueuedPod
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


class ScheduleOne:
    """scheduleOne and its cycles, for every profile of one engine. Holds the parts the
    attempts share: the cache, the binder, the nominator, the preemption executor and the
    pods that Permit plugins hold."""

    def __init__(self, hooks: EngineHooks, cache: ClusterCache, binder: Binder,
                 nominator: Nominator, preemption: Executor,
                 waiting_pods: MutableMapping[str, WaitingPod],
                 annotate_decisions: bool = False) -> None:
        self._hooks = hooks
        self._cache = cache
        self._binder = binder
        self._nominator = nominator
        self._preemption = preemption
        self._waiting_pods = waiting_pods
        self._annotate = annotate_decisions
        self._bindings = 0  # binding cycles under way, every profile's

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
    async def schedule_one(self, profile: Profile, qp: q.QueuedPod) -> None:
        """scheduleOne for a popped pod: the scheduling cycle, then the binding cycle in
        the background when it has anything to wait for. A bug fails the attempt as an
        error, never the scheduling loop."""
        a = Attempt(profile, qp, qp.pod, time.perf_counter())
        if not profile.runnable.is_set():
            profile.queue.restore(qp)
            profile.report_pending()
            return
        profile.report_pending()  # popped; backoffs that expired moved to activeQ
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
            s.queue.done(qp)
            return
        qp.pod = a.pod = pod
        if not s.namespace_selected(pod, self._cache.namespaces):
            s.queue.done(qp)
            self._hooks.enqueue(s, pod)
            s.report_pending()
            return
        if not await self._decide(a):
            return
        if not s.runnable.is_set():  # paused or lost leadership during the cycle
            s.queue.restore(qp)
            s.report_pending()
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
        a.verdicts = await s.shadows.decide(a.pod, snapshot) if s.shadows else None
        for _ in range(RECHECK_RETRIES):
            pipeline = a.pipeline = s.pipeline  # a swap takes effect at the next decision
            try:
                result = a.result = await schedule_pod(pipeline, a.pod, snapshot)
            except PipelineError as err:
                self.handle_failure(a, Status.error(str(err)))
                return False
            if s.undecided is pipeline:
                _first_decision(s, a.pod, result.node, qp.timestamp)
            if result.node is None:
                if a.verdicts:
                    s.shadows.unschedulable(a.pod, a.verdicts, _rfc3339_now())
                self.handle_failure(a, Status.unschedulable(), result.fit_error)
                return False
            if not pipeline.extenders:
                a.node = result.node
                return True
            # Other cycles ran while extenders answered: check again.
            current = self.current(a.pod)
            if current is None:
                s.queue.done(qp)
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
            a.annotations = {DECIDING_SCORER_ANNOTATION: result.deciding_scorer,
                             FEASIBLE_NODES_ANNOTATION:
                                 f"{result.feasible_nodes}/{result.evaluated_nodes}"}
        if result.state is not None:
            a.state = result.state
        plugins = a.plugins = pipeline.plugins_for(a.pod)
        assumed = a.assumed = self._cache.assume(a.pod, a.node)
        self._nominator.remove(a.pod.key)  # DeleteNominatedPodIfExists
        if a.verdicts:
            s.shadows.assumed(assumed, a.verdicts)
        if plugins.binding:
            st = pipeline.run_reserve_plugins_reserve(a.state, assumed, a.node, plugins)
            if st.ok:
                st, waits = pipeline.run_permit_plugins(a.state, assumed, a.node, plugins)
                if st.code is Code.WAIT:
                    a.waiting = WaitingPod(assumed, waits)
                    self._waiting_pods[assumed.uid] = a.waiting
                    st = SUCCESS
            if not st.ok:
                pipeline.run_reserve_plugins_unreserve(a.state, assumed, a.node, plugins)
                self._cache.forget(assumed)
                if s.shadows:  # the attempt bound nothing: its verdicts are not compared
                    s.shadows.bind_ended(a.pod, None, "")
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
                await a.profile.recorder.nominate_for_binding(assumed, a.node)
                took = time.monotonic() - began
                if took >= SLOW_NOMINATION_SECONDS:
                    log.warning("nominating %s to %s before its binding took %.1fs",
                                assumed.key, a.node, took)
            if a.waiting is not None:
                try:
                    st = await a.waiting.wait()
                finally:
                    self._waiting_pods.pop(assumed.uid, None)
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
        if s.shadows:
            s.shadows.bind_ended(assumed, a.node if outcome is BindOutcome.BOUND else None,
                                 _rfc3339_now())
        if outcome is BindOutcome.BOUND:
            if a.plugins.post_bind:
                a.pipeline.run_post_bind_plugins(a.state, assumed, a.node, a.plugins)
            # As upstream's PodScheduled: from the pop to the end of the binding.
            metrics.schedule_attempt(s.name, metrics.SCHEDULED,
                                     time.perf_counter() - a.started)
            s.queue.done(qp)
            s.counters.binds_total += 1
            s.counters.last_bind_time = _rfc3339_now()
            s.recorder.scheduled(assumed, a.node)
            self._hooks.changed(s.name)
            return
        if a.plugins.reserve:
            a.pipeline.run_reserve_plugins_unreserve(a.state, assumed, a.node, a.plugins)
        self._cache.forget(assumed)
        if outcome is BindOutcome.DROPPED:  # never sent: back to the queue, untouched
            s.queue.restore(qp)
            s.report_pending()
            return
        if outcome is not BindOutcome.FAILED:
            # Bound elsewhere (409) or deleted (404): it leaves; never bind it twice. A pod
            # recreated under the same name is a new pod and is queued as such. Upstream
            # counts any failed binding as an error attempt (handleBindingCycleError).
            metrics.schedule_attempt(s.name, metrics.ERROR, time.perf_counter() - a.started)
            s.queue.done(qp)
            current = self._cache.pods.get(assumed.key)
            if current is not None and current.uid != assumed.uid and not current.node_name \
                    and not current.terminal and self._hooks.is_live(s):
                self._hooks.enqueue(s, current)
                s.report_pending()
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
        if a.profile.shadows:  # the attempt bound nothing: its verdicts are not compared
            a.profile.shadows.bind_ended(a.pod, None, "")
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
            s.queue.add_backoff(qp)
            s.report_pending()
            s.recorder.failed_scheduling(qp.pod, st.message)
            s.recorder.set_pod_scheduled_false(qp.pod, REASON_SCHEDULER_ERROR, st.message)
            return
        if group:
            # A member rejected with its group's status (errPodGroupUnschedulable): the
            # group's message, no rejecting plugin, the nomination cleared.
            metrics.schedule_attempt(s.name, metrics.UNSCHEDULABLE, elapsed)
            self._nominator.add(qp.pod, nominate or "")
            s.counters.unschedulable_attempts += 1
            s.queue.add_unschedulable(qp, ())
            s.report_pending()
            s.recorder.failed_scheduling(qp.pod, st.message)
            s.recorder.set_pod_scheduled_false(qp.pod, REASON_UNSCHEDULABLE, st.message,
                                               nominate or "")
            self._hooks.changed(s.name)
            return
        if fit_error is None:  # a Reserve, Permit or PreBind rejection: NumAllNodes 1
            fit_error = FitError(1, {a.node: st})
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
        message = fit_error.message
        s.counters.unschedulable_attempts += 1
        s.queue.add_unschedulable(qp, fit_error.rejecting_plugins())
        s.report_pending()
        s.recorder.failed_scheduling(qp.pod, message)
        s.recorder.set_pod_scheduled_false(qp.pod, REASON_UNSCHEDULABLE, message, nominated)
        self._hooks.changed(s.name)

    # -- the pod-group cycle (schedule_one_podgroup.go) ----------------------------------
    async def schedule_pod_group(self, profile: Profile, group: q.QueuedPodGroup) -> None:
        """scheduleOnePodGroup for a popped pod group: validate it, simulate every member on
        one snapshot (PlacementFeasible before and after each), revert the simulation, then
        submit: the members that fit go to their own binding cycles when the group is
        feasible; otherwise every member is rejected and nothing stays assumed or
        reserved. A bug fails every member not yet handled as an error, never the loop."""
        started = time.perf_counter()
        attempts = {qp.key: Attempt(profile, qp, qp.pod, started) for qp in group.members}
        # How the cycle ended, for the queue's requeue of the group (an exception: error).
        outcome = q.GroupOutcome.ERROR
        try:
            if not profile.runnable.is_set():
                for a in attempts.values():
                    profile.queue.restore(a.queued)
                outcome = q.GroupOutcome.RESTORED
                return
            profile.report_pending()
            outcome = await self._pod_group_cycle(profile, group, attempts, started)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is None or task.cancelling():
                raise
            log.error("scheduling pod group %s failed: a CancelledError nobody asked for",
                      group.key)
            for a in attempts.values():
                self.handle_failure(a, Status.error("internal error: CancelledError"))
        except Exception as err:  # a bug must not stop the scheduler
            log.exception("scheduling pod group %s failed", group.key)
            for a in attempts.values():
                self.handle_failure(a, Status.error(f"internal error: {err}"))
        finally:
            # AddAttemptedPodGroupIfNeeded, after every member's own requeue.
            profile.queue.group_done(group.key, outcome)
            profile.report_pending()

    async def _pod_group_cycle(self, s: Profile, group: q.QueuedPodGroup,
                               attempts: dict[str, Attempt],
                               started: float) -> q.GroupOutcome:
        """The cycle's steps; every member handled leaves `attempts`. Returns the root
        status's outcome for the queue."""
        groups = self._cache.pod_groups
        pod_group = groups.get(group.namespace, group.name)
        if pod_group is None:
            # reconcilePodGroupWithSnapshot: the group went away after the pop; its
            # members go back without a condition (there is no object to write it on).
            err = f'podgroup.scheduling.k8s.io "{group.name}" not found'
            for key in list(attempts):
                self.handle_failure(attempts.pop(key), Status.error(err))
            return q.GroupOutcome.ERROR
        info = PodGroupInfo(group.namespace, group.name, pod_group)
        err = self._validate_pod_group(s, info, [a.queued.pod for a in attempts.values()])
        if err:  # handlePodGroupFailureBeforeScheduling
            for key in list(attempts):
                self.handle_failure(attempts.pop(key), Status.error(err))
            self._update_pod_group_condition(s, info, "False", pgs.REASON_SCHEDULER_ERROR,
                                             err)
            return q.GroupOutcome.ERROR
        # skipPodGroupPodSchedule: members deleted, bound or assumed meanwhile.
        live: list[Attempt] = []
        for key in list(attempts):
            a = attempts[key]
            pod = self.current(a.queued.pod)
            if pod is None:
                s.queue.done(attempts.pop(key).queued)
                continue
            if not s.namespace_selected(pod, self._cache.namespaces):
                s.queue.done(attempts.pop(key).queued)
                self._hooks.enqueue(s, pod)
                continue
            a.queued.pod = a.pod = pod
            live.append(a)
        if not live:
            s.report_pending()
            return q.GroupOutcome.SUCCESS
        pipeline = s.pipeline
        for a in live:
            a.pipeline = pipeline
        outcome = await pod_group_algorithm(pipeline, self._cache, info,
                                            [a.pod for a in live])
        metrics.pod_group_algorithm(time.perf_counter() - started)
        waiting: PodGroupPostFilterResult | None = None
        # The queue requeues the group by the algorithm's status (podGroupCycle's
        # rootStatus), taken before the PodGroupPostFilter: an error there (DynamicResources'
        # `not found`) is what the members and the PodGroup say, but the group still backs
        # off as rejected (UnschedulableCount), not for an error (ConsecutiveErrorsCount).
        root = outcome.status
        if outcome.status.code is Code.UNSCHEDULABLE:
            # podGroupCycle: RunPodGroupPostFilterPlugins, then
            # applyPodGroupPostFilterResult: an error becomes the group's status, else its
            # message is appended to the group's; a Success leaves the group waiting on
            # preemption, its members nominated.
            ran: list[tuple[str, Code]] = []
            post, pst = await pod_group_post_filter(pipeline, self._cache, info,
                                                    [a.pod for a in live], outcome, ran)
            for name, code in ran:  # DefaultPreemption's PodGroupPostFilter, deferred count
                if name == DEFAULT_PREEMPTION:
                    metrics.workload_preemption_attempt(code)
            outcome.untried = outcome.status
            if pst.code is Code.ERROR:
                outcome.status = pst
            else:
                outcome.status = Status(outcome.status.code,
                                        (*outcome.status.reasons, pst.message),
                                        outcome.status.plugin)
                if pst.ok:
                    waiting = post or PodGroupPostFilterResult()
                    self._preempt_for_group(s, info, live, waiting)
        self._submit_pod_group(s, info, live, outcome, waiting)
        for a in live:
            attempts.pop(a.queued.key, None)
        # submitPodGroupAlgorithmResult's metric: the group's final status (after its
        # PodGroupPostFilter), not `root`.
        final = outcome.status
        if final.ok:
            result = metrics.SCHEDULED
        elif final.rejected:
            result = metrics.UNSCHEDULABLE if waiting is None else metrics.WAITING_ON_PREEMPTION
        else:
            result = metrics.ERROR
        metrics.pod_group_attempt(s.name, result, time.perf_counter() - started)
        if root.ok:
            return q.GroupOutcome.SUCCESS
        return q.GroupOutcome.REJECTED if root.rejected else q.GroupOutcome.ERROR

    def _validate_pod_group(self, s: Profile, info: PodGroupInfo,
                            queued: Sequence[PodInfo]) -> str:
        return validate_pod_group(self._cache.pod_groups, info, queued, s.name)

    def _submit_pod_group(self, s: Profile, info: PodGroupInfo, live: Sequence[Attempt],
                          outcome: PodGroupResult,
                          waiting: PodGroupPostFilterResult | None = None) -> None:
        """submitPodGroupAlgorithmResult: each member's outcome, then the group's
        PodGroupInitiallyScheduled condition. `waiting`: the group waits on preemption;
        each member gets its nomination from it (ModeOverride; "" clears)."""
        results, status = outcome.members, outcome.status

        def nominate(a: Attempt) -> str | None:
            return None if waiting is None else waiting.nominating.get(a.pod.key, "")

        for i, a in enumerate(live):
            res = results[i] if i < len(results) else None
            own = res.status if res is not None else status
            if status.code is Code.ERROR:
                self.handle_failure(a, own if own.code is Code.ERROR else status)
                continue
            if res is not None:
                a.result, a.node, a.state = res.result, res.node, res.state
                a.state.pod_group = None  # SetPodGroupSchedulingCycle(nil)
            if res is not None and res.status.ok:
                if status.ok:
                    # prepareForBindingCycle: assume and Reserve for real, Permit, and the
                    # member's own binding cycle.
                    self._assume_reserve_permit(a)
                else:
                    self.handle_failure(a, Status.unschedulable(POD_GROUP_UNSCHEDULABLE,
                                                                status.message), group=True,
                                        nominate=nominate(a))
                continue
            if res is None:  # not tried: the group's status (completePodGroupAlgorithmResult)
                self.handle_failure(a, outcome.untried or status, group=True,
                                    nominate=nominate(a))
            elif res.status.rejected:
                self.handle_failure(a, res.status, res.fit_error, nominate=nominate(a))
            else:
                self.handle_failure(a, res.status)
        if status.ok:
            self._update_pod_group_condition(s, info, "True", pgs.REASON_SCHEDULED,
                                             status.message)
            log.info("Successfully scheduled a pod group %s/%s", info.namespace, info.name)
        elif status.rejected:
            self._update_pod_group_condition(s, info, "False", pgs.REASON_UNSCHEDULABLE,
                                             status.message)
            log.info("Unable to schedule a pod group %s/%s: %s", info.namespace, info.name,
                     status.message)
        else:
            self._update_pod_group_condition(s, info, "False", pgs.REASON_SCHEDULER_ERROR,
                                             status.message)

    def _update_pod_group_condition(self, s: Profile, info: PodGroupInfo, status: str,
                                    reason: str, message: str) -> None:
        """updatePodGroupCondition: never from True back to False; patched only when
        SetStatusCondition changes something (observedGeneration included)."""
        obj = info.pod_group
        conditions = (obj.get("status") or {}).get("conditions") or ()
        existing = next((c for c in conditions if isinstance(c, Mapping)
                         and c.get("type") == pgs.POD_GROUP_INITIALLY_SCHEDULED), None)
        if existing is not None and existing.get("status") == "True" and status != "True":
            return
        generation = (obj.get("metadata") or {}).get("generation") or 0
        if existing is not None and existing.get("status") == status \
                and existing.get("reason") == reason and existing.get("message") == message \
                and (existing.get("observedGeneration") or 0) == generation:
            return
        transition = existing.get("lastTransitionTime") if existing is not None \
            and existing.get("status") == status else None
        condition: Json = {
            "type": pgs.POD_GROUP_INITIALLY_SCHEDULED, "status": status, "reason": reason,
            "message": message, "observedGeneration": generation,
            "lastTransitionTime": transition or _rfc3339_now(),
        }
        s.recorder.set_pod_group_condition(info.namespace, info.name,
                                           condition_patch(existing, condition))

    def _preempt_for_group(self, s: Profile, info: PodGroupInfo, live: Sequence[Attempt],
                           post: PodGroupPostFilterResult) -> None:
        """actuatePodGroupPreemption: evict the group's victims in the background (async
        preemption), the PodGroup the preemptor ("podgroup", its uid, node "cluster").
        A failed call retries the group at once (its members reactivated)."""
        from polsched.scheduler.preemption import GroupPreemptor  # the executor's module

        if not post.victims or not live:
            return
        c = s.counters
        c.preemptions_total += 1
        c.preemption_victims += len(post.victims)
        c.last_preemption = f"pod group {info.namespace}/{info.name} evicting " + \
            ", ".join(v.key for v in post.victims)
        uid = str((info.pod_group.get("metadata") or {}).get("uid") or "")
        members = [a.pod for a in live]

        def retry(_: PodInfo) -> None:  # an API call failed: try the group again now
            if self._hooks.is_live(s) and s.queue.activate(m.key for m in members):
                s.report_pending()

        preemptor = GroupPreemptor(members[0], uid, disruptions=post.disruptions)
        self._preemption.actuate(s.name, s.recorder, preemptor, CLUSTER_DOMAIN, post.victims,
                                 retry, self._hooks.activate_preemptors)

    def _preempt(self, a: Attempt, node_name: str, post: PostFilterResult) -> None:
        """Evict the victims in the background (async preemption); count it."""
        s, pod = a.profile, a.pod
        c = s.counters
        c.preemptions_total += 1
        c.preemption_victims += len(post.victims)
        c.last_preemption = f"{pod.key} on {node_name} evicting " + \
            ", ".join(v.key for v in post.victims)

        def retry(preemptor: PodInfo) -> None:  # an API call failed: try again now
            if self._hooks.is_live(s) and preemptor.key in s.queue:
                s.queue.delete(preemptor.key, preemptor.uid)
                current = self.current(preemptor)
                if current is not None:
                    self._hooks.enqueue(s, current)
                    s.report_pending()

        self._preemption.actuate(s.name, s.recorder, pod, node_name, post.victims, retry,
                                 self._hooks.activate_preemptors)


def _first_decision(s: Profile, pod: PodInfo, node: str | None, queued_at: float) -> None:
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


def condition_patch(existing: Mapping[str, Any] | None, condition: Json) -> Json:
    """The condition as PatchPodGroupStatus sends it: CreateTwoWayMergePatch(old, new)
    merges conditions by type, so against the version the cycle read (`existing`) only the
    fields that changed go, with the type. A True written meanwhile (not seen yet) then
    keeps its status when a later rejection changes only the message, as upstream's
    condition does."""
    if existing is None:
        return condition
    return {k: v for k, v in condition.items()
            if k == "type" or (existing.get(k) or
                               (0 if k == "observedGeneration" else "")) != v}


def _go_q(s: str) -> str:
    """Go's %q of a name."""
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _rfc3339_now() -> str:
    return rfc3339(time.time())
