"""The re-check after extenders (scheduler.algorithm.still_fits) asks what the first search
asked of the node: RunFilterPluginsWithNominatedPods (schedule_one.go
findNodesThatPassFilters), so a pod nominated there meanwhile holds its room."""

from __future__ import annotations

from typing import Any

import pytest

from polsched.framework import NodeInfo, PodInfo, Snapshot
from polsched.framework.interfaces import Handle
from polsched.framework.nominator import Nominator
from polsched.framework.runtime import Pipeline
from polsched.scheduler.algorithm import still_fits
from polsched.scheduler.pipelines import build_pipeline
from tests.unit.pipelines import load

pytestmark = pytest.mark.unit


def pod(name: str, cpu: str, priority: int) -> PodInfo:
    return PodInfo.from_json({
        "metadata": {"name": name, "namespace": "ns", "uid": name},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}],
                 "priority": priority},
        "status": {}})


def node(name: str, cpu: str) -> NodeInfo:
    obj: dict[str, Any] = {"metadata": {"name": name, "labels": {}}, "spec": {},
                           "status": {"allocatable": {"cpu": cpu, "pods": "110"}}}
    return NodeInfo.from_json(obj)


def pipeline(nominator: Nominator) -> Pipeline:
    return build_pipeline(load(), Handle(nominator=nominator))


def test_a_pod_nominated_on_the_node_of_equal_or_higher_priority_holds_its_room() -> None:
    nominator = Nominator()
    nominator.add(pod("preemptor", "1", priority=10), "n1")
    snapshot = Snapshot([node("n1", "1")])
    pl = pipeline(nominator)
    assert not still_fits(pl, pod("low", "1", priority=5), snapshot, "n1")
    assert not still_fits(pl, pod("equal", "1", priority=10), snapshot, "n1")


def test_a_lower_priority_nominated_pod_and_the_pod_itself_do_not_count() -> None:
    nominator = Nominator()
    nominator.add(pod("low", "1", priority=1), "n1")
    nominator.add(pod("preemptor", "1", priority=10), "n2")
    snapshot = Snapshot([node("n1", "1"), node("n2", "1")])
    pl = pipeline(nominator)
    assert still_fits(pl, pod("high", "1", priority=5), snapshot, "n1")
    assert still_fits(pl, pod("preemptor", "1", priority=10), snapshot, "n2")


def test_without_nominations_the_node_is_checked_as_it_is_now() -> None:
    snapshot = Snapshot([node("n1", "1")])
    pl = pipeline(Nominator())
    assert still_fits(pl, pod("fits", "1", priority=0), snapshot, "n1")
    assert not still_fits(pl, pod("too-big", "2", priority=0), snapshot, "n1")
    assert not still_fits(pl, pod("gone", "1", priority=0), snapshot, "n9")
