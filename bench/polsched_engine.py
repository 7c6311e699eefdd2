#!/usr/bin/env python3
"""Run polsched's scheduling Engine for one SchedulingPolicy file, without the operator.

The bench uses this only while `polsched run` is missing: the same cache, queue, pipeline
and binder as the operator's Shared mode, but no policy status (so no hot reload).

  python bench/polsched_engine.py --kubeconfig K --policy policy.yaml

Prints "ready" once the cache has synced; stops on SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

import yaml

from polsched.api import load_policy
from polsched.cluster.client import ApiClient
from polsched.extender import HTTPExtender
from polsched.plugins import CATALOG
from polsched.scheduler.engine import Engine


async def run(args: argparse.Namespace) -> None:
    with open(args.policy) as f:
        obj = yaml.safe_load(f)
    obj.setdefault("metadata", {}).setdefault("generation", 1)
    policy = load_policy(obj, CATALOG)
    async with ApiClient.from_kubeconfig(args.kubeconfig) as client:
        engine = Engine(client, identity="polsched-bench")
        engine.apply(policy, extenders=[HTTPExtender(c) for c in policy.extenders])
        await engine.start()
        print("ready", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        loop.add_signal_handler(signal.SIGINT, stop.set)
        await stop.wait()
        await engine.stop()


def main() -> int:
    p = argparse.ArgumentParser(description="one polsched Engine for one policy file")
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--policy", required=True)
    asyncio.run(run(p.parse_args()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
