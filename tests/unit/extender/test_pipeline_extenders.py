"""framework.Pipeline with HTTPExtenders against real HTTP extenders: the order of filter
extenders, unresolvable nodes in the FitError, prioritize scores in the placement, and
what ignorable and non-ignorable extenders do when they are down."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from typing import Any

import pytest

from polsched.extender import HTTPExtender
from polsched.framework import (
    Code,
    CycleState,
    FilterPlugin,
    NodeInfo,
    Pipeline,
    PipelineError,
    PluginSpec,
    PodInfo,
    Registry,
    ScheduleResult,
    ScorePlugin,
    Snapshot,
    Status,
)
from polsched.scheduler.algorithm import schedule_pod
from tests.unit.extender.conftest import StartExtender
from tests.unit.extender.fake_extender import Answer, config, free_port, make_node, make_pod, run
from tests.unit.pipelines import build

pytestmark = pytest.mark.unit


class NoBadNodes(FilterPlugin):
    """A built-in filter stand-in: nodes labelled bad=true do not fit."""

    NAME = "NoBadNodes"

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        if node.labels.get("bad") == "true":
            return Status.unschedulable("node(s) are bad")
        return Status()


class PreferN1(ScorePlugin):
    """A built-in scorer stand-in: n1 gets 50, every other node 0."""

    NAME = "PreferN1"

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        return 50 if node.name == "n1" else 0


def snapshot() -> Snapshot:
    return Snapshot([make_node("n1"), make_node("n2"), make_node("n3"),
                     make_node("n4", labels={"bad": "true"})])


REGISTRY = Registry([PluginSpec(NoBadNodes.NAME, filter=lambda a, h: NoBadNodes()),
                     PluginSpec(PreferN1.NAME, score=lambda a, h: PreferN1())])


def pipeline(*extenders: HTTPExtender) -> Pipeline:
    return build(registry=REGISTRY, filters=[{"name": NoBadNodes.NAME}],
                 scorers=[{"name": PreferN1.NAME}], extenders=extenders, rng=random.Random(0))


async def schedule(pl: Pipeline, pod: PodInfo | None = None,
                   explain: bool = False) -> ScheduleResult:
    try:
        return await schedule_pod(pl, pod or make_pod(), snapshot(), explain=explain)
    finally:
        for ext in pl.extenders:
            assert isinstance(ext, HTTPExtender)
            await ext.close()


def reject(names: Sequence[str], reason: str, unresolvable: bool = False) -> Any:
    """A filter route rejecting `names` and passing every other node it is sent."""
    def route(args: Any) -> Any:
        key = "FailedAndUnresolvableNodes" if unresolvable else "FailedNodes"
        return {"NodeNames": [n for n in args["NodeNames"] if n not in names],
                key: {n: reason for n in names if n in args["NodeNames"]}}
    return route


def filter_extender(url: str, **kw: Any) -> HTTPExtender:
    return HTTPExtender(config(url, filter_verb="filter", node_cache_capable=True, **kw))


def test_filter_extenders_run_after_filters_in_order_on_what_the_previous_left(
        start_extender: StartExtender) -> None:
    first = start_extender({"/filter": reject(["n1"], "first says no")})
    second = start_extender({"/filter": reject(["n2"], "second says never", True)})
    gpu_only = start_extender({"/filter": reject(["n3"], "gpu")})
    pl = pipeline(filter_extender(first.url), filter_extender(second.url),
                  filter_extender(gpu_only.url, managed=["example.com/gpu"]))

    result = run(schedule(pl))

    assert first.bodies("/filter")[0]["NodeNames"] == ["n1", "n2", "n3"]  # n4 failed NoBadNodes
    assert second.bodies("/filter")[0]["NodeNames"] == ["n2", "n3"]
    assert gpu_only.requests == []  # not interested: the pod requests no example.com/gpu
    assert result.node == "n3"


def test_extender_rejections_and_unresolvable_nodes_are_in_the_fit_error(
        start_extender: StartExtender) -> None:
    server = start_extender({"/filter": lambda args: {
        "NodeNames": [],
        "FailedNodes": {"n1": "zone full", "n2": "zone full", "n3": "overridden"},
        "FailedAndUnresolvableNodes": {"n3": "wrong rack"},
    }})
    result = run(schedule(pipeline(filter_extender(server.url))))

    assert result.node is None and result.fit_error is not None
    statuses = result.fit_error.node_statuses
    assert statuses["n1"].code is Code.UNSCHEDULABLE
    assert statuses["n3"].code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert statuses["n3"].reasons == ("wrong rack",)
    assert statuses["n4"].code is Code.UNSCHEDULABLE
    assert result.fit_error.message == (
        "0/4 nodes are available: 1 node(s) are bad, 1 wrong rack, 2 zone full. "
        # The built pipeline's DefaultPreemption: only n3 (unresolvable) cannot be helped.
        "preemption: 0/4 nodes are available: 1 Preemption is not helpful for scheduling, "
        "3 No preemption victims found for incoming pod.")


@pytest.mark.parametrize("score,weight,winner,n2_total", [
    (10, 1, "n2", 100),  # 10 x 1 x 10 beats PreferN1's 50 on n1
    (3, 2, "n2", 60),    # 3 x 2 x 10
    (2, 2, "n1", 40),    # too little: the plugins' choice stands
])
def test_prioritize_score_times_weight_times_ten_changes_the_placement(
        start_extender: StartExtender, score: int, weight: int, winner: str,
        n2_total: int) -> None:
    server = start_extender({"/prioritize": lambda args: [
        {"Host": n, "Score": score if n == "n2" else 0} for n in args["NodeNames"]]})
    ext = HTTPExtender(config(server.url, prioritize_verb="prioritize", weight=weight,
                              node_cache_capable=True))
    result = run(schedule(pipeline(ext), explain=True))

    assert result.node == winner
    assert result.explanation is not None
    totals = {s.node: s.total for s in result.explanation.scores}
    assert totals == {"n1": 50, "n2": n2_total, "n3": 0}


def test_without_the_prioritize_extender_the_plugins_decide() -> None:
    assert run(schedule(pipeline())).node == "n1"


def test_prioritize_errors_are_ignored(start_extender: StartExtender) -> None:
    server = start_extender({"/prioritize": lambda args: Answer(500, b"boom")})
    ext = HTTPExtender(config(server.url, prioritize_verb="prioritize", weight=5,
                              node_cache_capable=True))
    result = run(schedule(pipeline(ext)))
    assert result.node == "n1"
    assert len(server.requests) == 1


def test_ignorable_extender_down_pods_are_still_scheduled(
        start_extender: StartExtender) -> None:
    down = f"http://127.0.0.1:{free_port()}/"
    up = start_extender({"/filter": reject(["n1"], "no")})
    ignorable = filter_extender(down, ignorable=True)
    pl = pipeline(ignorable, filter_extender(up.url))

    assert pl.describe()["extenders"] == [up.url, down]  # ignorable extenders go last
    result = run(schedule(pl))
    assert result.node in ("n2", "n3")
    assert up.bodies("/filter")[0]["NodeNames"] == ["n1", "n2", "n3"]


def test_non_ignorable_extender_down_fails_naming_the_url_then_recovers(
        start_extender: StartExtender) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    pl = pipeline(filter_extender(url))

    with pytest.raises(PipelineError) as err:
        run(schedule(pl))
    assert err.value.status.code is Code.ERROR
    assert err.value.status.plugin == url
    assert f'Post "{url}filter"' in str(err.value)

    start_extender({"/filter": reject(["n1"], "no")}, port=port)
    assert run(schedule(pl)).node in ("n2", "n3")


def test_non_ignorable_extender_error_answer_fails_the_cycle(
        start_extender: StartExtender) -> None:
    server = start_extender({"/filter": lambda args: {"Error": "not ready"}})
    with pytest.raises(PipelineError) as err:
        run(schedule(pipeline(filter_extender(server.url))))
    assert str(err.value) == f"failed filter with extender at URL {server.url}filter: not ready"
    assert err.value.status.plugin == server.url


def test_a_hanging_extender_does_not_hold_up_another_pipeline(
        start_extender: StartExtender) -> None:
    slow = start_extender({})
    slow.routes["/filter"] = slow.hang
    fast = start_extender({"/filter": reject(["n1"], "no")})
    slow_pl = pipeline(filter_extender(slow.url, http_timeout_seconds=3))
    fast_pl = pipeline(filter_extender(fast.url))

    async def both() -> tuple[bool, str | None]:
        slow_task = asyncio.ensure_future(schedule(slow_pl))
        await asyncio.sleep(0)  # the slow request is under way first
        fast_result = await schedule(fast_pl)
        slow_done = slow_task.done()
        slow_task.cancel()
        await asyncio.gather(slow_task, return_exceptions=True)
        for ext in slow_pl.extenders:
            assert isinstance(ext, HTTPExtender)
            await ext.close()
        return slow_done, fast_result.node

    slow_done, node = run(both())
    assert node in ("n2", "n3")
    assert not slow_done
