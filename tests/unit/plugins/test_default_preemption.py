"""DefaultPreemption as upstream's default_preemption.go and preemption.go decide: who is
eligible, the candidates, the reprieve loop with PDBs, the choice between candidates, the
message when nothing can be done; and nominated pods counted by the filters. Every
pipeline here is the engine's (build_pipeline from a loaded policy)."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from polsched.api import PolicyError, load_policy
from polsched.framework import FitError, NodeInfo, PodInfo, Snapshot
from polsched.framework import listers as ls
from polsched.framework.diagnosis import ScheduleResult
from polsched.framework.interfaces import Handle
from polsched.framework.nominator import Nominator
from polsched.framework.runtime import Pipeline
from polsched.plugins import CATALOG
from polsched.plugins.default_preemption import DefaultPreemption, DefaultPreemptionArgs
from polsched.preemption.candidates import (
    RULE_LATEST_START,
    RULE_PDB,
    RULE_SUM_PRIORITIES,
    Candidate,
    PreemptionReport,
    pick_one_node_for_preemption,
)
from polsched.scheduler.algorithm import schedule_pod
from polsched.scheduler.pipelines import build_pipeline
from tests.builders import make_node, make_pod

pytestmark = pytest.mark.unit

POLICY = {"apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
          "metadata": {"name": "p"}, "spec": {"schedulerName": "p"}}


def pod(name: str, cpu: str = "0", priority: int = 0, labels: dict[str, str] | None = None,
        node: str = "", start: str = "", status: dict[str, Any] | None = None,
        meta: dict[str, Any] | None = None, **spec: Any) -> PodInfo:
    p = (make_pod().name(name).namespace("ns").uid(name).labels(labels or {})
         .container(requests={"cpu": cpu}).priority(priority).node(node).spec(**spec)
         .status(**(status or {})).metadata(**(meta or {})))
    if start:
        p.status(startTime=start)
    return p.info()


def node(name: str, cpu: str = "1", *pods: PodInfo, **spec: Any) -> NodeInfo:
    return (make_node().name(name).labels({}).spec(**spec)
            .allocatable({"cpu": cpu, "pods": "110"}).info(*pods))


def pdb(name: str, labels: dict[str, str], allowed: int) -> dict[str, Any]:
    return {"kind": "PodDisruptionBudget", "metadata": {"name": name, "namespace": "ns"},
            "spec": {"selector": {"matchLabels": labels}},
            "status": {"disruptionsAllowed": allowed}}


def pipeline(objects: list[dict[str, Any]] = (),  # type: ignore[assignment]
             nominator: Nominator | None = None) -> Pipeline:
    listers = ls.Listers()
    listers.load(objects)
    return build_pipeline(load_policy(POLICY, CATALOG), Handle(
        listers=listers, nominator=nominator if nominator is not None else Nominator()))


def schedule(p: Pipeline, pd: PodInfo, nodes: list[NodeInfo]) -> ScheduleResult:
    return asyncio.run(schedule_pod(p, pd, Snapshot(nodes)))


def report(r: ScheduleResult) -> PreemptionReport:
    assert r.post_filter is not None and isinstance(r.post_filter.details, PreemptionReport)
    return r.post_filter.details


def message(r: ScheduleResult) -> str:
    assert r.fit_error is not None
    return r.fit_error.message


# -- no candidate: upstream's sentence ---------------------------------------------------
def test_no_victims_anywhere() -> None:
    nodes = [node(f"n{i}", "1", pod(f"k{i}", cpu="500m", priority=100, node=f"n{i}"))
             for i in range(10)]
    r = schedule(pipeline(), pod("big", cpu="1"), nodes)
    assert r.node is None
    assert message(r) == (
        "0/10 nodes are available: 10 Insufficient cpu. preemption: 0/10 nodes are available: "
        "10 No preemption victims found for incoming pod.")
    assert r.post_filter is not None and r.post_filter.nominated_node == ""


def test_preemption_policy_never_is_not_eligible_and_keeps_the_nomination() -> None:
    nodes = [node("n1", "1", pod("victim", cpu="1", node="n1"))]
    r = schedule(pipeline(), pod("big", cpu="1", priority=9, preemptionPolicy="Never"), nodes)
    assert message(r) == ("0/1 nodes are available: 1 Insufficient cpu. preemption: not "
                          "eligible due to preemptionPolicy=Never.")
    assert r.post_filter is not None and r.post_filter.nominated_node is None
    assert not r.post_filter.victims


def test_equal_priority_is_no_victim() -> None:
    nodes = [node("n1", "1", pod("same", cpu="1", priority=5, node="n1"))]
    r = schedule(pipeline(), pod("p", cpu="1", priority=5), nodes)
    assert message(r) == (
        "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: "
        "1 No preemption victims found for incoming pod.")


def test_unresolvable_nodes_are_not_helped() -> None:
    nodes = [node("cordoned", "1", pod("v1", cpu="1", node="cordoned"), unschedulable=True),
             node("n1", "1", pod("keep", cpu="1", priority=100, node="n1"))]
    r = schedule(pipeline(), pod("p", cpu="1", priority=5), nodes)
    assert message(r) == (
        "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) were unschedulable. "
        "preemption: 0/2 nodes are available: 1 No preemption victims found for incoming "
        "pod, 1 Preemption is not helpful for scheduling.")
    rep = report(r)
    assert set(rep.non_candidates) == {"cordoned", "n1"}


def test_victims_too_small_leave_the_filter_reason() -> None:
    n = node("n1", "4", pod("keep", cpu="3", priority=100, node="n1"),
             pod("victim", cpu="500m", node="n1"))
    r = schedule(pipeline(), pod("p", cpu="2", priority=50), [n])
    assert message(r).endswith("preemption: 0/1 nodes are available: 1 Insufficient cpu.")


# -- candidates and victims ---------------------------------------------------------------
def test_the_node_with_the_cheapest_victims_is_nominated() -> None:
    two = node("two", "1", pod("a", cpu="500m", node="two"), pod("b", cpu="500m", node="two"))
    one = node("one", "1", pod("c", cpu="1", node="one"))
    r = schedule(pipeline(), pod("p", cpu="1", priority=10), [two, one])
    assert r.post_filter is not None
    assert r.post_filter.nominated_node == "one"
    assert [v.name for v in r.post_filter.victims] == ["c"]
    assert message(r) == ("0/2 nodes are available: 2 Insufficient cpu. preemption: found a "
                          "potential placement for pod on node one, preempting 1 victims")
    rep = report(r)
    assert {c.node for c in rep.candidates} == {"one", "two"}
    assert rep.chosen == "one" and rep.deciding_rule == RULE_SUM_PRIORITIES


def test_reprieve_keeps_the_most_important_pods_that_still_leave_room() -> None:
    n = node("n1", "4", pod("a", cpu="1", priority=1, node="n1"),
             pod("b", cpu="1", priority=2, node="n1"), pod("c", cpu="2", priority=0, node="n1"))
    r = schedule(pipeline(), pod("p", cpu="2", priority=10), [n])
    assert r.post_filter is not None
    assert [v.name for v in r.post_filter.victims] == ["c"]
    # the live node is untouched by the dry run
    assert sorted(n.pods) == ["ns/a", "ns/b", "ns/c"] and n.requested["cpu"] == 4000


def test_a_node_whose_victim_breaks_a_pdb_loses_to_one_that_does_not() -> None:
    guarded = node("guarded", "1", pod("g", cpu="1", labels={"app": "db"}, node="guarded"))
    free = node("free", "1", pod("f", cpu="1", priority=3, labels={"app": "web"}, node="free"))
    r = schedule(pipeline([pdb("db", {"app": "db"}, 0)]), pod("p", cpu="1", priority=10),
                 [guarded, free])
    assert r.post_filter is not None and r.post_filter.nominated_node == "free"
    rep = report(r)
    by_node = {c.node: c for c in rep.candidates}
    assert by_node["guarded"].num_pdb_violations == 1
    assert by_node["guarded"].pdb_violations == {"ns/g": ["ns/db"]}
    assert rep.deciding_rule == RULE_PDB


def test_pdb_with_room_to_disrupt_is_not_violated() -> None:
    guarded = node("guarded", "1", pod("g", cpu="1", labels={"app": "db"}, node="guarded"))
    r = schedule(pipeline([pdb("db", {"app": "db"}, 1)]), pod("p", cpu="1", priority=10),
                 [guarded])
    assert r.post_filter is not None and r.post_filter.num_pdb_violations == 0
    assert r.post_filter.nominated_node == "guarded"


def test_violating_victims_are_reprieved_first() -> None:
    # Either pod frees enough; the one a PDB protects is tried first and kept.
    n = node("n1", "2", pod("protected", cpu="1", labels={"app": "db"}, node="n1"),
             pod("plain", cpu="1", node="n1"))
    r = schedule(pipeline([pdb("db", {"app": "db"}, 0)]), pod("p", cpu="1", priority=10), [n])
    assert r.post_filter is not None
    assert [v.name for v in r.post_filter.victims] == ["plain"]
    assert r.post_filter.num_pdb_violations == 0


def test_candidates_stop_once_enough_are_found() -> None:
    nodes = [node(f"n{i}", "1", pod(f"v{i}", cpu="1", node=f"n{i}")) for i in range(5)]
    p = build_pipeline(load_policy(with_spec(preemption={
        "minCandidateNodesPercentage": 0, "minCandidateNodesAbsolute": 2}), CATALOG),
        Handle(nominator=Nominator()), rng=random.Random(1))
    rep = report(schedule(p, pod("p", cpu="1", priority=10), nodes))
    assert len(rep.candidates) == 2 and len(rep.not_tried) == 3


def test_num_candidates_follows_upstream() -> None:
    dp = DefaultPreemption()
    assert dp.num_candidates(50) == 50      # absolute 100, capped by the nodes
    assert dp.num_candidates(5000) == 500   # 10%
    assert DefaultPreemption(args=DefaultPreemptionArgs(1, 10)).num_candidates(5000) == 50
    assert DefaultPreemptionArgs(0, 0).errors()
    assert DefaultPreemptionArgs(101, 1).errors()
    assert not DefaultPreemptionArgs().errors()


def test_latest_start_time_decides_among_otherwise_equal_candidates() -> None:
    old = Candidate("old", [pod("a", start="2026-01-01T00:00:00Z")])
    new = Candidate("new", [pod("b", start="2026-06-01T00:00:00Z")])
    chosen, rule = pick_one_node_for_preemption([old, new])
    assert chosen is new and rule == RULE_LATEST_START


# -- nominated pods ---------------------------------------------------------------------
def test_a_nominated_pod_of_equal_or_higher_priority_holds_its_room() -> None:
    nominator = Nominator()
    nominator.add(pod("preemptor", cpu="1", priority=10), "n1")
    n1, n2 = node("n1", "1"), node("n2", "1", pod("busy", cpu="1", priority=100, node="n2"))
    p = pipeline(nominator=nominator)
    low = schedule(p, pod("low", cpu="1", priority=5, preemptionPolicy="Never"), [n1, n2])
    assert low.node is None
    high = schedule(p, pod("high", cpu="1", priority=20), [n1, n2])
    assert high.node == "n1"
    # the nominated pod itself is not in its own way
    assert schedule(p, pod("preemptor", cpu="1", priority=10), [n1, n2]).node == "n1"


def test_the_nominated_node_is_tried_first() -> None:
    nominator = Nominator()
    nominator.add(pod("p", cpu="1", priority=10), "n3")
    nodes = [node(f"n{i}", "1") for i in range(5)]
    r = schedule(pipeline(nominator=nominator), pod("p", cpu="1", priority=10), nodes)
    assert r.node == "n3"


def test_a_terminating_victim_on_the_nominated_node_makes_the_pod_wait() -> None:
    terminating = pod("victim", cpu="1", node="n1",
                      meta={"deletionTimestamp": "2026-01-01T00:00:00Z"},
                      status={"conditions": [{"type": "DisruptionTarget", "status": "True",
                                              "reason": "PreemptionByScheduler"}]})
    nominator = Nominator()
    preemptor = pod("p", cpu="1", priority=10)
    nominator.add(preemptor, "n1")
    r = schedule(pipeline(nominator=nominator), preemptor,
                 [node("n1", "1", terminating), node("n2", "1", pod("x", cpu="1", node="n2"))])
    assert message(r).endswith(
        "preemption: not eligible due to a terminating pod on the nominated node.")
    assert r.post_filter is not None and r.post_filter.nominated_node is None


def test_no_nodes_no_post_filter() -> None:
    r = schedule(pipeline(), pod("p"), [])
    assert r.fit_error is not None and r.fit_error.message == FitError(0).message


# -- the policy's say -------------------------------------------------------------------
def with_spec(**spec: Any) -> dict[str, Any]:
    return {**POLICY, "spec": {"schedulerName": "p", **spec}}


def test_spec_preemption_args_reach_the_plugin_and_are_validated() -> None:
    p = build_pipeline(load_policy(with_spec(preemption={
        "minCandidateNodesPercentage": 0, "minCandidateNodesAbsolute": 2}), CATALOG))
    plugin = p.plugins.post_filter[-1]
    assert isinstance(plugin, DefaultPreemption)
    assert plugin.args == DefaultPreemptionArgs(0, 2)
    with pytest.raises(PolicyError) as err:
        load_policy(with_spec(preemption={"minCandidateNodesPercentage": 0,
                                          "minCandidateNodesAbsolute": 0, "x": 1}), CATALOG)
    paths = {e.path for e in err.value.errors}
    assert paths == {"spec.preemption.minCandidateNodesPercentage", "spec.preemption.x"}
    with pytest.raises(PolicyError, match="spec.preemption.minCandidateNodesPercentage: must "
                                          "be between 0 and 100, not 101"):
        load_policy(with_spec(preemption={"minCandidateNodesPercentage": 101}), CATALOG)


def test_disabled_preemption_leaves_no_sentence_and_evicts_nothing() -> None:
    nodes = [node("n1", "1", pod("victim", cpu="1", node="n1"))]
    only_fit = {"disabledPlugins": ["*"], "filters": [{"name": "NodeResourcesFit"}]}
    for spec in ({"disabledPlugins": ["DefaultPreemption"]}, only_fit):
        p = build_pipeline(load_policy(with_spec(**spec), CATALOG),
                           Handle(nominator=Nominator()))
        assert not any(isinstance(pl, DefaultPreemption) for pl in p.plugins.post_filter)
        r = schedule(p, pod("p", cpu="1", priority=10), nodes)
        assert message(r) == "0/1 nodes are available: 1 Insufficient cpu."
        assert r.post_filter is None
    # defaultPlugins: false is about filters and scorers: preemption stays
    kept = build_pipeline(load_policy(with_spec(defaultPlugins=False), CATALOG))
    assert isinstance(kept.plugins.post_filter[-1], DefaultPreemption)
