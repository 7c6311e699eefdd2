"""Each example in policies/ does what its header says, on a real API server: the engine
loads the file as it is (only schedulerName made unique) and binds pods to kwok nodes."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from collections import Counter

import pytest

from polsched.cluster.client import ApiClient
from tests.conftest import ROOT, Cluster, NodeFactory, unique
from tests.e2e.scheduling import (
    RUN,
    bound_node,
    example,
    failed_scheduling,
    nodes_ready,
    pod_manifest,
    run_engine,
)

pytestmark = pytest.mark.e2e


def pods_path(ns: str) -> str:
    return f"/api/v1/namespaces/{ns}/pods"


def test_label_priority(cluster: Cluster, namespace: str, nodes: NodeFactory) -> None:
    rid = unique("lp")
    key = "priority.lixueduan.com"
    hi = nodes(f"{rid}-hi", labels={RUN: rid, key: "9"})
    lo = nodes(f"{rid}-lo", labels={RUN: rid, key: "3"})
    bare = nodes(f"{rid}-bare", labels={RUN: rid})
    policy = example("label-priority.yaml", rid)

    async def body(client: ApiClient) -> None:
        await nodes_ready(client, [hi, lo, bare])
        for i in range(3):
            await client.post(pods_path(namespace), pod_manifest(namespace, f"p{i}", rid, rid))
            assert await bound_node(client, namespace, f"p{i}") == hi

    run_engine(cluster, [policy], body)


def test_cel_rules(cluster: Cluster, namespace: str, nodes: NodeFactory) -> None:
    rid = unique("cel")
    short = nodes(f"{rid}-a", labels={RUN: rid})
    long = nodes(f"{rid}-aaaaaa", labels={RUN: rid})
    policy = example("cel-rules.yaml", rid)
    rule = {"cel-rule": "short-name"}

    async def body(client: ApiClient) -> None:
        await nodes_ready(client, [short, long])
        # The node-name scorer: the shorter name wins.
        await client.post(pods_path(namespace), pod_manifest(namespace, "abc", rid, rid,
                                                             labels=rule))
        assert await bound_node(client, namespace, "abc") == short
        # The pod-name-length filter applies to labelled pods only.
        await client.post(pods_path(namespace), pod_manifest(namespace, "too-long", rid, rid,
                                                             labels=rule))
        await client.post(pods_path(namespace), pod_manifest(namespace, "long-but-free",
                                                             rid, rid))
        assert await bound_node(client, namespace, "long-but-free") == short
        note = await failed_scheduling(client, namespace, "too-long")
        assert "pod name is longer than 5" in note
        pod = await client.get(f"{pods_path(namespace)}/too-long")
        assert not pod["spec"].get("nodeName")

    run_engine(cluster, [policy], body)


def test_bin_packing(cluster: Cluster, namespace: str, nodes: NodeFactory) -> None:
    rid = unique("bp")
    a = nodes(f"{rid}-a", cpu="4", labels={RUN: rid})
    b = nodes(f"{rid}-b", cpu="4", labels={RUN: rid})
    policy = example("bin-packing.yaml", rid)

    async def body(client: ApiClient) -> None:
        await nodes_ready(client, [a, b])
        # b already runs 2 cpu worth of pods (bound directly, as another scheduler would).
        busy = pod_manifest(namespace, "busy", "other", rid, cpu="2", nodeName=b)
        await client.post(pods_path(namespace), busy)
        for i in range(2):
            await client.post(pods_path(namespace),
                              pod_manifest(namespace, f"p{i}", rid, rid, cpu="500m"))
            # MostAllocated: the busier node, until it is full
            assert await bound_node(client, namespace, f"p{i}") == b

    run_engine(cluster, [policy], body)


def test_zone_spread(cluster: Cluster, namespace: str, nodes: NodeFactory) -> None:
    rid = unique("zs")
    zone = "topology.kubernetes.io/zone"
    in_a = [nodes(f"{rid}-a{i}", labels={RUN: rid, zone: f"{rid}-a"}) for i in range(3)]
    in_b = [nodes(f"{rid}-b0", labels={RUN: rid, zone: f"{rid}-b"})]
    policy = example("zone-spread.yaml", rid)
    constraint = [{"maxSkew": 1, "topologyKey": zone, "whenUnsatisfiable": "ScheduleAnyway",
                   "labelSelector": {"matchLabels": {"app": rid}}}]

    async def body(client: ApiClient) -> None:
        await nodes_ready(client, in_a + in_b)
        placed: list[str] = []
        for i in range(4):
            await client.post(pods_path(namespace), pod_manifest(
                namespace, f"web{i}", rid, rid, labels={"app": rid},
                topologySpreadConstraints=constraint))
            placed.append(await bound_node(client, namespace, f"web{i}"))
        # Spreading by node would put 3 of 4 in zone a; by zone it is 2 and 2.
        zones = Counter("a" if n in in_a else "b" for n in placed)
        assert zones == {"a": 2, "b": 2}, placed

    run_engine(cluster, [policy], body)


def test_gpu_isolation(cluster: Cluster, namespace: str, nodes: NodeFactory) -> None:
    rid = unique("gpu")
    gpu = nodes(f"{rid}-gpu", labels={RUN: rid, "nvidia.com/gpu.present": "true"},
                taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}])
    cpu = nodes(f"{rid}-cpu", labels={RUN: rid})
    policy = example("gpu-isolation.yaml", rid)
    toleration = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]

    async def body(client: ApiClient) -> None:
        await nodes_ready(client, [gpu, cpu])
        for i in range(2):
            await client.post(pods_path(namespace), pod_manifest(
                namespace, f"train{i}", rid, rid, labels={"workload": "gpu"},
                tolerations=toleration))
            await client.post(pods_path(namespace), pod_manifest(namespace, f"web{i}",
                                                                 rid, rid))
        for i in range(2):
            assert await bound_node(client, namespace, f"train{i}") == gpu
            assert await bound_node(client, namespace, f"web{i}") == cpu

    run_engine(cluster, [policy], body)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_extender_want_you(cluster: Cluster, namespace: str, nodes: NodeFactory) -> None:
    rid = unique("ext")
    chosen = nodes(f"{rid}-chosen", labels={RUN: rid})
    other = nodes(f"{rid}-other", labels={RUN: rid})
    port = _free_port()
    policy = example("extender/policy.yaml", rid)
    policy["spec"]["extenders"][0]["urlPrefix"] = f"http://127.0.0.1:{port}/"
    proc = subprocess.Popen([sys.executable, str(ROOT / "policies/extender/example_extender.py"),
                             "--port", str(port), "--node", chosen],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=os.environ.copy())

    async def body(client: ApiClient) -> None:
        await nodes_ready(client, [chosen, other])
        for _ in range(50):  # the extender is up
            try:
                _, w = await asyncio.open_connection("127.0.0.1", port)
                w.close()
                break
            except OSError:
                await asyncio.sleep(0.1)
        for i in range(3):
            await client.post(pods_path(namespace), pod_manifest(
                namespace, f"want{i}", rid, rid, labels={"want": "you"}))
        for i in range(3):
            assert await bound_node(client, namespace, f"want{i}") == chosen

    try:
        run_engine(cluster, [policy], body)
    finally:
        proc.terminate()
        proc.wait(10)
