"""DynamicResources: polsched does not allocate ResourceClaims, and says so.

kube-scheduler v1.37's default profile runs the dynamicresources plugin
(pkg/scheduler/framework/plugins/dynamicresources), which allocates the devices a pod's
ResourceClaims ask for and writes the allocation in PreBind. polsched does not implement
Dynamic Resource Allocation. Rather than place such a pod without its devices (it would
never start) or guess, its PreFilter rejects it as UnschedulableAndUnresolvable, with a
message that says what to do: give the pod a scheduler that allocates claims. Pods without
spec.resourceClaims skip the plugin. Listed in docs/differences.md.

Its PostFilter runs before DefaultPreemption's, as upstream's default profile orders them,
and reads the state its PreFilter wrote: when an earlier PreFilter ended the phase
(UnschedulableAndUnresolvable, or an empty PreFilterResult) that PreFilter never ran, the
read fails with "not found" and the whole PostFilter phase ends with that error, as
kube-scheduler v1.37's does (docs/differences.md): the FailedScheduling message then reads
"0/N nodes are available: <PreFilter message>. not found".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from polsched.framework.cycle_state import CycleState
from polsched.framework.diagnosis import FitError, PostFilterResult
from polsched.framework.interfaces import (
    FilterPlugin,
    FrameworkHandle,
    Handle,
    PostFilterPlugin,
    PreFilterPlugin,
)
from polsched.framework.registry import ArgsError, PluginSpec
from polsched.framework.status import SKIP, SUCCESS, Code, Status
from polsched.framework.types import NodeInfo, PodInfo, Snapshot

NAME = "DynamicResources"

ERR_REASON = ("pod has spec.resourceClaims, and polsched does not allocate ResourceClaims "
              "(Dynamic Resource Allocation): set the pod's spec.schedulerName to a "
              "scheduler that does, such as kube-scheduler (default-scheduler)")

_UNSUPPORTED = Status.unresolvable(ERR_REASON)
# The CycleState key of the PreFilter's state (upstream's stateKey); its value is whether
# the pod has claims.
STATE_KEY = "PreFilter" + NAME
# fwk.ErrNotFound's text: what reading a state never written returns.
ERR_NOT_FOUND = "not found"


class DynamicResources(PreFilterPlugin, FilterPlugin, PostFilterPlugin):
    NAME = NAME

    def pre_filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> Status:
        claims = bool(pod.spec.get("resourceClaims"))
        state.write(STATE_KEY, claims)  # first, as upstream: the PostFilter reads it
        return _UNSUPPORTED if claims else SKIP

    async def post_filter(self, handle: FrameworkHandle, state: CycleState, pod: PodInfo,
                          snapshot: Snapshot, diagnosis: FitError
                          ) -> tuple[PostFilterResult | None, Status]:
        """dynamicresources.go PostFilter: an error when PreFilter never ran; otherwise
        nothing to deallocate (polsched allocates no claims): Unschedulable, no reason,
        and the next PostFilter plugin runs."""
        if state.get(STATE_KEY) is None:
            return None, Status.error(ERR_NOT_FOUND)
        return None, Status(Code.UNSCHEDULABLE)

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        # Only reached by a pod without claims whose PreFilter was not run (a what-if).
        return _UNSUPPORTED if pod.spec.get("resourceClaims") else SUCCESS


def new(args: Mapping[str, Any] | None, handle: Handle) -> DynamicResources:
    if args:
        raise ArgsError("", f"{NAME} takes no args; remove them")
    return DynamicResources()


SPEC = PluginSpec(name=NAME, filter=new)
