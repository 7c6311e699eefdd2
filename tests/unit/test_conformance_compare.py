"""The conformance suite's generator and comparison, without a cluster: what counts as a
difference, a tie, a documented difference and a diverged pod."""

from __future__ import annotations

from conformance import compare
from conformance import scenarios as scn
from conformance.runner import PodResult, ScenarioResult


def test_scenarios_are_reproducible_and_cover_every_family() -> None:
    a = scn.generate_all(3, len(scn.FAMILY_NAMES))
    b = scn.generate_all(3, len(scn.FAMILY_NAMES))
    assert [s.to_json() for s in a] == [s.to_json() for s in b]
    assert {s.family for s in a} == set(scn.FAMILY_NAMES)
    assert scn.generate(4, 0).to_json() != scn.generate(3, 0).to_json()


def test_every_object_a_scenario_creates_is_its_own() -> None:
    for sc in scn.generate_all(1, 2 * len(scn.FAMILY_NAMES)):
        names = [n["metadata"]["name"] for n in sc.nodes + sc.namespaces]
        # Namespaced objects live in the scenario's own namespaces.
        names += [o["metadata"].get("namespace") or o["metadata"]["name"] for o in sc.objects]
        names += [s.namespace for s in sc.pods]
        assert all(n.startswith(sc.prefix) for n in names), (sc.family, names)
        assert all(n["metadata"]["labels"][scn.SCENARIO_LABEL] == str(sc.index)
                   for n in sc.nodes)


def _scenario(family: str, pods: list[dict[str, object]]) -> scn.Scenario:
    sc = scn.Scenario(index=0, seed=1, family=family)
    for i, spec in enumerate(pods):
        sc.pods.append(scn.PodStep({"metadata": {"name": f"p{i}", "namespace": "s0000-a"},
                                    "spec": {"containers": [], **spec}}))
    return sc


def _run(sc: scn.Scenario, kube: list[PodResult], ours: list[PodResult]
         ) -> compare.Comparison:
    return compare.compare([sc], [ScenarioResult(0, sc.family, kube)],
                           [ScenarioResult(0, sc.family, ours)])


def test_another_node_with_a_unique_top_score_differs_a_tie_does_not() -> None:
    sc = _scenario("resources", [{}, {}])
    kube = [PodResult("p0", "bound", "n1", unique=True), PodResult("p1", "bound", "n1",
                                                                   unique=True)]
    ours = [PodResult("p0", "bound", "n2", unique=True), PodResult("p1", "bound", "n2",
                                                                   unique=True)]
    c = _run(sc, kube, ours)
    assert [d["fields"] for d in c.differences] == [["node"]]
    # The second pod met another cluster: diverged, counted apart.
    assert c.families["resources"].diverged == 1

    kube[0].unique = False
    c = _run(sc, kube, ours)
    assert not c.differences and c.families["resources"].ties == 1


def test_messages_and_outcomes_must_be_equal() -> None:
    sc = _scenario("no-nodes", [{}])
    k = PodResult("p0", "Unschedulable", message="no nodes available to schedule pods")
    p = PodResult("p0", "SchedulerError", message="no nodes available to schedule pods")
    assert _run(sc, [k], [p]).differences[0]["fields"] == ["outcome"]


def test_victims_that_rank_alike_on_another_node_are_a_tie() -> None:
    low: dict[str, object] = {"priorityClassName": "conformance-low"}
    mid: dict[str, object] = {"priorityClassName": "conformance-mid"}
    sc = _scenario("preemption", [low, low, mid, {"priorityClassName": "conformance-high"}])
    ev = "0/2 nodes are available: 2 Insufficient cpu. preemption: found a potential " \
         "placement for pod on node {}, preempting 1 victims"
    k = PodResult("p3", "bound", "n0", event=ev.format("n0"), victims=["s0000-a/p0"],
                  unique=True)
    p = PodResult("p3", "bound", "n1", event=ev.format("n1"), victims=["s0000-a/p1"],
                  unique=True)
    c = _run(sc, [k], [p])
    assert not c.differences and c.families["preemption"].ties == 1
    # A victim of a higher priority is a worse choice, not a tie.
    p.victims = ["s0000-a/p2"]
    assert _run(sc, [k], [p]).differences


def test_dra_pods_compare_the_devices_their_claims_got() -> None:
    """Same node, other devices: a difference. Another node after a tie: the pools
    differ with the node, so the devices are not compared."""
    sc = _scenario("dra", [{"resourceClaims": [{"name": "gpu"}]}])
    k = [PodResult("p0", "bound", "n0", unique=True, devices=["gpu/r0: n0/gpu-0"])]
    p = [PodResult("p0", "bound", "n0", unique=True, devices=["gpu/r0: n0/gpu-1"])]
    c = _run(sc, k, p)
    assert len(c.differences) == 1
    p = [PodResult("p0", "bound", "n0", unique=True, devices=["gpu/r0: n0/gpu-0"])]
    assert not _run(sc, k, p).differences
    k = [PodResult("p0", "bound", "n0", unique=False, tied=["n0", "n1"],
                   devices=["gpu/r0: n0/gpu-0"])]
    p = [PodResult("p0", "bound", "n1", unique=False, tied=["n0", "n1"],
                   devices=["gpu/r0: n1/gpu-0"])]
    assert not _run(sc, k, p).differences


def test_generated_claim_names_do_not_count_as_a_difference() -> None:
    """kube-controller-manager names a template's claim <pod>-<claim>-<5 random chars>:
    the suffix differs between the two control planes, nothing else may."""
    sc = _scenario("dra", [{"resourceClaims": [{"name": "gpu"}]}])
    msg = "running \"DynamicResources\" filter plugin: claim s1-a/p00-gpu-{}, request r0: x"
    k = [PodResult("p0", "Unschedulable", message=msg.format("59wrv"))]
    p = [PodResult("p0", "Unschedulable", message=msg.format("hslzg"))]
    assert not _run(sc, k, p).differences
    p = [PodResult("p0", "Unschedulable", message=msg.format("hslzg") + " and more")]
    assert _run(sc, k, p).differences
