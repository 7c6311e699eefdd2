"""What a bench run measures and how.

- Creation: pods (and nodes) are POSTed by `create_objects`, a pool of concurrent aiohttp
  requests with pre-serialized bodies, so that creating is not the bottleneck. A pod's
  creation time is when the POST's answer arrived (the moment the object surely exists);
  the creation rate is reported next to every result.
- Binds: `watch_binds` runs in its own process (spawned), so that decoding watch events
  never waits behind the creator in one event loop. It watches the namespace's pods with
  fieldSelector spec.nodeName!= (only bound pods; a bind arrives as ADDED) and stamps each
  pod with time.monotonic() when its first bound event arrives. CLOCK_MONOTONIC is
  system-wide on Linux, so stamps from both processes compare. creationTimestamp and the
  PodScheduled condition's lastTransitionTime have one-second resolution: useless for
  latencies of milliseconds.
- Scheduler cost: CPU seconds (utime + stime from /proc/<pid>/stat) over the measured
  phase, and peak RSS (VmHWM from /proc/<pid>/status), summed over the scheduler's process
  tree. No psutil: /proc holds both numbers.
- Reload latency: bench/reload.py (PATCH answered .. first pod decided by the new
  generation).
"""

from __future__ import annotations

import asyncio
import json
import math
import multiprocessing as mp
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

_CLK_TCK = os.sysconf("SC_CLK_TCK")


# -- /proc ------------------------------------------------------------------------------
def _stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            raw = f.read()
    except OSError:
        return None
    # comm may hold spaces and parentheses: split after the last ')'.
    return raw[raw.rindex(")") + 2:].split()


def process_tree(root: int) -> list[int]:
    """root and its descendants alive now."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = _stat_fields(int(entry))
        if fields is not None:
            children.setdefault(int(fields[1]), []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, ()))
    return out


def cpu_seconds(pid: int) -> float | None:
    fields = _stat_fields(pid)
    if fields is None:
        return None
    # After comm: state(0) ppid(1) ... utime(11) stime(12), man 5 proc fields 14 and 15.
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK


def peak_rss_bytes(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


@dataclass
class ProcessMeter:
    """CPU and peak RSS of a process tree. `sample()` remembers the last values of every
    process seen, so a child that exits before `stop()` still counts (up to its last
    sample). Peak RSS is the sum of the processes' VmHWM: exact for one process, an upper
    bound for a tree."""

    root: int
    _cpu: dict[int, float] = field(default_factory=dict)
    _hwm: dict[int, int] = field(default_factory=dict)
    _base: float = 0.0

    def sample(self) -> None:
        for pid in process_tree(self.root):
            c = cpu_seconds(pid)
            if c is not None:
                self._cpu[pid] = c
            h = peak_rss_bytes(pid)
            if h is not None:
                self._hwm[pid] = max(h, self._hwm.get(pid, 0))

    def start(self) -> None:
        self.sample()
        self._base = sum(self._cpu.values())

    def cpu(self) -> float:
        return sum(self._cpu.values()) - self._base

    def peak_rss(self) -> int:
        return sum(self._hwm.values())


# -- statistics --------------------------------------------------------------------------
def percentile(values: Sequence[float], p: float) -> float | None:
    """Nearest-rank percentile (p in 0..100) of unsorted values; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


def summarize_ms(seconds: Sequence[float]) -> dict[str, float | None]:
    def ms(v: float | None) -> float | None:
        return None if v is None else round(v * 1000, 2)
    return {"p50": ms(percentile(seconds, 50)), "p90": ms(percentile(seconds, 90)),
            "p99": ms(percentile(seconds, 99)), "max": ms(max(seconds) if seconds else None)}


# -- creating objects ----------------------------------------------------------------------
_RETRYABLE = {429, 500, 502, 503, 504}


async def create_objects(client: Any, path: str | Sequence[str], bodies: Sequence[bytes],
                         concurrency: int, method: str = "POST",
                         content_type: str = "application/json",
                         ) -> list[tuple[float, float]]:
    """POST every body to path (or body i to path[i]) with `concurrency` requests in
    flight; per body the monotonic (sent, answered) times of its successful request.
    Retries overload answers."""
    from polsched.cluster.client import ApiError

    times: list[tuple[float, float]] = [(0.0, 0.0)] * len(bodies)
    next_index = 0

    async def worker() -> None:
        nonlocal next_index
        while next_index < len(bodies):
            i = next_index
            next_index += 1
            for attempt in range(20):
                sent = time.monotonic()
                try:
                    await client.request(method, path if isinstance(path, str) else path[i],
                                         body=bodies[i], content_type=content_type)
                except ApiError as err:
                    if err.status == 409 and err.reason == "AlreadyExists" and attempt:
                        break  # an earlier attempt landed after all
                    if err.status not in _RETRYABLE:
                        raise
                    await asyncio.sleep(0.05 * (attempt + 1))
                    continue
                except (TimeoutError, OSError):
                    await asyncio.sleep(0.05 * (attempt + 1))
                    continue
                times[i] = (sent, time.monotonic())
                break
            else:
                raise RuntimeError(f"{method} {path}: item {i} failed 20 times")

    await asyncio.gather(*(worker() for _ in range(max(1, concurrency))))
    return times


def encode(objs: Sequence[dict[str, Any]]) -> list[bytes]:
    return [json.dumps(o, separators=(",", ":")).encode() for o in objs]


# -- watching binds (a child process) ---------------------------------------------------------
def watch_binds(kubeconfig: str, namespace: str, expected: int, ready: Any, stop: Any,
                out: Any) -> None:
    """Child process: put {pod: [t_bind, node]}, the number of rebinds and of events on
    `out` once `expected` pods are bound or `stop` is set. `ready` is set once listening."""
    asyncio.run(_watch_binds(kubeconfig, namespace, expected, ready, stop, out))


async def _watch_binds(kubeconfig: str, namespace: str, expected: int, ready: Any, stop: Any,
                       out: Any) -> None:
    from polsched.cluster.client import ApiClient, ApiError

    bound: dict[str, list[Any]] = {}
    rebinds = 0
    events = 0
    path = f"/api/v1/namespaces/{namespace}/pods"
    selector = "spec.nodeName!="
    async with ApiClient.from_kubeconfig(kubeconfig) as client:
        first = await client.list(path, field_selector=selector)
        rv = first["metadata"]["resourceVersion"]
        for pod in first.get("items") or ():
            bound[pod["metadata"]["name"]] = [time.monotonic(), pod["spec"]["nodeName"]]
        ready.set()

        async def run() -> None:
            nonlocal rv, rebinds, events
            while len(bound) < expected:
                try:
                    async for kind, obj in client.watch(path, resource_version=rv,
                                                        field_selector=selector,
                                                        timeout_seconds=3600):
                        now = time.monotonic()
                        events += 1
                        rv = obj.get("metadata", {}).get("resourceVersion", rv)
                        if kind not in ("ADDED", "MODIFIED"):
                            continue
                        name = obj["metadata"]["name"]
                        node = (obj.get("spec") or {}).get("nodeName")
                        seen = bound.get(name)
                        if seen is None:
                            bound[name] = [now, node]
                            if len(bound) >= expected:
                                return
                        elif seen[1] != node:
                            rebinds += 1
                except ApiError as err:
                    if err.status != 410:
                        raise
                    again = await client.list(path, field_selector=selector)
                    rv = again["metadata"]["resourceVersion"]

        async def until_stopped() -> None:
            while not stop.is_set():
                await asyncio.sleep(0.1)

        tasks = [asyncio.ensure_future(run()), asyncio.ensure_future(until_stopped())]
        done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for t in pending:
            t.cancel()
        error = None
        for t in done:
            if not t.cancelled() and t.exception() is not None:
                error = repr(t.exception())
    out.put({"bound": bound, "rebinds": rebinds, "events": events, "error": error})


class BindWatcher:
    """The parent's handle on a `watch_binds` child process."""

    def __init__(self, kubeconfig: str, namespace: str, expected: int) -> None:
        ctx = mp.get_context("spawn")
        self._ready = ctx.Event()
        self._stop = ctx.Event()
        self._out: Any = ctx.Queue()
        self._proc = ctx.Process(target=watch_binds, daemon=True,
                                 args=(kubeconfig, namespace, expected, self._ready,
                                       self._stop, self._out))

    def start(self, timeout: float = 60) -> None:
        self._proc.start()
        if not self._ready.wait(timeout):
            self._proc.kill()
            raise RuntimeError("the bind watcher did not start")

    def result(self, timeout: float) -> dict[str, Any]:
        """Wait up to timeout for every expected bind; then whatever was seen."""
        import queue

        try:
            res: dict[str, Any] = self._out.get(timeout=timeout)
        except queue.Empty:
            self._stop.set()
            try:
                res = self._out.get(timeout=30)
            except queue.Empty:
                res = {"bound": {}, "rebinds": 0, "events": 0,
                       "error": "the bind watcher did not answer"}
            res["timed_out"] = True
        self._proc.join(10)
        if self._proc.is_alive():
            self._proc.kill()
        return res
