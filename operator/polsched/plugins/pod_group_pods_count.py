"""PodGroupPodsCount: of the placements a pod group fits in, favour those that hold more
of its members.

Copies kube-scheduler v1.37's podgrouppodscount plugin
(pkg/scheduler/framework/plugins/podgrouppodscount/podgroup_pods_count.go), a
PlacementScore plugin of weight 1 that the default profile runs when the
TopologyAwareWorkloadScheduling gate is on; here the builder (scheduler.pipelines) adds it
when Handle.features has that gate.

ScorePlacement: the group's scheduled members (assumed or bound; of every PodGroup under a
composite group) plus the members placed in the placement. NormalizePlacementScore:
scaled by the highest count to 0..100 (the group's minCount plays no part, so that close
counts get close scores); a highest count of 0 is an error (upstream's text).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from polsched.framework.cycle_state import CycleState
from polsched.framework.interfaces import (
    MAX_NODE_SCORE,
    MIN_NODE_SCORE,
    Handle,
    PlacementScorePlugin,
    PodGroupAssignments,
    PodGroupInfo,
)
from polsched.framework.podgroups import PodGroups
from polsched.framework.registry import ArgsError
from polsched.framework.status import SUCCESS, Status

NAME = "PodGroupPodsCount"
# The weight applyTopologyAwareWorkloadScheduling gives it.
WEIGHT = 1


class PodGroupPodsCount(PlacementScorePlugin):
    NAME = NAME

    def __init__(self, handle: Handle) -> None:
        self._groups: PodGroups | None = handle.pod_groups

    def score_placement(self, state: CycleState, group: PodGroupInfo,
                        placement: PodGroupAssignments) -> tuple[int, Status]:
        # getScheduledPodsCount: every PodGroup's under a composite group.
        groups = self._groups
        scheduled = 0 if groups is None else \
            sum(groups.state(leaf).scheduled_pods_count for leaf in groups.leaves(group.key))
        return scheduled + len(placement.assignments), SUCCESS

    def normalize_placement_scores(self, state: CycleState, group: PodGroupInfo,
                                   scores: list[int]) -> Status | None:
        highest = max(scores, default=0)
        if highest == 0:
            return Status.error("no pods from pod group are assigned to any of the "
                                "candidate placements")
        scores[:] = [MIN_NODE_SCORE + s * (MAX_NODE_SCORE - MIN_NODE_SCORE) // highest
                     for s in scores]
        return SUCCESS


def new(args: Mapping[str, Any] | None, handle: Handle) -> PodGroupPodsCount:
    if args:
        raise ArgsError("", f"{NAME} takes no args; remove them")
    return PodGroupPodsCount(handle)
