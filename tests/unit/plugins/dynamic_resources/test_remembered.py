"""What DynamicResources keeps across scheduling cycles must decide as a fresh plugin does:
the listers' change journal, the allocated-devices index (AllocatedIndex) and the
allocator's per-node memo (SliceIndex.memo, keyed by the pools' versions). A long-lived
plugin and a plugin built anew for every pod filter the same pods over the same
listers, while claims are allocated, freed, deleted and put in flight."""

from __future__ import annotations

import random
from typing import Any

import pytest

from polsched.dra.allocator import AllocatedState
from polsched.framework import NodeInfo, PodInfo, Snapshot
from polsched.framework import listers as ls
from polsched.framework.cycle_state import CycleState
from polsched.framework.listers import Listers
from polsched.plugins.dynamic_resources.allocated import AllocatedIndex, add_allocation
from polsched.plugins.dynamic_resources.plugin import DynamicResources
from tests.builders import make_node, make_pod

pytestmark = pytest.mark.unit

DRIVER = "gpu.example.com"
NODES = [f"node-{i}" for i in range(6)]


def device_class() -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": "gpu"},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}}


def slice_(node: str, devices: int) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-slice"},
            "spec": {"driver": DRIVER, "nodeName": node,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": f"gpu-{d}",
                                  "attributes": {"index": {"int": d}}}
                                 for d in range(devices)]}}


def claim(name: str, count: int, allocation: dict[str, Any] | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": "gpu", "count": count,
            "selectors": [{"cel": {
                "expression": f'device.attributes["{DRIVER}"].index >= 0'}}]}}]}}}
    if allocation is not None:
        obj["status"] = {"allocation": allocation}
    return obj


def pod(name: str, claim_name: str) -> PodInfo:
    return (make_pod().name(name).namespace("default").uid(f"uid-{name}").container(image="x")
            .resource_claim("gpu", resourceClaimName=claim_name).info())


def node_info(name: str) -> NodeInfo:
    return (make_node().name(name).label("zone", name[-1])
            .allocatable({"cpu": "4", "pods": "110"}).info())


def filter_all(plugin: DynamicResources, p: PodInfo, nodes: list[NodeInfo]
               ) -> tuple[CycleState, dict[str, tuple[str, str, Any]]]:
    state = CycleState()
    st = plugin.pre_filter(state, p, Snapshot(nodes))
    assert st.ok, st.message
    out = {}
    for n in nodes:
        f = plugin.filter(state, p, n)
        s = state.get("PreFilterDynamicResources")
        out[n.name] = (f.code.name, f.message, s.by_node.get(n.name))
    return state, out


def test_a_long_lived_plugin_filters_as_a_fresh_one() -> None:
    rng = random.Random(28)
    listers = Listers()
    listers.apply(ls.DEVICE_CLASS, "ADDED", device_class())
    for i, n in enumerate(NODES):
        listers.apply(ls.RESOURCE_SLICE, "ADDED", slice_(n, 2 + i % 3))
    nodes = [node_info(n) for n in NODES]
    kept = DynamicResources(listers, None)
    allocated: list[str] = []
    compared = in_flight = 0
    for k in range(160):
        op = rng.random()
        if allocated and op < 0.25:  # free a claim's devices: deallocate or delete it
            name = allocated.pop(rng.randrange(len(allocated)))
            old = listers.get(ls.RESOURCE_CLAIM, name, "default")
            assert old is not None
            if rng.random() < 0.5:
                listers.apply(ls.RESOURCE_CLAIM, "DELETED", old)
            else:
                listers.apply(ls.RESOURCE_CLAIM, "MODIFIED", {**old, "status": {}})
            continue
        name = f"claim-{k}"
        listers.apply(ls.RESOURCE_CLAIM, "ADDED", claim(name, rng.choice((1, 1, 2))))
        p = pod(f"pod-{k}", name)
        state, got = filter_all(kept, p, nodes)
        _, want = filter_all(DynamicResources(listers, None), p, nodes)
        assert got == want, k
        compared += 1
        fits = sorted(n for n, (code, _msg, _res) in got.items() if code == "SUCCESS")
        if not fits:
            listers.apply(ls.RESOURCE_CLAIM, "DELETED", listers.get(
                ls.RESOURCE_CLAIM, name, "default") or {})
            continue
        chosen = rng.choice(fits)
        if rng.random() < 0.3:
            # In flight: reserved, not yet written (both plugins share the tracker).
            assert kept.reserve(state, p, chosen).ok
            in_flight += 1
            probe = f"probe-{k}"
            listers.apply(ls.RESOURCE_CLAIM, "ADDED", claim(probe, 1))
            pp = pod(probe, probe)
            _, got = filter_all(kept, pp, nodes)
            _, want = filter_all(DynamicResources(listers, None), pp, nodes)
            assert got == want, f"{k} with an allocation in flight"
            listers.apply(ls.RESOURCE_CLAIM, "DELETED", listers.get(
                ls.RESOURCE_CLAIM, probe, "default") or {})
            kept.unreserve(state, p, chosen)
        alloc = state.get("PreFilterDynamicResources").by_node[chosen][0]
        old = listers.get(ls.RESOURCE_CLAIM, name, "default")
        assert old is not None
        listers.apply(ls.RESOURCE_CLAIM, "MODIFIED", {**old, "status": {"allocation": alloc}})
        allocated.append(name)
    assert compared > 100 and in_flight > 10


def fresh_state(listers: Listers) -> tuple[set[Any], set[str]]:
    state = AllocatedState()
    uids = set()
    for raw in listers.objects[ls.RESOURCE_CLAIM.name].values():
        alloc = (raw.get("status") or {}).get("allocation")
        if alloc is not None:
            uids.add(raw["metadata"]["uid"])
            add_allocation(state, alloc)
    return state.devices, uids


@pytest.mark.parametrize("journal", [4096, 3])
def test_the_allocated_index_follows_the_claims(monkeypatch: pytest.MonkeyPatch,
                                                journal: int) -> None:
    """Claims added, reallocated, deallocated and deleted, two at a time or many between
    two refreshes (a journal of 3 runs out and the index walks every claim)."""
    monkeypatch.setattr(ls, "JOURNAL_LENGTH", journal)
    rng = random.Random(journal)
    listers = Listers()
    index = AllocatedIndex()
    versions: dict[tuple[str, str], int] = {}
    devices_then: dict[tuple[str, str], frozenset[Any]] = {}
    for step in range(300):
        for _ in range(rng.choice((1, 2, 9))):
            name = f"c{rng.randrange(40)}"
            old = listers.get(ls.RESOURCE_CLAIM, name, "default")
            if old is not None and rng.random() < 0.3:
                listers.apply(ls.RESOURCE_CLAIM, "DELETED", old)
                continue
            alloc = None
            if rng.random() < 0.7:
                node = rng.choice(NODES)
                alloc = {"devices": {"results": [
                    {"request": "gpu", "driver": DRIVER, "pool": node,
                     "device": f"gpu-{rng.randrange(3)}"}]}}
            listers.apply(ls.RESOURCE_CLAIM, "MODIFIED" if old else "ADDED",
                          claim(name, 1, alloc))
        index.refresh(listers)
        want_devices, want_uids = fresh_state(listers)
        assert index.devices == want_devices, step
        assert index.uids == want_uids, step
        state = index.state()
        assert state.pool_versions is not None
        # A pool keeps its version exactly while its allocated devices stay the same.
        for pool in NODES:
            pid = (DRIVER, pool)
            now = frozenset(d for d in want_devices if d[:2] == pid)
            v = state.pool_versions.get(pid, 0)
            if pid in versions and versions[pid] == v:
                assert devices_then[pid] == now, (step, pool)
            versions[pid] = v
            devices_then[pid] = now


def test_the_journal_names_what_changed_since_a_generation(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ls, "JOURNAL_LENGTH", 4)
    listers = Listers()
    assert listers.changed_since(ls.RESOURCE_CLAIM, 0) == []
    for i in range(3):
        listers.apply(ls.RESOURCE_CLAIM, "ADDED", claim(f"c{i}", 1))
    assert listers.changed_since(ls.RESOURCE_CLAIM, 1) == ["default/c1", "default/c2"]
    listers.apply(ls.RESOURCE_CLAIM, "DELETED", claim("c0", 1))
    assert listers.changed_since(ls.RESOURCE_CLAIM, 3) == ["default/c0"]
    assert listers.changed_since(ls.RESOURCE_SLICE, 0) == []
    for i in range(10):  # past 2 x JOURNAL_LENGTH: the oldest changes are forgotten
        listers.apply(ls.RESOURCE_CLAIM, "ADDED", claim(f"d{i}", 1))
    assert listers.changed_since(ls.RESOURCE_CLAIM, 0) is None
    gen = listers.generations[ls.RESOURCE_CLAIM.name]
    assert listers.changed_since(ls.RESOURCE_CLAIM, gen - 2) == ["default/d8", "default/d9"]
    assert listers.changed_since(ls.RESOURCE_CLAIM, gen) == []
    assert listers.changed_since(ls.RESOURCE_CLAIM, gen + 1) is None


def test_settle_finds_in_flight_claims_by_key() -> None:
    """An allocation PreBind wrote leaves the tracker once the cache has the claim at
    that resourceVersion, or once the claim under that name is gone or another one."""
    listers = Listers()
    listers.apply(ls.DEVICE_CLASS, "ADDED", device_class())
    listers.apply(ls.RESOURCE_SLICE, "ADDED", slice_("node-0", 2))
    plugin = DynamicResources(listers, None)
    for name in ("a", "b", "c"):
        listers.apply(ls.RESOURCE_CLAIM, "ADDED",
                      {**claim(name, 1), "metadata": {**claim(name, 1)["metadata"],
                                                      "resourceVersion": "5"}})
    states = {}
    for name in ("a", "b"):
        p = pod(f"pod-{name}", name)
        state, got = filter_all(plugin, p, [node_info("node-0")])
        assert got["node-0"][0] == "SUCCESS"
        assert plugin.reserve(state, p, "node-0").ok
        states[name] = state
    tracker = plugin.tracker
    assert tracker.in_flight["uid-a"].key == "default/a"
    tracker.in_flight["uid-a"].written_rv = "7"
    tracker.in_flight["uid-b"].written_rv = "7"
    tracker.settle(listers)
    assert set(tracker.in_flight) == {"uid-a", "uid-b"}  # the cache is still at 5
    old = listers.get(ls.RESOURCE_CLAIM, "a", "default") or {}
    listers.apply(ls.RESOURCE_CLAIM, "MODIFIED",
                  {**old, "metadata": {**old["metadata"], "resourceVersion": "7"}})
    listers.apply(ls.RESOURCE_CLAIM, "MODIFIED",  # b deleted and made again: another uid
                  {**claim("b", 1), "metadata": {**claim("b", 1)["metadata"],
                                                 "uid": "uid-b2", "resourceVersion": "9"}})
    tracker.settle(listers)
    assert tracker.in_flight == {}
