"""Node load: what the load-aware scorers (TargetLoadPacking, LoadVariationRiskBalancing,
LowRiskOverCommitment) know about the usage of nodes, and where it comes from.

A `LoadSource` answers, for a node name, the load of its latest fresh sample of the
Metrics API (`metrics.k8s.io`, served by metrics-server) and the short history behind it
(mean and standard deviation, for the variance-based algorithms), or None when the node
has no fresh sample (never seen, or not seen for longer than the source's staleness
limit): the scorers then give the node Trimaran's neutral score. It also names the pods
bound to a node since the sample was taken ("pods in flight", whose usage the sample
cannot show yet; Trimaran's PodAssignEventHandler).

Implementations: `cluster.node_metrics.NodeMetricsWatcher` polls the API server, one per
process, shared by every policy; `StaticLoad` holds fixed loads (a `polsched snapshot`
file for `polsched simulate`, unit tests). Plugins get theirs through `Handle.load` and
never call the API server. Purely data and protocols here: no I/O.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from polsched.framework import resources as res
from polsched.framework.types import NodeInfo, PodInfo

# Trimaran's metricsAgentReportingIntervalSeconds (pkg/trimaran/handler.go): a pod bound
# up to this long before a sample's window ended may still be missing from it (the agent
# reports with a lag); its predicted usage is added as if in flight. On kwok + metrics-
# server a new pod's usage is served 35-40 s after it starts (shared/notes).
IN_FLIGHT_LAG_SECONDS = 60.0


@dataclass(frozen=True, slots=True)
class ResourceLoad:
    """One resource's usage on a node, in the scheduler's unit (millicores for cpu,
    bytes for memory): the latest sample, and the mean and population standard
    deviation of the samples kept (the latest included)."""

    latest: float
    avg: float
    std: float

    @classmethod
    def of(cls, values: Sequence[float]) -> ResourceLoad:
        """The load of `values`, oldest first (at least one)."""
        n = len(values)
        avg = math.fsum(values) / n
        var = math.fsum((v - avg) ** 2 for v in values) / n
        return cls(values[-1], avg, math.sqrt(var))


@dataclass(frozen=True, slots=True)
class NodeLoad:
    """A node's usage as the Metrics API served it. `timestamp` is the end of the latest
    sample's window (Unix seconds, the server's clock), `window` its length in seconds,
    `samples` how many distinct samples the history holds."""

    cpu: ResourceLoad
    memory: ResourceLoad
    timestamp: float
    window: float = 0.0
    samples: int = 1


@dataclass(frozen=True, slots=True)
class NodeMetricsState:
    """What the source knows about one node's metrics, for explain and the policy's
    status: `load` (None when missing or stale) and when the node was last served, as an
    age in seconds (None: never)."""

    node: str
    load: NodeLoad | None
    age: float | None


class LoadSource(Protocol):
    """Where the load-aware scorers read usage (see the module docstring)."""

    def node_load(self, name: str) -> NodeLoad | None:
        """The node's fresh load, or None (no sample, or a stale one)."""
        ...

    def state(self, name: str) -> NodeMetricsState:
        """The node's load and the age of its last sample, stale or not."""
        ...

    def in_flight(self, node: NodeInfo, since: float) -> Sequence[PodInfo]:
        """The pods of `node` that were bound to it (or first seen on it) after `since`
        (Unix seconds): usage a sample taken at `since` cannot show."""
        ...

    def want(self, owner: object, interval: float | None) -> None:
        """A scorer needs samples at most `interval` seconds apart (None: the source's
        default) while `owner` lives."""
        ...


class FirstSeen:
    """When each pod was first seen on each node, from the NodeInfos the scorers are given
    (a node's pods change only with its generation, so a node is diffed only when it
    moved). Pods on a node when it is first looked at count as bound long ago: Trimaran's
    event handler stamps every pod it lists at start-up with the start time, which would
    count a whole cluster as in flight for a minute after a restart.

    Per node it keeps the pods' keys and, apart, the few seen arriving since (with when):
    the per-pod path walks only those, and forgets them once older than FORGET_SECONDS
    before the time asked about (samples only get newer)."""

    __slots__ = ("_clock", "_nodes")
    FORGET_SECONDS = 600.0

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        # node name -> (generation seen, every pod key, pod key -> first seen for the pods
        # that arrived after the node was first looked at)
        self._nodes: dict[str, tuple[int, set[str], dict[str, float]]] = {}

    def pods_since(self, node: NodeInfo, since: float) -> list[PodInfo]:
        entry = self._nodes.get(node.name)
        if entry is None:
            self._nodes[node.name] = (node.generation, set(node.pods), {})
            return []
        generation, keys, recent = entry
        pods = node.pods
        if generation != node.generation:
            now = self._clock()
            current = pods.keys()
            for key in current - keys:
                recent[key] = now
            for key in keys - current:
                recent.pop(key, None)
            keys = set(current)
            self._nodes[node.name] = (node.generation, keys, recent)
        if not recent:
            return []
        out = []
        old = since - self.FORGET_SECONDS
        for key, t in list(recent.items()):
            if t > since:
                pod = pods.get(key)
                if pod is not None:
                    out.append(pod)
            elif t < old:
                del recent[key]
        return out

    def forget(self, names: Iterable[str]) -> None:
        for name in names:
            self._nodes.pop(name, None)


@dataclass
class StaticLoad:
    """Fixed node loads (a snapshot's, for `polsched simulate`; unit tests). Every pod a
    node gains after the source first looks at it is in flight (a simulated placement);
    `ages` gives the age of each node's sample for explain (0 when absent)."""

    loads: Mapping[str, NodeLoad]
    ages: Mapping[str, float] = field(default_factory=dict)
    _seen: FirstSeen = field(default_factory=lambda: FirstSeen(clock=lambda: math.inf))

    def node_load(self, name: str) -> NodeLoad | None:
        return self.loads.get(name)

    def state(self, name: str) -> NodeMetricsState:
        load = self.loads.get(name)
        return NodeMetricsState(name, load, self.ages.get(name, 0.0) if load else None)

    def in_flight(self, node: NodeInfo, since: float) -> Sequence[PodInfo]:
        return self._seen.pods_since(node, since)

    def want(self, owner: object, interval: float | None) -> None:
        return None


# The Metrics API's node usage as `polsched snapshot --node-metrics` writes it.
NODE_METRICS_API_VERSION = "metrics.k8s.io/v1beta1"
NODE_METRICS_KIND = "NodeMetrics"
NODE_METRICS_PATH = "/apis/metrics.k8s.io/v1beta1/nodes"


def node_load_of(item: Mapping[str, Any]) -> tuple[str, NodeLoad] | None:
    """A NodeMetrics object (metrics.k8s.io/v1beta1) as (node name, its load, a single
    sample: deviation 0); None when malformed."""
    try:
        name = item["metadata"]["name"]
        usage = item["usage"]
        cpu = float(res.parse_quantity(usage["cpu"]) * 1000)
        memory = float(res.parse_quantity(usage["memory"]))
        stamp = datetime.fromisoformat(str(item["timestamp"]).replace("Z", "+00:00")).timestamp()
    except (KeyError, TypeError, ValueError, AttributeError, res.QuantityError):
        return None
    if not isinstance(name, str) or not name or not (math.isfinite(cpu) and math.isfinite(memory)):
        return None
    return name, NodeLoad(ResourceLoad(cpu, cpu, 0.0), ResourceLoad(memory, memory, 0.0), stamp)


def static_load(objects: Iterable[Mapping[str, Any]], now: float | None = None) -> StaticLoad:
    """The StaticLoad of the NodeMetrics among `objects` (a snapshot's); ages from `now`
    (default: the newest sample, so that a snapshot reads the same whenever it is used)."""
    loads: dict[str, NodeLoad] = {}
    for o in objects:
        if o.get("kind") == NODE_METRICS_KIND:
            got = node_load_of(o)
            if got is not None:
                loads[got[0]] = got[1]
    if now is None:
        now = max((nl.timestamp for nl in loads.values()), default=0.0)
    return StaticLoad(loads, {n: max(now - nl.timestamp, 0.0) for n, nl in loads.items()})


def describe_missing(states: Sequence[NodeMetricsState], limit: int = 5) -> str:
    """"no metrics for node a (last seen 3m ago), b (never seen)": for conditions and
    explain; at most `limit` nodes named."""
    parts = [f"{st.node} ({'never seen' if st.age is None else 'last seen ' + ago(st.age)})"
             for st in states[:limit]]
    more = f" and {len(states) - limit} more" if len(states) > limit else ""
    return "no metrics for node " + ", ".join(parts) + more


def ago(seconds: float) -> str:
    """A short age as kubectl prints it: 45s ago, 3m ago, 2h ago."""
    s = int(seconds)
    if s < 120:
        return f"{s}s ago"
    if s < 7200:
        return f"{s // 60}m ago"
    return f"{s // 3600}h ago"


__all__ = ["IN_FLIGHT_LAG_SECONDS", "FirstSeen", "LoadSource", "NodeLoad", "NodeMetricsState",
           "ResourceLoad", "StaticLoad", "ago", "describe_missing", "node_load_of", "static_load"]
