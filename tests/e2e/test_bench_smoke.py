"""`make bench` keeps working: a small run of bench/run.py (basic workload, 50 nodes,
100 pods, two rounds) against the session's control plane, with the no-op binder, kube-scheduler and
polsched. It checks that every scheduler bound every pod exactly once, honoured the
taints, and that the results carry every field RESULTS.md reads. No timing assertions:
the numbers belong to `make bench`, not to a test."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, Cluster

pytestmark = pytest.mark.e2e

NODES, PODS = 50, 100
RESULT_FIELDS = {
    "scheduler", "scheduler_name", "status", "error", "nodes", "pods", "bound", "rebinds",
    "bound_once", "violations", "create_rate_pods_per_s", "create_s", "throughput_pods_per_s",
    "duration_s", "latency_ms", "cpu_s", "peak_rss_mb", "startup_s", "others_cpu_s",
}


def test_bench_smoke_binds_every_pod_once_per_scheduler(cluster: Cluster, tmp_path: Path,
                                                        ) -> None:
    # kube-scheduler gets a profile name of its own: this control plane is shared with
    # other tests, whose pods it must not take.
    run = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "run.py"), "--kubeconfig", cluster.kubeconfig,
         "--workloads", "basic", "--nodes", str(NODES), "--pods", str(PODS),
         "--schedulers", "noop,kube,polsched", "--kube-scheduler-name", "bench-kube",
         "--rounds", "2", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stderr[-3000:]

    doc = json.loads((tmp_path / "results.json").read_text())
    assert {"started", "finished", "command", "machine", "settings", "workloads"} <= set(doc)
    assert doc["settings"]["schedulers"]["kube"]["client_qps"] > 0
    results = doc["workloads"]["basic"]["results"]
    assert set(results) == {"noop", "kube", "polsched"}
    for key, r in results.items():
        assert RESULT_FIELDS <= set(r), f"{key} lacks {RESULT_FIELDS - set(r)}"
        assert r["status"] == "ok", f"{key}: {r.get('error')}"
        assert (r["nodes"], r["pods"], r["bound"]) == (NODES, PODS, PODS), key
        assert r["bound_once"] and r["rebinds"] == 0, key
        assert set(r["latency_ms"]) == {"p50", "p90", "p99", "max"}, key
        assert r["throughput_pods_per_s"] > 0 and r["peak_rss_mb"] > 0, key
    # The ceiling writes what polsched writes: a Scheduled event per pod (the warm-up's too).
    assert results["noop"]["scheduled_events"] == PODS + 1
    assert results["polsched"]["scheduled_events"] == PODS + 1
    # Schedulers decide: no pod on the tainted nodes. The no-op binder does not decide.
    assert results["kube"]["violations"] == 0
    assert results["polsched"]["violations"] == 0

    # Two rounds: every scheduler ran twice, its figures are one of its two runs.
    rounds = doc["workloads"]["basic"]["rounds"]
    assert {k: len(v) for k, v in rounds.items()} == {"noop": 2, "kube": 2, "polsched": 2}
    for key, runs in rounds.items():
        assert all(run["status"] == "ok" for run in runs), key
        assert results[key]["throughput_pods_per_s"] in {
            run["throughput_pods_per_s"] for run in runs}, key

    md = (tmp_path / "RESULTS.md").read_text()
    assert "polsched / kube-scheduler" in md and "## basic: 50 nodes, 100 pods" in md
    assert "Rounds: 2, every scheduler in turn" in md
    assert len(list((tmp_path / "out").glob("*.json"))) == 1
    # Everything the run created is gone: the next test sees the cluster as it was.
    left = cluster.kubectl("get", "nodes", "-l", "polsched.io/bench=true", "-o", "name").stdout
    assert left.strip() == ""


def test_bench_gang_workload_binds_every_gang_whole(tmp_path: Path) -> None:
    """gangs-of-3 at a fiftieth (10 nodes, 20 gangs of 3) on the control plane bench/run.py
    starts with GenericWorkload on: every scheduler binds every pod once, and no gang in
    part (the ceiling binds everything, so whole too)."""
    run = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "run.py"), "--workloads", "gangs-of-3",
         "--scale", "0.02", "--schedulers", "noop,kube,polsched", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=400)
    assert run.returncode == 0, run.stderr[-3000:]
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["settings"]["feature_gates"] == {"gangs-of-3": "GenericWorkload=true"}
    results = doc["workloads"]["gangs-of-3"]["results"]
    for key, r in results.items():
        assert r["status"] == "ok", f"{key}: {r.get('error')}"
        assert (r["pods"], r["bound"]) == (60, 60), key
        assert r["bound_once"], key
        assert r["violations_by_kind"]["gangs bound in part"] == 0, key
        assert r["placement"] == {"gangs_whole": 20, "gangs_unbound": 0}, key
    assert results["kube"]["violations"] == 0
    assert results["polsched"]["violations"] == 0
