#!/usr/bin/env python3
"""The ceiling: binds pending pods round-robin to nodes without deciding anything, and
writes what polsched writes for each, so that it is the physical limit of "a scheduler
that decides nothing" on this control plane and this machine (issue 15).

Per pod, as polsched: the v1 Binding, posted undecoded by ApiClient.send with the bytes of
polsched.scheduler.binder.encode_binding (DefaultBinder's body, the pod's UID included),
then, once bound, the Scheduled event through polsched's own EventRecorder (events.k8s.io/v1,
reportingController the scheduler name, written in the background). The same client
settings as polsched's engine: one ApiClient.from_kubeconfig with its default connection
limit and no client-side rate limit, the Engine's default binds in flight and the
EventRecorder's default event writers (`polsched_defaults`).

What it does not do: no cache, no filters, no scores, no queue order, no retries beyond an
overloaded API server. It lists the nodes once (--node-selector) and watches pods with its
schedulerName and no node.

  python bench/noop_binder.py --kubeconfig K --scheduler-name bench-noop \
      --node-selector polsched.io/bench=true

Prints "ready" on stdout once it watches; on SIGTERM writes the events still queued (a few
seconds at most) and prints a JSON line of its counters.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import itertools
import json
import signal
import sys
from typing import Any

from polsched.cluster.client import ApiClient, ApiError, ClientLimits
from polsched.framework.types import PodInfo
from polsched.scheduler.binder import encode_binding
from polsched.scheduler.engine import Engine
from polsched.scheduler.recorder import EventRecorder


def polsched_defaults() -> dict[str, int]:
    """The write settings polsched's engine runs with, read from its code so that they
    cannot drift: binds in flight (Engine), event writers (EventRecorder), connections
    (ApiClient's ClientLimits)."""
    def default(fn: Any, name: str) -> int:
        return int(inspect.signature(fn).parameters[name].default)

    return {"binds_in_flight": default(Engine.__init__, "bind_concurrency"),
            "event_writers": default(EventRecorder.__init__, "concurrency"),
            "connection_limit": ClientLimits().connections}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    counters = {"binds": 0, "conflicts": 0, "errors": 0, "events": 0}
    queue: asyncio.Queue[PodInfo] = asyncio.Queue()
    seen: set[tuple[str, str]] = set()
    # polsched's engine: credentials.api_client(kubeconfig), the ApiClient defaults.
    async with ApiClient.from_kubeconfig(args.kubeconfig) as client:
        # One recorder per scheduler name, as polsched has one per policy: the events'
        # reportingController is the pod's schedulerName.
        recorders: dict[str, EventRecorder] = {}

        def recorder(pod: PodInfo) -> EventRecorder:
            r = recorders.get(pod.scheduler_name)
            if r is None:
                r = recorders[pod.scheduler_name] = EventRecorder(client, pod.scheduler_name)
            return r
        nodes = await client.list_all("/api/v1/nodes", label_selector=args.node_selector)
        names = sorted(n["metadata"]["name"] for n in nodes["items"])
        if not names:
            raise SystemExit(f"no nodes match --node-selector {args.node_selector!r}")
        ring = itertools.cycle(names)
        # Several names (comma-separated, the many-policies workload): a field selector
        # cannot say "one of", so they are picked out here.
        wanted = set(args.scheduler_name.split(","))
        selector = (f"spec.schedulerName={args.scheduler_name},spec.nodeName="
                    if len(wanted) == 1 else "spec.nodeName=")

        def offer(pod: dict[str, Any]) -> None:
            if (pod.get("spec") or {}).get("schedulerName") not in wanted:
                return
            meta = pod["metadata"]
            key = (meta["namespace"], meta["name"])
            if key not in seen and not meta.get("deletionTimestamp"):
                seen.add(key)
                queue.put_nowait(PodInfo.from_json(pod))

        async def bind_worker() -> None:
            while True:
                pod = await queue.get()
                node = next(ring)
                path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/binding"
                body = encode_binding(pod, node)
                for attempt in range(10):
                    try:
                        await client.send("POST", path, body)
                        counters["binds"] += 1
                        recorder(pod).scheduled(pod, node)  # as the engine, once bound
                        counters["events"] += 1
                    except ApiError as err:
                        if err.status in (429, 500, 503) and attempt < 9:
                            await asyncio.sleep(0.05 * (attempt + 1))
                            continue
                        counters["conflicts" if err.status == 409 else "errors"] += 1
                    break

        first = await client.list("/api/v1/pods", field_selector=selector)
        for pod in first.get("items") or ():
            offer(pod)
        rv = first["metadata"]["resourceVersion"]
        workers = [asyncio.ensure_future(bind_worker()) for _ in range(args.concurrency)]
        print("ready", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        loop.add_signal_handler(signal.SIGINT, stop.set)

        async def watch() -> None:
            nonlocal rv
            while True:
                try:
                    async for kind, obj in client.watch("/api/v1/pods", resource_version=rv,
                                                        field_selector=selector,
                                                        timeout_seconds=3600):
                        rv = obj.get("metadata", {}).get("resourceVersion", rv)
                        if kind in ("ADDED", "MODIFIED"):
                            offer(obj)
                except ApiError as err:
                    if err.status != 410:
                        raise
                    again = await client.list("/api/v1/pods", field_selector=selector)
                    rv = again["metadata"]["resourceVersion"]
                    for pod in again.get("items") or ():
                        offer(pod)

        watcher = asyncio.ensure_future(watch())
        stopper = asyncio.ensure_future(stop.wait())
        await asyncio.wait([watcher, stopper], return_when=asyncio.FIRST_COMPLETED)
        for t in (watcher, stopper, *workers):
            t.cancel()
        for r in recorders.values():
            await r.close()
        if watcher.done() and not watcher.cancelled() and watcher.exception():
            raise watcher.exception()  # type: ignore[misc]
    return counters


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--scheduler-name", default="bench-noop",
                   help="the schedulerName of the pods to bind; several, comma-separated")
    p.add_argument("--node-selector", default="polsched.io/bench=true")
    p.add_argument("--concurrency", type=int, default=polsched_defaults()["binds_in_flight"],
                   help="binds in flight (default polsched's)")
    counters = asyncio.run(run(p.parse_args()))
    print(json.dumps(counters), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
