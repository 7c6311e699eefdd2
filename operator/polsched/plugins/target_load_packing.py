"""TargetLoadPacking: bin-pack nodes by their real CPU usage up to a target utilisation.

scheduler-plugins' Trimaran plugin of the same name (pkg/trimaran/targetloadpacking,
TargetLoadPacking.Score), with its args:

    targetUtilization          int, percent, at most 100 (default 40; 0 or less means 40)
    defaultRequests            {cpu: quantity} (default 1000m): the predicted usage of a
                               container with neither a CPU limit nor a CPU request
    defaultRequestsMultiplier  string holding a number (default "1.5"): a container with a
                               CPU request and no limit is predicted to use request * this
    metricProvider, watcherAddress, metricsIntervalSeconds: see plugins.trimaran

The node's predicted utilisation U (percent) is its latest CPU usage, plus the predicted
usage of the pod, plus that of the pods bound to the node since the sample (in flight),
over the node's allocatable CPU (upstream divides by status.capacity; kwok gives a node
created with only an allocatable a capacity of 1000 cores, and allocatable is what pods
may use). With target T:

    U <= T:        score = round((100 - T) * U / T + T)     (rises from T to 100 at U = T)
    T < U <= 100:  score = round(T * (100 - U) / (100 - T))  (falls from T to 0)
    U > 100:       score = 0

A node without fresh metrics scores 0 (MinNodeScore), as upstream. Scores are already
0..100: no NormalizeScore.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from polsched.framework import resources as res
from polsched.framework.cycle_state import CycleState
from polsched.framework.interfaces import MIN_NODE_SCORE, Handle, ScorePlugin
from polsched.framework.registry import ArgsError, PluginSpec
from polsched.framework.types import NodeInfo, PodInfo
from polsched.plugins import trimaran

NAME = "TargetLoadPacking"

# apis/config/v1 defaults (SetDefaults_TargetLoadPackingArgs).
DEFAULT_TARGET_UTILIZATION = 40
DEFAULT_REQUESTS_MILLI_CORES = 1000
DEFAULT_REQUESTS_MULTIPLIER = "1.5"

_OWN_FIELDS = ("targetUtilization", "defaultRequests", "defaultRequestsMultiplier")


def predict_utilisation(container: Mapping[str, Any], default_milli: int,
                        multiplier: float) -> int:
    """PredictUtilisation: the container's CPU limit; else its request times the
    multiplier, rounded; else the default (millicores)."""
    resources = container.get("resources") or {}
    limits = resources.get("limits") or {}
    if res.CPU in limits:
        return res.to_int(res.CPU, limits[res.CPU])
    requests = resources.get("requests") or {}
    if res.CPU in requests:
        return round(res.to_int(res.CPU, requests[res.CPU]) * multiplier)
    return default_milli


def score_from_utilisation(predicted: float, target: float) -> int:
    """The score of a node whose predicted CPU utilisation is `predicted` percent."""
    if predicted > target:
        if predicted > 100:
            return MIN_NODE_SCORE
        return trimaran.go_round(target * (100 - predicted) / (100 - target))
    return trimaran.go_round((100 - target) * predicted / target + target)


class TargetLoadPacking(trimaran.LoadAwareScorer):
    NAME = NAME

    def __init__(self, args: Mapping[str, Any], handle: Handle) -> None:
        trimaran.check_fields(args, NAME, _OWN_FIELDS)
        self.spec = trimaran.parse_spec(args)
        target = args.get("targetUtilization", DEFAULT_TARGET_UTILIZATION)
        if isinstance(target, bool) or not isinstance(target, int):
            raise ArgsError("targetUtilization", "must be an integer percent (1..100); 0 or "
                                                 "less means the default, 40")
        if target <= 0:
            target = DEFAULT_TARGET_UTILIZATION
        if target > 100:
            raise ArgsError("targetUtilization", "must be a percent, at most 100")
        requests = args.get("defaultRequests", {res.CPU: f"{DEFAULT_REQUESTS_MILLI_CORES}m"})
        if not isinstance(requests, Mapping):
            raise ArgsError("defaultRequests", "must be a resource list such as {cpu: 1000m}")
        for k in requests:
            if k != res.CPU:
                raise ArgsError(f"defaultRequests.{k}", "only cpu is read (the predicted "
                                                        "usage of a container without a CPU "
                                                        "request or limit)")
        try:
            default_milli = res.to_int(res.CPU, requests.get(res.CPU, "0"))
        except res.QuantityError as err:
            raise ArgsError("defaultRequests.cpu", str(err)) from None
        if default_milli < 0:
            raise ArgsError("defaultRequests.cpu", "must not be negative")
        multiplier = args.get("defaultRequestsMultiplier", DEFAULT_REQUESTS_MULTIPLIER)
        try:
            factor = float(multiplier) if isinstance(multiplier, str) else math.nan
        except ValueError:
            factor = math.nan
        if not math.isfinite(factor) or factor < 0:
            raise ArgsError("defaultRequestsMultiplier",
                            f"unable to parse DefaultRequestsMultiplier {multiplier!r}: want a "
                            "non-negative number as a string, e.g. \"1.5\"")
        self.target = float(target)
        self.default_milli = default_milli
        self.multiplier = factor
        self.handle = handle
        if handle.load is not None:
            handle.load.want(self, self.spec.metrics_interval)

    def pod_cpu(self, pod: PodInfo) -> int:
        """The pod's predicted CPU usage in millicores (containers and overhead)."""
        spec = pod.spec
        total = sum(predict_utilisation(c, self.default_milli, self.multiplier)
                    for c in spec.get("containers") or ())
        overhead = spec.get("overhead") or {}
        if res.CPU in overhead:
            total += res.to_int(res.CPU, overhead[res.CPU])
        return total

    def predicted(self, pod_cpu: int, node: NodeInfo) -> float | None:
        """The node's predicted utilisation in percent with the pod on it; None without
        fresh metrics."""
        source = self.handle.load
        load = source.node_load(node.name) if source is not None else None
        if load is None:
            return None
        missing = sum(self.pod_cpu(p) for p in trimaran.in_flight_pods(self.handle, node, load))
        cap = trimaran.allocatable(node, res.CPU)
        if cap == 0:
            return 0.0
        return 100 * (load.cpu.latest + pod_cpu + missing) / cap

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        predicted = self.predicted(self.pod_cpu(pod), node)
        if predicted is None:
            return MIN_NODE_SCORE
        return score_from_utilisation(predicted, self.target)

    def score_nodes(self, state: CycleState, pod: PodInfo,
                    nodes: Sequence[NodeInfo]) -> list[int]:
        pod_cpu = self.pod_cpu(pod)
        target = self.target
        out: list[int] = []
        for node in nodes:
            predicted = self.predicted(pod_cpu, node)
            out.append(MIN_NODE_SCORE if predicted is None
                       else score_from_utilisation(predicted, target))
        return out


def new_scorer(args: Mapping[str, Any], handle: Handle) -> ScorePlugin:
    return TargetLoadPacking(args, handle)


SPEC = PluginSpec(NAME, score=new_scorer)
