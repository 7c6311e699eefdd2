"""Helpers for e2e tests that run the engine on example policies: load a policies/ file
under a unique schedulerName, run an Engine in its own loop, create pods, wait for binds.
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import yaml

from polsched.api import load_policy
from polsched.cluster.client import ApiClient
from polsched.extender.client import HTTPExtender
from polsched.objects import Json
from polsched.plugins import CATALOG
from polsched.scheduler.engine import Engine
from tests.builders import make_pod
from tests.conftest import ROOT, Cluster, unique
from tests.e2e.rbac import operator_kubeconfig

RUN = "e2e.polsched.io/run"


def example(path: str, scheduler_name: str) -> Json:
    """The SchedulingPolicy in policies/`path`, renamed to `scheduler_name`."""
    doc = yaml.safe_load((ROOT / "policies" / path).read_text())
    doc = copy.deepcopy(doc)
    doc["metadata"] = {"name": scheduler_name, "generation": 1, "uid": unique("uid")}
    doc["spec"]["schedulerName"] = scheduler_name
    return dict(doc)


def run_engine(cluster: Cluster, policies: list[Json],
               body: Callable[[ApiClient], Awaitable[None]]) -> None:
    async def main() -> None:
        client = ApiClient.from_kubeconfig(cluster.kubeconfig)
        # The engine runs as the operator's ServiceAccount; `body` acts as the admin.
        engine_client = ApiClient.from_kubeconfig(str(operator_kubeconfig(cluster)))
        engine = Engine(engine_client)
        extenders: list[HTTPExtender] = []
        try:
            await engine.start()
            for p in policies:
                loaded = load_policy(p, CATALOG)
                # As the operator's reconciler: one HTTPExtender per spec.extenders entry.
                exts = [HTTPExtender(cfg) for cfg in loaded.extenders]
                extenders.extend(exts)
                engine.apply(loaded, extenders=exts)
            await body(client)
        finally:
            await engine.stop()
            for e in extenders:
                await e.close()
            await client.close()
            await engine_client.close()

    asyncio.run(main())


def pod_manifest(ns: str, name: str, scheduler: str, run_id: str, cpu: str | None = None,
                 labels: dict[str, str] | None = None, **spec: Any) -> Json:
    # Every pod selects its test's nodes: other tests' nodes never take part.
    selector = {RUN: run_id, **spec.pop("nodeSelector", {})}
    return (make_pod().typed().name(name).namespace(ns).labels(labels or {})
            .scheduler(scheduler)
            .container(image="busybox", requests={"cpu": cpu} if cpu else None)
            .node_selector(selector).zero_termination_grace_period().spec(**spec).obj())


async def eventually(check: Callable[[], Awaitable[Any]], timeout: float = 30,
                     what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = await check()
        if last:
            return last
        await asyncio.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


async def bound_node(client: ApiClient, ns: str, name: str, timeout: float = 30) -> str:
    async def node() -> str:
        pod = await client.get(f"/api/v1/namespaces/{ns}/pods/{name}")
        return str(pod["spec"].get("nodeName") or "")

    return str(await eventually(node, timeout, what=f"pod {ns}/{name} bound"))


async def failed_scheduling(client: ApiClient, ns: str, name: str) -> str:
    async def note() -> str:
        got = await client.get(f"/apis/events.k8s.io/v1/namespaces/{ns}/events")
        for e in got.get("items") or ():
            if e.get("reason") == "FailedScheduling" and e["regarding"]["name"] == name:
                return str(e.get("note") or "")
        return ""

    return str(await eventually(note, what=f"FailedScheduling for {ns}/{name}"))


async def nodes_ready(client: ApiClient, names: list[str], timeout: float = 60) -> None:
    """Wait until kwok has made the nodes Ready, as a kubelet would. (Scheduling does not
    need it; a test that waits sees the cluster as a user would.)"""
    async def ready() -> bool:
        for name in names:
            node = await client.get(f"/api/v1/nodes/{name}")
            conds = {c["type"]: c["status"] for c in node["status"].get("conditions") or ()}
            if conds.get("Ready") != "True":
                return False
        return True

    await eventually(ready, timeout, what=f"nodes {names} Ready")


def write_yaml(path: Path, docs: list[Json]) -> str:
    path.write_text(yaml.safe_dump_all(docs))
    return str(path)
