"""`make chaos`: issue 11's chaos suite against a local control plane.

    python -m tests.chaos.run [--short] [--only sigkill,failover,...]

Starts a private control plane with hack/cluster.sh (or uses POLSCHED_KUBECONFIG's, whose
directory must be cluster.sh's, since the API server is killed and restarted), runs each
scenario with `polsched run` processes as the operator's ServiceAccount, and prints one
line per scenario with its figures and the invariants' counts, then a summary line:

    chaos: pods=N lost=0 double-bound=0 overcommitted=0 takeover=Xs
           throughput-ratio=R (a policy's throughput while another's bind extender
           hangs, over its throughput when healthy)
           pace-ratio=P (a victim policy's drain pace while another's filter extender
           times out, over its solo pace in the same run; below
           scenarios.MIN_PACE_RATIO it fails the slow-extender scenario)

Exits 1 when any invariant fails (the details follow the scenario's line).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

from tests.chaos.invariants import Findings
from tests.chaos.scenarios import SCENARIOS
from tests.chaos.world import ControlPlane, Scenario, World
from tests.conftest import HACK, Cluster, install_crds
from tests.e2e.operators import Harness


def start_cluster(directory: Path) -> Cluster:
    bin_dir = Path(subprocess.run([str(HACK / "build.sh")], check=True, capture_output=True,
                                  text=True).stdout.strip())
    up = subprocess.run([str(HACK / "cluster.sh"), "up", str(directory)], capture_output=True,
                        text=True)
    if up.returncode != 0:
        raise SystemExit(f"chaos: the control plane did not start:\n{up.stderr}")
    c = Cluster(str(directory / "kubeconfig"), bin_dir)
    install_crds(c)
    return c


# How much of each process's log a failed scenario prints (CI keeps only stdout).
LOG_TAIL_LINES = 40


def show_logs(made: list[Scenario]) -> None:
    """The logs of a failed scenario's processes: the last LOG_TAIL_LINES lines of each
    on stdout, and each whole in $CHAOS_LOG_DIR/<run>-<process>.log when that is set
    (the work directory is removed at the end)."""
    keep = os.environ.get("CHAOS_LOG_DIR")
    for s in made:
        for who, text in s.logs.items():
            if keep:
                Path(keep).mkdir(parents=True, exist_ok=True)
                (Path(keep) / f"{s.run}-{who}.log").write_text(text)
            lines = text.splitlines()
            print(f"  --- {s.run} {who}: last {min(len(lines), LOG_TAIL_LINES)} of "
                  f"{len(lines)} log lines", flush=True)
            for line in lines[-LOG_TAIL_LINES:]:
                print(f"  | {line}", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="make chaos")
    ap.add_argument("--short", action="store_true",
                    help="fewer pods and one outage: the version .ci/run runs")
    ap.add_argument("--only", default="", help="comma-separated scenario names")
    args = ap.parse_args(argv)
    # SIGTERM (make interrupted, CI timeout) runs the clean-up below: processes stopped,
    # the control plane taken down.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    # The suite's own API client (the recorder) rides out the outages it causes quietly.
    logging.getLogger("polsched").setLevel(logging.ERROR)
    only = {x for x in args.only.split(",") if x}
    started = time.monotonic()
    reuse = os.environ.get("POLSCHED_KUBECONFIG")
    tmp = tempfile.TemporaryDirectory(prefix="polsched-chaos-")
    directory = Path(reuse).parent if reuse else Path(tmp.name)
    world: World | None = None
    try:
        if reuse:
            bin_dir = Path(subprocess.run([str(HACK / "build.sh")], check=True,
                                          capture_output=True, text=True).stdout.strip())
            cluster = Cluster(reuse, bin_dir)
            install_crds(cluster)
        else:
            cluster = start_cluster(directory)
        workdir = Path(tmp.name) / "work"
        workdir.mkdir(exist_ok=True)
        world = World(cluster, Harness(cluster, workdir), ControlPlane(cluster, directory),
                      args.short, workdir)
        total = Findings()
        takeovers: list[float] = []
        ratios: list[float] = []
        paces: list[float] = []
        failed: list[str] = []
        for name, scenario in SCENARIOS:
            if only and name not in only:
                continue
            t0 = time.monotonic()
            first = len(world.made)
            try:
                findings, figures = scenario(world)
            except Exception as e:
                failed.append(name)
                for proc in world.harness.procs:  # what the scenario left running
                    proc.stop()
                print(f"{name:20s} ERROR {type(e).__name__}: {e}", flush=True)
                traceback.print_exc()
                continue
            took = time.monotonic() - t0
            total.merge(findings)
            if figures.get("takeover_s") is not None:
                takeovers.append(float(figures["takeover_s"]))
            if figures.get("throughput_ratio") is not None:
                ratios.append(float(figures["throughput_ratio"]))
            if figures.get("pace_ratio") is not None:
                paces.append(float(figures["pace_ratio"]))
            verdict = "ok" if findings.ok else "FAIL"
            extra = " ".join(f"{k}={v}" for k, v in figures.items())
            print(f"{name:20s} {verdict:4s} {findings.line()} {extra} ({took:.0f}s)",
                  flush=True)
            for line in findings.details():
                print(line, flush=True)
            if not findings.ok:
                failed.append(name)
                show_logs(world.made[first:])
        takeover = f"{max(takeovers):.1f}s" if takeovers else "-"
        ratio = f"{min(ratios):.2f}" if ratios else "-"
        pace = f"{min(paces):.2f}" if paces else "-"
        print(f"chaos: pods={total.pods} lost={len(total.lost)} "
              f"double-bound={len(total.double_bound)} "
              f"overcommitted={len(total.overcommitted)} takeover={takeover} "
              f"throughput-ratio={ratio} pace-ratio={pace} failed={len(failed)} "
              f"({time.monotonic() - started:.0f}s)", flush=True)
        return 1 if failed else 0
    finally:
        if world is not None:  # interrupted: stop the operators a scenario left running
            for proc in world.harness.procs:
                proc.stop()
        if not reuse:
            subprocess.run([str(HACK / "cluster.sh"), "down", str(directory)],
                           capture_output=True)
        tmp.cleanup()


if __name__ == "__main__":
    sys.exit(main())
