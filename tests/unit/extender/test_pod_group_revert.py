"""The pod-group algorithm's revert runs whatever happens: a cycle cancelled while a real
HTTP filter extender keeps the second member waiting leaves nothing of the first member
assumed or reserved (scheduler.schedule_one_podgroup.pod_group_algorithm's try/finally)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from polsched.api import load_policy
from polsched.cluster.cache import ClusterCache
from polsched.extender.client import HTTPExtender
from polsched.framework.interfaces import Handle, PodGroupInfo
from polsched.objects import Json
from polsched.plugins import CATALOG
from polsched.scheduler.pipelines import build_pipeline
from polsched.scheduler.schedule_one_podgroup import pod_group_algorithm
from tests import builders
from tests.unit.extender.conftest import StartExtender
from tests.unit.extender.fake_extender import config, run


def test_a_cancelled_group_cycle_reverts_what_it_assumed(
        start_extender: StartExtender) -> None:
    calls = 0
    second_called = threading.Event()
    release = threading.Event()

    def filter_(args: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls > 1:  # the second member: no answer until the test ends
            second_called.set()
            release.wait(20)
        return {"NodeNames": args["NodeNames"]}

    server = start_extender({"/filter": filter_})
    cache = ClusterCache(None)
    cache.pod_groups.served = True
    cache.on_node_event("ADDED", {"metadata": {"name": "n0"}, "spec": {},
                                  "status": {"allocatable": {"cpu": "4", "pods": "110"}}})
    group: Json = {"metadata": {"name": "g", "namespace": "ns"},
                   "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}}}
    cache.on_pod_group_event("ADDED", group)
    for i in range(2):
        cache.on_pod_event("ADDED", builders.make_pod().name(f"m{i}").namespace("ns")
                           .uid(f"uid-m{i}").pod_group("g")
                           .container(image="x", requests={"cpu": "1"}).obj())
    ext = HTTPExtender(config(server.url, filter_verb="filter", node_cache_capable=True))
    pipeline = build_pipeline(load_policy({
        "apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
        "metadata": {"name": "s"}, "spec": {}}, CATALOG),
        Handle(listers=cache.listers, pod_groups=cache.pod_groups), [ext])

    async def main() -> None:
        pods = [cache.pods["ns/m0"], cache.pods["ns/m1"]]
        task = asyncio.create_task(pod_group_algorithm(
            pipeline, cache, PodGroupInfo("ns", "g", group), pods))
        while not second_called.is_set():
            await asyncio.sleep(0.01)
        # The first member is assumed (and counted in its group) while the second waits.
        assert cache.is_assumed("ns/m0")
        assert cache.pod_groups.state("ns/g").scheduled_pods_count == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        release.set()
        await ext.close()

    run(main())
    assert not cache.is_assumed("ns/m0") and not cache.is_assumed("ns/m1")
    assert cache.pod_groups.state("ns/g").scheduled_pods_count == 0
    assert not cache.snapshot.nodes[0].pods
