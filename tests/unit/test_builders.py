"""tests/builders.py: the objects its builders produce are the API's shapes, and the
engine's PodInfo/NodeInfo read from them."""

from __future__ import annotations

import pytest

from tests.builders import make_node, make_pod

pytestmark = pytest.mark.unit


def test_a_pod_is_the_object_the_api_server_serves() -> None:
    pod = (make_pod().name("p").namespace("ns").uid("u").label("app", "web")
           .scheduler("s").priority(5).req(cpu="500m", memory="1Gi").container(image="x")
           .node("n1").phase("Running").obj())
    assert pod == {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u", "labels": {"app": "web"}},
        "spec": {"schedulerName": "s", "priority": 5, "nodeName": "n1", "containers": [
            {"name": "c", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
            {"name": "c1", "image": "x"}]},
        "status": {"phase": "Running"}}


def test_info_reads_the_pod_as_the_cache_does() -> None:
    info = make_pod().name("p").namespace("ns").req(cpu="500m").pod_group("g").info()
    assert info.key == "ns/p" and info.requests["cpu"] == 500
    assert info.spec["schedulingGroup"] == {"podGroupName": "g"}


def test_a_builder_can_be_reused_its_objects_are_copies() -> None:
    b = make_pod().name("p").container()
    first = b.obj()
    first["spec"]["containers"].append({"name": "other"})
    assert b.obj()["spec"]["containers"] == [{"name": "c"}]


def test_a_node_with_capacity_has_it_allocatable_too_and_holds_its_pods() -> None:
    node = (make_node().typed().name("n1").label("zone", "a").taint("k")
            .capacity({"cpu": "4", "pods": "110"}))
    assert node.obj() == {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "n1", "labels": {"zone": "a"}},
        "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]},
        "status": {"capacity": {"cpu": "4", "pods": "110"},
                   "allocatable": {"cpu": "4", "pods": "110"}}}
    info = node.info(make_pod().name("p").namespace("ns").req(cpu="1").info())
    assert info.allocatable["cpu"] == 4000 and info.requested["cpu"] == 1000
    assert list(info.pods) == ["ns/p"]
