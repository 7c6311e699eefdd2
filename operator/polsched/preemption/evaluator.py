"""The Evaluator of a pod's preemption (kube-scheduler v1.37, pkg/scheduler/framework/
preemption/preemption.go Evaluator.Preempt): eligibility, then findCandidates (the
potential nodes dry-run from a random offset until enough candidates are found), the
extenders' preempt verb, and the choice of one candidate. What is the plugin's to decide
(PodEligibleToPreemptOthers, SelectVictimsOnNode, GetOffsetAndNumCandidates) it asks of
its Interface, as upstream's Evaluator asks its PreemptPlugin."""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from typing import Protocol

from polsched.framework import listers as ls
from polsched.framework.cycle_state import CycleState
from polsched.framework.diagnosis import FitError, PipelineError, PostFilterResult
from polsched.framework.interfaces import FrameworkHandle
from polsched.framework.status import Code, Status
from polsched.framework.types import Json, NodeInfo, PodInfo, Snapshot
from polsched.preemption.candidates import (
    Candidate,
    PreemptionReport,
    call_extenders,
    pick_one_node_for_preemption,
)

NOT_HELPFUL = "Preemption is not helpful for scheduling"


class Interface(Protocol):
    """What the Evaluator asks of the preemption plugin (upstream's PreemptPlugin)."""

    def eligible(self, pod: PodInfo, snapshot: Snapshot, diagnosis: FitError,
                 nominated_node: str) -> str: ...

    def num_candidates(self, num_nodes: int) -> int: ...

    def select_victims_on_node(
        self, fh: FrameworkHandle, state: CycleState, pod: PodInfo, node: NodeInfo,
        pdbs: Sequence[Json], now: float,
    ) -> tuple[Candidate | None, Status]: ...


class Evaluator:
    def __init__(self, name: str, plugin: Interface, listers: ls.Listers | None,
                 rng: random.Random) -> None:
        self._name = name  # the plugin's, on an error
        self._plugin = plugin
        self._listers = listers
        self._rng = rng

    async def preempt(self, fh: FrameworkHandle, state: CycleState, pod: PodInfo,
                      snapshot: Snapshot, diagnosis: FitError, report: PreemptionReport,
                      ) -> PostFilterResult:
        """Evaluator.Preempt up to the nomination: eligibility, findCandidates (the dry run
        from a random offset), callExtenders, SelectCandidate; the result's message
        without the plugin's prefix."""
        plugin = self._plugin
        nodes = snapshot.nodes
        if not nodes:
            return PostFilterResult()
        nominator = fh.nominator
        nominated_node = (nominator.node_of(pod.key) if nominator is not None else "") or \
            pod.nominated_node
        reason = plugin.eligible(pod, snapshot, diagnosis, nominated_node)
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
            pdbs = self._listers.list(ls.POD_DISRUPTION_BUDGET) if self._listers else []
            offset = self._rng.randrange(len(potential))
            wanted = plugin.num_candidates(len(potential))
            non_violating: list[Candidate] = []
            violating: list[Candidate] = []
            errors: list[str] = []
            for i in range(len(potential)):
                node = potential[(offset + i) % len(potential)]
                if non_violating and len(non_violating) + len(violating) >= wanted:
                    report.not_tried.append(node.name)
                    continue
                c, st = plugin.select_victims_on_node(fh, state.clone(), pod, node, pdbs, now)
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
                raise PipelineError(Status.error(*errors).with_plugin(self._name))
        if not candidates:
            fit = FitError(len(nodes), {n.name: statuses.get(n.name, not_helpful)
                                        for n in nodes})
            return PostFilterResult(message=fit.message, nominated_node="")
        report.candidates = list(candidates)
        candidates = await call_extenders(fh, pod, candidates, report)
        best, rule = pick_one_node_for_preemption(candidates, now)
        if best is None:
            return PostFilterResult(message="no candidate node for preemption")
        report.chosen, report.deciding_rule = best.node, rule
        return PostFilterResult(
            message=f"found a potential placement for pod on node {best.node}, "
                    f"preempting {len(best.victims)} victims",
            nominated_node=best.node, victims=tuple(best.victims),
            num_pdb_violations=best.num_pdb_violations)
