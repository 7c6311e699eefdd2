#!/usr/bin/env python3
"""Offline memory of polsched at the `scale` workload's size: the RSS of a ClusterCache
holding its nodes and every pod, placed the engine's way (no API server).

  .venv/bin/python bench/scale_rss.py                 # 15000 nodes, 30000 pods
  .venv/bin/python bench/scale_rss.py --scale 0.1

As bench/micro.py: nodes from bench/workloads.py fed as watch events, then each pod's
ADDED event, the decision of the pipeline build_pipeline builds for the workload's
policy, assume, and the MODIFIED event of the bind. Pod objects are made one at a time
(the bench's own list of 30 000 pods would otherwise count), so the figures are what the
scheduler holds: the cache, its snapshot and index, the plugins' memos. Prints VmRSS
after start-up, after the nodes and after the pods, VmHWM (the peak), and the decision
CPU time.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT, ROOT / "operator"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from bench import workloads as wl  # noqa: E402
from bench.micro import SCHEDULER_NAME, run_sync  # noqa: E402
from bench.schedulers import polsched_policy  # noqa: E402
from polsched.api import load_policy  # noqa: E402
from polsched.cluster.cache import ClusterCache  # noqa: E402
from polsched.plugins import CATALOG  # noqa: E402
from polsched.scheduler.algorithm import schedule_pod  # noqa: E402
from polsched.scheduler.pipelines import build_pipeline  # noqa: E402


def status_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload", default="scale")
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--decide", type=int, default=None, metavar="N",
                    help="decide only the first N pods with the pipeline and place the "
                         "others round-robin, as bound pods (the whole run decides "
                         "30 000 pods at 15 000 nodes: too long on a loaded machine)")
    args = ap.parse_args()
    workload = wl.WORKLOADS[args.workload].scaled(args.scale)
    out: dict[str, object] = {"workload": workload.name, "nodes": workload.nodes,
                              "pods": workload.pods, "rss_start_mb": status_mb("VmRSS")}
    cache = ClusterCache(None)
    for i in range(workload.nodes):
        n = workload.node(i)
        n["metadata"]["resourceVersion"] = str(i + 1)
        cache.on_node_event("ADDED", n)
    gc.collect()
    out["rss_nodes_mb"] = status_mb("VmRSS")
    policy_obj = polsched_policy(workload, None)
    policy_obj["metadata"]["generation"] = 1
    policy_obj["spec"]["schedulerName"] = SCHEDULER_NAME
    pipeline = build_pipeline(load_policy(policy_obj, CATALOG))
    pipeline.rng = random.Random(7)
    snapshot = cache.snapshot
    decide = 0.0
    unscheduled = decided = 0
    for i in range(workload.pods):
        obj = workload.pod(i, "polsched", SCHEDULER_NAME)
        meta = obj["metadata"]
        meta.update(uid=f"uid-{i:06d}", resourceVersion=str(100000 + i),
                    creationTimestamp="2026-01-01T00:00:00Z")
        obj["spec"].setdefault("tolerations", []).extend(
            {"key": f"node.kubernetes.io/{k}", "operator": "Exists", "effect": "NoExecute",
             "tolerationSeconds": 300} for k in ("not-ready", "unreachable"))
        cache.on_pod_event("ADDED", obj)
        pod = cache.pods[f"{meta['namespace']}/{meta['name']}"]
        if args.decide is None or i < args.decide:
            t0 = time.process_time()
            result = run_sync(schedule_pod(pipeline, pod, snapshot))
            decide += time.process_time() - t0
            node = result.node
            decided += 1
        else:
            node = snapshot.nodes[i % len(snapshot.nodes)].name
        if node is None:
            unscheduled += 1
            continue
        cache.assume(pod, node)
        cache.on_pod_event("MODIFIED", {
            **obj, "spec": {**obj["spec"], "nodeName": node},
            "metadata": {**meta, "resourceVersion": str(600000 + i)}})
    gc.collect()
    out.update(rss_pods_mb=status_mb("VmRSS"), peak_rss_mb=status_mb("VmHWM"),
               decided=decided, decide_cpu_s=round(decide, 2), unscheduled=unscheduled,
               pods_in_cache=len(cache.pods))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
