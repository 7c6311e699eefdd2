"""node_memo.Aggregate: running sums of per-node shares, kept in step with the nodes the
cache changes (framework.types.NODE_CHANGES), against a sum over every node."""

from __future__ import annotations

import random
from typing import Any

import pytest

from polsched.cluster.cache import ClusterCache
from polsched.framework.types import NodeInfo
from polsched.plugins.node_memo import Aggregate, Share
from tests.builders import make_node, make_pod

pytestmark = pytest.mark.unit


def node(name: str, zone: str | None) -> dict[str, Any]:
    return (make_node().name(name).labels({} if zone is None else {"zone": zone})
            .allocatable({"cpu": "4", "memory": "8Gi", "pods": "110"}).obj())


def pod(name: str, node_name: str, phase: str = "Running") -> dict[str, Any]:
    return (make_pod().name(name).namespace("ns").uid(f"uid-{name}").node(node_name)
            .container().phase(phase).obj())


def share(node: NodeInfo) -> Share:
    """Pods per zone, and a zero entry for zoned nodes without pods (a key present with
    a zero sum), so both kinds of entry are exercised."""
    zone = node.labels.get("zone")
    if zone is None:
        return ()
    return (("pods", zone, len(node.pods)), ("nodes", zone, 1))


def summed(nodes: list[NodeInfo]) -> dict[Any, dict[Any, int]]:
    out: dict[Any, dict[Any, int]] = {}
    for n in nodes:
        for group, key, v in share(n):
            by_key = out.setdefault(group, {})
            by_key[key] = by_key.get(key, 0) + v
    return out


def test_sums_follow_pods_and_nodes_through_the_cache_recomputing_only_changed_nodes(
        ) -> None:
    rng = random.Random(3)
    cache = ClusterCache(None)
    zones = ["a", "b", "c", None]
    for i in range(12):
        cache.on_node_event("ADDED", node(f"n{i}", rng.choice(zones)))
    agg = Aggregate()
    computed: list[str] = []

    def counting(n: NodeInfo) -> Share:
        computed.append(n.name)
        return share(n)

    pods: dict[str, str] = {}
    for step in range(300):
        names = [n.name for n in cache.snapshot.nodes]
        r = rng.random()
        if r < 0.4:
            name = f"p{step}"
            pods[name] = rng.choice(names)
            cache.on_pod_event("ADDED", pod(name, pods[name]))
        elif r < 0.6 and pods:
            name = rng.choice(sorted(pods))
            cache.on_pod_event("DELETED", pod(name, pods.pop(name)))
        elif r < 0.7 and pods:
            name = rng.choice(sorted(pods))
            cache.on_pod_event("MODIFIED", pod(name, pods.pop(name), "Succeeded"))
        elif r < 0.8:
            cache.on_node_event("MODIFIED", node(rng.choice(names), rng.choice(zones)))
        elif r < 0.9 and len(names) > 4:
            cache.on_node_event("DELETED", node(rng.choice(names), None))
        else:
            cache.on_node_event("ADDED", node(f"n{100 + step}", rng.choice(zones)))
        computed.clear()
        assert agg.sync(cache.snapshot, counting) == summed(cache.snapshot.nodes), step
        assert len(computed) <= 2 or step == 0, step  # only what the step changed
        computed.clear()
        agg.sync(cache.snapshot, counting)
        assert computed == []  # nothing changed since: nothing recomputed
