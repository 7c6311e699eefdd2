"""The MetricsAvailable condition of a policy with load-aware scorers, from what the node
metrics watcher holds."""

from __future__ import annotations

import pytest

from polsched.cluster.client import ApiClient
from polsched.cluster.node_metrics import NodeMetricsWatcher
from polsched.framework import Snapshot
from polsched.framework.interfaces import Handle
from polsched.scheduler import load_status
from polsched.scheduler.pipelines import build_pipeline
from tests.builders import make_node
from tests.unit.pipelines import load

pytestmark = pytest.mark.unit


def snapshot(*names: str) -> Snapshot:
    return Snapshot([make_node().name(n).allocatable({"cpu": "4"}).info() for n in names])


def item(name: str, stamp: str) -> dict[str, object]:
    return {"metadata": {"name": name}, "timestamp": stamp, "window": "10s",
            "usage": {"cpu": "100m", "memory": "1Gi"}}


def test_condition_names_the_nodes_without_metrics_and_only_for_load_aware_policies() -> None:
    now = [1_000_000.0]
    watcher = NodeMetricsWatcher(ApiClient("https://127.0.0.1:9"), interval=10,
                                 clock=lambda: now[0])
    handle = Handle(load=watcher)
    aware = build_pipeline(load(scorers=[{"name": "TargetLoadPacking"}], defaults=False),
                           handle)
    plain = build_pipeline(load(scorers=[{"name": "NodeResourcesFit"}], defaults=False),
                           handle)
    snap = snapshot("a", "b")
    assert load_status.condition(watcher, plain, snap) is None

    watcher.last_error = "GET /apis/metrics.k8s.io/v1beta1/nodes: 404 NotFound: not found"
    ok, reason, message = load_status.condition(watcher, aware, snap) or (None, "", "")
    assert (ok, reason) == (False, "MetricsAPIUnavailable") and "404" in message

    watcher.last_error = None
    watcher.ingest({"items": [item("a", "2026-01-01T00:00:00Z"),
                              item("b", "2026-01-01T00:00:00Z")]})
    assert load_status.condition(watcher, aware, snap) == (
        True, "MetricsFresh", "fresh metrics for all 2 nodes, polled every 10s")

    now[0] += 25
    watcher.ingest({"items": [item("a", "2026-01-01T00:00:20Z")]})
    now[0] += 10  # b last served 35 s ago: over three intervals
    ok, reason, message = load_status.condition(watcher, aware, snap) or (None, "", "")
    assert (ok, reason) == (False, "NodesWithoutMetrics")
    assert message.startswith("no metrics for node b (last seen 35s ago): 1 of 2 nodes")
