"""What the three load-aware scorers share, after scheduler-plugins' pkg/trimaran: the
common args (TrimaranSpec), ResourceStats and its mean/deviation, a pod's effective
requests and limits, the beta distribution of LowRiskOverCommitment, and how a node's
usage is read from the Handle's LoadSource with the pods in flight added.

Written from reading scheduler-plugins (pkg/trimaran/resourcestats.go, collector.go,
handler.go, lowriskovercommitment/beta.go) and paypal/load-watcher's metrics-server
provider; the upstream function is named in each docstring. Pure: no I/O.

Where polsched differs, and why:
- Usage comes from the Metrics API through one shared watcher polled at the policy's
  `metricsIntervalSeconds` (framework.load), not from a load-watcher per plugin. Its
  history gives the mean and standard deviation that upstream only has with Prometheus
  or SignalFx (metrics-server gives load-watcher the latest value alone).
- Utilisation is usage over the node's allocatable (capacity when no allocatable is
  given), which is what ResourceStats divides by; upstream's load-watcher and
  TargetLoadPacking divide by capacity (kwok gives a node created with only an
  allocatable a capacity of 1000 cores, which would make every node look idle).
- LoadVariationRiskBalancing adds the requests of the pods in flight to the mean usage;
  upstream adds pods in flight in TargetLoadPacking only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from polsched.framework import resources as res
from polsched.framework.interfaces import Handle, ScorePlugin
from polsched.framework.load import IN_FLIGHT_LAG_SECONDS, NodeLoad
from polsched.framework.registry import ArgsError
from polsched.framework.types import NodeInfo, PodInfo

# The one provider polsched reads (TrimaranSpec.MetricProvider.Type); the others need a
# load-watcher or a metrics backend of their own.
KUBERNETES_METRICS_SERVER = "KubernetesMetricsServer"
OTHER_PROVIDERS = ("Prometheus", "SignalFx")
MIN_METRICS_INTERVAL_SECONDS = 1
MAX_METRICS_INTERVAL_SECONDS = 3600
MEGA_FACTOR = 1.0 / 1024.0 / 1024.0  # trimaran.MegaFactor: memory in MiB

SPEC_FIELDS = ("metricProvider", "watcherAddress", "metricsIntervalSeconds")


class LoadAwareScorer(ScorePlugin):
    """A scorer that reads node usage from Handle.load (the three Trimaran scorers):
    explain shows node usage next to its scores, simulate gives it a snapshot's."""

    spec: TrimaranSpec


@dataclass(frozen=True, slots=True)
class TrimaranSpec:
    """The validated common args: polsched reads metrics-server through the API server,
    polled every `metrics_interval` seconds (None: the operator's --node-metrics-interval;
    the shared watcher polls at the smallest interval any scorer asks for)."""

    metrics_interval: float | None = None


def check_fields(args: Mapping[str, Any], plugin: str, own: tuple[str, ...]) -> None:
    if not isinstance(args, Mapping):
        raise ArgsError("", f"must be an object ({plugin} takes {', '.join(own + SPEC_FIELDS)})")
    for k in args:
        if k not in own and k not in SPEC_FIELDS:
            raise ArgsError(str(k), f"unknown field: {plugin} takes "
                                    f"{', '.join(own + SPEC_FIELDS)}")


def parse_spec(args: Mapping[str, Any]) -> TrimaranSpec:
    """TrimaranSpec (apis/config TrimaranSpec, defaulted by SetDefaultTrimaranSpec):
    metricProvider.type KubernetesMetricsServer (the default; address, token and
    insecureSkipVerify do not apply: the Metrics API is reached through the API server),
    no watcherAddress; plus polsched's metricsIntervalSeconds."""
    provider = args.get("metricProvider")
    if provider is not None:
        if not isinstance(provider, Mapping):
            raise ArgsError("metricProvider", "must be an object with type")
        for k in provider:
            if k != "type":
                raise ArgsError(f"metricProvider.{k}",
                                "not supported: polsched reads the Metrics API "
                                "(metrics.k8s.io) through the API server with its own "
                                "credentials; give only metricProvider.type")
        kind = provider.get("type", KUBERNETES_METRICS_SERVER)
        if kind in OTHER_PROVIDERS:
            raise ArgsError("metricProvider.type",
                            f"{kind} is not supported: polsched reads node usage from the "
                            f"Metrics API; use {KUBERNETES_METRICS_SERVER}")
        if kind != KUBERNETES_METRICS_SERVER:
            raise ArgsError("metricProvider.type",
                            f"invalid MetricProvider.Type {kind!r}: want "
                            f"{KUBERNETES_METRICS_SERVER}")
    if args.get("watcherAddress") is not None:
        raise ArgsError("watcherAddress", "not supported: polsched polls the Metrics API "
                                          "itself, no load-watcher service is needed")
    interval = args.get("metricsIntervalSeconds")
    if interval is None:
        return TrimaranSpec()
    if isinstance(interval, bool) or not isinstance(interval, int | float) \
            or not math.isfinite(interval) \
            or not MIN_METRICS_INTERVAL_SECONDS <= interval <= MAX_METRICS_INTERVAL_SECONDS:
        raise ArgsError("metricsIntervalSeconds",
                        f"must be a number of seconds from {MIN_METRICS_INTERVAL_SECONDS} to "
                        f"{MAX_METRICS_INTERVAL_SECONDS} (how often node usage is read)")
    return TrimaranSpec(float(interval))


def go_round(x: float) -> int:
    """Go's math.Round (half away from zero; Python's round() rounds half to even)."""
    return int(math.floor(x + 0.5)) if x >= 0 else -int(math.floor(-x + 0.5))


def number(args: Mapping[str, Any], key: str, default: float, *, low: float = -math.inf,
           high: float = math.inf, what: str) -> float:
    value = args.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or not math.isfinite(value) or not low <= value <= high:
        raise ArgsError(key, f"must be a number {what}")
    return float(value)


# -- a pod's resources -----------------------------------------------------------------

def effective_resources(spec: Mapping[str, Any], field: str) -> tuple[int, int]:
    """(millicores, bytes) of a pod's `field` ("requests" or "limits"), as
    trimaran.GetEffectiveResource: the app containers summed, raised to any larger init
    container, plus spec.overhead."""
    cpu = mem = 0
    for c in spec.get("containers") or ():
        rl = (c.get("resources") or {}).get(field) or {}
        if res.CPU in rl:
            cpu += res.to_int(res.CPU, rl[res.CPU])
        if res.MEMORY in rl:
            mem += res.to_int(res.MEMORY, rl[res.MEMORY])
    for c in spec.get("initContainers") or ():
        rl = (c.get("resources") or {}).get(field) or {}
        if res.CPU in rl:
            cpu = max(cpu, res.to_int(res.CPU, rl[res.CPU]))
        if res.MEMORY in rl:
            mem = max(mem, res.to_int(res.MEMORY, rl[res.MEMORY]))
    overhead = spec.get("overhead") or {}
    if res.CPU in overhead:
        cpu += res.to_int(res.CPU, overhead[res.CPU])
    if res.MEMORY in overhead:
        mem += res.to_int(res.MEMORY, overhead[res.MEMORY])
    return cpu, mem


def requests_and_limits(pod: PodInfo) -> tuple[int, int, int, int]:
    """(cpu request, memory request, cpu limit, memory limit) of a pod, each limit raised
    to its request (trimaran.GetResourceRequested, GetResourceLimits, SetMaxLimits)."""
    rc, rm = effective_resources(pod.spec, "requests")
    lc, lm = effective_resources(pod.spec, "limits")
    return rc, rm, max(lc, rc), max(lm, rm)


def allocatable(node: NodeInfo, resource: str) -> int:
    """The node's allocatable of `resource` (its capacity when it gives no allocatable):
    what trimaran.CreateResourceStats and GetNodeRequestsAndLimits divide by."""
    return node.allocatable.get(resource, 0)


# -- usage -----------------------------------------------------------------------------

@dataclass(slots=True)
class ResourceStats:
    """trimaran.ResourceStats: usage mean and deviation, the pod's request and the
    capacity, in millicores for cpu and MiB for memory."""

    used_avg: float
    used_stdev: float
    req: float
    capacity: float


def resource_stats(load: NodeLoad, node: NodeInfo, resource: str, req: float,
                   in_flight: float = 0.0) -> ResourceStats:
    """trimaran.CreateResourceStats from a node's load: `req` is the pod's request
    (millicores or bytes), `in_flight` the requests of the pods bound since the sample,
    added to the mean usage."""
    r = load.cpu if resource == res.CPU else load.memory
    cap = float(allocatable(node, resource))
    if resource == res.CPU:
        return ResourceStats(r.avg + in_flight, r.std, req, cap)
    return ResourceStats((r.avg + in_flight) * MEGA_FACTOR, r.std * MEGA_FACTOR,
                         req * MEGA_FACTOR, cap * MEGA_FACTOR)


def mu_sigma(rs: ResourceStats) -> tuple[float, float]:
    """trimaran.GetMuSigma: mean and deviation of utilisation as fractions in [0, 1],
    the pod's request added to the mean."""
    if rs.capacity <= 0:
        return 0.0, 0.0
    mu = min(max((rs.used_avg + rs.req) / rs.capacity, 0.0), 1.0)
    sigma = min(max(rs.used_stdev / rs.capacity, 0.0), 1.0)
    return mu, sigma


def in_flight_pods(handle: Handle, node: NodeInfo, load: NodeLoad) -> list[PodInfo]:
    """The pods bound to `node` that the sample `load` may not show yet: bound after its
    window ended, or up to IN_FLIGHT_LAG_SECONDS before (the condition in
    TargetLoadPacking.Score, with the ScheduledPodsCache of trimaran.PodAssignEventHandler)."""
    if handle.load is None:
        return []
    return list(handle.load.in_flight(node, load.timestamp - IN_FLIGHT_LAG_SECONDS))


# -- the beta distribution of LowRiskOverCommitment -------------------------------------

def _beta_continued_fraction(x: float, a: float, b: float) -> float:
    """The continued fraction of the regularized incomplete beta function, evaluated by
    the modified Lentz method (converges for x < (a + 1) / (a + b + 2))."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def reg_inc_beta(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b) (gonum mathext.RegIncBeta, which
    beta.go's RegularizedIncomplete calls); NaN outside a, b > 0, 0 <= x <= 1."""
    if a <= 0 or b <= 0 or not 0.0 <= x <= 1.0:
        return math.nan
    if x == 0.0:
        return 0.0
    if x == 1.0:
        return 1.0
    log_front = (math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                 + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_continued_fraction(x, a, b) / a
    return 1.0 - math.exp(log_front) * _beta_continued_fraction(1.0 - x, b, a) / b


@dataclass(frozen=True, slots=True)
class BetaDistribution:
    """lowriskovercommitment.BetaDistribution, fitted by its first two moments."""

    alpha: float
    beta: float

    @classmethod
    def match_moments(cls, m1: float, m2: float) -> BetaDistribution | None:
        """BetaDistribution.MatchMoments: None when no beta distribution has them."""
        variance = m2 - m1 * m1
        if m1 < 0 or m1 > 1 or variance < 0 or variance >= m1 * (1 - m1):
            return None
        temp = max(m1 * (1 - m1) / variance - 1, 5e-324)
        alpha, beta = m1 * temp, (1 - m1) * temp
        if not (alpha > 0 and beta > 0):
            return None
        return cls(alpha, beta)

    def cdf(self, x: float) -> float:
        """BetaDistribution.DistributionFunction: P(X <= x), 0 when undefined."""
        p = reg_inc_beta(self.alpha, self.beta, x) if 0 <= x <= 1 else math.nan
        if math.isnan(p) or p < 0 or p > 1:
            return 0.0
        return p


def max_variance(m1: float) -> float:
    """GetMaxVariance: the largest variance a distribution on [0, 1] with mean m1 has."""
    return m1 * (1 - m1) if 0 < m1 < 1 else 0.0


def compute_probability(mu: float, sigma: float,
                        threshold: float) -> tuple[float, BetaDistribution | None]:
    """ComputeProbability (lowriskovercommitment/beta.go): P(utilisation <= threshold)
    under the beta distribution with mean mu and deviation sigma, and that distribution."""
    if mu == 0 or (sigma == 0 and mu <= threshold):
        return 1.0, None
    if sigma == 0 and mu > threshold:
        return 0.0, None
    dist = BetaDistribution.match_moments(mu, sigma * sigma + mu * mu)
    if dist is None:
        return 0.0, None
    below = dist.cdf(threshold)
    return (1.0 if math.isnan(below) else below), dist
