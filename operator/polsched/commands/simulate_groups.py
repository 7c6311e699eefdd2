"""What `polsched simulate` decides for one cycle of a pod group, as the engine's
pod-group cycle (scheduler.schedule_one_podgroup) runs it, acting on nothing: one PodGroup
(`decide_group`), or a tree rooted at a CompositePodGroup (`decide_tree`); the records
every decision goes into (Decision, GroupOutcome, Entry) and the steps every decision
shares (the engine's assume, Reserve and Permit: `assume`; the claims PreBind would write:
`pre_bind`; a namespace the policy does not select: `not_selected`; a FitError's texts:
`mark_unschedulable`). simulate.py plans the cycles and reports them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from polsched.api import Policy
from polsched.cluster.cache import ClusterCache
from polsched.framework import listers as ls
from polsched.framework import podgroups as pgs
from polsched.framework.diagnosis import FitError
from polsched.framework.interfaces import ExtensionPoint, PodGroupInfo
from polsched.framework.nominator import Nominator
from polsched.framework.runtime import Pipeline
from polsched.framework.status import SUCCESS, Code, Status
from polsched.framework.types import PodInfo
from polsched.objects import Json
from polsched.plugins.dynamic_resources.simulated import pre_bind_claims
from polsched.scheduler.profile import namespace_selected, not_selected_message
from polsched.scheduler.schedule_one import rejection, reserve_and_permit
from polsched.scheduler.schedule_one_podgroup import (
    MemberResult,
    apply_tree_post_filter,
    build_tree,
    complete_tree,
    member_verdict,
    pod_group_algorithm,
    pod_group_post_filter,
    pod_group_verdict,
    tree_leaves,
    validate_pod_group,
)


# -- results ------------------------------------------------------------------------------
@dataclass
class Decision:
    namespace: str
    name: str
    node: str | None
    # Why it would not schedule (the FailedScheduling message), "" when it would.
    reason: str = ""
    # The distinct per-node reasons ("Insufficient cpu"), for the histogram.
    reasons: tuple[str, ...] = ()
    deciding_scorer: str = ""
    replayed: bool = False
    # Where it runs now (replayed pods only).
    current_node: str | None = None
    # The pod group it was decided with ("namespace/name"), "" for a pod decided alone.
    group: str = ""
    # The PreEnqueue plugin that keeps it out of the queue ("" when it was decided).
    gated_by: str = ""
    # Its turn in the queue is not known (Plan.order_unknown): the prediction depends on it.
    order_unknown: bool = False

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


# What became of a pod group (GroupOutcome.state).
PLACED = "placed"  # the cycle succeeded: its members that fit are placed
NOT_PLACED = "not placed"  # rejected as a whole: none of its members is placed
WAITING = "waiting"  # held at PreEnqueue: no cycle
GROUP_ERROR = "error"  # the cycle failed (validation, a plugin error)


@dataclass
class GroupOutcome:
    """One pod group in the simulation: its pod-group cycle's verdict (PLACED, NOT_PLACED,
    GROUP_ERROR) with the group's message (its PodGroupInitiallyScheduled message, as
    `polsched explain` gives it), or WAITING with the PreEnqueue text; the members, in the
    cycle's order, and how many were already bound."""

    group: str  # "namespace/name"
    min_count: int | None  # None: a basic group
    state: str
    message: str = ""
    members: list[str] = field(default_factory=list)  # pod keys
    already_scheduled: int = 0
    # False: the PodGroup object does not exist (its members wait for it).
    exists: bool = True

    @property
    def gang(self) -> bool:
        return self.min_count is not None

    @property
    def kind(self) -> str:
        return "gang" if self.gang else "basic" if self.exists else "unknown"

    def to_json(self, decisions: Mapping[str, Decision]) -> Json:
        return {"podGroup": self.group, "minCount": self.min_count,
                "kind": self.kind, "outcome": self.state,
                "message": self.message, "alreadyScheduled": self.already_scheduled,
                "members": [{"pod": k, "node": decisions[k].node if k in decisions else None,
                             "reason": (decisions[k].reason or None) if k in decisions
                             else None} for k in self.members]}


Planned = tuple[Json, bool, str | None]


@dataclass
class Entry:
    """What one scheduling cycle decides: one pod, or a pod group's members popped
    together (`group` its "namespace/name"), in the cycle's order."""

    pods: list[Planned]
    group: str = ""


def not_selected(policy: Policy, cache: ClusterCache, pod: PodInfo, d: Decision) -> bool:
    """The policy's namespaceSelector leaves the pod out: the engine parks it, with this
    warning (scheduler.profile)."""
    if namespace_selected(policy, pod, cache.namespaces):
        return False
    d.reason = not_selected_message(policy, pod)
    d.reasons = ("namespace not selected",)
    return True


def assume(pipeline: Pipeline, cache: ClusterCache, nominator: Nominator, state: Any,
            pod: PodInfo, node: str, d: Decision) -> tuple[PodInfo | None, Status]:
    """The engine's assume, Reserve and Permit (schedule_one.reserve_and_permit): the pod
    assumed, and Permit's status (Wait: held until a Permit plugin allows it); on a
    rejection, forgotten with handle_failure's message in `d`, and None."""
    assumed = cache.assume(pod, node)
    nominator.remove(pod.key)
    plugins = pipeline.plugins_for(assumed)
    if state is None or not plugins.binding:
        return assumed, SUCCESS
    st, _ = reserve_and_permit(pipeline, state, assumed, node, plugins)
    if st.ok or st.code is Code.WAIT:
        return assumed, st
    cache.forget(assumed)
    d.reason = rejection(st, node).message if st.rejected else f"error: {st.message}"
    d.reasons = (d.reason,)
    return None, st


def pre_bind(pipeline: Pipeline, cache: ClusterCache, state: Any, pod: PodInfo,
             node: str) -> None:
    """The claims as DynamicResources' PreBind would leave them (allocated, reserved for
    the pod or its PodGroup), fed to the cache: the next pods meet them as in the cluster
    (simulated.pre_bind_claims)."""
    plugins = pipeline.plugins_for(pod).at(ExtensionPoint.PRE_BIND)
    for claim in pre_bind_claims(plugins, state, pod, node):
        cache.on_object_event(ls.RESOURCE_CLAIM, "MODIFIED", claim)


def mark_unschedulable(d: Decision, fe: FitError | None, fallback: str = "no node fits") -> None:
    d.reason = fe.message if fe is not None else fallback
    if fe is not None and fe.pre_filter_msg:
        d.reasons = (fe.pre_filter_msg,)
    elif fe is not None:
        d.reasons = tuple(sorted({r for st in fe.node_statuses.values()
                                  for r in st.reasons})) or (d.reason,)
    else:
        d.reasons = (d.reason,)


async def decide_group(policy: Policy, pipeline: Pipeline, cache: ClusterCache,
                        nominator: Nominator, entry: Entry
                        ) -> tuple[list[Decision], GroupOutcome]:
    """One pod-group cycle, as ScheduleOne.schedule_pod_group runs it: validate the group,
    run pod_group_algorithm (a simulation it reverts), PodGroupPostFilter for a rejected
    group, then submit as submitPodGroupAlgorithmResult: only when the group succeeded are
    its members that fit assumed and reserved; a rejected group places nothing, its
    members that fit getting `pod group is unschedulable, <the group's message>`."""
    namespace, _, name = entry.group.partition("/")
    decisions: list[Decision] = []
    live: list[tuple[Decision, PodInfo]] = []
    for obj, replayed, current in entry.pods:
        pod = PodInfo.from_json(obj)
        d = Decision(pod.namespace, pod.name, None, replayed=replayed, current_node=current,
                     group=entry.group)
        decisions.append(d)
        if not not_selected(policy, cache, pod, d):
            live.append((d, pod))
    groups = cache.pod_groups
    obj_group = groups.get(namespace, name)
    outcome = GroupOutcome(entry.group, pgs.min_count(obj_group), GROUP_ERROR,
                           members=[d.key for d in decisions],
                           already_scheduled=groups.state(entry.group).scheduled_pods_count)
    if obj_group is None:  # PreEnqueue lets no member through without it: not reached
        outcome.message = f'podgroup.scheduling.k8s.io "{name}" not found'
    if not live or obj_group is None:
        for d in decisions:
            d.reason = d.reason or f"error: {outcome.message}"
            d.reasons = d.reasons or (d.reason,)
        return decisions, outcome
    info = PodGroupInfo(namespace, name, obj_group)
    pods = [p for _, p in live]
    err = validate_pod_group(groups, info, pods, policy.scheduler_name)
    if err:
        outcome.message = err
        for d, _ in live:
            d.reason = f"error: {err}"
            d.reasons = (d.reason,)
        return decisions, outcome
    # The PodGroupPostFilter phase as the engine runs it, acting on nothing: a group that
    # would preempt is reported not placed with its message, as the first cycle leaves it.
    verdict = await pod_group_verdict(pipeline, cache, info, pods)
    result, status = verdict.outcome, verdict.status
    outcome.message = status.message
    outcome.state = PLACED if status.ok else NOT_PLACED if status.rejected else GROUP_ERROR
    placed = member_verdicts(live, result.members, status, result.untried, verdict.waiting)
    if hold(pipeline, cache, nominator, placed):
        outcome.state = NOT_PLACED
    return decisions, outcome


def member_verdicts(live: Sequence[tuple[Decision, PodInfo]], members: Sequence[MemberResult],
                    status: Status, untried: Status | None, waiting: bool
                    ) -> list[tuple[Decision, PodInfo, MemberResult]]:
    """The engine's submit, member by member (member_verdict; `waiting`: the group waits
    on preemption): each rejected member's decision; the members to assume."""
    placed: list[tuple[Decision, PodInfo, MemberResult]] = []
    for i, (d, pod) in enumerate(live):
        r = members[i] if i < len(members) else None
        v = member_verdict(r, status, untried, waiting)
        if v.status is None and r is not None:
            placed.append((d, pod, r))
        elif v.status is None or not v.status.rejected:
            d.reason = f"error: {v.status.message if v.status is not None else ''}"
            d.reasons = (d.reason,)
        elif v.group or r is None:
            d.reason = v.status.message
            d.reasons = (d.reason,)
        else:
            mark_unschedulable(d, v.fit_error or rejection(v.status, r.node))
    return placed


async def decide_tree(policy: Policy, pipeline: Pipeline, cache: ClusterCache,
                       nominator: Nominator, entry: Entry
                       ) -> tuple[list[Decision], list[GroupOutcome]]:
    """One cycle of a tree rooted at a CompositePodGroup, as the engine's composite cycle
    runs it (the recursive algorithm, the PodGroupPostFilter phase acting on nothing, the
    completed results): each PodGroup of the tree is one outcome, with its own message;
    its members are assumed only when the PodGroup's result succeeded."""
    _, namespace, name = pgs.split_key(entry.group)
    decisions: list[Decision] = []
    live: list[tuple[Decision, PodInfo]] = []
    for obj, replayed, current in entry.pods:
        pod = PodInfo.from_json(obj)
        d = Decision(pod.namespace, pod.name, None, replayed=replayed, current_node=current,
                     group=pgs.pod_group_key(pod) or entry.group)
        decisions.append(d)
        if not not_selected(policy, cache, pod, d):
            live.append((d, pod))
    groups = cache.pod_groups
    info = build_tree(groups, entry.group) if groups.lookup(entry.group) is not None \
        else None
    leaves = tree_leaves(info) if info is not None else []
    outcomes = {leaf.key: GroupOutcome(
        leaf.key, pgs.min_count(leaf.pod_group), GROUP_ERROR,
        members=[d.key for d in decisions if d.group == leaf.key],
        already_scheduled=groups.state(leaf.key).scheduled_pods_count) for leaf in leaves}
    err = f'compositepodgroup.scheduling.k8s.io "{name}" not found' if info is None else ""
    if not err and info is not None and live:
        err = validate_pod_group(groups, info, [p for _, p in live], policy.scheduler_name)
    if err or info is None or not live:
        for o in outcomes.values():
            o.message = err
        for d in decisions:
            d.reason = d.reason or f"error: {err}"
            d.reasons = d.reasons or (d.reason,)
        return decisions, list(outcomes.values())
    pods = [p for _, p in live]
    result = await pod_group_algorithm(pipeline, cache, info, pods)
    results = complete_tree(info, result)
    for r in results.values():
        r.untried = r.status
    waiting = False  # the root waits on preemption (its PodGroupPostFilter succeeded)
    if result.status.code is Code.UNSCHEDULABLE:
        _, pst = await pod_group_post_filter(pipeline, cache, info, pods, result)
        apply_tree_post_filter(results, pst)
        waiting = pst.ok
    placed: list[tuple[Decision, PodInfo, MemberResult]] = []
    for leaf in leaves:
        res, o = results[leaf.key], outcomes[leaf.key]
        st = res.status
        o.message = st.message
        o.state = PLACED if st.ok else NOT_PLACED if st.rejected else GROUP_ERROR
        mine = [(d, p) for d, p in live if d.group == leaf.key]
        placed += member_verdicts(mine, res.members, st, res.untried, waiting)
    if hold(pipeline, cache, nominator, placed):
        for o in outcomes.values():
            o.state = NOT_PLACED if o.state == PLACED else o.state
    return decisions, list(outcomes.values())


def hold(pipeline: Pipeline, cache: ClusterCache, nominator: Nominator,
          placed: list[tuple[Decision, PodInfo, MemberResult]]) -> bool:
    """prepareForBindingCycle of the members placed: assumed and reserved for real, so
    the pods after them see them; True when Permit still holds them all (nothing
    placed)."""
    # Permit lets a gang through: the cycle reached minCount.
    held: list[tuple[Decision, PodInfo, MemberResult]] = []
    permit = SUCCESS
    for d, pod, r in placed:
        assumed, st = assume(pipeline, cache, nominator, r.state, pod, r.node, d)
        if assumed is not None:
            held.append((d, assumed, r))
            permit = st
    if held and permit.code is Code.WAIT:
        # The last member held still waits at Permit (GangScheduling: a member failed
        # Reserve and the gang is short of minCount), so every member held waits: no
        # later Permit allows them, and they time out bound to nothing.
        for d, assumed, r in held:
            pipeline.run_reserve_plugins_unreserve(r.state, assumed, r.node,
                                                   pipeline.plugins_for(assumed))
            cache.forget(assumed)
            d.reason = permit.message
            d.reasons = (d.reason,)
        return True
    for d, assumed, r in held:
        pre_bind(pipeline, cache, r.state, assumed, r.node)
        d.node = r.node
        d.deciding_scorer = r.result.deciding_scorer if r.result is not None else ""
    return False
