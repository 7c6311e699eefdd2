"""The pipeline: one policy's filters, scorers and extenders, run for one pod.

It follows kube-scheduler's schedulePod (pkg/scheduler/schedule_one.go): PreFilter,
Filter over the nodes starting where the previous cycle stopped until
numFeasibleNodesToFind feasible nodes are found, filter extenders, then PreScore, Score,
NormalizeScore, weights, prioritize extenders, and a random pick among the best.

A Pipeline is immutable once built; hot reload builds a new one and swaps the reference.
The only per-cycle mutable state is the round-robin start index.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol, TypeVar

from polsched.framework.cycle_state import CycleState
from polsched.framework.interfaces import (
    MAX_NODE_SCORE,
    FilterPlugin,
    PreFilterPlugin,
    PreFilterResult,
    PreScorePlugin,
    ScoreExtensions,
    ScorePlugin,
)
from polsched.framework.selectors import Matcher
from polsched.framework.status import SUCCESS, Code, Status
from polsched.framework.types import NodeInfo, PodInfo, Snapshot

_E = TypeVar("_E", "FilterEntry", "ScoreEntry")

MIN_FEASIBLE_NODES_TO_FIND = 100
MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND = 5
# k8s.io/kube-scheduler/extender/v1: MaxExtenderPriority
MAX_EXTENDER_PRIORITY = 10
NO_NODE_AVAILABLE = "0/{} nodes are available"
# schedule_one.go ErrNoNodesAvailable: what the event says when the cluster has no nodes.
NO_NODES_AVAILABLE = "no nodes available to schedule pods"
# apimachinery validation.NoteLengthLimit: events carry at most this many characters.
NOTE_LENGTH_LIMIT = 1024


def num_feasible_nodes_to_find(percentage: int, num_all_nodes: int) -> int:
    """schedule_one.go numFeasibleNodesToFind; percentage 0 means adaptive."""
    if num_all_nodes < MIN_FEASIBLE_NODES_TO_FIND:
        return num_all_nodes
    if percentage == 0:
        percentage = 50 - num_all_nodes // 125
        if percentage < MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND:
            percentage = MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND
    n = num_all_nodes * percentage // 100
    return max(n, MIN_FEASIBLE_NODES_TO_FIND)


def truncate_message(message: str) -> str:
    """schedule_one.go truncateMessage."""
    if len(message) <= NOTE_LENGTH_LIMIT:
        return message
    suffix = " ..."
    return message[: NOTE_LENGTH_LIMIT - len(suffix)] + suffix


@dataclass(frozen=True, eq=False)
class FilterEntry:
    plugin: FilterPlugin
    # when.podSelector: the entry applies only to pods whose labels match.
    when: Matcher | None = None
    # Unique within the pipeline: the plugin name, "Expression#2" for a second entry of
    # the same plugin. Reasons, skips and explanations are keyed by it.
    label: str = ""

    @property
    def name(self) -> str:
        return self.label or self.plugin.name


@dataclass(frozen=True, eq=False)
class ScoreEntry:
    plugin: ScorePlugin
    weight: int
    when: Matcher | None = None
    label: str = ""

    @property
    def name(self) -> str:
        return self.label or self.plugin.name


def _labelled(entries: Sequence[_E]) -> tuple[_E, ...]:
    seen: dict[str, int] = {}
    out = []
    for e in entries:
        n = e.plugin.name
        seen[n] = seen.get(n, 0) + 1
        out.append(replace(e, label=n if seen[n] == 1 else f"{n}#{seen[n]}"))
    return tuple(out)


class Extender(Protocol):
    """What the pipeline needs of an HTTP extender (see polsched.extender)."""

    @property
    def name(self) -> str: ...
    @property
    def ignorable(self) -> bool: ...
    @property
    def weight(self) -> int: ...
    def is_interested(self, pod: PodInfo) -> bool: ...
    def is_filter(self) -> bool: ...
    def is_prioritizer(self) -> bool: ...
    async def filter(self, pod: PodInfo, nodes: Sequence[NodeInfo]
                     ) -> tuple[list[NodeInfo], dict[str, str], dict[str, str]]:
        """Feasible nodes, then failed and failed-and-unresolvable node name -> reason.
        Raises ExtenderError on transport or protocol errors."""
    async def prioritize(self, pod: PodInfo, nodes: Sequence[NodeInfo]) -> dict[str, int]:
        """Host -> score in 0..MAX_EXTENDER_PRIORITY."""


class ExtenderError(Exception):
    pass


@dataclass
class FitError:
    """No node fits: framework.FitError, with its Error() text as `message`."""

    num_all_nodes: int
    node_statuses: dict[str, Status] = field(default_factory=dict)
    pre_filter_msg: str = ""
    post_filter_msg: str = ""

    def reason_histogram(self) -> list[str]:
        counts: dict[str, int] = {}
        for st in self.node_statuses.values():
            for r in st.reasons:
                counts[r] = counts.get(r, 0) + 1
        return sorted(f"{n} {r}" for r, n in counts.items())

    @property
    def message(self) -> str:
        if self.num_all_nodes == 0:
            return NO_NODES_AVAILABLE
        msg = NO_NODE_AVAILABLE.format(self.num_all_nodes) + ":"
        if self.pre_filter_msg:
            msg += f" {self.pre_filter_msg}."
        else:
            hist = self.reason_histogram()
            if hist:
                msg += f" {', '.join(hist)}."
        if self.post_filter_msg:
            # The PostFilter message carries its own period (types.go FitError.Error).
            msg += f" {self.post_filter_msg}"
        return msg


@dataclass
class NodeScore:
    """One feasible node's scores, for `polsched explain`: plugin -> (raw, normalized,
    weighted), extender name -> weighted."""

    node: str
    total: int = 0
    plugins: dict[str, tuple[int, int, int]] = field(default_factory=dict)


@dataclass
class Explanation:
    filters: dict[str, Status] = field(default_factory=dict)   # node -> first failing status
    scores: list[NodeScore] = field(default_factory=list)


@dataclass
class ScheduleResult:
    node: str | None
    evaluated_nodes: int = 0
    feasible_nodes: int = 0
    fit_error: FitError | None = None
    # The scorer that contributed most to the winner's lead, for the demo's table.
    deciding_scorer: str = ""
    explanation: Explanation | None = None


class Pipeline:
    def __init__(
        self,
        filters: Sequence[FilterEntry],
        scorers: Sequence[ScoreEntry],
        extenders: Sequence[Extender] = (),
        percentage_of_nodes_to_score: int = 0,
        post_filter: PostFilter | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.filters = _labelled(filters)
        self.scorers = _labelled(scorers)
        # Ignorable extenders go last (upstream: scheduler.go buildExtenders).
        self.extenders = tuple(sorted(extenders, key=lambda e: e.ignorable))
        self.percentage_of_nodes_to_score = percentage_of_nodes_to_score
        self.post_filter = post_filter
        self._rng = rng or random.Random()
        self._next_start = 0

    # -- description -----------------------------------------------------------------
    def describe(self) -> dict[str, list[str]]:
        """What status.pipeline reports."""
        return {
            "filters": [f.name for f in self.filters],
            "scorers": [f"{s.name}:{s.weight}" for s in self.scorers],
            "extenders": [e.name for e in self.extenders],
        }

    # -- the cycle ---------------------------------------------------------------------
    def _entries_for(self, pod: PodInfo) -> tuple[list[FilterEntry], list[ScoreEntry]]:
        labels = pod.labels
        fs = [f for f in self.filters if f.when is None or f.when(labels)]
        ss = [s for s in self.scorers if s.when is None or s.when(labels)]
        return fs, ss

    def run_filters(self, state: CycleState, pod: PodInfo, node: NodeInfo,
                    filters: Sequence[FilterEntry]) -> Status:
        """All filters on one node; the first rejection wins (RunFilterPlugins)."""
        skip = state.skip_filter
        for f in filters:
            if f.name in skip:
                continue
            st = f.plugin.filter(state, pod, node)
            if st.code is not Code.SUCCESS:
                return st.with_plugin(f.name)
        return SUCCESS

    def run_pre_filters(self, state: CycleState, pod: PodInfo, snapshot: Snapshot,
                        filters: Sequence[FilterEntry]) -> Status:
        """PreFilter of every filter that has one; Skip marks the plugin skipped for this
        cycle; the first rejection is returned (RunPreFilterPlugins)."""
        for f in filters:
            if isinstance(f.plugin, PreFilterPlugin):
                st = f.plugin.pre_filter(state, pod, snapshot)
                if isinstance(st, PreFilterResult):
                    # Not yet narrowing the nodes Filter visits: the Filters still decide.
                    continue
                if st.code is Code.SKIP:
                    state.skip_filter.add(f.name)
                elif st.code is not Code.SUCCESS:
                    return st.with_plugin(f.name)
        return Status()

    def still_fits(self, pod: PodInfo, snapshot: Snapshot, node_name: str) -> bool:
        """PreFilter, then every filter on one node, against the snapshot as it is now: the
        check before assume after a cycle awaited extenders and the cluster moved on."""
        node = snapshot.get(node_name)
        if node is None:
            return False
        state = CycleState()
        filters, _ = self._entries_for(pod)
        if not self.run_pre_filters(state, pod, snapshot, filters).ok:
            return False
        return self.run_filters(state, pod, node, filters).ok

    def find_feasible(self, state: CycleState, pod: PodInfo, snapshot: Snapshot,
                      filters: Sequence[FilterEntry], explain: bool = False,
                      ) -> tuple[list[NodeInfo], FitError]:
        nodes = snapshot.nodes
        n_all = len(nodes)
        diagnosis = FitError(n_all)
        st = self.run_pre_filters(state, pod, snapshot, filters)
        if not st.ok:
            diagnosis.pre_filter_msg = st.message
            diagnosis.node_statuses = {n.name: st for n in nodes}
            return [], diagnosis
        to_find = n_all if explain else num_feasible_nodes_to_find(
            self.percentage_of_nodes_to_score, n_all)
        feasible: list[NodeInfo] = []
        statuses = diagnosis.node_statuses
        start = self._next_start % n_all if n_all else 0
        processed = 0
        # run_filters inlined: this loop runs per pod x node, so the skips and the entries'
        # names are resolved once per pod, not per node.
        skip = state.skip_filter
        active = [(f.name, f.plugin.filter) for f in filters if f.name not in skip]
        success = Code.SUCCESS
        for node in (nodes[start:] + nodes[:start]) if start else nodes:
            processed += 1
            for name, fn in active:
                st = fn(state, pod, node)
                if st.code is not success:
                    statuses[node.name] = st.with_plugin(name)
                    break
            else:
                feasible.append(node)
                if len(feasible) >= to_find:
                    break
        if n_all:
            self._next_start = (start + processed) % n_all
        return feasible, diagnosis

    def score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo],
              snapshot: Snapshot, scorers: Sequence[ScoreEntry], explain: bool = False,
              ) -> tuple[list[int], dict[str, list[int]]]:
        """Weighted totals per node (same order) and, per scorer, its weighted scores."""
        totals = [0] * len(nodes)
        per_plugin: dict[str, list[int]] = {}
        for s in scorers:
            if isinstance(s.plugin, PreScorePlugin):
                st = s.plugin.pre_score(state, pod, nodes, snapshot)
                if st.code is Code.SKIP:
                    state.skip_score.add(s.name)
                elif st.code is not Code.SUCCESS:
                    raise PipelineError(st.with_plugin(s.name))
        for s in scorers:
            if s.name in state.skip_score:
                continue
            raw = s.plugin.score_nodes(state, pod, nodes)
            if isinstance(raw, Status):
                raise PipelineError(raw.with_plugin(s.name))
            raw_copy = list(raw) if explain else raw
            normalized = raw if not explain else list(raw)
            if isinstance(s.plugin, ScoreExtensions):
                st = s.plugin.normalize_score(state, pod, normalized)
                if not st.ok:
                    raise PipelineError(st.with_plugin(s.name))
            w = s.weight
            weighted = [v * w for v in normalized]
            totals = [t + v for t, v in zip(totals, weighted, strict=True)]
            if explain:
                per_plugin[s.name + "\x00raw"] = raw_copy
                per_plugin[s.name + "\x00norm"] = normalized
            per_plugin[s.name] = weighted
        return totals, per_plugin

    async def schedule(self, pod: PodInfo, snapshot: Snapshot,
                       explain: bool = False) -> ScheduleResult:
        """Decide a node for `pod`, or say why none fits. Raises PipelineError when a plugin
        or a non-ignorable extender fails (the pod is retried with backoff)."""
        n_all = len(snapshot.nodes)
        if n_all == 0:
            return ScheduleResult(None, fit_error=FitError(0))
        state = CycleState()
        filters, scorers = self._entries_for(pod)
        feasible, diagnosis = self.find_feasible(state, pod, snapshot, filters, explain)
        evaluated = len(feasible) + len(diagnosis.node_statuses)
        if feasible and self.extenders:
            feasible = await self._extender_filter(pod, feasible, diagnosis)
        explanation = Explanation(filters=dict(diagnosis.node_statuses)) if explain else None
        if not feasible:
            # Upstream runs PostFilter after a PreFilter rejection too.
            if self.post_filter is not None:
                diagnosis.post_filter_msg = self.post_filter(pod, snapshot, diagnosis)
            return ScheduleResult(None, evaluated, 0, diagnosis, explanation=explanation)
        if len(feasible) == 1 and not explain:
            return ScheduleResult(feasible[0].name, evaluated, 1)
        totals, per_plugin = self.score(state, pod, feasible, snapshot, scorers, explain)
        if self.extenders:
            await self._extender_prioritize(pod, feasible, totals, per_plugin)
        best = self._select(totals)
        result = ScheduleResult(feasible[best].name, evaluated, len(feasible))
        result.deciding_scorer = _deciding_scorer(best, totals, per_plugin)
        if explanation is not None:
            for i, node in enumerate(feasible):
                ns = NodeScore(node.name, totals[i])
                for s in scorers:
                    if s.name in per_plugin:
                        ns.plugins[s.name] = (per_plugin[s.name + "\x00raw"][i],
                                              per_plugin[s.name + "\x00norm"][i],
                                              per_plugin[s.name][i])
                for e in self.extenders:
                    if e.name in per_plugin:
                        ns.plugins[e.name] = (0, 0, per_plugin[e.name][i])
                explanation.scores.append(ns)
            result.explanation = explanation
        return result

    def _select(self, totals: list[int]) -> int:
        """selectHost: the highest total; ties broken uniformly at random.

        Upstream draws once per tie as it goes (reservoir sampling); one draw among the
        counted ties is the same uniform choice, with list methods instead of a Python loop
        and a random call per tie (most nodes tie when pods are alike)."""
        best = max(totals)
        ties = totals.count(best)
        i = totals.index(best)
        if ties > 1:
            for _ in range(self._rng.randrange(ties)):
                i = totals.index(best, i + 1)
        return i

    async def _extender_filter(self, pod: PodInfo, feasible: list[NodeInfo],
                               diagnosis: FitError) -> list[NodeInfo]:
        """findNodesThatPassExtenders: each interested filter extender in turn."""
        for ext in self.extenders:
            if not feasible:
                break
            if not ext.is_filter() or not ext.is_interested(pod):
                continue
            try:
                feasible, failed, unresolvable = await ext.filter(pod, feasible)
            except ExtenderError as err:
                if ext.ignorable:
                    continue
                raise PipelineError(Status.error(str(err)).with_plugin(ext.name)) from err
            statuses = diagnosis.node_statuses
            for name, reason in unresolvable.items():
                statuses[name] = Status.unresolvable(reason).with_plugin(ext.name)
            for name, reason in failed.items():
                if name not in unresolvable:
                    statuses[name] = Status.unschedulable(reason).with_plugin(ext.name)
        return feasible

    async def _extender_prioritize(self, pod: PodInfo, nodes: list[NodeInfo],
                                   totals: list[int], per_plugin: dict[str, list[int]]) -> None:
        """Prioritize extenders run concurrently; their errors are ignored (upstream)."""
        import asyncio

        exts = [e for e in self.extenders if e.is_prioritizer() and e.is_interested(pod)]
        if not exts:
            return
        results = await asyncio.gather(*(e.prioritize(pod, nodes) for e in exts),
                                       return_exceptions=True)
        index = {n.name: i for i, n in enumerate(nodes)}
        for ext, scores in zip(exts, results, strict=True):
            if isinstance(scores, BaseException):
                continue
            weighted = [0] * len(nodes)
            for host, score in scores.items():
                i = index.get(host)
                if i is not None:
                    v = score * ext.weight * (MAX_NODE_SCORE // MAX_EXTENDER_PRIORITY)
                    weighted[i] = v
                    totals[i] += v
            per_plugin[ext.name] = weighted


class PostFilter(Protocol):
    def __call__(self, pod: PodInfo, snapshot: Snapshot, diagnosis: FitError) -> str: ...


class PipelineError(Exception):
    """A plugin or a non-ignorable extender failed: the pod is retried with backoff."""

    def __init__(self, status: Status) -> None:
        super().__init__(f"running {status.plugin!r}: {status.message}" if status.plugin
                         else status.message)
        self.status = status


def _deciding_scorer(best: int, totals: list[int], per_plugin: Mapping[str, list[int]]) -> str:
    """The scorer whose weighted score put the winner furthest ahead of the runner-up."""
    if len(totals) < 2:
        return ""
    others = list(totals)
    others[best] = min(totals) - 1  # the first highest of the others, without a key function
    runner = others.index(max(others))
    lead = {name: s[best] - s[runner] for name, s in per_plugin.items() if "\x00" not in name}
    name, margin = max(lead.items(), key=lambda kv: kv[1], default=("", 0))
    return name if margin > 0 else ""
