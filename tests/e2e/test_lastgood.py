"""The last-good record written by the reconciler, on a real SchedulingPolicy (moved from
a hand-written fake, issue 11 defect 6): each good generation recorded once, a bad edit
never, a Dedicated scheduler never; after a restart on a bad spec the recorded generation
runs and the record stays as it is."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest

from polsched.cluster.client import ApiClient
from polsched.controller.policies import conditions as cond
from polsched.controller.policies import lastgood
from polsched.controller.policies.reconciler import OperatorDuties, PolicyReconciler
from polsched.controller.policies.status import StatusWriter
from polsched.scheduler.engine import Engine
from tests.conftest import Cluster, unique
from tests.e2e.rbac import operator_kubeconfig

pytestmark = pytest.mark.e2e

PATH = "/apis/polsched.io/v1alpha1/schedulingpolicies"


def good(name: str) -> dict[str, Any]:
    return {"schedulerName": name, "filters": [{"name": "NodeLabel", "args": {
        "requirements": [{"key": "zone", "operator": "In", "values": ["a"]}]}}]}


def bad(name: str) -> dict[str, Any]:
    return {"schedulerName": name, "filters": [
        {"name": "Expression", "args": {"expression": "node.metadata.name =="}}]}


@pytest.fixture
def name(cluster: Cluster) -> Iterator[str]:
    n = unique("lastgood")
    yield n
    cluster.kubectl("delete", "spol", n, "--ignore-not-found", "--wait=false", check=False)


def put_spec(cluster: Cluster, name: str, spec: dict[str, Any],
             annotations: dict[str, str] | None = None) -> None:
    meta: dict[str, Any] = {"name": name}
    if annotations:
        meta["annotations"] = annotations
    cluster.apply({"apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
                   "metadata": meta, "spec": spec})


def run(cluster: Cluster, records: bool,
        body: Callable[[ApiClient, PolicyReconciler], Awaitable[None]]) -> None:
    async def main() -> None:
        client = ApiClient.from_kubeconfig(cluster.kubeconfig)
        # The reconciler as the operator's ServiceAccount; `body` acts as the admin.
        operator = ApiClient.from_kubeconfig(str(operator_kubeconfig(cluster)))
        engine = Engine(operator)
        writer = StatusWriter(operator, lambda _: None, enabled=False)
        r = PolicyReconciler(operator, engine, writer,
                             duties=OperatorDuties(records_last_good=records))
        try:
            await body(client, r)
        finally:
            await r.close()
            await client.close()
            await operator.close()

    asyncio.run(asyncio.wait_for(main(), 60))


async def read(client: ApiClient, name: str) -> dict[str, Any]:
    got: dict[str, Any] = await client.get(f"{PATH}/{name}")
    return got


def test_the_operator_records_each_good_generation_once(cluster: Cluster, name: str) -> None:
    put_spec(cluster, name, good(name))

    async def body(client: ApiClient, r: PolicyReconciler) -> None:
        await r.observe(await read(client, name))
        # Written in the background, off the reload's path.
        await r.last_good_recorded()
        obj = await read(client, name)
        assert lastgood.read(obj) == lastgood.LastGood(1, good(name))
        rv = obj["metadata"]["resourceVersion"]
        # Our own write comes back as a watch event: no new write.
        await r.observe(obj)
        await r.observe(obj)
        await r.last_good_recorded()
        assert (await read(client, name))["metadata"]["resourceVersion"] == rv
        # A bad edit is not recorded; the next good one is.
        put_spec(cluster, name, bad(name))
        obj = await read(client, name)
        await r.observe(obj)
        await r.last_good_recorded()
        after_bad = await read(client, name)
        assert after_bad["metadata"]["resourceVersion"] == obj["metadata"]["resourceVersion"]
        assert lastgood.read(after_bad) == lastgood.LastGood(1, good(name))
        spec3 = {**good(name), "filters": [{"name": "NodeLabel", "args": {"requirements": [
            {"key": "zone", "operator": "In", "values": ["b"]}]}}]}
        put_spec(cluster, name, spec3)
        await r.observe(await read(client, name))
        await r.last_good_recorded()
        assert lastgood.read(await read(client, name)) == lastgood.LastGood(3, spec3)

    run(cluster, True, body)


def test_a_dedicated_scheduler_does_not_write_the_record(cluster: Cluster, name: str) -> None:
    put_spec(cluster, name, good(name))

    async def body(client: ApiClient, r: PolicyReconciler) -> None:
        obj = await read(client, name)
        await r.observe(obj)
        await r.last_good_recorded()
        after = await read(client, name)
        assert after["metadata"]["resourceVersion"] == obj["metadata"]["resourceVersion"]
        assert lastgood.read(after) is None

    run(cluster, False, body)


def test_after_a_restart_on_a_bad_spec_the_recorded_generation_runs(
        cluster: Cluster, name: str) -> None:
    # Generation 1 was good and recorded; generation 2, bad, is what a new process sees.
    put_spec(cluster, name, good(name))
    put_spec(cluster, name, bad(name), {lastgood.ANNOTATION: lastgood.encode(1, good(name))})

    async def body(client: ApiClient, r: PolicyReconciler) -> None:
        obj = await read(client, name)
        assert obj["metadata"]["generation"] == 2
        await r.observe(obj)
        rec = r.book.get(name)
        assert rec is not None
        view = r._view(rec, r.book.owners())
        assert view is not None
        assert view.observed_generation == 1 and view.running == name
        ready, reconciling, stalled, valid = view.conditions
        # Generation 1 schedules, but generation 2 will not run until it is fixed: kstatus
        # Stalled, not Ready, so `kubectl wait --for=condition=Ready` does not pass on it.
        assert (ready.type, ready.status, ready.reason) == (cond.READY, False, cond.INVALID_SPEC)
        assert "runs generation 1" in ready.message and ready.observed_generation == 2
        assert (stalled.type, stalled.status) == (cond.STALLED, True)
        assert (reconciling.type, reconciling.status) == (cond.RECONCILING, False)
        assert (valid.type, valid.status, valid.reason) == \
            (cond.VALID, False, cond.INVALID_SPEC)
        assert "spec.filters[0].args.expression" in valid.message
        assert "generation 1 keeps running" in valid.message
        assert valid.observed_generation == 2
        after = await read(client, name)  # the record stays as it is
        assert after["metadata"]["resourceVersion"] == obj["metadata"]["resourceVersion"]

    run(cluster, True, body)


def test_a_reload_does_not_wait_for_the_record(cluster: Cluster, name: str) -> None:
    """The record is written off the reload's path: while its PATCH hangs, each good
    generation still runs at once; once it is answered the record names the newest good
    generation, never a bad one."""
    put_spec(cluster, name, good(name))

    async def body(client: ApiClient, r: PolicyReconciler) -> None:
        held = asyncio.Event()
        recorded: list[int] = []  # the generation of each record write sent
        real_patch = r.client.patch  # the reconciler's (the operator's) client

        async def gated_patch(path: str, patch: Any, *args: Any, **kwargs: Any) -> Any:
            if path == f"{PATH}/{name}":
                rec = lastgood.read(patch)
                recorded.append(rec.generation if rec is not None else 0)
                await held.wait()  # a slow API server: the write hangs until released
            return await real_patch(path, patch, *args, **kwargs)

        r.client.patch = gated_patch  # type: ignore[method-assign,assignment]
        await r.observe(await read(client, name))
        assert r.engine.stats(name).observed_generation == 1
        spec2 = {**good(name), "filters": [{"name": "NodeLabel", "args": {"requirements": [
            {"key": "zone", "operator": "In", "values": ["b"]}]}}]}
        put_spec(cluster, name, spec2)
        await r.observe(await read(client, name))
        # Generation 2 runs while generation 1's record is still being written.
        assert r.engine.stats(name).observed_generation == 2
        put_spec(cluster, name, bad(name))
        await r.observe(await read(client, name))
        assert r.engine.stats(name).observed_generation == 2  # the bad one never runs
        assert recorded == [1]  # one write at a time
        held.set()
        await r.last_good_recorded()
        assert recorded == [1, 2]
        obj = await read(client, name)
        assert obj["metadata"]["generation"] == 3
        assert lastgood.read(obj) == lastgood.LastGood(2, spec2)

    run(cluster, True, body)
