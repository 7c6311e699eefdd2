"""NodeResourcesFit, shaped after upstream
pkg/scheduler/framework/plugins/noderesources/fit_test.go (TestEnoughRequests,
TestNotEnoughRequests, TestStorageRequests, TestFitScore), least_allocated_test.go,
most_allocated_test.go, requested_to_capacity_ratio_test.go (TestBrokenLinearFunction) and
apis/config/validation/validation_pluginargs_test.go (TestValidateFitArgs)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from polsched.framework import CycleState, NodeInfo, PodInfo, Snapshot
from polsched.framework.status import Code
from polsched.plugins import node_resources_fit
from polsched.plugins.node_resources_fit import (
    DEFAULT_ARGS,
    broken_linear_function,
    is_extended_resource_name,
    is_scalar_resource_name,
)
from tests.builders import make_node, make_pod
from tests.unit.pipelines import args_errors, build, build_plugin, policy_object

pytestmark = pytest.mark.unit

EXT_A = "example.com/aaa"
EXT_B = "example.com/bbb"
K8S_IO_A = "kubernetes.io/something"
HUGE_A = "hugepages-2Mi"

_names = itertools.count()


def requests(cpu_m: int = 0, memory: int = 0, extra: dict[str, int] | None = None,
             ) -> dict[str, str]:
    """A container's requests, as upstream's newResourcePod: cpu in millicores."""
    r = {"cpu": f"{cpu_m}m", "memory": str(memory)}
    for k, v in (extra or {}).items():
        r[k] = str(v)
    return r


def pod(*containers: dict[str, str], init: tuple[dict[str, str], ...] = (),
        overhead: dict[str, str] | None = None, node: str = "") -> PodInfo:
    p = make_pod().name(f"p{next(_names)}").namespace("ns").containers([])
    for i, r in enumerate(containers):
        p.container(f"c{i}", resources={"requests": r})
    p.spec(initContainers=[])
    for i, r in enumerate(init):
        p.init_container(f"i{i}", resources={"requests": r})
    if overhead:
        p.overhead(overhead)
    if node:
        p.node(node)
    return p.info()


def node(allocatable: dict[str, str], *existing: PodInfo, name: str = "n") -> NodeInfo:
    return make_node().name(name).allocatable(allocatable).info(*existing)


# makeAllocatableResources(10, 20, 32, 5, 20, 5)
ALLOCATABLE = {"cpu": "10m", "memory": "20", "pods": "32", EXT_A: "5",
               "ephemeral-storage": "20", HUGE_A: "5"}


def run_filter(p: PodInfo, n: NodeInfo, args: dict[str, Any] | None = None,
               extenders: list[dict[str, Any]] | None = None) -> tuple[Code, tuple[str, ...]]:
    entry: dict[str, Any] = {"name": node_resources_fit.NAME}
    if args is not None:
        entry["args"] = args
    # The policy's extenders field: their ignored managedResources reach the handle.
    plugin = build(policy_object([entry], defaults=False, extenders=extenders or [])
                   ).filters[0].plugin
    assert isinstance(plugin, node_resources_fit.NodeResourcesFit)
    state = CycleState()
    assert plugin.pre_filter(state, p, Snapshot([n])).ok
    st = plugin.filter(state, p, n)
    return st.code, st.reasons


FITS = (Code.SUCCESS, ())


def insufficient(*names: str, unresolvable: bool = False) -> tuple[Code, tuple[str, ...]]:
    code = Code.UNSCHEDULABLE_AND_UNRESOLVABLE if unresolvable else Code.UNSCHEDULABLE
    return code, tuple(f"Insufficient {n}" for n in names)


ENOUGH_CASES: list[tuple[str, PodInfo, PodInfo, dict[str, Any] | None, Any]] = [
    ("no resources requested always fits", pod(), pod(requests(10, 20)), None, FITS),
    ("too many resources fails", pod(requests(1, 1)), pod(requests(10, 20)), None,
     insufficient("cpu", "memory")),
    ("too many resources fails due to init container cpu",
     pod(requests(1, 1), init=(requests(3, 1),)), pod(requests(8, 19)), None,
     insufficient("cpu")),
    ("too many resources fails due to highest init container cpu",
     pod(requests(1, 1), init=(requests(3, 1), requests(2, 1))), pod(requests(8, 19)), None,
     insufficient("cpu")),
    ("too many resources fails due to init container memory",
     pod(requests(1, 1), init=(requests(1, 3),)), pod(requests(9, 19)), None,
     insufficient("memory")),
    ("init container fits because it's the max, not sum, of containers and init containers",
     pod(requests(1, 1), init=(requests(1, 1),)), pod(requests(9, 19)), None, FITS),
    ("both resources fit", pod(requests(1, 1)), pod(requests(5, 5)), None, FITS),
    ("one resource memory fits", pod(requests(2, 1)), pod(requests(9, 5)), None,
     insufficient("cpu")),
    ("one resource cpu fits", pod(requests(1, 2)), pod(requests(5, 19)), None,
     insufficient("memory")),
    ("equal edge case", pod(requests(5, 1)), pod(requests(5, 19)), None, FITS),
    ("extended resource fits", pod(requests(0, 0, extra={EXT_A: 1})), pod(), None, FITS),
    ("extended resource capacity enforced", pod(requests(1, 1, extra={EXT_A: 10})),
     pod(), None, insufficient(EXT_A, unresolvable=True)),
    ("extended resource allocatable enforced", pod(requests(1, 1, extra={EXT_A: 1})),
     pod(requests(0, 0, extra={EXT_A: 5})), None, insufficient(EXT_A)),
    ("extended resource allocatable enforced for multiple containers",
     pod(requests(1, 1, extra={EXT_A: 3}), requests(1, 1, extra={EXT_A: 3})),
     pod(requests(0, 0, extra={EXT_A: 2})), None, insufficient(EXT_A, unresolvable=True)),
    ("extended resource allocatable enforced for unknown resource",
     pod(requests(1, 1, extra={EXT_B: 1})), pod(), None,
     insufficient(EXT_B, unresolvable=True)),
    ("kubernetes.io resource capacity enforced", pod(requests(1, 1, extra={K8S_IO_A: 10})),
     pod(), None, insufficient(K8S_IO_A, unresolvable=True)),
    ("hugepages resource capacity enforced", pod(requests(1, 1, extra={HUGE_A: 10})), pod(), None,
     insufficient(HUGE_A, unresolvable=True)),
    ("hugepages resource allocatable enforced for multiple containers",
     pod(requests(1, 1, extra={HUGE_A: 3}), requests(1, 1, extra={HUGE_A: 3})),
     pod(requests(0, 0, extra={HUGE_A: 2})), None, insufficient(HUGE_A, unresolvable=True)),
    ("skip checking ignored extended resource", pod(requests(1, 1, extra={EXT_B: 1})), pod(),
     {"ignoredResources": [EXT_B]}, FITS),
    ("resources + pod overhead fits", pod(requests(1, 1), overhead={"cpu": "3m", "memory": "13"}),
     pod(requests(5, 5)), None, FITS),
    ("requests + overhead does not fit for memory",
     pod(requests(1, 1), overhead={"cpu": "1m", "memory": "15"}), pod(requests(5, 5)), None,
     insufficient("memory")),
    ("skip checking ignored extended resource via resource groups",
     pod(requests(1, 1, extra={EXT_B: 1, K8S_IO_A: 1})), pod(),
     {"ignoredResourceGroups": ["example.com"]}, insufficient(K8S_IO_A, unresolvable=True)),
    ("skip checking extended resource request with quantity zero",
     pod(requests(1, 1, extra={EXT_A: 0})), pod(requests(0, 0, extra={EXT_A: 6})), None,
     FITS),
]


@pytest.mark.parametrize(("p", "existing", "args", "want"), [c[1:] for c in ENOUGH_CASES],
                         ids=[c[0] for c in ENOUGH_CASES])
def test_enough_requests(p: PodInfo, existing: PodInfo, args: dict[str, Any] | None,
                         want: tuple[Code, tuple[str, ...]]) -> None:
    assert run_filter(p, node(ALLOCATABLE, existing), args) == want


def test_extenders_ignored_resources_are_merged_into_ignored_resources() -> None:
    p = pod(requests(1, 1, extra={EXT_B: 1}))
    n = node(ALLOCATABLE, pod())
    assert run_filter(p, n)[0] is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    ext = {"urlPrefix": "http://127.0.0.1:1/", "filterVerb": "filter",
           "managedResources": [{"name": EXT_B, "ignoredByScheduler": True}]}
    assert run_filter(p, n, extenders=[ext]) == FITS


def test_only_extended_resources_can_be_ignored() -> None:
    p = pod(requests(1, 1, extra={HUGE_A: 10}))
    assert run_filter(p, node(ALLOCATABLE, pod()), {"ignoredResources": [HUGE_A]}) == \
        insufficient(HUGE_A, unresolvable=True)


# TestNotEnoughRequests: allocatable (10m, 20, pods 1) with one pod already there.
ONE_POD = {"cpu": "10m", "memory": "20", "pods": "1"}
TOO_MANY_PODS = (Code.UNSCHEDULABLE, ("Too many pods",))


@pytest.mark.parametrize(("p", "existing"), [
    (pod(), pod(requests(10, 20))),
    (pod(requests(1, 1)), pod(requests(5, 5))),
    (pod(requests(5, 1)), pod(requests(5, 19))),
    (pod(requests(5, 1), init=(requests(5, 1),)), pod(requests(5, 19))),
], ids=["even without specified resources", "even if both resources fit",
        "even for equal edge case", "even for equal edge case due to init container"])
def test_not_enough_pods(p: PodInfo, existing: PodInfo) -> None:
    assert run_filter(p, node(ONE_POD, existing)) == TOO_MANY_PODS


def test_too_many_pods_and_insufficient_resources_are_all_reported() -> None:
    n = node(ONE_POD, pod(requests(10, 20)))
    assert run_filter(pod(requests(1, 1)), n) == (
        Code.UNSCHEDULABLE, ("Too many pods", "Insufficient cpu", "Insufficient memory"))


def test_node_without_pods_allocatable_takes_no_pod() -> None:
    assert run_filter(pod(), node({"cpu": "1"})) == TOO_MANY_PODS


@pytest.mark.parametrize(("p", "existing", "want"), [
    (pod(requests(10, 10)), pod(requests(2, 10)), insufficient("cpu")),
    (pod(requests(2, 1, extra={"ephemeral-storage": 10})), pod(requests(2, 2)), FITS),
    (pod(requests(2, 2, extra={"ephemeral-storage": 25})), pod(requests(2, 2)),
     insufficient("ephemeral-storage", unresolvable=True)),
    (pod(requests(2, 2, extra={"ephemeral-storage": 10})),
     pod(requests(2, 2, extra={"ephemeral-storage": 15})),
     insufficient("ephemeral-storage")),
], ids=["no storage requested, cpu insufficient", "storage ephemeral local storage request fits",
        "ephemeral local storage request exceeds allocatable",
        "ephemeral local storage is sufficient only without the existing pod"])
def test_storage_requests(p: PodInfo, existing: PodInfo,
                          want: tuple[Code, tuple[str, ...]]) -> None:
    assert run_filter(p, node(ALLOCATABLE, existing)) == want


def test_resource_name_classes() -> None:
    assert is_extended_resource_name(EXT_A)
    assert not is_extended_resource_name(K8S_IO_A)
    assert not is_extended_resource_name("cpu")
    assert not is_extended_resource_name("requests.example.com/a")
    for name in (EXT_A, K8S_IO_A, HUGE_A, "attachable-volumes-aws-ebs"):
        assert is_scalar_resource_name(name), name
    for name in ("cpu", "memory", "pods", "ephemeral-storage", "foo"):
        assert not is_scalar_resource_name(name), name


# -- score ---------------------------------------------------------------------------------


def scores(p: PodInfo, nodes: list[NodeInfo], args: dict[str, Any] | None) -> list[int]:
    plugin = build_plugin(node_resources_fit.NAME, args)
    state = CycleState()
    assert plugin.pre_score(state, p, nodes, Snapshot(nodes)).ok
    out: list[int] = plugin.score_nodes(state, p, nodes)
    # Score one by one without PreScore gives the same numbers.
    assert [plugin.score(CycleState(), p, n) for n in nodes] == out
    return out


def strategy(kind: str, shape: list[tuple[int, int]] | None = None,
             resources: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    s: dict[str, Any] = {"type": kind}
    if resources is not None:
        s["resources"] = resources
    if shape is not None:
        s["requestedToCapacityRatio"] = {
            "shape": [{"utilization": u, "score": sc} for u, sc in shape]}
    return {"scoringStrategy": s}


def fit_score_nodes(pod_cpu: int, pod_mem: int) -> tuple[PodInfo, list[NodeInfo]]:
    """TestFitScore's cluster: whole-cpu quantities as upstream ("cpu": "3000")."""
    def n(name: str, cpu: int, used_cpu: int, used_mem: int) -> NodeInfo:
        existing = (make_pod().name(f"e-{name}")
                    .req(cpu=str(used_cpu), memory=str(used_mem)).info())
        return node({"cpu": str(cpu), "memory": "10000", "pods": "32"}, existing, name=name)
    p = make_pod().name("p").req(cpu=str(pod_cpu), memory=str(pod_mem)).info()
    return p, [n("node1", 4000, 2000, 4000), n("node2", 6000, 1000, 2000)]


@pytest.mark.parametrize(("pod_req", "args", "want"), [
    ((3000, 5000), strategy("RequestedToCapacityRatio", [(0, 10), (100, 0)]), [10, 32]),
    ((3000, 5000), strategy("RequestedToCapacityRatio", [(0, 0), (100, 10)]), [95, 68]),
    ((1000, 2000), strategy("MostAllocated"), [67, 36]),
    ((1000, 2000), strategy("LeastAllocated"), [32, 63]),
    ((1000, 2000), None, [32, 63]),
], ids=["RequestedToCapacityRatio case1", "RequestedToCapacityRatio case2", "MostAllocated",
        "LeastAllocated", "default args are LeastAllocated"])
def test_fit_score(pod_req: tuple[int, int], args: dict[str, Any] | None,
                   want: list[int]) -> None:
    p, nodes = fit_score_nodes(*pod_req)
    assert scores(p, nodes, args) == want


def test_least_allocated_uses_non_zero_requests() -> None:
    # least_allocated_test.go "nothing scheduled, nothing requested": a pod without
    # requests counts 100m cpu / 200Mi memory when scoring.
    n1 = node({"cpu": "4", "memory": "10000Mi", "pods": "32"}, name="node1")
    n2 = node({"cpu": "4", "memory": "10000Mi", "pods": "32"}, name="node2")
    p = make_pod().name("p").container().info()
    # cpu (4000-100)*100/4000 = 97, memory (10000-200)*100/10000 = 98 -> (97+98)/2 = 97
    assert scores(p, [n1, n2], None) == [97, 97]


def test_least_allocated_weights_and_extended_resources() -> None:
    # least_allocated_test.go "resources requested with more than the node, with resource
    # weights": a resource with allocatable 0 or not requested (scalar) is left out.
    n = node({"cpu": "4000m", "memory": "10000", "pods": "32", EXT_A: "4"}, name="node1")
    p = pod(requests(2000, 5000, extra={EXT_A: 1}))
    args = strategy("LeastAllocated", resources=[
        {"name": "cpu", "weight": 3}, {"name": "memory", "weight": 1},
        {"name": EXT_A, "weight": 2}, {"name": "example.com/unknown", "weight": 5}])
    # cpu 50*3 + memory 50*1 + ext (4-1)*100/4=75*2 -> 350 / 6 = 58
    assert scores(p, [n], args) == [58]


def test_most_allocated_caps_requested_at_capacity() -> None:
    n = node({"cpu": "4000m", "memory": "10000", "pods": "32"}, name="node1")
    p = pod(requests(6000, 5000))
    # cpu min(6000,4000) -> 100, memory 50 -> 75
    assert scores(p, [n], strategy("MostAllocated")) == [75]


@pytest.mark.parametrize(("shape", "points"), [
    ([(10, 1), (90, 9)], [(-10, 1), (0, 1), (9, 1), (10, 1), (15, 1), (19, 1), (20, 2),
                          (89, 8), (90, 9), (99, 9), (100, 9), (110, 9)]),
    ([(0, 2), (40, 10), (100, 0)], [(-10, 2), (0, 2), (20, 6), (30, 8), (40, 10), (70, 5),
                                    (100, 0), (110, 0)]),
    ([(0, 2), (40, 2), (100, 2)], [(-10, 2), (0, 2), (40, 2), (70, 2), (110, 2)]),
    ([(0, 100), (30, 0)], [(7, 77), (29, 4), (30, 0)]),  # Go truncates toward zero
], ids=["increasing", "up then down", "flat", "decreasing"])
def test_broken_linear_function(shape: list[tuple[int, int]],
                                points: list[tuple[int, int]]) -> None:
    f = broken_linear_function(shape)
    assert [(p, f(p)) for p, _ in points] == points


# -- args ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("args", "path"), [
    ({"ignoredResources": ["example.com/aaa/bbb"]}, "ignoredResources[0]"),
    ({"ignoredResourceGroups": ["example.com/aaa"]}, "ignoredResourceGroups[0]"),
    ({"ignoredResourceGroups": ["-bad-"]}, "ignoredResourceGroups[0]"),
    ({"scoringStrategy": {"type": "Invalid"}}, "scoringStrategy.type"),
    ({"scoringStrategy": {"resources": []}}, "scoringStrategy.type"),
    ({"scoringStrategy": {"type": "LeastAllocated",
                          "resources": [{"name": "cpu", "weight": 101}]}},
     "scoringStrategy.resources[0].weight"),
    ({"scoringStrategy": {"type": "LeastAllocated",
                          "resources": [{"name": "cpu", "weight": -1}]}},
     "scoringStrategy.resources[0].weight"),
    ({"scoringStrategy": {"type": "RequestedToCapacityRatio"}},
     "scoringStrategy.requestedToCapacityRatio"),
    ({"scoringStrategy": {"type": "RequestedToCapacityRatio",
                          "requestedToCapacityRatio": {"shape": []}}},
     "scoringStrategy.requestedToCapacityRatio.shape"),
    (strategy("RequestedToCapacityRatio", [(30, 1), (20, 2)]),
     "scoringStrategy.requestedToCapacityRatio.shape[1].utilization"),
    (strategy("RequestedToCapacityRatio", [(10, 1), (110, 2)]),
     "scoringStrategy.requestedToCapacityRatio.shape[1].utilization"),
    (strategy("RequestedToCapacityRatio", [(10, 11)]),
     "scoringStrategy.requestedToCapacityRatio.shape[0].score"),
    (strategy("RequestedToCapacityRatio", [(10, -1)]),
     "scoringStrategy.requestedToCapacityRatio.shape[0].score"),
    ({"scoringStrategy": {"type": "LeastAllocated",
                          "requestedToCapacityRatio": {"shape": [{"utilization": 1}]}}},
     "scoringStrategy.requestedToCapacityRatio"),
    ({"scoringStrategy": {"type": "LeastAllocated", "shape": []}}, "scoringStrategy.shape"),
    ({"ignored": []}, "ignored"),
])
def test_invalid_args_name_the_field(args: dict[str, Any], path: str) -> None:
    assert args_errors(node_resources_fit.NAME, args) == [f"args.{path}"]


def test_default_args_and_defaulting() -> None:
    assert node_resources_fit.SPEC.default_args == DEFAULT_ARGS
    plugin = build_plugin(node_resources_fit.NAME, DEFAULT_ARGS)
    assert plugin.strategy.type == "LeastAllocated"
    assert plugin.strategy.resources == (("cpu", 1), ("memory", 1))
    # Missing resources and a zero weight default as v1's SetDefaults_NodeResourcesFitArgs.
    plugin = build_plugin(node_resources_fit.NAME, {"scoringStrategy": {
        "type": "MostAllocated", "resources": [{"name": "cpu"}, {"name": "memory",
                                                                  "weight": 0}]}})
    assert plugin.strategy.resources == (("cpu", 1), ("memory", 1))
    plugin = build_plugin(node_resources_fit.NAME, {"scoringStrategy": {"type": "MostAllocated"}})
    assert plugin.strategy.resources == (("cpu", 1), ("memory", 1))


def test_default_strategy_batch_score_equals_the_general_form() -> None:
    """score_nodes unrolls LeastAllocated over cpu and memory; it must give the numbers of
    the general vectors + scorer, over nodes without cpu or memory, full, overcommitted."""
    import random

    rng = random.Random(3)
    nodes = []
    for i in range(200):
        alloc = {"pods": "110"}
        if i % 7:
            alloc["cpu"] = f"{rng.randrange(1, 8000)}m"
        if i % 11:
            alloc["memory"] = str(rng.randrange(1, 10**6))
        existing = [pod(requests(rng.randrange(0, 9000), rng.randrange(0, 2 * 10**6)))
                    for _ in range(rng.randrange(0, 3))]
        nodes.append(node(alloc, *existing, name=f"n{i}"))
    plugin = build_plugin(node_resources_fit.NAME, strategy(
        "LeastAllocated", resources=[{"name": "cpu", "weight": 3},
                                     {"name": "memory", "weight": 2}]))
    for p in (pod(requests(250, 4096)), pod(requests()), pod(requests(9000, 10**7))):
        state = CycleState()
        assert plugin.pre_score(state, p, nodes, Snapshot(nodes)).ok
        reqs = plugin.vectors.pod_requests(p)
        general = []
        for n in nodes:
            requested, _, allocatable = plugin.vectors.node(n, reqs)
            general.append(plugin._scorer(requested, allocatable))
        assert plugin.score_nodes(state, p, nodes) == general


def test_a_node_that_filled_up_since_the_last_pod_is_checked_again() -> None:
    """Filter passes and scores are remembered per node generation: a pod placed on a node
    between two cycles is seen by the next cycle's Filter and Score."""
    nodes = [node({"cpu": "1", "memory": "1Gi", "pods": "10"}, name=f"n{i}") for i in range(3)]
    plugin = build_plugin(node_resources_fit.NAME)
    p = pod(requests(600, 1000))

    def cycle(plug: Any) -> tuple[list[Code], list[int]]:
        state = CycleState()
        assert plug.pre_filter(state, p, Snapshot(nodes)).ok
        codes = [plug.filter(state, p, n).code for n in nodes]
        assert plug.pre_score(state, p, nodes, Snapshot(nodes)).ok
        return codes, plug.score_nodes(state, p, nodes)

    first = cycle(plugin)
    assert first[0] == [Code.SUCCESS] * 3
    nodes[1].add_pod(pod(requests(600, 1000), node="n1"))
    again = cycle(plugin)
    assert again == cycle(build_plugin(node_resources_fit.NAME))
    assert again[0][1] is Code.UNSCHEDULABLE and again[1][1] != first[1][1]


def test_score_ignores_pod_level_resources_as_v1_37_newfit() -> None:
    """Issue 10, defect 8: v1.37's NewFit builds its scorer without pod-level resources, so
    a pod with spec.resources scores as its containers (100m / 200Mi defaults), while the
    filter counts spec.resources. Mirrored on purpose (docs/differences.md)."""
    def with_pod_level(level: dict[str, str] | None) -> PodInfo:
        p = make_pod().name("p").namespace("ns").container()
        if level:
            p.spec(resources={"requests": level})
        return p.info()

    nodes = [make_node().name(n).allocatable(a).info()
             for n, a in (("a", {"cpu": "4", "memory": "64Gi", "pods": "110"}),
                          ("b", {"cpu": "64", "memory": "2Gi", "pods": "110"}))]
    plugin = build_plugin(node_resources_fit.NAME)

    def scores(p: PodInfo) -> list[int]:
        state = CycleState()
        assert plugin.pre_score(state, p, nodes, Snapshot(nodes)).ok
        got = plugin.score_nodes(state, p, nodes)
        assert isinstance(got, list)
        return got

    big = with_pod_level({"cpu": "3", "memory": "100Mi"})
    assert scores(big) == scores(with_pod_level(None))
    # The filter does count them: 3 cpu do not fit a 2-cpu node.
    small = make_node().name("s").allocatable({"cpu": "2", "memory": "8Gi", "pods": "110"}).info()
    state = CycleState()
    assert plugin.pre_filter(state, big, Snapshot([small])).ok
    assert plugin.filter(state, big, small).reasons == ("Insufficient cpu",)
