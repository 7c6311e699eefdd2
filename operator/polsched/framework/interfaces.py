"""Plugin base classes, one per extension point, as kube-scheduler's framework/interface.go.

A plugin subclasses the points it implements. A plugin instance is built once per policy
entry when the policy loads (args validated then) and is called for every pod; it reads
the snapshot it is given and never calls the API server. Scores are 0..MAX_NODE_SCORE
after NormalizeScore.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from polsched.framework.cycle_state import CycleState
from polsched.framework.status import SUCCESS, Status
from polsched.framework.types import NodeInfo, PodInfo, Snapshot

MAX_NODE_SCORE = 100
MIN_NODE_SCORE = 0


class Plugin:
    NAME: ClassVar[str] = ""

    @property
    def name(self) -> str:
        return self.NAME


class PreFilterPlugin(Plugin):
    def pre_filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> Status:
        """Compute what Filter needs for this pod into `state`. Return Skip when Filter has
        nothing to check for this pod, Unschedulable to reject the pod on every node."""
        raise NotImplementedError


class FilterPlugin(Plugin):
    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """Success when the pod fits the node; otherwise Unschedulable (or
        UnschedulableAndUnresolvable) with kube-scheduler's reason strings."""
        raise NotImplementedError


class PreScorePlugin(Plugin):
    def pre_score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo],
                  snapshot: Snapshot) -> Status:
        """Compute what Score needs; Skip when Score has nothing to do for this pod."""
        raise NotImplementedError


class ScorePlugin(Plugin):
    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        """The raw score of one feasible node."""
        raise NotImplementedError

    def score_nodes(self, state: CycleState, pod: PodInfo,
                    nodes: Sequence[NodeInfo]) -> list[int] | Status:
        """Raw scores of the feasible nodes, in order. Override for a faster batch form or
        to return an error Status."""
        score = self.score
        return [score(state, pod, n) for n in nodes]


class ScoreExtensions:
    """Optional on a ScorePlugin: map raw scores into 0..MAX_NODE_SCORE, in place."""

    def normalize_score(self, state: CycleState, pod: PodInfo, scores: list[int]) -> Status:
        raise NotImplementedError


@dataclass(frozen=True)
class Handle:
    """What a plugin factory may know about the scheduler it is built for."""

    # Resources NodeResourcesFit ignores (extenders' managedResources with
    # ignoredByScheduler), see kube-scheduler's NodeResourcesFitArgs.IgnoredResources.
    ignored_resources: frozenset[str] = frozenset()
    extra: Mapping[str, Any] = field(default_factory=dict)


def default_normalize(scores: list[int], reverse: bool = False) -> Status:
    """helper.DefaultNormalizeScore: scale to 0..MAX_NODE_SCORE by the maximum; reverse
    flips so that the lowest raw score gets the highest normalized one."""
    max_count = max(scores, default=0)
    if max_count == 0:
        if reverse:
            for i in range(len(scores)):
                scores[i] = MAX_NODE_SCORE
        return SUCCESS
    for i, s in enumerate(scores):
        s = MAX_NODE_SCORE * s // max_count
        scores[i] = MAX_NODE_SCORE - s if reverse else s
    return SUCCESS
