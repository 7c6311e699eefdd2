"""Scoring extended resources that DeviceClasses serve (DRAExtendedResource).

Upstream: noderesources/resource_allocation.go, getDRAPreScoredParams and
calculateDRAExtendedResourceAllocatableRequest / calculateDRAResourceTotals. When a
NodeResourcesFit or NodeResourcesBalancedAllocation scoring resource is an extended
resource that a DeviceClass serves and the node does not advertise it, the node's
"allocatable" for it is the number of its devices the class selects (every slice whose
node selection reaches the node; the class's CEL selectors, all of them true) and its
"allocated" the number of those in use by allocated claims or allocations in flight.

The default profile scores cpu and memory only: this runs for a policy that scores an
extended resource. Pure data: reads the listers, writes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from polsched import dra
from polsched.dra import AllocatedState, NodeRef, model, node_matches
from polsched.framework import device_classes as dc
from polsched.framework import listers as ls
from polsched.framework.types import NodeInfo
from polsched.plugins.dynamic_resources.allocated import allocated_state


class DeviceTotals:
    """draPreScoreState for one cycle: the slices and the devices in use, read once."""

    def __init__(self, listers: ls.Listers) -> None:
        self.classes = dc.resolver_for(listers)
        self.allocated: AllocatedState = allocated_state(listers)
        self.slices: list[model.Slice] = []
        for raw in listers.objects[ls.RESOURCE_SLICE.name].values():
            try:
                self.slices.append(model.parse_slice(raw))
            except model.ModelError:
                continue
        # (expression, driver, pool, device) -> whether the selector matched
        self._matches: dict[tuple[str, str, str, str], bool] = {}

    def totals(self, node: NodeInfo, resource: str) -> tuple[int, int]:
        """(devices the resource's class selects on the node, those in use); (0, 0) when
        no class serves the resource or a selector fails (upstream logs and scores 0)."""
        klass = self.classes.get_device_class(resource)
        if klass is None:
            return 0, 0
        selectors = [str((sel.get("cel") or {}).get("expression") or "")
                     for sel in (klass.get("spec") or {}).get("selectors") or []
                     if isinstance(sel, dict) and isinstance(sel.get("cel"), dict)]
        ref = NodeRef(node.name, node.labels)
        capacity = allocated = 0
        try:
            for s in self.slices:
                for d in self._devices(s, ref):
                    if not self._selected(selectors, s, d):
                        continue
                    capacity += 1
                    if self.allocated.is_allocated((s.driver, s.pool, d.name)):
                        allocated += 1
        except dra.CELError:
            return 0, 0
        return capacity, allocated

    @staticmethod
    def _devices(s: model.Slice, node: NodeRef) -> Sequence[model.Device]:
        """calculateDRAResourceTotals' node selection, as upstream writes it."""
        if s.per_device_node_selection:
            return [d for d in s.devices
                    if d.all_nodes or (d.node_name and d.node_name == node.name)
                    or (d.node_selector is not None
                        and node_matches(node, d.node_name, d.all_nodes, d.node_selector))]
        if not s.all_nodes and s.node_name != node.name and s.node_selector is not None:
            if not node_matches(node, s.node_name, s.all_nodes, s.node_selector):
                return ()
        elif not s.all_nodes and s.node_name and s.node_name != node.name:
            return ()
        return s.devices

    def _selected(self, selectors: list[str], s: model.Slice, d: model.Device) -> bool:
        for expression in selectors:
            key = (expression, s.driver, s.pool, d.name)
            hit = self._matches.get(key)
            if hit is None:
                hit = dra.compile_selector(expression).matches(dra.DeviceInput(
                    driver=s.driver, attributes=d.attributes, capacity=d.raw_capacity,
                    allow_multiple_allocations=False))
                self._matches[key] = hit
            if not hit:
                return False
        return True


__all__ = ["DeviceTotals"]
