"""bench/report.py: RESULTS.md from a results document, for a workload with initial pods and
a violation check (the shape bench/run.py writes)."""

from __future__ import annotations

from typing import Any

import pytest
from bench import report

pytestmark = pytest.mark.unit


def result(key: str, throughput: float, violations: int, **extra: Any) -> dict[str, Any]:
    return {"scheduler": key, "status": "ok", "error": None, "nodes": 50, "pods": 20,
            "bound": 20, "bound_once": True, "throughput_pods_per_s": throughput,
            "latency_ms": {"p50": 1.0, "p90": 2.0, "p99": 3.0, "max": 4.0}, "cpu_s": 1.0,
            "peak_rss_mb": 100.0, "violations": violations, "init_pods": 10,
            "init_create_s": 0.5, **extra}


def doc() -> dict[str, Any]:
    return {
        "started": "s", "finished": "f", "command": "make bench",
        "machine": {"nproc": 2, "cpu_model": "cpu", "memory": "1 GiB", "kernel": "k",
                    "python": "3", "go": "go", "kube": "kube", "loadavg_at_start": ["1"]},
        "settings": {"control_plane": "own", "creation_concurrency": 32, "order": ["noop"],
                     "schedulers": {}},
        "workloads": {"pod-anti-affinity": {
            "nodes": 50, "pods": 20, "description": "anti", "init_pods": 10,
            "extra_objects": ["Service bench-service"],
            "violations_count": "measured pods that share their node",
            "results": {
                "noop": result("noop", 100.0, 7, violations_by_kind={"sharing": 7}),
                "kube": result("kube", 40.0, 0, violations_by_kind={"sharing": 0}),
                "polsched": result("polsched", 50.0, 0, violations_by_kind={"sharing": 0},
                                   placement={"zone_skew": 2, "hostname_skew": 1}),
            }}},
    }


def test_ratios_against_kube_scheduler_and_the_ceiling() -> None:
    md = report.render(doc())
    assert "| polsched / kube-scheduler | polsched / ceiling |" in md
    throughput = next(line for line in md.splitlines() if line.startswith("| throughput"))
    assert throughput.endswith("| 1.25x | 0.50x |")


def test_initial_pods_setup_and_what_violations_count() -> None:
    md = report.render(doc())
    assert "## pod-anti-affinity: 50 nodes, 20 pods (after 10 initial pods)" in md
    assert "created first: Service bench-service" in md
    assert "`violations` counts measured pods that share their node." in md
    kinds = next(line for line in md.splitlines() if line.startswith("| violations by kind"))
    assert "sharing: 7" in kinds
    assert "| zone skew (final) | n/a | n/a | 2 | | |" in md


def test_start_to_ready_and_to_first_bind_are_separate_rows() -> None:
    d = doc()
    results = d["workloads"]["pod-anti-affinity"]["results"]
    for key, ready, first in (("noop", 0.8, 0.9), ("kube", 0.0, 0.4), ("polsched", 1.1, 1.3)):
        results[key].update(mode="backlog", startup_s=ready, first_bind_s=first)
    md = report.render(d)
    assert "| start to ready (s) | 0.8 | 0.0 | 1.1 | | |" in md
    assert "| start to first bind (s) | 0.9 | 0.4 | 1.3 | | |" in md
    # A stream run has no first-bind row: its warm-up pod's bind is the ready.
    for r in results.values():
        r["mode"] = "stream"
    assert "| start to first bind" not in report.render(d)


def test_reload_figures_split_the_latency_and_take_out_the_idle_wait() -> None:
    """bench/reload.py's summary of three reloads, rendered: the parts of the latency, and
    the latency less the time after the swap when no pod was queued to decide."""
    from bench import reload

    def rec(latency: float, wait: float, idle: float) -> dict[str, Any]:
        return {"generation": 2, "sent": 0.0, "answered": 0.0, "patch_s": 0.01,
                "decided": 1.0, "latency_s": latency, "wait_s": wait, "idle_s": idle}

    summary = reload.summary([rec(0.020, 0.005, 0.0), rec(0.150, 0.120, 0.100),
                              rec(0.030, 0.010, 0.004)], last_bind=2.0)
    assert summary["reloads_idle_after_swap"] == 2
    assert summary["latency_less_idle_ms"]["max"] == pytest.approx(50.0)
    assert summary["until_swapped_ms"]["max"] == pytest.approx(30.0)
    d = doc()
    d["workloads"]["pod-anti-affinity"]["results"]["polsched"]["reload"] = summary
    line = next(x for x in report.render(d).splitlines() if x.startswith("Hot reload"))
    assert "3/3 patches observed" in line
    assert "swapped in .. first decision" in line
    assert "In 2 reloads the policy had no pod queued" in line
    assert f"max {report._num(50.0)} ms." in line


def test_machine_cpu_adds_every_process_on_the_machine() -> None:
    """The scheduler's, the API server's, etcd's and the bench process's CPU, with the
    ratios of the throughput rows; how many cores they kept busy over the run."""
    d = doc()
    res = d["workloads"]["pod-anti-affinity"]["results"]
    for key, own, apiserver in (("noop", 1.0, 4.0), ("kube", 3.0, 5.0), ("polsched", 2.0, 5.0)):
        res[key].update(cpu_s=own, harness_cpu_s=0.5, duration_s=3.0,
                        others_cpu_s={"kube-apiserver": apiserver, "etcd": 0.5})
    md = report.render(d)
    assert "| machine CPU: all processes (s) | 6.0 | 9.0 | 8.0 | 0.89x | 1.33x |" in md
    assert "| etcd CPU (s) | 0.5 | 0.5 | 0.5 | | |" in md
    assert "| cores busy (machine CPU / duration) | 2.0 | 3.0 | 2.7 | | |" in md
    # Not metered (a control plane of someone else's): no figure rather than a wrong one.
    for r in res.values():
        del r["others_cpu_s"]
    assert "| machine CPU: all processes (s) | n/a | n/a | n/a |" in report.render(d)


def test_rounds_the_headline_is_the_median_run_and_a_failed_round_is_kept() -> None:
    """A workload run in several rounds: each scheduler's figures come from one real run,
    the one of median throughput; a round that did not end "ok" is the headline instead,
    so the others cannot hide it."""
    from bench import run

    runs = [result("polsched", tp, 0, cpu_s=cpu) for tp, cpu in ((30.0, 3.0), (50.0, 1.0),
                                                                  (40.0, 2.0))]
    assert run.headline(runs) is runs[2]  # 40 pods/s, with its own CPU figure
    assert run.headline(runs[:2]) is runs[0]  # an even count: the lower middle
    failed = {"scheduler": "polsched", "status": "incomplete", "throughput_pods_per_s": 90.0}
    assert run.headline([*runs, failed]) is failed


def test_rounds_line_gives_every_round_and_the_ratios_round_by_round() -> None:
    from bench import run

    d = doc()
    entry = d["workloads"]["pod-anti-affinity"]
    entry["rounds"] = {
        key: [run.round_summary(result(key, tp, 0)) for tp in tps]
        for key, tps in (("noop", (100.0, 80.0, 90.0)), ("kube", (40.0, 50.0, 45.0)),
                         ("polsched", (50.0, 45.0, 45.0)))}
    entry["rounds"]["kube"][2]["status"] = "error"
    line = next(x for x in report.render(d).splitlines() if x.startswith("Rounds: 3"))
    assert "polsched 50.0 / 45.0 / 45.0" in line
    assert "kube-scheduler 40.0 / 50.0 / n/a" in line
    assert "polsched / kube-scheduler by round: 1.25x / 0.90x / n/a." in line
    assert "polsched / ceiling by round: 0.50x / 0.56x / 0.50x." in line
    # One round only (every workload but the short ones): no such line.
    del entry["rounds"]
    assert "Rounds:" not in report.render(d)


def test_many_policies_ratio_round_by_round() -> None:
    from bench import many, run

    def entry(tps: tuple[float, ...]) -> dict[str, Any]:
        runs = [result("polsched", tp, 0) for tp in tps]
        return {"results": {"polsched": run.headline(runs)},
                "rounds": {"polsched": [run.round_summary(r) for r in runs]}}

    summary = many.summary({many.MANY: entry((80.0, 95.0, 90.0)),
                            many.SINGLE: entry((100.0, 100.0, 120.0))})
    assert summary is not None
    pol = summary["polsched"]
    assert pol["many_over_single"] == 0.9  # the median runs: 90 against 100
    assert pol["many_over_single_rounds"] == [0.8, 0.95, 0.75]
    assert "many/one by round" in "\n".join(many.render(summary))
    assert "polsched 0.8x / 0.95x / 0.75x" in "\n".join(many.render(summary))


def test_targets_say_met_or_by_how_much_missed() -> None:
    """The targets table: polsched / kube-scheduler on every workload, / ceiling only on the
    plain ones; many-policies, scale and reload as bullets, each met or missed."""
    d = doc()
    d["workloads"]["basic"] = {
        "nodes": 50, "pods": 20, "description": "plain", "results": {
            "noop": result("noop", 100.0, 0), "kube": result("kube", 60.0, 0),
            "polsched": result("polsched", 80.0, 0)}}
    d["workloads"]["scale"] = {
        "nodes": 50, "pods": 20, "description": "scale", "results": {
            "kube": result("kube", 10.0, 0, peak_rss_mb=700.0),
            "polsched": result("polsched", 20.0, 0, peak_rss_mb=450.0)}}
    d["workloads"]["hotreload"] = {
        "nodes": 50, "pods": 20, "description": "reload", "results": {
            "noop": result("noop", 10.0, 0, creation_bound=True),
            "kube": result("kube", 10.0, 0, creation_bound=True),
            "polsched": result("polsched", 10.0, 0, creation_bound=True, reload={
                "patches": 120, "observed": 120, "under_load": 118,
                "latency_ms": {"p50": 9.0, "p99": 130.0}})}}
    d["many_policies"] = {"policies": 50, "polsched": {
        "throughput_many": 95.0, "throughput_single": 100.0, "many_over_single": 0.95,
        "cpu_s_many": 2.0, "cpu_s_single": 1.9, "peak_rss_mb_many": 120.0,
        "peak_rss_mb_single": 100.0, "rss_mb_per_extra_policy": 0.4}}
    md = report.render(d)
    assert "| basic | 1.33x | met | 0.80x | **missed by 0.10** |" in md
    # Not a plain workload: no ceiling target.
    assert "| pod-anti-affinity | 1.25x | met | 0.50x |  |" in md
    assert "| hotreload | 1.00x * | paced | 1.00x * |  |" in md
    assert "| scale | 2.00x | met | n/a | not measured |" in md
    assert "50 policies against one 0.95x (>= 0.9x: met)" in md
    assert "RSS per extra policy 0.4 MB (< 2 MB: met)" in md
    assert "peak RSS polsched 450.0 MB, kube-scheduler 700.0 MB" in md
    assert "20 of 20 pods bound exactly once (met)" in md
    assert "p99 130.0 ms (< 100 ms: **missed by 30.00**)" in md
    # The targets come before the workloads' own tables.
    assert md.index("## The targets in this run") < md.index("## pod-anti-affinity")
