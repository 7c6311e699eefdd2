"""The allocator's inputs as plain frozen dataclasses, parsed from resource.k8s.io/v1 JSON.

ResourceSlices, DeviceClasses and ResourceClaims arrive as the API server serves them
(the cache's dicts). `parse_*` turn them into the small records the allocator walks in
its hot loop, once per object version. The API server has validated the objects; a
field of the wrong shape still gets a ModelError naming the object and the field, never
a crash deep in the search. Pure data: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from polsched.dra.quantity import Quantity, QuantityError

Json = Mapping[str, Any]

EXACT_COUNT = "ExactCount"
ALL = "All"


class ModelError(ValueError):
    """A DRA object with a field the allocator cannot read."""


def _list(obj: Json, key: str, where: str) -> list[Any]:
    v = obj.get(key)
    if v is None:
        return []
    if not isinstance(v, list):
        raise ModelError(f"{where}.{key}: must be a list")
    return v


def _map(obj: Json, key: str, where: str) -> Mapping[str, Any]:
    v = obj.get(key)
    if v is None:
        return {}
    if not isinstance(v, Mapping):
        raise ModelError(f"{where}.{key}: must be an object")
    return v


def _quantity(raw: Any, where: str) -> Quantity:
    try:
        return Quantity.parse(raw)
    except QuantityError as err:
        raise ModelError(f"{where}: {err}") from err


@dataclass(frozen=True, slots=True)
class RequestPolicy:
    default: Quantity | None
    valid_values: tuple[Quantity, ...]
    range_min: Quantity | None
    range_max: Quantity | None
    range_step: Quantity | None
    has_range: bool


@dataclass(frozen=True, slots=True)
class Capacity:
    value: Quantity
    policy: RequestPolicy | None


@dataclass(frozen=True, slots=True)
class CounterConsumption:
    counter_set: str
    counters: Mapping[str, Quantity]


@dataclass(frozen=True, slots=True)
class Device:
    name: str
    attributes: Mapping[str, Mapping[str, Any]]
    capacity: Mapping[str, Capacity]
    raw_capacity: Mapping[str, Any]
    consumes_counters: tuple[CounterConsumption, ...]
    taints: tuple[Mapping[str, Any], ...]
    binding_conditions: tuple[str, ...] | None
    binding_failure_conditions: tuple[str, ...] | None
    binds_to_node: bool
    allow_multiple_allocations: bool | None
    node_name: str | None
    all_nodes: bool
    node_selector: Json | None
    uses_compatibility_groups: bool = False


@dataclass(frozen=True, slots=True)
class Slice:
    name: str
    driver: str
    pool: str
    generation: int
    slice_count: int
    node_name: str | None
    all_nodes: bool
    node_selector: Json | None
    per_device_node_selection: bool
    devices: tuple[Device, ...]
    shared_counters: tuple[tuple[str, Mapping[str, Quantity]], ...]
    raw: Json = field(compare=False, repr=False)

    @property
    def uses_compatibility_groups(self) -> bool:
        return any(d.uses_compatibility_groups for d in self.devices)


def parse_device(raw: Json, where: str) -> Device:
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise ModelError(f"{where}.name: must be a non-empty string")
    where = f"{where} ({name})"
    capacity: dict[str, Capacity] = {}
    for cname, cap in _map(raw, "capacity", where).items():
        if not isinstance(cap, Mapping):
            raise ModelError(f"{where}.capacity[{cname}]: must be an object with value")
        policy = None
        rp = cap.get("requestPolicy")
        if isinstance(rp, Mapping):
            vr = rp.get("validRange") if isinstance(rp.get("validRange"), Mapping) else None
            policy = RequestPolicy(
                default=(_quantity(rp["default"], f"{where}.capacity[{cname}].requestPolicy"
                                   ".default") if rp.get("default") is not None else None),
                valid_values=tuple(_quantity(v, f"{where}.capacity[{cname}].requestPolicy"
                                                ".validValues")
                                   for v in (rp.get("validValues") or [])),
                range_min=(_quantity(vr["min"], f"{where}.capacity[{cname}].validRange.min")
                           if vr and vr.get("min") is not None else None),
                range_max=(_quantity(vr["max"], f"{where}.capacity[{cname}].validRange.max")
                           if vr and vr.get("max") is not None else None),
                range_step=(_quantity(vr["step"], f"{where}.capacity[{cname}].validRange.step")
                            if vr and vr.get("step") is not None else None),
                has_range=vr is not None,
            )
        capacity[cname] = Capacity(_quantity(cap.get("value", "0"),
                                             f"{where}.capacity[{cname}].value"), policy)
    consumes = []
    groups = False
    for i, cc in enumerate(_list(raw, "consumesCounters", where)):
        if not isinstance(cc, Mapping) or not isinstance(cc.get("counterSet"), str):
            raise ModelError(f"{where}.consumesCounters[{i}]: must name a counterSet")
        counters = {n: _quantity((c or {}).get("value", "0"),
                                 f"{where}.consumesCounters[{i}].counters[{n}]")
                    for n, c in _map(cc, "counters", where).items()}
        consumes.append(CounterConsumption(cc["counterSet"], counters))
        groups = groups or bool(cc.get("compatibilityGroups"))
    bc = raw.get("bindingConditions")
    bfc = raw.get("bindingFailureConditions")
    return Device(
        name=name,
        attributes={k: v for k, v in _map(raw, "attributes", where).items()
                    if isinstance(v, Mapping)},
        capacity=capacity,
        raw_capacity=_map(raw, "capacity", where),
        consumes_counters=tuple(consumes),
        taints=tuple(t for t in _list(raw, "taints", where) if isinstance(t, Mapping)),
        binding_conditions=tuple(bc) if isinstance(bc, list) else None,
        binding_failure_conditions=tuple(bfc) if isinstance(bfc, list) else None,
        binds_to_node=bool(raw.get("bindsToNode")),
        allow_multiple_allocations=(bool(raw["allowMultipleAllocations"])
                                    if raw.get("allowMultipleAllocations") is not None
                                    else None),
        node_name=raw.get("nodeName") or None,
        all_nodes=bool(raw.get("allNodes")),
        node_selector=raw.get("nodeSelector") if isinstance(raw.get("nodeSelector"),
                                                            Mapping) else None,
        uses_compatibility_groups=groups,
    )


def parse_slice(raw: Json) -> Slice:
    meta = raw.get("metadata") or {}
    name = str(meta.get("name", ""))
    where = f"ResourceSlice {name}: spec"
    spec = raw.get("spec")
    if not isinstance(spec, Mapping):
        raise ModelError(f"ResourceSlice {name}: spec is missing")
    pool = _map(spec, "pool", where)
    shared = []
    for i, cs in enumerate(_list(spec, "sharedCounters", where)):
        if not isinstance(cs, Mapping) or not isinstance(cs.get("name"), str):
            raise ModelError(f"{where}.sharedCounters[{i}]: must have a name")
        shared.append((cs["name"], {n: _quantity((c or {}).get("value", "0"),
                                                 f"{where}.sharedCounters[{i}].counters[{n}]")
                                    for n, c in _map(cs, "counters", where).items()}))
    return Slice(
        name=name,
        driver=str(spec.get("driver", "")),
        pool=str(pool.get("name", "")),
        generation=int(pool.get("generation") or 0),
        slice_count=int(pool.get("resourceSliceCount") or 0),
        node_name=spec.get("nodeName") or None,
        all_nodes=bool(spec.get("allNodes")),
        node_selector=(spec.get("nodeSelector") if isinstance(spec.get("nodeSelector"),
                                                              Mapping) else None),
        per_device_node_selection=bool(spec.get("perDeviceNodeSelection")),
        devices=tuple(parse_device(d, f"{where}.devices[{i}]")
                      for i, d in enumerate(_list(spec, "devices", where))),
        shared_counters=tuple(shared),
        raw=raw,
    )


@dataclass(frozen=True, slots=True)
class DeviceClass:
    name: str
    selectors: tuple[str | None, ...]  # None: a selector without CEL (a future type)
    config: tuple[Json, ...]
    extended_resource_name: str | None = None


def parse_class(raw: Json) -> DeviceClass:
    name = str((raw.get("metadata") or {}).get("name", ""))
    spec = raw.get("spec") or {}
    where = f"DeviceClass {name}: spec"
    return DeviceClass(
        name=name,
        selectors=tuple(_selector(s) for s in _list(spec, "selectors", where)),
        config=tuple(c for c in _list(spec, "config", where) if isinstance(c, Mapping)),
        extended_resource_name=spec.get("extendedResourceName") or None,
    )


def _selector(raw: Any) -> str | None:
    if isinstance(raw, Mapping) and isinstance(raw.get("cel"), Mapping):
        expr = raw["cel"].get("expression")
        return expr if isinstance(expr, str) else None
    return None


@dataclass(frozen=True, slots=True)
class Request:
    """An ExactDeviceRequest or a DeviceSubRequest (upstream's requestAccessor)."""

    name: str
    class_name: str
    mode: str
    count: int
    admin_access: bool | None
    selectors: tuple[str | None, ...]
    tolerations: tuple[Json, ...]
    capacity_requests: Mapping[str, Quantity] | None
    raw_tolerations: list[Any] | None
    has_derived_attributes: bool = False


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    name: str
    exactly: Request | None
    first_available: tuple[Request, ...]


@dataclass(frozen=True, slots=True)
class Constraint:
    requests: frozenset[str]
    match_attribute: str | None
    distinct_attribute: str | None


@dataclass(frozen=True, slots=True)
class Claim:
    namespace: str
    name: str
    uid: str
    requests: tuple[DeviceRequest, ...]
    constraints: tuple[Constraint, ...]
    config: tuple[Json, ...]
    raw: Json = field(compare=False, repr=False)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name


def _request(raw: Json, where: str, sub: bool) -> Request:
    name = raw.get("name", "")
    caps = raw.get("capacity")
    capreq = None
    if isinstance(caps, Mapping):
        capreq = {n: _quantity(q, f"{where}.capacity.requests[{n}]")
                  for n, q in _map(caps, "requests", where).items()}
    tol = raw.get("tolerations")
    return Request(
        name=str(name),
        class_name=str(raw.get("deviceClassName") or ""),
        mode=str(raw.get("allocationMode") or EXACT_COUNT),
        count=int(raw["count"]) if raw.get("count") is not None else 1,
        admin_access=None if sub or raw.get("adminAccess") is None else bool(
            raw.get("adminAccess")),
        selectors=tuple(_selector(s) for s in _list(raw, "selectors", where)),
        tolerations=tuple(t for t in _list(raw, "tolerations", where)
                          if isinstance(t, Mapping)),
        capacity_requests=capreq,
        raw_tolerations=tol if isinstance(tol, list) else None,
        has_derived_attributes=bool(raw.get("derivedAttributes")),
    )


def parse_claim(raw: Json) -> Claim:
    meta = raw.get("metadata") or {}
    ns, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
    where = f"ResourceClaim {ns + '/' if ns else ''}{name}: spec.devices"
    devices = _map(raw.get("spec") or {}, "devices", f"ResourceClaim {name}: spec")
    requests = []
    for i, r in enumerate(_list(devices, "requests", where)):
        if not isinstance(r, Mapping):
            raise ModelError(f"{where}.requests[{i}]: must be an object")
        rname = str(r.get("name", ""))
        exactly = r.get("exactly")
        requests.append(DeviceRequest(
            name=rname,
            exactly=(_request({**exactly, "name": rname}, f"{where}.requests[{i}].exactly",
                              False) if isinstance(exactly, Mapping) else None),
            first_available=tuple(
                _request(s, f"{where}.requests[{i}].firstAvailable[{j}]", True)
                for j, s in enumerate(_list(r, "firstAvailable", where))
                if isinstance(s, Mapping)),
        ))
    constraints = []
    for c in _list(devices, "constraints", where):
        if isinstance(c, Mapping):
            constraints.append(Constraint(frozenset(c.get("requests") or ()),
                                          c.get("matchAttribute"),
                                          c.get("distinctAttribute")))
    return Claim(
        namespace=ns, name=name, uid=str(meta.get("uid", "")),
        requests=tuple(requests), constraints=tuple(constraints),
        config=tuple(c for c in _list(devices, "config", where) if isinstance(c, Mapping)),
        raw=raw,
    )


def device_id(driver: str, pool: str, device: str) -> tuple[str, str, str]:
    return (driver, pool, device)


DeviceID = tuple[str, str, str]


def format_device_id(d: DeviceID) -> str:
    return "/".join(d)


def sequence_of(x: Sequence[Any] | None) -> Sequence[Any]:
    return x or ()
