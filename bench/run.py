#!/usr/bin/env python3
"""`make bench`: polsched, kube-scheduler and a no-op binder, one after the other on the
same control plane, on the same nodes and pods (issue 7).

  make bench                                     # every workload, every scheduler
  make bench BENCH_ARGS="--workloads basic --scale 0.1"   # a quick look
  .venv/bin/python bench/run.py --help

Per workload and scheduler: create the nodes, start the scheduler, prove it schedules
with one warm-up pod (then delete it), create the pods as fast as the API server takes
them while a separate process watches the binds, stop the scheduler, delete pods, events
and nodes, so the next scheduler starts from the same state. bench/measure.py says what
each number means. Results: <out>/results.json, <out>/RESULTS.md and <out>/out/<ts>.json.

The control plane is hack/cluster.sh in a temporary directory with kwok off
(POLSCHED_NO_KWOK=1): kwok would heartbeat 5000 nodes and move every bound pod to
Running, CPU that competes with the scheduler under test on a small machine, and nothing
in scheduling needs it (nodes are created with capacity; hack/cluster.sh turns off the
admission plugin that would taint new nodes not-ready). --kubeconfig reuses a running
control plane instead.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import many, measure, reload, report, violations  # noqa: E402
from bench import workloads as wl  # noqa: E402
from bench.schedulers import RUNNERS, KubeScheduler, Polsched, Runner  # noqa: E402
from polsched.cluster import featuregates  # noqa: E402

SCHEDULERS = ("noop", "kube", "polsched")
PODS = f"/api/v1/namespaces/{wl.NAMESPACE}/pods"
OTHER_PODS = f"/api/v1/namespaces/{wl.OTHER_NAMESPACE}/pods"


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# -- cluster plumbing ----------------------------------------------------------------------
async def ensure_namespace(api: Any) -> None:
    from polsched.cluster.client import ApiError

    for ns in (wl.NAMESPACE, wl.OTHER_NAMESPACE):
        try:
            await api.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                  "metadata": {"name": ns}})
        except ApiError as err:
            if err.status != 409:
                raise


async def remaining(api: Any, path: str, label_selector: str | None = None) -> int:
    """How many objects the collection holds (one item listed; the API server counts the
    rest in metadata.remainingItemCount)."""
    page = await api.list(path, label_selector=label_selector, limit=1)
    items = page.get("items") or ()
    if not items:
        return 0
    return len(items) + int((page.get("metadata") or {}).get("remainingItemCount") or 0)


async def wait_empty(api: Any, path: str, label_selector: str | None = None,
                     stall: float = 120) -> None:
    """Wait until the collection is empty; give up once it has not shrunk for `stall`
    seconds (30 000 pods take minutes to go, but they keep going)."""
    last, since = -1, time.monotonic()
    while True:
        left = await remaining(api, path, label_selector)
        if not left:
            return
        if left != last:
            last, since = left, time.monotonic()
        elif time.monotonic() - since > stall:
            raise RuntimeError(f"{path}: {left} objects left, none deleted for {stall}s")
        await asyncio.sleep(0.2)


async def delete_all(api: Any, path: str, label_selector: str | None = None) -> None:
    """DELETE the collection (at once: gracePeriodSeconds 0, no kubelet will confirm) until
    it is empty. The answer lists every deleted object, 100 MB for 30 000 pods: `send`
    reads and drops it undecoded. The API server gives one request a minute
    (--request-timeout) and then drops the connection, which stops the deletion there:
    30 000 pods take a few requests, sent again as long as each one deleted something."""
    import aiohttp

    from polsched.cluster.client import ApiError

    url = path + (f"?labelSelector={quote(label_selector)}" if label_selector else "")
    body = b'{"apiVersion":"v1","kind":"DeleteOptions","gracePeriodSeconds":0}'
    last, stalled = await remaining(api, path, label_selector), 0
    while last:
        try:
            await api.send("DELETE", url, body, timeout=600)
        except ApiError as err:
            if err.status not in (429, 500, 503, 504):
                raise
        except (TimeoutError, OSError, aiohttp.ClientError) as err:
            log(f"DELETE {url} ({last} left): {err!r}; again")
        left = await remaining(api, path, label_selector)
        if left and left >= last:
            stalled += 1
            if stalled >= 3:  # deletes nothing: let wait_empty say what is left
                break
            await asyncio.sleep(1)
        else:
            stalled = 0
        last = left
    await wait_empty(api, path, label_selector)


async def podgroups_served(api: Any) -> bool:
    """Whether the control plane serves PodGroups (GenericWorkload on)."""
    from polsched.cluster.client import ApiError

    try:
        await api.list(wl.PODGROUPS, limit=1)
    except ApiError as err:
        if err.status == 404:
            return False
        raise
    return True


async def clean(api: Any) -> None:
    """Delete what a run leaves in the cluster: the bench's pods in both namespaces, their
    events, the PodGroups of the gang workloads (after their pods: kube-controller-manager
    lifts a PodGroup's protection finalizer once no pod names it), the Services of
    workloads' extra_objects, and the bench nodes."""
    await delete_all(api, PODS)
    await delete_all(api, OTHER_PODS)
    if await podgroups_served(api):
        await delete_all(api, wl.PODGROUPS)
    for ns in (wl.NAMESPACE, wl.OTHER_NAMESPACE):
        await delete_all(api, f"/api/v1/namespaces/{ns}/events")
    # Services have no deletecollection: one by one (a workload makes one or two).
    for ns in (wl.NAMESPACE, wl.OTHER_NAMESPACE):
        path = f"/api/v1/namespaces/{ns}/services"
        for svc in (await api.list(path)).get("items") or ():
            await api.delete(f"{path}/{svc['metadata']['name']}")
    await clean_dra(api)
    await delete_all(api, "/api/v1/nodes", f"{wl.NODE_LABEL}=true")


async def clean_dra(api: Any) -> None:
    """The DRA workloads' objects: claims in both namespaces (their delete-protection
    finalizer removed: no driver or kubelet runs here to release the devices), templates,
    slices and the classes. Cheap when there are none."""
    res = wl.RESOURCE_API
    for ns in (wl.NAMESPACE, wl.OTHER_NAMESPACE):
        path = f"{res}/namespaces/{ns}/resourceclaims"
        await delete_all_dra(api, path)
        await delete_all(api, f"{res}/namespaces/{ns}/resourceclaimtemplates")
    await delete_all(api, f"{res}/resourceslices")
    for dc in (await api.list(f"{res}/deviceclasses")).get("items") or ():
        name = dc["metadata"]["name"]
        if name == wl.DRA_CLASS or name.startswith(wl.DRA_EXTENDED_CLASS_PREFIX):
            await api.delete(f"{res}/deviceclasses/{name}")


async def delete_all_dra(api: Any, path: str) -> None:
    """DELETE the claims, then take the finalizer off those that stay (deleting ones)."""
    if not await remaining(api, path):
        return
    await delete_all_once(api, path)
    while True:
        items = (await api.list(path)).get("items") or ()
        if not items:
            return
        stuck = [c for c in items if (c.get("metadata") or {}).get("finalizers")]
        bodies = measure.encode([{"metadata": {"finalizers": None}} for _ in stuck])
        await measure.create_objects(api, [f"{path}/{c['metadata']['name']}" for c in stuck],
                                     bodies, 16, method="PATCH",
                                     content_type="application/merge-patch+json")
        if len(stuck) < len(items):
            await delete_all_once(api, path)
        await asyncio.sleep(0.2)


async def delete_all_once(api: Any, path: str) -> None:
    from polsched.cluster.client import ApiError

    body = b'{"apiVersion":"v1","kind":"DeleteOptions","gracePeriodSeconds":0}'
    try:
        await api.send("DELETE", path, body, timeout=600)
    except ApiError as err:
        if err.status not in (404, 429, 500, 503, 504):
            raise


async def create_dra_init(ctx: Context, api: Any, w: wl.DynamicResources) -> int:
    """The DRA workload's allocated claims (scheduler_perf's allocResourceClaims): created,
    then their status.allocation written through the status subresource."""
    claims = w.init_claims()
    path = f"{wl.RESOURCE_API}/namespaces/{wl.OTHER_NAMESPACE}/resourceclaims"
    await measure.create_objects(
        api, path, measure.encode([{k: v for k, v in c.items() if k != "status"}
                                   for c in claims]), ctx.args.concurrency)
    await measure.create_objects(
        api, [f"{path}/{c['metadata']['name']}/status" for c in claims],
        measure.encode([{"status": c["status"]} for c in claims]), ctx.args.concurrency,
        method="PATCH", content_type="application/merge-patch+json")
    return len(claims)


async def wait_claims(api: Any, w: wl.Workload, timeout: float) -> None:
    """Backlog mode: until the resourceclaim controller has made every measured pod's
    claim (unmeasured: the scheduler starts on a cluster where every pod can be tried)."""
    path = f"{wl.RESOURCE_API}/namespaces/{wl.NAMESPACE}/resourceclaims"
    deadline = time.monotonic() + timeout
    have = 0
    while time.monotonic() < deadline:
        have = await remaining(api, path)
        if have >= w.pods:
            return
        await asyncio.sleep(0.5)
    raise RuntimeError(f"the resourceclaim controller made {have}/{w.pods} claims in "
                       f"{timeout}s")


async def list_claims(api: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for ns in (wl.NAMESPACE, wl.OTHER_NAMESPACE):
        cont: str | None = None
        while True:
            page = await api.list(f"{wl.RESOURCE_API}/namespaces/{ns}/resourceclaims",
                                  limit=500, continue_=cont)
            out.extend(page.get("items") or ())
            cont = (page.get("metadata") or {}).get("continue") or None
            if not cont:
                break
    return out


async def create_initial(ctx: Context, api: Any, w: wl.Workload, scheduler_name: str
                         ) -> int:
    """What exists before the scheduler starts, besides the nodes: the workload's extra
    objects (a Service) and its initial pods, bound already (spec.nodeName; scheduler_perf's
    unmeasured createPods steps). Returns the number of initial pods."""
    from polsched.cluster.client import ApiError

    if isinstance(w, wl.Preemption):  # its preemptors need their PriorityClass
        await ensure_priority_class(api)
    extra = w.extra_objects()
    if len(extra) > 8:  # a gang workload's PodGroups: as many requests in flight as pods
        await measure.create_objects(api, [path for path, _ in extra],
                                     measure.encode([obj for _, obj in extra]),
                                     ctx.args.concurrency)
    for path, obj in extra if len(extra) <= 8 else ():
        try:
            await api.post(path, obj)
        except ApiError as err:
            if err.status != 409:
                raise
    if isinstance(w, wl.DynamicResources):
        await create_dra_init(ctx, api, w)
    pods = w.init_pods(scheduler_name)
    paths = [f"/api/v1/namespaces/{p['metadata'].get('namespace') or wl.OTHER_NAMESPACE}/pods"
             for p in pods]
    await measure.create_objects(api, paths, measure.encode(pods), ctx.args.concurrency)
    return len(pods)


async def wait_node_metrics(api: Any, w: wl.Workload, timeout: float = 240) -> None:
    """Until metrics.k8s.io serves every bench node with its initial pods' usage (kwok:
    ~20 s for a node, ~40 s for a pod's usage)."""
    from polsched.cluster.client import ApiError
    from polsched.framework.resources import parse_quantity

    want = {wl.node_name(i): (wl.LoadAware.usage_cores(i) if isinstance(w, wl.LoadAware)
                              else 0) for i in range(w.nodes)}
    deadline = time.monotonic() + timeout
    ok = 0
    while time.monotonic() < deadline:
        try:
            got = await api.get("/apis/metrics.k8s.io/v1beta1/nodes")
        except ApiError:
            got = {}
        cores = {i["metadata"]["name"]: float(parse_quantity(i["usage"]["cpu"]))
                 for i in got.get("items") or ()}
        ok = sum(1 for n, c in want.items() if n in cores and cores[n] >= 0.8 * c)
        if ok == len(want):
            return
        await asyncio.sleep(2)
    raise RuntimeError(f"the Metrics API serves {ok}/{len(want)} bench nodes' usage "
                       f"after {timeout}s")


async def metrics_api_lists(cluster_dir: Path | None) -> int | None:
    """Requests for node usage that metrics-server answered (its apiserver_request_total
    for metrics.k8s.io nodes, every verb): what every client asked, counted where it is
    answered. None without the cluster's directory (its port and certificates)."""
    if cluster_dir is None or not (cluster_dir / "metrics-server.port").exists():
        return None
    pki = cluster_dir / "pki"
    port = (cluster_dir / "metrics-server.port").read_text().strip()
    proc = await asyncio.to_thread(
        subprocess.run, ["curl", "-sf", "--cacert", str(pki / "ca.crt"), "--cert",
                         str(pki / "admin.crt"), "--key", str(pki / "admin.key"),
                         f"https://127.0.0.1:{port}/metrics"],
        capture_output=True, text=True, timeout=60)
    total = 0
    for line in proc.stdout.splitlines():
        if line.startswith("apiserver_request_total{") and 'group="metrics.k8s.io"' in line \
                and 'resource="nodes"' in line:
            total += int(float(line.rsplit(" ", 1)[1]))
    return total


async def count_events(api: Any, namespace: str, reason: str) -> int:
    """Events of `reason` in the namespace (paged; a selector leaves no remainingItemCount).
    The warm-up pod's event counts too."""
    n, cont = 0, None
    while True:
        page = await api.list(f"/api/v1/namespaces/{namespace}/events", limit=1000,
                              field_selector=f"reason={reason}", continue_=cont)
        n += len(page.get("items") or ())
        cont = (page.get("metadata") or {}).get("continue") or None
        if not cont:
            return n


async def pod_views(api: Any, path: str) -> list[violations.PodView]:
    """The pods of a collection, page by page, each kept as the few fields the checks
    read (30 000 whole pods would be a few hundred MB in this process)."""
    out: list[violations.PodView] = []
    cont: str | None = None
    while True:
        page = await api.list(path, limit=500, continue_=cont)
        out.extend(violations.PodView.of(p) for p in page.get("items") or ())
        cont = (page.get("metadata") or {}).get("continue") or None
        if not cont:
            return out


async def wait_bound(api: Any, name: str, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pod = await api.get(f"{PODS}/{name}")
        node = (pod.get("spec") or {}).get("nodeName")
        if node:
            return str(node)
        await asyncio.sleep(0.05)
    raise RuntimeError(f"warm-up pod {name} not bound within {timeout}s")


# -- one run: one workload, one scheduler ---------------------------------------------------
class Context:
    def __init__(self, args: argparse.Namespace, kubeconfig: str, bin_dir: Path,
                 workdir: Path, cluster_dir: Path | None) -> None:
        self.args = args
        self.kubeconfig = kubeconfig
        self.bin_dir = bin_dir
        self.workdir = workdir
        self.cluster_dir = cluster_dir

    def control_plane_pids(self) -> dict[str, int]:
        out: dict[str, int] = {}
        if self.cluster_dir is None:
            return out
        for name in ("kube-apiserver", "etcd"):
            f = self.cluster_dir / f"{name}.pid"
            if f.exists():
                out[name] = int(f.read_text().strip())
        return out


async def one_run(ctx: Context, api: Any, w: wl.Workload, runner: Runner,
                  extender: tuple[int, int] | None) -> dict[str, Any]:
    """`extender`: (port, pid) of the bench extender, for workloads that use it."""
    res: dict[str, Any] = {"scheduler": runner.key, "scheduler_name": runner.scheduler_name,
                           "nodes": w.nodes, "pods": w.pods, "status": "ok", "error": None}
    t = time.monotonic()
    await clean(api)
    res["clean_before_s"] = round(time.monotonic() - t, 3)
    nodes = [w.node(i) for i in range(w.nodes)]
    t = time.monotonic()
    await measure.create_objects(api, "/api/v1/nodes", measure.encode(nodes),
                                 ctx.args.concurrency)
    res["node_create_s"] = round(time.monotonic() - t, 3)
    preemption = w if isinstance(w, wl.Preemption) else None
    t = time.monotonic()
    res["init_pods"] = await create_initial(ctx, api, w, runner.scheduler_name)
    res["init_create_s"] = round(time.monotonic() - t, 3)
    metrics_lists_before: int | None = None
    if w.metrics:  # unmeasured: until the Metrics API serves every node's usage
        t = time.monotonic()
        await wait_node_metrics(api, w)
        res["metrics_wait_s"] = round(time.monotonic() - t, 3)
        metrics_lists_before = await metrics_api_lists(ctx.cluster_dir)
    by_name = {n["metadata"]["name"]: n for n in nodes}
    del nodes
    # Startup lists every node and pod: give a large cluster longer than a small one.
    startup_timeout = max(ctx.args.startup_timeout,
                          (w.nodes + res["init_pods"] + (w.pods if ctx.args.backlog else 0))
                          / 100)

    extender_url = f"http://127.0.0.1:{extender[0]}/" if extender else None
    # --backlog: every pod exists before the scheduler starts, so throughput is the
    # scheduler's ceiling, not the creation rate. Hot reload needs pods streaming in.
    backlog = bool(ctx.args.backlog) and not w.reload_patches
    res["mode"] = "backlog" if backlog else "stream"
    if backlog:
        watcher = measure.BindWatcher(ctx.kubeconfig, wl.NAMESPACE, w.pods)
        await asyncio.to_thread(watcher.start)
        cpu0 = time.process_time()
        times = await measure.create_objects(
            api, PODS, measure.encode([w.pod(i, runner.key, runner.scheduler_name)
                                       for i in range(w.pods)]), ctx.args.concurrency)
        harness_cpu = time.process_time() - cpu0
        if isinstance(w, wl.DynamicResources) and w.template_claims:
            await wait_claims(api, w, 60 + w.pods / 10)
    t_start = time.monotonic()
    runner.start(w, extender_url)
    assert runner.proc is not None
    # The scheduler's CPU over the window its throughput counts: in backlog mode from the
    # process's start (base 0: its start-up, list and every bind, which may all happen
    # before wait_started sees every policy Ready), otherwise from ready (meter.start below).
    meter = measure.ProcessMeter(runner.proc.pid)
    meter.sample()
    try:
        await asyncio.to_thread(runner.wait_started, startup_timeout)
        t_ready = time.monotonic()
        if backlog:  # from the process's start, not the setup before it (kubectl applies)
            t_start = runner.started_at
        if not backlog:
            warm = w.warmup_pod(runner.key, runner.scheduler_name)
            warm["metadata"]["name"] = "bench-warmup"
            await api.post(PODS, warm)
            await wait_bound(api, "bench-warmup", startup_timeout)
        res["startup_s"] = round(time.monotonic() - t_start, 3)
        if not backlog:
            await api.delete(f"{PODS}/bench-warmup", {"gracePeriodSeconds": 0})
            await wait_empty(api, PODS)
        if not backlog:
            meter.start()
        cp = {k: measure.ProcessMeter(pid) for k, pid in ctx.control_plane_pids().items()}
        if extender:
            cp["extender"] = measure.ProcessMeter(extender[1])
        for m in cp.values():
            m.start()

        if not backlog:
            watcher = measure.BindWatcher(ctx.kubeconfig, wl.NAMESPACE, w.pods)
            await asyncio.to_thread(watcher.start)
            bodies = measure.encode([w.pod(i, runner.key, runner.scheduler_name)
                                     for i in range(w.pods)])
        reloader = None
        if w.reload_patches and isinstance(runner, Polsched) and runner.reloads:
            assert isinstance(w, wl.HotReload)
            from bench.schedulers import POLICY_COLLECTION, POLICY_NAME

            reloader = reload.FirstDecisionDriver(
                ctx.kubeconfig, f"{POLICY_COLLECTION}/{POLICY_NAME}", POLICY_NAME,
                runner.metrics_url(), w.patches(), ctx.args.reload_interval)

        async def sample() -> None:
            while True:
                meter.sample()
                await asyncio.sleep(1.0)

        sampler = asyncio.ensure_future(sample())
        churn: Churn | None = None
        if preemption is not None:
            churn = Churn(api, ctx.kubeconfig, preemption, runner.scheduler_name)
            await churn.start()
        if not backlog:
            cpu0 = time.process_time()
            if reloader is not None:
                reloader.start()
            if isinstance(w, wl.HotReload):  # a steady stream while the reloads go on
                times = await reload.create_paced(api, PODS, bodies, w.pod_rate,
                                                  ctx.args.concurrency, reloader)
                if reloader is not None:  # no patch after the stream
                    reloader.stop()
            else:
                times = await measure.create_objects(api, PODS, bodies, ctx.args.concurrency)
            harness_cpu = time.process_time() - cpu0
        # DRA: scheduler_perf's thresholds are 56-70 pods/s on a dedicated machine; on a
        # shared 2-core one kube-scheduler took 16-23 ms of CPU per pod.
        timeout = ctx.args.bind_timeout or 60 + w.pods / (5 if w.dra else 20)
        seen = await asyncio.to_thread(watcher.result, timeout)
        if w.metrics:
            # The Metrics API's whole cost, counted by the API server (every client's
            # LISTs of metrics.k8s.io nodes; only the scheduler under test makes them):
            # one per polling interval, none per pod.
            after = await metrics_api_lists(ctx.cluster_dir)
            if after is not None and metrics_lists_before is not None:
                res["metrics_api_requests"] = after - metrics_lists_before
                res["metrics_api_requests_per_pod"] = round(
                    res["metrics_api_requests"] / w.pods, 4)
        if churn is not None:
            res["preemption"] = await churn.finish(timeout=60)
        sampler.cancel()
        meter.sample()
        for m in cp.values():
            m.sample()
        reloads = await asyncio.to_thread(reloader.result, 120) if reloader else None
    finally:
        runner.stop()

    # -- numbers -------------------------------------------------------------------------
    names = [f"bench-pod-{i:05d}" for i in range(w.pods)]
    created = dict(zip(names, times, strict=True))
    bound = {n: v for n, v in seen["bound"].items() if n in created}
    first = min(answered for _sent, answered in times)
    sent_first = min(sent for sent, _answered in times)
    last_created = max(answered for _sent, answered in times)
    if backlog:
        # The clock starts when the scheduler process starts (its startup, list and
        # sync included); latency is from then, as no pod could bind earlier.
        first = t_start
        latencies = [max(0.0, bound[n][0] - t_start) for n in bound]
    else:
        latencies = [max(0.0, bound[n][0] - created[n][1]) for n in bound]
    res["bound"] = len(bound)
    res["rebinds"] = seen["rebinds"]
    res["watch_events"] = seen["events"]
    res["create_s"] = round(last_created - sent_first, 3)
    res["create_rate_pods_per_s"] = round(w.pods / max(last_created - sent_first, 1e-9), 1)
    if bound:
        last_bind = max(v[0] for v in bound.values())
        res["duration_s"] = round(last_bind - first, 3)
        # From the process's start (backlog) or the first pod answered (stream) to the
        # first bind seen: the same clock for every scheduler, unlike startup_s, which ends
        # at a scheduler's own ready signal (kube-scheduler and the no-op binder have none).
        res["first_bind_s"] = round(min(v[0] for v in bound.values()) - first, 3)
        res["throughput_pods_per_s"] = round(len(bound) / max(last_bind - first, 1e-9), 1)
        if backlog:  # the same, from the scheduler's "ready" (cache synced)
            res["throughput_from_ready_pods_per_s"] = round(
                len(bound) / max(last_bind - t_ready, 1e-9), 1)
    else:
        res["duration_s"] = None
        res["throughput_pods_per_s"] = 0.0
    # Binding kept pace with creation: the figure is the creator's (the API server's, on a
    # small machine), not the scheduler's ceiling.
    res["creation_bound"] = (not backlog and res["throughput_pods_per_s"]
                             >= 0.9 * res["create_rate_pods_per_s"])
    res["latency_ms"] = measure.summarize_ms(latencies)
    res["cpu_s"] = round(meter.cpu(), 2)
    res["peak_rss_mb"] = round(meter.peak_rss() / 2**20, 1)
    res["harness_cpu_s"] = round(harness_cpu, 2)
    res["others_cpu_s"] = {k: round(m.cpu(), 2) for k, m in cp.items()}
    # The writes each scheduler made besides the binds: its Scheduled events (the ceiling
    # must make them too), counted once it has stopped and flushed them.
    res["scheduled_events"] = await count_events(api, wl.NAMESPACE, "Scheduled")
    # Violations, from the pods on the server: measured and initial ones (bench/violations.py).
    views = await pod_views(api, PODS) + await pod_views(api, OTHER_PODS)
    claims = await list_claims(api) if w.dra else []
    verdict = violations.check(w, views, by_name, claims)
    del claims
    res["violations"] = verdict.violations
    res["violations_by_kind"] = verdict.by_kind
    if verdict.info:
        res["placement"] = verdict.info
    # Bound exactly once: every pod has one node, never changed (the watch would have
    # seen a second bound event), and the API server agrees.
    on_server = {p.name: p.node for p in views if p.namespace == wl.NAMESPACE}
    del views
    res["bound_once"] = (len(bound) == w.pods and seen["rebinds"] == 0
                         and all(on_server.get(n) == bound[n][1] for n in bound
                                 if preemption is None or n in on_server))
    if preemption is not None:  # measured pods evicted by a preemptor are gone
        res["preemption"]["measured_pods_preempted"] = sum(1 for n in bound
                                                           if n not in on_server)
    if reloads is not None:
        res["reload"] = reload.summary(reloads, max((v[0] for v in bound.values()),
                                                    default=0.0))
    elif w.reload_patches:
        res["reload"] = {"patches": 0, "observed": 0, "latency_ms": None,
                         "note": "no hot reload: " + (
                             "not a SchedulingPolicy scheduler" if runner.key != "polsched"
                             else "polsched ran without the operator")}
    if seen.get("error") or seen.get("timed_out") or len(bound) < w.pods:
        res["status"] = "incomplete"
        res["error"] = seen.get("error") or f"{len(bound)}/{w.pods} pods bound in {timeout}s"
    early = sum(1 for v in bound.values() if v[0] < t_start) if backlog else 0
    if early:  # not this scheduler's figures: something else serves its schedulerName
        res["status"] = "error"
        res["error"] = (f"{early} pods were bound before {runner.key} started: another "
                        f"process schedules {runner.scheduler_name!r} (a leftover one?)")
    if isinstance(runner, Polsched):
        shadow = runner.shadow_status()
        if shadow is not None:  # the shadow's agreement counts, from its status
            res["shadow"] = shadow
    runner.cleanup_cluster(None)
    t = time.monotonic()
    try:
        await clean(api)
    except Exception as err:  # keep the measurement; the next run cleans first anyway
        log(f"{w.name}/{runner.key}: cleanup after the run failed: {err!r}")
        res["cleanup_error"] = repr(err)
    res["clean_after_s"] = round(time.monotonic() - t, 3)
    # The bench process's own peak (its whole life so far: the largest workload's).
    res["harness_peak_rss_mb"] = round((measure.peak_rss_bytes(os.getpid()) or 0) / 2**20, 1)
    return res


async def ensure_priority_class(api: Any) -> None:
    from polsched.cluster.client import ApiError

    try:
        await api.post("/apis/scheduling.k8s.io/v1/priorityclasses",
                       wl.Preemption.priority_class())
    except ApiError as err:
        if err.status != 409:
            raise


class Churn:
    """The preemption workload's churn: a high-priority pod every `high_interval_s` while
    the measured pods stream in (scheduler_perf's churn opcode, mode create), and a bind
    watcher on their namespace to time each one from creation to bind."""

    def __init__(self, api: Any, kubeconfig: str, w: wl.Preemption, scheduler_name: str
                 ) -> None:
        self.api, self.w, self.scheduler_name = api, w, scheduler_name
        self.watcher = measure.BindWatcher(kubeconfig, wl.OTHER_NAMESPACE, 10**9)
        self.created: dict[str, float] = {}
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await asyncio.to_thread(self.watcher.start)
        self.task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        k = 0
        while True:
            body = self.w.high_pod(k, self.scheduler_name)
            await self.api.post(OTHER_PODS, body)
            self.created[body["metadata"]["name"]] = time.monotonic()
            k += 1
            await asyncio.sleep(self.w.high_interval_s)

    async def finish(self, timeout: float) -> dict[str, Any]:
        """Stop creating; wait up to `timeout` for the preemptors to be bound."""
        assert self.task is not None
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pods = (await self.api.list(OTHER_PODS))["items"]
            high = [p for p in pods if p["metadata"]["name"].startswith("bench-high-")]
            if all((p.get("spec") or {}).get("nodeName") for p in high):
                break
            await asyncio.sleep(0.5)
        seen = await asyncio.to_thread(self.watcher.result, 0.5)
        bound = {n: v for n, v in seen["bound"].items() if n in self.created}
        low_left = sum(1 for p in pods if p["metadata"]["name"].startswith("bench-low-"))
        return {
            "preemptors_created": len(self.created),
            "preemptors_bound": len(bound),
            "preemptor_latency_ms": measure.summarize_ms(
                [max(0.0, bound[n][0] - self.created[n]) for n in bound]),
            "low_priority_pods_evicted": self.w.nodes * self.w.init_pods_per_node - low_left,
        }


def start_extender(workdir: Path) -> tuple[subprocess.Popen[bytes], int]:
    logf = workdir / "extender.log"
    with open(logf, "wb") as out:
        proc = subprocess.Popen([sys.executable, str(ROOT / "bench" / "extender.py")],
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for line in logf.read_text().splitlines():
            if line.startswith("ready "):
                return proc, int(line.split()[1])
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"bench extender did not start: {logf.read_text()[-500:]}")


async def one_runner(ctx: Context, api: Any, w: wl.Workload, r: Runner,
                     ext: tuple[subprocess.Popen[bytes], int] | None, n: int, rounds: int,
                     ) -> dict[str, Any]:
    """One scheduler's run of `w` (round n of `rounds`), logged; a failure is a result."""
    tag = f"{w.name}/{r.key}" + (f" (round {n + 1}/{rounds})" if rounds > 1 else "")
    why = r.unavailable()
    if why:
        log(f"{tag}: skipped: {why}")
        return {"scheduler": r.key, "status": "skipped", "error": why}
    log(f"{tag}: {w.nodes} nodes, {w.pods} pods")
    try:
        res = await one_run(ctx, api, w, r, (ext[1], ext[0].pid) if ext else None)
    except Exception as err:  # one failed run must not lose the others
        log(f"{tag}: failed: {err!r}")
        res = {"scheduler": r.key, "status": "error", "error": repr(err),
               "log_tail": r.tail()}
        r.stop()
        try:
            r.cleanup_cluster(None)
            await clean(api)
        except Exception as cleanup_err:
            log(f"cleanup after the failure failed too: {cleanup_err!r}")
    if res["status"] == "ok" or res["status"] == "incomplete":
        lat = res["latency_ms"]
        log(f"{tag}: {res['status']}: "
            f"{res['throughput_pods_per_s']} pods/s, p50 {lat['p50']} ms, "
            f"p99 {lat['p99']} ms, cpu {res['cpu_s']} s, "
            f"rss {res['peak_rss_mb']} MB, violations {res['violations']} "
            f"(created at "
            f"{res['create_rate_pods_per_s']} pods/s)")
    return res


def headline(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The run a scheduler's figures come from: its only run; with several rounds, the
    run of median throughput (a real run, every figure from the same one), unless one
    round did not end "ok": then that round, so a failure is never hidden by the others."""
    bad = [res for res in results if res.get("status") != "ok"]
    if bad:
        return bad[0]
    ranked = sorted(results, key=lambda res: res["throughput_pods_per_s"])
    return ranked[(len(ranked) - 1) // 2]


def round_summary(res: dict[str, Any]) -> dict[str, Any]:
    """What the report shows of each round."""
    return {k: res.get(k) for k in ("status", "throughput_pods_per_s", "first_bind_s",
                                    "duration_s", "cpu_s", "peak_rss_mb")}


async def bench(ctx: Context, workloads: list[wl.Workload], runners: list[Runner],
                ) -> dict[str, Any]:
    from polsched.cluster.client import ApiClient, ClientLimits

    out: dict[str, Any] = {}
    async with ApiClient.from_kubeconfig(
            ctx.kubeconfig, limits=ClientLimits(connections=ctx.args.concurrency + 8)) as api:
        await ensure_namespace(api)
        for w in workloads:
            entry: dict[str, Any] = {"nodes": w.nodes, "pods": w.pods,
                                     "description": w.description,
                                     "equivalence": " ".join(w.equivalence.split()),
                                     "init_pods": len(w.init_pods("")),
                                     "extra_objects": [f"{o['kind']} {o['metadata']['name']}"
                                                       for _path, o in w.extra_objects()],
                                     "violations_count": violations.EXPLAIN.get(
                                         w.name, violations.DEFAULT_EXPLAIN),
                                     "results": {}}
            out[w.name] = entry
            rounds = ctx.args.rounds or w.rounds
            runs: dict[str, list[dict[str, Any]]] = {r.key: [] for r in runners}
            ext = start_extender(ctx.workdir) if w.extender else None
            try:
                for n in range(rounds):
                    for r in runners:
                        res = await one_runner(ctx, api, w, r, ext, n, rounds)
                        runs[r.key].append(res)
                for key, results in runs.items():
                    entry["results"][key] = headline(results)
                if w.dra:
                    entry["dra_allocations"] = violations.compare_allocations(
                        entry["results"])
                if rounds > 1:
                    entry["rounds"] = {key: [round_summary(res) for res in results]
                                       for key, results in runs.items()}
            finally:
                if ext:
                    ext[0].terminate()
                    ext[0].wait(10)
    return out


# -- machine and entry point ------------------------------------------------------------------
def machine(bin_dir: Path) -> dict[str, Any]:
    def cmd(*a: str) -> str:
        try:
            return subprocess.run(a, capture_output=True, text=True, timeout=30).stdout.strip()
        except OSError:
            return "n/a"

    mem = "n/a"
    model = "n/a"
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem = f"{int(line.split()[1]) / 2**20:.1f} GiB"
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"nproc": os.cpu_count(), "cpu_model": model, "memory": mem,
            "kernel": platform.release(), "python": platform.python_version(),
            "go": cmd("go", "version"), "kube": cmd(str(bin_dir / "kube-scheduler"), "--version"),
            "loadavg_at_start": Path("/proc/loadavg").read_text().split()[:3]}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="polsched vs kube-scheduler vs a no-op binder")
    # A workload on real usage needs the Metrics API and kwok on for the whole run, which
    # would change every other workload's conditions: it runs only when named.
    p.add_argument("--workloads", default=",".join(n for n, w in wl.WORKLOADS.items()
                                                   if not w.metrics),
                   help=f"comma-separated, of: {', '.join(wl.WORKLOADS)} (default all but "
                        f"{', '.join(n for n, w in wl.WORKLOADS.items() if w.metrics)}, "
                        "which start the control plane with the Metrics API and kwok)")
    p.add_argument("--schedulers", default=",".join(SCHEDULERS),
                   help="comma-separated, of: noop, kube, polsched (default all, this order)")
    p.add_argument("--scale", type=float, default=1.0,
                   help="multiply node and pod counts (0.1 for a smoke run)")
    p.add_argument("--nodes", type=int, help="override every workload's node count")
    p.add_argument("--pods", type=int, help="override every workload's pod count")
    p.add_argument("--concurrency", type=int, default=32,
                   help="creation requests in flight (default 32)")
    p.add_argument("--out", type=Path, default=ROOT / "bench",
                   help="where results.json, RESULTS.md and out/<timestamp>.json go")
    p.add_argument("--kubeconfig", help="use this running control plane instead of starting one")
    p.add_argument("--cluster-dir", type=Path,
                   help="with --kubeconfig: its hack/cluster.sh dir, to meter the apiserver")
    p.add_argument("--kube-scheduler-name", default="default-scheduler",
                   help="kube-scheduler's profile name (a shared cluster: pick another)")
    p.add_argument("--polsched-mode", choices=("auto", "operator", "engine"), default="auto",
                   help="operator: `polsched run`; engine: bench/polsched_engine.py")
    p.add_argument("--kwok", action="store_true", help="start kwok with the control plane")
    p.add_argument("--reload-interval", type=float, default=0.2,
                   help="hotreload: seconds between one reload observed and the next patch")
    p.add_argument("--backlog", action="store_true",
                   help="create every pod before starting the scheduler and time from its "
                        "start to the last bind: the scheduler's ceiling, not the creation "
                        "rate (not for hotreload, which needs pods streaming in)")
    p.add_argument("--rounds", type=int, default=0,
                   help="runs of every scheduler per workload, in turn (default: the "
                        "workload's own: 3 for the runs of a few seconds, basic, labels, affinity "
                        "and preemption; 5 for many-policies and its baseline)")
    p.add_argument("--startup-timeout", type=float, default=120)
    p.add_argument("--bind-timeout", type=float, default=0,
                   help="seconds to wait for all binds (default 60 + pods/20; DRA: pods/5)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    names = [n for n in args.workloads.split(",") if n]
    unknown = [n for n in names if n not in wl.WORKLOADS]
    keys = [k for k in args.schedulers.split(",") if k]
    bad = [k for k in keys if k not in RUNNERS]
    if unknown or bad:
        sys.exit(f"unknown workload(s) {unknown} or scheduler(s) {bad}")
    workloads = []
    for n in names:
        w = wl.WORKLOADS[n].scaled(args.scale) if args.scale != 1.0 else wl.WORKLOADS[n]
        if args.nodes or args.pods:
            from dataclasses import replace

            w = replace(w, nodes=args.nodes or w.nodes, pods=args.pods or w.pods)
        workloads.append(w)

    bin_dir = Path(subprocess.run([str(ROOT / "hack" / "build.sh")], check=True,
                                  capture_output=True, text=True).stdout.strip())
    started = dt.datetime.now(dt.UTC)
    # One control plane per distinct gate list (the gang workloads need GenericWorkload,
    # which the others must not get: it changes kube-scheduler's default profile), in the
    # order the workloads were named; with --kubeconfig, the one given for all of them.
    by_gates: dict[str, list[wl.Workload]] = {}
    for w in workloads:
        by_gates.setdefault(w.gates, []).append(w)
    results: dict[str, Any] = {}
    runners: list[Runner] = []
    with tempfile.TemporaryDirectory(prefix="polsched-bench-") as tmp:
        workdir = Path(tmp)
        own_cluster = not args.kubeconfig
        for gates, group in by_gates.items():
            cluster_dir = args.cluster_dir
            if own_cluster:
                cluster_dir = workdir / (f"cluster-{gates.split('=')[0]}" if gates
                                         else "cluster")
                env = {**os.environ}
                if gates:
                    env[featuregates.ENV] = gates
                # A workload on real usage (load-aware) needs the Metrics API, which needs kwok.
                metrics_api = any(w.metrics for w in group)
                if metrics_api:
                    env["POLSCHED_METRICS"] = "1"
                    args.kwok = True
                if not args.kwok:
                    env["POLSCHED_NO_KWOK"] = "1"
                # Cleanup between runs deletes up to 30 000 pods, as many events and 15 000
                # nodes by DELETE collection, one object at a time with the default single
                # worker: unmeasured time only.
                env["POLSCHED_APISERVER_ARGS"] = (env.get("POLSCHED_APISERVER_ARGS", "")
                                                  + " --delete-collection-workers=4").strip()
                if any(w.dra for w in group):
                    # The resourceclaim controller makes two writes per pod (the claim, the
                    # pod's status); kube-controller-manager's default client budget (20
                    # qps, burst 30) would make it, not the scheduler, the bottleneck.
                    env["POLSCHED_KCM_ARGS"] = (env.get("POLSCHED_KCM_ARGS", "")
                                                + " --kube-api-qps=5000 --kube-api-burst=5000"
                                                ).strip()
                log(f"starting a control plane in {cluster_dir} (kwok "
                    f"{'on' if args.kwok else 'off'}{', Metrics API' if metrics_api else ''}"
                    f"{', gates ' + gates if gates else ''})")
                subprocess.run([str(ROOT / "hack" / "cluster.sh"), "up", str(cluster_dir)],
                               check=True, env=env)
                kubeconfig = str(cluster_dir / "kubeconfig")
            else:
                kubeconfig = args.kubeconfig
                if gates:
                    log(f"{', '.join(w.name for w in group)} need the gates {gates}: the "
                        f"control plane at {kubeconfig} must have them")
            try:
                runners = []
                for k in keys:
                    if k == "kube":
                        runners.append(KubeScheduler(kubeconfig, bin_dir, workdir,
                                                     scheduler_name=args.kube_scheduler_name))
                    elif k == "polsched":
                        runners.append(Polsched(kubeconfig, bin_dir, workdir,
                                                mode=args.polsched_mode))
                    else:
                        runners.append(RUNNERS[k](kubeconfig, bin_dir, workdir))
                ctx = Context(args, kubeconfig, bin_dir, workdir, cluster_dir)
                results.update(asyncio.run(bench(ctx, group, runners)))
            finally:
                if own_cluster:
                    subprocess.run([str(ROOT / "hack" / "cluster.sh"), "down",
                                    str(cluster_dir)], capture_output=True)

    argv_shown = sys.argv[1:] if argv is None else argv
    doc = {
        "started": started.isoformat(timespec="seconds"),
        "finished": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": "make bench" + (f" BENCH_ARGS={shlex.quote(shlex.join(argv_shown))}"
                                   if argv_shown else ""),
        "machine": machine(bin_dir),
        "settings": {
            "control_plane": "own (hack/cluster.sh, kwok " + ("on)" if args.kwok else "off)")
            if own_cluster else f"reused: {args.kubeconfig}",
            # Workloads with gates ran on a control plane of their own with these.
            "feature_gates": {w.name: w.gates for w in workloads if w.gates},
            "creation_concurrency": args.concurrency,
            "schedulers": {r.key: r.settings() for r in runners},
            "order": keys,
            # Below the workloads' own counts (--nodes 5000 for the gang workloads is
            # upstream's size, above their default 500: not reduced).
            "reduced": any(w.nodes < wl.WORKLOADS[w.name].nodes
                           or w.pods < wl.WORKLOADS[w.name].pods for w in workloads),
        },
        "workloads": results,
    }
    many_policies = many.summary(results)
    if many_policies is not None:
        doc["many_policies"] = many_policies
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "out").mkdir(exist_ok=True)
    raw = json.dumps(doc, indent=2) + "\n"
    stamp = started.strftime("%Y%m%dT%H%M%SZ")
    (args.out / "out" / f"{stamp}.json").write_text(raw)
    (args.out / "results.json").write_text(raw)
    notes = ROOT / "bench" / "NOTES.md"
    (args.out / "RESULTS.md").write_text(
        report.render(doc, notes.read_text() if notes.exists() else None))
    log(f"wrote {args.out / 'RESULTS.md'} and {args.out / 'results.json'}")
    failed = [f"{w}/{k}" for w, e in results.items() for k, r in e["results"].items()
              if r["status"] in ("error", "incomplete")]
    if failed:
        log(f"failed runs: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
