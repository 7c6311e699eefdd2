"""DefaultPreemption: the PostFilter that evicts lower-priority pods to make room.

It follows kube-scheduler v1.37 (pkg/scheduler/framework/plugins/defaultpreemption/
default_preemption.go and pkg/scheduler/framework/preemption/preemption.go, util.go) for a
single pod, step by step:

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

import datetime as dt
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from polsched.framework import events as ev
from polsched.framework import listers as ls
from polsched.framework.cycle_state import CycleState
from polsched.framework.diagnosis import FitError, PipelineError, PostFilterResult
from polsched.framework.interfaces import (
    ExtenderError,
    FrameworkHandle,
    Handle,
    PodGroupInfo,
    PodGroupPostFilterPlugin,
    PodGroupPostFilterResult,
    PodGroupSchedulingFunc,
    PostFilterPlugin,
    PreEnqueuePlugin,
    Victims,
)
from polsched.framework.podgroups import PodGroups, pod_group_name
from polsched.framework.registry import ArgsError, PluginSpec
from polsched.framework.runtime import node_copy
from polsched.framework.selectors import SelectorError, compile_label_selector
from polsched.framework.status import SUCCESS, Code, Status
from polsched.framework.types import Json, NodeInfo, PodInfo, Snapshot
from polsched.plugins import pod_group_preemption

NAME = "DefaultPreemption"

NOT_ELIGIBLE_NEVER = "not eligible due to preemptionPolicy=Never."
NOT_ELIGIBLE_TERMINATING = "not eligible due to a terminating pod on the nominated node."
NOT_HELPFUL = "Preemption is not helpful for scheduling"
NO_VICTIMS = "No preemption victims found for incoming pod"
# PreEnqueue's reason while the pod's own preemption runs (default_preemption.go).
WAITING_FOR_PREEMPTION = "waiting for the preemption for this pod to be finished"
PREEMPTION_PREFIX = "preemption: "

# v1.DisruptionTarget / v1.PodReasonPreemptionByScheduler
DISRUPTION_TARGET = "DisruptionTarget"
REASON_PREEMPTION_BY_SCHEDULER = "PreemptionByScheduler"

# DefaultPreemptionArgs defaults (apis/config/v1/defaults.go)
DEFAULT_MIN_CANDIDATE_NODES_PERCENTAGE = 10
DEFAULT_MIN_CANDIDATE_NODES_ABSOLUTE = 100

# The candidate choice rules, in upstream's order (pickOneNodeForPreemption).
RULE_PDB = "fewest PodDisruptionBudget violations"
RULE_HIGHEST_PRIORITY = "lowest highest-priority victim"
RULE_SUM_PRIORITIES = "smallest sum of victim priorities"
RULE_FEWEST_VICTIMS = "fewest victims"
RULE_LATEST_START = "latest start time of the highest-priority victims"
RULE_FIRST = "first of the candidates still tied"
RULE_ONLY = "only candidate"
RULES = (RULE_PDB, RULE_HIGHEST_PRIORITY, RULE_SUM_PRIORITIES, RULE_FEWEST_VICTIMS,
         RULE_LATEST_START)

_INT32_SPAN = 2 ** 31  # math.MaxInt32 + 1: sums of priorities stay positive upstream


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


@dataclass
class Candidate:
    """A node where evicting `victims` lets the pod fit."""

    node: str
    victims: list[PodInfo]
    num_pdb_violations: int = 0
    # victim key -> the PodDisruptionBudgets its eviction would break ("ns/name")
    pdb_violations: dict[str, list[str]] = field(default_factory=dict)


@dataclass
class PreemptionReport:
    """How preemption decided, for `polsched explain`."""

    pod: str
    # "" when eligible; otherwise upstream's reason
    not_eligible: str = ""
    candidates: list[Candidate] = field(default_factory=list)
    # Nodes that were not candidates -> why (their status in the dry run, or the
    # filter status that made preemption not helpful)
    non_candidates: dict[str, Status] = field(default_factory=dict)
    # Potential nodes not dry-run because enough candidates were found
    not_tried: list[str] = field(default_factory=list)
    # The extenders that were asked (preemptVerb), and candidates they dropped
    extenders: list[str] = field(default_factory=list)
    dropped_by_extenders: list[str] = field(default_factory=list)
    chosen: str = ""
    # The rule that left one candidate (RULES, RULE_FIRST or RULE_ONLY)
    deciding_rule: str = ""


# -- victims' facts ----------------------------------------------------------------------
def pod_terminating_by_preemption(pod: PodInfo) -> bool:
    """util.go PodTerminatingByPreemption."""
    if not pod.deleting:
        return False
    for c in (pod.raw.get("status") or {}).get("conditions") or ():
        if c.get("type") == DISRUPTION_TARGET:
            return bool(c.get("status") == "True"
                        and c.get("reason") == REASON_PREEMPTION_BY_SCHEDULER)
    return False


def _parse_time(value: str) -> float | None:
    try:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def start_time(pod: PodInfo, now: float) -> float:
    """util.GetPodStartTime: status.startTime, or now for a pod not started."""
    value = (pod.raw.get("status") or {}).get("startTime")
    t = _parse_time(value) if isinstance(value, str) and value else None
    return now if t is None else t


def _more_important_key(now: float) -> Callable[[PodInfo], tuple[int, float]]:
    """A sort key putting the more important victim first (MoreImportantVictim for single
    pods: higher priority, then earlier start)."""
    return lambda p: (-p.priority, start_time(p, now))


def filter_victims_with_pdb_violation(
    victims: Sequence[PodInfo], pdbs: Sequence[Json],
) -> tuple[list[tuple[PodInfo, int, list[str]]], list[PodInfo]]:
    """util.go FilterVictimsWithPDBViolation: the victims whose eviction would take a PDB
    below its disruptionsAllowed (with how many pods, and which PDBs), and the others.
    The budgets are spent in the order of `victims`."""
    compiled: list[tuple[str, str, Any, Mapping[str, Any]]] = []
    allowed: list[int] = []
    for pdb in pdbs:
        meta = pdb.get("metadata") or {}
        spec = pdb.get("spec") or {}
        status = pdb.get("status") or {}
        selector = spec.get("selector")
        if not selector or not (selector.get("matchLabels") or selector.get("matchExpressions")):
            matcher = None  # nil or empty: selects nothing here (selector.Empty())
        else:
            try:
                matcher = compile_label_selector(selector)
            except SelectorError:
                matcher = None
        compiled.append((meta.get("namespace") or "", f"{meta.get('namespace')}/{meta.get('name')}",
                         matcher, status.get("disruptedPods") or {}))
        allowed.append(int(status.get("disruptionsAllowed") or 0))

    def violated(pod: PodInfo) -> str:
        if not pod.labels:
            return ""
        for i, (ns, name, matcher, disrupted) in enumerate(compiled):
            if ns != pod.namespace or matcher is None or not matcher(pod.labels):
                continue
            if pod.name in disrupted:
                continue
            allowed[i] -= 1
            if allowed[i] < 0:
                return name
        return ""

    violating: list[tuple[PodInfo, int, list[str]]] = []
    non_violating: list[PodInfo] = []
    for v in victims:
        name = violated(v)
        if name:
            violating.append((v, 1, [name]))
        else:
            non_violating.append(v)
    return violating, non_violating


# -- choosing among candidates -------------------------------------------------------------
def pick_one_node_for_preemption(candidates: Sequence[Candidate], now: float | None = None
                                 ) -> tuple[Candidate | None, str]:
    """pickOneNodeForPreemption with the default score functions; returns the candidate
    and the rule that left it alone."""
    if not candidates:
        return None, ""
    if len(candidates) == 1:
        return candidates[0], RULE_ONLY
    at = time.time() if now is None else now

    def highest(c: Candidate) -> int:
        return c.victims[0].priority

    def earliest_of_highest(c: Candidate) -> float:
        top = max(p.priority for p in c.victims)
        return min(start_time(p, at) for p in c.victims if p.priority == top)

    scores: tuple[Callable[[Candidate], float], ...] = (
        lambda c: -c.num_pdb_violations,
        lambda c: -highest(c),
        lambda c: -sum(p.priority + _INT32_SPAN for p in c.victims),
        lambda c: -len(c.victims),
        earliest_of_highest,
    )
    left = list(candidates)
    for rule, score in zip(RULES, scores, strict=True):
        values = [score(c) for c in left]
        best = max(values)
        left = [c for c, v in zip(left, values, strict=True) if v == best]
        if len(left) == 1:
            return left[0], rule
    return left[0], RULE_FIRST


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
        (plugins/pod_group_preemption.py), every message prefixed `pod group
        preemption: `."""
        pdbs = self.listers.list(ls.POD_DISRUPTION_BUDGET) if self.listers else []
        res, st = await pod_group_preemption.preempt(handle, group, pods, snapshot, schedule,
                                                     self.pod_groups, pdbs)
        if st.message:
            return res, Status(st.code, (pod_group_preemption.PREFIX + st.message,))
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
        potential.sort(key=_more_important_key(now))
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
            victims.sort(key=_more_important_key(now))
        if not victims:
            return None, Status.error(f"expected at least one victim pod on node {node.name!r}")
        return candidate, Status()

    async def post_filter(self, handle: FrameworkHandle, state: CycleState, pod: PodInfo,
                          snapshot: Snapshot, diagnosis: FitError
                          ) -> tuple[PostFilterResult | None, Status]:
        """Preempt: Success with the nominated node and its victims; otherwise
        Unschedulable with upstream's "preemption: ..." sentence."""
        report = PreemptionReport(pod.key)
        result = await self._preempt(handle, state, pod, snapshot, diagnosis, report)
        result.details = report
        if result.message:
            result.message = PREEMPTION_PREFIX + result.message
        if result.victims:
            return result, SUCCESS
        return result, Status.unschedulable(result.message) if result.message \
            else Status(Code.UNSCHEDULABLE)

    async def _preempt(self, fh: FrameworkHandle, state: CycleState, pod: PodInfo,
                       snapshot: Snapshot, diagnosis: FitError, report: PreemptionReport,
                       ) -> PostFilterResult:
        nodes = snapshot.nodes
        if not nodes:
            return PostFilterResult()
        nominator = fh.nominator
        nominated_node = (nominator.node_of(pod.key) if nominator is not None else "") or \
            pod.nominated_node
        reason = self.eligible(pod, snapshot, diagnosis, nominated_node)
        if reason:
            report.not_eligible = reason
            return PostFilterResult(message=reason)
        now = time.time()
        # findCandidates
        not_helpful = Status.unresolvable(NOT_HELPFUL)
        potential: list[NodeInfo] = []
        for n in nodes:
            st = diagnosis.node_statuses.get(n.name)
            if st is not None and st.code is Code.UNSCHEDULABLE:
                potential.append(n)
            else:
                report.non_candidates[n.name] = st if st is not None else not_helpful
        statuses: dict[str, Status] = {}
        candidates: list[Candidate] = []
        if potential:
            pdbs = self.listers.list(ls.POD_DISRUPTION_BUDGET) if self.listers else []
            offset = self._rng.randrange(len(potential))
            wanted = self.num_candidates(len(potential))
            non_violating: list[Candidate] = []
            violating: list[Candidate] = []
            errors: list[str] = []
            for i in range(len(potential)):
                node = potential[(offset + i) % len(potential)]
                if non_violating and len(non_violating) + len(violating) >= wanted:
                    report.not_tried.append(node.name)
                    continue
                c, st = self.select_victims_on_node(fh, state.clone(), pod, node, pdbs, now)
                if c is not None:
                    (violating if c.num_pdb_violations else non_violating).append(c)
                    continue
                if st.code is Code.ERROR:
                    errors.append(st.message)
                statuses[node.name] = st
                report.non_candidates[node.name] = st
            # newCandidateList(candidatesNum): each list keeps at most `wanted`.
            candidates = non_violating[:wanted] + violating[:wanted]
            if errors and not candidates:
                raise PipelineError(Status.error(*errors).with_plugin(NAME))
        if not candidates:
            fit = FitError(len(nodes), {n.name: statuses.get(n.name, not_helpful)
                                        for n in nodes})
            return PostFilterResult(message=fit.message, nominated_node="")
        report.candidates = list(candidates)
        candidates = await self._call_extenders(fh, pod, candidates, report)
        best, rule = pick_one_node_for_preemption(candidates, now)
        if best is None:
            return PostFilterResult(message="no candidate node for preemption")
        report.chosen, report.deciding_rule = best.node, rule
        return PostFilterResult(
            message=f"found a potential placement for pod on node {best.node}, "
                    f"preempting {len(best.victims)} victims",
            nominated_node=best.node, victims=tuple(best.victims),
            num_pdb_violations=best.num_pdb_violations)

    async def _call_extenders(self, fh: FrameworkHandle, pod: PodInfo,
                              candidates: list[Candidate], report: PreemptionReport,
                              ) -> list[Candidate]:
        """callExtenders: each interested extender with a preemptVerb, in turn, gets the
        candidates' victims and answers with the nodes and victims it keeps."""
        extenders = fh.preempting_extenders(pod)
        if not extenders:
            return candidates
        # Each extender narrows what the previous one kept; the client already drops
        # nodes and victims that were not offered, and this checks it again against the
        # candidates themselves: victims are the candidates' own PodInfos (priorities as
        # the snapshot has them) and the PDB violations are recounted from the victims
        # kept, never taken from an answer.
        current = {c.node: c for c in candidates}
        for ext in extenders:
            report.extenders.append(ext.name)
            offered = {c.node: Victims(tuple(p.raw for p in c.victims), c.num_pdb_violations)
                       for c in current.values()}
            try:
                answer = await ext.process_preemption(pod, offered)
            except ExtenderError as err:
                if ext.ignorable:
                    continue
                raise PipelineError(Status.error(str(err)).with_plugin(ext.name)) from err
            for node_name, v in list(answer.items()):
                if not v.pods:
                    if ext.ignorable:
                        del answer[node_name]
                        continue
                    raise PipelineError(Status.error(
                        f"expected at least one victim pod on node {node_name!r}"
                    ).with_plugin(ext.name))
            current = {c.node: c for c in (_narrowed(current.get(n), v)
                                           for n, v in answer.items()) if c is not None}
            if not current:
                break
        report.dropped_by_extenders = [c.node for c in candidates if c.node not in current]
        return list(current.values())


def _narrowed(prior: Candidate | None, kept: Victims) -> Candidate | None:
    """`prior` with only the victims of `kept` that it offered (by UID, in the answer's
    order, as upstream keeps it: the first victim's priority ranks candidates), its PDB
    violations recounted; None when nothing of it is left."""
    if prior is None:
        return None
    offered = {v.uid: v for v in prior.victims}
    victims = list({uid: offered[uid] for uid in (
        str((p.get("metadata") or {}).get("uid") or "") for p in kept.pods)
        if uid in offered}.values())
    if not victims:
        return None
    violations = {v.key: prior.pdb_violations[v.key] for v in victims
                  if v.key in prior.pdb_violations}
    return Candidate(prior.node, victims, len(violations), violations)


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
