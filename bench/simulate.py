#!/usr/bin/env python3
"""How long `polsched simulate` takes on a large cluster (issue 14: 10k pods on 5000 nodes
in under a minute).

  .venv/bin/python bench/simulate.py                 # large: 5000 nodes, 10 000 pods
  .venv/bin/python bench/simulate.py --workload basic --keep /tmp/snap.json

Writes a snapshot file of the workload's nodes (bench/workloads.py), its namespace, the
applied policy and every pod pending, then runs the real command,
`polsched simulate -f candidate --snapshot FILE -o json`, in a child process, against the
applied policy as baseline (so each pod is decided twice), and reports the wall time of
the whole command (reading the file included), its CPU time (what a shared machine
disturbs least) and its own figures. The candidate doubles
one scorer's weight, so the comparison has something to find.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT, ROOT / "operator"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from bench import workloads as wl  # noqa: E402
from bench.schedulers import polsched_policy  # noqa: E402
from polsched.commands import snapshot  # noqa: E402

SCHEDULER_NAME = "polsched-bench"


def objects(workload: wl.Workload) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The cluster's objects and the candidate policy."""
    out: list[dict[str, Any]] = []
    for i in range(workload.nodes):
        out.append({"apiVersion": "v1", "kind": "Node", **workload.node(i)})
    out.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": wl.NAMESPACE, "labels": {"kubernetes.io/metadata.name": wl.NAMESPACE}}})
    # What the bench creates before the pods (a gang workload's PodGroups, a Service).
    out += [obj for _path, obj in workload.extra_objects()]
    applied = polsched_policy(workload, None)
    applied["spec"]["schedulerName"] = SCHEDULER_NAME
    out.append(applied)
    for i in range(workload.pods):
        p = workload.pod(i, "polsched", SCHEDULER_NAME)
        p.setdefault("apiVersion", "v1")
        p.setdefault("kind", "Pod")
        p["metadata"]["uid"] = f"uid-{i:06d}"
        p["metadata"]["creationTimestamp"] = f"2026-01-01T{i // 3600 % 24:02d}:" \
                                             f"{i // 60 % 60:02d}:{i % 60:02d}Z"
        out.append(p)
    candidate = json.loads(json.dumps(applied))
    spec = candidate["spec"]
    scorers = spec.setdefault("scorers", [])
    scorers.append({"name": "NodeResourcesBalancedAllocation", "weight": 3})
    return out, candidate


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="large", choices=sorted(wl.WORKLOADS))
    ap.add_argument("--keep", metavar="FILE", help="write the snapshot there and keep it")
    args = ap.parse_args()
    workload = wl.WORKLOADS[args.workload]
    objs, candidate = objects(workload)
    with tempfile.TemporaryDirectory() as tmp:
        snap = Path(args.keep or Path(tmp) / "snapshot.json")
        snap.write_text(snapshot.dump(snapshot.as_list(objs), "json"))
        cand = Path(tmp) / "candidate.json"
        cand.write_text(json.dumps(candidate))
        cmd = [sys.executable, "-m", "polsched.commands.cli", "simulate", "-f", str(cand),
               "--snapshot", str(snap), "-o", "json"]
        t0 = time.perf_counter()
        cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        p = subprocess.run(cmd, capture_output=True, text=True, check=False)
        wall = time.perf_counter() - t0
        cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    if p.returncode != 0:
        print(p.stderr, file=sys.stderr)
        return 1
    summary = json.loads(p.stdout)["summary"]
    print(json.dumps({"workload": workload.name, "nodes": workload.nodes,
                      "pods": workload.pods, "wall_s": round(wall, 2),
                      "cpu_s": round(cpu, 2),
                      "decisions": summary["pods"] * 2, "summary": summary}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
