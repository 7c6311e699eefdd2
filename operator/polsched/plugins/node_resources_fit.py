"""NodeResourcesFit: the pod's requests must fit the node's free allocatable (filter); nodes
score by how allocated they would be (scorer: LeastAllocated, MostAllocated or
RequestedToCapacityRatio).

Copies kube-scheduler's noderesources plugin (pkg/scheduler/framework/plugins/noderesources/
fit.go fitsRequest, resource_allocation.go, least_allocated.go, most_allocated.go,
requested_to_capacity_ratio.go, helper/shape_score.go) and the validation and defaults of
NodeResourcesFitArgs (pkg/scheduler/apis/config/validation/validation_pluginargs.go,
apis/config/v1/defaults.go). Also the resource vocabulary NodeResourcesBalancedAllocation
shares with it (same upstream package): ResourceSpec parsing and the node's
requested/allocatable vectors.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from polsched.framework import device_classes as dc
from polsched.framework import events as ev
from polsched.framework import listers as ls
from polsched.framework import names, signers
from polsched.framework import resources as res
from polsched.framework.cycle_state import CycleState
from polsched.framework.interfaces import (
    MAX_NODE_SCORE,
    FilterPlugin,
    Handle,
    NodeSetFilter,
    PlacementScorePlugin,
    PodGroupAssignments,
    PodGroupInfo,
    PreFilterPlugin,
    PreScorePlugin,
    ScorePlugin,
    SignFragment,
    SignPlugin,
)
from polsched.framework.registry import ArgsError, PluginSpec
from polsched.framework.selectors import NodeSet
from polsched.framework.status import SUCCESS, Code, Status, shared
from polsched.framework.types import NodeInfo, PodInfo, Snapshot
from polsched.plugins.node_memo import NodeMemo, SnapshotSync, SyncedValues

NAME = "NodeResourcesFit"

LEAST_ALLOCATED = "LeastAllocated"
MOST_ALLOCATED = "MostAllocated"
REQUESTED_TO_CAPACITY_RATIO = "RequestedToCapacityRatio"
SCORING_STRATEGY_TYPES = (LEAST_ALLOCATED, MOST_ALLOCATED, REQUESTED_TO_CAPACITY_RATIO)

# apis/config MaxCustomPriorityScore: shape scores are 0..10, scaled to 0..MAX_NODE_SCORE.
MAX_CUSTOM_PRIORITY_SCORE = 10
MAX_UTILIZATION = 100

ERR_REASON_TOO_MANY_PODS = "Too many pods"

DEFAULT_RESOURCES: tuple[tuple[str, int], ...] = ((res.CPU, 1), (res.MEMORY, 1))
DEFAULT_ARGS: Mapping[str, Any] = {
    "scoringStrategy": {
        "type": LEAST_ALLOCATED,
        "resources": [{"name": n, "weight": w} for n, w in DEFAULT_RESOURCES],
    },
}

_PRE_FILTER_KEY = "PreFilter" + NAME
_PRE_SCORE_KEY = "PreScore" + NAME
_SCORES_KEY = "PreScoreTable" + NAME
_node_name = attrgetter("name")

_NATIVE_NAMESPACE = "kubernetes.io/"
_HUGEPAGES_PREFIX = "hugepages-"
_ATTACHABLE_VOLUMES_PREFIX = "attachable-volumes-"

# v1helper.IsExtendedResourceName
is_extended_resource_name = names.is_extended_resource_name


def is_scalar_resource_name(name: str) -> bool:
    """scheduler/util IsScalarResourceName: the resources kept besides cpu, memory,
    ephemeral-storage and pods (extended, hugepages, *kubernetes.io/*, attachable volumes)."""
    return (is_extended_resource_name(name) or name.startswith(_HUGEPAGES_PREFIX)
            or _NATIVE_NAMESPACE in name or name.startswith(_ATTACHABLE_VOLUMES_PREFIX))


def div_trunc(a: int, b: int) -> int:
    """Go's integer division (truncates toward zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


# -- args ----------------------------------------------------------------------------------


def _int(value: Any, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArgsError(path, f"must be an integer, got {value!r}")
    return value


def _check_fields(raw: Mapping[str, Any], path: str, allowed: Sequence[str]) -> None:
    for key in raw:
        if key not in allowed:
            where = f"{path}.{key}" if path else str(key)
            raise ArgsError(where, f"unknown field; allowed: {', '.join(allowed)}")


def parse_resources(raw: Any, path: str) -> tuple[tuple[str, int], ...]:
    """[]ResourceSpec {name, weight}: an empty list means cpu:1, memory:1 and a missing or
    zero weight means 1 (v1 defaults). Returns (name, weight) pairs; weights unchecked."""
    if raw is None:
        return DEFAULT_RESOURCES
    if not isinstance(raw, list):
        raise ArgsError(path, "must be a list of {name, weight}")
    out: list[tuple[str, int]] = []
    for i, item in enumerate(raw):
        ipath = f"{path}[{i}]"
        if not isinstance(item, Mapping):
            raise ArgsError(ipath, "must be an object with name and weight")
        _check_fields(item, ipath, ("name", "weight"))
        name = item.get("name")
        if not isinstance(name, str) or not name:
            raise ArgsError(f"{ipath}.name", "must be a non-empty resource name")
        weight = _int(item.get("weight") or 0, f"{ipath}.weight") or 1
        out.append((name, weight))
    return tuple(out) or DEFAULT_RESOURCES


def _parse_shape(raw: Any, path: str) -> tuple[tuple[int, int], ...]:
    """validateFunctionShape: at least one point, utilization strictly increasing in
    0..100, score in 0..10."""
    if raw is None or raw == []:
        raise ArgsError(path, "at least one point must be specified")
    if not isinstance(raw, list):
        raise ArgsError(path, "must be a list of {utilization, score}")
    points: list[tuple[int, int]] = []
    for i, p in enumerate(raw):
        ppath = f"{path}[{i}]"
        if not isinstance(p, Mapping):
            raise ArgsError(ppath, "must be an object with utilization and score")
        _check_fields(p, ppath, ("utilization", "score"))
        points.append((_int(p.get("utilization") or 0, f"{ppath}.utilization"),
                       _int(p.get("score") or 0, f"{ppath}.score")))
    for i in range(1, len(points)):
        if points[i - 1][0] >= points[i][0]:
            raise ArgsError(f"{path}[{i}].utilization",
                            f"invalid value {points[i][0]}: values must be sorted in "
                            "increasing order")
    for i, (utilization, score) in enumerate(points):
        if not 0 <= utilization <= MAX_UTILIZATION:
            raise ArgsError(f"{path}[{i}].utilization",
                            f"invalid value {utilization}: not in valid range [0, 100]")
        if not 0 <= score <= MAX_CUSTOM_PRIORITY_SCORE:
            raise ArgsError(f"{path}[{i}].score",
                            f"invalid value {score}: not in valid range [0, 10]")
    return tuple(points)


@dataclass(frozen=True)
class ScoringStrategy:
    type: str
    resources: tuple[tuple[str, int], ...]
    # RequestedToCapacityRatio only: (utilization 0..100, score 0..10) points.
    shape: tuple[tuple[int, int], ...] = ()


def parse_scoring_strategy(raw: Any, path: str = "scoringStrategy") -> ScoringStrategy:
    if raw is None:
        return ScoringStrategy(LEAST_ALLOCATED, DEFAULT_RESOURCES)
    if not isinstance(raw, Mapping):
        raise ArgsError(path, "must be an object with type, resources and "
                              "requestedToCapacityRatio")
    _check_fields(raw, path, ("type", "resources", "requestedToCapacityRatio"))
    kind = raw.get("type")
    if kind not in SCORING_STRATEGY_TYPES:
        raise ArgsError(f"{path}.type", f"unsupported value {kind!r}: supported values: "
                                        + ", ".join(f'"{t}"' for t in SCORING_STRATEGY_TYPES))
    resources = parse_resources(raw.get("resources"), f"{path}.resources")
    for i, (name, weight) in enumerate(resources):
        if not 0 < weight <= 100:
            raise ArgsError(f"{path}.resources[{i}].weight",
                            f"resource weight of {name} not in valid range (0, 100]")
    ratio = raw.get("requestedToCapacityRatio")
    rpath = f"{path}.requestedToCapacityRatio"
    if kind == REQUESTED_TO_CAPACITY_RATIO:
        if ratio is None:
            raise ArgsError(rpath, "must be specified when type is RequestedToCapacityRatio")
        if not isinstance(ratio, Mapping):
            raise ArgsError(rpath, "must be an object with shape")
        _check_fields(ratio, rpath, ("shape",))
        return ScoringStrategy(kind, resources, _parse_shape(ratio.get("shape"), f"{rpath}.shape"))
    if ratio is not None:
        raise ArgsError(rpath, "must be nil when type is not RequestedToCapacityRatio")
    return ScoringStrategy(kind, resources)


def _parse_names(raw: Any, path: str, group: bool) -> frozenset[str]:
    if raw is None:
        return frozenset()
    if not isinstance(raw, list):
        raise ArgsError(path, "must be a list of resource names")
    for i, name in enumerate(raw):
        if not isinstance(name, str):
            raise ArgsError(f"{path}[{i}]", "must be a string")
        if group and "/" in name:
            raise ArgsError(f"{path}[{i}]", f"invalid value {name!r}: resource group name "
                                            "can't contain '/'")
        errs = names.qualified_name(name)
        if errs:
            raise ArgsError(f"{path}[{i}]", f"invalid value {name!r}: {'; '.join(errs)}")
    return frozenset(raw)


# -- node vectors shared with NodeResourcesBalancedAllocation -------------------------------

_CPU, _MEMORY, _EPHEMERAL, _SCALAR, _NONE = range(5)


def _kind(name: str) -> int:
    if name == res.CPU:
        return _CPU
    if name == res.MEMORY:
        return _MEMORY
    if name == res.EPHEMERAL_STORAGE:
        return _EPHEMERAL
    return _SCALAR if is_scalar_resource_name(name) else _NONE


# (node, resource) -> (devices the class serving it selects there, those in use)
DeviceTotalsFn = Callable[[NodeInfo, str], tuple[int, int]]
# CycleState key of a scorer's DeviceTotalsFn (written in PreScore when one of its
# resources is served by devices).
_DEVICE_TOTALS_KEY = "PreScoreNodeResourcesFit/DeviceTotals"


def device_totals(listers: ls.Listers | None, names: tuple[str, ...]
                  ) -> DeviceTotalsFn | None:
    """getDRAPreScoredParams: the cycle's device totals when a DeviceClass serves one of
    `names` (the DRA package is imported only then)."""
    if listers is None or not dc.scored_by_devices(listers, names):
        return None
    from polsched.plugins.dynamic_resources.extended_score import DeviceTotals
    return DeviceTotals(listers).totals


class ResourceVectors:
    """resourceAllocationScorer's calculateNodeAllocatableRequest for a fixed resource list:
    per resource, the node's allocatable, what is allocated on it, and that plus the pod.

    With use_requested False (NodeResourcesFit) cpu and memory count the non-zero requests
    (a container without a request counts 100m / 200Mi); with True (BalancedAllocation) the
    plain requests. A scalar resource the pod does not request, a resource the node lacks,
    or an unknown non-scalar name is left out (allocatable 0)."""

    __slots__ = ("names", "kinds", "use_requested")

    def __init__(self, names: Sequence[str], use_requested: bool) -> None:
        self.names = tuple(names)
        self.kinds = tuple(_kind(n) for n in names)
        self.use_requested = use_requested

    def pod_requests(self, pod: PodInfo) -> tuple[int, ...]:
        """calculatePodResourceRequestList."""
        requests = pod.requests
        non_zero_cpu, non_zero_memory = pod.non_zero_cpu, pod.non_zero_memory
        if not self.use_requested and ((pod.spec.get("resources") or {}).get("requests")
                                       or pod.requests is not pod.spec_requests):
            # An upstream quirk mirrored on purpose (docs/differences.md): v1.37's NewFit
            # builds its scorer without enablePodLevelResources (nor
            # enableInPlacePodVerticalScaling), so NodeResourcesFit's score counts the
            # containers' spec requests (100m / 200Mi where missing) plus overhead and
            # ignores spec.resources and the status; its filter, and BalancedAllocation,
            # use spec.resources.
            spec = pod.spec
            requests = res.pod_requests(spec, pod_level=False)
            non_zero = res.pod_requests(spec, non_zero=True, pod_level=False)
            non_zero_cpu = non_zero.get(res.CPU, 0)
            non_zero_memory = non_zero.get(res.MEMORY, 0)
        out = []
        for name, kind in zip(self.names, self.kinds, strict=True):
            if kind == _CPU and not self.use_requested:
                out.append(non_zero_cpu)
            elif kind == _MEMORY and not self.use_requested:
                out.append(non_zero_memory)
            else:
                out.append(requests.get(name, 0))
        return tuple(out)

    def node(self, node: NodeInfo, pod_requests: Sequence[int],
             devices: DeviceTotalsFn | None = None) -> tuple[list[int], list[int], list[int]]:
        """(requested incl. the pod, allocated, allocatable), one entry per resource.
        `devices`: for a scalar resource the node does not advertise, the (devices the
        DeviceClass serving it selects on the node, those in use), as upstream's
        calculateDRAExtendedResourceAllocatableRequest (DeviceTotals.totals)."""
        n = len(self.names)
        requested, allocated, allocatable = [0] * n, [0] * n, [0] * n
        alloc_map = node.allocatable
        req_map = node.requested
        for i in range(n):
            kind = self.kinds[i]
            pod_req = pod_requests[i]
            name = self.names[i]
            if kind == _CPU:
                cap = alloc_map.get(name, 0)
                used = req_map.get(name, 0) if self.use_requested else node.non_zero_cpu
            elif kind == _MEMORY:
                cap = alloc_map.get(name, 0)
                used = req_map.get(name, 0) if self.use_requested else node.non_zero_memory
            elif kind == _EPHEMERAL:
                cap = alloc_map.get(name, 0)
                used = req_map.get(name, 0)
            elif kind == _SCALAR:
                if pod_req == 0:
                    continue
                cap = alloc_map.get(name, 0)
                used = req_map.get(name, 0)
                if cap == 0 and devices is not None:
                    cap, used = devices(node, name)
            else:
                continue
            if cap == 0:
                continue
            allocatable[i] = cap
            allocated[i] = used
            requested[i] = used + pod_req
        return requested, allocated, allocatable


# -- scoring strategies -------------------------------------------------------------------

Scorer = Callable[[Sequence[int], Sequence[int]], int]


def _least_requested_score(requested: int, capacity: int) -> int:
    if capacity == 0 or requested > capacity:
        return 0
    return (capacity - requested) * MAX_NODE_SCORE // capacity


def _most_requested_score(requested: int, capacity: int) -> int:
    if capacity == 0:
        return 0
    return min(requested, capacity) * MAX_NODE_SCORE // capacity


def _weighted_mean(resource_score: Callable[[int, int], int],
                   weights: Sequence[int]) -> Scorer:
    """leastResourceScorer / mostResourceScorer."""
    def score(requested: Sequence[int], allocatable: Sequence[int]) -> int:
        node_score = weight_sum = 0
        for i, cap in enumerate(allocatable):
            if cap == 0:
                continue
            node_score += resource_score(requested[i], cap) * weights[i]
            weight_sum += weights[i]
        return node_score // weight_sum if weight_sum else 0
    return score


def broken_linear_function(shape: Sequence[tuple[int, int]]) -> Callable[[int], int]:
    """helper.BuildBrokenLinearFunction over (utilization, score) points, integer math as Go."""
    def f(p: int) -> int:
        for i, (utilization, score) in enumerate(shape):
            if p <= utilization:
                if i == 0:
                    return score
                u0, s0 = shape[i - 1]
                return s0 + div_trunc((score - s0) * (p - u0), utilization - u0)
        return shape[-1][1]
    return f


def _requested_to_capacity_ratio(shape: Sequence[tuple[int, int]],
                                 weights: Sequence[int]) -> Scorer:
    scale = MAX_NODE_SCORE // MAX_CUSTOM_PRIORITY_SCORE
    raw = broken_linear_function([(u, s * scale) for u, s in shape])

    def score(requested: Sequence[int], allocatable: Sequence[int]) -> int:
        node_score = weight_sum = 0
        for i, cap in enumerate(allocatable):
            if cap == 0:
                continue
            req = requested[i]
            r = raw(MAX_UTILIZATION) if req > cap else raw(req * MAX_UTILIZATION // cap)
            # Upstream leaves zero-scoring resources out of the mean.
            if r > 0:
                node_score += r * weights[i]
                weight_sum += weights[i]
        if weight_sum == 0:
            return 0
        # math.Round: half away from zero (scores are non-negative).
        return (2 * node_score + weight_sum) // (2 * weight_sum)
    return score


def build_scorer(strategy: ScoringStrategy) -> Scorer:
    weights = [w for _, w in strategy.resources]
    if strategy.type == LEAST_ALLOCATED:
        return _weighted_mean(_least_requested_score, weights)
    if strategy.type == MOST_ALLOCATED:
        return _weighted_mean(_most_requested_score, weights)
    return _requested_to_capacity_ratio(strategy.shape, weights)


# -- the plugin -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _PodRequest:
    """What Filter compares, per pod: cpu, memory, ephemeral-storage and the scalar
    resources not ignored, each with its "Insufficient <name>" reason."""

    cpu: int
    memory: int
    ephemeral: int
    scalars: tuple[tuple[str, int, str], ...]
    # The scalars a DeviceClass serves (DRAExtendedResource): on a node that does not
    # advertise them they are DynamicResources' to allocate (shouldDelegateResourceToDRA).
    dra: frozenset[str] = frozenset()

    @property
    def empty(self) -> bool:
        return not (self.cpu or self.memory or self.ephemeral or self.scalars)


class NodeResourcesFit(SignPlugin, PreFilterPlugin, FilterPlugin, NodeSetFilter, PreScorePlugin,
                       ScorePlugin, PlacementScorePlugin, ev.EnqueueExtensions):
    NAME = NAME

    def sign_pod(self, pod: PodInfo) -> Sequence[SignFragment] | None:
        """SignPod (OpportunisticBatching): what of the pod this plugin reads."""
        # Not signable when a requested extended resource is a DeviceClass's
        # (DRAExtendedResource: DynamicResources may allocate it per node).
        if self._pod_request(pod).dra:
            return None
        return [(signers.RESOURCES, signers.resources(pod))]

    def __init__(self, ignored_resources: frozenset[str], ignored_groups: frozenset[str],
                 strategy: ScoringStrategy, listers: ls.Listers | None = None) -> None:
        self.ignored_resources = ignored_resources
        self.listers = listers
        self.classes = dc.resolver_for(listers) if listers is not None else None
        self.ignored_groups = ignored_groups
        self.strategy = strategy
        self.vectors = ResourceVectors([n for n, _ in strategy.resources], use_requested=False)
        self._scorer = build_scorer(strategy)
        # ScorePlacement (TopologyAwareWorkloadScheduling): MostAllocated over the
        # strategy's resources, whatever the strategy's type (NewFit's placementScorer).
        self._placement_scorer = build_scorer(ScoringStrategy(MOST_ALLOCATED,
                                                              strategy.resources))
        # The default strategy gets an unrolled score_nodes (see _least_allocated_cpu_memory).
        self._cpu_memory_weights: tuple[int, int] | None = None
        if strategy.type == LEAST_ALLOCATED and self.vectors.kinds == (_CPU, _MEMORY):
            self._cpu_memory_weights = (strategy.resources[0][1], strategy.resources[1][1])
        # Filter passes and scores depend only on the pod's requests and the node's
        # allocatable, requested and pod count, which change only with its generation:
        # alike pods reuse them for every node but the ones that changed since.
        self._fits: NodeMemo[bool] = NodeMemo()
        self._scores: SyncedValues[int] = SyncedValues()
        # (cpu, memory, ephemeral) of a repeated request -> the names of the snapshot's
        # nodes it is not known to fit, kept current across cycles (filter_nodes).
        self._misfits: dict[tuple[int, int, int], tuple[SnapshotSync, set[str]]] = {}

    # -- filter ------------------------------------------------------------------------
    def _pod_request(self, pod: PodInfo) -> _PodRequest:
        # computePodResourceRequest: the spec's requests (a pod not yet scheduled is not
        # being resized).
        requests = pod.spec_requests
        scalars = []
        for name, qty in requests.items():
            if qty == 0 or not is_scalar_resource_name(name):
                continue
            # Only extended resources can be ignored (fitsRequest).
            if is_extended_resource_name(name) and (
                    name in self.ignored_resources
                    or (self.ignored_groups and name.split("/", 1)[0] in self.ignored_groups)):
                continue
            scalars.append((name, qty, f"Insufficient {name}"))
        dra: frozenset[str] = frozenset()
        if scalars and self.classes is not None and self.classes.any_class():
            dra = frozenset(n for n, _, _ in scalars if dc.is_dra_extended_resource_name(n)
                            and self.classes.get_device_class(n) is not None)
        r = requests
        return _PodRequest(r.get(res.CPU, 0), r.get(res.MEMORY, 0),
                           r.get(res.EPHEMERAL_STORAGE, 0), tuple(scalars), dra)

    def pre_filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> Status:
        req = self._pod_request(pod)
        state.write(_PRE_FILTER_KEY, (req, self._fits.table_if_repeated(req)))
        return SUCCESS

    def bind_filter(self, state: CycleState, pod: PodInfo
                    ) -> Callable[[NodeInfo], Status] | None:
        """Filter's fast path with the request unpacked once: for a request seen before, a
        hit in the fit memo; otherwise the fits test. Any other case is Filter itself."""
        pre: tuple[_PodRequest, dict[str, tuple[NodeInfo, int, bool]] | None] | None = \
            state.get(_PRE_FILTER_KEY)
        if pre is None:
            return None
        full = self.filter
        if pre[1] is not None:
            memo_get = pre[1].get

            def remembered(node: NodeInfo) -> Status:
                hit = memo_get(node.name)
                if hit is not None and hit[1] == node.generation and hit[0] is node:
                    return SUCCESS
                return full(state, pod, node)  # computes, and remembers a fit
            return remembered
        if pre[0].scalars:
            return None
        req = pre[0]
        cpu, memory, ephemeral = req.cpu, req.memory, req.ephemeral
        PODS, CPU, MEMORY, EPHEMERAL = (  # noqa: N806
            res.PODS, res.CPU, res.MEMORY, res.EPHEMERAL_STORAGE)

        def fits(node: NodeInfo) -> Status:
            alloc = node.allocatable
            used = node.requested
            if (len(node.pods) < alloc.get(PODS, 0)
                    and cpu <= alloc.get(CPU, 0) - used.get(CPU, 0)
                    and memory <= alloc.get(MEMORY, 0) - used.get(MEMORY, 0)
                    and (not ephemeral
                         or ephemeral <= alloc.get(EPHEMERAL, 0) - used.get(EPHEMERAL, 0))):
                return SUCCESS
            return full(state, pod, node)
        return fits

    def filter_nodes(self, state: CycleState, pod: PodInfo,
                     snapshot: Snapshot) -> NodeSet | None:
        """For a request seen before (its fit memo exists) and without scalar resources:
        every node but those it is not known to fit. That set is kept per request across
        cycles and revisits only the nodes changed since (NODE_CHANGES), so alike pods pay
        per cycle for the last pod's node, not a memo lookup per node. A node left out
        whose Filter passes (a zero request on an overcommitted node) still gets Filter
        from the pipeline, so the set never holds more nodes than Filter passes."""
        pre: tuple[_PodRequest, dict[str, tuple[NodeInfo, int, bool]] | None] | None = \
            state.get(_PRE_FILTER_KEY)
        if pre is None or pre[1] is None or pre[0].scalars:
            return None
        req = pre[0]
        cpu, memory, ephemeral = req.cpu, req.memory, req.ephemeral
        key = (cpu, memory, ephemeral)
        memo = self._misfits
        entry = memo.pop(key, None)
        if entry is None:
            entry = (SnapshotSync(), set())
            if len(memo) >= 8:
                del memo[next(iter(memo))]
        memo[key] = entry
        sync, misfits = entry
        PODS, CPU, MEMORY, EPHEMERAL = (  # noqa: N806
            res.PODS, res.CPU, res.MEMORY, res.EPHEMERAL_STORAGE)

        def fits(node: NodeInfo) -> bool:  # bind_filter's fast test
            alloc = node.allocatable
            used = node.requested
            return (len(node.pods) < alloc.get(PODS, 0)
                    and cpu <= alloc.get(CPU, 0) - used.get(CPU, 0)
                    and memory <= alloc.get(MEMORY, 0) - used.get(MEMORY, 0)
                    and (not ephemeral
                         or ephemeral <= alloc.get(EPHEMERAL, 0) - used.get(EPHEMERAL, 0)))
        changed = sync.changed(snapshot)
        if changed is None:
            misfits.clear()
            misfits.update(n.name for n in snapshot.nodes if not fits(n))
        else:
            get = snapshot.by_name.get
            for name in changed:
                node = get(name)
                if node is None or fits(node):
                    misfits.discard(name)
                else:
                    misfits.add(name)
        return NodeSet(set(misfits), complement=True)

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        pre: tuple[_PodRequest, dict[str, tuple[NodeInfo, int, bool]] | None] | None = \
            state.get(_PRE_FILTER_KEY)
        fits: dict[str, tuple[NodeInfo, int, bool]] | None
        if pre is None:
            req, fits = self._pod_request(pod), None
        else:
            req, fits = pre
            if fits is not None:
                hit = fits.get(node.name)
                if hit is not None and hit[1] == node.generation and hit[0] is node:
                    return SUCCESS
        alloc = node.allocatable
        used = node.requested
        # The common case, a pod that fits, without building a reasons list. A zero request
        # on an overcommitted node fails this test but fits: the full check below decides.
        if (len(node.pods) < alloc.get(res.PODS, 0) and not req.scalars
                and req.cpu <= alloc.get(res.CPU, 0) - used.get(res.CPU, 0)
                and req.memory <= alloc.get(res.MEMORY, 0) - used.get(res.MEMORY, 0)
                and req.ephemeral <= (alloc.get(res.EPHEMERAL_STORAGE, 0)
                                      - used.get(res.EPHEMERAL_STORAGE, 0))):
            if fits is not None:
                fits[node.name] = (node, node.generation, True)
            return SUCCESS
        reasons: list[str] = []
        if len(node.pods) + 1 > alloc.get(res.PODS, 0):
            reasons.append(ERR_REASON_TOO_MANY_PODS)
        if req.empty:
            return Status.unschedulable(*reasons) if reasons else SUCCESS
        # A request larger than the whole allocatable cannot be helped by preemption.
        unresolvable = False
        if req.cpu > 0:
            cap = alloc.get(res.CPU, 0)
            if req.cpu > cap - used.get(res.CPU, 0):
                reasons.append("Insufficient cpu")
                unresolvable = unresolvable or req.cpu > cap
        if req.memory > 0:
            cap = alloc.get(res.MEMORY, 0)
            if req.memory > cap - used.get(res.MEMORY, 0):
                reasons.append("Insufficient memory")
                unresolvable = unresolvable or req.memory > cap
        if req.ephemeral > 0:
            cap = alloc.get(res.EPHEMERAL_STORAGE, 0)
            if req.ephemeral > cap - used.get(res.EPHEMERAL_STORAGE, 0):
                reasons.append("Insufficient ephemeral-storage")
                unresolvable = unresolvable or req.ephemeral > cap
        for name, qty, reason in req.scalars:
            cap = alloc.get(name, 0)
            if cap <= 0 and name in req.dra:
                continue  # served by devices here: DynamicResources allocates them
            if qty > cap - used.get(name, 0):
                reasons.append(reason)
                unresolvable = unresolvable or qty > cap
        if not reasons:
            return SUCCESS
        code = Code.UNSCHEDULABLE_AND_UNRESOLVABLE if unresolvable else Code.UNSCHEDULABLE
        return shared(code, tuple(reasons))

    # -- score -------------------------------------------------------------------------
    def pre_score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo],
                  snapshot: Snapshot) -> Status:
        requests = self.vectors.pod_requests(pod)
        state.write(_PRE_SCORE_KEY, requests)
        if self._cpu_memory_weights is None:
            state.write(_DEVICE_TOTALS_KEY, device_totals(self.listers, self.vectors.names))
        else:
            # The scores of a request seen before, current for this snapshot's nodes.
            state.write(_SCORES_KEY, self._scores.table_if_repeated(requests, snapshot))
        return SUCCESS

    def _requests(self, state: CycleState, pod: PodInfo) -> tuple[int, ...]:
        requests: tuple[int, ...] | None = state.get(_PRE_SCORE_KEY)
        return requests if requests is not None else self.vectors.pod_requests(pod)

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        requested, _, allocatable = self.vectors.node(node, self._requests(state, pod),
                                                      state.get(_DEVICE_TOTALS_KEY))
        return self._scorer(requested, allocatable)

    def score_nodes(self, state: CycleState, pod: PodInfo,
                    nodes: Sequence[NodeInfo]) -> list[int]:
        pod_requests = self._requests(state, pod)
        if self._cpu_memory_weights is not None:
            return self._least_allocated_cpu_memory(pod_requests, nodes,
                                                    state.get(_SCORES_KEY))
        vectors, scorer = self.vectors.node, self._scorer
        devices: DeviceTotalsFn | None = state.get(_DEVICE_TOTALS_KEY)
        out = []
        for node in nodes:
            requested, _, allocatable = vectors(node, pod_requests, devices)
            out.append(scorer(requested, allocatable))
        return out


    def _least_allocated_cpu_memory(self, pod_requests: Sequence[int],
                                    nodes: Sequence[NodeInfo],
                                    memo: dict[str, int] | None) -> list[int]:
        """score_nodes for LeastAllocated over cpu then memory (the default), with the
        per-node vectors unrolled: the integer math of _least_requested_score and
        _weighted_mean, without two lists and two calls per node (this runs pod x node).
        `memo`: a repeated request's scores, current for the cycle's snapshot (pre_score):
        read for every node at once, computed only for the nodes missing from it."""
        assert self._cpu_memory_weights is not None
        if memo is None:  # a signature seen once: nothing to read, nothing worth writing
            w_cpu, w_mem = self._cpu_memory_weights
            pod_cpu, pod_mem = pod_requests
            cpu, memory = res.CPU, res.MEMORY
            scores = []
            for node in nodes:
                alloc = node.allocatable
                score = weight_sum = 0
                cap = alloc.get(cpu, 0)
                if cap:
                    r = node.non_zero_cpu + pod_cpu
                    if r <= cap:
                        score = (cap - r) * MAX_NODE_SCORE // cap * w_cpu
                    weight_sum = w_cpu
                cap = alloc.get(memory, 0)
                if cap:
                    r = node.non_zero_memory + pod_mem
                    if r <= cap:
                        score += (cap - r) * MAX_NODE_SCORE // cap * w_mem
                    weight_sum += w_mem
                scores.append(score // weight_sum if weight_sum else 0)
            return scores
        out: list[int | None] = list(map(memo.get, map(_node_name, nodes)))
        if None in out:
            for i, hit in enumerate(out):
                if hit is None:
                    node = nodes[i]
                    out[i] = memo[node.name] = self._least_allocated_node(pod_requests, node)
        return out  # type: ignore[return-value]  # no None left

    def _least_allocated_node(self, pod_requests: Sequence[int], node: NodeInfo) -> int:
        assert self._cpu_memory_weights is not None
        w_cpu, w_mem = self._cpu_memory_weights
        pod_cpu, pod_mem = pod_requests
        alloc = node.allocatable
        score = weight_sum = 0
        cap = alloc.get(res.CPU, 0)
        if cap:
            r = node.non_zero_cpu + pod_cpu
            if r <= cap:
                score = (cap - r) * MAX_NODE_SCORE // cap * w_cpu
            weight_sum = w_cpu
        cap = alloc.get(res.MEMORY, 0)
        if cap:
            r = node.non_zero_memory + pod_mem
            if r <= cap:
                score += (cap - r) * MAX_NODE_SCORE // cap * w_mem
            weight_sum += w_mem
        return score // weight_sum if weight_sum else 0

    # -- queueing hints ------------------------------------------------------------------
    # -- PlacementScore (TopologyAwareWorkloadScheduling) -----------------------------------
    def score_placement(self, state: CycleState, group: PodGroupInfo,
                        placement: PodGroupAssignments) -> tuple[int, Status]:
        """scorePlacement: how full the placement's nodes would be with the members placed
        there, MostAllocated over the sums of every node's allocatable and allocated
        (non-zero requests) and the members' requests. No NormalizePlacementScore."""
        vectors = self.vectors
        n = len(vectors.names)
        requested = [0] * n
        for a in placement.assignments:
            for i, r in enumerate(vectors.pod_requests(a.pod)):
                requested[i] += r
        allocated, allocatable = [0] * n, [0] * n
        for node in placement.placement.nodes:
            _, node_allocated, node_allocatable = vectors.node(node, requested)
            for i in range(n):
                allocatable[i] += node_allocatable[i]
                allocated[i] += node_allocated[i]
                requested[i] += node_allocated[i]
        return self._placement_scorer(requested, allocatable), SUCCESS

    def events_to_register(self) -> tuple[ev.ClusterEventWithHint, ...]:
        """fit.go EventsToRegister, with v1.37's defaults (InPlacePodVerticalScaling on)."""
        r, a = ev.Resource, ev.ActionType
        return (
            ev.event(r.ASSIGNED_POD, a.DELETE, self._after_assigned_pod_delete),
            ev.event(r.NODE, a.ADD | a.UPDATE_NODE_ALLOCATABLE, self._after_node_change),
            ev.event(r.ASSIGNED_POD, a.UPDATE_POD_SCALE_DOWN,
                     self._after_assigned_pod_scale_down),
            ev.event(r.TARGET_POD, a.UPDATE_POD_SCALE_DOWN, ev.queue_always),
            # A pod may wait for a class that serves its extended resource (DRAExtendedResource).
            ev.event(r.DEVICE_CLASS, a.ADD | a.UPDATE, self._after_device_class_change),
        )

    def _after_device_class_change(self, pod: PodInfo, old: Any, new: Any) -> ev.QueueingHint:
        """isSchedulableAfterDeviceClassEvent: a class added that serves one of the pod's
        requests by its implicit name, or whose extendedResourceName changed to one."""
        new_ern = ((new or {}).get("spec") or {}).get("extendedResourceName") or ""
        if old is not None:
            if (((old.get("spec") or {}).get("extendedResourceName") or "") == new_ern):
                return ev.QUEUE_SKIP
        else:
            name = ((new or {}).get("metadata") or {}).get("name") or ""
            if dc.DEVICE_CLASS_PREFIX + name in pod.requests:
                return ev.QUEUE
        if new_ern and new_ern in pod.requests:
            return ev.QUEUE
        return ev.QUEUE_SKIP

    def _after_assigned_pod_delete(self, pod: PodInfo, old: Any, new: Any) -> ev.QueueingHint:
        deleted: PodInfo = old
        if not deleted.node_name and not deleted.nominated_node:
            return ev.QUEUE_SKIP
        return ev.QUEUE

    def _after_assigned_pod_scale_down(self, pod: PodInfo, old: Any,
                                       new: Any) -> ev.QueueingHint:
        """haveEnoughRelevantResourcesDecreased: a resource the pod asks for got smaller."""
        if not new.node_name:
            return ev.QUEUE_SKIP
        for name, qty in pod.requests.items():
            if qty and old.requests.get(name, 0) > new.requests.get(name, 0):
                return ev.QUEUE
        return ev.QUEUE_SKIP

    def _after_node_change(self, pod: PodInfo, old: Any, new: Any) -> ev.QueueingHint:
        """isSchedulableAfterNodeChange: the pod fits the node alone now, and (an update)
        an allocatable it asks for grew."""
        node = ev.node_of(new)
        if not self.filter(CycleState(), pod, node).ok:
            return ev.QUEUE_SKIP
        if old is None:
            return ev.QUEUE
        before: dict[str, int] = ev.node_of(old).allocatable
        after: dict[str, int] = node.allocatable
        if after.get(res.PODS, 0) > before.get(res.PODS, 0):
            return ev.QUEUE
        req = self._pod_request(pod)
        if req.empty:
            return ev.QUEUE_SKIP
        for name, qty in ((res.CPU, req.cpu), (res.MEMORY, req.memory),
                          (res.EPHEMERAL_STORAGE, req.ephemeral),
                          *((n, q) for n, q, _ in req.scalars)):
            if qty > 0 and after.get(name, 0) > before.get(name, 0):
                return ev.QUEUE
        return ev.QUEUE_SKIP


def new(args: Mapping[str, Any] | None, handle: Handle) -> NodeResourcesFit:
    """NodeResourcesFitArgs: ignoredResources, ignoredResourceGroups, scoringStrategy.
    Extenders' managedResources with ignoredByScheduler (handle.ignored_resources) are
    ignored too, as kube-scheduler adds them to IgnoredResources."""
    args = args or {}
    if not isinstance(args, Mapping):
        raise ArgsError("", "must be an object with ignoredResources, ignoredResourceGroups "
                            "and scoringStrategy")
    _check_fields(args, "", ("ignoredResources", "ignoredResourceGroups", "scoringStrategy"))
    ignored = _parse_names(args.get("ignoredResources"), "ignoredResources", group=False)
    groups = _parse_names(args.get("ignoredResourceGroups"), "ignoredResourceGroups",
                          group=True)
    strategy = parse_scoring_strategy(args.get("scoringStrategy"))
    return NodeResourcesFit(ignored | handle.ignored_resources, groups, strategy,
                            handle.listers)


SPEC = PluginSpec(name=NAME, filter=new, score=new, default_args=DEFAULT_ARGS)
