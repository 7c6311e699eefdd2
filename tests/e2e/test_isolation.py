"""Policies are isolated from each other's binds (issue 11, defect 1).

The issue's reproduction: an extender whose /bind holds on, a policy `slowbind` with
bindVerb bind, and a plain policy next to it. With one pool of bind workers for every
policy, 40 held binds filled the pool and the plain policy's 100 pods waited for them.
Here the extender holds every bind until the test lets go, so the assertion is about
order, not time: every plain pod is bound while all the slow binds it was sent are still
unanswered. The plain policy's time with and without the held binds is printed as a
ratio (for the record; wall-clock figures are not asserted).
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import time

import pytest

from polsched.cluster.client import ApiClient
from polsched.objects import Json
from polsched.scheduler.engine import Engine
from tests.conftest import Cluster, NodeFactory, unique
from tests.e2e.scheduling import RUN, eventually, nodes_ready, pod_manifest, run_engine
from tests.e2e.test_extenders import StartExtender, admin_binder, policy, start_extender

pytestmark = pytest.mark.e2e
__all__ = ["start_extender"]  # the fixture, used by name

SLOW_PODS = 40
PLAIN_PODS = 100
# The engine's bind concurrency per policy (Engine's bind_concurrency default).
LANE = int(inspect.signature(Engine.__init__).parameters["bind_concurrency"].default)


async def create_pods(client: ApiClient, ns: str, prefix: str, scheduler: str, rid: str,
                      count: int) -> list[str]:
    names = [f"{prefix}{i}" for i in range(count)]
    sem = asyncio.Semaphore(16)

    async def one(name: str) -> None:
        async with sem:
            await client.post(f"/api/v1/namespaces/{ns}/pods",
                              pod_manifest(ns, name, scheduler, rid))

    await asyncio.gather(*(one(n) for n in names))
    return names


async def bound(client: ApiClient, ns: str) -> dict[str, str]:
    got = await client.list_all(f"/api/v1/namespaces/{ns}/pods")
    return {p["metadata"]["name"]: p["spec"].get("nodeName") or ""
            for p in got.get("items") or ()}


async def all_bound(client: ApiClient, ns: str, names: list[str],
                    timeout: float = 60) -> None:
    async def done() -> bool:
        now = await bound(client, ns)
        return all(now.get(n) for n in names)

    await eventually(done, timeout, what=f"{len(names)} pods bound")


def test_held_bind_extender_does_not_slow_another_policy(
        cluster: Cluster, namespace: str, nodes: NodeFactory,
        start_extender: StartExtender) -> None:
    rid = unique("iso")
    names = [nodes(f"{rid}-{i}", labels={RUN: rid}) for i in range(3)]
    release = threading.Event()
    held = 0
    answered: list[str] = []
    lock = threading.Lock()
    admin_bind = admin_binder(cluster)

    def slow_bind(args: Json) -> Json:
        nonlocal held
        with lock:
            held += 1
        release.wait(60)
        admin_bind(args)
        with lock:
            answered.append(args["PodName"])
        return {"Error": ""}

    ext = start_extender({"/bind": slow_bind})
    slow_s, plain_s = f"{rid}-slowbind", f"{rid}-plain"
    policies = [
        policy(slow_s, {"urlPrefix": ext.url, "bindVerb": "bind", "httpTimeout": "60s"}),
        policy(plain_s),
    ]

    async def body(client: ApiClient) -> None:
        await nodes_ready(client, names)
        # Healthy baseline: the plain policy alone.
        t0 = time.monotonic()
        first = await create_pods(client, namespace, "base", plain_s, rid, PLAIN_PODS)
        await all_bound(client, namespace, first)
        healthy = time.monotonic() - t0

        await create_pods(client, namespace, "slow", slow_s, rid, SLOW_PODS)

        async def holding() -> bool:
            with lock:
                return held >= min(SLOW_PODS, LANE)

        await eventually(holding, what="the extender holding the slowbind binds")
        t1 = time.monotonic()
        plain = await create_pods(client, namespace, "plain", plain_s, rid, PLAIN_PODS)
        await all_bound(client, namespace, plain)
        stalled = time.monotonic() - t1
        # Everything above happened while every slow bind sent was still held.
        with lock:
            assert answered == []
            assert held >= min(SLOW_PODS, LANE)
        now = await bound(client, namespace)
        assert not any(now[f"slow{i}"] for i in range(SLOW_PODS))
        print(f"plain policy: {PLAIN_PODS} pods in {healthy:.2f}s healthy, {stalled:.2f}s "
              f"while {held} binds of another policy hang; throughput ratio "
              f"{healthy / stalled:.2f}")
        release.set()
        await all_bound(client, namespace, [f"slow{i}" for i in range(SLOW_PODS)])
        assert sorted(answered) == sorted(f"slow{i}" for i in range(SLOW_PODS))

    try:
        run_engine(cluster, policies, body)
    finally:
        release.set()
