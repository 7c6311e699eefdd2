"""Kubernetes resource quantities as integers, and the requests of a pod.

CPU is kept in millicores, everything else (memory, ephemeral-storage, pods, extended
resources) in whole units, both rounded up as resource.Quantity's MilliValue()/Value() do.
Pure data manipulation: no I/O.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from decimal import Decimal, DecimalException
from typing import Any

CPU = "cpu"
MEMORY = "memory"
EPHEMERAL_STORAGE = "ephemeral-storage"
PODS = "pods"

# pkg/scheduler/util/pod_resources.go: what a container with no request counts as when
# scoring (never when filtering).
DEFAULT_MILLI_CPU_REQUEST = 100
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024

_SUFFIXES: dict[str, Decimal] = {
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
    "k": Decimal(10) ** 3, "M": Decimal(10) ** 6, "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12, "P": Decimal(10) ** 15, "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10, "Mi": Decimal(2) ** 20, "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40, "Pi": Decimal(2) ** 50, "Ei": Decimal(2) ** 60,
}

_cache: dict[tuple[str, bool], int] = {}


class QuantityError(ValueError):
    pass


# The largest decimal exponent a quantity may carry. resource.Quantity keeps values in an
# int64 scaled by a power of ten, so nothing the API server stores needs more than a few
# dozen digits; the bound keeps "1e999999999" from raising decimal.Overflow (an
# ArithmeticError, which callers that catch QuantityError/ValueError would let through:
# `polsched validate` crashed, and one Metrics API item ended the node-metrics task).
MAX_QUANTITY_EXPONENT = 1000


_QUANTITY = re.compile(
    r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?$"
)


def parse_quantity(value: Any) -> Decimal:
    """Parse a resource.Quantity ("500m", "1Gi", "1e3", "2") or a plain number."""
    if isinstance(value, bool):
        raise QuantityError(f"invalid quantity {value!r}")
    if isinstance(value, int | float):
        if isinstance(value, float) and not math.isfinite(value):
            raise QuantityError(f"invalid quantity {value!r}")
        return Decimal(str(value))
    m = _QUANTITY.match(str(value).strip())
    if not m:
        raise QuantityError(f"invalid quantity {value!r}: want a number with an optional suffix "
                            "(m, k, M, G, Ki, Mi, Gi, ... or an exponent e3)")
    number, suffix = Decimal(m.group(1)), m.group(2) or ""
    try:
        if suffix[:1] in ("e", "E") and len(suffix) > 1:
            exponent = int(suffix[1:])
            if abs(exponent) > MAX_QUANTITY_EXPONENT:
                raise QuantityError(f"invalid quantity {value!r}: exponent beyond "
                                    f"magnitude {MAX_QUANTITY_EXPONENT}")
            return number * (Decimal(10) ** exponent)
        return number * _SUFFIXES[suffix]
    except DecimalException as e:  # digits beyond the context's bounds
        raise QuantityError(f"invalid quantity {value!r}: out of range") from e


def to_int(name: str, value: Any) -> int:
    """A quantity in the scheduler's unit for resource `name` (millicores for cpu)."""
    key = (str(value), name == CPU)
    hit = _cache.get(key)
    if hit is not None:
        return hit
    q = parse_quantity(value)
    result = math.ceil(q * 1000) if name == CPU else math.ceil(q)
    if len(_cache) < 10000:
        _cache[key] = result
    return result


def resource_list(raw: Mapping[str, Any] | None) -> dict[str, int]:
    """A v1.ResourceList (name -> quantity) as name -> int."""
    if not raw:
        return {}
    return {name: to_int(name, q) for name, q in raw.items()}


def _add(into: dict[str, int], other: Mapping[str, int]) -> None:
    for k, v in other.items():
        into[k] = into.get(k, 0) + v


def _max(into: dict[str, int], other: Mapping[str, int]) -> None:
    for k, v in other.items():
        if v > into.get(k, 0):
            into[k] = v


def _with_defaults(raw: Mapping[str, Any] | None, default_cpu: bool,
                   default_memory: bool) -> dict[str, int]:
    """One container's resource list, with applyNonMissing's defaults for a missing cpu or
    memory request."""
    req = resource_list(raw)
    if default_cpu:
        req.setdefault(CPU, DEFAULT_MILLI_CPU_REQUEST)
    if default_memory:
        req.setdefault(MEMORY, DEFAULT_MEMORY_REQUEST)
    return req


# What one container counts, from its spec and its status (None when the pod's status is
# not read): component-helpers' containerSpecRequests, containerAllocatedRequests and
# containerActuatedRequests. The bool says the pod's resize is infeasible.
_ContainerFn = Callable[[Mapping[str, Any], Mapping[str, Any] | None, bool],
                        Mapping[str, Any] | None]


def _spec_requests(c: Mapping[str, Any], cs: Mapping[str, Any] | None,
                   infeasible: bool) -> Mapping[str, Any] | None:
    requests: Mapping[str, Any] | None = (c.get("resources") or {}).get("requests")
    return requests


def _allocated_requests(c: Mapping[str, Any], cs: Mapping[str, Any] | None,
                        infeasible: bool) -> Mapping[str, Any] | None:
    """What the kubelet admitted; an infeasible resize was never admitted, so without a
    status the container counts nothing rather than its spec."""
    if cs is not None and cs.get("allocatedResources") is not None:
        allocated: Mapping[str, Any] = cs["allocatedResources"]
        return allocated
    return None if infeasible else _spec_requests(c, cs, infeasible)


def _actuated_requests(c: Mapping[str, Any], cs: Mapping[str, Any] | None,
                       infeasible: bool) -> Mapping[str, Any] | None:
    """What the runtime runs with (status.resources), else what was admitted."""
    if cs is not None:
        actual = cs.get("resources")
        if actual is not None and actual.get("requests") is not None:
            requests: Mapping[str, Any] = actual["requests"]
            return requests
    return _allocated_requests(c, cs, infeasible)


def resize_infeasible(status: Mapping[str, Any]) -> bool:
    """IsPodResizeInfeasible: the PodResizePending condition's reason is Infeasible."""
    for cond in status.get("conditions") or ():
        if cond.get("type") == "PodResizePending":
            return bool(cond.get("reason") == "Infeasible")
    return False


def reads_status(status: Mapping[str, Any] | None) -> bool:
    """Whether the pod's status says anything UseStatusResources reads (resources it was
    allocated or runs with, an infeasible resize): without it, a pod's requests are its
    spec's."""
    if not status:
        return False
    if resize_infeasible(status):
        return True
    if status.get("resources") is not None or status.get("allocatedResources") is not None:
        return True
    for kind in ("containerStatuses", "initContainerStatuses"):
        for cs in status.get(kind) or ():
            if cs.get("resources") is not None or cs.get("allocatedResources") is not None:
                return True
    return False


def _aggregate(spec: Mapping[str, Any], fn: _ContainerFn, default_cpu: bool,
               default_memory: bool, statuses: Mapping[str, Mapping[str, Any]] | None,
               infeasible: bool) -> dict[str, int]:
    """aggregateContainerResourcesByFn: the sum of the app containers and restartable init
    containers (sidecars), or the largest single init container plus the sidecars started
    before it, whichever is larger."""
    def one(c: Mapping[str, Any]) -> dict[str, int]:
        cs = statuses.get(c.get("name") or "") if statuses is not None else None
        return _with_defaults(fn(c, cs, infeasible), default_cpu, default_memory)

    reqs: dict[str, int] = {}
    for c in spec.get("containers") or ():
        _add(reqs, one(c))
    init_max: dict[str, int] = {}
    sidecars: dict[str, int] = {}
    for c in spec.get("initContainers") or ():
        creq = one(c)
        if c.get("restartPolicy") == "Always":
            _add(reqs, creq)
            _add(sidecars, creq)
            tmp = dict(sidecars)
        else:
            tmp = dict(creq)
            _add(tmp, sidecars)
        _max(init_max, tmp)
    _max(reqs, init_max)
    return reqs


def _container_statuses(status: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """findContainerStatus by name: the app containers' statuses first."""
    out: dict[str, Mapping[str, Any]] = {}
    for kind in ("containerStatuses", "initContainerStatuses"):
        for cs in status.get(kind) or ():
            out.setdefault(cs.get("name") or "", cs)
    return out


def _is_pod_level_resource(name: str) -> bool:
    """IsSupportedPodLevelResource: cpu, memory and hugepages-*."""
    return name in (CPU, MEMORY) or name.startswith("hugepages-")


def pod_requests(spec: Mapping[str, Any], non_zero: bool = False, pod_level: bool = True,
                 status: Mapping[str, Any] | None = None) -> dict[str, int]:
    """The effective requests of a pod, as component-helpers/resource PodRequests computes
    them: the containers' aggregate (_aggregate), then the pod-level requests
    (spec.resources, unless pod_level is False) in place of the aggregate for cpu, memory
    and hugepages, plus spec.overhead.

    With the pod's `status` (UseStatusResources and InPlacePodLevelResourcesVerticalScaling,
    both on in v1.37, as the scheduler's PodInfo.CalculateResource reads a pod), a pod being
    resized in place counts, per resource, the largest of its spec, what the kubelet
    allocated and what the runtime actuated; while the resize is infeasible, the spec it
    cannot get is left out. The pod-level status (status.allocatedResources and
    status.resources) stands for the containers' statuses when both are set.

    With non_zero, a container missing a cpu or memory request counts the scheduler's
    defaults (used by scorers only); when pod-level requests are set, only for a resource
    that neither they nor any container request (framework.getNonMissingContainerRequests)."""
    level_raw: Mapping[str, Any] = ((spec.get("resources") or {}).get("requests") or {}
                                    if pod_level else {})
    level_set = any(_is_pod_level_resource(k) for k in level_raw)
    default_cpu = default_memory = non_zero
    if non_zero and level_set:
        plain = pod_requests(spec, pod_level=pod_level, status=status)
        default_cpu, default_memory = CPU not in plain, MEMORY not in plain
    infeasible = status is not None and resize_infeasible(status)
    reqs = _aggregate(spec, _spec_requests, default_cpu, default_memory, None, False)
    if status is not None:
        pod_allocated = status.get("allocatedResources")
        pod_actual = status.get("resources")
        if (pod_allocated is not None and pod_actual is not None
                and pod_actual.get("requests") is not None):
            allocated = resource_list(pod_allocated)
            actuated = resource_list(pod_actual["requests"])
        else:
            statuses = _container_statuses(status)
            allocated = _aggregate(spec, _allocated_requests, default_cpu, default_memory,
                                   statuses, infeasible)
            actuated = _aggregate(spec, _actuated_requests, default_cpu, default_memory,
                                  statuses, infeasible)
        if infeasible:
            reqs = actuated
        else:
            _max(reqs, actuated)
        _max(reqs, allocated)
    if level_set:
        effective = resource_list(level_raw)
        pod_actual = status.get("resources") if status is not None else None
        if pod_actual is not None:
            # effectivePodLevelResources: the same largest-of, the spec left out while
            # the resize is infeasible.
            assert status is not None
            if infeasible:
                effective = {}
            _max(effective, resource_list(pod_actual.get("requests")))
            _max(effective, resource_list(status.get("allocatedResources")))
        for k, v in effective.items():
            if _is_pod_level_resource(k):
                reqs[k] = v
    _add(reqs, resource_list(spec.get("overhead")))
    return reqs
