"""The structured-parameters allocator: which devices a pod's claims get on one node.

A port of k8s.io/dynamic-resource-allocation@v0.37.1 structured/internal/incubating
(allocator_incubating.go, pools_incubating.go, constraint.go, consumable_capacity.go),
the variant kube-scheduler v1.37 runs with its default feature gates. Same search, same
order, same result: the pools that serve the node sorted by driver and pool name (pools
with binding conditions last), each pool's slices by name, devices in slice order; one
claim after the other, one request after the other, a first-fit depth-first search that
backtracks and only tries combinations (never permutations) of devices within a request.
The upstream test table runs against this module (tests/unit/plugins/dynamic_resources).

Supported: CEL selectors of classes and requests (device_cel), ExactCount and All,
matchAttribute/distinctAttribute, firstAvailable, device taints and request
tolerations, adminAccess, partitionable devices (shared counters, per-device node
selection), consumable capacity (allowMultipleAllocations, request policies, fractional
ranges), binding conditions, pools over several slices and generations, incomplete and
invalid pools, class and claim configuration in the result and the result's node
selector.

Not here (alpha upstream, only in its "experimental" variant): compatibility groups
(slices using them are ignored, as incubating does), derived attributes (refused),
list-type attributes in constraints, optional node operations.

Pure data: no I/O, no logging in the search.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from polsched.dra import device_cel
from polsched.dra.model import (
    ALL,
    EXACT_COUNT,
    Capacity,
    Claim,
    Constraint,
    Device,
    DeviceClass,
    DeviceID,
    Json,
    Request,
    RequestPolicy,
    Slice,
    format_device_id,
)
from polsched.dra.quantity import Quantity
from polsched.dra.selector_syntax import CELError
from polsched.framework.selectors import SelectorError, compile_requirements

# resourceapi.AllocationResultsMaxSize
ALLOCATION_RESULTS_MAX_SIZE = 32


@dataclass(frozen=True)
class Features:
    """internal.Features: the allocator's switches; defaults are v1.37's feature gates."""

    admin_access: bool = True
    prioritized_list: bool = True
    partitionable_devices: bool = True
    device_taints: bool = True
    device_binding_and_status: bool = True
    consumable_capacity: bool = True
    fractional_capacity_range: bool = True

    @staticmethod
    def none() -> Features:
        return Features(False, False, False, False, False, False, False)


class AllocatorError(Exception):
    """A fatal problem with the input (a CEL error, a missing class): the pod cannot be
    scheduled anywhere until the objects change."""


class NodeAllocationError(AllocatorError):
    """ErrFailedAllocationOnNode: only this node is affected (invalid pools)."""


@dataclass
class AllocatedState:
    """schedulerapi.AllocatedState: what allocated (and in-flight) claims use."""

    devices: set[DeviceID] = field(default_factory=set)
    shared: set[tuple[DeviceID, str]] = field(default_factory=set)
    capacity: dict[DeviceID, dict[str, Quantity]] = field(default_factory=dict)
    # Optional, for the allocator's memo (Allocator.allocate): per pool, a hashable value
    # that names which of its devices are in `devices` (a pool not listed: none). Whoever
    # keeps it gives a pool whose devices change a value never used before for another
    # set.
    pool_versions: Mapping[tuple[str, str], Any] | None = None

    def is_allocated(self, d: DeviceID) -> bool:
        """internal.IsDeviceAllocated."""
        if d in self.devices or d in self.capacity:
            return True
        return any(s[0] == d for s in self.shared)


@dataclass(frozen=True)
class NodeRef:
    name: str
    labels: Mapping[str, str]


# --- node selection ------------------------------------------------------------------

_NS_CACHE: dict[int, tuple[Json, Callable[[NodeRef], bool]]] = {}


def _compile_node_selector(sel: Json) -> Callable[[NodeRef], bool]:
    hit = _NS_CACHE.get(id(sel))
    if hit is not None and hit[0] is sel:
        return hit[1]
    terms = sel.get("nodeSelectorTerms") or []
    matchers: list[tuple[Callable[[Mapping[str, str]], bool],
                         Callable[[Mapping[str, str]], bool], bool]] = []
    try:
        for i, term in enumerate(terms):
            exprs = term.get("matchExpressions") or []
            fields = term.get("matchFields") or []
            for f in fields:
                if f.get("key") != "metadata.name":
                    raise SelectorError(f"nodeSelectorTerms[{i}].matchFields",
                                        f"unsupported field {f.get('key')!r}")
            matchers.append((compile_requirements(exprs, f"nodeSelectorTerms[{i}]"
                                                          ".matchExpressions"),
                             compile_requirements(fields, f"nodeSelectorTerms[{i}]"
                                                           ".matchFields", ("In", "NotIn")),
                             not exprs and not fields))
    except SelectorError as err:
        raise AllocatorError(f"failed to parse node selector: {err}") from err

    def match(node: NodeRef) -> bool:
        fields = {"metadata.name": node.name}
        return any(not empty and e(node.labels) and f(fields) for e, f, empty in matchers)

    if len(_NS_CACHE) > 4096:
        _NS_CACHE.clear()
    _NS_CACHE[id(sel)] = (sel, match)
    return match


def node_matches(node: NodeRef, node_name: str | None, all_nodes: bool,
                 node_selector: Json | None) -> bool:
    """NodeMatches (pools_incubating.go)."""
    if node_name:
        return node.name == node_name
    if all_nodes:
        return True
    if node_selector is not None:
        return _compile_node_selector(node_selector)(node)
    return False


# --- pools ---------------------------------------------------------------------------

PoolID = tuple[str, str]


@dataclass
class Pool:
    id: PoolID
    incomplete: bool = False
    invalid: bool = False
    invalid_reason: str = ""
    slices: list[Slice] = field(default_factory=list)  # targeting the node
    slices_not_targeting: list[Slice] = field(default_factory=list)
    counter_sets: dict[str, Mapping[str, Quantity]] = field(default_factory=dict)


def _add_slice(pools: dict[PoolID, list[Slice]], s: Slice) -> None:
    pid = (s.driver, s.pool)
    have = pools.get(pid)
    if have is None or s.generation > have[0].generation:
        pools[pid] = [s]
    elif s.generation == have[0].generation:
        have.append(s)


def _check_slices_in_pool(all_slices: Sequence[Slice], pid: PoolID,
                          generation: int) -> tuple[bool, list[Slice]]:
    out = []
    for s in all_slices:
        if s.driver != pid[0] or s.pool != pid[1]:
            continue
        if s.generation == generation:
            out.append(s)
        elif s.generation > generation:
            return True, []
    return False, out


def _build_pool(pid: PoolID, slices: list[Slice], features: Features,
                all_for_pool: list[Slice] | None) -> Pool:
    slices.sort(key=lambda s: s.name)
    device_slices: list[Slice] = []
    counter_slices: list[Slice] = []
    not_targeting: list[Slice] = []
    for s in slices:
        (counter_slices if features.partitionable_devices and s.shared_counters
         else device_slices).append(s)
    if all_for_pool is not None and len(slices) < len(all_for_pool):
        names = {s.name for s in slices}
        for s in all_for_pool:
            if s.name in names:
                continue
            (counter_slices if features.partitionable_devices and s.shared_counters
             else not_targeting).append(s)
    seen: set[str] = set()
    for s in device_slices:
        for d in s.devices:
            if d.name in seen:
                return Pool(pid, invalid=True, invalid_reason=f"duplicate device name {d.name}")
            seen.add(d.name)
    if not features.partitionable_devices:
        return Pool(pid, slices=device_slices)
    counter_sets: dict[str, Mapping[str, Quantity]] = {}
    for s in counter_slices:
        for name, counters in s.shared_counters:
            if name in counter_sets:
                return Pool(pid, invalid=True,
                            invalid_reason=f"duplicate counter set name {name}")
            counter_sets[name] = counters
    for group in (device_slices, not_targeting):
        for s in group:
            for d in s.devices:
                for cc in d.consumes_counters:
                    cs = counter_sets.get(cc.counter_set)
                    if cs is None:
                        return Pool(pid, invalid=True,
                                    invalid_reason=f"counter set {cc.counter_set} not found")
                    for n in cc.counters:
                        if n not in cs:
                            return Pool(pid, invalid=True, invalid_reason=(
                                f"counter {n} not found in counter set {cc.counter_set}"))
    return Pool(pid, slices=device_slices, slices_not_targeting=not_targeting,
                counter_sets=counter_sets)


def _has_binding_conditions(pool: Pool) -> bool:
    return any(d.binding_conditions is not None for s in pool.slices for d in s.devices)


def gather_pools(slices_for_node: Sequence[Slice], node: NodeRef, features: Features,
                 all_slices: Sequence[Slice]) -> list[Pool]:
    """GatherPools: the pools with devices the node can reach, in allocation order."""
    pools: dict[PoolID, list[Slice]] = {}
    for s in slices_for_node:
        if not features.partitionable_devices and (s.per_device_node_selection
                                                   or s.shared_counters):
            continue
        # Compatibility groups are alpha (DRADeviceCompatibilityGroups, off): a slice that
        # uses them is ignored, which leaves its pool incomplete, as upstream.
        if s.uses_compatibility_groups:
            continue
        if s.node_name or s.all_nodes or s.node_selector is not None:
            relevant = node_matches(node, s.node_name, s.all_nodes, s.node_selector)
        elif s.per_device_node_selection:
            relevant = any(node_matches(node, d.node_name, d.all_nodes, d.node_selector)
                           for d in s.devices)
        else:
            continue  # some future node selection we do not know
        if relevant:
            _add_slice(pools, s)
    result: list[Pool] = []
    with_binding: list[Pool] = []
    for pid, for_pool in pools.items():
        count = for_pool[0].slice_count
        if len(for_pool) == count:
            pool = _build_pool(pid, list(for_pool), features, None)
        else:
            obsolete, all_for_pool = _check_slices_in_pool(all_slices, pid,
                                                           for_pool[0].generation)
            if obsolete:
                continue
            all_for_pool = [x for x in all_for_pool if not x.uses_compatibility_groups]
            if len(all_for_pool) != count:
                result.append(Pool(pid, incomplete=True))
                continue
            pool = _build_pool(pid, list(for_pool), features, all_for_pool)
        (with_binding if _has_binding_conditions(pool) else result).append(pool)
    result.sort(key=lambda p: p.id)
    with_binding.sort(key=lambda p: p.id)
    return result + with_binding


# --- capacity (consumable_capacity.go) -------------------------------------------------

class _NotRepresentable(Exception):
    pass


def _safe_milli(q: Quantity) -> int:
    m = q.value * 1000
    if m != m.to_integral_value():
        raise _NotRepresentable("value must be representable in milli units")
    if not -(2 ** 63) <= m < 2 ** 63:
        raise _NotRepresentable("value out of the milli-value range")
    return int(m)


def _use_milli(p: RequestPolicy, fractional: bool) -> bool:
    if not fractional:
        return False
    for i, q in enumerate((p.range_min, p.range_max, p.range_step)):
        if q is None:
            continue
        try:
            v = _safe_milli(q)
        except _NotRepresentable:
            return False
        if i == 2 and v < 1:
            return False
    return True


def _round_up_range(req: Quantity, p: RequestPolicy, fractional: bool) -> Quantity:
    assert p.range_min is not None
    if req.cmp(p.range_min) < 0:
        return p.range_min
    if p.range_step is None:
        return req
    if _use_milli(p, fractional):
        try:
            r = _safe_milli(req)
        except _NotRepresentable as err:
            raise AllocatorError(f"request {req} is not a representable milli value") from err
        step, mn = _safe_milli(p.range_step), _safe_milli(p.range_min)
        n = -(-(r - mn) // step)
        v = mn + step * n
        if v >= 2 ** 63:
            raise AllocatorError(f"rounding request {req} up passes the milli-value range")
        return Quantity(Decimal(v) / 1000, p.range_step.format)
    if req.value > 2 ** 63 - 1:
        raise AllocatorError(f"request {req} exceeds MaxInt64")
    r, step, mn = req.int_value(), p.range_step.int_value(), p.range_min.int_value()
    added = r - mn
    n = added // step if added >= 0 else -((-added) // step)
    if added % step if added >= 0 else (-added) % step:
        n += 1
    v = mn + step * n
    if mn >= 0 and v > 2 ** 63 - 1:
        raise AllocatorError(f"rounding request {req} up to the next step passes MaxInt64")
    return Quantity(Decimal(v), p.range_step.format)


def _consumed(req: Quantity | None, cap: Capacity, fractional: bool) -> Quantity:
    """calculateConsumedCapacity."""
    p = cap.policy
    if req is None:
        return p.default if p is not None and p.default is not None else cap.value
    if p is None:
        return req
    if p.has_range and p.range_min is not None:
        return _round_up_range(req, p, fractional)
    if p.valid_values:
        for v in p.valid_values:
            if req.cmp(v) <= 0:
                return v
        return req
    return req


def _violates(v: Quantity, p: RequestPolicy | None, fractional: bool) -> bool:
    if p is None:
        return False
    if p.default is not None and v.value == p.default.value and v.format == p.default.format:
        return False
    if p.has_range:
        if p.range_max is not None and v.cmp(p.range_max) > 0:
            return True
        if p.range_step is not None:
            if _use_milli(p, fractional):
                try:
                    r = _safe_milli(v)
                except _NotRepresentable:
                    return True
                step = _safe_milli(p.range_step)
                mn = _safe_milli(p.range_min) if p.range_min is not None else 0
            else:
                r, step = v.int_value(), p.range_step.int_value()
                mn = p.range_min.int_value() if p.range_min is not None else 0
            if _go_mod(r - mn, step) != 0:
                return True
        return False
    if p.valid_values:
        return not any(v.cmp(x) == 0 for x in p.valid_values)
    return False


def _go_mod(a: int, b: int) -> int:
    """Go's % (truncated division)."""
    r = abs(a) % abs(b)
    return -r if a < 0 else r


def request_over_capacity(current: Mapping[str, Quantity], request: Request,
                          capacity: Mapping[str, Capacity], allocating: Mapping[str, Quantity],
                          fractional: bool) -> bool:
    """CmpRequestOverCapacity: true when the request fits the remaining capacity."""
    reqs = request.capacity_requests
    if reqs and any(n not in capacity for n in reqs):
        return False
    consumed: dict[str, Quantity] = {}
    for name, cap in capacity.items():
        c = _consumed(reqs.get(name) if reqs else None, cap, fractional)
        if c.sign() < 0:
            raise AllocatorError(f"capacity {name!r}: capacity value is negative")
        consumed[name] = c
    for name, cap in capacity.items():
        c = consumed[name]
        if _violates(c, cap.policy, fractional):
            return False
        total = c.value + (current[name].value if name in current else 0)
        if name in allocating:
            total += allocating[name].value
        if total > cap.value.value:
            return False
    return True


def consumed_from_request(request: Request, capacity: Mapping[str, Capacity],
                          fractional: bool) -> dict[str, Quantity]:
    reqs = request.capacity_requests
    return {name: _consumed(reqs.get(name) if reqs else None, cap, fractional)
            for name, cap in capacity.items()}


# --- taints ----------------------------------------------------------------------------

def tolerates(toleration: Json, taint: Json) -> bool:
    """resourceclaim.ToleratesTaint."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    if key and key != taint.get("key"):
        return False
    op = toleration.get("operator") or ""
    if op in ("", "Equal"):
        return (toleration.get("value") or "") == (taint.get("value") or "")
    return op == "Exists"


def taint_prevents(device: Device, request: Request) -> bool:
    for taint in device.taints:
        if taint.get("effect") in ("NoExecute", "NoSchedule"):
            if not any(tolerates(t, taint) for t in request.tolerations):
                return True
    return False


# --- constraints -----------------------------------------------------------------------

def lookup_attribute(device: Device, driver: str, name: str) -> Mapping[str, Any] | None:
    attr = device.attributes.get(name)
    if attr is not None:
        return attr
    domain, sep, ident = name.partition("/")
    if not sep or domain != driver:
        return None
    return device.attributes.get(ident)


_KINDS = ("string", "int", "bool", "version")


def _scalar(attr: Mapping[str, Any]) -> tuple[str, Any] | None:
    for k in _KINDS:
        if attr.get(k) is not None:
            return k, attr[k]
    return None


class _ConstraintState:
    def __init__(self, c: Constraint) -> None:
        self.requests = c.requests
        self.match = c.match_attribute
        self.distinct = c.distinct_attribute
        self.first: tuple[str, Any] | None = None
        self.count = 0
        self.values: list[tuple[str, Any] | None] = []

    def applies(self, request: str, sub: str) -> bool:
        if not self.requests:
            return True
        if not sub:
            return request in self.requests
        return request in self.requests or f"{request}/{sub}" in self.requests

    def add(self, request: str, sub: str, device: Device, driver: str) -> bool:
        if not self.applies(request, sub):
            return True
        attr = lookup_attribute(device, driver, self.match or self.distinct or "")
        if attr is None:
            return False
        value = _scalar(attr)
        if self.match is not None:
            if self.count == 0:
                self.first = value
                self.count = 1
                return True
            if value is None or self.first is None or value != self.first:
                return False
            self.count += 1
            return True
        if value is None:
            return False
        if any(v == value for v in self.values):
            return False
        self.values.append(value)
        return True

    def remove(self, request: str, sub: str) -> None:
        if not self.applies(request, sub):
            return
        if self.match is not None:
            self.count -= 1
        else:
            self.values.pop()


# --- the search ----------------------------------------------------------------------------

@dataclass
class _RequestData:
    request: Request
    parent: str | None  # the parent request's name, for a subrequest
    klass: DeviceClass | None
    num_devices: int = 0
    selected_sub: int = 0
    all_devices: list[_Candidate] = field(default_factory=list)

    def name(self) -> str:
        return f"{self.parent}/{self.request.name}" if self.parent else self.request.name


@dataclass
class _Candidate:
    id: DeviceID
    device: Device
    slice: Slice
    pool: Pool


@dataclass
class _Result:
    request: str
    parent: str
    id: DeviceID
    device: Device
    slice: Slice
    share_id: str | None
    consumed: dict[str, Quantity] | None
    admin_access: bool | None


# (selector text, id of the Slice, device index) -> (that Slice, whether it matches)
MatchCache = dict[tuple[str, int, int], tuple[Slice, bool]]


class _Stop(Exception):
    pass


class _MaxSizeExceeded(Exception):
    pass


_DEFAULT_PARENT = ""


class SliceIndex:
    """The slices an Allocator reads, indexed: per node name, the node-independent ones,
    and per node the pools that GatherPools finds (computed on first use). Pools are
    read-only during an allocation, so one index serves every pod and node while the
    slices (and the features) stay the same; the plugin builds a new one when they
    change. Without a node-independent slice a node's pools depend on its name only;
    otherwise (node selectors) on its labels too, compared on each use."""

    def __init__(self, slices: Sequence[Slice], features: Features) -> None:
        self.features = features
        self.all_slices = list(slices)
        self.on_node: dict[str, list[Slice]] = {}
        self.shared: list[Slice] = []
        for s in self.all_slices:
            if s.node_name:
                self.on_node.setdefault(s.node_name, []).append(s)
            else:
                self.shared.append(s)
        self._pools: dict[str, tuple[Mapping[str, str], list[Pool], frozenset[DeviceID],
                                     tuple[PoolID, ...]]] = {}
        # Allocation results per (node, claims' signature), with the devices of the node's
        # pools that were allocated then (Allocator.allocate's memo), for one `classes`.
        self.memo: dict[tuple[str, tuple[str, ...]],
                        tuple[Any, list[dict[str, Any]] | None]] = {}
        self.memo_classes: Mapping[str, DeviceClass] | None = None

    def _entry(self, node: NodeRef) -> tuple[Mapping[str, str], list[Pool],
                                             frozenset[DeviceID], tuple[PoolID, ...]]:
        hit = self._pools.get(node.name)
        if hit is not None and (not self.shared or hit[0] == node.labels):
            return hit
        pools = gather_pools(self.on_node.get(node.name, []) + self.shared, node,
                             self.features, self.all_slices)
        # Every device whose being allocated can change an allocation on the node: those
        # of its pools, counter-sharing slices that do not target the node included.
        ids = frozenset((s.driver, s.pool, d.name) for p in pools
                        for group in (p.slices, p.slices_not_targeting)
                        for s in group for d in s.devices)
        if len(self._pools) > 100_000:
            self._pools.clear()
        entry = (dict(node.labels), pools, ids, tuple(p.id for p in pools))
        self._pools[node.name] = entry
        return entry

    def pools(self, node: NodeRef) -> list[Pool]:
        """GatherPools for the node, in allocation order."""
        return self._entry(node)[1]

    def device_ids(self, node: NodeRef) -> frozenset[DeviceID]:
        """The devices of the node's pools (and of the slices sharing their counters)."""
        return self._entry(node)[2]

    def pool_ids(self, node: NodeRef) -> tuple[PoolID, ...]:
        """The ids of the node's pools, in allocation order."""
        return self._entry(node)[3]


class Allocator:
    """NewAllocator: built once per scheduling cycle from the cluster's slices, classes
    and the devices in use; `allocate` then runs per node. `index`: the slices already
    indexed (a SliceIndex of `slices` with these features), kept by the caller across
    cycles while the slices do not change."""

    def __init__(self, features: Features, allocated: AllocatedState,
                 classes: Mapping[str, DeviceClass], slices: Sequence[Slice],
                 share_id: Callable[[], str] = lambda: str(uuid.uuid4()),
                 match_cache: MatchCache | None = None,
                 index: SliceIndex | None = None) -> None:
        self.features = features
        self.allocated = allocated
        self.classes = classes
        kept = index is not None and index.features == features
        if index is None or not kept:
            index = SliceIndex(slices, features)
        self.index = index
        self.all_slices = index.all_slices
        self.on_node = index.on_node
        self.shared = index.shared
        # time.monotonic() after which a search gives up (the Filter timeout): the
        # caller sets it before each allocate call.
        self.deadline: float | None = None
        self.share_id = share_id
        self.available_counters: dict[PoolID, dict[str, dict[str, Decimal]]] = {}
        self.num_allocate_one = 0
        # A selector's verdict depends only on the device: kept across nodes, and across
        # pods when the caller passes one cache to every allocator.
        self._match_cache: MatchCache = match_cache if match_cache is not None else {}
        # Allocations are remembered across allocators only in an index the caller keeps
        # (across cycles); within one allocator every node is asked once anyway.
        self._memo = kept and not index.shared and not allocated.shared \
            and not allocated.capacity
        if self._memo and index.memo_classes is not classes:
            index.memo.clear()
            index.memo_classes = classes
        self._signatures: dict[int, tuple[Claim, str]] = {}

    def in_use(self, node: NodeRef, claims: Sequence[Claim]) -> Callable[[DeviceID], bool]:
        """Whether a device is taken for these claims on this node before the search
        starts (allocated, or being allocated by another pod): what `explain` reports as
        "in use by another claim"."""
        return _Run(self, node, list(claims))._in_use

    def allocate(self, node: NodeRef, claims: Sequence[Claim]) -> list[dict[str, Any]] | None:
        """The allocation results, one per claim (status.allocation's JSON), or None when
        the claims do not fit on the node. AllocatorError when the input is broken,
        NodeAllocationError when only this node's pools are.

        With a caller's SliceIndex (the plugin's, kept while slices and classes do not
        change) the outcome is remembered per node and claims' signature (their spec, not
        their name) together with which of the node's devices were allocated: the search
        is a function of those (and of the slices, classes and features the index is
        for), so an equal situation gets the remembered outcome, the same devices, without
        searching again. Between two pods only the last pod's node changes. Not used when
        consumable capacity is in play (shared allocations, share IDs) or node-independent
        slices exist (the node's labels would matter); errors are never remembered. The
        results are shared between calls: callers must not modify them."""
        if not self._memo:
            return _Run(self, node, list(claims)).run()
        key: tuple[str, tuple[str, ...]]
        if len(claims) == 1:
            key = (node.name, (self._signature(claims[0]),))
        else:
            key = (node.name, tuple(self._signature(c) for c in claims))
        versions = self.allocated.pool_versions
        used: Any
        if versions is not None:
            used = tuple([versions.get(p, 0) for p in self.index.pool_ids(node)])
        else:
            used = self.allocated.devices.intersection(self.index.device_ids(node))
        memo = self.index.memo
        hit = memo.get(key)
        if hit is not None and hit[0] == used:
            return hit[1]
        results = _Run(self, node, list(claims)).run()
        if results is None or not any("shareID" in r for alloc in results
                                       for r in alloc["devices"]["results"]):
            if len(memo) > 200_000:
                memo.clear()
            memo[key] = (used, results)
        return results

    def _signature(self, claim: Claim) -> str:
        """What of a claim the search reads: its requests, constraints and config."""
        hit = self._signatures.get(id(claim))
        if hit is not None and hit[0] is claim:
            return hit[1]
        sig = repr((claim.requests, claim.constraints, claim.config))
        self._signatures[id(claim)] = (claim, sig)
        return sig


class _Run:
    """One Allocate call (upstream's `allocator`)."""

    def __init__(self, a: Allocator, node: NodeRef, claims: list[Claim]) -> None:
        self.a = a
        self.f = a.features
        self.node = node
        self.claims = claims
        self.pools: list[Pool] = []
        self.request_data: dict[tuple[int, int, int], _RequestData] = {}
        self.constraints: list[list[_ConstraintState]] = []
        self.consumed_counters: dict[PoolID, dict[str, dict[str, Decimal]]] = {}
        self.allocating: dict[DeviceID, set[int]] = {}
        self.allocating_capacity: dict[DeviceID, dict[str, Quantity]] = {}
        self.result: list[list[_Result]] = [[] for _ in claims]
        self.matches: dict[tuple[DeviceID, int, int, int], bool] = {}

    # -- setup --------------------------------------------------------------------------

    def run(self) -> list[dict[str, Any]] | None:
        self.pools = self.a.index.pools(self.node)
        for ci, claim in enumerate(self.claims):
            for ri, req in enumerate(claim.requests):
                if req.first_available:
                    if not self.f.prioritized_list:
                        raise AllocatorError(f"claim {claim.key}, request {req.name}: has "
                                             "subrequests, but the DRAPrioritizedList "
                                             "feature is disabled")
                    for si, sub in enumerate(req.first_available):
                        self._check_capacity_feature(claim, sub)
                        self.request_data[(ci, ri, si)] = self._validate(
                            claim, ci, ri, si, sub, req.name)
                elif req.exactly is not None:
                    self._check_capacity_feature(claim, req.exactly)
                    self.request_data[(ci, ri, 0)] = self._validate(
                        claim, ci, ri, 0, req.exactly, None)
                else:
                    raise AllocatorError(f"claim {claim.key}, request {req.name}: missing "
                                         "device class name (unsupported request type?)")
            # The claim-size pre-check of upstream.
            min_total = 0
            for ri, req in enumerate(claim.requests):
                if req.first_available:
                    n = min(self.request_data[(ci, ri, si)].num_devices
                            for si in range(len(req.first_available)))
                else:
                    n = self.request_data[(ci, ri, 0)].num_devices
                if n > ALLOCATION_RESULTS_MAX_SIZE - min_total:
                    raise AllocatorError(
                        f"claim {claim.key}, request {req.name}: adding {n} devices exceeds "
                        f"the claim limit of {ALLOCATION_RESULTS_MAX_SIZE}, with {min_total} "
                        "already accounted for")
                min_total += n
            states = []
            for i, c in enumerate(claim.constraints):
                if c.match_attribute is None and c.distinct_attribute is None:
                    raise AllocatorError(f"claim {claim.key}, constraint #{i}: empty constraint "
                                         "(unsupported constraint type?)")
                states.append(_ConstraintState(c))
            self.constraints.append(states)
        try:
            done = self._allocate_one(0, 0, 0, 0, False, (0, 0, 0))
        except _Stop:
            return None
        except _MaxSizeExceeded:
            done = False
        if not done:
            if any(p.invalid for p in self.pools):
                raise NodeAllocationError("invalid resource pools were encountered")
            return None
        return [self._result(ci, claim) for ci, claim in enumerate(self.claims)]

    def _check_capacity_feature(self, claim: Claim, r: Request) -> None:
        if not self.f.consumable_capacity and r.capacity_requests is not None:
            raise AllocatorError(f"claim {claim.key}, request {r.name}: has capacity requests, "
                                 "but the DRAConsumableCapacity feature is disabled")

    def _validate(self, claim: Claim, ci: int, ri: int, si: int, r: Request,
                  parent: str | None) -> _RequestData:
        if r.has_derived_attributes:
            raise AllocatorError(f"claim {claim.key}, request {r.name}: cannot handle request "
                                 "with derived attributes, the feature is disabled")
        for i, sel in enumerate(r.selectors):
            if sel is None:
                raise AllocatorError(f"claim {claim.key}, request {r.name}, selector #{i}: CEL "
                                     "expression empty (unsupported selector type?)")
        if not self.f.admin_access and r.admin_access is not None:
            raise AllocatorError(f"claim {claim.key}, request {r.name}: admin access is "
                                 "requested, but the feature is disabled")
        if not r.class_name:
            raise AllocatorError(f"claim {claim.key}, request {r.name}: missing device class "
                                 "name (unsupported request type?)")
        klass = self.a.classes.get(r.class_name)
        if klass is None:
            raise AllocatorError(f"claim {claim.key}, request {r.name}: could not retrieve "
                                 f"device class {r.class_name}: not found")
        data = _RequestData(r, parent, klass)
        if r.mode == EXACT_COUNT:
            data.num_devices = r.count
        elif r.mode == ALL:
            key = (ci, ri, si)
            for pool in self.pools:
                if pool.incomplete:
                    raise AllocatorError(
                        f"claim {claim.key}, request {r.name}: asks for all devices, but "
                        f"resource pool {'/'.join(pool.id)} is currently being updated")
                if pool.invalid:
                    raise AllocatorError(
                        f"claim {claim.key}, request {r.name}: asks for all devices, but "
                        f"resource pool {'/'.join(pool.id)} is currently invalid")
                for s in pool.slices:
                    for di, dev in enumerate(s.devices):
                        if not self._selectable(key, data, s, di):
                            continue
                        if self.f.consumable_capacity and not request_over_capacity(
                                {}, r, dev.capacity, {}, self.f.fractional_capacity_range):
                            continue
                        data.all_devices.append(
                            _Candidate((s.driver, s.pool, dev.name), dev, s, pool))
            data.num_devices = len(data.all_devices)
        else:
            raise AllocatorError(f"claim {claim.key}, request {r.name}: unsupported count mode "
                                 f"{r.mode}")
        return data

    # -- selection ----------------------------------------------------------------------

    def _selectable(self, key: tuple[int, int, int], data: _RequestData, s: Slice,
                    di: int) -> bool:
        dev = s.devices[di]
        if not self.f.device_binding_and_status and dev.binding_conditions:
            return False
        did = (s.driver, s.pool, dev.name)
        mk = (did, key[0], key[1], key[2])
        hit = self.matches.get(mk)
        if hit is not None:
            return hit
        ok = True
        if data.klass is not None:
            ok = self._selectors_match(data.klass.selectors, s, di, f"class {data.klass.name}")
        if ok:
            ok = self._selectors_match(data.request.selectors, s, di,
                                       f"claim {self.claims[key[0]].key}")
        if ok and s.per_device_node_selection:
            ok = node_matches(self.node, dev.node_name, dev.all_nodes, dev.node_selector)
        self.matches[mk] = ok
        return ok

    def _selectors_match(self, selectors: Sequence[str | None], s: Slice, di: int,
                         owner: str) -> bool:
        dev = s.devices[di]
        for i, source in enumerate(selectors):
            if source is None:
                continue
            ck = (source, id(s), di)
            cached = self.a._match_cache.get(ck)
            if cached is not None and cached[0] is s:
                if not cached[1]:
                    return False
                continue
            try:
                sel = device_cel.compile_selector(source)
            except CELError as err:
                raise AllocatorError(f"{owner}: selector #{i}: CEL compile error: {err}") from err
            try:
                ok = sel.matches(device_cel.DeviceInput(
                    driver=s.driver, attributes=dev.attributes, capacity=dev.raw_capacity,
                    allow_multiple_allocations=bool(dev.allow_multiple_allocations)))
            except CELError as err:
                raise AllocatorError(
                    f"{owner}: selector #{i} on device {s.driver}/{s.pool}/{dev.name}: CEL "
                    f"runtime error: {err}") from err
            if len(self.a._match_cache) > 500_000:
                self.a._match_cache.clear()
            # Keyed by the slice's identity, which the entry keeps alive (and checks).
            self.a._match_cache[ck] = (s, ok)
            if not ok:
                return False
        return True

    # -- in use -------------------------------------------------------------------------

    def _in_use(self, d: DeviceID) -> bool:
        return d in self.a.allocated.devices or bool(self.allocating.get(d))

    def _allocating_for_claim(self, d: DeviceID, ci: int) -> bool:
        return ci in self.allocating.get(d, ())

    def _capacity_in_use(self, d: DeviceID) -> bool:
        if d in self.a.allocated.capacity:
            return True
        if any(s[0] == d for s in self.a.allocated.shared):
            return True
        return d in self.allocating_capacity

    def _over_capacity(self, r: Request, c: _Candidate) -> bool:
        current = self.a.allocated.capacity.get(c.id, {})
        return not request_over_capacity(current, r, c.device.capacity,
                                         self.allocating_capacity.get(c.id, {}),
                                         self.f.fractional_capacity_range)

    # -- counters -----------------------------------------------------------------------

    def _available_counters(self, pool: Pool) -> dict[str, dict[str, Decimal]]:
        cached = self.a.available_counters.get(pool.id)
        if cached is not None:
            return cached
        avail = {name: {n: q.value for n, q in counters.items()}
                 for name, counters in pool.counter_sets.items()}
        for group in (pool.slices, pool.slices_not_targeting):
            for s in group:
                for d in s.devices:
                    if not self.a.allocated.is_allocated((s.driver, s.pool, d.name)):
                        continue
                    for cc in d.consumes_counters:
                        cs = avail.get(cc.counter_set)
                        if cs is None:
                            continue
                        for n, q in cc.counters.items():
                            if n in cs:
                                cs[n] -= q.value
        self.a.available_counters[pool.id] = avail
        return avail

    def _check_counters(self, c: _Candidate) -> bool:
        avail = self._available_counters(c.pool)
        consumed = self.consumed_counters.setdefault(c.pool.id, {})
        for cc in c.device.consumes_counters:
            cs = consumed.setdefault(cc.counter_set, {})
            for n, q in cc.counters.items():
                cs[n] = cs.get(n, Decimal(0)) + q.value
        for set_name, counters in avail.items():
            used = consumed.get(set_name, {})
            for n, v in counters.items():
                if v < used.get(n, Decimal(0)):
                    self._release_counters(c)
                    return False
        return True

    def _release_counters(self, c: _Candidate) -> None:
        consumed = self.consumed_counters[c.pool.id]
        for cc in c.device.consumes_counters:
            cs = consumed[cc.counter_set]
            for n, q in cc.counters.items():
                cs[n] = cs.get(n, Decimal(0)) - q.value

    # -- one device -----------------------------------------------------------------------

    def _allocate_device(self, ci: int, key: tuple[int, int, int], c: _Candidate,
                         must: bool) -> Callable[[], None] | None:
        """allocateDevice: None when the device cannot be used, else the undo."""
        data = self.request_data[key]
        r = data.request
        admin = bool(r.admin_access)
        multi = self.f.consumable_capacity and bool(c.device.allow_multiple_allocations)
        if not multi and admin and self._allocating_for_claim(c.id, ci):
            return None
        if not admin and self._in_use(c.id):
            return None
        if not self.f.partitionable_devices and c.device.consumes_counters:
            return None
        skip_counters = multi and self._capacity_in_use(c.id)
        counters_reserved = False
        if not skip_counters and c.device.consumes_counters:
            if not self._check_counters(c):
                return None
            counters_reserved = True
        base = data.parent if data.parent else r.name
        sub = r.name if data.parent else ""
        constraints = self.constraints[ci]
        added = 0
        marked = False
        cap_inserted = False
        cap_existed = False
        consumed_cap: dict[str, Quantity] = {}
        previous = len(self.result[ci])
        result_added = False

        def rollback() -> None:
            if result_added:
                del self.result[ci][previous:]
            if cap_inserted:
                entry = self.allocating_capacity.get(c.id)
                if entry is not None:
                    for n, q in consumed_cap.items():
                        if n in entry:
                            entry[n] = entry[n].sub(q)
                    if all(q.value == 0 for q in entry.values()):
                        del self.allocating_capacity[c.id]
                if cap_existed and c.id not in self.allocating_capacity:
                    self.allocating_capacity[c.id] = {}
            if marked:
                self.allocating[c.id].discard(ci)
            for k in range(added - 1, -1, -1):
                constraints[k].remove(base, sub)
            if counters_reserved:
                self._release_counters(c)

        if self.f.device_taints and taint_prevents(c.device, r):
            rollback()
            return None
        for con in constraints:
            if not con.add(base, sub, c.device, c.slice.driver):
                rollback()
                if must:
                    raise AllocatorError(
                        f"claim {self.claims[ci].key}, request {r.name}: cannot add device "
                        f"{format_device_id(c.id)} because a claim constraint would not be "
                        "satisfied")
                return None
            added += 1
        if not multi:
            self.allocating.setdefault(c.id, set()).add(ci)
            marked = True
        share_id: str | None = None
        if self.f.consumable_capacity:
            if self._over_capacity(r, c):
                rollback()
                return None
            if multi:
                consumed_cap = consumed_from_request(r, c.device.capacity,
                                                     self.f.fractional_capacity_range)
                share_id = self.a.share_id()
                cap_existed = c.id in self.allocating_capacity
                entry = self.allocating_capacity.setdefault(c.id, {})
                for n, q in consumed_cap.items():
                    entry[n] = entry[n].add(q) if n in entry else q
                cap_inserted = True
        self.result[ci].append(_Result(
            request=r.name, parent=data.parent or "", id=c.id, device=c.device, slice=c.slice,
            share_id=share_id, consumed=consumed_cap or None,
            admin_access=True if admin else None))
        result_added = True
        return rollback

    # -- the recursion ---------------------------------------------------------------------

    def _allocate_one(self, ci: int, ri: int, si: int, di: int, in_sub: bool,
                      start: tuple[int, int, int]) -> bool:
        a = self.a
        a.num_allocate_one += 1
        if a.deadline is not None and time.monotonic() > a.deadline:
            raise AllocatorError("filter operation aborted: the allocation took too long")
        if ci >= len(self.claims):
            return True
        claim = self.claims[ci]
        if ri >= len(claim.requests):
            try:
                return self._allocate_one(ci + 1, 0, 0, 0, False, (0, 0, 0))
            except _MaxSizeExceeded:
                return False
        key = (ci, ri, si)
        data = self.request_data[key]
        if not in_sub and data.parent is not None:
            all_exceeded = True
            sub = 0
            while True:
                if (ci, ri, sub) not in self.request_data:
                    if all_exceeded:
                        raise _MaxSizeExceeded()
                    return False
                try:
                    ok = self._allocate_one(ci, ri, sub, di, True, (0, 0, 0))
                except _MaxSizeExceeded:
                    sub += 1
                    continue
                all_exceeded = False
                if ok:
                    self.request_data[(ci, ri, 0)].selected_sub = sub
                    return True
                sub += 1
        r = data.request
        do_all = r.mode == ALL
        if do_all and not data.all_devices:
            return False
        if di >= data.num_devices:
            return self._allocate_one(ci, ri + 1, 0, 0, False, (0, 0, 0))
        if data.num_devices - di > ALLOCATION_RESULTS_MAX_SIZE - len(self.result[ci]):
            raise _MaxSizeExceeded()
        if do_all:
            undo = self._allocate_device(ci, key, data.all_devices[di], True)
            if undo is None:
                return False
            try:
                done = self._allocate_one(ci, ri, si, di + 1, in_sub, (0, 0, 0))
            except BaseException:
                undo()
                raise
            if not done:
                undo()
            return done
        admin = bool(r.admin_access)
        for pi in range(start[0], len(self.pools)):
            pool = self.pools[pi]
            if pool.incomplete or pool.invalid:
                continue
            s0 = start[1] if pi == start[0] else 0
            for sli in range(s0, len(pool.slices)):
                s = pool.slices[sli]
                d0 = start[2] if pi == start[0] and sli == start[1] else 0
                for dvi in range(d0, len(s.devices)):
                    dev = s.devices[dvi]
                    did = (pool.id[0], pool.id[1], dev.name)
                    if admin and self._allocating_for_claim(did, ci):
                        continue
                    if not admin and self._in_use(did):
                        continue
                    if not self._selectable(key, data, s, dvi):
                        continue
                    cand = _Candidate(did, dev, s, pool)
                    if self.f.consumable_capacity:
                        if self._over_capacity(r, cand):
                            continue
                    undo = self._allocate_device(ci, key, cand, False)
                    if undo is None:
                        continue
                    try:
                        done = self._allocate_one(ci, ri, si, di + 1, in_sub, (pi, sli, dvi + 1))
                    except BaseException:
                        undo()
                        raise
                    if done:
                        return True
                    undo()
        return False

    # -- the result --------------------------------------------------------------------------

    def _result(self, ci: int, claim: Claim) -> dict[str, Any]:
        results: list[dict[str, Any]] = []
        for res in self.result[ci]:
            r = self._lookup_request(claim, res)
            out: dict[str, Any] = {
                "request": f"{res.parent}/{res.request}" if res.parent else res.request,
                "driver": res.id[0], "pool": res.id[1], "device": res.id[2],
            }
            if res.admin_access is not None:
                out["adminAccess"] = res.admin_access
            if r is not None and r.raw_tolerations:
                out["tolerations"] = r.raw_tolerations
            if self.f.device_binding_and_status:
                if res.device.binding_conditions:
                    out["bindingConditions"] = list(res.device.binding_conditions)
                if res.device.binding_failure_conditions:
                    out["bindingFailureConditions"] = list(res.device.binding_failure_conditions)
            if res.share_id is not None:
                out["shareID"] = res.share_id
            if res.consumed:
                out["consumedCapacity"] = {n: str(q) for n, q in res.consumed.items()}
            results.append(out)
        devices: dict[str, Any] = {"results": results}
        config = self._config(ci, claim)
        if config:
            devices["config"] = config
        alloc: dict[str, Any] = {"devices": devices}
        ns = self._node_selector(self.result[ci])
        if ns is not None:
            alloc["nodeSelector"] = ns
        return alloc

    def _lookup_request(self, claim: Claim, res: _Result) -> Request | None:
        name = res.parent or res.request
        for req in claim.requests:
            if req.name != name:
                continue
            if not res.parent:
                return req.exactly
            for sub in req.first_available:
                if sub.name == res.request:
                    return sub
        return None

    def _selected(self, ci: int, ri: int) -> _RequestData:
        data = self.request_data[(ci, ri, 0)]
        if data.parent is not None:
            return self.request_data[(ci, ri, data.selected_sub)]
        return data

    def _config(self, ci: int, claim: Claim) -> list[dict[str, Any]]:
        config: list[dict[str, Any]] = []
        by_class: dict[str, tuple[int, int]] = {}
        for ri in range(len(claim.requests)):
            data = self._selected(ci, ri)
            k = data.klass
            if k is None:
                continue
            if k.name in by_class:
                start, end = by_class[k.name]
                for i in range(start, end):
                    config[i]["requests"].append(data.name())
                continue
            first = len(config)
            for c in k.config:
                entry = {"source": "FromClass", "requests": [data.name()]}
                entry.update({key: v for key, v in c.items() if key != "requests"})
                config.append(entry)
            by_class[k.name] = (first, len(config))
        selected_names: list[tuple[str, str | None]] = []
        for ri, req in enumerate(claim.requests):
            data = self._selected(ci, ri)
            selected_names.append((req.name, data.name() if data.parent else None))
        for c in claim.config:
            reqs = list(c.get("requests") or [])
            body = {key: v for key, v in c.items() if key != "requests"}
            if not reqs:
                config.append({"source": "FromClaim", **body})
                continue
            for name, subname in selected_names:
                if name in reqs or (subname is not None and subname in reqs):
                    config.append({"source": "FromClaim", "requests": reqs, **body})
                    break
        for entry in config:
            listed = entry.get("requests") or []
            if not listed:
                continue
            if all(name in listed or (subname is not None and subname in listed)
                   for name, subname in selected_names):
                del entry["requests"]
        return config

    def _node_selector(self, results: list[_Result]) -> dict[str, Any] | None:
        exprs: list[Json] = []
        fields: list[Json] = []
        for res in results:
            s = res.slice
            if s.per_device_node_selection:
                node_name, selector = res.device.node_name, res.device.node_selector
            else:
                node_name, selector = s.node_name, s.node_selector
            if node_name or res.device.binds_to_node:
                return {"nodeSelectorTerms": [{"matchFields": [{
                    "key": "metadata.name", "operator": "In", "values": [self.node.name]}]}]}
            if selector is not None:
                terms = selector.get("nodeSelectorTerms") or []
                if len(terms) == 1:
                    _add_requirements(terms[0].get("matchFields") or [], fields)
                    _add_requirements(terms[0].get("matchExpressions") or [], exprs)
                elif len(terms) > 1:
                    raise AllocatorError(f"create NodeSelector for claim: unsupported "
                                         f"ResourceSlice.NodeSelector with {len(terms)} terms")
        if not exprs and not fields:
            return None
        term: dict[str, Any] = {}
        if exprs:
            term["matchExpressions"] = exprs
        if fields:
            term["matchFields"] = fields
        return {"nodeSelectorTerms": [term]}


def _add_requirements(src: Sequence[Json], dst: list[Json]) -> None:
    for r in src:
        if not any(e.get("key") == r.get("key") and e.get("operator") == r.get("operator")
                   and set(e.get("values") or ()) == set(r.get("values") or ()) for e in dst):
            dst.append(r)


__all__ = ["Allocator", "AllocatedState", "AllocatorError", "Features", "NodeAllocationError",
           "NodeRef", "SliceIndex", "gather_pools", "node_matches", "request_over_capacity",
           "taint_prevents", "tolerates",
           "ALLOCATION_RESULTS_MAX_SIZE", "_DEFAULT_PARENT"]
