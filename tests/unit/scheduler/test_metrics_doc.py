"""The metrics reference and kube-scheduler's names: docs/metrics.md is what the code
registers (regenerate it with hack/metrics_doc.py), and every stable and beta metric of
kube-scheduler v1.37 (pkg/scheduler/metrics/metrics.go) is registered under its name,
labels, type, stability and buckets, so that dashboards and alerts written for
kube-scheduler find them."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from polsched.scheduler import metrics

pytestmark = pytest.mark.unit

DOC = Path(__file__).resolve().parents[3] / "docs" / "metrics.md"


def exp(start: float, factor: float, count: int) -> list[float]:
    """prometheus.ExponentialBuckets, step by step as Go computes it."""
    out, v = [], start
    for _ in range(count):
        out.append(v)
        v *= factor
    return out


# metrics.go InitMetrics, v1.37.1: name -> (type, labels, stability, buckets or None).
KUBE_SCHEDULER: dict[str, tuple[str, set[str], str, list[float] | None]] = {
    "scheduler_schedule_attempts_total": ("counter", {"result", "profile"}, "STABLE", None),
    "scheduler_scheduling_attempt_duration_seconds": (
        "histogram", {"result", "profile"}, "STABLE", exp(0.001, 2, 15)),
    "scheduler_scheduling_algorithm_duration_seconds": (
        "histogram", set(), "BETA", exp(0.001, 2, 15)),
    "scheduler_preemption_victims": ("histogram", set(), "STABLE", exp(1, 2, 7)),
    "scheduler_preemption_attempts_total": ("counter", set(), "STABLE", None),
    "scheduler_pending_pods": ("gauge", {"queue"}, "STABLE", None),
    "scheduler_goroutines": ("gauge", {"operation"}, "BETA", None),
    "scheduler_pod_scheduling_sli_duration_seconds": (
        "histogram", {"attempts"}, "BETA", exp(0.01, 2, 20)),
    "scheduler_pod_scheduling_attempts": ("histogram", set(), "STABLE", exp(1, 2, 5)),
    "scheduler_framework_extension_point_duration_seconds": (
        "histogram", {"extension_point", "status", "profile"}, "STABLE", exp(0.0001, 2, 12)),
    "scheduler_plugin_execution_duration_seconds": (
        "histogram", {"plugin", "extension_point", "status"}, "BETA", exp(0.00001, 1.5, 20)),
    "scheduler_queue_incoming_pods_total": ("counter", {"queue", "event"}, "STABLE", None),
    "scheduler_permit_wait_duration_seconds": (
        "histogram", {"result"}, "BETA", exp(0.001, 2, 15)),
    "scheduler_unschedulable_pods": ("gauge", {"plugin", "profile"}, "BETA", None),
    "scheduler_plugin_evaluation_total": (
        "counter", {"plugin", "extension_point", "profile"}, "BETA", None),
}


@pytest.fixture(autouse=True)
def clean() -> Iterator[None]:
    metrics.reset()
    yield
    metrics.reset()


def test_the_reference_page_is_what_the_code_registers() -> None:
    assert DOC.read_text() == metrics.reference(), (
        "docs/metrics.md is stale: run `.venv/bin/python hack/metrics_doc.py > "
        "docs/metrics.md`")


def test_kube_schedulers_stable_and_beta_metrics_under_their_names() -> None:
    registered = {m.name: m for m in metrics.ALL}
    assert len(KUBE_SCHEDULER) == 15
    for name, (kind, labels, stability, buckets) in KUBE_SCHEDULER.items():
        m = registered.get(name)
        assert m is not None, f"{name} is not registered"
        assert (m.kind, set(m.labels), m.stability) == (kind, labels, stability), name
        if buckets is not None:
            assert isinstance(m, metrics.Histogram)
            assert list(m.buckets) == buckets, name


def test_every_registered_metric_is_exposed_with_its_type_and_declared_labels() -> None:
    metrics.schedule_attempt("p", metrics.SCHEDULED, 0.01)
    metrics.pending_pods("p", metrics.ACTIVE, 2)
    metrics.rest_client_request("GET", "127.0.0.1:6443", 200, 0.02)
    metrics.rest_client_request("PATCH", "127.0.0.1:6443", None, 0.02)
    metrics.leader("polsched", True)
    metrics.policy_conditions("pol", [{"type": "Valid", "status": "False"}])
    metrics.webhook_certificate(1.8e9)
    text = metrics.exposition()
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
    for m in metrics.ALL:
        assert types.get(m.name) == m.kind, m.name
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        series, labels = re.fullmatch(r"([\w:]+)(?:\{(.*)\})? \S+", line).groups()  # type: ignore[union-attr]
        family = re.sub(r"_(bucket|sum|count)$", "", series) \
            if series not in types else series
        declared = next(set(m.labels) for m in metrics.ALL if m.name == family)
        names = set(re.findall(r'(\w+)="', labels or "")) - {"le"}
        assert names == declared, line
    assert 'rest_client_requests_total{code="200",host="127.0.0.1:6443",method="GET"} 1' \
        in text
    assert 'rest_client_requests_total{code="<error>",host="127.0.0.1:6443",method="PATCH"} 1' \
        in text
    assert 'leader_election_master_status{name="polsched"} 1' in text
    assert 'polsched_policy_condition{policy="pol",status="False",type="Valid"} 1' in text
    assert 'polsched_policy_condition{policy="pol",status="True",type="Valid"} 0' in text
    assert re.search(r'^polsched_build_info\{python_version="[\d.]+",version="[^"]+"\} 1$',
                     text, re.M)
    # Label-less counters and histograms are there before their first observation, as
    # client_golang's.
    assert "scheduler_preemption_attempts_total 0" in text
    assert 'scheduler_pod_scheduling_attempts_bucket{le="+Inf"} 0' in text
    # The process figures, as the Prometheus client libraries read them from /proc.
    for name in ("process_cpu_seconds_total", "process_resident_memory_bytes",
                 "process_start_time_seconds", "process_open_fds", "process_max_fds"):
        assert re.search(rf"^{name} [\d.e+]+$", text, re.M), name


def test_unschedulable_pods_counts_each_rejecting_plugin_of_each_parked_pod() -> None:
    """scheduler_unschedulable_pods{plugin,profile}: a pod counts once for every plugin
    that rejected it (and a pod group once per member), read from the profile's
    unschedulable pool when scraped; the profile's series go with it."""

    class Pod:
        def __init__(self, *plugins: str) -> None:
            self.rejected_by = frozenset(plugins)

    class Group:
        def __init__(self, *members: Pod) -> None:
            self.members = list(members)

    pool = {"ns/a": Pod("NodeResourcesFit", "NodeAffinity"), "ns/b": Pod("NodeResourcesFit"),
            "podgroup:ns/g": Group(Pod("TaintToleration"), Pod("TaintToleration"))}
    metrics.unschedulable_pool("fast", pool)
    text = metrics.exposition()
    assert 'scheduler_unschedulable_pods{plugin="NodeResourcesFit",profile="fast"} 2' in text
    assert 'scheduler_unschedulable_pods{plugin="NodeAffinity",profile="fast"} 1' in text
    assert 'scheduler_unschedulable_pods{plugin="TaintToleration",profile="fast"} 2' in text
    del pool["ns/a"]  # the pool is read live: a pod leaving it is counted no more
    assert 'plugin="NodeAffinity"' not in metrics.exposition()
    metrics.forget_profile("fast")
    assert "scheduler_unschedulable_pods{" not in metrics.exposition()


def test_pod_scheduled_labels_attempts_as_upstream() -> None:
    metrics.pod_scheduled(1, 0.5)
    metrics.pod_scheduled(20, 0.5)
    text = metrics.exposition()
    assert 'scheduler_pod_scheduling_sli_duration_seconds_count{attempts="1"} 1' in text
    assert 'scheduler_pod_scheduling_sli_duration_seconds_count{attempts="15+"} 1' in text
    assert "scheduler_pod_scheduling_attempts_count 2" in text
