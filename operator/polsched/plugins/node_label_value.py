"""NodeLabelValue: polsched's own scorer that ranks nodes by the number in one label.

Args `{key: str (required), default: number (default 0), reverse: bool (default false)}`.
The raw score of a node is its label `key` read as a number: an integer or a decimal
("7", "0.5", "1e3"); a node without the label, or whose value is not a finite number,
scores `default`. Scoring never fails a pod.

Normalization is min-max (framework.normalize, after InterPodAffinity): the node with the
lowest value gets 0, the highest 100, the others in proportion; when every node has the
same value (including when none has the label) every node gets 0, i.e. the scorer has no
opinion. `reverse: true` flips it so that the lowest value gets 100. Exact values are used
for normalization; the integer raw score shown by `polsched explain` is the value rounded.
"""

from __future__ import annotations

import itertools
import math
import operator
import re
from collections.abc import Mapping, Sequence
from typing import Any

from polsched.framework.cycle_state import CycleState
from polsched.framework.interfaces import Handle, ScoreExtensions, ScorePlugin
from polsched.framework.normalize import normalize_raw, stash_raw
from polsched.framework.registry import ArgsError, PluginSpec
from polsched.framework.status import SUCCESS, Status
from polsched.framework.types import NodeInfo, PodInfo

NAME = "NodeLabelValue"

# What counts as a number: Python's float() alone would also take "nan", "inf" and
# "1_000", all of which are valid label values but not numbers a user means.
_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
# Label values repeat across nodes (a handful of priorities on thousands of nodes), so
# parsed values are cached by the string; bounded because values come from the cluster.
_CACHE_LIMIT = 4096

_labels = operator.attrgetter("labels")


def parse_number(value: str | None) -> float | None:
    """A label value as a finite number, or None."""
    if value is None or not _NUMBER.fullmatch(value):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


class NodeLabelValue(ScorePlugin, ScoreExtensions):
    NAME = NAME

    def __init__(self, args: Mapping[str, Any]) -> None:
        if not isinstance(args, Mapping):
            raise ArgsError("", "must be an object with key, default and reverse")
        for k in args:
            if k not in ("key", "default", "reverse"):
                raise ArgsError(str(k), "unknown field: NodeLabelValue takes key, default "
                                        "and reverse")
        key = args.get("key")
        if not isinstance(key, str) or not key:
            raise ArgsError("key", "is required: the label whose numeric value is the score")
        default = args.get("default", 0)
        if isinstance(default, bool) or not isinstance(default, int | float) \
                or not math.isfinite(default):
            raise ArgsError("default", "must be a number (the score of a node without a "
                                       "numeric value in the label)")
        reverse = args.get("reverse", False)
        if not isinstance(reverse, bool):
            raise ArgsError("reverse", "must be true or false")
        self.key = key
        self.default = float(default)
        self.reverse = reverse
        self._values: dict[str, float | None] = {}
        # A label value (None: no label) -> the node's raw score, `default` applied: read
        # for every feasible node with C-level lookups (score_nodes).
        self._scores: dict[str | None, float] = {None: self.default}
        # CycleState key for the exact raw scores; per instance, as a policy may list
        # NodeLabelValue more than once.
        self._state_key = f"{NAME}/{id(self)}"

    def value(self, node: NodeInfo) -> float:
        raw = node.labels.get(self.key)
        if raw is None:
            return self.default
        cache = self._values
        if raw in cache:
            number = cache[raw]
        else:
            number = parse_number(raw)
            if len(cache) >= _CACHE_LIMIT:
                cache.clear()
            cache[raw] = number
        return self.default if number is None else number

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        return round(self.value(node))

    def score_nodes(self, state: CycleState, pod: PodInfo,
                    nodes: Sequence[NodeInfo]) -> list[int] | Status:
        # value() for each node, as lookups of its label's value in `_scores`.
        raws = list(map(dict.get, map(_labels, nodes), itertools.repeat(self.key)))
        scores = self._scores
        if not scores.keys() >= set(raws):
            if len(scores) >= _CACHE_LIMIT:
                scores.clear()
                scores[None] = self.default
            for raw in raws:
                if raw not in scores:
                    number = parse_number(raw)
                    scores[raw] = self.default if number is None else number
        return stash_raw(state, self._state_key, list(map(scores.__getitem__, raws)))

    def normalize_score(self, state: CycleState, pod: PodInfo, scores: list[int]) -> Status:
        normalize_raw(state, self._state_key, scores, self.reverse)
        return SUCCESS


def new_scorer(args: Mapping[str, Any], handle: Handle) -> ScorePlugin:
    return NodeLabelValue(args)


SPEC = PluginSpec(NAME, score=new_scorer)
