"""Shadow policies: a candidate pipeline deciding beside a live one, never binding.

A SchedulingPolicy with `spec.shadowOf: LIVE` is built into a Pipeline by the same
builder as every other policy (scheduler.pipelines.build_pipeline) and attached to LIVE's
scheduler. For each scheduling attempt of LIVE, the engine asks the shadows first, on the
very snapshot the live pipeline then decides on (a cycle does not await between the two
unless a shadow has extenders), and later tells how the attempt ended: bound on a node
(after the Binding succeeded: agreement is with actual binds) or unschedulable. The
shadow's decision is compared then, and counted:

- agreed: the same node, or no node for both;
- differentNode: both found a node, not the same one;
- differentSchedulability: one found a node, the other none.

The last few disagreements are kept with both decisions. Nothing is written anywhere by
this module: the controller puts `ShadowStats.to_status()` in the shadow policy's status.

Cost bound: a shadow decision takes about as long as the live one, so deciding every pod
could halve the live policy's throughput. The shadows of one live scheduler share a
time budget, a token bucket refilled at `budget` seconds per second of wall time (the
share of the process's time shadows may take, 0.2 by default) and holding at most
`BUCKET_SECONDS`. When it is empty the attempt is counted as skipped, not decided. Over
any T seconds the shadows take at most budget x T + BUCKET_SECONDS, so a saturated
scheduler loses at most about `budget` of its throughput, and one that has idle time
(the common case) has every attempt shadowed.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from polsched.framework.diagnosis import PipelineError
from polsched.framework.interfaces import Extender, Handle
from polsched.framework.runtime import Pipeline
from polsched.framework.types import PodInfo, Snapshot
from polsched.scheduler.algorithm import schedule_pod
from polsched.scheduler.pipelines import build_pipeline

if TYPE_CHECKING:
    from polsched.api.model import Policy

DEFAULT_BUDGET = 0.2
# The most the shadows may take in one burst: over any stretch of T seconds they take at
# most budget x T + BUCKET_SECONDS.
BUCKET_SECONDS = 0.2
LAST_DISAGREEMENTS = 5
UNSCHEDULABLE = "unschedulable"


@dataclass
class ShadowStats:
    of: str
    decisions: int = 0
    agreed: int = 0
    different_node: int = 0
    different_schedulability: int = 0
    skipped: int = 0
    errors: int = 0
    last: deque[dict[str, str]] = field(
        default_factory=lambda: deque(maxlen=LAST_DISAGREEMENTS))

    def to_status(self) -> dict[str, Any]:
        return {"of": self.of, "decisions": self.decisions, "agreed": self.agreed,
                "differentNode": self.different_node,
                "differentSchedulability": self.different_schedulability,
                "skipped": self.skipped, "errors": self.errors,
                "lastDisagreements": list(self.last)}


class Shadow:
    """One shadow policy attached to a live scheduler."""

    def __init__(self, policy: Policy, live_policy: str, handle: Handle | None = None,
                 extenders: Sequence[Extender] = ()) -> None:
        self.policy = policy
        # The live scheduler's Handle (the engine's: the cache's listers), as the engine
        # builds every pipeline.
        self.pipeline: Pipeline = build_pipeline(policy, handle, extenders)
        self.stats = ShadowStats(live_policy)

    def compare(self, pod: PodInfo, shadow_node: str | None, live_node: str | None,
                when: str) -> None:
        s = self.stats
        s.decisions += 1
        if shadow_node == live_node:
            s.agreed += 1
            return
        if shadow_node is not None and live_node is not None:
            s.different_node += 1
        else:
            s.different_schedulability += 1
        s.last.append({"pod": pod.key, "live": live_node or UNSCHEDULABLE,
                       "shadow": shadow_node or UNSCHEDULABLE, "time": when})


# What `decide` hands back to the engine for one attempt: per shadow, its node (None: no
# node fits), or the shadow is absent when it skipped or failed.
Verdicts = dict[Shadow, str | None]


class ShadowSet:
    """The shadows of one live scheduler and their shared time budget."""

    def __init__(self, budget: float = DEFAULT_BUDGET,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.shadows: dict[str, Shadow] = {}  # shadow policy name -> Shadow
        self.budget = budget
        self._clock = clock
        self._credit = BUCKET_SECONDS
        self._refilled = clock()
        # pod key -> the verdicts of its attempt, until the bind ends it
        self._waiting: dict[str, Verdicts] = {}

    def __bool__(self) -> bool:
        return bool(self.shadows)

    def _refill(self, now: float) -> None:
        self._credit = min(BUCKET_SECONDS, self._credit + (now - self._refilled) * self.budget)
        self._refilled = now

    async def decide(self, pod: PodInfo, snapshot: Snapshot) -> Verdicts:
        """Each shadow's decision for `pod` on `snapshot`, within the budget."""
        verdicts: Verdicts = {}
        for shadow in self.shadows.values():
            now = self._clock()
            self._refill(now)
            if self._credit <= 0:
                shadow.stats.skipped += 1
                continue
            try:
                result = await schedule_pod(shadow.pipeline, pod, snapshot)
            except PipelineError:
                shadow.stats.errors += 1
                continue
            finally:
                self._credit -= self._clock() - now
            verdicts[shadow] = result.node
        return verdicts

    def unschedulable(self, pod: PodInfo, verdicts: Verdicts, when: str) -> None:
        for shadow, node in verdicts.items():
            if shadow.policy.name in self.shadows:
                shadow.compare(pod, node, None, when)

    def assumed(self, pod: PodInfo, verdicts: Verdicts) -> None:
        """The live scheduler is binding `pod`: compare when the bind ends."""
        if verdicts:
            self._waiting[pod.key] = verdicts

    def bind_ended(self, pod: PodInfo, node: str | None, when: str) -> None:
        """The bind succeeded on `node`, or failed (None: not compared)."""
        verdicts = self._waiting.pop(pod.key, None)
        if verdicts is None or node is None:
            return
        for shadow, shadow_node in verdicts.items():
            if shadow.policy.name in self.shadows:
                shadow.compare(pod, shadow_node, node, when)
