"""DynamicResources: Dynamic Resource Allocation, as kube-scheduler v1.37's plugin.

The package, from the bottom up (all pure data except the plugin's PreBind):

- quantity: resource.Quantity values and their canonical text;
- device_cel: the DRA CEL environment (device selectors) on the Rust CEL package;
- model: ResourceSlices, DeviceClasses and ResourceClaims parsed for the allocator;
- allocator: upstream's structured allocator (incubating variant), the same devices in
  the same order;
- extended: DRAExtendedResource's special claim (its requests and the pod's
  requestMappings, createRequestsAndMappings);
- plugin: the DynamicResources plugin (PreFilter, Filter, Reserve/Unreserve, PreBind,
  queueing hints) over the cache's listers;
- extended_score: the node's devices as the allocatable of an extended resource a
  DeviceClass serves, for NodeResourcesFit's and BalancedAllocation's scores;
- diagnose: the device-level account `polsched explain` prints.
"""

from __future__ import annotations

from polsched.framework.registry import PluginSpec
from polsched.plugins.dynamic_resources.plugin import NAME, DynamicResources, new

SPEC = PluginSpec(name=NAME, filter=new, score=new, pre_enqueue=new)

__all__ = ["NAME", "SPEC", "DynamicResources", "new"]
