"""NodeName: a pod that names a node (spec.nodeName) fits only that node.

Copies kube-scheduler's nodename plugin (pkg/scheduler/framework/plugins/nodename/node_name.go).
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
    PreFilterPlugin,
    PreFilterResult,
    SignFragment,
    SignPlugin,
)
from polsched.framework.registry import ArgsError, PluginSpec
from polsched.framework.status import SKIP, SUCCESS, Status
from polsched.framework.types import NodeInfo, PodInfo, Snapshot

NAME = "NodeName"

ERR_REASON = "node(s) didn't match the requested node name"

_MISMATCH = Status.unresolvable(ERR_REASON)


class NodeName(SignPlugin, PreFilterPlugin, FilterPlugin, ev.EnqueueExtensions):
    NAME = NAME

    def sign_pod(self, pod: PodInfo) -> Sequence[SignFragment] | None:
        """SignPod (OpportunisticBatching): what of the pod this plugin reads."""
        return [(signers.NODE_NAME, pod.node_name)]

    def pre_filter(self, state: CycleState, pod: PodInfo,
                   snapshot: Snapshot) -> Status | PreFilterResult:
        # Upstream returns (nil, nil) without a nodeName and still runs Filter, which then
        # passes every node: Skip is the same outcome without the per-node calls.
        if not pod.node_name:
            return SKIP
        return PreFilterResult(frozenset((pod.node_name,)))

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        if not pod.node_name or pod.node_name == node.name:
            return SUCCESS
        return _MISMATCH

    # -- queueing hints ------------------------------------------------------------------
    def events_to_register(self) -> tuple[ev.ClusterEventWithHint, ...]:
        return (ev.event(ev.Resource.NODE, ev.ActionType.ADD),)


def new(args: Mapping[str, Any] | None, handle: Handle) -> NodeName:
    if args:
        raise ArgsError("", f"{NAME} takes no args; remove them")
    return NodeName()


SPEC = PluginSpec(name=NAME, filter=new)
