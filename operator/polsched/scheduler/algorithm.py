"""The search of one attempt, as kube-scheduler's pkg/scheduler/schedule_one.go
(schedulePod and the functions it calls).

The pod's nominated node first (evaluateNominatedNode), then PreFilter and Filter over the
nodes from where the previous search stopped until enough feasible nodes are found
(findNodesThatFitPod; the Filter loop itself is framework.runtime's), the filter extenders
(findNodesThatPassExtenders), PreScore, Score, NormalizeScore, the weights and the
prioritize extenders (prioritizeNodes), and a random pick among the best (selectHost).
Pure: it runs the plugins through framework.runtime on a snapshot, and awaits only
extenders. The engine, explain, simulate, the shadows and the benchmarks all decide here.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from polsched.framework.budget import AttemptBudget
from polsched.framework.cycle_state import CycleState
from polsched.framework.diagnosis import (
    Explanation,
    FitError,
    NodeScore,
    PipelineError,
    PluginScore,
    ScheduleResult,
)
from polsched.framework.interfaces import (
    MAX_EXTENDER_PRIORITY,
    MAX_NODE_SCORE,
    Extender,
    ExtenderError,
)
from polsched.framework.runtime import Pipeline, PluginSet, Scores, go_list
from polsched.framework.status import Status
from polsched.framework.types import NodeInfo, PodInfo, Snapshot
from polsched.scheduler.batch import OpportunisticBatch, SortedNodes

log = logging.getLogger(__name__)


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
@dataclass(frozen=True)
class SearchLimits:
    """What bounds one pod's search, beyond the snapshot. `budget`: the attempt's time
    budget (framework.budget), on every CycleState of the search; past it BudgetExceeded
    (a PipelineError) ends the search; None: the group's, if any, else none.
    `placement`: the only nodes searched (the placement algorithm's assumed placement,
    ListNodesInPlacement); the plugins still see the whole snapshot; None: every node."""

    budget: AttemptBudget | None = None
    placement: Sequence[NodeInfo] | None = None
    # The profile's OpportunisticBatch (scheduler.batch) and the engine's scheduling cycle
    # of this attempt: the pod may be placed on the hint an alike pod's ranking gives, and
    # this search's ranking is kept for the next one. None: no batching.
    batch: OpportunisticBatch | None = None
    cycle: int = 0


NO_LIMITS = SearchLimits()


async def schedule_pod(pipeline: Pipeline, pod: PodInfo, snapshot: Snapshot,
                       explain: bool = False, post_filter: bool = True,
                       group_state: CycleState | None = None,
                       limits: SearchLimits = NO_LIMITS) -> ScheduleResult:
    """schedule_one.go schedulePod: decide a node for `pod`, or say why none fits (the
    PostFilter plugins, DefaultPreemption among them, run then). Raises PipelineError when
    a plugin or a non-ignorable extender fails (the pod is retried with backoff).
    `explain` evaluates every node and keeps every score (polsched explain).
    `post_filter` False: no PostFilter for a member tried in a pod-group cycle
    (schedulingAlgorithm with IsPodGroupSchedulingCycle); `group_state` is then the
    group's CycleState, which the member's own links to (GetPodGroupSchedulingCycle).
    `limits`: what bounds the search (SearchLimits: the attempt's time budget, the
    placement's nodes, the batch). No batching with `explain`, a placement or a group's
    state (those search as if the gate were off)."""
    budget, placement, batch, cycle = limits.budget, limits.placement, limits.batch, \
        limits.cycle
    if explain or placement is not None or group_state is not None:
        batch = None
    nodes = snapshot.nodes if placement is None else placement
    n_all = len(nodes)
    if n_all == 0:
        return ScheduleResult(None, fit_error=FitError(0))
    plugins = pipeline.plugins_for(pod)
    signature = pipeline.sign_pod(pod) if batch is not None else None
    if pipeline.nominator is not None and not explain:
        nominated_first = await evaluate_nominated_node(pipeline, pod, snapshot, plugins,
                                                        group_state, placement, budget)
        if nominated_first is not None:
            # evaluateNominatedNode: the node preemption made room on is tried before
            # the others; when it fits it is the only feasible node looked at.
            node_name, nominated_state = nominated_first
            if batch is not None:  # no hint for a nominated pod; the ranking is dropped
                batch.get_node_hint(pod, signature, cycle, lambda: nominated_state,
                                    snapshot, plugins)
                batch.store_schedule_results(signature, "", node_name, None, cycle)
            return ScheduleResult(node_name, 1, 1, state=nominated_state)
    state = CycleState(group_state, budget)
    hint = ""
    hint_rejected: tuple[str, Status] | None = None
    if batch is not None:
        # findNodesThatFitPod: PreFilter, then GetNodeHint; the hint is tried alone first,
        # as a nominated node (evaluateNominatedNode).
        def pre_filtered() -> CycleState | None:
            return state if pipeline.run_pre_filter_plugins(
                state, pod, snapshot, plugins)[0].ok else None

        hint, hint_state = batch.get_node_hint(pod, signature, cycle, pre_filtered,
                                               snapshot, plugins)
        hinted = snapshot.get(hint) if hint else None
        if hinted is not None:
            st = pipeline.run_filters_with_nominated(
                state, pod, hinted, plugins, pipeline.nominated_pods_on(pod, hint))
            if st.ok:
                batch.store_schedule_results(signature, hint, hint, None, cycle)
                return ScheduleResult(hint, 1, 1, state=state, hint_ties=batch.hint_ties)
            hint_rejected = (hint, st)
        if hint_state is not None:  # PreFilter ran for the hint: the search starts afresh
            state = CycleState(group_state, budget)
    feasible, diagnosis = find_nodes_that_fit_pod(pipeline, state, pod, snapshot, plugins,
                                                  explain, placement)
    if hint_rejected is not None:
        # evaluateNominatedNode recorded the hint's rejection in the search's NodeToStatus:
        # when the search did not reach that node again, it counts among the processed
        # nodes (nextStartNodeIndex) and the evaluated ones.
        name, st = hint_rejected
        if name not in diagnosis.node_statuses and all(n.name != name for n in feasible):
            diagnosis.node_statuses[name] = st
            pipeline.next_start = (pipeline.next_start + 1) % n_all
    evaluated = len(feasible) + len(diagnosis.node_statuses)
    if feasible and pipeline.extenders:
        feasible = await find_nodes_that_pass_extenders(pipeline, pod, feasible, diagnosis)
    explanation = None
    if explain:
        explanation = Explanation(filters=dict(diagnosis.node_statuses))
        if diagnosis.absent_status is not None:  # the nodes a PreFilterResult left out
            seen = {n.name for n in feasible}
            for n in nodes:
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
        if batch is not None:
            batch.store_schedule_results(signature, hint, feasible[0].name, None, cycle)
        return ScheduleResult(feasible[0].name, evaluated, 1, state=state)
    scores = await prioritize_nodes(pipeline, state, pod, feasible, snapshot, plugins,
                                    explain)
    best = select_host(pipeline, scores.totals)
    if batch is not None:
        others = SortedNodes([n.name for n in feasible], scores.totals,
                             scores.raw if signature is not None else {}, exclude=best)
        batch.store_schedule_results(signature, hint, feasible[best].name, others, cycle)
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
                                  plugins: PluginSet, group_state: CycleState | None = None,
                                  placement: Sequence[NodeInfo] | None = None,
                                  budget: AttemptBudget | None = None,
                                  ) -> tuple[str, CycleState] | None:
    """evaluateNominatedNode: the pod's nominated node (and the cycle's state) when it
    passes PreFilter, the filters (with the other nominated pods) and the filter
    extenders; None otherwise (the full search follows, with a fresh CycleState). A
    nominated node outside the `placement` is not tried (GetNodeInPlacement)."""
    assert pipeline.nominator is not None
    node_name = pipeline.nominator.node_of(pod.key) or pod.nominated_node
    node = snapshot.get(node_name) if node_name else None
    if node is None or (placement is not None
                        and all(n.name != node_name for n in placement)):
        return None
    state = CycleState(group_state, budget)
    st, narrowed = pipeline.run_pre_filter_plugins(state, pod, snapshot, plugins)
    if not st.ok or (narrowed.node_names is not None
                     and node_name not in narrowed.node_names):
        return None
    st = pipeline.run_filters_with_nominated(state, pod, node, plugins,
                                             pipeline.nominated_pods_on(pod, node_name))
    if not st.ok:
        return None
    if pipeline.extenders:
        feasible = await find_nodes_that_pass_extenders(pipeline, pod, [node], FitError(
            len(snapshot.nodes if placement is None else placement)))
        if not feasible:
            return None
    return node_name, state


def still_fits(pipeline: Pipeline, pod: PodInfo, snapshot: Snapshot, node_name: str) -> bool:
    """PreFilter, then every filter on one node with the pods nominated there, against the
    snapshot as it is now: the check before assume after a cycle awaited extenders and
    the cluster moved on. Upstream has no such check (its extenders answer inside the
    cycle, nothing else runs meanwhile); the node it assumes on passed
    RunFilterPluginsWithNominatedPods in findNodesThatPassFilters, so the check asks the
    same: a pod nominated there meanwhile (of an equal or higher priority) holds its
    room, as it would have in the first search."""
    node = snapshot.get(node_name)
    if node is None:
        return False
    state = CycleState()
    plugins = pipeline.plugins_for(pod)
    st, result = pipeline.run_pre_filter_plugins(state, pod, snapshot, plugins)
    if not st.ok or (result.node_names is not None and node_name not in result.node_names):
        return False
    return pipeline.run_filters_with_nominated(
        state, pod, node, plugins, pipeline.nominated_pods_on(pod, node_name)).ok


def find_nodes_that_fit_pod(pipeline: Pipeline, state: CycleState, pod: PodInfo,
                            snapshot: Snapshot, plugins: PluginSet, explain: bool = False,
                            placement: Sequence[NodeInfo] | None = None,
                            ) -> tuple[list[NodeInfo], FitError]:
    """schedule_one.go findNodesThatFitPod without the extenders: PreFilter, then Filter
    over the nodes (the `placement`'s only, when given) from where the previous search
    stopped (pipeline.next_start) until numFeasibleNodesToFind feasible nodes are found
    (every node with `explain`)."""
    all_nodes = snapshot.nodes if placement is None else list(placement)
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
        if placement is not None:  # GetNodeInPlacement
            inside = {n.name for n in placement}
            nodes = [n for n in nodes if n.name in inside]
        diagnosis.absent_status = Status.unresolvable(
            f"node(s) didn't satisfy plugin(s) {go_list(pre_result.plugins)}")
        diagnosis.unschedulable_plugins.update(pre_result.plugins)
    n_nodes = len(nodes)
    to_find = n_nodes if explain else num_feasible_nodes_to_find(
        pipeline.percentage_of_nodes_to_score, n_nodes)
    feasible, processed = pipeline.run_filter_plugins_on_nodes(
        state, pod, snapshot, nodes, plugins, to_find, diagnosis.node_statuses)
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
