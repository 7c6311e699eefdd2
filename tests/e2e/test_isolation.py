"""Policies are isolated from each other's binds (issue 11, defect 1).

The issue's reproduction: an extender whose /bind holds on, a policy `slowbind` with
bindVerb bind, and a plain policy next to it. With one pool of bind workers for every
policy, 40 held binds filled the pool and the plain policy's 100 pods waited for them.
Here the extender holds every bind until the test lets go, and two things are asserted:
- order: every plain pod is bound while all the slow binds it was sent are still
  unanswered;
- pace: the plain policy schedules as fast with the held binds as without them, as
  ratios between two batches of the same run (its per-pod attempt latency, from the
  engine's scheduler_scheduling_attempt_duration_seconds, and its batch time), within a
  generous bound (a shared pool of bind workers makes both ratios hundreds: its pods
  wait for the held binds, 60 s). No wall-clock figure is asserted on its own.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import time

import pytest

from polsched.cluster.client import ApiClient
from polsched.objects import Json
from polsched.scheduler import metrics
from polsched.scheduler.engine import Engine
from tests.conftest import Cluster, NodeFactory, unique
from tests.e2e.scheduling import RUN, eventually, nodes_ready, pod_manifest, run_engine
from tests.e2e.test_extenders import StartExtender, admin_binder, policy, start_extender

pytestmark = pytest.mark.e2e
__all__ = ["start_extender"]  # the fixture, used by name

SLOW_PODS = 40
PLAIN_PODS = 100
WARM_UP_PODS = 10
# How much slower the plain policy may be while the other one's binds hang: generous, for
# a machine shared with other work, where one batch can be slowed by something else.
MAX_SLOWDOWN = 4.0
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


def attempt_latency(profile: str) -> tuple[float, int]:
    """(sum of seconds, count) of `profile`'s scheduled attempts so far, from the pop to
    the end of the binding, as the engine exports them (scheduler.metrics)."""
    got = {"sum": 0.0, "count": 0.0}
    labels = f'{{profile="{profile}",result="{metrics.SCHEDULED}"}}'
    for line in metrics.exposition().splitlines():
        for what in got:
            if line.startswith(f"scheduler_scheduling_attempt_duration_seconds_{what}{labels} "):
                got[what] = float(line.rsplit(" ", 1)[1])
    return got["sum"], int(got["count"])


async def batch(client: ApiClient, ns: str, prefix: str, scheduler: str, rid: str,
                count: int) -> tuple[list[str], float, float]:
    """Create `count` pods and wait until all are bound: (names, seconds it took, mean
    attempt latency of the batch's pods)."""
    before = attempt_latency(scheduler)
    t0 = time.monotonic()
    names = await create_pods(client, ns, prefix, scheduler, rid, count)
    await all_bound(client, ns, names)
    took = time.monotonic() - t0

    # The attempt is observed when the binding returns, which can be just after the API
    # server shows the pod bound: wait for the last observations, then check none is extra.
    async def observed() -> bool:
        return attempt_latency(scheduler)[1] - before[1] >= count

    await eventually(observed, 30, what=f"{count} scheduled attempts observed")
    total, n = attempt_latency(scheduler)
    assert n - before[1] == count, f"{n - before[1]} attempts scheduled for {count} pods"
    return names, took, (total - before[0]) / count


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
        # Warm (the first decisions build the plugins' tables), then the healthy
        # baseline: the plain policy alone.
        await batch(client, namespace, "warm", plain_s, rid, WARM_UP_PODS)
        _, healthy, healthy_latency = await batch(client, namespace, "base", plain_s, rid,
                                                  PLAIN_PODS)

        await create_pods(client, namespace, "slow", slow_s, rid, SLOW_PODS)

        async def holding() -> bool:
            with lock:
                return held >= min(SLOW_PODS, LANE)

        await eventually(holding, what="the extender holding the slowbind binds")
        _, stalled, stalled_latency = await batch(client, namespace, "plain", plain_s, rid,
                                                  PLAIN_PODS)
        # Everything above happened while every slow bind sent was still held.
        with lock:
            assert answered == []
            assert held >= min(SLOW_PODS, LANE)
        now = await bound(client, namespace)
        assert not any(now[f"slow{i}"] for i in range(SLOW_PODS))
        print(f"plain policy: {PLAIN_PODS} pods in {healthy:.2f}s healthy, {stalled:.2f}s "
              f"while {held} binds of another policy hang (ratio {stalled / healthy:.2f}); "
              f"mean attempt {healthy_latency * 1000:.1f} ms and "
              f"{stalled_latency * 1000:.1f} ms (ratio {stalled_latency / healthy_latency:.2f})")
        assert stalled_latency <= MAX_SLOWDOWN * healthy_latency, \
            "the plain policy's attempts slowed down while another policy's binds hang"
        assert stalled <= MAX_SLOWDOWN * healthy, \
            "the plain policy's throughput fell while another policy's binds hang"
        release.set()
        await all_bound(client, namespace, [f"slow{i}" for i in range(SLOW_PODS)])
        assert sorted(answered) == sorted(f"slow{i}" for i in range(SLOW_PODS))

    try:
        run_engine(cluster, policies, body)
    finally:
        release.set()
