"""The status writer against the real API server (moved from a hand-written fake,
issue 11 defect 6): batching many engine notifications into few PATCHes of the status
subresource, the last count written, a new pipeline written at once, nothing written
while disabled."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest

from polsched.cluster.client import ApiClient
from polsched.controller.policies.conditions import Condition
from polsched.controller.policies.status import StatusView, StatusWriter
from polsched.scheduler.engine import SchedulerStats
from tests.conftest import Cluster, unique
from tests.e2e.scheduling import eventually

pytestmark = pytest.mark.e2e

READY = Condition("Ready", True, "Running", "runs", 3)
PATH = "/apis/polsched.io/v1alpha1/schedulingpolicies"


def stats(binds: int = 0, bound: int = 0, generation: int = 3) -> SchedulerStats:
    return SchedulerStats("s", bound, 0, binds, 0, "2026-01-01T00:00:00Z", generation,
                          {"filters": ["NodeLabel"], "scorers": [], "extenders": []})


@pytest.fixture
def policy(cluster: Cluster) -> Iterator[str]:
    name = unique("status")
    cluster.apply({"apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
                   "metadata": {"name": name}, "spec": {"schedulerName": name}})
    yield name
    cluster.kubectl("delete", "spol", name, "--ignore-not-found", "--wait=false", check=False)


def run(cluster: Cluster, body: Callable[[ApiClient], Awaitable[None]]) -> None:
    async def main() -> None:
        client = ApiClient.from_kubeconfig(cluster.kubeconfig)
        try:
            await body(client)
        finally:
            await client.close()

    asyncio.run(asyncio.wait_for(main(), 60))


async def status(client: ApiClient, name: str) -> dict[str, Any]:
    got: dict[str, Any] = (await client.get(f"{PATH}/{name}")).get("status") or {}
    return got


def test_many_notifications_few_patches_and_the_last_count_written(
        cluster: Cluster, policy: str) -> None:
    async def body(client: ApiClient) -> None:
        current = {"binds": 0}
        writer = StatusWriter(client, lambda _: stats(binds=current["binds"],
                                                      bound=current["binds"]), interval=0.2)
        view = StatusView(policy, "s", 3, None, (READY,))
        writer.update(policy, view, {})

        async def first() -> bool:
            return writer.writes == 1

        await eventually(first, what="the first (urgent) write")
        for _ in range(500):  # 500 binds, each notifying
            current["binds"] += 1
            writer.touch(policy)
            await asyncio.sleep(0)

        async def written() -> bool:
            return (await status(client, policy)).get("bindsTotal") == 500

        await eventually(written, what="bindsTotal 500 on the object")
        await writer.close()
        s = await status(client, policy)
        assert s["boundPods"] == 500 and s["observedGeneration"] == 3
        assert writer.writes <= 4, writer.writes

    run(cluster, body)


def test_a_new_pipeline_is_written_without_waiting_for_the_interval(
        cluster: Cluster, policy: str) -> None:
    async def body(client: ApiClient) -> None:
        gen = {"g": 3}
        writer = StatusWriter(client, lambda _: stats(generation=gen["g"]), interval=60.0)
        writer.update(policy, StatusView(policy, "s", 3, None, (READY,)), {})

        async def observed(g: int) -> bool:
            return (await status(client, policy)).get("observedGeneration") == g

        await eventually(lambda: observed(3), what="observedGeneration 3")
        gen["g"] = 4
        writer.update(policy, StatusView(policy, "s", 4, None, (READY,)), {})
        # Within the 60 s interval: only an urgent write can do it.
        await eventually(lambda: observed(4), timeout=10, what="observedGeneration 4")
        writer.drop(policy)

    run(cluster, body)


def test_a_disabled_writer_writes_nothing_until_enabled(cluster: Cluster,
                                                        policy: str) -> None:
    async def body(client: ApiClient) -> None:
        writer = StatusWriter(client, lambda _: stats(binds=7), enabled=False)
        writer.update(policy, StatusView(policy, "s", 3, None, (READY,)), {})
        before = (await client.get(f"{PATH}/{policy}"))["metadata"]["resourceVersion"]
        await writer.flush_all()  # disabled: a no-op
        await asyncio.sleep(0.3)  # the writer's task had its chance to (wrongly) write
        after = (await client.get(f"{PATH}/{policy}"))["metadata"]["resourceVersion"]
        assert before == after and writer.writes == 0
        writer.set_enabled(True)

        async def written() -> bool:
            return (await status(client, policy)).get("bindsTotal") == 7

        await eventually(written, what="the write once enabled")
        writer.drop(policy)

    run(cluster, body)
