"""Metrics under kube-scheduler's names, in the Prometheus text format, and the
/metrics, /healthz and /readyz endpoints."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import aiohttp
import pytest

from polsched.scheduler import metrics

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def clean() -> Iterator[None]:
    metrics.reset()
    yield
    metrics.reset()


def test_attempts_and_duration_histogram() -> None:
    metrics.schedule_attempt("p1", metrics.SCHEDULED, 0.003)
    metrics.schedule_attempt("p1", metrics.SCHEDULED, 0.0005)
    metrics.schedule_attempt("p1", metrics.UNSCHEDULABLE, 100)
    text = metrics.exposition()
    assert 'scheduler_schedule_attempts_total{profile="p1",result="scheduled"} 2' in text
    assert 'scheduler_schedule_attempts_total{profile="p1",result="unschedulable"} 1' in text
    h = "scheduler_scheduling_attempt_duration_seconds"
    assert f'{h}_bucket{{profile="p1",result="scheduled",le="0.001"}} 1' in text
    assert f'{h}_bucket{{profile="p1",result="scheduled",le="0.004"}} 2' in text
    assert f'{h}_bucket{{profile="p1",result="unschedulable",le="+Inf"}} 1' in text
    assert f'{h}_bucket{{profile="p1",result="unschedulable",le="16.384"}} 0' in text
    assert f'{h}_count{{profile="p1",result="scheduled"}} 2' in text
    assert f"# TYPE {h} histogram" in text


def test_pending_pods_summed_over_profiles_per_queue() -> None:
    metrics.pending_pods("a", metrics.ACTIVE, 2)
    metrics.pending_pods("b", metrics.ACTIVE, 3)
    metrics.pending_pods("b", metrics.BACKOFF, 1)
    text = metrics.exposition()
    assert 'scheduler_pending_pods{queue="active"} 5' in text
    assert 'scheduler_pending_pods{queue="backoff"} 1' in text
    metrics.forget_profile("b")
    assert 'scheduler_pending_pods{queue="active"} 2' in metrics.exposition()


def test_reload_metrics_and_label_escaping() -> None:
    metrics.policy_reload('we"ird', "error", 0.01)
    text = metrics.exposition()
    assert 'polsched_policy_reloads_total{policy="we\\"ird",result="error"} 1' in text
    assert 'polsched_policy_reload_duration_seconds_count{policy="we\\"ird"} 1' in text


def test_endpoints() -> None:
    ready = [False]

    async def main() -> None:
        runner = await metrics.serve("127.0.0.1:0", ready=lambda: ready[0])
        try:
            port = runner.addresses[0][1]
            base = f"http://127.0.0.1:{port}"
            metrics.schedule_attempt("p", metrics.ERROR, 0.1)
            async with aiohttp.ClientSession() as s:
                async with s.get(f"{base}/healthz") as r:
                    assert r.status == 200
                async with s.get(f"{base}/readyz") as r:
                    assert r.status == 503
                ready[0] = True
                async with s.get(f"{base}/readyz") as r:
                    assert r.status == 200
                async with s.get(f"{base}/metrics") as r:
                    assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
                    assert 'result="error"' in await r.text()
        finally:
            await runner.cleanup()

    asyncio.run(main())


def test_listen_must_be_host_port() -> None:
    with pytest.raises(ValueError, match="HOST:PORT"):
        metrics.parse_listen("8080")


def test_first_decision_gauges_name_the_latest_generation_and_go_with_the_policy() -> None:
    metrics.first_decision("p", 3, 1763856000.25)
    metrics.first_decision("p", 4, 1763856001.5, wait=0.25, idle=0.125)
    metrics.first_decision("q", 1, 1763856002.0)
    text = metrics.exposition()
    assert 'polsched_policy_first_decision_generation{policy="p"} 4\n' in text
    assert 'polsched_policy_first_decision_timestamp_seconds{policy="p"} 1763856001.5\n' in text
    assert 'polsched_policy_first_decision_wait_seconds{policy="p"} 0.25\n' in text
    assert 'polsched_policy_first_decision_idle_seconds{policy="p"} 0.125\n' in text
    metrics.forget_policy("p")
    text = metrics.exposition()
    assert 'policy="p"' not in text
    assert 'polsched_policy_first_decision_generation{policy="q"} 1\n' in text
