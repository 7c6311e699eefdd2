"""Listers: what the cache records for plugins besides nodes and pods."""

from __future__ import annotations

from polsched.cluster.cache import CacheListener, ClusterCache
from polsched.framework import listers as ls
from polsched.objects import Json


def _pvc(ns: str, name: str, phase: str = "Pending") -> Json:
    return {"kind": "PersistentVolumeClaim", "metadata": {"namespace": ns, "name": name},
            "status": {"phase": phase}}


def test_apply_keys_namespaced_objects_by_namespace_and_name() -> None:
    listers = ls.Listers()
    listers.apply(ls.PERSISTENT_VOLUME_CLAIM, "ADDED", _pvc("a", "data"))
    listers.apply(ls.PERSISTENT_VOLUME_CLAIM, "ADDED", _pvc("b", "data", "Bound"))
    a, b = listers.pvc("a", "data"), listers.pvc("b", "data")
    assert a is not None and a["status"]["phase"] == "Pending"
    assert b is not None and b["status"]["phase"] == "Bound"
    assert [o["metadata"]["namespace"] for o in listers.list(ls.PERSISTENT_VOLUME_CLAIM)] == \
        ["a", "b"]
    assert len(listers.list(ls.PERSISTENT_VOLUME_CLAIM, "b")) == 1
    old = listers.apply(ls.PERSISTENT_VOLUME_CLAIM, "DELETED", _pvc("a", "data"))
    assert old is not None and listers.pvc("a", "data") is None
    assert listers.generations["PersistentVolumeClaim"] == 3


def test_load_takes_objects_of_known_kinds_only() -> None:
    listers = ls.Listers()
    n = listers.load([
        {"kind": "Namespace", "metadata": {"name": "team", "labels": {"tier": "gold"}}},
        {"kind": "StorageClass", "metadata": {"name": "local"},
         "volumeBindingMode": "WaitForFirstConsumer"},
        {"kind": "ConfigMap", "metadata": {"name": "x", "namespace": "team"}},
    ])
    assert n == 2
    assert listers.namespace("team") == {"tier": "gold"}
    local = listers.storage_class("local")
    assert local is not None and local["volumeBindingMode"] == "WaitForFirstConsumer"


class _Recorder(CacheListener):
    def __init__(self) -> None:
        self.seen: list[tuple[str, bool, bool]] = []
        self.namespaces: list[tuple[str, dict[str, str]]] = []

    def object_changed(self, kind: ls.Kind, old: Json | None, new: Json | None) -> None:
        self.seen.append((kind.name, old is not None, new is not None))

    def namespace_changed(self, name: str, labels: object) -> None:
        self.namespaces.append((name, dict(labels)))  # type: ignore[call-overload]


def test_cache_records_lister_kinds_and_tells_listeners() -> None:
    cache = ClusterCache(None)
    rec = _Recorder()
    cache.add_listener(rec)

    def team(a: str) -> Json:
        return {"metadata": {"name": "team", "labels": {"a": a}}}

    cache.on_object_event(ls.PERSISTENT_VOLUME, "ADDED",
                          {"metadata": {"name": "pv1", "managedFields": [{}]}})
    cache.on_object_event(ls.NAMESPACE, "ADDED", team('1'))
    cache.on_object_event(ls.NAMESPACE, "MODIFIED", team('1'))
    cache.on_object_event(ls.NAMESPACE, "MODIFIED", team('2'))
    pv1 = cache.listers.pv("pv1")
    assert pv1 is not None and "managedFields" not in pv1["metadata"]
    assert cache.namespaces == {"team": {"a": "2"}}
    assert rec.namespaces == [("team", {"a": "1"}), ("team", {"a": "2"})]
    assert rec.seen[0] == ("PersistentVolume", False, True)
    cache.on_object_event(ls.NAMESPACE, "DELETED", {"metadata": {"name": "team"}})
    assert cache.namespaces == {} and rec.seen[-1] == ("Namespace", True, False)
