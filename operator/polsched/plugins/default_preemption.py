"""DefaultPreemption: the PostFilter that evicts lower-priority pods to make room.

It follows kube-scheduler v1.37 (pkg/scheduler/framework/plugins/defaultpreemption/
default_preemption.go and pkg/scheduler/framework/preemption/preemption.go, util.go) for a
single pod, step by step. This module is the plugin (its args, eligibility,
SelectVictimsOnNode, the number of candidates, PreEnqueue); the steps run in
polsched.preemption.evaluator (Evaluator.Preempt), the candidates and the choice of one
in polsched.preemption.candidates, as upstream splits them:

1. Eligibility (PodEligibleToPreemptOthers): a pod with spec.preemptionPolicy Never is not
   eligible; nor is a pod whose nominated node still has a lower-priority pod terminating
   because of preemption (deletionTimestamp set and DisruptionTarget=True with reason
   PreemptionByScheduler), unless the nominated node is UnschedulableAndUnresolvable.
2. Potential nodes are those whose filter status is Unschedulable (not
   UnschedulableAndUnresolvable). From a random offset, each one is dry-run
   (SelectVictimsOnNode) until at least one candidate breaks no PodDisruptionBudget and
   there are max(minCandidateNodesPercentage% of the potential nodes,
   minCandidateNodesAbsolute) candidates, capped at the number of potential nodes.
3. On a node, every pod of a lower priority is removed; if the pod then fits (filters run
   with the nominated pods of an equal or higher priority, PreFilterExtensions told of
   each removal), the victims are reprieved one by one, most important first (higher
   priority, then earlier start), those whose eviction would break a PDB first: a
   victim stays if the pod still fits with it back.
4. Extenders with a preemptVerb may trim the candidates and their victims.
5. The candidate is chosen (pickOneNodeForPreemption) by, in order: fewest PDB
   violations, lowest highest-victim priority, smallest sum of victim priorities, fewest
   victims, latest start time of the highest-priority victims; then the first left.

The result nominates the node and names the victims; the engine evicts them off the
scheduling loop (async preemption). A PostFilter plugin like the others: registered in
the registry (SPEC), built with a Handle, and run by framework.runtime
(RunPostFilterPlugins) with a FrameworkHandle for the filters with the nominated pods,
the PreFilter extensions and the extenders' preempt verb. With no candidate, the sentence
is "preemption: " and the "0/N nodes are available: ..." text over the non-candidates'
statuses, the nodes never tried counting as "Preemption is not helpful for scheduling",
exactly as upstream writes it. A PreemptionReport carries every step for `polsched explain`.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from polsched.framework import events as ev
from polsched.framework import listers as ls
from polsched.framework.cycle_state import CycleState
from polsched.framework.diagnosis import FitError, PipelineError, PostFilterResult
from polsched.framework.interfaces import (
    FrameworkHandle,
    Handle,
    PodGroupInfo,
    PodGroupPostFilterPlugin,
    PodGroupPostFilterResult,
    PodGroupSchedulingFunc,
    PostFilterPlugin,
    PreEnqueuePlugin,
)
from polsched.framework.podgroups import PodGroups, pod_group_name
from polsched.framework.registry import ArgsError, PluginSpec
from polsched.framework.runtime import node_copy
from polsched.framework.status import SUCCESS, Code, Status
from polsched.framework.types import Json, NodeInfo, PodInfo, Snapshot
from polsched.preemption import pod_group
from polsched.preemption.candidates import (
    Candidate,
    PreemptionReport,
)
from polsched.preemption.evaluator import Evaluator
from polsched.preemption.victims import (
    filter_victims_with_pdb_violation,
    more_important_pod_key,
    pod_terminating_by_preemption,
)

NAME = "DefaultPreemption"

NOT_ELIGIBLE_NEVER = "not eligible due to preemptionPolicy=Never."
NOT_ELIGIBLE_TERMINATING = "not eligible due to a terminating pod on the nominated node."
NO_VICTIMS = "No preemption victims found for incoming pod"
# PreEnqueue's reason while the pod's own preemption runs (default_preemption.go).
WAITING_FOR_PREEMPTION = "waiting for the preemption for this pod to be finished"
PREEMPTION_PREFIX = "preemption: "

# DefaultPreemptionArgs defaults (apis/config/v1/defaults.go)
DEFAULT_MIN_CANDIDATE_NODES_PERCENTAGE = 10
DEFAULT_MIN_CANDIDATE_NODES_ABSOLUTE = 100


@dataclass(frozen=True)
class DefaultPreemptionArgs:
    """kube-scheduler's DefaultPreemptionArgs."""

    min_candidate_nodes_percentage: int = DEFAULT_MIN_CANDIDATE_NODES_PERCENTAGE
    min_candidate_nodes_absolute: int = DEFAULT_MIN_CANDIDATE_NODES_ABSOLUTE

    def errors(self, path: str = "args") -> list[tuple[str, str]]:
        """ValidateDefaultPreemptionArgs: (field path, message) for each problem."""
        out: list[tuple[str, str]] = []
        pct, absolute = self.min_candidate_nodes_percentage, self.min_candidate_nodes_absolute
        if pct < 0 or pct > 100:
            out.append((f"{path}.minCandidateNodesPercentage",
                        "not in valid range [0, 100]"))
        if absolute < 0:
            out.append((f"{path}.minCandidateNodesAbsolute", "not in valid range [0, inf)"))
        if pct == 0 and absolute == 0:
            out.append((f"{path}.minCandidateNodesPercentage",
                        "cannot be zero at the same time as minCandidateNodesAbsolute"))
        return out


# -- the plugin ----------------------------------------------------------------------------
class DefaultPreemption(PostFilterPlugin, PodGroupPostFilterPlugin, PreEnqueuePlugin,
                        ev.EnqueueExtensions):
    """The PostFilter plugin, and the PreEnqueue gate of async preemption; see the
    module docstring."""

    NAME = NAME

    def __init__(self, listers: ls.Listers | None = None,
                 args: DefaultPreemptionArgs | None = None,
                 rng: random.Random | None = None,
                 preempting: Callable[[str], bool] | None = None,
                 pod_groups: PodGroups | None = None) -> None:
        self.listers = listers
        self.pod_groups = pod_groups
        self.args = args or DefaultPreemptionArgs()
        self._rng = rng or random.Random()
        self._preempting = preempting
        self._evaluator = Evaluator(NAME, self, listers, self._rng)

    def pre_enqueue(self, pod: PodInfo) -> Status:
        """default_preemption.go PreEnqueue: a pod whose victims are still being evicted
        waits out of the active queue (async preemption); the scheduler activates it
        when the evictions are done or the cache shows the victims gone."""
        if self._preempting is None:
            return SUCCESS
        uid = pod.uid
        group = pod_group_name(pod)
        if group is not None and self.pod_groups is not None:
            # A member waits on its group's preemption (the PodGroup is the preemptor);
            # a member whose PodGroup is not known is not held here.
            pg = self.pod_groups.get(pod.namespace, group)
            if pg is None:
                return SUCCESS
            uid = str((pg.get("metadata") or {}).get("uid") or "")
        if self._preempting(uid):
            return Status.unresolvable(WAITING_FOR_PREEMPTION)
        return SUCCESS

    async def pod_group_post_filter(self, handle: FrameworkHandle, state: CycleState,
                                    group: PodGroupInfo, pods: Sequence[PodInfo],
                                    snapshot: Snapshot, schedule: PodGroupSchedulingFunc
                                    ) -> tuple[PodGroupPostFilterResult | None, Status]:
        """default_preemption.go PodGroupPostFilter: workload-aware preemption
        (polsched.preemption.pod_group), every message prefixed `pod group
        preemption: `."""
        pdbs = self.listers.list(ls.POD_DISRUPTION_BUDGET) if self.listers else []
        res, st = await pod_group.preempt(handle, group, pods, snapshot, schedule,
                                                     self.pod_groups, pdbs)
        if st.message:
            return res, Status(st.code, (pod_group.PREFIX + st.message,))
        return res, st

    def events_to_register(self) -> tuple[ev.ClusterEventWithHint, ...]:
        """As upstream: AssignedPod Delete with a hint that always skips; the pod's other
        rejecting plugins decide whether a deletion helps it (their hints), and its
        PreEnqueue runs again then."""
        return (ev.event(ev.Resource.ASSIGNED_POD, ev.ActionType.DELETE, _skip),)

    # GetOffsetAndNumCandidates / calculateNumCandidates
    def num_candidates(self, num_nodes: int) -> int:
        n = num_nodes * self.args.min_candidate_nodes_percentage // 100
        n = max(n, self.args.min_candidate_nodes_absolute)
        return min(n, num_nodes)

    def eligible(self, pod: PodInfo, snapshot: Snapshot, diagnosis: FitError,
                 nominated_node: str) -> str:
        """PodEligibleToPreemptOthers: "" when eligible, else upstream's reason."""
        if pod.spec.get("preemptionPolicy") == "Never":
            return NOT_ELIGIBLE_NEVER
        if nominated_node:
            st = diagnosis.node_statuses.get(nominated_node)
            if st is not None and st.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
                return ""
            node = snapshot.get(nominated_node)
            if node is not None:
                for p in node.pods.values():
                    if p.priority < pod.priority and pod_terminating_by_preemption(p):
                        return NOT_ELIGIBLE_TERMINATING
        return ""

    def select_victims_on_node(
        self, fh: FrameworkHandle, state: CycleState, pod: PodInfo, node: NodeInfo,
        pdbs: Sequence[Json], now: float,
    ) -> tuple[Candidate | None, Status]:
        """SelectVictimsOnNode on a copy of the node and of the cycle state."""
        potential = [p for p in node.pods.values() if p.priority < pod.priority]
        if not potential:
            return None, Status.unresolvable(NO_VICTIMS)
        trial = node_copy(node)

        def remove(v: PodInfo) -> Status:
            trial.remove_pod(v)
            return fh.run_pre_filter_extension_remove_pod(state, pod, v, trial)

        def add(v: PodInfo) -> Status:
            trial.add_pod(v)
            return fh.run_pre_filter_extension_add_pod(state, pod, v, trial)

        for v in potential:
            st = remove(v)
            if not st.ok:
                return None, st
        st = fh.run_filter_plugins_with_nominated_pods(state, pod, trial)
        if not st.ok:
            return None, st
        potential.sort(key=more_important_pod_key(now))
        violating, non_violating = filter_victims_with_pdb_violation(potential, pdbs)
        victims: list[PodInfo] = []

        def reprieve(v: PodInfo) -> bool:
            st = add(v)
            if not st.ok:
                raise PipelineError(st)
            fits = fh.run_filter_plugins_with_nominated_pods(state, pod, trial).ok
            if not fits:
                st = remove(v)
                if not st.ok:
                    raise PipelineError(st)
                victims.append(v)
            return fits

        candidate = Candidate(node.name, victims)
        for v, count, names in violating:
            if not reprieve(v):
                candidate.num_pdb_violations += count
                candidate.pdb_violations[v.key] = names
        for v in non_violating:
            reprieve(v)
        if violating and non_violating:
            victims.sort(key=more_important_pod_key(now))
        if not victims:
            return None, Status.error(f"expected at least one victim pod on node {node.name!r}")
        return candidate, Status()

    async def post_filter(self, handle: FrameworkHandle, state: CycleState, pod: PodInfo,
                          snapshot: Snapshot, diagnosis: FitError
                          ) -> tuple[PostFilterResult | None, Status]:
        """Preempt: Success with the nominated node and its victims; otherwise
        Unschedulable with upstream's "preemption: ..." sentence."""
        report = PreemptionReport(pod.key)
        result = await self._evaluator.preempt(handle, state, pod, snapshot, diagnosis,
                                               report)
        result.details = report
        if result.message:
            result.message = PREEMPTION_PREFIX + result.message
        if result.victims:
            return result, SUCCESS
        return result, Status.unschedulable(result.message) if result.message \
            else Status(Code.UNSCHEDULABLE)


def new(args: Mapping[str, Any] | None, handle: Handle) -> DefaultPreemption:
    """The registry's factory: args are DefaultPreemptionArgs as kube-scheduler writes
    them (minCandidateNodesPercentage, minCandidateNodesAbsolute), defaulted when absent;
    handle.rng, when set, makes the candidates' offset repeat (tests, benchmarks)."""
    args = dict(args or {})
    known = ("minCandidateNodesPercentage", "minCandidateNodesAbsolute")
    for key in args:
        if key not in known:
            raise ArgsError(key, f"unknown field; {NAME} takes {', '.join(known)}")
    values: list[int] = []
    for key, default in zip(known, (DEFAULT_MIN_CANDIDATE_NODES_PERCENTAGE,
                                    DEFAULT_MIN_CANDIDATE_NODES_ABSOLUTE), strict=True):
        v = args.get(key, default)
        if not isinstance(v, int) or isinstance(v, bool):
            raise ArgsError(key, f"must be an integer, not {type(v).__name__}")
        values.append(v)
    parsed = DefaultPreemptionArgs(values[0], values[1])
    problems = parsed.errors("")
    if problems:
        path, message = problems[0]
        raise ArgsError(path.lstrip("."), message)
    return DefaultPreemption(handle.listers, parsed, rng=handle.rng,
                             preempting=handle.preempting, pod_groups=handle.pod_groups)


def _skip(pod: PodInfo, old: Any, new: Any) -> ev.QueueingHint:
    """isPodSchedulableAfterAssignedPodDeletion: always QueueSkip."""
    return ev.QUEUE_SKIP


SPEC = PluginSpec(name=NAME, post_filter=new, default_args={
    "minCandidateNodesPercentage": DEFAULT_MIN_CANDIDATE_NODES_PERCENTAGE,
    "minCandidateNodesAbsolute": DEFAULT_MIN_CANDIDATE_NODES_ABSOLUTE})
