"""LoadVariationRiskBalancing: spread pods by the mean plus a margin of the deviation of
each node's real usage.

scheduler-plugins' Trimaran plugin of the same name
(pkg/trimaran/loadvariationriskbalancing: Score and computeScore in analysis.go), with
its args:

    safeVarianceMargin       number >= 0 (default 1): the multiplier of sigma
    safeVarianceSensitivity  number >= 0 (default 1): sigma is raised to 1/this
    metricProvider, watcherAddress, metricsIntervalSeconds: see plugins.trimaran

For CPU and memory apart: mu is the node's mean usage over the watcher's history plus
the pod's request, sigma the usage's standard deviation, both over the node's
allocatable and clipped to [0, 1]; then

    sigma' = clip(margin * sigma ** (1 / sensitivity), 0, 1)
    risk   = (mu + sigma') / 2
    score  = (1 - risk) * 100

and the node's score is the smaller of the two (the one resource's when only one has
data), rounded. A node without fresh metrics scores 0 (MinNodeScore), as upstream.

polsched adds the requests of the pods bound to the node since the sample to its mean
usage (pods in flight, as TargetLoadPacking does upstream): without it a burst of pods
all lands on the node that was least used before the burst.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from polsched.framework import resources as res
from polsched.framework.cycle_state import CycleState
from polsched.framework.interfaces import MAX_NODE_SCORE, MIN_NODE_SCORE, Handle, ScorePlugin
from polsched.framework.load import NodeLoad
from polsched.framework.registry import PluginSpec
from polsched.framework.types import NodeInfo, PodInfo
from polsched.plugins import trimaran

NAME = "LoadVariationRiskBalancing"

# apis/config/v1 defaults (SetDefaults_LoadVariationRiskBalancingArgs).
DEFAULT_SAFE_VARIANCE_MARGIN = 1.0
DEFAULT_SAFE_VARIANCE_SENSITIVITY = 1.0

_OWN_FIELDS = ("safeVarianceMargin", "safeVarianceSensitivity")


def compute_score(rs: trimaran.ResourceStats, margin: float, sensitivity: float) -> float:
    """computeScore (analysis.go): (1 - (mu + sigma') / 2) * 100 for one resource, as
    written upstream (the scorer computes the same in two halves: _node_terms once per
    node and sample, _resource_score per pod)."""
    if rs.capacity <= 0:
        return 0.0
    rs = trimaran.ResourceStats(min(max(rs.used_avg, 0.0), rs.capacity),
                                min(max(rs.used_stdev, 0.0), rs.capacity),
                                max(rs.req, 0.0), rs.capacity)
    mu, sigma = trimaran.mu_sigma(rs)
    if sensitivity >= 0:
        sigma = _sensitive(sigma, sensitivity)
    sigma = min(max(sigma * margin, 0.0), 1.0)
    risk = (mu + sigma) / 2
    return (1.0 - risk) * MAX_NODE_SCORE


class LoadVariationRiskBalancing(trimaran.LoadAwareScorer):
    NAME = NAME

    def __init__(self, args: Mapping[str, Any], handle: Handle) -> None:
        trimaran.check_fields(args, NAME, _OWN_FIELDS)
        self.spec = trimaran.parse_spec(args)
        # Upstream's defaulting turns a negative value into the default; polsched refuses
        # it instead, as a user who wrote it meant something else.
        self.margin = trimaran.number(args, "safeVarianceMargin", DEFAULT_SAFE_VARIANCE_MARGIN,
                                      low=0, what=">= 0 (the multiplier of sigma)")
        self.sensitivity = trimaran.number(
            args, "safeVarianceSensitivity", DEFAULT_SAFE_VARIANCE_SENSITIVITY, low=0,
            what=">= 0 (sigma is raised to the power 1/sensitivity)")
        self.handle = handle
        # node name -> ((generation, sample timestamp, samples), the node's terms)
        self._terms: dict[str, tuple[tuple[int, float, int], _Terms]] = {}
        if handle.load is not None:
            handle.load.want(self, self.spec.metrics_interval)

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        req_cpu, req_mem = trimaran.effective_resources(pod.spec, "requests")
        return self._score(req_cpu, req_mem, node)

    def score_nodes(self, state: CycleState, pod: PodInfo,
                    nodes: Sequence[NodeInfo]) -> list[int]:
        # The pod's requests once per cycle, not once per node.
        req_cpu, req_mem = trimaran.effective_resources(pod.spec, "requests")
        return [self._score(req_cpu, req_mem, n) for n in nodes]

    def _score(self, req_cpu: int, req_mem: int, node: NodeInfo) -> int:
        source = self.handle.load
        load = source.node_load(node.name) if source is not None else None
        if load is None:
            return MIN_NODE_SCORE
        terms = self._node_terms(node, load)
        cpu = _resource_score(terms[0], terms[1], terms[2], req_cpu)
        mem = _resource_score(terms[3], terms[4], terms[5], req_mem * trimaran.MEGA_FACTOR)
        # Both resources always have data from the Metrics API: the smaller score.
        return trimaran.go_round(min(cpu, mem))

    def _node_terms(self, node: NodeInfo, load: NodeLoad) -> _Terms:
        """What computeScore needs of a node, for any pod: per resource its allocatable,
        its mean usage (pods in flight added) clipped to it, and sigma' (the deviation's
        term, clipped). The same for every pod until the node's pods or its sample change:
        the pods in flight are a function of both."""
        key = (node.generation, load.timestamp, load.samples)
        hit = self._terms.get(node.name)
        if hit is not None and hit[0] == key:
            return hit[1]
        flight_cpu = flight_mem = 0
        for p in trimaran.in_flight_pods(self.handle, node, load):
            c, m = trimaran.effective_resources(p.spec, "requests")
            flight_cpu += c
            flight_mem += m
        out: list[float] = []
        for r, flight in ((res.CPU, flight_cpu), (res.MEMORY, flight_mem)):
            rs = trimaran.resource_stats(load, node, r, 0.0, flight)
            cap = rs.capacity
            if cap <= 0:
                out += [0.0, 0.0, 0.0]
                continue
            used = min(max(rs.used_avg, 0.0), cap)
            sigma = min(max(min(max(rs.used_stdev, 0.0), cap) / cap, 0.0), 1.0)
            sigma = _sensitive(sigma, self.sensitivity)
            sigma = min(max(sigma * self.margin, 0.0), 1.0)
            out += [cap, used, sigma]
        terms: _Terms = (out[0], out[1], out[2], out[3], out[4], out[5])
        if len(self._terms) > 65536:
            self._terms.clear()
        self._terms[node.name] = (key, terms)
        return terms


# (cpu allocatable, cpu used, cpu sigma', memory allocatable, memory used, memory sigma'),
# memory in MiB as trimaran.ResourceStats keeps it.
_Terms = tuple[float, float, float, float, float, float]


def _sensitive(sigma: float, sensitivity: float) -> float:
    """sigma ** (1 / sensitivity), as Go's math.Pow with 1/0 = +Inf (Pow(x, +Inf) is 0
    for 0 <= x < 1 and 1 for x = 1)."""
    if sensitivity > 0:
        return math.pow(sigma, 1 / sensitivity)
    return 0.0 if sigma < 1 else 1.0


def _resource_score(cap: float, used: float, sigma: float, req: float) -> float:
    """computeScore with the node's terms precomputed; `req` in the unit of `cap`."""
    if cap <= 0:
        return 0.0
    mu = min(max((used + max(req, 0.0)) / cap, 0.0), 1.0)
    return (1.0 - (mu + sigma) / 2) * MAX_NODE_SCORE


def new_scorer(args: Mapping[str, Any], handle: Handle) -> ScorePlugin:
    return LoadVariationRiskBalancing(args, handle)


SPEC = PluginSpec(NAME, score=new_scorer)
