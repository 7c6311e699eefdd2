"""TargetLoadPacking against a table computed from Trimaran's formula
(pkg/trimaran/targetloadpacking, TargetLoadPacking.Score), and upstream's own cases
(targetloadpacking_test.go, TestTargetLoadPackingScoring)."""

from __future__ import annotations

import math

import pytest

from polsched.framework import CycleState
from polsched.framework.load import StaticLoad
from polsched.framework.registry import ArgsError
from tests.unit.pipelines import args_errors, build_plugin
from tests.unit.plugins.loads import container, load, node, pod, static

pytestmark = pytest.mark.unit

NAME = "TargetLoadPacking"


def go_round(x: float) -> int:
    return int(math.copysign(math.floor(abs(x) + 0.5), x))


def expected(usage_milli: float, pod_milli: float, cap_milli: float, target: float) -> int:
    """The formula, written out: predicted utilisation U in percent, then the score."""
    u = 100 * (usage_milli + pod_milli) / cap_milli
    if u > target:
        return 0 if u > 100 else go_round(target * (100 - u) / (100 - target))
    return go_round((100 - target) * u / target + target)


# usage (m), pod's containers, node cpu, target, the pod's predicted usage (m)
TABLE = [
    (0, [container()], "4", 40, 1000),                                    # default 1000m
    (0, [container({"cpu": "200m"})], "4", 40, 300),                      # request * 1.5
    (0, [container({"cpu": "200m"}, {"cpu": "700m"})], "4", 40, 700),     # the limit
    (600, [container({"cpu": "200m"})], "4", 40, 300),
    (1300, [container({"cpu": "100m"})], "4", 40, 150),
    (1700, [container({"cpu": "100m"})], "4", 40, 150),
    (2000, [container({"cpu": "500m"}), container({"cpu": "1"})], "4", 40, 2250),
    (3900, [container({"cpu": "100m"})], "4", 40, 150),                   # over 100%
    (500, [container({"cpu": "100m"})], "2", 70, 150),
    (1500, [container({"cpu": "100m"})], "2", 70, 150),
    (0, [container({"cpu": "100m"})], "2", 100, 150),
]


@pytest.mark.parametrize(("usage", "containers", "cpu", "target", "pod_milli"), TABLE)
def test_score_follows_the_formula(usage: float, containers: list[dict[str, object]],
                                   cpu: str, target: int, pod_milli: int) -> None:
    n = node("n1", cpu)
    plugin = build_plugin(NAME, {"targetUtilization": target},
                          node_load=static(n1=load(usage)))
    assert plugin.pod_cpu(pod("p", *containers)) == pod_milli
    got = plugin.score(CycleState(), pod("p", *containers), n)
    assert got == expected(usage, pod_milli, float(n.allocatable["cpu"]), target)


def test_upstream_cases() -> None:
    # node-1: capacity 1000m; the pod has no containers (predicted usage 0).
    n = node("node-1", "1000m")
    empty = pod("p")
    new_node = build_plugin(NAME, node_load=static(**{"node-1": load(0)}))
    assert new_node.score(CycleState(), empty, n) == 40
    hot = build_plugin(NAME, node_load=static(**{"node-1": load(500)}))  # 50%
    assert hot.score(CycleState(), empty, n) == 33
    # 30% used, a pod with a 1000m overhead: over 100%, the minimum score.
    excess = build_plugin(NAME, node_load=static(**{"node-1": load(300)}))
    assert excess.score(CycleState(), pod("p", container({"cpu": "0"}, {"cpu": "0"}),
                                          overhead={"cpu": "1"}), n) == 0
    # No metrics for the node: the minimum score.
    missing = build_plugin(NAME, node_load=StaticLoad({}))
    assert missing.score(CycleState(), empty, n) == 0


def test_utilisation_is_over_the_allocatable() -> None:
    # kwok gives a node created with only an allocatable a capacity of 1000 cores.
    n = node("n1", "2", capacity_cpu="1k")
    plugin = build_plugin(NAME, node_load=static(n1=load(1000)))
    got = plugin.score(CycleState(), pod("p", container({"cpu": "200m"})), n)
    assert got == expected(1000, 300, 2000, 40)


def test_pods_bound_since_the_sample_are_added_to_the_usage() -> None:
    n = node("n1", "4")
    plugin = build_plugin(NAME, node_load=static(n1=load(400)))
    incoming = pod("p", container({"cpu": "100m"}))
    before = plugin.score(CycleState(), incoming, n)
    assert before == expected(400, 150, 4000, 40)
    # Two pods bound after the sample: their predicted usage (limit; request * 1.5) counts.
    n.add_pod(pod("a", container({"cpu": "100m"}, {"cpu": "500m"}), node_name="n1"))
    n.add_pod(pod("b", container({"cpu": "200m"}), node_name="n1"))
    after = plugin.score(CycleState(), incoming, n)
    assert after == expected(400 + 500 + 300, 150, 4000, 40)
    assert after > before  # packing: the busier node (below target) scores higher


def test_args_errors_name_the_field() -> None:
    assert args_errors(NAME, {"targetUtilization": 101}) == ["args.targetUtilization"]
    assert args_errors(NAME, {"targetUtilization": "40"}) == ["args.targetUtilization"]
    assert args_errors(NAME, {"defaultRequests": {"cpu": "lots"}}) == [
        "args.defaultRequests.cpu"]
    assert args_errors(NAME, {"defaultRequests": {"memory": "1Gi"}}) == [
        "args.defaultRequests.memory"]
    assert args_errors(NAME, {"defaultRequestsMultiplier": 1.5}) == [
        "args.defaultRequestsMultiplier"]
    assert args_errors(NAME, {"metricProvider": {"type": "Prometheus"}}) == [
        "args.metricProvider.type"]
    assert args_errors(NAME, {"metricProvider": {"address": "http://x"}}) == [
        "args.metricProvider.address"]
    assert args_errors(NAME, {"watcherAddress": "http://lw:2020"}) == ["args.watcherAddress"]
    assert args_errors(NAME, {"metricsIntervalSeconds": 0}) == ["args.metricsIntervalSeconds"]
    assert args_errors(NAME, {"targetUtilisation": 40}) == ["args.targetUtilisation"]
    assert args_errors(NAME, {"targetUtilization": 60, "defaultRequests": {"cpu": "500m"},
                              "defaultRequestsMultiplier": "2",
                              "metricProvider": {"type": "KubernetesMetricsServer"},
                              "metricsIntervalSeconds": 10}) == []
    with pytest.raises(ArgsError, match="KubernetesMetricsServer"):
        build_plugin(NAME, {"metricProvider": {"type": "SignalFx"}})


def test_zero_or_negative_target_means_the_default() -> None:
    plugin = build_plugin(NAME, {"targetUtilization": 0}, node_load=static())
    assert plugin.target == 40
