#!/usr/bin/env python3
"""The extender workload in-process: bench/micro.py's cluster and pods for `extender`, its
policy's pipeline (build_pipeline) with an HTTPExtender calling bench/extender.py over
127.0.0.1, one pod at a time as the engine does. Prints the CPU per pod of this process
(decision + extender client) and of the extender server, and the placements digest
(bench/micro.py's, with its seeded tie-breaks: a change that keeps decisions keeps it).

  .venv/bin/python bench/extender_micro.py [--pods N] [--profile TOP]

micro.py itself refuses the extender workload (it drives pipelines without a loop).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import hashlib
import io
import json
import os
import pstats
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import bench.micro as micro  # noqa: E402
import bench.workloads as wl  # noqa: E402
from bench.schedulers import polsched_policy  # noqa: E402
from polsched.api import load_policy  # noqa: E402
from polsched.extender import HTTPExtender  # noqa: E402
from polsched.plugins import CATALOG  # noqa: E402
from polsched.scheduler.algorithm import schedule_pod  # noqa: E402
from polsched.scheduler.pipelines import build_pipeline  # noqa: E402


def process_cpu(pid: int) -> float:
    """utime + stime of another process, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def decide_all(pods: list[dict[str, Any]], port: int) -> tuple[str, int]:
    w = wl.WORKLOADS["extender"]
    cache, _, _ = micro.build(w)
    obj = polsched_policy(w, f"http://127.0.0.1:{port}/")
    obj["metadata"]["generation"] = 1
    obj["spec"]["schedulerName"] = micro.SCHEDULER_NAME
    policy = load_policy(obj, CATALOG)
    extenders = [HTTPExtender(c) for c in policy.extenders]
    pipeline = build_pipeline(policy, extenders=extenders)
    pipeline.rng = random.Random(7)  # micro.py's seed: comparable digests
    snapshot = cache.snapshot
    digest = hashlib.sha256()
    unscheduled = 0
    try:
        for p in pods:
            cache.on_pod_event("ADDED", p)
            pod = cache.pods[f"{p['metadata']['namespace']}/{p['metadata']['name']}"]
            node = (await schedule_pod(pipeline, pod, snapshot)).node
            if node is None:
                unscheduled += 1
                digest.update(b"-\n")
                continue
            digest.update(node.encode() + b"\n")
            cache.assume(pod, node)
            meta = p["metadata"]
            cache.on_pod_event("MODIFIED", {
                **p, "spec": {**p["spec"], "nodeName": node},
                "metadata": {**meta, "resourceVersion": str(int(meta["resourceVersion"])
                                                            + 500000)}})
    finally:
        for e in extenders:
            await e.close()
    return digest.hexdigest()[:16], unscheduled


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pods", type=int, default=2000)
    ap.add_argument("--profile", type=int, default=0, metavar="TOP",
                    help="cProfile (CPU time) the run, print the top TOP by own time")
    args = ap.parse_args()
    server = subprocess.Popen([sys.executable, str(ROOT / "bench" / "extender.py")],
                              stdout=subprocess.PIPE)
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline().split()[1])
        _, _, pods = micro.build(wl.WORKLOADS["extender"])
        pods = pods[:args.pods]
        prof = cProfile.Profile(time.process_time) if args.profile else None
        s0, c0 = process_cpu(server.pid), time.process_time()
        if prof is not None:
            prof.enable()
        placements, unscheduled = asyncio.run(decide_all(pods, port))
        if prof is not None:
            prof.disable()
        c1, s1 = time.process_time(), process_cpu(server.pid)
        n = len(pods)
        print(json.dumps({
            "workload": "extender", "pods": n, "unscheduled": unscheduled,
            "client_cpu_ms_per_pod": round(1000 * (c1 - c0) / n, 3),
            "server_cpu_ms_per_pod": round(1000 * (s1 - s0) / n, 3),
            "placements": placements}), flush=True)
        if prof is not None:
            out = io.StringIO()
            pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(args.profile)
            print(out.getvalue())
    finally:
        server.terminate()
        server.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
