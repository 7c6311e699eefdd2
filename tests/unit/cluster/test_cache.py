"""ClusterCache accounting fed with plain watch events, after kube-scheduler's
pkg/scheduler/backend/cache/cache_test.go (assume, forget, confirm by the informer's add,
remove on delete) and the scheduler's event handlers (eventhandlers.go)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from polsched.cluster.cache import CacheListener, ClusterCache
from polsched.framework.types import NodeInfo, PodInfo
from tests.builders import make_node, make_pod

pytestmark = pytest.mark.unit


def node(name: str, cpu: str = "4", images: tuple[str, ...] = (), **labels: str) -> dict[str, Any]:
    return (make_node().name(name).labels(labels).resource_version("1").spec()
            .allocatable({"cpu": cpu, "memory": "8Gi", "pods": "110"})
            .images(dict.fromkeys(images, 1000)).obj())


def pod(name: str, cpu: str = "500m", node_name: str = "", phase: str = "Pending",
        uid: str = "", rv: str = "1", scheduler: str = "s") -> dict[str, Any]:
    p = (make_pod().name(name).namespace("ns").uid(uid or f"uid-{name}").resource_version(rv)
         .scheduler(scheduler).container(image="img", requests={"cpu": cpu}).phase(phase))
    if node_name:
        p.node(node_name)
    return p.obj()


class Recorder(CacheListener):
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def pending_pod_changed(self, pod: PodInfo, old: PodInfo | None) -> None:
        self.calls.append(("pending", pod.name))

    def pending_pod_removed(self, pod: PodInfo) -> None:
        self.calls.append(("pending-removed", pod.name))

    def assigned_pod_added(self, pod: PodInfo) -> None:
        self.calls.append(("assigned", pod.name))

    def assigned_pod_removed(self, pod: PodInfo) -> None:
        self.calls.append(("assigned-removed", pod.name))

    def node_changed(self, node: NodeInfo, added: bool) -> None:
        self.calls.append(("node-added" if added else "node-updated", node.name))


@pytest.fixture
def cache() -> ClusterCache:
    c = ClusterCache(None)
    c.on_node_event("ADDED", node("n1"))
    c.on_node_event("ADDED", node("n2"))
    return c


def cpu(c: ClusterCache, name: str) -> int:
    info = c.snapshot.get(name)
    assert info is not None
    return info.requested.get("cpu", 0)


def test_assume_counts_at_once_and_the_bound_pod_confirms_without_double_counting(
        cache: ClusterCache) -> None:
    cache.on_pod_event("ADDED", pod("p"))
    assumed = cache.assume(cache.pods["ns/p"], "n1")
    assert cpu(cache, "n1") == 500 and cache.is_assumed("ns/p")
    assert assumed.node_name == "n1"
    cache.on_pod_event("MODIFIED", pod("p", node_name="n1", rv="2"))
    assert cpu(cache, "n1") == 500
    assert not cache.is_assumed("ns/p")
    n1 = cache.snapshot.get("n1")
    assert n1 is not None and list(n1.pods) == ["ns/p"]
    cache.forget(assumed)  # a late forget after confirmation changes nothing
    assert cpu(cache, "n1") == 500
    assert cache.bound_pods("s") == 1 and cache.pending_pods("s") == 0


def test_the_assumed_pod_is_the_pod_on_its_node(cache: ClusterCache) -> None:
    cache.on_pod_event("ADDED", pod("p"))
    original = cache.pods["ns/p"]
    assumed = cache.assume(original, "n1")
    assert assumed is not original and original.node_name == ""
    for f in dataclasses.fields(PodInfo):
        want = "n1" if f.name == "node_name" else getattr(original, f.name)
        assert getattr(assumed, f.name) == want, f.name


def test_forget_frees_the_assumed_pod(cache: ClusterCache) -> None:
    cache.on_pod_event("ADDED", pod("p"))
    assumed = cache.assume(cache.pods["ns/p"], "n1")
    cache.forget(assumed)
    assert cpu(cache, "n1") == 0 and not cache.is_assumed("ns/p")
    assert cache.pending_pods("s") == 1


def test_pod_bound_elsewhere_moves_from_the_assumed_node(cache: ClusterCache) -> None:
    cache.on_pod_event("ADDED", pod("p"))
    cache.assume(cache.pods["ns/p"], "n1")
    cache.on_pod_event("MODIFIED", pod("p", node_name="n2", rv="2"))
    assert cpu(cache, "n1") == 0 and cpu(cache, "n2") == 500


def test_two_assumed_pods_in_a_row_both_count(cache: ClusterCache) -> None:
    for name in ("a", "b"):
        cache.on_pod_event("ADDED", pod(name, cpu="2"))
        cache.assume(cache.pods[f"ns/{name}"], "n1")
    assert cpu(cache, "n1") == 4000


def test_deleted_and_terminal_pods_free_their_resources(cache: ClusterCache) -> None:
    rec = Recorder()
    cache.add_listener(rec)
    cache.on_pod_event("ADDED", pod("done", node_name="n1"))
    cache.on_pod_event("ADDED", pod("gone", node_name="n1"))
    assert cpu(cache, "n1") == 1000
    cache.on_pod_event("MODIFIED", pod("done", node_name="n1", phase="Succeeded", rv="2"))
    assert cpu(cache, "n1") == 500
    cache.on_pod_event("DELETED", pod("gone", node_name="n1", rv="3"))
    assert cpu(cache, "n1") == 0
    assert ("assigned-removed", "done") in rec.calls and ("assigned-removed", "gone") in rec.calls
    assert cache.bound_pods("s") == 1  # the Succeeded pod still exists, bound


def test_an_assumed_pod_deleted_before_confirmation_is_freed(cache: ClusterCache) -> None:
    cache.on_pod_event("ADDED", pod("p"))
    cache.assume(cache.pods["ns/p"], "n1")
    cache.on_pod_event("DELETED", pod("p"))
    assert cpu(cache, "n1") == 0 and not cache.is_assumed("ns/p")


def test_listener_hears_pending_pods_and_their_departure(cache: ClusterCache) -> None:
    rec = Recorder()
    cache.add_listener(rec)
    cache.on_pod_event("ADDED", pod("p"))
    cache.assume(cache.pods["ns/p"], "n1")
    cache.on_pod_event("MODIFIED", pod("p", rv="2"))  # while assumed: not requeued
    cache.on_pod_event("MODIFIED", pod("p", node_name="n1", rv="3"))
    assert rec.calls == [("pending", "p"), ("pending-removed", "p"), ("assigned", "p")]


def test_pods_on_unknown_nodes_wait_in_a_placeholder(cache: ClusterCache) -> None:
    cache.on_pod_event("ADDED", pod("early", node_name="n3"))
    assert cache.snapshot.get("n3") is None
    cache.on_node_event("ADDED", node("n3"))
    assert cpu(cache, "n3") == 500
    assert [n.name for n in cache.snapshot.nodes] == ["n1", "n2", "n3"]


def test_snapshot_is_kept_current_incrementally(cache: ClusterCache) -> None:
    rec = Recorder()
    cache.add_listener(rec)
    snap = cache.snapshot
    cache.on_node_event("ADDED", node("n3", images=("nginx",)))
    cache.on_node_event("ADDED", node("n4", images=("nginx", "redis")))
    assert snap is cache.snapshot and snap.image_nodes == {"nginx": 2, "redis": 1}
    cache.on_node_event("MODIFIED", node("n4", images=("redis",)))
    assert snap.image_nodes == {"nginx": 1, "redis": 1}
    cache.on_node_event("DELETED", node("n3"))
    assert [n.name for n in snap.nodes] == ["n1", "n2", "n4"] and "n3" not in snap.by_name
    assert snap.image_nodes == {"redis": 1}
    assert ("node-added", "n3") in rec.calls and ("node-updated", "n4") in rec.calls


def test_a_heartbeat_only_node_update_is_not_a_cluster_event(cache: ClusterCache) -> None:
    rec = Recorder()
    cache.add_listener(rec)
    beat = node("n1")
    beat["status"]["conditions"] = [{"type": "Ready", "lastHeartbeatTime": "later"}]
    beat["metadata"]["resourceVersion"] = "2"
    cache.on_node_event("MODIFIED", beat)
    assert rec.calls == []
    cache.on_node_event("MODIFIED", node("n1", zone="a"))
    assert rec.calls == [("node-updated", "n1")]


def test_recreated_pod_with_the_same_name_replaces_the_old_one(cache: ClusterCache) -> None:
    cache.on_pod_event("ADDED", pod("p", node_name="n1", uid="u1"))
    cache.on_pod_event("MODIFIED", pod("p", uid="u2", rv="5"))  # missed the DELETED
    assert cpu(cache, "n1") == 0
    assert cache.pods["ns/p"].uid == "u2" and cache.pending_pods("s") == 1


def with_affinity(obj: dict[str, Any], required_anti: bool) -> dict[str, Any]:
    term = {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": "zone"}
    kind = "requiredDuringSchedulingIgnoredDuringExecution" if required_anti else \
        "preferredDuringSchedulingIgnoredDuringExecution"
    value: Any = [term] if required_anti else [{"weight": 1, "podAffinityTerm": term}]
    obj["spec"]["affinity"] = {"podAntiAffinity": {kind: value}}
    return obj


def affinity_counts(c: ClusterCache) -> tuple[int, int]:
    return c.snapshot.pods_with_affinity, c.snapshot.pods_with_required_anti_affinity


def summed(c: ClusterCache) -> tuple[int, int]:
    return (sum(n.pods_with_affinity for n in c.snapshot.nodes),
            sum(n.pods_with_required_anti_affinity for n in c.snapshot.nodes))


def test_snapshot_affinity_counts_follow_assume_forget_bind_delete_and_nodes(
        cache: ClusterCache) -> None:
    anti = with_affinity(pod("a"), required_anti=True)
    pref = with_affinity(pod("b"), required_anti=False)
    cache.on_pod_event("ADDED", anti)
    cache.on_pod_event("ADDED", pref)
    assert affinity_counts(cache) == (0, 0)  # pending pods count nowhere
    assumed = cache.assume(PodInfo.from_json(anti), "n1")
    assert affinity_counts(cache) == (1, 1)
    cache.forget(assumed)
    assert affinity_counts(cache) == (0, 0)
    cache.assume(PodInfo.from_json(anti), "n1")
    # The watch shows it bound elsewhere: moved, not counted twice.
    cache.on_pod_event("MODIFIED", with_affinity(pod("a", node_name="n2", rv="2"), True))
    assert affinity_counts(cache) == (1, 1) == summed(cache)
    cache.on_pod_event("MODIFIED", with_affinity(pod("b", node_name="n1", rv="2"), False))
    assert affinity_counts(cache) == (2, 1) == summed(cache)
    # A pod on a node the cache has not seen counts once the node arrives.
    cache.on_pod_event("ADDED", with_affinity(pod("c", node_name="n3"), True))
    assert affinity_counts(cache) == (2, 1)
    cache.on_node_event("ADDED", node("n3"))
    assert affinity_counts(cache) == (3, 2) == summed(cache)
    cache.on_node_event("DELETED", node("n3"))
    assert affinity_counts(cache) == (2, 1) == summed(cache)
    cache.on_pod_event("MODIFIED", with_affinity(
        pod("b", node_name="n1", phase="Succeeded", rv="3"), False))
    assert affinity_counts(cache) == (1, 1) == summed(cache)
    cache.on_pod_event("DELETED", with_affinity(pod("a", node_name="n2", rv="3"), True))
    assert affinity_counts(cache) == (0, 0) == summed(cache)


def test_managed_fields_are_dropped_on_ingest(cache: ClusterCache) -> None:
    managed = [{"manager": "kubectl", "operation": "Update", "fieldsV1": {"f:spec": {}}}]
    p = pod("a")
    p["metadata"]["managedFields"] = managed
    n = node("n3")
    n["metadata"]["managedFields"] = managed
    cache.on_pod_event("ADDED", p)
    cache.on_node_event("ADDED", n)
    assert "managedFields" not in cache.pods["ns/a"].raw["metadata"]
    assert cache.pods["ns/a"].raw["metadata"]["uid"] == "uid-a"
    info = cache.node_info("n3")
    assert info is not None and "managedFields" not in info.raw["metadata"]


class EventRecorder(CacheListener):
    """What the queue's cluster events are built from."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def node_updated(self, node: NodeInfo, old: dict[str, Any]) -> None:
        self.calls.append(("node-updated", node.name, old["metadata"]["labels"],
                           node.labels))

    def node_removed(self, node: NodeInfo) -> None:
        self.calls.append(("node-removed", node.name))

    def assigned_pod_updated(self, pod: PodInfo, old: PodInfo) -> None:
        self.calls.append(("assigned-updated", pod.name, dict(old.labels), dict(pod.labels)))


def test_listeners_hear_the_old_node_node_deletes_and_assigned_pod_label_changes(
        cache: ClusterCache) -> None:
    rec = EventRecorder()
    cache.add_listener(rec)
    cache.on_node_event("MODIFIED", node("n1", zone="a"))
    cache.on_node_event("MODIFIED", {**node("n1", zone="a"), "status": {
        **node("n1")["status"], "conditions": [{"type": "Ready", "status": "True"}]}})
    cache.on_node_event("DELETED", node("n2"))
    cache.on_pod_event("ADDED", pod("p", node_name="n1"))
    bound = pod("p", node_name="n1", rv="2")
    bound["metadata"]["labels"] = {"app": "x"}
    cache.on_pod_event("MODIFIED", bound)
    status_only = pod("p", node_name="n1", rv="3")
    status_only["metadata"]["labels"] = {"app": "x"}
    status_only["status"]["phase"] = "Running"
    cache.on_pod_event("MODIFIED", status_only)
    assert rec.calls == [
        ("node-updated", "n1", {}, {"zone": "a"}),  # the heartbeat is no event
        ("node-removed", "n2"),
        ("assigned-updated", "p", {}, {"app": "x"}),  # the phase change is none either
    ]
