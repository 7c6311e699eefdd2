"""Kubernetes resource quantities as integers, and the requests of a pod.

CPU is kept in millicores, everything else (memory, ephemeral-storage, pods, extended
resources) in whole units, both rounded up as resource.Quantity's MilliValue()/Value() do.
Pure data manipulation: no I/O.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
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


def _container_requests(c: Mapping[str, Any], default_cpu: bool,
                        default_memory: bool) -> dict[str, int]:
    req = resource_list((c.get("resources") or {}).get("requests"))
    if default_cpu:
        req.setdefault(CPU, DEFAULT_MILLI_CPU_REQUEST)
    if default_memory:
        req.setdefault(MEMORY, DEFAULT_MEMORY_REQUEST)
    return req


def pod_requests(spec: Mapping[str, Any], non_zero: bool = False,
                 pod_level: bool = True) -> dict[str, int]:
    """The effective requests of a pod, as component-helpers/resource PodRequests computes
    them: the sum of the app containers and restartable init containers (sidecars), or the
    largest single init container plus the sidecars started before it, whichever is larger,
    then the pod-level requests (spec.resources, unless pod_level is False) in place of the
    aggregate for cpu, memory and hugepages, plus spec.overhead. With non_zero, a container
    missing a cpu or memory request counts the scheduler's defaults (used by scorers only);
    when pod-level requests are set, only for a resource that neither they nor any container
    request (framework.getNonMissingContainerRequests)."""
    level = resource_list((spec.get("resources") or {}).get("requests")) if pod_level else {}
    default_cpu = default_memory = non_zero
    if non_zero and level:
        plain = pod_requests(spec)
        default_cpu, default_memory = CPU not in plain, MEMORY not in plain
    reqs: dict[str, int] = {}
    for c in spec.get("containers") or ():
        _add(reqs, _container_requests(c, default_cpu, default_memory))
    init_max: dict[str, int] = {}
    sidecars: dict[str, int] = {}
    for c in spec.get("initContainers") or ():
        creq = _container_requests(c, default_cpu, default_memory)
        if c.get("restartPolicy") == "Always":
            _add(reqs, creq)
            _add(sidecars, creq)
            tmp = dict(sidecars)
        else:
            tmp = dict(creq)
            _add(tmp, sidecars)
        _max(init_max, tmp)
    _max(reqs, init_max)
    # Pod-level resources (spec.resources) replace the aggregate for the resources they name
    # (IsSupportedPodLevelResource: cpu, memory, hugepages-*).
    for k, v in level.items():
        if k in (CPU, MEMORY) or k.startswith("hugepages-"):
            reqs[k] = v
    _add(reqs, resource_list(spec.get("overhead")))
    return reqs
