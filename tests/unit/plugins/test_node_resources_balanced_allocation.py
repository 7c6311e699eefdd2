"""NodeResourcesBalancedAllocation, shaped after upstream (v1.37)
pkg/scheduler/framework/plugins/noderesources/balanced_allocation_test.go
(TestNodeResourcesBalancedAllocation) and validation_pluginargs_test.go
(TestValidateNodeResourcesBalancedAllocationArgs)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from polsched.framework import CycleState, NodeInfo, PodInfo, Snapshot
from polsched.framework.status import Code
from polsched.plugins import node_resources_balanced_allocation as balanced
from tests import builders
from tests.builders import make_pod
from tests.unit.pipelines import args_errors, build_plugin

pytestmark = pytest.mark.unit

GPU = "nvidia.com/gpu"
_names = itertools.count()


def pod(*containers: dict[str, str], node: str = "") -> PodInfo:
    p = make_pod().name(f"p{next(_names)}").namespace("ns").containers([])
    for i, r in enumerate(containers):
        p.container(f"c{i}", resources={"requests": r})
    if node:
        p.node(node)
    return p.info()


def cpu_mem(cpu: str, mem: str, gpu: str | None = None) -> dict[str, str]:
    r = {"cpu": cpu, "memory": mem}
    if gpu is not None:
        r[GPU] = gpu
    return r


def cpu_only(cpu: str) -> dict[str, str]:
    return {"cpu": cpu}


def make_node(name: str, milli_cpu: int, memory: int, gpus: int | None = None,
              *existing: PodInfo) -> NodeInfo:
    alloc = {"cpu": f"{milli_cpu}m", "memory": str(memory)}
    if gpus is not None:
        alloc[GPU] = str(gpus)
    return builders.make_node().name(name).allocatable(alloc).info(*existing)


CPU_MEM_GPU = {"resources": [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1},
                             {"name": GPU, "weight": 1}]}


def scores(p: PodInfo, nodes: list[NodeInfo], args: dict[str, Any] | None = None,
           ) -> list[int] | Code:
    plugin = build_plugin(balanced.NAME, args)
    state = CycleState()
    st = plugin.pre_score(state, p, nodes, Snapshot(nodes))
    if st.code is Code.SKIP:
        return Code.SKIP
    out: list[int] = plugin.score_nodes(state, p, nodes)
    # Whether or not PreScore was called, the result is the same.
    assert [plugin.score(CycleState(), p, n) for n in nodes] == out
    return out


def test_nothing_requested_skips_in_prescore() -> None:
    nodes = [make_node("node1", 4000, 10000), make_node("node2", 4000, 10000)]
    assert scores(pod({}), nodes) is Code.SKIP


def test_nothing_scheduled_differently_sized_nodes() -> None:
    p = pod(cpu_mem("1000m", "2000"), cpu_mem("2000m", "3000"))
    nodes = [make_node("node1", 4000, 10000), make_node("node2", 6000, 10000)]
    assert scores(p, nodes) == [68, 75]


def test_pods_scheduled_with_resources() -> None:
    p = pod(cpu_mem("1000m", "2000"), cpu_mem("2000m", "3000"))
    nodes = [
        make_node("node1", 10000, 20000, None, pod(cpu_only("1000m"), cpu_only("2000m"))),
        make_node("node2", 10000, 20000, None,
                  pod(cpu_mem("1000m", "2000"), cpu_mem("2000m", "3000"))),
    ]
    assert scores(p, nodes) == [73, 74]


def test_pods_scheduled_with_resources_differently_sized_nodes() -> None:
    p = pod(cpu_mem("1000m", "2000"), cpu_mem("2000m", "3000"))
    nodes = [
        make_node("node1", 10000, 20000, None, pod(cpu_only("1000m"), cpu_only("2000m"))),
        make_node("node2", 10000, 50000, None,
                  pod(cpu_mem("1000m", "2000"), cpu_mem("2000m", "3000"))),
    ]
    assert scores(p, nodes) == [73, 70]


def test_nodes_reach_min_and_max_score() -> None:
    p = pod({"memory": "2000"}, {"memory": "3000"})
    nodes = [make_node("node1", 3000, 5000, None, pod(cpu_only("1000m"), cpu_only("2000m"))),
             make_node("node2", 3000, 5000)]
    assert scores(p, nodes) == [100, 50]


def test_requested_resources_at_node_capacity() -> None:
    p = pod(cpu_only("1000m"), cpu_only("2000m"))
    nodes = [
        make_node("node1", 6000, 10000, None, pod(cpu_only("1000m"), cpu_only("2000m"))),
        make_node("node2", 6000, 10000, None,
                  pod(cpu_mem("1000m", "2000"), cpu_mem("2000m", "3000"))),
    ]
    assert scores(p, nodes) == [62, 62]


def test_scalar_resource_counts_when_the_pod_requests_it() -> None:
    p = pod(cpu_mem("0", "0", "1"))
    nodes = [
        make_node("node1", 3500, 40000, 8,
                  pod(cpu_mem("1000m", "2000"), cpu_mem("2000m", "3000", "3"))),
        make_node("node2", 3500, 40000, 8,
                  pod(cpu_mem("1000m", "2000"), cpu_mem("2000m", "3000"))),
    ]
    assert scores(p, nodes, CPU_MEM_GPU) == [75, 76]


def test_scalar_resource_ignored_when_the_pod_does_not_request_it() -> None:
    p = pod(cpu_mem("1000m", "2000"), cpu_mem("2000m", "3000"))
    nodes = [make_node("node1", 3500, 40000, 8), make_node("node2", 3500, 40000)]
    assert scores(p, nodes, CPU_MEM_GPU) == [56, 56]


def test_a_pod_that_rebalances_a_node_scores_higher_than_one_that_unbalances() -> None:
    # node1: cpu 0 -> 100%, memory 0%: balance 100 -> 50, score 50 + (50+50-100)/2 = 50.
    # node2: cpu 0 -> 50%, memory 100%: balance 50 -> 75, score 50 + (50+75-50)/2 = 87.
    p = pod(cpu_only("1000m"))
    nodes = [make_node("node1", 1000, 1000),
             make_node("node2", 2000, 1000, None, pod({"memory": "1000"}))]
    assert scores(p, nodes) == [50, 87]


@pytest.mark.parametrize(("args", "path"), [
    ({"resources": [{"name": "cpu", "weight": 2}]}, "resources[0].weight"),
    ({"resources": [{"name": "cpu"}, {"name": "cpu"}]}, "resources[1].name"),
    ({"resources": [{"weight": 1}]}, "resources[0].name"),
    ({"resources": "cpu"}, "resources"),
    ({"shape": []}, "shape"),
])
def test_invalid_args_name_the_field(args: dict[str, Any], path: str) -> None:
    assert args_errors(balanced.NAME, args, point="score") == [f"args.{path}"]


def test_default_args() -> None:
    assert balanced.SPEC.default_args == {
        "resources": [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}]}
    assert build_plugin(balanced.NAME).vectors.names == ("cpu", "memory")
    plugin = build_plugin(balanced.NAME, balanced.SPEC.default_args)
    assert plugin.vectors.names == ("cpu", "memory")


def test_default_resources_batch_score_equals_the_general_form() -> None:
    """score_nodes unrolls cpu + memory; it must give balanced_score's numbers, over nodes
    without cpu or memory, full and overcommitted."""
    import random

    rng = random.Random(5)
    nodes = []
    for i in range(200):
        existing = [pod(cpu_mem(f"{rng.randrange(0, 9000)}m", str(rng.randrange(0, 2 * 10**6))))
                    for _ in range(rng.randrange(0, 3))]
        nodes.append(make_node(f"n{i}", rng.randrange(1, 8000) if i % 7 else 0,
                               rng.randrange(1, 10**6) if i % 11 else 0, None, *existing))
    plugin = build_plugin(balanced.NAME)
    pods = (pod(cpu_mem("250m", "4096")), pod(cpu_only("1")), pod(cpu_mem("9", "10000000")))
    # Each pod twice: first as a new request signature (per-node rows), then repeated
    # (per-signature scores).
    for p in pods + pods:
        state = CycleState()
        assert plugin.pre_score(state, p, nodes, Snapshot(nodes)).ok
        reqs = plugin.vectors.pod_requests(p)
        general = [balanced.balanced_score(*plugin.vectors.node(n, reqs)) for n in nodes]
        assert plugin.score_nodes(state, p, nodes) == general


def test_scores_of_a_node_that_changed_are_recomputed() -> None:
    """Scores are remembered per node generation: a pod placed on a node between two
    cycles changes that node's score as if nothing were remembered."""
    nodes = [make_node(f"n{i}", 4000, 8000) for i in range(3)]
    plugin = build_plugin(balanced.NAME)
    p = pod(cpu_mem("1000m", "1000"))

    def run(plug: balanced.NodeResourcesBalancedAllocation) -> list[int]:
        state = CycleState()
        assert plug.pre_score(state, p, nodes, Snapshot(nodes)).ok
        out = plug.score_nodes(state, p, nodes)
        assert isinstance(out, list)
        return out

    first = run(plugin)
    nodes[1].add_pod(pod(cpu_mem("3000m", "0"), node="n1"))
    again = run(plugin)
    assert again == run(build_plugin(balanced.NAME))
    assert again[0] == first[0] and again[1] != first[1]


def test_pods_all_different_follow_node_changes() -> None:
    """Pods that never repeat reuse each node's allocatable, requested and balance without
    the pod while the node is unchanged: a pod placed on a node between two such cycles
    changes its score as if nothing were kept."""
    nodes = [make_node(f"n{i}", 4000, 8000) for i in range(3)]
    plugin = build_plugin(balanced.NAME)
    for k in range(6):
        p = pod(cpu_mem(f"{100 + 150 * k}m", str(500 + 700 * k)))
        state = CycleState()
        assert plugin.pre_score(state, p, nodes, Snapshot(nodes)).ok
        reqs = plugin.vectors.pod_requests(p)
        general = [balanced.balanced_score(*plugin.vectors.node(n, reqs)) for n in nodes]
        assert plugin.score_nodes(state, p, nodes) == general
        nodes[k % 3].add_pod(pod(cpu_mem(f"{300 * (k + 1)}m", "100"), node=f"n{k % 3}"))
