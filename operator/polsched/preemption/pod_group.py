"""Workload-aware preemption, DefaultPreemption's PodGroupPostFilter (GenericWorkload): the
PodGroupEvaluator.

Follows kube-scheduler v1.37's PodGroupEvaluator (pkg/scheduler/framework/preemption/
podgrouppreemption.go, with types.go and util.go), the gate PodGroupPreemptionPolicy off:
1. The preemptor is the rejected group: the PodGroup's priority (spec.priority), and the
   preemption policy of its members (resolvePreemptionPolicy with the gate off): Never is
   `not eligible due to preemptionPolicy=Never.` (Unschedulable).
2. An ongoing preemption (isOngoingPreemption): a member is nominated to a node where a
   pod of lower priority is terminating by preemption: Success `ongoing preemption on
   nominated nodes`, the members keep their nominations.
3. The domain is the whole cluster (newDomainForWorkloadPreemption). Every pod on a node
   is a possible victim of its own (getCrossNodesVictims), except the scheduled members of
   a PodGroup whose spec.disruptionMode is `all`: those are one victim, the group, taken
   whole. A victim's priority is its PodGroup's (GetPodPriority), else the pod's. Victims
   of lower priority than the group are the potential ones; none: `No preemption victims
   found for incoming preemptor` (UnschedulableAndUnresolvable).
4. selectVictimsOnDomain: every potential victim is removed from the snapshot and the
   group's algorithm reruns; a rejection is the answer (nothing is evicted). Otherwise
   the victims are reprieved one by one, most important first (MoreImportantVictim:
   priority, then a group before a pod, then more pods, then the earlier start), those
   whose eviction would break a PDB first: a victim is added back and kept when every
   placed member still passes the filters (with the nominated pods) on its node, the
   members placed so far counted on their nodes.
5. The answer: Success `found a placement for podgroup, preempting N victims`, each placed
   member nominated to its node, the victims to evict (the scheduler's executor evicts
   them as upstream's actuatePodGroupPreemption: DisruptionTarget, delete, a Preempted
   event `Preempted by podgroup <uid> on node cluster`).
DefaultPreemption prefixes every message with `pod group preemption: `.

The snapshot is the cache's live one: the victims are taken off their NodeInfos and put
back before this returns (upstream's MutableSnapshotSharedLister StartMutations /
EndMutations), in a `finally`. The rerun awaits only filter extenders, as every cycle
does; a victim whose deletion the watch applies during that await is put back by the
rollback all the same (a known gap, docs/differences.md).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from polsched.framework.cycle_state import CycleState
from polsched.framework.interfaces import (
    FrameworkHandle,
    PodGroupInfo,
    PodGroupPostFilterResult,
    PodGroupSchedulingFunc,
    ProposedAssignment,
)
from polsched.framework.podgroups import PodGroups, pod_group_key
from polsched.framework.status import Code, Status
from polsched.framework.types import Json, NodeInfo, PodInfo, Snapshot
from polsched.preemption.victims import (
    filter_victims_with_pdb_violation,
    pod_terminating_by_preemption,
    start_time,
)

PREFIX = "pod group preemption: "
NOT_ELIGIBLE_NEVER = "not eligible due to preemptionPolicy=Never."
ONGOING = "ongoing preemption on nominated nodes"
NO_VICTIMS = "No preemption victims found for incoming preemptor"
# fwk.PodKeyType / PodGroupKeyType: the preemptor's type in the Preempted event and in
# the victims' DisruptionTarget condition.
PREEMPTOR_TYPE = "podgroup"
# The candidate's name when the domain is the whole cluster (Preempt).
CLUSTER_DOMAIN = "cluster"


def found_placement(n: int) -> str:
    return f"found a placement for podgroup, preempting {n} victims"


def group_priority(pod_group: Json | None, default: int = 0) -> int:
    """util.PodGroupPriority: spec.priority (0 when unset)."""
    priority = ((pod_group or {}).get("spec") or {}).get("priority")
    return priority if isinstance(priority, int) and not isinstance(priority, bool) \
        else default


def victim_priority(pod: PodInfo, groups: PodGroups | None) -> int:
    """GetPodPriority: a member's PodGroup's priority, else the pod's."""
    key = pod_group_key(pod)
    if key is None or groups is None:
        return pod.priority
    ns, _, name = key.partition("/")
    pg = groups.get(ns, name)
    return pod.priority if pg is None else group_priority(pg)


def _disrupts_all(pod_group: Json | None) -> bool:
    """spec.disruptionMode.all set: the group is preempted as one victim."""
    mode = ((pod_group or {}).get("spec") or {}).get("disruptionMode")
    return isinstance(mode, dict) and mode.get("all") is not None


@dataclass
class DomainVictim:
    """A victim: one pod, or the scheduled pods of a PodGroup taken whole."""

    pods: list[PodInfo]
    priority: int
    group: str = ""  # the PodGroup's key when the victim is a group

    def earliest_start(self, now: float) -> float:
        return min((start_time(p, now) for p in self.pods), default=now)


def more_important_key(now: float) -> Callable[[DomainVictim], tuple[int, int, int, float]]:
    """MoreImportantVictim as a sort key: higher priority, a group before a pod, more
    pods, earlier start."""
    def key(v: DomainVictim) -> tuple[int, int, int, float]:
        return (-v.priority, -(2 if v.group else 1), -len(v.pods), v.earliest_start(now))
    return key


def possible_victims(snapshot: Snapshot, groups: PodGroups | None) -> list[DomainVictim]:
    """getCrossNodesVictims: every pod on a node, in node order, a `disruptionMode: all`
    group's scheduled members as one victim."""
    out: list[DomainVictim] = []
    seen: set[str] = set()
    for node in snapshot.nodes:
        for pod in node.pods.values():
            key = pod_group_key(pod)
            if key is not None and groups is not None:
                ns, _, name = key.partition("/")
                pg = groups.get(ns, name)
                if pg is not None and _disrupts_all(pg):
                    if key not in seen:
                        seen.add(key)
                        members = [p for p in groups.state(key).scheduled_pods()
                                   if p.node_name]
                        out.append(DomainVictim(members or [pod], group_priority(pg), key))
                    continue
            if pod.key in seen:
                continue
            seen.add(pod.key)
            out.append(DomainVictim([pod], victim_priority(pod, groups)))
    return out


@dataclass
class _Mutations:
    """The pods taken off (or put on) the live snapshot, undone in reverse."""

    snapshot: Snapshot
    undo: list[tuple[str, NodeInfo, PodInfo]] = field(default_factory=list)

    def _count(self, node: NodeInfo, sign: int, pod: PodInfo) -> None:
        self.snapshot.pods_with_affinity += sign * pod.has_affinity
        self.snapshot.pods_with_required_anti_affinity += \
            sign * pod.has_required_anti_affinity

    def remove(self, pod: PodInfo) -> NodeInfo | None:
        node = self.snapshot.get(pod.node_name or "")
        if node is None or pod.key not in node.pods:
            return None
        current = node.pods[pod.key]
        node.remove_pod(current)
        self._count(node, -1, current)
        self.undo.append(("add", node, current))
        return node

    def add(self, pod: PodInfo, node: NodeInfo) -> None:
        node.add_pod(pod)
        self._count(node, 1, pod)
        self.undo.append(("remove", node, pod))

    def place(self, pod: PodInfo, node: NodeInfo, sign: int) -> None:
        """A member counted on (1) or taken off (-1) a node while a victim is tried; the
        caller undoes it before it returns."""
        if sign > 0:
            node.add_pod(pod)
        else:
            node.remove_pod(pod)
        self._count(node, sign, pod)

    def rollback(self) -> None:
        while self.undo:
            op, node, pod = self.undo.pop()
            if op == "add":
                node.add_pod(pod)
                self._count(node, 1, pod)
            else:
                node.remove_pod(pod)
                self._count(node, -1, pod)


def preemption_policy(pods: Sequence[PodInfo]) -> str:
    """resolvePreemptionPolicy with PodGroupPreemptionPolicy off: the members' policy
    (validatePodGroup made them agree), PreemptLowerPriority by default."""
    for pod in pods:
        policy = pod.spec.get("preemptionPolicy")
        if isinstance(policy, str) and policy:
            return policy
    return "PreemptLowerPriority"


def is_ongoing_preemption(pods: Sequence[PodInfo], priority: int, snapshot: Snapshot,
                          groups: PodGroups | None) -> bool:
    """isOngoingPreemption: a member's nominated node has a pod of lower priority that
    is terminating by preemption."""
    nominated = {p.nominated_node for p in pods if p.nominated_node}
    for name in sorted(nominated):
        node = snapshot.get(name)
        if node is None:
            continue
        for p in node.pods.values():
            if victim_priority(p, groups) < priority and pod_terminating_by_preemption(p):
                return True
    return False


async def preempt(handle: FrameworkHandle, group: PodGroupInfo, pods: Sequence[PodInfo],
                  snapshot: Snapshot, schedule: PodGroupSchedulingFunc,
                  groups: PodGroups | None, pdbs: Sequence[Json]
                  ) -> tuple[PodGroupPostFilterResult | None, Status]:
    """PodGroupEvaluator.Preempt (messages without DefaultPreemption's prefix)."""
    priority = group_priority(group.pod_group)
    if preemption_policy(pods) == "Never":
        return None, Status.unschedulable(NOT_ELIGIBLE_NEVER)
    if is_ongoing_preemption(pods, priority, snapshot, groups):
        return PodGroupPostFilterResult(
            nominating={p.key: p.nominated_node or "" for p in pods}), \
            Status(Code.SUCCESS, (ONGOING,))
    potential = [v for v in possible_victims(snapshot, groups) if v.priority < priority]
    if not potential:
        return None, Status.unresolvable(NO_VICTIMS)
    m = _Mutations(snapshot)
    try:
        for v in potential:
            for p in v.pods:
                m.remove(p)
        assignments, st = await schedule()
        if not st.ok:
            return None, st
        now = time.time()
        potential.sort(key=more_important_key(now))
        # FilterVictimsWithPDBViolation over victims: a victim violates when one of its
        # pods does (the budgets spent in importance order).
        by_pod = {id(p): v for v in potential for p in v.pods}
        flat = [p for v in potential for p in v.pods]
        violating_pods, _ = filter_victims_with_pdb_violation(flat, pdbs)
        violating_ids: dict[int, int] = {}
        for p, n, _names in violating_pods:
            v = by_pod[id(p)]
            violating_ids[id(v)] = violating_ids.get(id(v), 0) + n
        violating = [v for v in potential if id(v) in violating_ids]
        non_violating = [v for v in potential if id(v) not in violating_ids]
        valid = [a for a in assignments if a.node]
        to_preempt: list[DomainVictim] = []
        num_violating = 0
        for v in violating:
            if not _reprieve(handle, m, v, valid, snapshot):
                to_preempt.append(v)
                num_violating += violating_ids[id(v)]
        for v in non_violating:
            if not _reprieve(handle, m, v, valid, snapshot):
                to_preempt.append(v)
        to_preempt.sort(key=more_important_key(now))
        victims = [p for v in to_preempt for p in v.pods]
        result = PodGroupPostFilterResult(nominating={a.pod.key: a.node for a in valid},
                                          victims=victims,
                                          disruptions=sum(1 for v in to_preempt if v.group))
        return result, Status(Code.SUCCESS, (found_placement(len(victims)),))
    finally:
        m.rollback()


def _reprieve(handle: FrameworkHandle, m: _Mutations, v: DomainVictim,
              assignments: Sequence[ProposedAssignment], snapshot: Snapshot) -> bool:
    """reprieveVictim: add the victim's pods back (and to every placed member's PreFilter
    state); it stays when every placed member, in order, still passes the filters on its
    node with the members before it counted there. Otherwise it is removed again."""
    states: dict[str, CycleState] = {a.pod.key: a.state for a in assignments}
    added: list[tuple[PodInfo, NodeInfo]] = []
    for p in v.pods:
        node = snapshot.get(p.node_name or "")
        if node is None:
            continue
        m.add(p, node)
        added.append((p, node))
        for a in assignments:
            handle.run_pre_filter_extension_add_pod(states[a.pod.key], a.pod, p, node)
    placed: list[tuple[PodInfo, NodeInfo]] = []
    fits = True
    for a in assignments:
        node = snapshot.get(a.node)
        if node is None:
            fits = False
            break
        st = handle.run_filter_plugins_with_nominated_pods(a.state, a.pod, node)
        if not st.ok:
            fits = False
            break
        m.place(a.pod, node, 1)
        placed.append((a.pod, node))
    for pod, node in reversed(placed):
        m.place(pod, node, -1)
    if not fits:
        for p, _node in added:
            m.remove(p)
            for a in assignments:
                handle.run_pre_filter_extension_remove_pod(states[a.pod.key], a.pod, p,
                                                           _node)
    return fits
