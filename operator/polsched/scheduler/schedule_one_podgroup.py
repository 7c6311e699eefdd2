"""The pod-group cycle, as kube-scheduler's pkg/scheduler/schedule_one_podgroup.go.

The algorithm (`pod_group_algorithm`: PlacementFeasible, each member searched on one
snapshot, assumed and reserved, everything reverted in a `finally`), the PodGroupPostFilter
phase (`pod_group_post_filter`), what the offline tools ask of it (`pod_group_verdict`,
`validate_pod_group`), and `ScheduleOnePodGroup`: ScheduleOne with the group's cycle
(scheduleOnePodGroup: validate, skip, algorithm, PodGroupPostFilter, submit, the
PodGroupInitiallyScheduled condition). The members that fit go to their own binding
cycles (scheduler.schedule_one).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from polsched.framework import podgroups as pgs
from polsched.framework.budget import new_budget
from polsched.framework.cycle_state import CycleState
from polsched.framework.diagnosis import FitError, PipelineError, ScheduleResult
from polsched.framework.interfaces import (
    Placement,
    PlacementProgress,
    PodGroupAssignments,
    PodGroupInfo,
    PodGroupPostFilterResult,
    ProposedAssignment,
)
from polsched.framework.runtime import Pipeline
from polsched.framework.status import SUCCESS, Code, Status
from polsched.framework.types import NodeInfo, PodInfo
from polsched.objects import Json
from polsched.plugins.default_preemption import NAME as DEFAULT_PREEMPTION
from polsched.preemption.executor import GroupPreemptor
from polsched.preemption.pod_group import CLUSTER_DOMAIN
from polsched.scheduler import metrics
from polsched.scheduler.algorithm import SearchLimits, schedule_pod, select_host
from polsched.scheduler.queue.types import GroupOutcome, QueuedPodGroup
from polsched.scheduler.recorder import rfc3339
from polsched.scheduler.schedule_one import Attempt, ScheduleOne

if TYPE_CHECKING:
    from polsched.cluster.cache import ClusterCache
    from polsched.scheduler.profile import Profile

log = logging.getLogger(__name__)


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
    # Whether a member was placed (anyScheduled; False when the status is not Success).
    any_scheduled: bool = False
    # The placement algorithm's (TopologyAwareWorkloadScheduling): every placement tried,
    # in order, and the name of the one chosen (None: none was). None: the default
    # algorithm ran.
    placements: list[PlacementOutcome] | None = None
    chosen: str | None = None
    generated: int = 0  # how many placements were generated
    # A composite group's (CompositePodGroup): the result of every group of its tree that
    # was evaluated, by key (the chosen placement's, or the first one's when none fit),
    # its own included. None for a PodGroup.
    subtree: dict[str, PodGroupResult] | None = None


@dataclass
class PlacementOutcome:
    """One placement the placement algorithm tried: the group's status and its members'
    results there, how long it took, and (when more than one was feasible) each
    PlacementScore plugin's weighted score and their total."""

    placement: Placement
    status: Status
    members: list[MemberResult]
    seconds: float = 0.0
    scores: dict[str, int] = field(default_factory=dict)
    total: int | None = None


async def pod_group_algorithm(pipeline: Pipeline, cache: ClusterCache, group: PodGroupInfo,
                              pods: Sequence[PodInfo], budget_seconds: float | None = None
                              ) -> PodGroupResult:
    """runRootSchedulingAlgorithm + podGroupSchedulingAlgorithm: the placement algorithm
    when the pipeline runs it (TopologyAwareWorkloadScheduling), else the default one on
    every node. Success with nothing scheduled is Unschedulable (the framework requires
    at least 1 pod to be scheduled). Everything either assumes or reserves is reverted
    before this returns: the algorithm is a simulation. `budget_seconds`: each member's
    search has that time budget (framework.budget); None: none."""
    cycle_state = CycleState()
    if group.composite:
        out = await _composite_root(pipeline, cache, group, pods, budget_seconds)
    elif pipeline.placement_algorithm:
        out = await _placement_algorithm(pipeline, cache, group, pods, cycle_state,
                                         budget_seconds)
    else:
        out = await _default_algorithm(pipeline, cache, group, pods, cycle_state,
                                       budget_seconds=budget_seconds)
    if out.status.ok and not out.any_scheduled:
        out.status = Status.unschedulable(POD_GROUP_UNSCHEDULABLE)
    return out


async def _default_algorithm(pipeline: Pipeline, cache: ClusterCache, group: PodGroupInfo,
                             pods: Sequence[PodInfo], cycle_state: CycleState,
                             placement: Placement | None = None,
                             budget_seconds: float | None = None) -> PodGroupResult:
    """podGroupSchedulingDefaultAlgorithm: PlacementFeasible first (Remaining = the
    members to try, Scheduled = the group's assumed and bound members), then each member
    in order on the cache's snapshot (on the `placement`'s nodes only, when given; filters
    and scores, no PostFilter), assumed and reserved so that the next one sees it,
    PlacementFeasible after each. A final Wait is Unschedulable. Everything assumed or
    reserved is reverted before this returns, whatever happens (try/finally).
    `budget_seconds`: each member's search has that time budget; None: none."""
    group_plugins = pipeline.plugins
    out = PodGroupResult(Status.unschedulable(POD_GROUP_UNSCHEDULABLE), state=cycle_state)
    nodes = None if placement is None else placement.nodes
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
            res = await _member_algorithm(pipeline, cache, pod, reverts, cycle_state, nodes,
                                          budget_seconds)
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
        out.status = status
        out.any_scheduled = any_scheduled and status.ok
        return out
    finally:
        for revert in reversed(reverts):
            revert()


def _as_error(st: Status) -> str:
    """Status.AsError().Error() of upstream: the status's error when it has one (here the
    reason errPodGroupUnschedulable put first), else its message."""
    if st.reasons and st.reasons[0] == POD_GROUP_UNSCHEDULABLE:
        return POD_GROUP_UNSCHEDULABLE
    return st.message


async def _placement_algorithm(pipeline: Pipeline, cache: ClusterCache, group: PodGroupInfo,
                               pods: Sequence[PodInfo], cycle_state: CycleState,
                               budget_seconds: float | None = None,
                               nodes: Sequence[NodeInfo] | None = None) -> PodGroupResult:
    """podGroupSchedulingPlacementAlgorithm: the PlacementGenerate plugins' placements out
    of every node; the default algorithm in each (reverted after each); none feasible:
    the first one's result, Unschedulable `0/N placements are available, first placement
    status: ...`; one: that one; more: the PlacementScore plugins choose
    (findBestPodGroupPlacement). The result keeps every placement tried
    (`placements`, for the metrics and explain) and the chosen one's name. `nodes`: the
    parent composite group's placement (ListNodesInPlacement); None: every node."""
    placements, st = pipeline.run_placement_generate_plugins(
        cycle_state, group, cache.snapshot.nodes if nodes is None else nodes)
    if not st.ok:
        return PodGroupResult(st, state=cycle_state, placements=[])
    out = await _try_placements(pipeline, cache, group, pods, cycle_state, placements,
                                budget_seconds)
    out.generated = len(placements)
    return out


async def _try_placements(pipeline: Pipeline, cache: ClusterCache, group: PodGroupInfo,
                          pods: Sequence[PodInfo], cycle_state: CycleState,
                          placements: list[Placement],
                          budget_seconds: float | None = None) -> PodGroupResult:
    """The loop of podGroupSchedulingPlacementAlgorithm over the generated placements."""
    tried: list[PlacementOutcome] = []
    first: PodGroupResult | None = None
    feasible: list[tuple[PlacementOutcome, PodGroupResult]] = []
    for placement in placements:
        started = time.perf_counter()
        res = await _default_algorithm(pipeline, cache, group, pods, cycle_state, placement,
                                       budget_seconds)
        outcome = PlacementOutcome(placement, res.status, res.members,
                                   time.perf_counter() - started)
        if res.status.code is Code.ERROR:
            res.placements = tried
            return res
        tried.append(outcome)
        if first is None:
            first = res
        if res.status.ok:
            feasible.append((outcome, res))
    if not feasible:
        assert first is not None  # at least one placement was generated
        first.status = Status.unschedulable(
            POD_GROUP_UNSCHEDULABLE, f"0/{len(placements)} placements are available, "
            f"first placement status: {_as_error(first.status)}")
        first.placements = tried
        return first
    i, st = _find_best_placement(pipeline, group, feasible)
    if i is None:
        return PodGroupResult(st, state=cycle_state, placements=tried)
    chosen, best = feasible[i]
    best.placements, best.chosen = tried, chosen.placement.name
    return best


def _find_best_placement(pipeline: Pipeline, group: PodGroupInfo,
                         feasible: list[tuple[PlacementOutcome, PodGroupResult]]
                         ) -> tuple[int | None, Status]:
    """findBestPodGroupPlacement: the index of the only feasible placement, or of the one
    with the highest total of the PlacementScore plugins (ties broken at random, the
    pipeline's rng); each scored outcome gets its scores. A plugin's failure: (None, its
    status)."""
    if len(feasible) == 1:
        return 0, SUCCESS
    assignments = [PodGroupAssignments(o.placement, tuple(
        ProposedAssignment(m.pod, m.node, m.state) for m in r.members
        if m.status.ok and m.node)) for o, r in feasible]
    states = [CycleState(r.state) for _, r in feasible]
    scores, st = pipeline.run_placement_score_plugins(states, group, assignments)
    if not st.ok:
        return None, st
    for (outcome, _), ps in zip(feasible, scores, strict=True):
        outcome.scores, outcome.total = ps.scores, ps.total
    return select_host(pipeline, [ps.total for ps in scores]), SUCCESS


# -- composite groups (CompositePodGroup: podGroupSchedulingRecursiveAlgorithm) ---------------
def leaf_pods(pods: Sequence[PodInfo]) -> dict[str, list[PodInfo]]:
    """A tree's queued members by their PodGroup's key (QueuedPodInfos), in order."""
    out: dict[str, list[PodInfo]] = {}
    for pod in pods:
        key = pgs.pod_group_key(pod)
        if key is not None:
            out.setdefault(key, []).append(pod)
    return out


def build_tree(groups: pgs.PodGroups, key: str, depth: int = 0) -> PodGroupInfo | None:
    """The PodGroupInfo of a group and, for a composite one, of its tree as the cache
    holds it now (buildQueuedPodGroupInfo, reconciled with the snapshot); None when an
    object is gone or the tree is deeper than WorkloadMaxTreeDepth."""
    composite, ns, name = pgs.split_key(key)
    obj = groups.get_composite(ns, name) if composite else groups.get(ns, name)
    if obj is None or depth >= pgs.MAX_TREE_DEPTH:
        return None
    if not composite:
        return PodGroupInfo(ns, name, obj)
    children = []
    for child in groups.children(key):
        info = build_tree(groups, child, depth + 1)
        if info is None:
            return None
        children.append(info)
    return PodGroupInfo(ns, name, obj, composite=True, children=tuple(children))


def tree_leaves(info: PodGroupInfo) -> list[PodGroupInfo]:
    """The PodGroups of a tree, depth first in GetChildGroups' order."""
    if not info.composite:
        return [info]
    return [leaf for child in info.children for leaf in tree_leaves(child)]


class _Tree:
    """What one composite cycle shares: the pipeline, the cache, the members by PodGroup
    and each member's time budget."""

    def __init__(self, pipeline: Pipeline, cache: ClusterCache,
                 pods: Mapping[str, Sequence[PodInfo]], budget: float | None) -> None:
        self.pipeline, self.cache, self.pods, self.budget = pipeline, cache, pods, budget

    async def recursive(self, info: PodGroupInfo, nodes: Sequence[NodeInfo],
                        results: dict[str, PodGroupResult],
                        reverts: list[Callable[[], None]]) -> PodGroupResult:
        """podGroupSchedulingRecursiveAlgorithm: a PodGroup by its own algorithm in the
        parent's placement (`nodes`), its chosen members assumed again for the groups
        after it (assumeSubtreeWithRevert, reverts added to `reverts`); a composite
        group by the placement algorithm of composite groups."""
        if info.composite:
            return await self.composite(info, nodes, results, reverts)
        pods = self.pods.get(info.key, [])
        if self.pipeline.placement_algorithm:
            res = await _placement_algorithm(self.pipeline, self.cache, info, pods,
                                             CycleState(), self.budget, nodes)
        else:
            res = await _default_algorithm(self.pipeline, self.cache, info, pods,
                                           CycleState(), Placement("", tuple(nodes)),
                                           self.budget)
        results[info.key] = res
        if res.status.ok:
            st = _assume_members(self.pipeline, self.cache, res.members, reverts)
            if not st.ok:
                res = PodGroupResult(Status.error(f"failed to assume the subtree: {st.message}"),
                                     state=res.state)
                results[info.key] = res
        return res

    async def composite(self, info: PodGroupInfo, nodes: Sequence[NodeInfo],
                        results: dict[str, PodGroupResult],
                        reverts: list[Callable[[], None]]) -> PodGroupResult:
        """compositePodGroupSchedulingPlacementAlgorithm: the PlacementGenerate plugins'
        placements of the composite group out of its parent's; in each, its children one
        after another (compositePodGroupSchedulingDefaultAlgorithm), reverted after each;
        none feasible: the first one's subtree, Unschedulable `0/N placements are
        available, first placement status: ...`; otherwise the PlacementScore plugins
        choose among the feasible ones (every member of the subtree's successful
        PodGroups counts), and the chosen subtree's members are assumed again."""
        pipeline = self.pipeline
        cycle_state = CycleState()
        placements, st = pipeline.run_placement_generate_plugins(cycle_state, info, nodes)
        if not st.ok:
            res = PodGroupResult(st, state=cycle_state, placements=[])
            results[info.key] = res
            return res
        tried: list[PlacementOutcome] = []
        first: dict[str, PodGroupResult] | None = None
        feasible: list[tuple[PlacementOutcome, PodGroupResult]] = []
        subtrees: list[dict[str, PodGroupResult]] = []
        for placement in placements:
            started = time.perf_counter()
            sub: dict[str, PodGroupResult] = {}
            sub_reverts: list[Callable[[], None]] = []
            try:
                res = await self.children(info, placement, sub, sub_reverts)
            finally:
                for revert in reversed(sub_reverts):
                    revert()
            # What each PodGroup placed there on its own (explain's view of the domain);
            # PlacementScore reads only the successful subtree's (below).
            outcome = PlacementOutcome(placement, res.status, [
                m for leaf in tree_leaves(info) if leaf.key in sub
                and sub[leaf.key].status.ok for m in sub[leaf.key].members],
                time.perf_counter() - started)
            if res.status.code is Code.ERROR:
                res.placements = tried
                results[info.key] = res
                return res
            tried.append(outcome)
            if first is None:
                first = sub
            if res.status.ok:
                feasible.append((outcome, res))
                subtrees.append(sub)
        if not feasible:
            assert first is not None
            root = first[info.key]
            root.status = Status.unschedulable(
                POD_GROUP_UNSCHEDULABLE, f"0/{len(placements)} placements are available, "
                f"first placement status: {_as_error(root.status)}")
            root.placements, root.generated = tried, len(placements)
            results.update(first)
            return root
        for (_, res), sub in zip(feasible, subtrees, strict=True):
            # makeCompositePodGroupAssignments: the successful leaves' members.
            res.members = [m for leaf in _successful_leaves(info, sub) for m in leaf.members]
        i, st = _find_best_placement(pipeline, info, feasible)
        if i is None:
            res = PodGroupResult(st, state=cycle_state, placements=tried)
            results[info.key] = res
            return res
        chosen, best = feasible[i]
        best_sub = subtrees[i]
        st = _assume_members(pipeline, self.cache, best.members, reverts)
        if not st.ok:
            res = PodGroupResult(Status.error(f"failed to assume the subtree: {st.message}"),
                                 state=cycle_state, placements=tried)
            results[info.key] = res
            return res
        results.update(best_sub)
        best.members = []
        best.placements, best.chosen, best.generated = tried, chosen.placement.name, \
            len(placements)
        return best

    async def children(self, info: PodGroupInfo, placement: Placement,
                       results: dict[str, PodGroupResult],
                       reverts: list[Callable[[], None]]) -> PodGroupResult:
        """compositePodGroupSchedulingDefaultAlgorithm: PlacementFeasible first
        (Remaining = the children), then each child in GetChildGroups' order, recursively,
        PlacementFeasible after each (Scheduled = the children that succeeded), stopping
        at Unschedulable; a final Wait is Unschedulable. A child's error is the group's.
        What the children assumed stays for the caller (`reverts`) when the group
        succeeds and is reverted here when it fails."""
        pipeline = self.pipeline
        state = CycleState()
        mine: list[Callable[[], None]] = []
        out = PodGroupResult(Status.unschedulable(POD_GROUP_UNSCHEDULABLE), state=state)
        try:
            progress = PlacementProgress(len(info.children), 0)
            st = pipeline.run_placement_feasible_plugins(state, info, progress,
                                                         pipeline.plugins)
            if st.code in (Code.UNSCHEDULABLE, Code.ERROR):
                out.status = st
                return out
            any_scheduled = False
            for child in info.children:
                res = await self.recursive(child, placement.nodes, results, mine)
                if res.status.code is Code.ERROR:
                    out.status = Status.error("composite pod group evaluation failed due to "
                                              f"child error: {res.status.message}")
                    return out
                any_scheduled = any_scheduled or res.any_scheduled
                progress = PlacementProgress(progress.remaining - 1,
                                             progress.scheduled + (1 if res.status.ok else 0))
                st = pipeline.run_placement_feasible_plugins(state, info, progress,
                                                             pipeline.plugins)
                if st.code in (Code.UNSCHEDULABLE, Code.ERROR):
                    break
            if st.code is Code.WAIT:
                st = Status.unschedulable(POD_GROUP_UNSCHEDULABLE, *st.reasons)
            out.status = st
            out.any_scheduled = any_scheduled and st.ok
            return out
        finally:
            results[info.key] = out
            if out.status.ok:
                reverts.extend(mine)
            else:
                for revert in reversed(mine):
                    revert()


def _successful_leaves(root: PodGroupInfo, results: Mapping[str, PodGroupResult]
                       ) -> list[PodGroupResult]:
    """successfulLeafResults: the results of the PodGroups whose ancestors and selves
    succeeded and that placed members."""
    out: list[PodGroupResult] = []

    def walk(info: PodGroupInfo) -> None:
        res = results.get(info.key)
        if res is None or not res.status.ok:
            return
        for child in info.children:
            walk(child)
        if not info.composite and res.members:
            out.append(res)
    walk(root)
    return out


def _assume_members(pipeline: Pipeline, cache: ClusterCache, members: Sequence[MemberResult],
                    reverts: list[Callable[[], None]]) -> Status:
    """assumeAndReserveWithRevert of every member that was placed (its search's node and
    CycleState); the reverts go to `reverts`."""
    for m in members:
        if not m.status.ok or not m.node:
            continue
        plugins = pipeline.plugins_for(m.pod)
        assumed = cache.assume(m.pod, m.node)
        st = pipeline.run_reserve_plugins_reserve(m.state, assumed, m.node, plugins)

        def revert(state: CycleState = m.state, pod: PodInfo = assumed,
                   node: str = m.node, ps: Any = plugins) -> None:
            pipeline.run_reserve_plugins_unreserve(state, pod, node, ps)
            cache.forget(pod)
        if not st.ok:
            revert()
            return st
        reverts.append(revert)
    return SUCCESS


async def _composite_root(pipeline: Pipeline, cache: ClusterCache, group: PodGroupInfo,
                          pods: Sequence[PodInfo], budget_seconds: float | None
                          ) -> PodGroupResult:
    """runRootSchedulingAlgorithm for a CompositePodGroup root: the recursive algorithm
    on every node, everything it assumed reverted; the root's result carries every
    evaluated group's (`subtree`)."""
    tree = _Tree(pipeline, cache, leaf_pods(pods), budget_seconds)
    results: dict[str, PodGroupResult] = {}
    reverts: list[Callable[[], None]] = []
    try:
        root = await tree.recursive(group, cache.snapshot.nodes, results, reverts)
    finally:
        for revert in reversed(reverts):
            revert()
    root.subtree = results
    return root


def complete_tree(root: PodGroupInfo, result: PodGroupResult) -> dict[str, PodGroupResult]:
    """completeCompositePodGroupAlgorithmResultMap: every group of the tree gets a result;
    a group that was not evaluated, or that succeeded under a parent that failed, gets
    its parent's status (the same Status, as upstream shares the pointer)."""
    results = dict(result.subtree or {})
    results[root.key] = result

    def walk(info: PodGroupInfo, parent: Status) -> None:
        res = results.get(info.key)
        if res is None or (not parent.ok and res.status.ok):
            res = PodGroupResult(parent)
            results[info.key] = res
        for child in info.children:
            walk(child, res.status)
    walk(root, SUCCESS)
    return results


def apply_tree_post_filter(results: Mapping[str, PodGroupResult], pst: Status) -> None:
    """applyPodGroupPostFilterResult over a tree's completed results: an error becomes
    every group's status; otherwise the PodGroupPostFilter's message is appended to each
    result's status, so a Status shared by several groups (complete_tree: a parent's and
    the children it overrode) gets it once per group, as upstream appends through the
    shared pointer."""
    shared: dict[int, int] = {}
    for r in results.values():
        shared[id(r.status)] = shared.get(id(r.status), 0) + 1
    appended: dict[int, Status] = {}
    for r in results.values():
        before = r.status
        if pst.code is Code.ERROR:
            r.status = pst
            continue
        if id(before) not in appended:
            appended[id(before)] = Status(
                before.code, (*before.reasons, *([pst.message] * shared[id(before)])),
                before.plugin)
        r.status = appended[id(before)]


async def placement_capacity(pipeline: Pipeline, cache: ClusterCache,
                             pods: Sequence[PodInfo], placement: Placement) -> int:
    """How many of `pods` the member search (podGroupPodSchedulingAlgorithm) places in
    `placement`, one after another, each seeing those before it, with no PlacementFeasible
    to stop it early: what `polsched explain` reports as a domain's room for a gang (the
    decision stays pod_group_algorithm's). Everything is reverted before this returns."""
    reverts: list[Callable[[], None]] = []
    placed = 0
    try:
        for pod in pods:
            res = await _member_algorithm(pipeline, cache, pod, reverts, CycleState(),
                                          placement.nodes)
            if res.status.ok:
                placed += 1
            elif not res.status.rejected:
                break
        return placed
    finally:
        for revert in reversed(reverts):
            revert()


async def _member_algorithm(pipeline: Pipeline, cache: ClusterCache, pod: PodInfo,
                            reverts: list[Callable[[], None]],
                            group_state: CycleState | None = None,
                            placement: Sequence[NodeInfo] | None = None,
                            budget_seconds: float | None = None) -> MemberResult:
    """podGroupPodSchedulingAlgorithm: the search for one member (no PostFilter; on the
    `placement`'s nodes only, when given; with a time budget of `budget_seconds`), then
    assume + Reserve with a revert (assumeAndReserveWithRevert)."""
    snapshot = cache.snapshot
    if not (snapshot.nodes if placement is None else placement):
        return MemberResult(pod, Status.unresolvable(), fit_error=FitError(0))
    try:
        result = await schedule_pod(pipeline, pod, snapshot, post_filter=False,
                                    group_state=group_state,
                                    limits=SearchLimits(new_budget(budget_seconds),
                                                        placement))
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


@dataclass(frozen=True)
class MemberVerdict:
    """What submitPodGroupAlgorithmResult does with one member: assume it (`status` None)
    or fail it with `status` (its FitError; `group`: rejected with its group's status)."""

    status: Status | None
    fit_error: FitError | None = None
    group: bool = False


def member_verdict(res: MemberResult | None, status: Status,
                   untried: Status | None = None, waiting: bool = False) -> MemberVerdict:
    """One member's verdict from its result in the cycle (None: not tried) and the group's
    final status (`untried`: the group's before its PodGroupPostFilter, what a member not
    tried gets; `waiting`: the group waits on preemption, its PodGroupPostFilter
    nominated). The engine's submit and `polsched simulate` both ask it."""
    if status.code is Code.ERROR:
        own = res.status if res is not None else status
        return MemberVerdict(own if own.code is Code.ERROR else status)
    if res is not None and res.status.ok:
        if status.ok:
            return MemberVerdict(None)
        if waiting:  # waitingOnPreemption: the group's own status, as it is
            return MemberVerdict(status, group=True)
        # The group's message behind errPodGroupUnschedulable.
        return MemberVerdict(Status.unschedulable(POD_GROUP_UNSCHEDULABLE, status.message),
                             group=True)
    if res is None:  # not tried: the group's status (completePodGroupAlgorithmResult)
        return MemberVerdict(untried or status, group=True)
    if res.status.rejected:
        return MemberVerdict(res.status, res.fit_error)
    return MemberVerdict(res.status)


def apply_pod_group_post_filter(outcome: PodGroupResult,
                                post: PodGroupPostFilterResult | None,
                                pst: Status) -> PodGroupPostFilterResult | None:
    """applyPodGroupPostFilterResult on a rejected group's `outcome`: its status before
    the phase becomes `untried` (what a member not tried gets); an error becomes the
    group's status, else the phase's message is appended to it. Returns the group's
    waitingOnPreemption result (members nominated from it) when the phase succeeded,
    else None. The engine's cycle and the offline tools' verdict both apply it."""
    outcome.untried = outcome.status
    if pst.code is Code.ERROR:
        outcome.status = pst
        return None
    outcome.status = Status(outcome.status.code, (*outcome.status.reasons, pst.message),
                            outcome.status.plugin)
    return (post or PodGroupPostFilterResult()) if pst.ok else None


@dataclass(frozen=True)
class PodGroupVerdict:
    """What the pod-group cycle would decide (`pod_group_verdict`): the algorithm's
    result (`outcome.status` is the group's final status, `outcome.untried` its status
    before the PodGroupPostFilter phase) and whether the group would wait on preemption."""

    outcome: PodGroupResult
    waiting: bool

    @property
    def status(self) -> Status:
        return self.outcome.status


async def pod_group_verdict(pipeline: Pipeline, cache: ClusterCache, group: PodGroupInfo,
                            pods: Sequence[PodInfo]) -> PodGroupVerdict:
    """The pod-group cycle's decision without acting on it (polsched explain and simulate):
    pod_group_algorithm, then for a rejected group the PodGroupPostFilter phase, whose
    error becomes the group's status and whose message is otherwise appended
    (applyPodGroupPostFilterResult). Nothing is evicted or deallocated: the pipeline of an
    offline tool has no API writer, and DefaultPreemption only chooses victims. The
    outcome's status becomes the group's final status, as in the engine's cycle."""
    outcome = await pod_group_algorithm(pipeline, cache, group, pods)
    waiting = None
    if outcome.status.code is Code.UNSCHEDULABLE:
        post, pst = await pod_group_post_filter(pipeline, cache, group, pods, outcome)
        waiting = apply_pod_group_post_filter(outcome, post, pst)
    return PodGroupVerdict(outcome, waiting is not None)


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
        # A composite group: the members of every PodGroup evaluated (each result's).
        members = again.members if again.subtree is None else [
            m for key, r in again.subtree.items() if not pgs.split_key(key)[0]
            for m in r.members]
        return [ProposedAssignment(m.pod, m.node if m.status.ok else "", m.state)
                for m in members], st

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
    # validateScheduledPods: of every PodGroup under a composite group.
    for pod in groups.subtree_scheduled(info.key):
        err = validate(pod)
        if err:
            return err
    if name != scheduler_name:
        return f"profile not found for scheduler name {_go_q(name)}"
    return ""


class ScheduleOnePodGroup(ScheduleOne):
    """ScheduleOne with the pod-group cycle (schedule_one_podgroup.go's methods of
    upstream's Scheduler): what the engine runs for every popped pod and pod group."""

    # PodGroups (by uid) this scheduler set PodGroupInitiallyScheduled=True on, newest last:
    # the condition's write is asynchronous (the recorder), so the next cycle of a tree
    # may read the PodGroup before the watch brings it back; upstream's patch is made in
    # the cycle, before the next one reads the group. Bounded.
    _scheduled_uids: dict[str, None] | None = None
    MAX_SCHEDULED_UIDS = 10_000

    # -- the pod-group cycle (schedule_one_podgroup.go) ----------------------------------
    async def schedule_pod_group(self, profile: Profile, group: QueuedPodGroup) -> None:
        """scheduleOnePodGroup for a popped pod group: validate it, simulate every member on
        one snapshot (PlacementFeasible before and after each), revert the simulation, then
        submit: the members that fit go to their own binding cycles when the group is
        feasible; otherwise every member is rejected and nothing stays assumed or
        reserved. A bug fails every member not yet handled as an error, never the loop."""
        started = time.perf_counter()
        self.cycles += 1  # one cycle for the whole group, as upstream's pod-group pop
        attempts = {qp.key: Attempt(profile, qp, qp.pod, started, cycle=self.cycles)
                    for qp in group.members}
        # How the cycle ended, for the queue's requeue of the group (an exception: error).
        outcome = GroupOutcome.ERROR
        try:
            if not profile.runnable.is_set():
                for a in attempts.values():
                    profile.restore(a.queued)
                outcome = GroupOutcome.RESTORED
                return
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
            profile.group_done(group.key, outcome)

    async def _pod_group_cycle(self, s: Profile, group: QueuedPodGroup,
                               attempts: dict[str, Attempt],
                               started: float) -> GroupOutcome:
        """The cycle's steps; every member handled leaves `attempts`. Returns the root
        status's outcome for the queue."""
        groups = self._cache.pod_groups
        if group.composite:
            return await self._composite_cycle(s, group, attempts, started)
        pod_group = groups.get(group.namespace, group.name)
        if pod_group is None:
            # reconcilePodGroupWithSnapshot: the group went away after the pop; its
            # members go back without a condition (there is no object to write it on).
            err = f'podgroup.scheduling.k8s.io "{group.name}" not found'
            for key in list(attempts):
                self.handle_failure(attempts.pop(key), Status.error(err))
            return GroupOutcome.ERROR
        info = PodGroupInfo(group.namespace, group.name, pod_group)
        err = self._validate_pod_group(s, info, [a.queued.pod for a in attempts.values()])
        if err:  # handlePodGroupFailureBeforeScheduling
            for key in list(attempts):
                self.handle_failure(attempts.pop(key), Status.error(err))
            self._update_pod_group_condition(s, info, "False", pgs.REASON_SCHEDULER_ERROR,
                                             err)
            return GroupOutcome.ERROR
        live = self._live(s, attempts)
        if not live:
            return GroupOutcome.SUCCESS
        pipeline = s.pipeline
        for a in live:
            a.pipeline = pipeline
        outcome = await pod_group_algorithm(pipeline, self._cache, info,
                                            [a.pod for a in live], self.attempt_budget)
        metrics.pod_group_algorithm(time.perf_counter() - started)
        if outcome.generated:  # RecordGeneratedPlacements: only when generation succeeded
            metrics.generated_placements(s.name, outcome.generated)
        if outcome.placements is not None:
            for tried in outcome.placements:
                metrics.placement_evaluation(s.name, tried.status.ok, tried.seconds)
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
            waiting = apply_pod_group_post_filter(outcome, post, pst)
            if waiting is not None:
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
            return GroupOutcome.SUCCESS
        return GroupOutcome.REJECTED if root.rejected else GroupOutcome.ERROR

    def _live(self, s: Profile, attempts: dict[str, Attempt]) -> list[Attempt]:
        """skipPodGroupPodSchedule: members deleted, bound or assumed meanwhile leave."""
        live: list[Attempt] = []
        for key in list(attempts):
            a = attempts[key]
            pod = self.current(a.queued.pod)
            if pod is None:
                s.done(attempts.pop(key).queued)
                continue
            if not s.namespace_selected(pod, self._cache.namespaces):
                s.done(attempts.pop(key).queued)
                self._hooks.enqueue(s, pod)
                continue
            a.queued.pod = a.pod = pod
            live.append(a)
        return live

    async def _composite_cycle(self, s: Profile, group: QueuedPodGroup,
                               attempts: dict[str, Attempt],
                               started: float) -> GroupOutcome:
        """The cycle of a tree rooted at a CompositePodGroup (CompositePodGroup on): the
        tree as the cache holds it, validated as one group (the root's priority); the
        recursive algorithm; for a rejected root the PodGroupPostFilter phase, its message
        appended to every group's status (applyPodGroupPostFilterResult); then each
        PodGroup's members and PodGroupInitiallyScheduled condition, as
        submitPodGroupAlgorithmResult does per PodGroup, every group's result completed
        from its parent's (completeCompositePodGroupAlgorithmResult)."""
        groups = self._cache.pod_groups
        info = build_tree(groups, group.key) if groups.lookup(group.key) is not None \
            else None
        if info is None:
            # reconcilePodGroupWithSnapshot: the tree changed after the pop.
            err = f'compositepodgroup.scheduling.k8s.io "{group.name}" not found'
            for key in list(attempts):
                self.handle_failure(attempts.pop(key), Status.error(err))
            return GroupOutcome.ERROR
        leaves = tree_leaves(info)
        err = self._validate_pod_group(s, info, [a.queued.pod for a in attempts.values()])
        if err:  # handlePodGroupFailureBeforeScheduling; updatePodGroupConditionWithError
            for key in list(attempts):
                self.handle_failure(attempts.pop(key), Status.error(err))
            for leaf in leaves:
                self._update_pod_group_condition(s, leaf, "False",
                                                 pgs.REASON_SCHEDULER_ERROR, err)
            return GroupOutcome.ERROR
        live = self._live(s, attempts)
        if not live:
            return GroupOutcome.SUCCESS
        pipeline = s.pipeline
        for a in live:
            a.pipeline = pipeline
        pods = [a.pod for a in live]
        outcome = await pod_group_algorithm(pipeline, self._cache, info, pods,
                                            self.attempt_budget)
        metrics.pod_group_algorithm(time.perf_counter() - started)
        results = complete_tree(info, outcome)
        for r in results.values():
            r.untried = r.status
        root = outcome.status
        waiting: PodGroupPostFilterResult | None = None
        final = outcome.status
        if outcome.status.code is Code.UNSCHEDULABLE:
            ran: list[tuple[str, Code]] = []
            post, pst = await pod_group_post_filter(pipeline, self._cache, info, pods,
                                                    outcome, ran)
            for name, code in ran:
                if name == DEFAULT_PREEMPTION:
                    metrics.workload_preemption_attempt(code)
            apply_tree_post_filter(results, pst)
            final = results[info.key].status
            if pst.ok:
                waiting = post or PodGroupPostFilterResult()
                self._preempt_for_group(s, info, live, waiting)
        for leaf in leaves:
            mine = [a for a in live if pgs.pod_group_key(a.pod) == leaf.key]
            self._submit_pod_group(s, leaf, mine, results[leaf.key], waiting)
        for a in live:
            attempts.pop(a.queued.key, None)
        if final.ok:
            result = metrics.SCHEDULED
        elif final.rejected:
            result = metrics.UNSCHEDULABLE if waiting is None else metrics.WAITING_ON_PREEMPTION
        else:
            result = metrics.ERROR
        metrics.pod_group_attempt(s.name, result, time.perf_counter() - started)
        if root.ok:
            return GroupOutcome.SUCCESS
        return GroupOutcome.REJECTED if root.rejected else GroupOutcome.ERROR

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
            v = member_verdict(res, status, outcome.untried, waiting is not None)
            if status.code is Code.ERROR:
                assert v.status is not None
                self.handle_failure(a, v.status)
                continue
            if res is not None:
                a.result, a.node, a.state = res.result, res.node, res.state
                a.state.pod_group = None  # SetPodGroupSchedulingCycle(nil)
            if v.status is None:
                # prepareForBindingCycle: assume and Reserve for real, Permit, and the
                # member's own binding cycle.
                self._assume_reserve_permit(a)
            elif v.status.rejected:
                self.handle_failure(a, v.status, v.fit_error, group=v.group,
                                    nominate=nominate(a))
            else:
                self.handle_failure(a, v.status)
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
        uid = str((obj.get("metadata") or {}).get("uid") or "")
        if self._scheduled_uids is None:
            self._scheduled_uids = {}
        if status != "True" and uid and uid in self._scheduled_uids:
            return  # True written, not observed yet: never back to False
        if status == "True" and uid:
            self._scheduled_uids[uid] = None
            if len(self._scheduled_uids) > self.MAX_SCHEDULED_UIDS:
                del self._scheduled_uids[next(iter(self._scheduled_uids))]
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
            "lastTransitionTime": transition or rfc3339(time.time()),
        }
        s.set_pod_group_condition(info.namespace, info.name,
                                  condition_patch(existing, condition))

    def _preempt_for_group(self, s: Profile, info: PodGroupInfo, live: Sequence[Attempt],
                           post: PodGroupPostFilterResult) -> None:
        """actuatePodGroupPreemption: evict the group's victims in the background (async
        preemption), the PodGroup the preemptor ("podgroup", its uid, node "cluster").
        A failed call retries the group at once (its members reactivated)."""
        if not post.victims or not live:
            return
        uid = str((info.pod_group.get("metadata") or {}).get("uid") or "")
        members = [a.pod for a in live]

        def retry(_: PodInfo) -> None:  # an API call failed: try the group again now
            if self._hooks.is_live(s):
                s.activate(m.key for m in members)

        preemptor = GroupPreemptor(members[0], uid, disruptions=post.disruptions)
        self.actuate_preemption(s, preemptor, f"pod group {info.namespace}/{info.name}",
                                CLUSTER_DOMAIN, post.victims, retry)


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
