"""The candidates of a pod's preemption (kube-scheduler v1.37, pkg/scheduler/framework/
preemption/candidate.go and preemption.go): a node with its victims, how the extenders'
preempt verb narrows them (callExtenders), and how one is chosen
(pickOneNodeForPreemption). A PreemptionReport carries every step for `polsched explain`."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from polsched.framework.diagnosis import PipelineError
from polsched.framework.interfaces import ExtenderError, FrameworkHandle, Victims
from polsched.framework.status import Status
from polsched.framework.types import PodInfo
from polsched.preemption.victims import start_time

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


async def call_extenders(fh: FrameworkHandle, pod: PodInfo,
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
        current = {c.node: c for c in (narrowed(current.get(n), v)
                                       for n, v in answer.items()) if c is not None}
        if not current:
            break
    report.dropped_by_extenders = [c.node for c in candidates if c.node not in current]
    return list(current.values())


def narrowed(prior: Candidate | None, kept: Victims) -> Candidate | None:
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
