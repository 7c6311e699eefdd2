"""The pipeline's cycle, after pkg/scheduler/schedule_one_test.go (numFeasibleNodesToFind,
selectHost, findNodesThatFitPod) and framework/types_test.go (FitError.Error)."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from polsched.framework import (
    SKIP,
    SUCCESS,
    Code,
    CycleState,
    FilterPlugin,
    FitError,
    Handle,
    NodeInfo,
    Pipeline,
    PipelineError,
    PluginSpec,
    PodInfo,
    PreFilterPlugin,
    Registry,
    ScoreExtensions,
    ScorePlugin,
    Snapshot,
    Status,
)
from polsched.framework.diagnosis import PluginScore, truncate_message
from polsched.scheduler.algorithm import num_feasible_nodes_to_find, schedule_pod
from tests.builders import make_node, make_pod
from tests.unit.pipelines import build


def node(name: str, **labels: str) -> NodeInfo:
    return make_node().name(name).labels(labels).allocatable({"cpu": "4", "pods": "110"}).info()


def pod(name: str = "p", **labels: str) -> PodInfo:
    return make_pod().name(name).namespace("ns").labels(labels).container().info()


class LabelIs(FilterPlugin):
    NAME = "LabelIs"

    def __init__(self, key: str, value: str, reason: str) -> None:
        self.key, self.value, self.reason = key, value, reason
        self.calls = 0
        self.seen: list[str] = []  # the nodes filtered, in order

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        self.calls += 1
        self.seen.append(node.name)
        if node.labels.get(self.key) == self.value:
            return SUCCESS
        return Status.unschedulable(self.reason)


class NameLength(ScorePlugin, ScoreExtensions):
    NAME = "NameLength"

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        return len(node.name)

    def normalize_score(self, state: CycleState, pod: PodInfo, scores: list[int]) -> Status:
        top = max(scores)
        for i, s in enumerate(scores):
            scores[i] = 100 * s // top
        return SUCCESS


class Constant(ScorePlugin):
    NAME = "Constant"

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        return 7


class Unsched(FilterPlugin):
    NAME = "NodeUnschedulable"

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        return Status.unresolvable("node(s) were unschedulable") if node.unschedulable \
            else SUCCESS


class Reject(PreFilterPlugin, FilterPlugin):
    NAME = "Reject"

    def pre_filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> Status:
        return Status.unresolvable("pod has unbound immediate PersistentVolumeClaims")

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        raise AssertionError("Filter must not run after PreFilter rejected")


class Skipper(PreFilterPlugin, FilterPlugin):
    NAME = "Skipper"

    def pre_filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> Status:
        return SKIP

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        raise AssertionError("skipped plugin's Filter ran")


class Broken(PreFilterPlugin, FilterPlugin):
    """Errors at the point its args name ("prefilter" or "filter"), on node "b" only."""

    NAME = "Broken"

    def __init__(self, at: str) -> None:
        self.at = at

    def pre_filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> Status:
        return Status.error("lister gone") if self.at == "prefilter" else SUCCESS

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        return Status.error("disk on fire") if node.name == "b" else SUCCESS


class Counting(PreFilterPlugin, FilterPlugin):
    """PreFilter rejects (Unschedulable) and counts the cycles that reached it."""

    NAME = "Counting"
    reached = 0

    def pre_filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> Status:
        Counting.reached += 1
        return Status.unschedulable("counted")

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        raise AssertionError("Filter must not run after PreFilter rejected")


def _label_is(args: Mapping[str, Any], handle: Handle) -> LabelIs:
    return LabelIs(args["key"], args["value"], args["reason"])


# The test plugins, registered as a policy names them; pipelines are loaded and built.
REGISTRY = Registry([
    PluginSpec("LabelIs", filter=_label_is),
    PluginSpec("NodeUnschedulable", filter=lambda a, h: Unsched()),
    PluginSpec("Reject", filter=lambda a, h: Reject()),
    PluginSpec("Skipper", filter=lambda a, h: Skipper()),
    PluginSpec("NameLength", score=lambda a, h: NameLength()),
    PluginSpec("Constant", score=lambda a, h: Constant()),
    PluginSpec("Broken", filter=lambda a, h: Broken(a.get("at", ""))),
    PluginSpec("Counting", filter=lambda a, h: Counting()),
])


def label_is(key: str, value: str, reason: str, **entry: Any) -> dict[str, Any]:
    return {"name": "LabelIs", "args": {"key": key, "value": value, "reason": reason}, **entry}


def pipeline(filters: Sequence[Any] = (), scorers: Sequence[Any] = (),
             **spec: Any) -> Pipeline:
    """Filters and scorers by name (or whole entries), loaded and built."""
    def entry(e: Any) -> dict[str, Any]:
        return {"name": e} if isinstance(e, str) else e
    return build(registry=REGISTRY, filters=[entry(f) for f in filters],
                 scorers=[entry(x) for x in scorers], **spec)


def run(p: Pipeline, pd: PodInfo, nodes: Sequence[NodeInfo], explain: bool = False):  # type: ignore[no-untyped-def]
    return asyncio.run(schedule_pod(p, pd, Snapshot(list(nodes)), explain=explain))


@pytest.mark.parametrize(("pct", "n", "want"), [
    (0, 10, 10), (0, 99, 99), (0, 1000, 420), (0, 5000, 500), (0, 6000, 300),
    (40, 1000, 400), (1, 1000, 100), (100, 5000, 5000),
])
def test_num_feasible_nodes_to_find(pct: int, n: int, want: int) -> None:
    assert num_feasible_nodes_to_find(pct, n) == want


def test_fit_error_is_a_sorted_histogram_of_reasons() -> None:
    nodes = [node("n1", zone="b"), node("n2", zone="b"), node("n3")]
    nodes[2].unschedulable = True
    p = pipeline(["NodeUnschedulable", label_is("zone", "a", "node(s) had zone b")])
    res = run(p, pod(), nodes)
    assert res.node is None and res.fit_error is not None
    assert res.fit_error.message == (
        "0/3 nodes are available: 1 node(s) were unschedulable, 2 node(s) had zone b. "
        # The default PostFilter (DefaultPreemption) that every built pipeline has.
        "preemption: 0/3 nodes are available: 1 Preemption is not helpful for scheduling, "
        "2 No preemption victims found for incoming pod.")
    assert res.fit_error.node_statuses["n3"].plugin == "NodeUnschedulable"


def test_post_filter_message_follows() -> None:
    fe = FitError(2, {"a": Status.unschedulable("Insufficient cpu"),
                      "b": Status.unschedulable("Insufficient cpu")},
                  post_filter_msg="preemption: 0/2 nodes are available: 2 No preemption "
                                  "victims found for incoming pod.")
    assert fe.message == ("0/2 nodes are available: 2 Insufficient cpu. preemption: 0/2 nodes "
                          "are available: 2 No preemption victims found for incoming pod.")


def test_prefilter_rejection_is_reported_once() -> None:
    res = run(pipeline(["Reject"]), pod(), [node("a"), node("b")])
    assert res.fit_error is not None
    assert res.fit_error.message == (
        "0/2 nodes are available: pod has unbound immediate PersistentVolumeClaims. "
        "preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.")


def test_prefilter_skip_skips_filter() -> None:
    p = pipeline(["Skipper"], ["Constant"])
    assert run(p, pod(), [node("a"), node("b")]).node in ("a", "b")


def test_weighted_scores_pick_the_best_and_explain_them() -> None:
    nodes = [node("a"), node("bbb"), node("cc")]
    p = pipeline([], [{"name": "NameLength", "weight": 2}, "Constant"])
    res = run(p, pod(), nodes, explain=True)
    assert res.node == "bbb"
    assert res.deciding_scorer == "NameLength"
    assert res.explanation is not None
    by_node = {s.node: s for s in res.explanation.scores}
    assert by_node["bbb"].plugins["NameLength"] == PluginScore(3, 100, 200)
    assert by_node["a"].plugins["NameLength"] == PluginScore(1, 33, 66)
    assert by_node["a"].total == 66 + 7


def test_ties_are_broken_at_random() -> None:
    nodes = [node(f"n{i}") for i in range(4)]
    p = pipeline([], ["Constant"], rng=random.Random(1))
    picks = Counter(run(p, pod(), nodes).node for _ in range(400))
    assert set(picks) == {"n0", "n1", "n2", "n3"}
    assert min(picks.values()) > 60


def test_search_stops_at_num_feasible_and_resumes_round_robin() -> None:
    nodes = [node(f"n{i:03}", ok="1") for i in range(200)]
    p = pipeline([label_is("ok", "1", "no")], ["Constant"], percentageOfNodesToScore=50)
    f = p.filters[0].plugin
    assert isinstance(f, LabelIs)
    first = run(p, pod(), nodes)
    assert first.evaluated_nodes == 100 and f.calls == 100
    assert f.seen == [n.name for n in nodes[:100]]
    run(p, pod(), nodes)
    # The second cycle started where the first stopped: all 200 nodes were visited once.
    assert f.calls == 200 and f.seen[100:] == [n.name for n in nodes[100:]]
    # and the third starts over, at the first node.
    run(p, pod(), nodes)
    assert f.seen[200:] == [n.name for n in nodes[:100]]


def test_when_selector_limits_an_entry_to_matching_pods() -> None:
    p = pipeline([label_is("zone", "a", "node(s) not in zone a",
                           when={"podSelector": {"matchLabels": {"want": "you"}}})])
    nodes = [node("n1", zone="b")]
    assert run(p, pod(), nodes).node == "n1"
    assert run(p, pod(want="you"), nodes).node is None


def test_no_nodes() -> None:
    res = run(pipeline(), pod(), [])
    assert res.node is None and res.fit_error is not None
    assert res.fit_error.message == "no nodes available to schedule pods"


def test_truncate_message() -> None:
    assert truncate_message("x" * 1024) == "x" * 1024
    long = truncate_message("y" * 2000)
    assert len(long) == 1024 and long.endswith(" ...")


# -- Error aborts the cycle (RunPreFilterPlugins / RunFilterPlugins) ----------------------

def test_a_filter_error_aborts_the_cycle_with_upstreams_message() -> None:
    """Not a rejection of one node: the whole attempt fails (SchedulerError upstream)."""
    p = pipeline([{"name": "Broken", "args": {"at": "filter"}}])
    with pytest.raises(PipelineError) as err:
        run(p, pod(), [node("a"), node("b"), node("c")])
    assert err.value.status.code is Code.ERROR
    assert err.value.status.message == 'running "Broken" filter plugin: disk on fire'
    assert str(err.value) == 'running "Broken" filter plugin: disk on fire'


def test_a_prefilter_error_aborts_the_cycle_with_upstreams_message() -> None:
    p = pipeline([{"name": "Broken", "args": {"at": "prefilter"}}])
    with pytest.raises(PipelineError) as err:
        run(p, pod(), [node("a")])
    assert str(err.value) == 'running PreFilter plugin "Broken": lister gone'


def test_unschedulable_prefilter_lets_the_later_prefilters_run() -> None:
    """Upstream runs every PreFilter after an Unschedulable one (preemption needs their
    state, kubernetes#119770), so a later Error still aborts."""
    Counting.reached = 0
    p = pipeline(["Counting", {"name": "Broken", "args": {"at": "prefilter"}}])
    with pytest.raises(PipelineError):
        run(p, pod(), [node("a")])
    assert Counting.reached == 1
    res = run(pipeline(["Counting", "Skipper"]), pod(), [node("a"), node("b")])
    assert res.fit_error is not None and res.fit_error.pre_filter_msg == "counted"


class Prefers(ScorePlugin):
    """10 on the node its args name, 0 elsewhere."""

    NAME = "Prefers"

    def __init__(self, node: str) -> None:
        self.node = node

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        return 10 if node.name == self.node else 0


def test_no_deciding_scorer_when_the_best_totals_tie() -> None:
    """Two scorers that each favour another node, by as much: the totals tie, the draw
    decides, and no scorer may be named (the conformance suite reads it as "tied")."""
    reg = Registry([PluginSpec("PrefersX", score=lambda a, h: Prefers("x")),
                    PluginSpec("PrefersY", score=lambda a, h: Prefers("y"))])
    p = build(registry=reg, filters=[], scorers=[{"name": "PrefersX"}, {"name": "PrefersY"}])
    res = run(p, pod(), [node("x"), node("y")])
    assert res.node in ("x", "y")
    assert res.deciding_scorer == ""
