"""Upstream's allocator test table, as data: testdata/allocator_cases.jsonl.

Each line is one case of k8s.io/dynamic-resource-allocation@v0.37.1's shared allocator
test table (structured/internal/allocatortesting), as run against its "incubating"
allocator (kube-scheduler v1.37's default): the inputs (features, classes, claims,
slices, node, devices in use) and what upstream's allocator returned (results or an
error, and how often it called allocateOne when the case pins that). Written by
hack/dra-oracle.sh from the module cache; Kubernetes authors, Apache-2.0.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any

from polsched.dra.allocator import AllocatedState, Features, NodeRef
from polsched.dra.quantity import Quantity

TESTDATA = Path(__file__).parent / "testdata"

FEATURES = {
    "DRAAdminAccess": "admin_access",
    "DRAPrioritizedList": "prioritized_list",
    "DRAPartitionableDevices": "partitionable_devices",
    "DRADeviceTaints": "device_taints",
    "DRADeviceBindingConditions+DRAResourceClaimDeviceStatus": "device_binding_and_status",
    "DRAConsumableCapacity": "consumable_capacity",
    "DRAFractionalCapacityRange": "fractional_capacity_range",
}


def load_cases(name: str = "allocator_cases.jsonl") -> list[dict[str, Any]]:
    with open(TESTDATA / name, encoding="utf-8") as f:
        return sorted((json.loads(line) for line in f if line.strip()),
                      key=lambda c: str(c["name"]))


def features(case: Mapping[str, Any]) -> Features:
    on = {FEATURES[f] for f in case.get("features") or ()}
    return Features(**{k: k in on for k in FEATURES.values()})


def _device_id(text: str) -> tuple[str, str, str]:
    driver, pool, device = text.split("/", 2)
    return (driver, pool, device)


def allocated_state(case: Mapping[str, Any]) -> AllocatedState:
    state = AllocatedState()
    for d in case.get("allocatedDevices") or ():
        state.devices.add(_device_id(d))
    for s in case.get("allocatedShared") or ():
        driver, pool, rest = s.split("/", 2)
        device, _, share = rest.partition("/")
        state.shared.add(((driver, pool, device), share))
    for d, caps in (case.get("aggregatedCapacity") or {}).items():
        state.capacity[_device_id(d)] = {n: Quantity.parse(q) for n, q in caps.items()}
    return state


def node(case: Mapping[str, Any]) -> NodeRef:
    meta = case["node"]["metadata"]
    return NodeRef(meta["name"], meta.get("labels") or {})


def normalize(results: Any) -> Any:
    """Results compared as upstream's matchers do: share IDs replaced, quantities by value,
    node selector values as sets; device results keep their order (stronger than
    upstream's ConsistOf)."""
    if results is None:
        return None
    out = []
    for r in results:
        devices = r.get("devices") or {}
        res = []
        for d in devices.get("results") or []:
            d = dict(d)
            if "shareID" in d:
                d["shareID"] = "share"
            if "consumedCapacity" in d:
                d["consumedCapacity"] = {n: Decimal(Quantity.parse(q).value)
                                         for n, q in d["consumedCapacity"].items()}
            res.append(d)
        ns = r.get("nodeSelector")
        if ns is not None:
            ns = [{k: sorted((req["key"], req["operator"], tuple(sorted(req.get("values") or ())))
                             for req in v)
                   for k, v in term.items() if v}
                  for term in ns.get("nodeSelectorTerms") or []]
        out.append({"results": res, "config": devices.get("config") or None,
                    "nodeSelector": ns})
    return out
