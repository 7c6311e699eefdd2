#!/usr/bin/env python3
"""The bench extender: a kube-scheduler extender (k8s.io/kube-scheduler/extender/v1) on
aiohttp that answers from node names alone, so both schedulers pay the same, small cost
per call and the bench measures the scheduler's side of the exchange.

  filter      (nodeCacheCapable: NodeNames in, NodeNames out) rejects every bench node
              whose number is a multiple of 10, with a reason in FailedNodes.
  prioritize  scores a node (its number mod 11): 0..10, MaxExtenderPriority.

  python bench/extender.py --port 0     # prints "ready <port>" once listening

On SIGTERM it prints a JSON line with the number of calls per verb.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from typing import Any

from aiohttp import web

REASON = "the bench extender rejects every tenth node"


def node_number(name: str) -> int:
    digits = name.rsplit("-", 1)[-1]
    return int(digits) if digits.isdigit() else 1


def _names(args: dict[str, Any]) -> list[str]:
    names = args.get("NodeNames") or args.get("nodenames") or args.get("nodeNames")
    if isinstance(names, list):
        return [n for n in names if isinstance(n, str)]
    items = (args.get("Nodes") or {}).get("items") or []
    return [(n.get("metadata") or {}).get("name", "") for n in items]


def make_app(calls: dict[str, int]) -> web.Application:
    async def filter_(request: web.Request) -> web.Response:
        calls["filter"] += 1
        names = _names(await request.json())
        kept = [n for n in names if node_number(n) % 10 != 0]
        failed = {n: REASON for n in names if node_number(n) % 10 == 0}
        return web.json_response({"NodeNames": kept, "FailedNodes": failed, "Error": ""})

    async def prioritize(request: web.Request) -> web.Response:
        calls["prioritize"] += 1
        names = _names(await request.json())
        return web.json_response([{"Host": n, "Score": node_number(n) % 11} for n in names])

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/filter", filter_)
    app.router.add_post("/prioritize", prioritize)
    return app


async def serve(host: str, port: int) -> dict[str, int]:
    calls = {"filter": 0, "prioritize": 0}
    runner = web.AppRunner(make_app(calls), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=1024)
    await site.start()
    port = runner.addresses[0][1]  # the port the OS picked for --port 0
    print(f"ready {port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    await stop.wait()
    await runner.cleanup()
    return calls


def main() -> int:
    p = argparse.ArgumentParser(description="bench extender (filter + prioritize)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    a = p.parse_args()
    print(json.dumps(asyncio.run(serve(a.host, a.port))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
