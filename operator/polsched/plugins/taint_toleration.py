"""TaintToleration: a node's NoSchedule/NoExecute taints must be tolerated (filter); fewer
untolerated PreferNoSchedule taints score higher (scorer).

Copies kube-scheduler's tainttoleration plugin
(pkg/scheduler/framework/plugins/tainttoleration/taint_toleration.go) and the toleration
matching of k8s.io/api core/v1 toleration.go (Toleration.ToleratesTaint) as used by
component-helpers' scheduling/corev1 TolerationsTolerateTaint. NodeUnschedulable uses the
same matching, so it lives here as module functions.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from polsched.framework import events as ev
from polsched.framework import signers
from polsched.framework.cycle_state import CycleState
from polsched.framework.interfaces import (
    FilterPlugin,
    Handle,
    NodeSetFilter,
    PreFilterPlugin,
    PreScorePlugin,
    ScoreExtensions,
    ScorePlugin,
    SignFragment,
    SignPlugin,
    default_normalize,
)
from polsched.framework.registry import ArgsError, PluginSpec
from polsched.framework.selectors import NodeSet
from polsched.framework.status import SUCCESS, Code, Status, shared
from polsched.framework.types import NodeInfo, PodInfo, Snapshot

NAME = "TaintToleration"

NO_SCHEDULE = "NoSchedule"
NO_EXECUTE = "NoExecute"
PREFER_NO_SCHEDULE = "PreferNoSchedule"

# Upstream v1.37 reports the fact, not the taint (the taint is only logged).
ERR_REASON_UNTOLERATED = "node(s) had untolerated taint(s)"

_PRE_FILTER_KEY = "PreFilter" + NAME
_PRE_SCORE_KEY = "PreScore" + NAME

# (key, operator, value, effect) with "" for an absent field.
Toleration = tuple[str, str, str, str]


def compile_tolerations(tolerations: Iterable[Mapping[str, Any]]) -> tuple[Toleration, ...]:
    """A pod's spec.tolerations as plain tuples, matched by tolerates()."""
    return tuple(
        (t.get("key") or "", t.get("operator") or "", str(t.get("value") or ""),
         t.get("effect") or "")
        for t in tolerations
    )


def tolerates(tolerations: Sequence[Toleration], key: str, value: str, effect: str) -> bool:
    """TolerationsTolerateTaint: does any toleration tolerate the taint key=value:effect?

    The Lt/Gt toleration operators sit behind the alpha feature gate
    TaintTolerationComparisonOperators (off by default in v1.37), so, as upstream with the
    gate off, they tolerate nothing."""
    for t_key, op, t_value, t_effect in tolerations:
        if t_effect and t_effect != effect:
            continue
        if t_key and t_key != key:
            continue
        if op == "Exists":
            return True
        if (op == "" or op == "Equal") and t_value == value:
            return True
    return False


def _taint_fields(taint: Mapping[str, Any]) -> tuple[str, str, str]:
    return taint.get("key") or "", str(taint.get("value") or ""), taint.get("effect") or ""


def find_untolerated_taint(taints: Iterable[Mapping[str, Any]],
                           tolerations: Sequence[Toleration]) -> Mapping[str, Any] | None:
    """The first NoSchedule/NoExecute taint no toleration tolerates (FindMatchingUntoleratedTaint
    with DoNotScheduleTaintsFilterFunc), or None."""
    for taint in taints:
        key, value, effect = _taint_fields(taint)
        if effect != NO_SCHEDULE and effect != NO_EXECUTE:
            continue
        if not tolerates(tolerations, key, value, effect):
            return taint
    return None


def _no_args(args: Mapping[str, Any] | None, name: str) -> None:
    if args:
        raise ArgsError("", f"{name} takes no args; remove them")


class TaintToleration(SignPlugin, PreFilterPlugin, FilterPlugin, NodeSetFilter, PreScorePlugin,
                      ScorePlugin, ScoreExtensions, ev.EnqueueExtensions):
    NAME = NAME

    def sign_pod(self, pod: PodInfo) -> Sequence[SignFragment] | None:
        """SignPod (OpportunisticBatching): what of the pod this plugin reads."""
        return [(signers.TOLERATIONS, signers.tolerations(pod))]

    # -- filter ------------------------------------------------------------------------
    def pre_filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> Status:
        # Nothing lets us skip: any node may carry a taint. Parse the tolerations once.
        state.write(_PRE_FILTER_KEY, compile_tolerations(pod.tolerations))
        return SUCCESS

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        taints = node.taints
        if not taints:
            return SUCCESS
        tolerations = state.get(_PRE_FILTER_KEY)
        if tolerations is None:
            tolerations = compile_tolerations(pod.tolerations)
        if find_untolerated_taint(taints, tolerations) is None:
            return SUCCESS
        return _UNTOLERATED

    def filter_nodes(self, state: CycleState, pod: PodInfo,
                     snapshot: Snapshot) -> NodeSet | None:
        """Every node but those whose taints (grouped in the NodeIndex: nodes share a few
        taint sets) hold an untolerated NoSchedule/NoExecute taint."""
        tolerations = state.get(_PRE_FILTER_KEY)
        if tolerations is None:
            return None
        rejected = []
        for taints, names in snapshot.node_index().taints.items():
            for key, value, effect in taints:
                if (effect == NO_SCHEDULE or effect == NO_EXECUTE) \
                        and not tolerates(tolerations, key, value, effect):
                    rejected.append(names)
                    break
        if not rejected:
            return NodeSet(frozenset(), True)
        return NodeSet(rejected[0] if len(rejected) == 1 else set().union(*rejected), True)

    def filter_rejection(self, state: CycleState, pod: PodInfo) -> Status | None:
        return _UNTOLERATED

    # -- score -------------------------------------------------------------------------
    def pre_score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo],
                  snapshot: Snapshot) -> Status:
        state.write(_PRE_SCORE_KEY, self._prefer_no_schedule_tolerations(pod))
        return SUCCESS

    @staticmethod
    def _prefer_no_schedule_tolerations(pod: PodInfo) -> tuple[Toleration, ...]:
        # An empty effect means every effect, PreferNoSchedule included.
        return tuple(t for t in compile_tolerations(pod.tolerations)
                     if t[3] == "" or t[3] == PREFER_NO_SCHEDULE)

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        tolerations = state.get(_PRE_SCORE_KEY)
        if tolerations is None:
            tolerations = self._prefer_no_schedule_tolerations(pod)
        return _count_untolerated_prefer_no_schedule(node.taints, tolerations)

    def score_nodes(self, state: CycleState, pod: PodInfo,
                    nodes: Sequence[NodeInfo]) -> list[int]:
        tolerations = state.get(_PRE_SCORE_KEY)
        if tolerations is None:
            tolerations = self._prefer_no_schedule_tolerations(pod)
        count = _count_untolerated_prefer_no_schedule
        return [count(n.taints, tolerations) if n.taints else 0 for n in nodes]

    def normalize_score(self, state: CycleState, pod: PodInfo, scores: list[int]) -> Status:
        # Fewer untolerated taints is better.
        return default_normalize(scores, reverse=True)

    # -- queueing hints ------------------------------------------------------------------
    def events_to_register(self) -> tuple[ev.ClusterEventWithHint, ...]:
        r, a = ev.Resource, ev.ActionType
        return (ev.event(r.NODE, a.ADD | a.UPDATE_NODE_TAINT, self._after_node_change),
                ev.event(r.TARGET_POD, a.UPDATE_POD_TOLERATION, ev.queue_always))

    def _after_node_change(self, pod: PodInfo, old: Any, new: Any) -> ev.QueueingHint:
        """isSchedulableAfterNodeChange: a taint the pod did not tolerate is gone."""
        tolerations = compile_tolerations(pod.tolerations)
        was_untolerated = True
        if old is not None:
            was_untolerated = find_untolerated_taint(ev.node_of(old).taints,
                                                     tolerations) is not None
        is_untolerated = find_untolerated_taint(ev.node_of(new).taints,
                                                tolerations) is not None
        return ev.QUEUE if was_untolerated and not is_untolerated else ev.QUEUE_SKIP


_UNTOLERATED = shared(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (ERR_REASON_UNTOLERATED,))


def _count_untolerated_prefer_no_schedule(taints: Iterable[Mapping[str, Any]],
                                          tolerations: Sequence[Toleration]) -> int:
    count = 0
    for taint in taints:
        key, value, effect = _taint_fields(taint)
        if effect == PREFER_NO_SCHEDULE and not tolerates(tolerations, key, value, effect):
            count += 1
    return count


def new(args: Mapping[str, Any] | None, handle: Handle) -> TaintToleration:
    _no_args(args, NAME)
    return TaintToleration()


SPEC = PluginSpec(name=NAME, filter=new, score=new)
