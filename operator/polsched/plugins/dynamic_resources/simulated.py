"""What DynamicResources' PreBind would write, without an API server: for `polsched
simulate`, whose placed pods never reach PreBind. The claims come back as the cluster would
show them after the pod's binding: the allocation Reserve chose and the pod, or (with
DRAWorkloadResourceClaims) its PodGroup, in status.reservedFor. The simulation feeds them
to its cache, so that the next pods meet them as they would in the cluster (a later member
of the same PodGroup finds the group's claim allocated and reserved for its group) instead
of an allocation in flight forever.

The decisions are the plugin's: the same binding (DynamicResources.binding), the same
"already reserved" test (workload.reserved_for_pod) and the allocations by claim as PreBind
pairs them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from polsched.framework import listers as ls
from polsched.framework.cycle_state import CycleState
from polsched.framework.types import Json, PodInfo
from polsched.plugins.dynamic_resources import workload
from polsched.plugins.dynamic_resources.plugin import _STATE_KEY, DynamicResources, _State


def claims_after_pre_bind(plugin: DynamicResources, state: CycleState, pod: PodInfo,
                          node_name: str) -> list[Json]:
    """The claims the pod's PreBind would change, changed; and their allocations no longer
    in flight (the claims now say it). The extended-resources claim, which PreBind creates,
    stays in flight. A claim another pod allocated meanwhile (PreBind's "got allocated
    elsewhere in the meantime", after which the pod's retry only reserves it) gets the
    reservation only."""
    s: _State | None = state.get(_STATE_KEY)
    if s is None or not s.claims:
        return []
    results = dict(zip(s.allocating(node_name), s.by_node.get(node_name) or [], strict=False))
    out: list[Json] = []
    for i, info in enumerate(s.claims):
        if info.extended:
            continue
        meta = info.raw.get("metadata") or {}
        current = plugin.listers.get(ls.RESOURCE_CLAIM, str(meta.get("name")),
                                     str(meta.get("namespace"))) or info.raw
        if workload.reserved_for_pod(pod, current, plugin.workload_claims):
            continue
        claim: dict[str, Any] = _copy(current)
        status = claim.setdefault("status", {})
        alloc = results.get(i)
        if alloc is not None and status.get("allocation") is None:
            status["allocation"] = _copy(alloc)
        if status.get("allocation") is None:
            continue
        status["reservedFor"] = [*(status.get("reservedFor") or []),
                                 plugin.binding(s, i, pod)]
        plugin.tracker.in_flight.pop(info.uid, None)
        out.append(claim)
    return out


def pre_bind_claims(plugins: Iterable[object], state: CycleState | None, pod: PodInfo,
                    node_name: str) -> list[Json]:
    """claims_after_pre_bind of the DynamicResources among `plugins` (a pipeline's PreBind
    plugins for the pod); nothing without a cycle state."""
    if state is None:
        return []
    return [c for p in plugins if isinstance(p, DynamicResources)
            for c in claims_after_pre_bind(p, state, pod, node_name)]


def _copy(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _copy(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_copy(v) for v in obj]
    return obj


__all__ = ["claims_after_pre_bind", "pre_bind_claims"]
