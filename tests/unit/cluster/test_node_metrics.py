"""The node metrics watcher's bookkeeping: samples kept per node, history statistics,
staleness, pods in flight. (Polling the real Metrics API: tests/e2e/test_load_aware.py.)"""

from __future__ import annotations

import statistics
from typing import Any

import pytest

from polsched.cluster.client import ApiClient
from polsched.cluster.node_metrics import HISTORY, NodeMetricsWatcher, parse_duration
from polsched.framework.load import describe_missing
from tests.builders import make_node, make_pod

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def item(name: str, cpu: str, memory: str, stamp: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "timestamp": stamp, "window": "10.5s",
            "usage": {"cpu": cpu, "memory": memory}}


def watcher(clock: Clock) -> NodeMetricsWatcher:
    w = NodeMetricsWatcher(ApiClient("https://127.0.0.1:9"), interval=10, clock=clock)
    w.want(w, None)  # a live owner, as a scorer would be
    return w


def test_durations() -> None:
    assert parse_duration("10.5s") == 10.5
    assert parse_duration("1m0s") == 60
    assert parse_duration("1h2m3.5s") == 3723.5
    assert parse_duration("250ms") == 0.25
    with pytest.raises(ValueError):
        parse_duration("10 s")


def test_history_keeps_distinct_samples_and_their_statistics() -> None:
    clock = Clock()
    w = watcher(clock)
    cpus = [100, 300, 300, 500]  # the second 300 repeats the same sample: skipped
    stamps = ["2026-01-01T00:00:10Z", "2026-01-01T00:00:20Z", "2026-01-01T00:00:20Z",
              "2026-01-01T00:00:30Z"]
    for cpu, stamp in zip(cpus, stamps, strict=True):
        w.ingest({"items": [item("n1", f"{cpu}m", "1Gi", stamp),
                            {"metadata": {"name": "bad"}, "usage": {"cpu": "x"}}]})
        clock.now += 10
    load = w.node_load("n1")
    assert load is not None
    assert load.samples == 3
    assert load.cpu.latest == 500
    assert load.cpu.avg == pytest.approx(300)
    assert load.cpu.std == pytest.approx(statistics.pstdev([100, 300, 500]))
    assert load.memory.latest == 1024 ** 3 and load.memory.std == 0
    assert load.window == 10.5
    assert w.node_load("bad") is None
    for i in range(HISTORY + 5):
        w.ingest({"items": [item("n1", "1", "1Gi", f"2026-01-01T01:{i:02d}:00Z")]})
    load = w.node_load("n1")
    assert load is not None and load.samples == HISTORY and load.cpu.std == 0


def test_stale_after_three_intervals_and_reported() -> None:
    clock = Clock()
    w = watcher(clock)
    w.ingest({"items": [item("n1", "1", "1Gi", "2026-01-01T00:00:10Z"),
                        item("n2", "1", "1Gi", "2026-01-01T00:00:10Z")]})
    clock.now += 25
    w.ingest({"items": [item("n1", "1", "1Gi", "2026-01-01T00:00:20Z")]})
    assert w.node_load("n2") is not None  # 25 s < 3 x 10 s
    clock.now += 10
    assert w.node_load("n2") is None and w.node_load("n1") is not None
    missing = w.missing(["n1", "n2", "n3"])
    assert [m.node for m in missing] == ["n2", "n3"]
    assert describe_missing(missing) == "no metrics for node n2 (last seen 35s ago), " \
                                        "n3 (never seen)"


def test_a_node_served_for_the_first_time_is_reported_as_a_change() -> None:
    """The Metrics API may answer before it serves any node (metrics-server's first
    scrapes): the nodes it serves later leave "never seen", and the policies' condition
    must hear of it although no node turned stale."""
    clock = Clock()
    w = watcher(clock)
    changes: list[list[str]] = []
    w.on_change = lambda: changes.append([m.node for m in w.missing(["n1", "n2"])])
    w.ingest({"items": []})
    w._check_changed()
    clock.now += 10
    w.ingest({"items": [item("n1", "1", "1Gi", "2026-01-01T00:00:10Z"),
                        item("n2", "1", "1Gi", "2026-01-01T00:00:10Z")]})
    w._check_changed()
    clock.now += 10
    w.ingest({"items": [item("n1", "1", "1Gi", "2026-01-01T00:00:20Z"),
                        item("n2", "1", "1Gi", "2026-01-01T00:00:20Z")]})
    w._check_changed()  # nothing changed: no call
    assert changes == [["n1", "n2"], []]


def test_a_shorter_interval_asked_for_wins_while_its_owner_lives() -> None:
    w = watcher(Clock())
    assert w.interval == 10
    class Scorer:
        pass

    owner = Scorer()
    w.want(owner, 2.0)
    assert w.interval == 2.0
    del owner
    assert w.interval == 10


def test_pods_first_seen_after_a_time_are_in_flight() -> None:
    clock = Clock()
    w = watcher(clock)
    node = make_node().name("n1").allocatable({"cpu": "4"}).info()
    old = make_pod().name("old").namespace("d").node("n1").containers([]).info()
    node.add_pod(old)
    assert w.in_flight(node, clock.now - 100) == []  # there when first looked at: old
    clock.now += 5
    new = make_pod().name("new").namespace("d").node("n1").containers([]).info()
    node.add_pod(new)
    assert [p.name for p in w.in_flight(node, clock.now - 1)] == ["new"]
    assert w.in_flight(node, clock.now + 1) == []


def test_a_node_unserved_for_an_hour_is_forgotten() -> None:
    clock = Clock()
    w = watcher(clock)
    w.ingest({"items": [item("gone", "1", "1Gi", "2026-01-01T00:00:10Z"),
                        item("kept", "1", "1Gi", "2026-01-01T00:00:10Z")]})
    clock.now += 3601
    w.ingest({"items": [item("kept", "1", "1Gi", "2026-01-01T01:00:10Z")]})
    assert w.state("gone").age is None and w.state("kept").age == 0


def test_one_item_with_an_unbounded_quantity_spoils_only_itself() -> None:
    clock = Clock()
    w = watcher(clock)
    w.ingest({"items": [item("bad", "1e999999999", "1Gi", "2026-01-01T00:00:10Z"),
                        item("good", "1", "1Gi", "2026-01-01T00:00:10Z")]})
    assert w.state("bad").age is None and w.state("good").age == 0
