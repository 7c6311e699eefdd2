"""The one parser of node selectors (framework.nodeaffinity), as component-helpers'
nodeaffinity.go, and its three users agreeing: NodeAffinity, PodTopologySpread's node
inclusion and a PV's node affinity (volume.CheckNodeAffinity, a node without a name)."""

from __future__ import annotations

from typing import Any

import pytest

from polsched.framework.nodeaffinity import RequiredNodeAffinity
from polsched.framework.types import NodeInfo, PodInfo
from polsched.plugins.pod_topology_spread import required_node_affinity
from polsched.plugins.volume_claims import volume_node_affinity_matches
from tests.builders import make_node, make_pod

pytestmark = pytest.mark.unit


def node(name: str, **labels: str) -> NodeInfo:
    return make_node().name(name).labels(labels).allocatable({"cpu": "1", "pods": "10"}).info()


def pod(required: Any = None, node_selector: dict[str, str] | None = None) -> PodInfo:
    p = make_pod().name("p").namespace("ns").uid("p").container()
    if required is not None:
        p.required_node_affinity(required)
    if node_selector:
        p.node_selector(node_selector)
    return p.info()


def pv(required: Any, rv: str = "") -> dict[str, Any]:
    return {"metadata": {"name": f"pv-{id(required)}", "resourceVersion": rv},
            "spec": {"nodeAffinity": {"required": required}}}


def expr(key: str, op: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": op, "values": list(values)}


NODES = [node("a", zone="z1"), node("b", zone="z2"), node("c")]


def matching(p: PodInfo) -> tuple[list[str], list[str]]:
    """The nodes NodeAffinity and PodTopologySpread each find matching."""
    na = RequiredNodeAffinity.of(p)
    pts = required_node_affinity(p)
    return [n.name for n in NODES if na.matches(n)], [n.name for n in NODES if pts(n)]


@pytest.mark.parametrize(("required", "want"), [
    (None, ["a", "b", "c"]),
    ({"nodeSelectorTerms": [{"matchExpressions": [expr("zone", "In", "z1")]},
                            {"matchFields": [expr("metadata.name", "In", "c")]}]},
     ["a", "c"]),
    # An empty term and no term at all match nothing.
    ({"nodeSelectorTerms": [{}]}, []),
    ({"nodeSelectorTerms": []}, []),
    # labels.NewRequirement refuses a value that is not a label value: the term matches
    # nothing (PodTopologySpread's own parser used to let it match every node).
    ({"nodeSelectorTerms": [{"matchExpressions": [expr("zone", "NotIn", "not a value")]}]},
     []),
    # matchFields: In or NotIn with one value, else the term matches nothing.
    ({"nodeSelectorTerms": [{"matchFields": [expr("metadata.name", "Exists")]}]}, []),
    ({"nodeSelectorTerms": [{"matchFields": [expr("metadata.name", "NotIn", "a")],
                             "matchExpressions": [expr("zone", "Exists")]}]}, ["b"]),
])
def test_node_affinity_and_pod_topology_spread_agree(required: Any, want: list[str]) -> None:
    assert matching(pod(required)) == (want, want)


def test_the_node_selector_is_anded_with_the_terms() -> None:
    p = pod({"nodeSelectorTerms": [{"matchExpressions": [expr("zone", "Exists")]}]},
            {"zone": "z2"})
    assert matching(p) == (["b"], ["b"])
    keys, match = RequiredNodeAffinity.of(p).label_only() or ((), None)
    assert keys == ("zone",) and match is not None
    assert [match(n.labels) for n in NODES] == [False, True, False]
    # A term that reads the node's name has no label-only form.
    named = pod({"nodeSelectorTerms": [{"matchFields": [expr("metadata.name", "In", "a")]}]})
    assert RequiredNodeAffinity.of(named).label_only() is None


@pytest.mark.parametrize("rv", ["", "7"])
def test_a_pvs_node_affinity_reads_labels_and_skips_match_fields(rv: str) -> None:
    """volume.CheckNodeAffinity checks a node made of labels only: matchFields are not
    evaluated, a term that does not parse matches nothing, no required selector matches
    every node (and the cache keyed on resourceVersion answers the same)."""
    fields_only = pv({"nodeSelectorTerms": [{"matchFields": [expr("metadata.name", "In",
                                                                  "x")]}]}, rv)
    zone = pv({"nodeSelectorTerms": [{"matchExpressions": [expr("zone", "In", "z1")]}]}, rv)
    bad_key = pv({"nodeSelectorTerms": [{"matchExpressions": [expr("a b", "Exists")]}]}, rv)
    for _ in range(2):
        assert volume_node_affinity_matches(fields_only, {})
        assert volume_node_affinity_matches(zone, {"zone": "z1"})
        assert not volume_node_affinity_matches(zone, {"zone": "z2"})
        assert not volume_node_affinity_matches(bad_key, {"a b": "x"})
        assert volume_node_affinity_matches({"metadata": {"name": "free"}, "spec": {}}, {})
        assert not volume_node_affinity_matches(pv({"nodeSelectorTerms": []}, rv), {})
