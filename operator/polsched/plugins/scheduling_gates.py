"""SchedulingGates: a pod with spec.schedulingGates waits outside the active queue, never
attempted, until its gates are removed (a queue controller such as Kueue lets it go).

Copies kube-scheduler's schedulinggates plugin
(pkg/scheduler/framework/plugins/schedulinggates/scheduling_gates.go), a PreEnqueue plugin
of the default profile. The pod keeps the PodScheduled=False/SchedulingGated condition the
API server set: the scheduler writes nothing for a gated pod.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from polsched.framework import events as ev
from polsched.framework.interfaces import Handle, PreEnqueuePlugin
from polsched.framework.registry import ArgsError, PluginSpec
from polsched.framework.status import SUCCESS, Status
from polsched.framework.types import PodInfo

NAME = "SchedulingGates"


class SchedulingGates(PreEnqueuePlugin, ev.EnqueueExtensions):
    NAME = NAME

    def pre_enqueue(self, pod: PodInfo) -> Status:
        gates = pod.spec.get("schedulingGates")
        if not gates:
            return SUCCESS
        names = " ".join(str(g.get("name", "")) for g in gates if isinstance(g, Mapping))
        # Go's %v of a []string: "[a b]"
        return Status.unresolvable(f"waiting for scheduling gates: [{names}]")

    def events_to_register(self) -> tuple[ev.ClusterEventWithHint, ...]:
        return (ev.event(ev.Resource.TARGET_POD,
                         ev.ActionType.UPDATE_POD_SCHEDULING_GATES_ELIMINATED, ev.queue_always),)


def new(args: Mapping[str, Any] | None, handle: Handle) -> SchedulingGates:
    if args:
        raise ArgsError("", f"{NAME} takes no args; remove them")
    return SchedulingGates()


SPEC = PluginSpec(name=NAME, pre_enqueue=new)
