"""PodTopologySpread's PreScore, Score and NormalizeScore, for ScheduleAnyway
constraints (upstream's scoring.go): PreScore counts matching pods per domain once per
pod (kubernetes.io/hostname constraints are counted per node in Score); a node scores
lower the more matching pods its domains hold, weighted by the log of the domains' count.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import cast

from polsched.framework.cycle_state import CycleState
from polsched.framework.interfaces import (
    MAX_NODE_SCORE,
    PreScorePlugin,
    ScoreExtensions,
    ScorePlugin,
)
from polsched.framework.selectors import SelectorError
from polsched.framework.status import SKIP, SUCCESS, Status
from polsched.framework.types import NodeInfo, PodInfo, Snapshot
from polsched.plugins.node_memo import Share
from polsched.plugins.pod_topology_spread.args import LABEL_HOSTNAME, SCHEDULE_ANYWAY
from polsched.plugins.pod_topology_spread.common import (
    NAME,
    SpreadBase,
    SpreadConstraint,
    count_matching,
    has_keys,
)

PRE_SCORE_KEY = "PreScore" + NAME

_MAX_INT64 = 2**63 - 1


@dataclass(slots=True)
class _ScoreState:
    constraints: tuple[SpreadConstraint, ...]
    # per constraint: domain value -> matching pods; empty for hostname constraints,
    # counted per node in Score
    counts: list[dict[str, int]]
    weights: list[float]
    ignored: set[str]
    require_all: bool
    namespace: str
    # per scored node, in the order score_nodes saw them: was it ignored
    ignored_mask: list[bool]
    # the aggregate's nodes and, per hostname constraint i, node name -> matching pods
    shares: Mapping[str, tuple[NodeInfo, int, Share]] = field(default_factory=dict)
    hosts: list[Mapping[str, int]] = field(default_factory=list)


class Scoring(SpreadBase, PreScorePlugin, ScorePlugin, ScoreExtensions):
    """The score extension points of PodTopologySpread."""

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo],
                  snapshot: Snapshot) -> Status:
        if not snapshot.nodes:
            return SKIP
        try:
            constraints, default_sig = self._constraints_signed(pod, SCHEDULE_ANYWAY)
        except (SelectorError, TypeError, ValueError) as err:
            return Status.error(f"obtaining pod's soft topology spread constraints: {err}")
        if not constraints:
            return SKIP
        # Only non-system-default rules require every topology label on a node, so that
        # nodes without a zone label still get hostname spreading.
        require_all = bool(pod.spec.get("topologySpreadConstraints")) \
            or not self.system_defaulted
        # initPreScoreState: the domains of the feasible nodes, and the nodes to ignore.
        ignored: set[str] = set()
        kept: Sequence[NodeInfo] = nodes
        if require_all:
            kept = [n for n in nodes if has_keys(n.labels, constraints)]
            if len(kept) != len(nodes):
                ignored = {n.name for n in nodes} - {n.name for n in kept}
        fast = self._domain_counts(pod, constraints, snapshot, require_all, state.budget)
        shares: Mapping[str, tuple[NodeInfo, int, Share]] = {}
        totals: Mapping[Hashable, Mapping[Hashable, int]] = {}
        if fast is not None:
            totals = cast(Mapping[Hashable, Mapping[Hashable, int]], dict(enumerate(fast)))
        else:
            agg = self._aggregate(pod, constraints, SCHEDULE_ANYWAY, default_sig, snapshot,
                                  require_all, state.budget)
            totals, shares = agg.totals, agg.shares
        counts: list[dict[str, int]] = []
        weights: list[float] = []
        hosts: list[Mapping[str, int]] = []
        for i, c in enumerate(constraints):
            key = c.topology_key
            if key == LABEL_HOSTNAME:
                # counted per node in Score
                counts.append({})
                weights.append(math.log(len(nodes) - len(ignored) + 2))
                hosts.append(cast(Mapping[str, int], totals.get(-1 - i) or {}))
                continue
            # Only domains of feasible nodes are counted.
            domains = {n.labels.get(key, "") for n in kept}
            total = cast(Mapping[str, int], totals.get(i) or {})
            counts.append({v: total.get(v, 0) for v in domains})
            weights.append(math.log(len(domains) + 2))
            hosts.append({})
        state.write(PRE_SCORE_KEY, _ScoreState(constraints, counts, weights, ignored,
                                                 require_all, pod.namespace, [],
                                                 shares, hosts))
        return SUCCESS

    def _host_count(self, s: _ScoreState, i: int, c: SpreadConstraint,
                    node: NodeInfo) -> int:
        """The node's pods matching hostname constraint i: the aggregate's count while it
        has the node as it is, else counted."""
        known = s.shares.get(node.name)
        if known is not None and known[0] is node and known[1] == node.generation:
            return s.hosts[i].get(node.name, 0)
        return 0 if c.selector_empty else count_matching(node, c.selector, s.namespace)

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        s: _ScoreState = state.read(PRE_SCORE_KEY)
        if node.name in s.ignored:
            return 0
        labels = node.labels
        total = 0.0
        for i, c in enumerate(s.constraints):
            value = labels.get(c.topology_key)
            if value is None:
                continue
            if c.topology_key == LABEL_HOSTNAME:
                cnt = self._host_count(s, i, c, node)
            else:
                cnt = s.counts[i].get(value, 0)
            # scoreForCount: maxSkew-1 waters down differences between domains.
            total += cnt * s.weights[i] + (c.max_skew - 1)
        # math.Round: half away from zero (the total is never negative)
        return math.floor(total + 0.5)

    def score_nodes(self, state: CycleState, pod: PodInfo,
                    nodes: Sequence[NodeInfo]) -> list[int] | Status:
        """score per node, with each domain's term (count * weight + maxSkew - 1) worked
        out once per domain instead of per node: the same float operations in the same
        order, so the same scores."""
        s: _ScoreState = state.read(PRE_SCORE_KEY)
        ignored = s.ignored
        s.ignored_mask = [n.name in ignored for n in nodes] if ignored else [False] * len(nodes)
        plan: list[tuple[str, int, SpreadConstraint, dict[str, float] | None]] = []
        for i, c in enumerate(s.constraints):
            if c.topology_key == LABEL_HOSTNAME:
                plan.append((c.topology_key, i, c, None))
            else:
                w, skew = s.weights[i], c.max_skew - 1
                plan.append((c.topology_key, i, c,
                             {v: cnt * w + skew for v, cnt in s.counts[i].items()}))
        shares, floor = s.shares, math.floor
        out: list[int] = []
        append = out.append
        for node in nodes:
            if ignored and node.name in ignored:
                append(0)
                continue
            labels = node.labels
            total = 0.0
            for key, i, c, terms in plan:
                value = labels.get(key)
                if value is None:
                    continue
                if terms is None:
                    known = shares.get(node.name)
                    if known is not None and known[0] is node \
                            and known[1] == node.generation:
                        cnt = s.hosts[i].get(node.name, 0)
                    else:
                        cnt = 0 if c.selector_empty else count_matching(node, c.selector,
                                                                        s.namespace)
                    total += cnt * s.weights[i] + (c.max_skew - 1)
                else:
                    term = terms.get(value)
                    total += (0 * s.weights[i] + (c.max_skew - 1)) if term is None else term
            append(floor(total + 0.5))
        return out

    def normalize_score(self, state: CycleState, pod: PodInfo, scores: list[int]) -> Status:
        """Fewer matching pods score higher: MAX * (max + min - s) / max over the nodes not
        ignored; ignored nodes get 0."""
        s: _ScoreState | None = state.get(PRE_SCORE_KEY)
        if s is None:
            return SUCCESS
        mask = s.ignored_mask if len(s.ignored_mask) == len(scores) else [False] * len(scores)
        if scores and not any(mask):
            # The same arithmetic without the per-node mask checks (scores are >= 0).
            lo, hi = min(scores), max(max(scores), 0)
            if hi == 0:
                scores[:] = [MAX_NODE_SCORE] * len(scores)
            else:
                scores[:] = [MAX_NODE_SCORE * (hi + lo - v) // hi for v in scores]
            return SUCCESS
        lo, hi = _MAX_INT64, 0
        for i, v in enumerate(scores):
            if mask[i]:
                continue
            lo = min(lo, v)
            hi = max(hi, v)
        for i, v in enumerate(scores):
            if mask[i]:
                scores[i] = 0
            elif hi == 0:
                scores[i] = MAX_NODE_SCORE
            else:
                scores[i] = MAX_NODE_SCORE * (hi + lo - v) // hi
        return SUCCESS
