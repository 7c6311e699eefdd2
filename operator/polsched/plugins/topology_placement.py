"""TopologyPlacementGenerator: a pod group with a topology constraint is tried in each
domain of the node label it names, one placement per domain.

Copies kube-scheduler v1.37's topologyaware plugin
(pkg/scheduler/framework/plugins/topologyaware/topology_placement.go), which the default
profile runs when the TopologyAwareWorkloadScheduling gate is on
(apis/config/v1/default_plugins.go applyTopologyAwareWorkloadScheduling); here the
builder (scheduler.pipelines) adds it when Handle.features has that gate.

- A PodGroup (or CompositePodGroup) without `spec.schedulingConstraints.topology` gets the
  parent placement (every node, or its parent composite group's domain) unchanged.
- Otherwise one placement per value of the label `topology[0].key` (the API allows one
  constraint), with the nodes that carry it; nodes without the label are in none.
- When members of the group (of any PodGroup under a composite group) are already
  scheduled (assumed or bound), only their domain
  is generated; members in different domains, or on a node without the label, are an
  error (upstream's texts).

Placements are generated in the order of their domain names. Upstream's come from a Go
map, in random order; the order is only visible in a group's message when no placement
fits (`first placement status`), see docs/gangs.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from polsched.framework.cycle_state import CycleState
from polsched.framework.interfaces import (
    Handle,
    Placement,
    PlacementGeneratePlugin,
    PodGroupInfo,
)
from polsched.framework.podgroups import PodGroups
from polsched.framework.registry import ArgsError
from polsched.framework.status import SUCCESS, Status
from polsched.framework.types import NodeInfo
from polsched.objects import Json

NAME = "TopologyPlacementGenerator"


def topology_key(pod_group: Json) -> str | None:
    """The label key of the PodGroup's topology constraint (getTopologyKey), None when it
    has none."""
    spec = pod_group.get("spec")
    constraints = spec.get("schedulingConstraints") if isinstance(spec, Mapping) else None
    topology = constraints.get("topology") if isinstance(constraints, Mapping) else None
    if not isinstance(topology, list) or not topology:
        return None
    first = topology[0]
    key = first.get("key") if isinstance(first, Mapping) else None
    return key if isinstance(key, str) else None


class TopologyPlacement(PlacementGeneratePlugin):
    NAME = NAME

    def __init__(self, handle: Handle) -> None:
        self._groups: PodGroups | None = handle.pod_groups

    def generate_placements(self, state: CycleState, group: PodGroupInfo,
                            parent: Placement) -> tuple[list[Placement], Status]:
        key = topology_key(group.pod_group)
        if key is None:
            return [parent], SUCCESS
        required: str | None = None
        # getScheduledPods: every PodGroup's under a composite group (GetPodGroupStates).
        scheduled = [] if self._groups is None else self._groups.subtree_scheduled(group.key)
        if scheduled:
            required, err = _scheduled_domain(key, scheduled,
                                              {n.name: n for n in parent.nodes})
            if err:
                return [], Status.error("cannot determine domain for already scheduled "
                                        f"pods: {err}")
        by_domain: dict[str, list[NodeInfo]] = {}
        for node in parent.nodes:
            domain = node.labels.get(key)
            if domain is not None and (required is None or domain == required):
                by_domain.setdefault(domain, []).append(node)
        return [Placement(d, tuple(by_domain[d])) for d in sorted(by_domain)], SUCCESS


def _scheduled_domain(key: str, pods: list[Any], nodes: Mapping[str, NodeInfo]
                      ) -> tuple[str, str]:
    """getScheduledPodsTopologyDomain: the one domain of the scheduled members, or an
    error text."""
    found = ""
    for pod in pods:
        node = nodes.get(pod.node_name)
        if node is None:
            return "", (f"getting node for pod {pod.namespace}/{pod.name}: nodeinfo not "
                        f'found for node name "{pod.node_name}"')
        domain = node.labels.get(key)
        if domain is None:
            return "", f"no topology domain found for pod {pod.namespace}/{pod.name}"
        if found and found != domain:
            return "", f"more than 1 domain found for pod group: {found}, {domain}"
        found = domain
    return found, ""


def new(args: Mapping[str, Any] | None, handle: Handle) -> TopologyPlacement:
    if args:
        raise ArgsError("", f"{NAME} takes no args; remove them")
    return TopologyPlacement(handle)
