"""The time budget of one attempt (framework.budget) in the search, through pipelines the
production builder makes from loaded policies.

The clock is the test's: it passes the deadline after a given number of reads, so where
the search stops is exact and no test measures wall time."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from polsched.framework.budget import (
    DEFAULT_ATTEMPT_BUDGET_SECONDS,
    NODES_PER_CHECK,
    AttemptBudget,
    BudgetExceeded,
    new_budget,
)
from polsched.framework.diagnosis import PipelineError
from polsched.framework.types import NodeInfo, PodInfo, Snapshot
from polsched.scheduler.algorithm import SearchLimits, schedule_pod
from tests.builders import make_node, make_pod
from tests.unit.pipelines import build

pytestmark = pytest.mark.unit


def clock_expiring_after(reads: int) -> Callable[[], float]:
    """A clock at 0 for its first `reads` reads (the budget's own first read included),
    then far past any deadline."""
    count = [0]

    def now() -> float:
        count[0] += 1
        return 0.0 if count[0] <= reads else 1e9

    return now


def nodes(n: int, *pods: PodInfo) -> Snapshot:
    infos: list[NodeInfo] = []
    for i in range(n):
        on = [p for p in pods if p.node_name == f"n{i:03d}"]
        infos.append(make_node().name(f"n{i:03d}").label("zone", f"z{i % 3}")
                     .label("kubernetes.io/hostname", f"n{i:03d}")
                     .capacity({"cpu": "8", "pods": "110"}).info(*on))
    return Snapshot(infos)


def anti_affinity_pod(name: str, app: str, node: str = "") -> PodInfo:
    w = make_pod().name(name).label("app", app).affinity({"podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [{
            "labelSelector": {"matchLabels": {"app": app}},
            "topologyKey": "kubernetes.io/hostname"}]}})
    return (w.node(node) if node else w).info()


def test_the_filter_loop_stops_at_a_check_past_the_deadline_and_names_it() -> None:
    # An Expression filter is called per node (no NodeSet): the loop reads the clock
    # every NODES_PER_CHECK nodes. Reads: the budget's start, the check before
    # Expression's PreFilter, then the loop's at node 0, 16 and 32 (past the deadline).
    pl = build(filters=[{"name": "Expression",
                         "args": {"expression": "node.metadata.name != 'none'"}}],
               defaults=False)
    budget = AttemptBudget(2.0, clock_expiring_after(4))
    with pytest.raises(BudgetExceeded) as err:
        asyncio.run(schedule_pod(pl, make_pod().name("p").info(), nodes(100),
                                 limits=SearchLimits(budget)))
    assert isinstance(err.value, PipelineError)  # failed as an attempt's error
    assert str(err.value) == (
        "the scheduling attempt used its time budget of 2s (--attempt-budget) in Filter "
        f"after {2 * NODES_PER_CHECK} of 100 nodes; the pod is tried again after a backoff")


def test_within_the_budget_the_search_decides_as_without_one() -> None:
    pl = build(filters=[{"name": "Expression",
                         "args": {"expression": "node.metadata.name == 'n042'"}}],
               defaults=False)
    result = asyncio.run(schedule_pod(pl, make_pod().name("p").info(), nodes(100),
                                      limits=SearchLimits(AttemptBudget(60.0))))
    assert result.node == "n042"


def test_inter_pod_affinity_checks_inside_its_walk_over_the_existing_pods() -> None:
    # Reads: the budget's start, the runtime's check before InterPodAffinity's PreFilter,
    # then the plugin's own once per node it walks: the third read is past the deadline.
    pl = build(filters=[{"name": "InterPodAffinity"}], defaults=False)
    existing = [anti_affinity_pod(f"e{i}", "web", f"n{i:03d}") for i in range(5)]
    with pytest.raises(BudgetExceeded, match=r"in PreFilter InterPodAffinity, "):
        asyncio.run(schedule_pod(pl, anti_affinity_pod("new", "web"), nodes(10, *existing),
                                 limits=SearchLimits(AttemptBudget(1.0,
                                                                   clock_expiring_after(2)))))


def test_an_attempt_stopped_mid_walk_leaves_the_plugin_deciding_as_a_fresh_one() -> None:
    # InterPodAffinity keeps its counts across attempts (node_memo.Aggregate): an attempt
    # stopped in the middle of counting must not leave partial counts behind.
    existing = [anti_affinity_pod(f"e{i}", "web", f"n{i:03d}") for i in range(6)]
    snapshot = nodes(8, *existing)
    incoming = anti_affinity_pod("new", "web")
    pl = build(filters=[{"name": "InterPodAffinity"}], defaults=False)
    for reads in (2, 4, 6):
        with pytest.raises(BudgetExceeded):
            budget = AttemptBudget(1.0, clock_expiring_after(reads))
            asyncio.run(schedule_pod(pl, incoming, snapshot, limits=SearchLimits(budget)))
    after = asyncio.run(schedule_pod(pl, incoming, snapshot))
    fresh = asyncio.run(schedule_pod(build(filters=[{"name": "InterPodAffinity"}],
                                           defaults=False), incoming, snapshot))
    assert after.feasible_nodes == fresh.feasible_nodes == 2
    assert after.node in {"n006", "n007"}


def test_zero_or_none_is_no_budget() -> None:
    assert new_budget(0) is None
    assert new_budget(None) is None
    b = new_budget(DEFAULT_ATTEMPT_BUDGET_SECONDS)
    assert b is not None and b.seconds == DEFAULT_ATTEMPT_BUDGET_SECONDS


def test_pod_topology_spread_checks_while_counting_the_pods_its_constraints_select() -> None:
    # Reads: the budget's start, the runtime's check before PodTopologySpread's PreFilter,
    # then the plugin's own once per node it counts: the third is past the deadline.
    pl = build(filters=[{"name": "PodTopologySpread"}], defaults=False)
    existing = [make_pod().name(f"e{i}").label("app", "web").node(f"n{i:03d}").info()
                for i in range(6)]
    incoming = make_pod().name("new").label("app", "web").spec(topologySpreadConstraints=[
        {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule",
         "labelSelector": {"matchLabels": {"app": "web"}}}]).info()
    with pytest.raises(BudgetExceeded,
                       match=r"in PodTopologySpread, counting the pods its constraints select"):
        asyncio.run(schedule_pod(pl, incoming, nodes(9, *existing),
                                 limits=SearchLimits(AttemptBudget(1.0,
                                                                   clock_expiring_after(2)))))
    # Within the budget the same pipeline decides.
    result = asyncio.run(schedule_pod(pl, incoming, nodes(9, *existing),
                                      limits=SearchLimits(AttemptBudget(60.0))))
    assert result.node is not None
