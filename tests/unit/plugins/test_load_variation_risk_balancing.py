"""LoadVariationRiskBalancing against a table computed from Trimaran's formula
(pkg/trimaran/loadvariationriskbalancing: Score, computeScore), and upstream's
computeScore cases (analysis_test.go, TestComputeScore)."""

from __future__ import annotations

import math

import pytest

from polsched.framework import CycleState
from polsched.framework.load import StaticLoad
from polsched.plugins import trimaran
from polsched.plugins.load_variation_risk_balancing import compute_score
from tests.unit.pipelines import args_errors, build_plugin
from tests.unit.plugins.loads import MI, container, load, node, pod, static

pytestmark = pytest.mark.unit

NAME = "LoadVariationRiskBalancing"


def risk_score(avg: float, std: float, req: float, cap: float, margin: float,
               sensitivity: float) -> float:
    """One resource's score, written out: clip, mu, sigma, risk."""
    avg, std = min(max(avg, 0), cap), min(max(std, 0), cap)
    mu = min(max((avg + req) / cap, 0), 1)
    sigma: float = min(max(std / cap, 0), 1) ** (1 / sensitivity)
    sigma = min(max(sigma * margin, 0), 1)
    return (1 - (mu + sigma) / 2) * 100


@pytest.mark.parametrize(("avg", "std", "req", "expected"), [
    (40, 36, 10, 57),      # valid data (sensitivity 1)
])
def test_upstream_compute_score_sensitivity_1(avg: float, std: float, req: float,
                                             expected: int) -> None:
    rs = trimaran.ResourceStats(avg, std, req, 100)
    assert trimaran.go_round(compute_score(rs, 1, 1)) == expected


@pytest.mark.parametrize(("cap", "avg", "std", "expected"), [
    (0, 40, 36, 0),        # zero capacity
    (100, -40, 36, 65),    # negative usedAvg
    (100, 200, 36, 20),    # large usedAvg
    (100, 40, -36, 75),    # negative usedStdev
    (100, 40, 120, 25),    # large usedStdev
])
def test_upstream_compute_score_sensitivity_2(cap: float, avg: float, std: float,
                                             expected: int) -> None:
    rs = trimaran.ResourceStats(avg, std, 10, cap)
    assert trimaran.go_round(compute_score(rs, 1, 2)) == expected


# cpu (avg m, std m), memory (avg Mi, std Mi), the pod's requests, margin, sensitivity
TABLE = [
    ((1000, 0), (1024, 0), ("500m", "512Mi"), 1.0, 1.0),
    ((1000, 400), (2048, 100), ("500m", "512Mi"), 1.0, 1.0),
    ((3000, 800), (1024, 0), ("250m", "256Mi"), 1.0, 1.0),     # cpu decides
    ((200, 10), (7000, 500), ("250m", "256Mi"), 1.0, 1.0),     # memory decides
    ((1000, 400), (2048, 100), ("500m", "512Mi"), 3.0, 2.0),   # mu + 3 sqrt(sigma)
    ((1000, 400), (2048, 100), ("500m", "512Mi"), 0.5, 0.5),
    ((5000, 0), (9000, 0), ("1", "1Gi"), 1.0, 1.0),            # over capacity: clipped
]


@pytest.mark.parametrize(("cpu", "mem", "requests", "margin", "sensitivity"), TABLE)
def test_score_follows_the_formula(cpu: tuple[float, float], mem: tuple[float, float],
                                   requests: tuple[str, str], margin: float,
                                   sensitivity: float) -> None:
    n = node("n1", "4", "8Gi")
    nl = load(0, 0, cpu_avg=cpu[0], cpu_std=cpu[1], mem_avg=mem[0] * MI,
              mem_std=mem[1] * MI)
    plugin = build_plugin(NAME, {"safeVarianceMargin": margin,
                                 "safeVarianceSensitivity": sensitivity},
                          node_load=static(n1=nl))
    p = pod("p", container({"cpu": requests[0], "memory": requests[1]}))
    req_cpu = float(p.requests["cpu"])
    req_mem = p.requests["memory"] / MI
    want = min(risk_score(cpu[0], cpu[1], req_cpu, 4000, margin, sensitivity),
               risk_score(mem[0], mem[1], req_mem, 8192, margin, sensitivity))
    assert plugin.score(CycleState(), p, n) == math.floor(want + 0.5)


def test_least_used_node_wins_and_variance_costs() -> None:
    nodes = [node(f"n{i}") for i in range(3)]
    source = static(n0=load(0, 0, cpu_avg=2000, mem_avg=1024 * MI),
                    n1=load(0, 0, cpu_avg=500, mem_avg=1024 * MI),
                    n2=load(0, 0, cpu_avg=500, cpu_std=1000, mem_avg=1024 * MI))
    plugin = build_plugin(NAME, node_load=source)
    p = pod("p", container({"cpu": "100m", "memory": "64Mi"}))
    scores = [plugin.score(CycleState(), p, n) for n in nodes]
    assert scores[1] > scores[2] > scores[0]


def test_no_metrics_is_the_minimum_score() -> None:
    plugin = build_plugin(NAME, node_load=StaticLoad({}))
    assert plugin.score(CycleState(), pod("p", container({"cpu": "1"})), node("n1")) == 0


def test_pods_in_flight_add_their_requests() -> None:
    n = node("n1", "4", "8Gi")
    plugin = build_plugin(NAME, node_load=static(n1=load(1000, 1024 * MI)))
    p = pod("p", container({"cpu": "100m", "memory": "100Mi"}))
    before = plugin.score(CycleState(), p, n)
    n.add_pod(pod("a", container({"cpu": "1", "memory": "1Gi"}), node_name="n1"))
    after = plugin.score(CycleState(), p, n)
    want = min(risk_score(2000, 0, 100, 4000, 1, 1), risk_score(2048, 0, 100, 8192, 1, 1))
    assert (before, after) == (
        math.floor(min(risk_score(1000, 0, 100, 4000, 1, 1),
                       risk_score(1024, 0, 100, 8192, 1, 1)) + 0.5),
        math.floor(want + 0.5))


def test_args_errors_name_the_field() -> None:
    assert args_errors(NAME, {"safeVarianceMargin": -1}) == ["args.safeVarianceMargin"]
    assert args_errors(NAME, {"safeVarianceSensitivity": "2"}) == [
        "args.safeVarianceSensitivity"]
    assert args_errors(NAME, {"margin": 1}) == ["args.margin"]
    assert args_errors(NAME, {"safeVarianceMargin": 2, "safeVarianceSensitivity": 0.5}) == []
