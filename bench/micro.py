#!/usr/bin/env python3
"""Offline micro-benchmark of polsched's scheduling decision: no API server, no network.

  .venv/bin/python bench/micro.py                       # basic, large, labels, affinity
  .venv/bin/python bench/micro.py --workloads basic --plugins
  .venv/bin/python bench/micro.py --workloads basic --profile 30   # cProfile, top 30
  .venv/bin/python bench/micro.py --workloads preemption --preemptors 10   # + preemptions

The cluster is built exactly as the engine holds it: a real ClusterCache fed the bench's
node objects (bench/workloads.py: capacity, zone/tier/priority labels, every 20th node
tainted) as watch events. Each pod then goes the engine's way (scheduler/schedule_one.py
ScheduleOne.schedule_one, minus the API): its ADDED event into the cache (PodInfo
construction), schedule_pod on the pipeline that
`polsched.scheduler.pipelines.build_pipeline` builds for the workload's policy decides,
the cache assumes the pod on the chosen node, and the MODIFIED event that
the watch would deliver after the bind confirms it. So every decision sees the pods
placed before it, as in the live engine.

The `shadow` workload (not run by default: `--workloads basic,shadow`) adds the
engine's ShadowSet with the bench's shadow policy: before each decision the shadow decides
on the same snapshot within its time budget (scheduler/shadow.py), and its verdict is
compared once the pod is placed; `total pods/s` against basic's is what a shadow costs
the live policy, `shadow` its agreement counts (decided and skipped).

Reported per workload, all from CPU time of this process (time.process_time), which
other work on a shared machine disturbs far less than wall time:
  decide pods/s   pods / CPU time spent in Pipeline.schedule (the pure decision);
  cache  pods/s   pods / CPU time spent in the cache's events and assume;
  total  pods/s   pods / CPU time of the whole loop;
  placements      a digest of the chosen nodes. The pipeline's tie-break RNG is seeded, so
                  an optimisation that keeps behaviour identical keeps the digest.
With --plugins, a second (instrumented, so slower) pass times each plugin's extension
points; its shares, not its absolute numbers, are the point.

Single-threaded and deterministic apart from the clock; wall_s is reported too, to show
how much the machine was shared.
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import io
import json
import pstats
import random
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT, ROOT / "operator"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from bench import workloads as wl  # noqa: E402
from bench.schedulers import polsched_policy  # noqa: E402
from polsched.api import load_policy  # noqa: E402
from polsched.cluster import featuregates  # noqa: E402
from polsched.cluster.cache import ClusterCache  # noqa: E402
from polsched.framework.budget import new_budget  # noqa: E402
from polsched.framework.interfaces import Handle  # noqa: E402
from polsched.framework.nominator import Nominator  # noqa: E402
from polsched.framework.runtime import Pipeline  # noqa: E402
from polsched.plugins import CATALOG  # noqa: E402
from polsched.scheduler.algorithm import SearchLimits, schedule_pod  # noqa: E402
from polsched.scheduler.batch import new_batch  # noqa: E402
from polsched.scheduler.pipelines import build_pipeline  # noqa: E402

SCHEDULER_NAME = "polsched-bench"
DEFAULT_WORKLOADS = ("basic", "large", "labels", "affinity")


_R = TypeVar("_R")


def run_sync(coro: Coroutine[Any, Any, _R]) -> _R:
    """Drive a coroutine that never awaits (a pipeline without extenders) to its result,
    without an event loop's overhead."""
    try:
        coro.send(None)
    except StopIteration as stop:
        result: _R = stop.value
        return result
    coro.close()
    raise RuntimeError("the pipeline awaited: micro.py runs pipelines without extenders")


def build(workload: wl.Workload) -> tuple[ClusterCache, Pipeline, list[dict[str, Any]]]:
    from polsched.framework import listers as ls

    cache = ClusterCache(None)
    for i in range(workload.nodes):
        n = workload.node(i)
        n["metadata"]["resourceVersion"] = str(i + 1)
        cache.on_node_event("ADDED", n)
    for ns in (wl.NAMESPACE, wl.OTHER_NAMESPACE):
        cache.on_object_event(ls.NAMESPACE, "ADDED", {"metadata": {"name": ns, "labels": {
            "kubernetes.io/metadata.name": ns}}})
    kinds = {k.path.rsplit("/", 1)[-1]: k for k in ls.KINDS}
    for k, (path, obj) in enumerate(workload.extra_objects()):
        kind = kinds.get(path.rsplit("/", 1)[-1])
        if kind is None:  # not a kind the scheduler reads (a ResourceClaimTemplate)
            continue
        obj = {**obj, "metadata": {**obj["metadata"], "uid": f"extra-{k}",
                                   "resourceVersion": str(50000 + k)}}
        cache.on_object_event(kind, "ADDED", obj)
    if isinstance(workload, wl.DynamicResources):  # allocated before the scheduler starts
        for k, c in enumerate(workload.init_claims()):
            c["metadata"].update(uid=f"init-claim-{k:06d}", resourceVersion=str(40000 + k))
            cache.on_object_event(ls.RESOURCE_CLAIM, "ADDED", c)
    # scheduler_perf's unmeasured initial pods, bound before the scheduler starts
    for k, p in enumerate(workload.init_pods(SCHEDULER_NAME)):
        p["metadata"].update(uid=f"init-{k:06d}", resourceVersion=str(60000 + k),
                             creationTimestamp="2026-01-01T00:00:00Z")
        cache.on_pod_event("ADDED", p)
    policy_obj = polsched_policy(workload, None)
    policy_obj["metadata"]["generation"] = 1
    policy_obj["spec"]["schedulerName"] = SCHEDULER_NAME
    # The engine's handle: plugins read the cache's listers (the DRA objects, Services).
    # The engine's feature gates (POLSCHED_FEATURE_GATES over v1.37's defaults:
    # OpportunisticBatching on unless turned off).
    # --preemptors: the engine's nominator, and DefaultPreemption's candidate offset drawn
    # from a seeded rng of its own (the pipeline's tie-break rng is set below).
    preempting = isinstance(workload, wl.Preemption) and PREEMPTORS[0] > 0
    pipeline = build_pipeline(load_policy(policy_obj, CATALOG), Handle(
        listers=cache.listers, features=featuregates.scheduler_features(),
        nominator=Nominator() if preempting else None),
        rng=random.Random(11) if preempting else None)
    pipeline.rng = random.Random(7)  # a fixed tie-break sequence: comparable digests
    pods = []
    for i in range(workload.pods):
        p = workload.pod(i, "polsched", SCHEDULER_NAME)
        meta = p["metadata"]
        meta["uid"] = f"uid-{i:06d}"
        meta["resourceVersion"] = str(100000 + i)
        meta["creationTimestamp"] = "2026-01-01T00:00:00Z"
        # What the API server's DefaultTolerationSeconds admission adds to every pod.
        p["spec"].setdefault("tolerations", []).extend(
            {"key": f"node.kubernetes.io/{k}", "operator": "Exists", "effect": "NoExecute",
             "tolerationSeconds": 300} for k in ("not-ready", "unreachable"))
        if isinstance(workload, wl.DynamicResources) and workload.template_claims:
            # What the resourceclaim controller does before the pod can be tried: the claim
            # from the template, owned by the pod, named in the pod's status.
            claim = workload.generated_claim(p)
            claim["metadata"].update(uid=f"claim-{i:06d}", resourceVersion=str(70000 + i))
            cache.on_object_event(ls.RESOURCE_CLAIM, "ADDED", claim)
            p["status"] = {"resourceClaimStatuses": [{
                "name": wl.DRA_POD_CLAIM, "resourceClaimName": claim["metadata"]["name"]}]}
        pods.append(p)
    return cache, pipeline, pods


def write_allocations(cache: ClusterCache, pod: Any, node: str, result: Any) -> bytes:
    """What the engine's PreBind writes and its watch then delivers: each claim the pod's
    DynamicResources Filter allocated on `node` gets status.allocation and the pod in
    reservedFor (a MODIFIED event). Returns the devices, for the placement digest."""
    from polsched.framework import listers as ls

    state = result.state.get("PreFilterDynamicResources") if result.state else None
    if state is None or not state.to_allocate:
        return b""
    out = []
    for i, alloc in zip(state.to_allocate, state.by_node[node], strict=True):
        raw = state.claims[i].raw
        meta = raw["metadata"]
        if "resourceVersion" in meta:
            meta = {**meta, "resourceVersion": str(int(meta["resourceVersion"]) + 1_000_000)}
        else:  # DRA-backed extended resources: the claim PreBind creates, owned by the pod
            meta = {**meta, "name": f"{pod.name}-extended-resources-x",
                    "namespace": pod.namespace, "uid": f"ext-{pod.uid}",
                    "resourceVersion": "1", "ownerReferences": [
                        {"apiVersion": "v1", "kind": "Pod", "name": pod.name,
                         "uid": pod.uid, "controller": True}]}
        updated = {**raw, "metadata": meta,
                   "status": {"allocation": alloc, "reservedFor": [
                       {"resource": "pods", "name": pod.name, "uid": pod.uid}]}}
        cache.on_object_event(ls.RESOURCE_CLAIM, "MODIFIED", updated)
        out += [f"{r['pool']}/{r['device']}" for r in alloc["devices"]["results"]]
    return (" " + " ".join(out)).encode()


def run_workload(workload: wl.Workload) -> dict[str, Any]:
    cache, pipeline, pods = build(workload)
    snapshot = cache.snapshot
    shadows = shadow_set(workload)
    dra = workload.dra
    # CPU time, not wall time: the machine is shared, and a decision never waits.
    clock, wallclock = time.process_time, time.perf_counter
    decide = cache_t = shadow_t = 0.0
    verdicts: Any = None
    digest = hashlib.sha256()
    unscheduled = 0
    cpu0 = clock()
    wall0 = wallclock()
    # As the engine (Profile.batch_for): a batch when the gate is on and the pipeline signs
    # pods; each pod is the next scheduling cycle.
    batch = new_batch(pipeline, "bench")
    preemption = workload if isinstance(workload, wl.Preemption) else None
    every = PREEMPTORS[0] if preemption is not None else 0
    preempt_t, preemptions = 0.0, 0
    for cycle, obj in enumerate(pods, 1):
        if preemption is not None and every and cycle % every == 0:
            t = clock()
            preemptions += preempt_one(preemption, cache, pipeline, preemptions, digest)
            preempt_t += clock() - t
        t0 = clock()
        cache.on_pod_event("ADDED", obj)
        pod = cache.pods[f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"]
        t1 = clock()
        if shadows is not None:  # as the engine: the shadows first, on the same snapshot
            verdicts = run_sync(shadows.decide(pod, snapshot))
            ts = clock()
            shadow_t += ts - t1
        else:
            ts = t1
        result = run_sync(schedule_pod(pipeline, pod, snapshot,
                                       limits=SearchLimits(new_budget(ATTEMPT_BUDGET[0]),
                                                           batch=batch, cycle=cycle)))
        t2 = clock()
        node = result.node
        if node is None:
            unscheduled += 1
            digest.update(b"-\n")
            cache_t += t1 - t0
            decide += t2 - ts
            continue
        devices = write_allocations(cache, pod, node, result) if dra else b""
        digest.update(node.encode() + devices + b"\n")
        cache.assume(pod, node)
        if shadows is not None:
            shadows.assumed(pod, verdicts)
            shadows.bind_ended(pod, node, "")
        bound = {**obj, "spec": {**obj["spec"], "nodeName": node},
                 "metadata": {**obj["metadata"],
                              "resourceVersion": str(int(obj["metadata"]["resourceVersion"])
                                                     + 500000)}}
        cache.on_pod_event("MODIFIED", bound)
        t3 = clock()
        cache_t += (t1 - t0) + (t3 - t2)
        decide += t2 - ts
    wall = wallclock() - wall0
    cpu_s = clock() - cpu0
    n = workload.pods
    return {
        "workload": workload.name, "nodes": workload.nodes, "pods": n,
        "decide_pods_per_s": round(n / decide, 1),
        "cache_pods_per_s": round(n / cache_t, 1),
        "total_pods_per_s": round(n / cpu_s, 1),
        "decide_ms_per_pod": round(decide / n * 1000, 3),
        "cpu_s": round(cpu_s, 3), "wall_s": round(wall, 3),
        "unscheduled": unscheduled,
        "batched": batch.batched_pods if batch is not None else 0,
        "placements": digest.hexdigest()[:16],
        **({} if not every else {
            "preemptions": preemptions,
            "preempt_ms_per_preemptor": round(preempt_t / max(1, preemptions) * 1000, 3)}),
        **({} if shadows is None else {
            "shadow_cpu_s": round(shadow_t, 3),
            "wall_pods_per_s": round(n / wall, 1),
            "shadow": {k: v for s in shadows.shadows.values()
                       for k, v in s.stats.to_status().items() if k != "lastDisagreements"}}),
    }


def preempt_one(workload: wl.Preemption, cache: ClusterCache, pipeline: Pipeline, k: int,
                digest: Any) -> int:
    """One preemptor the engine's way (--preemptors): its first attempt fails on every
    (full) node and DefaultPreemption's PostFilter nominates a node and names victims; the
    nominator records the nomination, the victims' deletions arrive as watch events, and
    the second attempt places the preemptor (on the nominated node, its victims gone).
    Both attempts and the victims' removal are timed (CPU); the nomination, the victims
    and the placement go into the digest. Returns 1 when a node was nominated."""
    obj = workload.high_pod(k, SCHEDULER_NAME)
    meta = obj["metadata"]
    meta.update(uid=f"high-{k:06d}", resourceVersion=str(900000 + k),
                creationTimestamp="2026-01-01T00:00:00Z")
    obj["spec"]["priority"] = 9999999  # what the Priority admission plugin resolves
    cache.on_pod_event("ADDED", obj)
    pod = cache.pods[f"{meta['namespace']}/{meta['name']}"]
    snapshot = cache.snapshot
    nominator = pipeline.nominator
    assert nominator is not None
    result = run_sync(schedule_pod(pipeline, pod, snapshot,
                                   limits=SearchLimits(new_budget(ATTEMPT_BUDGET[0]))))
    post = result.post_filter
    if result.node is None and (post is None or not post.nominated_node):
        digest.update(b"preempt -\n")
        cache.on_pod_event("DELETED", obj)
        return 0
    node = result.node
    if node is None:
        assert post is not None and post.nominated_node
        digest.update(f"preempt {post.nominated_node} ".encode()
                      + " ".join(v.key for v in post.victims).encode() + b"\n")
        nominator.add(pod, post.nominated_node)
        for v in post.victims:
            cache.on_pod_event("DELETED", v.raw)
        result = run_sync(schedule_pod(pipeline, pod, cache.snapshot,
                                       limits=SearchLimits(new_budget(ATTEMPT_BUDGET[0]))))
        nominator.remove(pod.key)
        node = result.node
    digest.update(f"high {node}\n".encode())
    if node is not None:
        cache.assume(pod, node)
        cache.on_pod_event("MODIFIED", {**obj, "spec": {**obj["spec"], "nodeName": node},
                                        "metadata": {**meta, "resourceVersion": str(
                                            950000 + k)}})
    return 1


def shadow_set(workload: wl.Workload) -> Any:
    """The engine's ShadowSet with the bench's shadow policy, for a `shadow` workload."""
    if not workload.shadow:
        return None
    from polsched.scheduler.shadow import Shadow, ShadowSet

    shadows = ShadowSet()
    obj = {"apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
           "metadata": {"name": "bench-shadow", "generation": 1},
           "spec": {"shadowOf": "bench-polsched", **wl.shadow_spec()}}
    shadows.shadows["bench-shadow"] = Shadow(load_policy(obj, CATALOG), "bench-polsched")
    return shadows


_POINTS = ("pre_filter", "filter", "pre_score", "score_nodes", "normalize_score")


def plugin_times(workload: wl.Workload) -> dict[str, float]:
    """Seconds per plugin.extension point over the workload (instrumented pass)."""
    cache, pipeline, pods = build(workload)
    times: dict[str, float] = defaultdict(float)
    clock = time.perf_counter
    wrapped: set[int] = set()

    def wrap(label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any) -> Any:
            t = clock()
            try:
                return fn(*args)
            finally:
                times[label] += clock() - t
        return timed

    entries: list[tuple[str, Any]] = [(e.name, e.plugin) for e in pipeline.filters]
    entries += [(e.name, e.plugin) for e in pipeline.scorers]
    for entry_name, plugin in entries:
        if id(plugin) in wrapped:
            continue
        wrapped.add(id(plugin))
        for point in _POINTS:
            fn = getattr(plugin, point, None)
            if fn is None or getattr(type(plugin), point, None) is None:
                continue
            setattr(plugin, point, wrap(f"{entry_name}.{point}", fn))
    snapshot = cache.snapshot
    t_all = 0.0
    for obj in pods:
        cache.on_pod_event("ADDED", obj)
        pod = cache.pods[f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"]
        t = clock()
        result = run_sync(schedule_pod(pipeline, pod, snapshot,
                                       limits=SearchLimits(new_budget(ATTEMPT_BUDGET[0]))))
        t_all += clock() - t
        if result.node is not None:
            if workload.dra:
                write_allocations(cache, pod, result.node, result)
            cache.assume(pod, result.node)
            cache.on_pod_event("MODIFIED", {**obj, "spec": {**obj["spec"],
                                                             "nodeName": result.node}})
    times["(whole schedule, instrumented)"] = t_all
    return dict(sorted(times.items(), key=lambda kv: -kv[1]))


def profile(workload: wl.Workload, top: int) -> str:
    prof = cProfile.Profile()
    prof.enable()
    run_workload(workload)
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


# --attempt-budget: each decision runs under the engine's time budget (framework.budget),
# as ScheduleOne runs it; 0 (the default here): none, to measure what the checks cost.
ATTEMPT_BUDGET: list[float] = [0.0]
# --preemptors N: on the preemption workload, a preemptor before every Nth measured pod
# (0: none, the measured pods only).
PREEMPTORS: list[int] = [0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", default=",".join(DEFAULT_WORKLOADS),
                    help=f"comma-separated, of {', '.join(wl.WORKLOADS)} (default: %(default)s)")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply nodes and pods")
    ap.add_argument("--repeat", type=int, default=1,
                    help="run each workload this many times, report the fastest")
    ap.add_argument("--plugins", action="store_true", help="also time each plugin")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="cProfile each workload, print the top N functions by own time")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--attempt-budget", type=float, default=0.0, metavar="SECONDS",
                    help="decide under the engine's per-attempt time budget (the operator's "
                         "default is 1); 0: no budget (default)")
    ap.add_argument("--preemptors", type=int, default=0, metavar="N",
                    help="preemption workload: a high-priority pod that must preempt before "
                         "every Nth measured pod, timed apart (preempt_ms_per_preemptor); "
                         "0: none (default)")
    args = ap.parse_args()
    ATTEMPT_BUDGET[0] = args.attempt_budget
    PREEMPTORS[0] = args.preemptors
    results = []
    for name in args.workloads.split(","):
        w = wl.WORKLOADS[name]
        if w.extender:
            raise SystemExit("micro.py runs no extenders: the extender workload needs HTTP")
        if args.scale != 1.0:
            w = w.scaled(args.scale)
        if args.profile:
            print(f"== cProfile {w.name} ({w.nodes} nodes, {w.pods} pods)")
            print(profile(w, args.profile))
            continue
        best = max((run_workload(w) for _ in range(max(1, args.repeat))),
                   key=lambda r: r["decide_pods_per_s"])
        print(json.dumps(best), flush=True)
        if args.plugins:
            pt = plugin_times(w)
            total = pt["(whole schedule, instrumented)"]
            for label, secs in pt.items():
                print(f"  {label:48s} {secs:8.3f}s {100 * secs / total:5.1f}%")
            best["plugins_s"] = {k: round(v, 4) for k, v in pt.items()}
        results.append(best)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
