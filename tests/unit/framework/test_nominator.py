"""Nominator: pods nominated to nodes, from preemption (in memory) or from
status.nominatedNodeName (the API server), as upstream's nominator keeps them."""

from __future__ import annotations

import pytest

from polsched.framework import PodInfo
from polsched.framework.nominator import Nominator
from tests.builders import make_pod

pytestmark = pytest.mark.unit


def pod(name: str, nominated: str = "") -> PodInfo:
    p = make_pod().name(name).namespace("ns").uid(name).containers([])
    return (p.nominated_node_name(nominated) if nominated else p.status()).info()


def test_add_move_and_remove() -> None:
    n = Nominator()
    n.add(pod("a"), "n1")
    n.add(pod("b"), "n1")
    assert [p.name for p in n.pods_for_node("n1")] == ["a", "b"] and len(n) == 2
    n.add(pod("a"), "n2")  # a pod is nominated to one node at a time
    assert [p.name for p in n.pods_for_node("n1")] == ["b"] and n.node_of("ns/a") == "n2"
    n.add(pod("b"), "")  # cleared
    assert n.pods_for_node("n1") == [] and n.nodes() == ["n2"]
    assert n.remove("ns/a") == "n2" and len(n) == 0


def test_update_follows_the_status_and_keeps_an_in_memory_nomination() -> None:
    n = Nominator()
    n.update(pod("a"))
    assert len(n) == 0
    n.update(pod("a", nominated="n1"))
    assert n.node_of("ns/a") == "n1"
    n.add(pod("b"), "n2")
    n.update(pod("b"))  # a later version whose status patch has not landed yet
    assert n.node_of("ns/b") == "n2"
