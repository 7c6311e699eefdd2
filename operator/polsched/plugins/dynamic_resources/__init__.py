"""DynamicResources: Dynamic Resource Allocation, as kube-scheduler v1.37's plugin.

The allocator and device selectors are a library below the plugins (polsched.dra, as
upstream's k8s.io/dynamic-resource-allocation). The package:

- extended: DRAExtendedResource's special claim (its requests and the pod's
  requestMappings, createRequestsAndMappings);
- plugin: the DynamicResources plugin (PreFilter, Filter, Reserve/Unreserve, PreBind,
  queueing hints) over the cache's listers;
- extended_score: the node's devices as the allocatable of an extended resource a
  DeviceClass serves, for NodeResourcesFit's and BalancedAllocation's scores;
- allocated: the devices in use: allocated claims (AllocatedIndex) and Reserve's
  allocations in flight (ClaimTracker), as upstream's allocateddevices.go;
- diagnose: the device-level account `polsched explain` prints.
"""

from __future__ import annotations

from polsched.framework.registry import PluginSpec
from polsched.plugins.dynamic_resources.diagnose import diagnose
from polsched.plugins.dynamic_resources.plugin import NAME, DynamicResources, new

SPEC = PluginSpec(name=NAME, filter=new, score=new, pre_enqueue=new)

__all__ = ["NAME", "SPEC", "DynamicResources", "diagnose", "new"]
