"""NodeSetFilter: the filters that name the nodes they pass once per pod (NodeAffinity,
TaintToleration, NodeUnschedulable, NodeLabel) must name exactly the nodes their Filter passes, give
the status Filter gives the others, and follow node changes; NodeAffinity's preferred
terms, scored from the same index, must score as term matching does."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from polsched.cluster.cache import ClusterCache
from polsched.framework import CycleState, NodeInfo, PodInfo, Snapshot
from polsched.framework.interfaces import (
    FilterPlugin,
    NodeSetFilter,
    PreFilterPlugin,
    PreFilterResult,
)
from polsched.framework.status import Code
from polsched.plugins import node_affinity, node_label, node_unschedulable, taint_toleration
from polsched.scheduler.algorithm import find_nodes_that_fit_pod, schedule_pod
from tests.builders import make_node, make_pod
from tests.unit.pipelines import build, build_plugin

pytestmark = pytest.mark.unit

KEYS = ("zone", "tier", "gpu", "rank")
VALUES = {"zone": ("a", "b", "c"), "tier": ("x", "y"), "gpu": ("", "yes"),
          "rank": ("1", "5", "10", "x")}
OPS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
EFFECTS = ("NoSchedule", "NoExecute", "PreferNoSchedule", "")


def random_node(r: random.Random, i: int) -> dict[str, Any]:
    labels = {k: r.choice(VALUES[k]) for k in KEYS if r.random() < 0.7}
    taints = [{"key": r.choice(("dedicated", "maint")), "value": r.choice(("", "true")),
               "effect": r.choice(EFFECTS[:3])} for _ in range(r.choice((0, 0, 1, 2)))]
    spec: dict[str, Any] = {"taints": taints}
    if r.random() < 0.15:
        spec["unschedulable"] = True
    return {"metadata": {"name": f"n{i}", "labels": labels}, "spec": spec,
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}}}


def random_requirement(r: random.Random) -> dict[str, Any]:
    key = r.choice(KEYS + ("absent",))
    op = r.choice(OPS)
    req: dict[str, Any] = {"key": key, "operator": op}
    if op in ("In", "NotIn"):
        req["values"] = r.sample(list(VALUES.get(key, ("q",))) + ["zz"], r.randint(1, 2))
    elif op in ("Gt", "Lt"):
        req["values"] = [str(r.choice((0, 3, 7, 12)))]
    return req


def random_term(r: random.Random, n_nodes: int) -> dict[str, Any]:
    term: dict[str, Any] = {}
    if r.random() < 0.85:
        term["matchExpressions"] = [random_requirement(r) for _ in range(r.randint(1, 3))]
    if r.random() < 0.25:
        term["matchFields"] = [{"key": "metadata.name", "operator": r.choice(("In", "NotIn")),
                                "values": [f"n{r.randrange(n_nodes)}"]}]
    return term


def random_pod(r: random.Random, n_nodes: int) -> PodInfo:
    spec: dict[str, Any] = {}
    if r.random() < 0.3:
        spec["nodeSelector"] = {"zone": r.choice(VALUES["zone"])}
    affinity: dict[str, Any] = {}
    if r.random() < 0.8:
        affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {
            "nodeSelectorTerms": [random_term(r, n_nodes) for _ in range(r.randint(1, 3))]}
    if r.random() < 0.8:
        affinity["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {"weight": r.randint(1, 100), "preference": random_term(r, n_nodes)}
            for _ in range(r.randint(1, 3))]
    if affinity:
        spec["affinity"] = {"nodeAffinity": affinity}
    spec["tolerations"] = [
        {"key": r.choice(("dedicated", "maint", "node.kubernetes.io/unschedulable", "")),
         "operator": r.choice(("Equal", "Exists")), "value": r.choice(("", "true")),
         "effect": r.choice(EFFECTS)} for _ in range(r.choice((0, 1, 2)))]
    for t in spec["tolerations"]:
        if t["operator"] == "Exists":
            t.pop("value")
    return make_pod().name("p").namespace("ns").spec(**spec).info()


ADDED = {"addedAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
    "nodeSelectorTerms": [{"matchExpressions": [
        {"key": "tier", "operator": "NotIn", "values": ["y"]}]}]}}}


@pytest.mark.parametrize(("plugin_name", "args"), [
    (node_affinity.NAME, None), (node_affinity.NAME, ADDED),
    (taint_toleration.NAME, None), (node_unschedulable.NAME, None),
])
def test_filter_nodes_names_exactly_the_nodes_filter_passes(plugin_name: str,
                                                            args: Any) -> None:
    r = random.Random(7)
    checked = 0
    for _ in range(60):
        nodes = [NodeInfo.from_json(random_node(r, i)) for i in range(30)]
        snapshot = Snapshot(nodes)
        pod = random_pod(r, len(nodes))
        plugin = build_plugin(plugin_name, args)
        assert isinstance(plugin, NodeSetFilter) and isinstance(plugin, FilterPlugin)
        assert isinstance(plugin, PreFilterPlugin)
        state = CycleState()
        pre = plugin.pre_filter(state, pod, snapshot)
        if isinstance(pre, PreFilterResult) or pre.code is not Code.SUCCESS:
            continue
        passing = plugin.filter_nodes(state, pod, snapshot)
        assert passing is not None
        rejection = plugin.filter_rejection(state, pod)
        for n in nodes:
            st = plugin.filter(state, pod, n)
            assert st.ok == (n.name in passing), (pod.raw, n.raw)
            if not st.ok and rejection is not None:
                assert st == rejection
            checked += 1
    assert checked > 400


def test_node_label_names_exactly_the_nodes_its_filter_passes() -> None:
    """NodeLabel's verdict depends on the labels alone: its set is exact, and with one
    requirement every node outside it gets that requirement's status."""
    r = random.Random(5)
    checked = 0
    for _ in range(60):
        nodes = [NodeInfo.from_json(random_node(r, i)) for i in range(30)]
        snapshot = Snapshot(nodes)
        reqs = [random_requirement(r) for _ in range(r.choice((1, 1, 2, 3)))]
        plugin = build_plugin(node_label.NAME, {"requirements": reqs})
        assert isinstance(plugin, NodeSetFilter) and isinstance(plugin, FilterPlugin)
        pod = random_pod(r, len(nodes))
        state = CycleState()
        passing = plugin.filter_nodes(state, pod, snapshot)
        assert passing is not None
        rejection = plugin.filter_rejection(state, pod)
        assert (rejection is not None) == (len(reqs) == 1)
        for n in nodes:
            st = plugin.filter(state, pod, n)
            assert st.ok == (n.name in passing), (reqs, n.raw)
            if not st.ok and rejection is not None:
                assert st == rejection
            checked += 1
    assert checked == 60 * 30


def test_node_label_set_follows_label_changes_and_gives_filters_statuses() -> None:
    """The set is kept between pods while no node changes its labels; a relabelled,
    added or removed node is seen by the next cycle, and the nodes left out carry the
    status Filter gives them, named by the first filter that rejects them."""
    cache = ClusterCache(None)
    for i in range(6):
        cache.on_node_event("ADDED", node_json(f"n{i}", "a" if i < 3 else "b",
                                               taint=i == 0))
    pl = build(filters=[{"name": "NodeLabel", "args": {"requirements": [
        {"key": "zone", "operator": "In", "values": ["a"]}]}}])
    pod = make_pod().name("p").namespace("ns").info()
    plugin = next(f.plugin for f in pl.plugins_for(pod).filters if f.name == node_label.NAME)

    def feasible() -> set[str]:
        state = CycleState()
        found, diagnosis = find_nodes_that_fit_pod(pl, state, pod, cache.snapshot,
                                                   pl.plugins_for(pod))
        for name, st in diagnosis.node_statuses.items():
            node = cache.snapshot.get(name)
            assert node is not None
            want = node_label.NAME if node.labels.get("zone") != "a" else "TaintToleration"
            assert st.plugin == want, (name, st)
            if want == node_label.NAME:
                assert st.reasons == plugin.filter(state, pod, node).reasons
        assert len(found) + len(diagnosis.node_statuses) == len(cache.snapshot.nodes)
        return {n.name for n in found}

    assert feasible() == {"n1", "n2"}
    assert isinstance(plugin, NodeSetFilter)
    first = plugin.filter_nodes(CycleState(), pod, cache.snapshot)
    assert plugin.filter_nodes(CycleState(), pod, cache.snapshot) is first
    cache.on_node_event("MODIFIED", node_json("n3", "a"))
    assert feasible() == {"n1", "n2", "n3"}
    cache.on_node_event("MODIFIED", node_json("n1", "b"))
    assert feasible() == {"n2", "n3"}
    cache.on_node_event("ADDED", node_json("n6", "a"))
    cache.on_node_event("DELETED", node_json("n2", "a"))
    assert feasible() == {"n3", "n6"}


@pytest.mark.parametrize("args", [None, {"addedAffinity": {
    "preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 3, "preference": {"matchExpressions": [
            {"key": "zone", "operator": "NotIn", "values": ["a"]}]}}]}}])
def test_preferred_scores_from_the_index_equal_term_matching(args: Any) -> None:
    r = random.Random(11)
    for _ in range(60):
        nodes = [NodeInfo.from_json(random_node(r, i)) for i in range(30)]
        pod = random_pod(r, len(nodes))
        plugin = build_plugin(node_affinity.NAME, args)
        state = CycleState()
        if plugin.pre_score(state, pod, nodes, Snapshot(nodes)).code is not Code.SUCCESS:
            continue
        scores = plugin.score_nodes(state, pod, nodes)
        assert scores == [plugin.score(CycleState(), pod, n) for n in nodes], pod.raw


def node_json(name: str, zone: str, taint: bool = False) -> dict[str, Any]:
    n = make_node().name(name).label("zone", zone).spec()
    if taint:
        n.taint("maint", "NoSchedule", value="true")
    return n.allocatable({"cpu": "4", "memory": "8Gi", "pods": "110"}).obj()


def test_the_cache_snapshot_index_follows_node_changes() -> None:
    """A node that changes zone, gets tainted, cordoned, added or removed is seen by the
    next cycle, though the index was built before."""
    cache = ClusterCache(None)
    for i in range(4):
        cache.on_node_event("ADDED", node_json(f"n{i}", "a" if i < 2 else "b"))
    pl = build(defaults=True)
    pod = make_pod().name("p").namespace("ns").node_selector({"zone": "a"}).info()

    def feasible() -> set[str]:
        state = CycleState()
        found, _ = find_nodes_that_fit_pod(pl, state, pod, cache.snapshot,
                                           pl.plugins_for(pod), explain=True)
        return {n.name for n in found}

    assert feasible() == {"n0", "n1"}
    cache.on_node_event("MODIFIED", node_json("n2", "a"))
    assert feasible() == {"n0", "n1", "n2"}
    cache.on_node_event("MODIFIED", node_json("n0", "a", taint=True))
    assert feasible() == {"n1", "n2"}
    cordoned = node_json("n1", "a")
    cordoned["spec"]["unschedulable"] = True
    cache.on_node_event("MODIFIED", cordoned)
    assert feasible() == {"n2"}
    cache.on_node_event("ADDED", node_json("n4", "a"))
    cache.on_node_event("DELETED", node_json("n2", "a"))
    assert feasible() == {"n4"}
    result = asyncio.run(schedule_pod(pl, pod, cache.snapshot))
    assert result.node == "n4"
