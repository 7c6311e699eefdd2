#!/usr/bin/env python3
"""The no-op binder: binds pending pods round-robin to nodes without deciding anything.

It is the bench's ceiling: what this API server on this machine accepts as binds per
second from one asyncio + aiohttp process (the I/O stack polsched uses too). It lists the
nodes once (--node-selector), watches pods with its schedulerName and no node, and POSTs
a v1 Binding for each with --concurrency requests in flight. No cache, no filters, no
events, no retries beyond an overloaded API server.

  python bench/noop_binder.py --kubeconfig K --scheduler-name bench-noop \
      --node-selector polsched.io/bench=true

Prints "ready" on stdout once it watches; on SIGTERM prints a JSON line of its counters.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import signal
import sys
from typing import Any

from polsched.cluster.client import ApiClient, ApiError


async def run(args: argparse.Namespace) -> dict[str, Any]:
    counters = {"binds": 0, "conflicts": 0, "errors": 0}
    queue: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
    seen: set[tuple[str, str]] = set()
    async with ApiClient.from_kubeconfig(args.kubeconfig,
                                         connection_limit=args.concurrency + 8) as client:
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
                queue.put_nowait(key)

        async def bind_worker() -> None:
            while True:
                ns, name = await queue.get()
                body = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
                        "target": {"apiVersion": "v1", "kind": "Node", "name": next(ring)}}
                for attempt in range(10):
                    try:
                        await client.post(f"/api/v1/namespaces/{ns}/pods/{name}/binding", body)
                        counters["binds"] += 1
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
        if watcher.done() and not watcher.cancelled() and watcher.exception():
            raise watcher.exception()  # type: ignore[misc]
    return counters


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--scheduler-name", default="bench-noop",
                   help="the schedulerName of the pods to bind; several, comma-separated")
    p.add_argument("--node-selector", default="polsched.io/bench=true")
    p.add_argument("--concurrency", type=int, default=64, help="binds in flight")
    counters = asyncio.run(run(p.parse_args()))
    print(json.dumps(counters), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
