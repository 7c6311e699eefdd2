"""NodeUnschedulable: a cordoned node (spec.unschedulable) takes only pods that tolerate the
node.kubernetes.io/unschedulable:NoSchedule taint.

Copies kube-scheduler's nodeunschedulable plugin
(pkg/scheduler/framework/plugins/nodeunschedulable/node_unschedulable.go): the node's
taints are not read; the pod is checked against the taint the node controller would add.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from polsched.framework import events as ev
from polsched.framework import signers
from polsched.framework.cycle_state import CycleState
from polsched.framework.interfaces import (
    FilterPlugin,
    Handle,
    NodeSetFilter,
    PreFilterPlugin,
    SignFragment,
    SignPlugin,
)
from polsched.framework.registry import ArgsError, PluginSpec
from polsched.framework.selectors import NodeSet
from polsched.framework.status import SKIP, SUCCESS, Code, Status, shared
from polsched.framework.types import NodeInfo, PodInfo, Snapshot
from polsched.plugins.taint_toleration import NO_SCHEDULE, compile_tolerations, tolerates

NAME = "NodeUnschedulable"

ERR_REASON_UNSCHEDULABLE = "node(s) were unschedulable"
# v1.TaintNodeUnschedulable
TAINT_NODE_UNSCHEDULABLE = "node.kubernetes.io/unschedulable"

_PRE_FILTER_KEY = "PreFilter" + NAME
_UNSCHEDULABLE = shared(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (ERR_REASON_UNSCHEDULABLE,))


def _tolerates_unschedulable(pod: PodInfo) -> bool:
    return tolerates(compile_tolerations(pod.tolerations), TAINT_NODE_UNSCHEDULABLE, "",
                     NO_SCHEDULE)


class NodeUnschedulable(SignPlugin,
                        PreFilterPlugin, FilterPlugin, NodeSetFilter, ev.EnqueueExtensions):
    NAME = NAME

    def sign_pod(self, pod: PodInfo) -> Sequence[SignFragment] | None:
        """SignPod (OpportunisticBatching): what of the pod this plugin reads."""
        return [(signers.TOLERATIONS, signers.tolerations(pod))]

    def pre_filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> Status:
        # A pod that tolerates the taint passes on every node: no Filter call needed.
        if _tolerates_unschedulable(pod):
            return SKIP
        state.write(_PRE_FILTER_KEY, False)
        return SUCCESS

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        if not node.unschedulable:
            return SUCCESS
        tolerated = state.get(_PRE_FILTER_KEY)
        if tolerated is None:  # PreFilter was not run
            tolerated = _tolerates_unschedulable(pod)
        if tolerated:
            return SUCCESS
        return _UNSCHEDULABLE

    def filter_nodes(self, state: CycleState, pod: PodInfo,
                     snapshot: Snapshot) -> NodeSet | None:
        if state.get(_PRE_FILTER_KEY) is not False:  # PreFilter did not run
            return None
        return NodeSet(snapshot.node_index().unschedulable, True)

    def filter_rejection(self, state: CycleState, pod: PodInfo) -> Status | None:
        return _UNSCHEDULABLE

    # -- queueing hints ------------------------------------------------------------------
    def events_to_register(self) -> tuple[ev.ClusterEventWithHint, ...]:
        r, a = ev.Resource, ev.ActionType
        return (ev.event(r.NODE, a.ADD | a.UPDATE_NODE_TAINT, self._after_node_change),
                ev.event(r.TARGET_POD, a.UPDATE_POD_TOLERATION,
                         self._after_target_pod_toleration_change))

    def _after_node_change(self, pod: PodInfo, old: Any, new: Any) -> ev.QueueingHint:
        """isSchedulableAfterNodeChange: the node was cordoned and is not any more (or
        was added uncordoned)."""
        now = ev.node_of(new).unschedulable
        if (old is not None and ev.node_of(old).unschedulable and not now) \
                or (old is None and not now):
            return ev.QUEUE
        return ev.QUEUE_SKIP

    def _after_target_pod_toleration_change(self, pod: PodInfo, old: Any,
                                            new: Any) -> ev.QueueingHint:
        return ev.QUEUE if _tolerates_unschedulable(new) else ev.QUEUE_SKIP


def new(args: Mapping[str, Any] | None, handle: Handle) -> NodeUnschedulable:
    if args:
        raise ArgsError("", f"{NAME} takes no args; remove them")
    return NodeUnschedulable()


SPEC = PluginSpec(name=NAME, filter=new)
