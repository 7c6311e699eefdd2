"""Why a pod's claims get (or do not get) devices on a node: the device-level answer to
"why is my GPU pod Pending", for `polsched explain`.

kube-scheduler says "cannot allocate all claims" per node and nothing more. Here, per node
and per request of each unallocated claim, every device the node can reach gets a
verdict, checked in the allocator's own order: its pool incomplete or invalid, in use,
a DeviceClass selector or a request selector false (which one, with its expression), not
for this node, a taint not tolerated, not enough capacity left; a device that passes all
of them is a candidate. The devices the allocator would pick are listed too, and claims
already allocated say where. Pure data: reads the plugin's listers, writes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from polsched import dra
from polsched.dra import (
    AllocatorError,
    NodeRef,
    gather_pools,
    node_matches,
    request_over_capacity,
    taint_prevents,
)
from polsched.dra.model import ALL, Device, Request, Slice
from polsched.framework import device_classes as dc
from polsched.framework import podgroups as pgs
from polsched.framework.cycle_state import CycleState
from polsched.framework.types import NodeInfo, PodInfo, Snapshot
from polsched.plugins.dynamic_resources import workload
from polsched.plugins.dynamic_resources.plugin import _STATE_KEY, DynamicResources, _State


@dataclass
class RequestReport:
    claim: str
    request: str       # "gpu" or "gpu/large" for a subrequest
    wants: str         # "2 devices of class gpu", "all devices of class gpu"
    candidates: list[str] = field(default_factory=list)   # driver/pool/device
    rejected: list[tuple[str, str]] = field(default_factory=list)  # (driver/pool/device, why)


@dataclass
class NodeDevices:
    node: str
    # "claim/request: driver/pool/device" the allocator would pick; None when they do not fit
    allocation: list[str] | None = None
    error: str = ""
    requests: list[RequestReport] = field(default_factory=list)
    allocated_claims: list[str] = field(default_factory=list)  # "claim: allocated ..."
    # DRAExtendedResource: per extended resource, where it comes from on this node.
    extended: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        out = []
        for e in self.extended:
            out.append(f"  {e}")
        for c in self.allocated_claims:
            out.append(f"  {c}")
        for r in self.requests:
            head = f"  claim {r.claim}, request {r.request}: wants {r.wants}; "
            head += (f"{len(r.candidates)} candidate(s): {', '.join(r.candidates)}"
                     if r.candidates else "no candidate")
            out.append(head)
            for dev, why in r.rejected:
                out.append(f"    {dev}: {why}")
        if self.error:
            out.append(f"  error: {self.error}")
        elif self.requests:
            out.append("  allocation: " + (", ".join(self.allocation) if self.allocation
                                           else "none (cannot allocate all claims)"))
        return out


def _selector_failure(selectors: tuple[str | None, ...], s: Slice, dev: Device,
                      owner: str) -> str:
    for i, source in enumerate(selectors):
        if source is None:
            continue
        try:
            ok = dra.compile_selector(source).matches(dra.DeviceInput(
                driver=s.driver, attributes=dev.attributes, capacity=dev.raw_capacity,
                allow_multiple_allocations=bool(dev.allow_multiple_allocations)))
        except dra.CELError as e:
            return f"{owner} selector #{i} fails with an error: {e}"
        if not ok:
            return f"{owner} selector #{i} is false: {source}"
    return ""


def _wants(r: Request) -> str:
    if r.mode == ALL:
        return f"all devices of class {r.class_name}"
    return f"{r.count} device(s) of class {r.class_name}"


def _extended(plugin: DynamicResources, s: _State, node_info: NodeInfo,
              report: NodeDevices) -> None:
    """Where each extended resource a DeviceClass serves comes from on this node."""
    classes = dc.resolver_for(plugin.listers)
    for name, qty in sorted(s.pod_scalars.items()):
        klass = classes.get_device_class(name)
        if not qty or klass is None:
            continue
        if node_info.allocatable.get(name, 0) > 0:
            report.extended.append(f"extended resource {name} ({qty}): from the node's "
                                   "allocatable (a device plugin), not from devices")
        else:
            report.extended.append(
                f"extended resource {name} ({qty}): from devices of DeviceClass "
                f"{(klass.get('metadata') or {}).get('name')} (the node does not "
                "advertise it)")
    st = plugin.filter_extended(s, node_info)
    if st is not None and not st.ok:
        report.error = st.message


def diagnose(plugin: DynamicResources, pod: PodInfo, node: NodeRef,
             node_info: NodeInfo | None = None) -> NodeDevices | None:
    """The device-level report for one node; None when the pod has no claims (neither
    its own nor one for extended resources served by devices). Without `node_info` the
    extended resources' claim is left out."""
    state = CycleState()
    st = plugin.pre_filter(state, pod, Snapshot([]))
    s: _State | None = state.get(_STATE_KEY)
    report = NodeDevices(node.name)
    if s is None or not s.claims:
        return None if st.ok or not pod.spec.get("resourceClaims") else \
            NodeDevices(node.name, error=st.message)
    if not st.ok:
        report.error = st.message
        return report
    indexes = list(s.to_allocate)
    if s.extended is not None:
        if node_info is None:
            indexes = [i for i in indexes if i != s.extended]
        else:
            _extended(plugin, s, node_info, report)
            if report.error:
                return report
            indexes = s.allocating(node.name)
    for info in s.claims:
        if info.allocated:
            alloc = (info.raw.get("status") or {}).get("allocation") or {}
            devs = [f"{r.get('pool')}/{r.get('device')}"
                    for r in (alloc.get("devices") or {}).get("results") or []]
            where = ("this node" if info.node_filter is None or node_matches(
                node, None, False, info.node_filter) else "another node")
            # DRAWorkloadResourceClaims: the claim is the PodGroup's, held for the group
            # while it lives (PodGroupPostFilter frees it when no member is placed).
            group = pgs.pod_group_name(pod)
            held = (f", reserved for its PodGroup {group}" if group and plugin.workload_claims
                    and workload.reserved_for_pod(pod, info.raw, True)
                    and not workload.reserved_for_pod(pod, info.raw, False) else "")
            report.allocated_claims.append(
                f"claim {info.claim.key}: already allocated ({', '.join(devs)}), usable on "
                f"{where}{held}")
    if s.allocator is None or not indexes:
        return report
    claims = [s.claims[i].claim for i in indexes]
    variant = s.ext_by_node.get(node.name)
    if s.extended is not None and s.extended in indexes and variant is not None:
        claims[indexes.index(s.extended)] = variant.claim
    try:
        results = s.allocator.allocate(node, claims)
    except AllocatorError as e:
        report.error = str(e)
        results = None
    if results is not None:
        report.allocation = [
            f"{c.key}/{r['request']}: {r['driver']}/{r['pool']}/{r['device']}"
            for c, res in zip(claims, results, strict=True)
            for r in res["devices"]["results"]]
    a = s.allocator
    in_use = a.in_use(node, claims)
    pools = gather_pools(a.on_node.get(node.name, []) + a.shared, node, a.features,
                         a.all_slices)
    for claim in claims:
        for req in claim.requests:
            subs: list[tuple[str, Request]] = [
                (f"{req.name}/{x.name}", x) for x in req.first_available]
            if req.exactly is not None:
                subs = [(req.name, req.exactly)]
            for name, r in subs:
                rr = RequestReport(claim.key, name, _wants(r))
                klass = a.classes.get(r.class_name)
                for pool in pools:
                    label = "/".join(pool.id)
                    if pool.incomplete or pool.invalid:
                        why = ("pool incomplete (its slices are being updated)"
                               if pool.incomplete else f"pool invalid: {pool.invalid_reason}")
                        rr.rejected.append((f"{label}/*", why))
                        continue
                    for sl in pool.slices:
                        for dev in sl.devices:
                            did = (sl.driver, sl.pool, dev.name)
                            why = ""
                            if not r.admin_access and in_use(did):
                                why = "in use by another claim"
                            if not why and klass is not None:
                                why = _selector_failure(klass.selectors, sl, dev,
                                                        f"DeviceClass {klass.name}")
                            if not why:
                                why = _selector_failure(r.selectors, sl, dev,
                                                        f"request {name}")
                            if not why and sl.per_device_node_selection and not node_matches(
                                    node, dev.node_name, dev.all_nodes, dev.node_selector):
                                why = "not available on this node"
                            if not why and a.features.device_taints and \
                                    taint_prevents(dev, r):
                                taints = ", ".join(
                                    f"{t.get('key')}={t.get('value', '')}:{t.get('effect')}"
                                    for t in dev.taints)
                                why = f"tainted ({taints}), not tolerated"
                            if not why and a.features.consumable_capacity and \
                                    not request_over_capacity(
                                        a.allocated.capacity.get(did, {}), r, dev.capacity,
                                        {}, a.features.fractional_capacity_range):
                                why = "not enough capacity left"
                            if why:
                                rr.rejected.append((f"{label}/{dev.name}", why))
                            else:
                                rr.candidates.append(f"{label}/{dev.name}")
                report.requests.append(rr)
    return report


__all__ = ["NodeDevices", "RequestReport", "diagnose"]
