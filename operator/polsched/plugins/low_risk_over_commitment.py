"""LowRiskOverCommitment: prefer nodes where over-committed limits are least likely to be
needed, from the node's requests and limits and the distribution of its real usage.

scheduler-plugins' Trimaran plugin of the same name (pkg/trimaran/lowriskovercommitment:
Score, computeRank, computeRisk; beta.go), with its args:

    smoothingWindowSize  int > 0 (default 5): sigma is multiplied by its square root
    riskLimitWeights     {cpu: w, memory: w}, each in [0, 1] (default 0.5): the weight of
                         the risk due to limits against the risk due to load
    metricProvider, watcherAddress, metricsIntervalSeconds: see plugins.trimaran

For CPU and memory apart, with the node's allocatable C, its pods' requests R and limits
L (limits raised to requests; "-pod": without the incoming pod; R capped at C):

    riskLimit = (L - C) / (L - R) when L > C, else 0
    riskLoad  = 1 - P(U <= R-pod / C) [/ P(U <= L-pod / C) when L-pod < C]
    risk      = w * riskLimit + (1 - w) * riskLoad, clipped to [0, 1]

where U, the node's utilisation, follows the beta distribution with the usage's mean mu
and deviation sigma * sqrt(smoothingWindowSize) (capped below the largest variance a mean
mu allows). The score is round((1 - max(risk cpu, risk memory)) * 100). A pod with no
requests or limits at all, and a node without fresh metrics, score 0 (MinNodeScore), as
upstream. The pods in flight need no adding: their requests and limits are on the node.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from polsched.framework import resources as res
from polsched.framework.cycle_state import CycleState
from polsched.framework.interfaces import MAX_NODE_SCORE, MIN_NODE_SCORE, Handle, ScorePlugin
from polsched.framework.load import NodeLoad
from polsched.framework.registry import ArgsError, PluginSpec
from polsched.framework.types import NodeInfo, PodInfo
from polsched.plugins import trimaran

NAME = "LowRiskOverCommitment"

# apis/config/v1 defaults and lowriskovercommitment constants.
DEFAULT_SMOOTHING_WINDOW_SIZE = 5
DEFAULT_RISK_LIMIT_WEIGHT = 0.5
MAX_VARIANCE_ALLOWANCE = 0.99

_OWN_FIELDS = ("smoothingWindowSize", "riskLimitWeights")
_RESOURCES = (res.CPU, res.MEMORY)


def compute_risk(*, request: int, limit: int, request_minus_pod: int, limit_minus_pod: int,
                 capacity: int, mu: float | None, sigma: float, window: int,
                 weight: float) -> float:
    """computeRisk for one resource. `mu`/`sigma` are the usage's mean and deviation as
    fractions of the capacity (GetMuSigma with a zero request); None: no usage data."""
    if capacity <= 0:
        return 0.0
    risk_limit = 0.0
    if limit > capacity:
        risk_limit = (limit - capacity) / (limit - request) if limit != request else math.inf
    risk_load = 0.0
    if mu is not None:
        sigma *= math.sqrt(window)
        sigma = min(sigma, math.sqrt(trimaran.max_variance(mu) * MAX_VARIANCE_ALLOWANCE))
        alloc_threshold = min(max(request_minus_pod / capacity, 0.0), 1.0)
        alloc_prob, dist = trimaran.compute_probability(mu, sigma, alloc_threshold)
        if limit_minus_pod < capacity and request_minus_pod <= limit_minus_pod:
            limit_threshold = limit_minus_pod / capacity
            if limit_threshold == 0:
                alloc_prob = 1.0  # zero over zero
            elif dist is not None:
                limit_prob = dist.cdf(limit_threshold)
                if limit_prob > 0:
                    alloc_prob = min(max(alloc_prob / limit_prob, 0.0), 1.0)
        risk_load = 1 - alloc_prob
    total = weight * risk_limit + (1 - weight) * risk_load
    return min(max(total, 0.0), 1.0)


class LowRiskOverCommitment(trimaran.LoadAwareScorer):
    NAME = NAME

    def __init__(self, args: Mapping[str, Any], handle: Handle) -> None:
        trimaran.check_fields(args, NAME, _OWN_FIELDS)
        self.spec = trimaran.parse_spec(args)
        window = args.get("smoothingWindowSize", DEFAULT_SMOOTHING_WINDOW_SIZE)
        if isinstance(window, bool) or not isinstance(window, int) or window <= 0:
            raise ArgsError("smoothingWindowSize", "must be a positive integer (the number of "
                                                   "windows usage is smoothed over)")
        weights = {r: DEFAULT_RISK_LIMIT_WEIGHT for r in _RESOURCES}
        given = args.get("riskLimitWeights")
        if given is not None:
            if not isinstance(given, Mapping):
                raise ArgsError("riskLimitWeights", "must be an object such as "
                                                    "{cpu: 0.5, memory: 0.5}")
            for r, w in given.items():
                if r not in _RESOURCES:
                    raise ArgsError(f"riskLimitWeights.{r}", "only cpu and memory are scored")
                if isinstance(w, bool) or not isinstance(w, int | float) or not 0 <= w <= 1:
                    raise ArgsError(f"riskLimitWeights.{r}", "must be a number from 0 to 1")
                weights[str(r)] = float(w)
        self.window = window
        self.weights = weights
        self.handle = handle
        # (node name, generation) -> the node's pods' summed (cpu req, mem req, cpu lim,
        # mem lim): GetNodeRequestsAndLimits walks every pod of the node for every pod
        # scored; a node's pods change only with its generation.
        self._totals: dict[str, tuple[int, tuple[int, int, int, int]]] = {}
        # A node's score for a pod shape: (node, its generation, the sample's timestamp
        # and history length, the pod's requests and limits) -> score. The beta CDF costs
        # ~15 us a resource; the pods of one workload share their shape.
        self._memo: dict[tuple[str, int, float, int, tuple[int, int, int, int]], int] = {}
        if handle.load is not None:
            handle.load.want(self, self.spec.metrics_interval)

    def _node_totals(self, node: NodeInfo) -> tuple[int, int, int, int]:
        hit = self._totals.get(node.name)
        if hit is not None and hit[0] == node.generation:
            return hit[1]
        rc = rm = lc = lm = 0
        for p in node.pods.values():
            a, b, c, d = trimaran.requests_and_limits(p)
            rc, rm, lc, lm = rc + a, rm + b, lc + c, lm + d
        totals = (rc, rm, lc, lm)
        if len(self._totals) > 65536:
            self._totals.clear()
        self._totals[node.name] = (node.generation, totals)
        return totals

    def rank(self, pod: tuple[int, int, int, int], node: NodeInfo, load: NodeLoad) -> float:
        """computeRank: 1 - the larger of the CPU and memory risks."""
        totals = self._node_totals(node)
        risks = []
        for i, r in enumerate(_RESOURCES):
            cap = trimaran.allocatable(node, r)
            req_minus, lim_minus = totals[i], totals[i + 2]
            request, limit = req_minus + pod[i], lim_minus + pod[i + 2]
            stats = trimaran.resource_stats(load, node, r, 0.0)
            mu, sigma = trimaran.mu_sigma(stats)
            risks.append(compute_risk(
                request=min(request, cap), limit=limit,
                request_minus_pod=min(req_minus, cap), limit_minus_pod=lim_minus,
                capacity=cap, mu=mu, sigma=sigma, window=self.window,
                weight=self.weights[r]))
        return 1 - max(risks)

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        return self._score(trimaran.requests_and_limits(pod), node)

    def score_nodes(self, state: CycleState, pod: PodInfo,
                    nodes: Sequence[NodeInfo]) -> list[int]:
        # The pod's requests and limits once per cycle (CreatePodResourcesStateData in
        # PreScore upstream), not once per node.
        mine = trimaran.requests_and_limits(pod)
        return [self._score(mine, n) for n in nodes]

    def _score(self, mine: tuple[int, int, int, int], node: NodeInfo) -> int:
        if not any(mine):
            return MIN_NODE_SCORE
        source = self.handle.load
        load = source.node_load(node.name) if source is not None else None
        if load is None:
            return MIN_NODE_SCORE
        key = (node.name, node.generation, load.timestamp, load.samples, mine)
        hit = self._memo.get(key)
        if hit is None:
            if len(self._memo) > 200_000:
                self._memo.clear()
            hit = self._memo[key] = trimaran.go_round(self.rank(mine, node, load)
                                                      * MAX_NODE_SCORE)
        return hit


def new_scorer(args: Mapping[str, Any], handle: Handle) -> ScorePlugin:
    return LowRiskOverCommitment(args, handle)


SPEC = PluginSpec(NAME, score=new_scorer)
