"""`when.podSelector`: an entry applies only to the pods its selector matches."""

from __future__ import annotations

import asyncio

import pytest

from polsched.framework import PodInfo, Snapshot
from polsched.scheduler.algorithm import schedule_pod
from tests.builders import make_node, make_pod
from tests.unit.pipelines import build

pytestmark = pytest.mark.unit


def pod(name: str, **labels: str) -> PodInfo:
    return make_pod().name(name).namespace("ns").labels(labels).info()


def test_expression_filter_with_when_applies_only_to_matching_pods() -> None:
    pipeline = build(defaults=False, filters=[{
        "name": "Expression",
        "args": {"expression": "size(pod.metadata.name) <= 5",
                 "message": "pod name is longer than 5"},
        "when": {"podSelector": {"matchLabels": {"want": "you"}}}}])
    snapshot = Snapshot([make_node().name(f"n{i}").info() for i in range(3)])

    # A matching pod with a long name is refused on every node, with the entry's message.
    result = asyncio.run(schedule_pod(pipeline, pod("longname", want="you"), snapshot))
    assert result.node is None
    assert result.fit_error is not None
    assert result.fit_error.message == (
        "0/3 nodes are available: 3 pod name is longer than 5. preemption: 0/3 nodes are "
        "available: 3 No preemption victims found for incoming pod.")

    # The same name without the label: the filter does not apply.
    assert asyncio.run(schedule_pod(pipeline, pod("longname"), snapshot)).node is not None
    assert asyncio.run(
        schedule_pod(pipeline, pod("longname", want="me"), snapshot)).node is not None
    # A matching pod that passes the expression is scheduled.
    assert asyncio.run(schedule_pod(pipeline, pod("short", want="you"), snapshot)).node is not None
