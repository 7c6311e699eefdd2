"""LowRiskOverCommitment against a table computed from Trimaran's formula
(pkg/trimaran/lowriskovercommitment: Score, computeRank, computeRisk; beta.go), with the
beta distribution's CDF integrated numerically here, independently of the plugin's
continued fraction."""

from __future__ import annotations

import math

import pytest

from polsched.framework import CycleState
from polsched.framework.load import StaticLoad
from polsched.plugins import trimaran
from tests.unit.pipelines import args_errors, build_plugin
from tests.unit.plugins.loads import MI, container, load, node, pod, static

pytestmark = pytest.mark.unit

NAME = "LowRiskOverCommitment"


def beta_cdf(x: float, a: float, b: float, steps: int = 20000) -> float:
    """P(X <= x) for X ~ Beta(a, b): the density integrated by Simpson's rule, in
    t = x * s^(1/a) when a < 1 (so that the integrand is smooth at 0)."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    log_b = math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)

    def f(s: float) -> float:
        if a < 1:  # t^(a-1) dt = x^a / a ds
            t = x * s ** (1 / a)
            return math.exp((b - 1) * math.log1p(-t) + a * math.log(x) - math.log(a) - log_b)
        t = x * s  # dt = x ds
        if t == 0:
            return 0.0 if a > 1 else x * math.exp(-log_b)
        return x * math.exp((a - 1) * math.log(t) + (b - 1) * math.log1p(-t) - log_b)

    h = 1 / steps
    total = f(0) + f(1)
    for i in range(1, steps):
        total += (4 if i % 2 else 2) * f(i * h)
    return total * h / 3


def probability(mu: float, sigma: float,
                threshold: float) -> tuple[float, tuple[float, float] | None]:
    if mu == 0 or (sigma == 0 and mu <= threshold):
        return 1.0, None
    if sigma == 0:
        return 0.0, None
    var = sigma * sigma
    if var >= mu * (1 - mu):
        return 0.0, None
    temp = mu * (1 - mu) / var - 1
    a, b = mu * temp, (1 - mu) * temp
    return beta_cdf(threshold, a, b), (a, b)


def risk(req: float, lim: float, req_minus: float, lim_minus: float, cap: float,
         mu: float, sigma: float, window: int, w: float) -> float:
    r_limit = (lim - cap) / (lim - req) if lim > cap else 0.0
    sigma = min(sigma * math.sqrt(window), math.sqrt(mu * (1 - mu) * 0.99) if 0 < mu < 1 else 0)
    p, dist = probability(mu, sigma, min(max(req_minus / cap, 0), 1))
    if lim_minus < cap and req_minus <= lim_minus:
        if lim_minus == 0:
            p = 1.0
        elif dist is not None:
            lp = beta_cdf(lim_minus / cap, *dist)
            if lp > 0:
                p = min(max(p / lp, 0), 1)
    return min(max(w * r_limit + (1 - w) * (1 - p), 0), 1)


@pytest.mark.parametrize(("a", "b", "x"), [(2, 5, 0.3), (0.5, 0.5, 0.2), (8.3, 1.7, 0.9),
                                           (0.7, 3.2, 0.05), (30, 40, 0.45)])
def test_incomplete_beta_matches_integration(a: float, b: float, x: float) -> None:
    assert trimaran.reg_inc_beta(a, b, x) == pytest.approx(beta_cdf(x, a, b), abs=1e-6)


# The node's pods (requests, limits), the usage (cpu avg/std m, memory avg/std Mi), the
# incoming pod (requests, limits), window, weights.
CASES = [
    # Limits far above capacity on cpu: riskLimit decides.
    ([({"cpu": "1", "memory": "1Gi"}, {"cpu": "3", "memory": "2Gi"})],
     (1500, 300, 2048, 200), ({"cpu": "500m", "memory": "256Mi"}, {"cpu": "2", "memory": "1Gi"}),
     5, {"cpu": 0.5, "memory": 0.5}),
    # Burstable pods well within capacity: riskLoad from the usage distribution.
    ([({"cpu": "1", "memory": "2Gi"}, {"cpu": "2", "memory": "3Gi"})],
     (1200, 200, 2500, 300), ({"cpu": "500m", "memory": "512Mi"}, {"cpu": "1", "memory": "1Gi"}),
     5, {"cpu": 0.5, "memory": 0.5}),
    # An empty node, little usage.
    ([], (100, 20, 512, 10), ({"cpu": "250m", "memory": "256Mi"}, {}), 5,
     {"cpu": 0.5, "memory": 0.5}),
    # Heavier weights on limits, a wider window.
    ([({"cpu": "2", "memory": "4Gi"}, {"cpu": "3", "memory": "6Gi"}),
      ({"cpu": "500m", "memory": "1Gi"}, {})],
     (2600, 500, 5000, 800), ({"cpu": "500m", "memory": "512Mi"}, {"cpu": "1500m"}),
     10, {"cpu": 0.8, "memory": 0.2}),
]


@pytest.mark.parametrize(("on_node", "usage", "incoming", "window", "weights"), CASES)
def test_score_follows_the_formula(on_node: list[tuple[dict[str, str], dict[str, str]]],
                                   usage: tuple[float, float, float, float],
                                   incoming: tuple[dict[str, str], dict[str, str]],
                                   window: int, weights: dict[str, float]) -> None:
    n = node("n1", "4", "8Gi")
    for i, (rq, lm) in enumerate(on_node):
        n.add_pod(pod(f"o{i}", container(rq, lm), node_name="n1"))
    nl = load(0, 0, cpu_avg=usage[0], cpu_std=usage[1], mem_avg=usage[2] * MI,
              mem_std=usage[3] * MI)
    plugin = build_plugin(NAME, {"smoothingWindowSize": window, "riskLimitWeights": weights},
                          node_load=static(n1=nl))
    p = pod("p", container(*incoming))
    caps = {"cpu": 4000.0, "memory": 8 * 1024.0 * MI}
    risks = []
    for r, (avg, std, div) in {"cpu": (usage[0], usage[1], 1.0),
                               "memory": (usage[2] * MI, usage[3] * MI, 1.0)}.items():
        del div
        req_minus = sum(float(x.requests.get(r, 0)) for x in n.pods.values())
        lim_minus = sum(max(float(trimaran.requests_and_limits(x)[2 if r == "cpu" else 3]), 0)
                        for x in n.pods.values())
        req_cpu, _, lim_cpu, lim_mem = trimaran.requests_and_limits(p)
        my_req = req_cpu if r == "cpu" else p.requests.get("memory", 0)
        my_lim = lim_cpu if r == "cpu" else lim_mem
        cap = caps[r]
        mu = min(max(avg / cap, 0), 1)
        sigma = min(max(std / cap, 0), 1)
        risks.append(risk(min(req_minus + my_req, cap), lim_minus + my_lim,
                          min(req_minus, cap), lim_minus, cap, mu, sigma, window, weights[r]))
    want = (1 - max(risks)) * 100
    assert plugin.score(CycleState(), p, n) == math.floor(want + 0.5)


def test_hand_checked_limit_risk() -> None:
    # cpu: node pods request 1 / limit 3 cores, incoming 0.5 / 2 of 4: L = 5 > C = 4,
    # riskLimit = (5 - 4) / (5 - 1.5) = 0.2857; no usage spread and mu below the
    # threshold: riskLoad 0; risk = 0.5 * 0.2857. Memory has no limits over capacity and
    # mu = 0.125 <= threshold 0.125: risk 0. Score = round((1 - 0.142857) * 100) = 86.
    n = node("n1", "4", "8Gi")
    n.add_pod(pod("o", container({"cpu": "1", "memory": "1Gi"}, {"cpu": "3"}),
                  node_name="n1"))
    plugin = build_plugin(NAME, node_load=static(n1=load(0, 0, cpu_avg=500,
                                                          mem_avg=1024 * MI)))
    got = plugin.score(CycleState(), pod("p", container({"cpu": "500m"}, {"cpu": "2"})), n)
    assert got == 86


def test_best_effort_pod_and_missing_metrics_score_zero() -> None:
    n = node("n1")
    plugin = build_plugin(NAME, node_load=static(n1=load(100, 100 * MI)))
    assert plugin.score(CycleState(), pod("p", container()), n) == 0
    none = build_plugin(NAME, node_load=StaticLoad({}))
    assert none.score(CycleState(), pod("p", container({"cpu": "1"})), n) == 0


def test_args_errors_name_the_field() -> None:
    assert args_errors(NAME, {"smoothingWindowSize": 0}) == ["args.smoothingWindowSize"]
    assert args_errors(NAME, {"riskLimitWeights": {"cpu": 1.5}}) == [
        "args.riskLimitWeights.cpu"]
    assert args_errors(NAME, {"riskLimitWeights": {"gpu": 0.5}}) == [
        "args.riskLimitWeights.gpu"]
    assert args_errors(NAME, {"riskLimitWeights": {"cpu": 0.3, "memory": 0.7},
                              "smoothingWindowSize": 3}) == []
