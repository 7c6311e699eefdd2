"""Min-max normalization for scorers whose raw scores are arbitrary numbers.

kube-scheduler's DefaultNormalizeScore (framework.default_normalize) scales by the maximum
and assumes raw scores >= 0. Scorers that read numbers users chose (a label's value, a
CEL expression) may produce negative or fractional values, so they scale between the
minimum and the maximum instead, as InterPodAffinity's NormalizeScore does
(pkg/scheduler/framework/plugins/interpodaffinity/scoring.go): the lowest raw score gets
MIN_NODE_SCORE, the highest MAX_NODE_SCORE, and when every node has the same raw score
the scorer expresses no preference and every node gets MIN_NODE_SCORE.

Such scorers keep their exact (float) raw scores in the CycleState under their own key
and hand the pipeline rounded integers (what `polsched explain` shows as raw); NormalizeScore
then reads the exact values back. Purely computational.
"""

from __future__ import annotations

from collections.abc import Sequence

from polsched.framework.cycle_state import CycleState
from polsched.framework.interfaces import MAX_NODE_SCORE, MIN_NODE_SCORE


def min_max_normalize(raw: Sequence[float], scores: list[int], reverse: bool = False) -> None:
    """Write the normalized form of `raw` into `scores` (same length), in place. With
    `reverse` the lowest raw score gets MAX_NODE_SCORE."""
    if not raw:
        return
    lo = min(raw)
    hi = max(raw)
    diff = hi - lo
    if diff <= 0:
        for i in range(len(scores)):
            scores[i] = MIN_NODE_SCORE
        return
    # frac = (v - lo) / diff (hi - v with reverse); int() truncates toward zero like
    # InterPodAffinity's int64(fScore).
    if reverse:
        scores[:] = [int(MAX_NODE_SCORE * ((hi - v) / diff)) for v in raw]
    else:
        scores[:] = [int(MAX_NODE_SCORE * ((v - lo) / diff)) for v in raw]


def stash_raw(state: CycleState, key: str, raw: list[float]) -> list[int]:
    """Keep the exact raw scores for normalize_raw and return them rounded for the
    pipeline."""
    state.write(key, raw)
    return list(map(round, raw))


def normalize_raw(state: CycleState, key: str, scores: list[int], reverse: bool = False) -> None:
    """Min-max normalize using the exact raw scores stashed under `key` when they match
    `scores`, else the integers themselves."""
    raw: list[float] | None = state.get(key)
    if raw is None or len(raw) != len(scores):
        raw = [float(s) for s in scores]
    min_max_normalize(raw, scores, reverse)
