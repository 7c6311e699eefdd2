"""What every chaos scenario checks, read back from the API server.

A Recorder follows pods and nodes (list, then watch; re-watched across API server
restarts) and policy statuses (polled) for the length of a scenario. At the end:
- every pod is bound exactly once (one Scheduled event, nodeName never changed);
- no node is overcommitted: all events are replayed in resourceVersion order (etcd's
  revision) and each bind is checked against the node's allocatable and the pods on it
  at that revision (cpu, memory, pod count);
- no pod that fits is left Pending after the grace period (lost);
- status is exact (boundPods and bindsTotal) and no counter ever went backwards;
- the operator never crashed and its log has no traceback.
The recorder also notes when it saw each pod bound (`pace`): the slow-extender scenario
compares a victim policy's drain pace under attack with its solo pace (Findings.slowed).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from polsched.cluster.client import ApiClient, ApiError
from polsched.framework.resources import parse_quantity
from polsched.objects import Json


def cpu_milli(q: str | None) -> int:
    return int(parse_quantity(q) * 1000) if q else 0


def mem_bytes(q: str | None) -> int:
    """A quantity in any of the API server's forms (the production parser: `1k` as the
    API server writes 1000, `1Gi`, `1e3`)."""
    return int(parse_quantity(q)) if q else 0


def pod_request(pod: Json) -> tuple[int, int]:
    """(cpu millis, memory bytes): the containers' requests (the chaos pods have no init
    containers or overhead)."""
    cpu = mem = 0
    for c in (pod.get("spec") or {}).get("containers") or ():
        req = (c.get("resources") or {}).get("requests") or {}
        cpu += cpu_milli(req.get("cpu"))
        mem += mem_bytes(req.get("memory"))
    return cpu, mem


def _terminal(pod: Json) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


@dataclass
class Findings:
    pods: int = 0
    lost: list[str] = field(default_factory=list)
    double_bound: list[str] = field(default_factory=list)
    overcommitted: list[str] = field(default_factory=list)
    status_errors: list[str] = field(default_factory=list)
    crashes: list[str] = field(default_factory=list)
    tracebacks: list[str] = field(default_factory=list)
    # A victim policy whose pace fell below its bound against its solo baseline.
    slowed: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.lost or self.double_bound or self.overcommitted or self.status_errors
                    or self.crashes or self.tracebacks or self.slowed)

    def merge(self, other: Findings) -> None:
        self.pods += other.pods
        for name in ("lost", "double_bound", "overcommitted", "status_errors", "crashes",
                     "tracebacks", "slowed"):
            getattr(self, name).extend(getattr(other, name))

    def line(self) -> str:
        out = (f"pods={self.pods} lost={len(self.lost)} double-bound={len(self.double_bound)} "
               f"overcommitted={len(self.overcommitted)}")
        if self.status_errors:
            out += f" status-errors={len(self.status_errors)}"
        if self.crashes:
            out += f" crashes={len(self.crashes)}"
        if self.tracebacks:
            out += f" tracebacks={len(self.tracebacks)}"
        if self.slowed:
            out += f" slowed={len(self.slowed)}"
        return out

    def details(self) -> list[str]:
        out: list[str] = []
        for name in ("lost", "double_bound", "overcommitted", "status_errors", "crashes",
                     "tracebacks", "slowed"):
            items = getattr(self, name)
            if items:
                out.append(f"  {name}: {items[:8]}{' ...' if len(items) > 8 else ''}")
        return out


class Recorder:
    """Pods, nodes and policy statuses over a scenario; see the module docstring."""

    def __init__(self, kubeconfig: str, namespace: str, policies: list[str]) -> None:
        self.kubeconfig = kubeconfig
        self.namespace = namespace
        self.policies = list(policies)
        self.events: list[tuple[int, str, str, Json]] = []  # rv, resource, kind, obj
        self.initial_nodes: dict[str, Json] = {}
        self.initial_rv = 0
        self.counters: dict[str, list[tuple[int, int]]] = {}
        # pod name -> (schedulerName, monotonic time its bind was seen): paces of drains.
        self.bound_at: dict[str, tuple[str, float]] = {}
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._tasks: list[asyncio.Future[Any]] = []
        self._ready = threading.Event()

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> Recorder:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(30)
        return self

    def watch_policy(self, name: str) -> None:
        with self._lock:
            if name not in self.policies:
                self.policies.append(name)

    def stop(self) -> None:
        async def stop() -> None:
            for t in self._tasks:
                t.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            await self._client.close()

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _start(self) -> None:
        self._client = ApiClient.from_kubeconfig(self.kubeconfig)
        nodes = await self._client.list_all("/api/v1/nodes")
        self.initial_nodes = {n["metadata"]["name"]: n for n in nodes["items"]}
        pods_path = f"/api/v1/namespaces/{self.namespace}/pods"
        pods = await self._client.list_all(pods_path)
        for p in pods["items"]:
            self.events.append((0, "pod", "ADDED", p))
        node_rv = nodes["metadata"]["resourceVersion"]
        pod_rv = pods["metadata"]["resourceVersion"]
        self.initial_rv = int(node_rv)
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._watch("/api/v1/nodes", "node", node_rv)),
                       loop.create_task(self._watch(pods_path, "pod", pod_rv)),
                       loop.create_task(self._poll_status())]

    async def _watch(self, path: str, resource: str, rv: str) -> None:
        while True:
            try:
                async for kind, obj in self._client.watch(path, resource_version=rv,
                                                          timeout_seconds=60):
                    rv = obj["metadata"].get("resourceVersion") or rv
                    if kind == "BOOKMARK":
                        continue
                    seen = time.monotonic()
                    with self._lock:
                        self.events.append((int(rv), resource, kind, obj))
                        spec = obj.get("spec") or {}
                        name = obj["metadata"]["name"]
                        if (resource == "pod" and spec.get("nodeName")
                                and name not in self.bound_at):
                            self.bound_at[name] = (str(spec.get("schedulerName") or ""),
                                                   seen)
            except asyncio.CancelledError:
                raise
            except ApiError as e:
                if e.status == 410:
                    raise RuntimeError(f"chaos recorder: watch {path} expired") from e
                await asyncio.sleep(0.3)
            except Exception:
                await asyncio.sleep(0.3)

    async def _poll_status(self) -> None:
        while True:
            for name in list(self.policies):
                try:
                    obj = await self._client.get(
                        f"/apis/polsched.io/v1alpha1/schedulingpolicies/{name}")
                except Exception:
                    continue
                st = obj.get("status") or {}
                pair = (int(st.get("bindsTotal") or 0), int(st.get("unschedulableAttempts") or 0))
                with self._lock:
                    seq = self.counters.setdefault(name, [])
                    if not seq or seq[-1] != pair:
                        seq.append(pair)
            await asyncio.sleep(0.2)

    def pace(self, scheduler: str) -> tuple[int, float]:
        """(pods, pods per second) of the binds of `scheduler`'s pods seen so far: from
        its first bind to its last, as the watch delivered them."""
        with self._lock:
            times = sorted(t for s, t in self.bound_at.values() if s == scheduler)
        if len(times) < 2 or times[-1] <= times[0]:
            return len(times), 0.0
        return len(times), (len(times) - 1) / (times[-1] - times[0])

    # -- checks ------------------------------------------------------------------------------
    def check(self, findings: Findings, scheduled: dict[str, int]) -> None:
        """Double binds, overcommit and counter monotonicity from what was recorded.
        `scheduled`: pod name -> Scheduled events naming it."""
        with self._lock:
            events = sorted(self.events, key=lambda e: e[0])
            counters = {k: list(v) for k, v in self.counters.items()}
        alloc: dict[str, tuple[int, int, int]] = {}
        for name, n in self.initial_nodes.items():
            alloc[name] = _allocatable(n)
        # pod key -> (node, cpu, mem) while it counts on a node
        placed: dict[str, tuple[str, int, int]] = {}
        usage: dict[str, list[int]] = {}
        nodes_of: dict[str, str] = {}
        for rv, resource, kind, obj in events:
            if resource == "node":
                name = obj["metadata"]["name"]
                if kind == "DELETED":
                    alloc.pop(name, None)
                else:
                    alloc[name] = _allocatable(obj)
                continue
            meta = obj["metadata"]
            key = f"{meta['name']}/{meta.get('uid')}"
            node = (obj.get("spec") or {}).get("nodeName") or ""
            if kind == "DELETED" or _terminal(obj):
                got = placed.pop(key, None)
                if got is not None:
                    u = usage[got[0]]
                    u[0] -= got[1]
                    u[1] -= got[2]
                    u[2] -= 1
                continue
            if not node:
                continue
            before = nodes_of.get(key)
            if before is not None and before != node:
                findings.double_bound.append(f"{meta['name']} moved {before} -> {node}")
            nodes_of[key] = node
            if key in placed:
                continue
            cpu, mem = pod_request(obj)
            placed[key] = (node, cpu, mem)
            u = usage.setdefault(node, [0, 0, 0])
            u[0] += cpu
            u[1] += mem
            u[2] += 1
            if rv == 0:
                continue  # there before the scenario started
            a = alloc.get(node)
            if a is None:
                continue  # a pod bound to a node that does not exist: not an overcommit
            if u[0] > a[0] or u[1] > a[1] or u[2] > a[2]:
                findings.overcommitted.append(
                    f"{meta['name']} on {node} at rv {rv}: cpu {u[0]}m/{a[0]}m "
                    f"mem {u[1]}/{a[1]} pods {u[2]}/{a[2]}")
        for pod_name, count in scheduled.items():
            if count > 1:
                findings.double_bound.append(f"{pod_name}: {count} Scheduled events")
        for name, seq in counters.items():
            for (b0, u0), (b1, u1) in zip(seq, seq[1:], strict=False):
                if b1 < b0 or u1 < u0:
                    findings.status_errors.append(
                        f"{name}: counters went backwards ({b0},{u0}) -> ({b1},{u1})")


def _allocatable(node: Json) -> tuple[int, int, int]:
    a = (node.get("status") or {}).get("allocatable") or {}
    pods = int(parse_quantity(a.get("pods") or "110"))  # 1000 pods come as `1k`
    return cpu_milli(a.get("cpu")), mem_bytes(a.get("memory")), pods


def check_logs(findings: Findings, logs: dict[str, str],
               alive: Callable[[str], bool] | None = None) -> None:
    for who, text in logs.items():
        if "Traceback" in text:
            i = text.index("Traceback")
            findings.tracebacks.append(f"{who}: {text[i:i + 300]!r}")
        if alive is not None and not alive(who):
            findings.crashes.append(f"{who} exited")


def wait_until(fn: Callable[[], Any], timeout: float, interval: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    return last


def dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))
