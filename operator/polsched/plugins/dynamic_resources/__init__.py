"""DynamicResources: polsched does not allocate ResourceClaims, and says so.

kube-scheduler v1.37's default profile runs the dynamicresources plugin
(pkg/scheduler/framework/plugins/dynamicresources), which allocates the devices a pod's
ResourceClaims ask for and writes the allocation in PreBind. polsched does not implement
Dynamic Resource Allocation. Rather than place such a pod without its devices (it would
never start) or guess, its PreFilter rejects it as UnschedulableAndUnresolvable, with a
message that says what to do: give the pod a scheduler that allocates claims. Pods without
spec.resourceClaims skip the plugin. Listed in docs/differences.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from polsched.framework.cycle_state import CycleState
from polsched.framework.interfaces import FilterPlugin, Handle, PreFilterPlugin
from polsched.framework.registry import ArgsError, PluginSpec
from polsched.framework.status import SKIP, SUCCESS, Status
from polsched.framework.types import NodeInfo, PodInfo, Snapshot

NAME = "DynamicResources"

ERR_REASON = ("pod has spec.resourceClaims, and polsched does not allocate ResourceClaims "
              "(Dynamic Resource Allocation): set the pod's spec.schedulerName to a "
              "scheduler that does, such as kube-scheduler (default-scheduler)")

_UNSUPPORTED = Status.unresolvable(ERR_REASON)


class DynamicResources(PreFilterPlugin, FilterPlugin):
    NAME = NAME

    def pre_filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> Status:
        return _UNSUPPORTED if pod.spec.get("resourceClaims") else SKIP

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        # Only reached by a pod without claims whose PreFilter was not run (a what-if).
        return _UNSUPPORTED if pod.spec.get("resourceClaims") else SUCCESS


def new(args: Mapping[str, Any] | None, handle: Handle) -> DynamicResources:
    if args:
        raise ArgsError("", f"{NAME} takes no args; remove them")
    return DynamicResources()


SPEC = PluginSpec(name=NAME, filter=new)
