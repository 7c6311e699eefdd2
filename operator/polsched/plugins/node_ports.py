"""NodePorts: the host ports a pod asks for must be free on the node.

Copies kube-scheduler's nodeports plugin (pkg/scheduler/framework/plugins/nodeports/
node_ports.go) with the conflict rule of kube-scheduler's HostPortInfo.CheckConflict
(k8s.io/kube-scheduler/framework/types.go): hostIP 0.0.0.0 (or unset) conflicts with the
same protocol and port on any IP, and any IP conflicts with 0.0.0.0.
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
    SignFragment,
    SignPlugin,
)
from polsched.framework.registry import ArgsError, PluginSpec
from polsched.framework.status import SKIP, SUCCESS, Status
from polsched.framework.types import HostPort, NodeInfo, PodInfo, Snapshot

NAME = "NodePorts"

ERR_REASON = "node(s) didn't have free ports for the requested pod ports"
# kube-scheduler framework.DefaultBindAllHostIP
BIND_ALL_HOST_IP = "0.0.0.0"

_PRE_FILTER_KEY = "PreFilter" + NAME
_NO_FREE_PORTS = Status.unschedulable(ERR_REASON)


def wanted_host_ports(spec: Mapping[str, Any]) -> tuple[HostPort, ...]:
    """scheduler/util GetHostPorts: the host ports of the app containers and of the init
    containers that run for the pod's whole life (sidecars, restartPolicy Always),
    sanitized as HostPortInfo does (empty IP -> 0.0.0.0, empty protocol -> TCP)."""
    containers = [c for c in spec.get("initContainers") or ()
                  if c.get("restartPolicy") == "Always"]
    containers.extend(spec.get("containers") or ())
    ports: list[HostPort] = []
    for c in containers:
        for p in c.get("ports") or ():
            host_port = p.get("hostPort") or 0
            if host_port > 0:
                ports.append((p.get("hostIP") or BIND_ALL_HOST_IP, p.get("protocol") or "TCP",
                              host_port))
    return tuple(ports)


def fits_ports(wanted: Sequence[HostPort], used: set[HostPort]) -> bool:
    """fitsPorts: no wanted port conflicts with a port in use."""
    if not used:
        return True
    for ip, protocol, port in wanted:
        if ip == BIND_ALL_HOST_IP:
            for _, used_protocol, used_port in used:
                if used_port == port and used_protocol == protocol:
                    return False
        elif (BIND_ALL_HOST_IP, protocol, port) in used or (ip, protocol, port) in used:
            return False
    return True


class NodePorts(SignPlugin, PreFilterPlugin, FilterPlugin, ev.EnqueueExtensions):
    NAME = NAME

    def sign_pod(self, pod: PodInfo) -> Sequence[SignFragment] | None:
        """SignPod (OpportunisticBatching): what of the pod this plugin reads."""
        return [(signers.HOST_PORTS, signers.host_ports(pod))]

    def pre_filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> Status:
        wanted = wanted_host_ports(pod.spec)
        if not wanted:
            return SKIP
        state.write(_PRE_FILTER_KEY, wanted)
        return SUCCESS

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        wanted = state.get(_PRE_FILTER_KEY)
        if wanted is None:
            wanted = wanted_host_ports(pod.spec)
        return SUCCESS if fits_ports(wanted, node.used_ports) else _NO_FREE_PORTS

    # -- queueing hints ------------------------------------------------------------------
    def events_to_register(self) -> tuple[ev.ClusterEventWithHint, ...]:
        r, a = ev.Resource, ev.ActionType
        return (ev.event(r.ASSIGNED_POD, a.DELETE, self._after_assigned_pod_deleted),
                ev.event(r.NODE, a.ADD))

    def _after_assigned_pod_deleted(self, pod: PodInfo, old: Any,
                                    new: Any) -> ev.QueueingHint:
        """isSchedulableAfterAssignedPodDeleted: the deleted pod held a port the pod
        wants."""
        deleted: PodInfo = old
        if not deleted.node_name and not deleted.nominated_node:
            return ev.QUEUE_SKIP
        ports = wanted_host_ports(deleted.spec)
        if not ports:
            return ev.QUEUE_SKIP
        if fits_ports(wanted_host_ports(pod.spec), set(ports)):
            return ev.QUEUE_SKIP
        return ev.QUEUE


def new(args: Mapping[str, Any] | None, handle: Handle) -> NodePorts:
    if args:
        raise ArgsError("", f"{NAME} takes no args; remove them")
    return NodePorts()


SPEC = PluginSpec(name=NAME, filter=new)
