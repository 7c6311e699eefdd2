"""OpportunisticBatching (KEP-5598, Beta and on by default in v1.37), as kube-scheduler's
pkg/scheduler/framework/runtime/batch.go.

After a full search, the feasible nodes the pod did not get are kept, best first, with the
pod's signature (Pipeline.sign_pod). The next pod of the same profile, popped right after
it (the next scheduling cycle), with the same signature and within MAX_BATCH_AGE, gets a
hint: the last chosen node is filtered again for it and, when it still fits, re-scored
against the kept nodes (PreScore over all of them, its raw scores, then NormalizeScore and
the weights over all of them); the best of them is the hint. The search then tries the
hint alone, as a nominated node, and takes it when it fits: no other node is filtered
or scored and the round-robin start does not move, as upstream.

Ties among the kept nodes are broken uniformly at random when one is taken (the pipeline's
rng), as the first pick of every search (algorithm.select_host).

One per profile and pipeline (a hot reload starts a new one, as upstream's new framework);
the engine's scheduling loop is its only user. Explain, simulate and pod-group cycles do
not batch.
"""

from __future__ import annotations

import bisect
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from polsched.framework import signers
from polsched.framework.cycle_state import CycleState
from polsched.framework.diagnosis import PipelineError
from polsched.framework.runtime import Pipeline, PluginSet
from polsched.framework.types import NodeInfo, PodInfo, Snapshot
from polsched.scheduler import metrics

# maxBatchAge: a kept ranking older than this is not used (many alike pods in a row, or a
# long wait between two).
MAX_BATCH_AGE = 0.5

# Results of GetNodeHint and StoreScheduleResults (metrics.BatchAttempt*).
NO_HINT = "no_hint"
HINT_USED = "hint_used"
HINT_NOT_USED = "hint_not_used"
# Why the kept ranking could not be used (metrics.BatchFlush*).
FLUSH_POD_FAILED = "pod_failed"
FLUSH_POD_SKIPPED = "pod_skipped"
FLUSH_POD_NOMINATED = "pod_nominated"
FLUSH_NODE_MISSING = "node_missing"
FLUSH_EMPTY_LIST = "empty_list"
FLUSH_EXPIRED = "expired"
FLUSH_POD_INCOMPATIBLE = "pod_incompatible"
FLUSH_POD_NOT_BATCHABLE = "pod_not_batchable"
FLUSH_FILTER_ERROR = "filter_error"
FLUSH_PRESCORE_ERROR = "prescore_error"
FLUSH_RESCORE_ERROR = "rescore_error"
FLUSH_NORMALIZE_ERROR = "normalize_error"


class SortedNodes:
    """framework.SortedScoredNodes: scored nodes, the best first, with each node's raw
    scores per scorer (NodePluginScores.RawScores) for a later NormalizeScore. Sorted when
    first read: a search stores its ranking for every pod, most are never read."""

    __slots__ = ("_exclude", "_keys", "_sorted", "last_ties", "names", "raw", "totals")

    def __init__(self, names: Sequence[str], totals: Sequence[int],
                 raw: dict[str, list[int]], exclude: int = -1) -> None:
        """`exclude`: the index of a node left out (the one the search chose)."""
        self.names: list[str] = list(names)
        self.totals = totals
        self.raw = raw
        self._exclude = exclude
        self._keys: list[int] = []
        self._sorted = False
        # How many nodes tied for the last node popped.
        self.last_ties = 0

    def __len__(self) -> int:
        return len(self.names) - (self._exclude >= 0 and not self._sorted)

    def _sort(self) -> None:
        totals, ex = self.totals, self._exclude
        order = [i for i in sorted(range(len(self.names)), key=totals.__getitem__,
                                   reverse=True) if i != ex]
        names = self.names
        self.names = [names[i] for i in order]
        # Negated totals, ascending: the best are a prefix that bisect finds.
        self._keys = [-totals[i] for i in order]
        self.raw = {name: [scores[i] for i in order] for name, scores in self.raw.items()}
        self._sorted = True

    def sorted_names(self) -> list[str]:
        if not self._sorted:
            self._sort()
        return self.names

    def pop(self, rng: random.Random) -> str:
        """The best node, taken out; uniformly at random among equal totals."""
        if not self._sorted:
            self._sort()
        keys = self._keys
        ties = self.last_ties = bisect.bisect_right(keys, keys[0])
        i = rng.randrange(ties) if ties > 1 else 0
        del keys[i]
        for scores in self.raw.values():
            del scores[i]
        return self.names.pop(i)


@dataclass
class _BatchState:
    signature: str
    nodes: SortedNodes
    created: float


@dataclass
class _Cycle:
    count: int = 0
    chosen: str = ""
    succeeded: bool = False


def new_batch(pipeline: Pipeline, profile: str) -> OpportunisticBatch | None:
    """The OpportunisticBatch a profile runs `pipeline` with; None when the gate is off
    or the pipeline signs no pod (an extender, a plugin that cannot sign, a `when` entry,
    PodTopologySpread with default constraints: the default policy). Upstream still runs
    the batch then, to count a no_hint and a pod_not_batchable flush per pod; polsched
    leaves its batch metrics at zero instead of paying for them on every pod. The engine
    (Profile.batch_for), `polsched simulate` and bench/micro.py all make theirs here."""
    if signers.OPPORTUNISTIC_BATCHING not in pipeline.features or not pipeline.signable:
        return None
    return OpportunisticBatch(pipeline, profile)


class OpportunisticBatch:
    """The ranking kept from one search for the next pod with the same signature."""

    def __init__(self, pipeline: Pipeline, profile: str,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.pipeline = pipeline
        self.profile = profile
        self.clock = clock
        self._state: _BatchState | None = None
        self._last = _Cycle()
        # The pods placed on their hint (upstream's batchedPods, for tests).
        self.batched_pods = 0
        # How many kept nodes tied for the last hint.
        self.hint_ties = 0

    # -- GetNodeHint ---------------------------------------------------------------------
    def get_node_hint(self, pod: PodInfo, signature: str | None, cycle: int,
                      pre_filtered: Callable[[], CycleState | None], snapshot: Snapshot,
                      plugins: PluginSet) -> tuple[str, CycleState | None]:
        """A node for `pod` from the kept ranking ("" when there is none), and the cycle's
        state when PreFilter ran. `pre_filtered` runs PreFilter on the cycle's state (None
        when it rejects the pod); it is called only when the kept ranking can serve the
        pod, so a pod that cannot use it is searched with one PreFilter, as without a
        batch (upstream runs PreFilter first, then GetNodeHint: the same decisions)."""
        began = time.perf_counter()
        hint = ""
        state = None
        if self._compatible(pod, signature, cycle):
            state = pre_filtered()
            if state is not None and self._refresh(pod, state, snapshot, plugins):
                assert self._state is not None
                hint = self._state.nodes.pop(self.pipeline.rng)
                self.hint_ties = self._state.nodes.last_ties
        if not hint:
            metrics.batch_attempt(self.profile, NO_HINT)
        metrics.node_hint(self.profile, bool(hint), time.perf_counter() - began)
        return hint, state

    def _flush(self, reason: str) -> bool:
        """logUnusableState: counted; the state is replaced at the next store."""
        metrics.batch_flushed(self.profile, reason)
        return False

    def _compatible(self, pod: PodInfo, signature: str | None, cycle: int) -> bool:
        """batchStateCompatible."""
        st = self._state
        if st is None or not st.nodes:
            return False
        if cycle != self._last.count + 1:  # another pod's cycle came between
            return self._flush(FLUSH_POD_SKIPPED)
        if not self._last.succeeded:
            return self._flush(FLUSH_POD_FAILED)
        nominator = self.pipeline.nominator
        if pod.nominated_node or (nominator is not None and nominator.node_of(pod.key)):
            return self._flush(FLUSH_POD_NOMINATED)
        if signature is None or signature != st.signature:
            return self._flush(FLUSH_POD_INCOMPATIBLE)
        if self.clock() > st.created + MAX_BATCH_AGE:
            return self._flush(FLUSH_EXPIRED)
        return True

    def _refresh(self, pod: PodInfo, state: CycleState, snapshot: Snapshot,
                 plugins: PluginSet) -> bool:
        """refreshHintCandidates: the last chosen node, when it still passes the filters,
        is re-scored and competes with the kept nodes again."""
        last = snapshot.get(self._last.chosen)
        if last is None:
            return self._flush(FLUSH_NODE_MISSING)
        try:
            st = self.pipeline.run_filter_plugins(state, pod, last, plugins)
        except PipelineError:
            return self._flush(FLUSH_FILTER_ERROR)
        if st.ok:
            return self._rescore(pod, state, last, snapshot, plugins)
        return True

    def _rescore(self, pod: PodInfo, state: CycleState, last: NodeInfo, snapshot: Snapshot,
                 plugins: PluginSet) -> bool:
        """rescoreHintedNode: PreScore over the kept nodes and the last chosen one, that
        node's raw scores, NormalizeScore and the weights over all of them."""
        assert self._state is not None
        began = time.perf_counter()
        try:
            kept = self._state.nodes
            names = kept.sorted_names()
            get = snapshot.get
            nodes: list[NodeInfo] = []
            for name in names:
                node = get(name)
                if node is None:
                    return self._flush(FLUSH_NODE_MISSING)
                nodes.append(node)
            nodes.append(last)
            # A clone, so that the re-scoring's PreScore leaves the cycle's state as it was.
            rescore_state = state.clone()
            pl = self.pipeline
            try:
                pl.run_pre_score_plugins(rescore_state, pod, nodes, snapshot, plugins)
            except PipelineError:
                return self._flush(FLUSH_PRESCORE_ERROR)
            try:
                fresh = pl.run_raw_score_plugins(rescore_state, pod, last, plugins)
            except PipelineError:
                return self._flush(FLUSH_RESCORE_ERROR)
            n = len(kept)
            raw = {name: [*(kept.raw.get(name) or [0] * n), fresh.get(name, 0)]
                   for name in {*kept.raw, *fresh}}
            try:
                totals = pl.normalize_scores(rescore_state, pod, raw, n + 1, plugins)
            except PipelineError:
                return self._flush(FLUSH_NORMALIZE_ERROR)
            self._state.nodes = SortedNodes([*names, last.name], totals, raw)
            return True
        finally:
            metrics.batch_rescore(self.profile, time.perf_counter() - began)

    # -- StoreScheduleResults --------------------------------------------------------------
    def store_schedule_results(self, signature: str | None, hinted: str, chosen: str,
                               others: SortedNodes | None, cycle: int) -> None:
        """What a search decided: `chosen` for the pod of `cycle`, `hinted` the hint it
        had ("" without), `others` the feasible nodes it did not choose (None when it
        found one)."""
        began = time.perf_counter()
        self._last = _Cycle(cycle, chosen, True)
        if hinted == chosen:
            metrics.batch_attempt(self.profile, HINT_USED)
            self.batched_pods += 1
        else:
            if hinted:
                metrics.batch_attempt(self.profile, HINT_NOT_USED)
            if signature is not None and others is not None and len(others) > 0:
                self._state = _BatchState(signature, others, self.clock())
            else:
                self._flush(FLUSH_EMPTY_LIST if others is None or not others
                            else FLUSH_POD_NOT_BATCHABLE)
                self._state = None
        metrics.store_schedule_results(self.profile, time.perf_counter() - began)
