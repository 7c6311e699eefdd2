"""Dynamic Resource Allocation as a library: which devices a pod's claims get on a node.

Upstream keeps this apart from the scheduler plugin, in k8s.io/dynamic-resource-allocation
(structured/ for the allocator, cel/ for device selectors); so does polsched. The
DynamicResources plugin (plugins/dynamic_resources), `polsched explain` and the scores of
extended resources use it through the names below; the modules are its internals:

- quantity: resource.Quantity values and their canonical text;
- selector_syntax: what cel-go accepts and the Rust CEL core does not, rewritten into
  what it runs, on polsched.cel.syntax's tokens;
- device_cel: device selectors, CEL with Kubernetes' libraries (quantity, semver, IP,
  lists, regex on RE2) on the Rust CEL package;
- model: ResourceSlices, DeviceClasses and ResourceClaims parsed for the allocator
  (exported as the module `model`: the parsed API types);
- allocator: upstream's structured allocator (incubating variant), the same devices in
  the same order.

Pure data: no I/O. Below the plugins in the layers (tests/unit/test_layers.py): it knows
no plugin, policy, cache or client.
"""

from __future__ import annotations

from polsched.dra import model
from polsched.dra.allocator import (
    AllocatedState,
    Allocator,
    AllocatorError,
    Features,
    MatchCache,
    NodeAllocationError,
    NodeRef,
    SliceIndex,
    gather_pools,
    node_matches,
    request_over_capacity,
    taint_prevents,
)
from polsched.dra.device_cel import DeviceInput, compile_selector
from polsched.dra.quantity import Quantity
from polsched.dra.selector_syntax import CELError

__all__ = [
    "AllocatedState",
    "Allocator",
    "AllocatorError",
    "CELError",
    "DeviceInput",
    "Features",
    "MatchCache",
    "NodeAllocationError",
    "NodeRef",
    "Quantity",
    "SliceIndex",
    "compile_selector",
    "gather_pools",
    "model",
    "node_matches",
    "request_over_capacity",
    "taint_prevents",
]
