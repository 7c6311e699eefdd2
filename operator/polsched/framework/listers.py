"""Listers: the cluster objects plugins read besides nodes and pods.

kube-scheduler hands each plugin a typed framework.Handle whose informer listers give it
namespaces, PersistentVolumes, PersistentVolumeClaims, StorageClasses, CSINodes, Services,
workload controllers, PodDisruptionBudgets, PriorityClasses and the DRA objects
(ResourceClaims, ResourceSlices, DeviceClasses, DeviceTaintRules). Here one Listers object
holds them, as plain JSON dicts the way the API server sends them (managedFields dropped).

Who fills it: the ClusterCache, from its list+watch of every kind in KINDS, through
`apply`; offline callers (`polsched explain --offline`, `polsched simulate`, unit tests)
through the same `apply`, so offline and live see the same state. Plugins only read it,
during a cycle, through `Handle.listers`. Purely data: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from polsched.objects import Json


@dataclass(frozen=True)
class Kind:
    """A kind the cache lists and watches for the listers."""

    name: str        # "PersistentVolumeClaim"
    path: str        # the cluster-wide list/watch path
    namespaced: bool


NAMESPACE = Kind("Namespace", "/api/v1/namespaces", False)
PERSISTENT_VOLUME = Kind("PersistentVolume", "/api/v1/persistentvolumes", False)
PERSISTENT_VOLUME_CLAIM = Kind("PersistentVolumeClaim", "/api/v1/persistentvolumeclaims", True)
STORAGE_CLASS = Kind("StorageClass", "/apis/storage.k8s.io/v1/storageclasses", False)
CSI_NODE = Kind("CSINode", "/apis/storage.k8s.io/v1/csinodes", False)
SERVICE = Kind("Service", "/api/v1/services", True)
REPLICATION_CONTROLLER = Kind("ReplicationController", "/api/v1/replicationcontrollers", True)
REPLICA_SET = Kind("ReplicaSet", "/apis/apps/v1/replicasets", True)
STATEFUL_SET = Kind("StatefulSet", "/apis/apps/v1/statefulsets", True)
POD_DISRUPTION_BUDGET = Kind("PodDisruptionBudget", "/apis/policy/v1/poddisruptionbudgets", True)
PRIORITY_CLASS = Kind("PriorityClass", "/apis/scheduling.k8s.io/v1/priorityclasses", False)
# DynamicResources (resource.k8s.io/v1).
RESOURCE_CLAIM = Kind("ResourceClaim", "/apis/resource.k8s.io/v1/resourceclaims", True)
RESOURCE_SLICE = Kind("ResourceSlice", "/apis/resource.k8s.io/v1/resourceslices", False)
DEVICE_CLASS = Kind("DeviceClass", "/apis/resource.k8s.io/v1/deviceclasses", False)
DEVICE_TAINT_RULE = Kind("DeviceTaintRule", "/apis/resource.k8s.io/v1/devicetaintrules", False)

# Every kind besides nodes and pods that the cache lists and watches (namespaces first:
# the engine's namespaceSelector reads them before pods are queued).
KINDS: tuple[Kind, ...] = (
    NAMESPACE, PERSISTENT_VOLUME, PERSISTENT_VOLUME_CLAIM, STORAGE_CLASS, CSI_NODE, SERVICE,
    REPLICATION_CONTROLLER, REPLICA_SET, STATEFUL_SET, POD_DISRUPTION_BUDGET, PRIORITY_CLASS,
    RESOURCE_CLAIM, RESOURCE_SLICE, DEVICE_CLASS, DEVICE_TAINT_RULE,
)
KINDS_BY_NAME: Mapping[str, Kind] = {k.name: k for k in KINDS}


def object_key(kind: Kind, obj: Mapping[str, Any]) -> str:
    """"namespace/name" for a namespaced kind, "name" otherwise."""
    meta = obj.get("metadata") or {}
    name = meta.get("name") or ""
    return f"{meta.get('namespace') or ''}/{name}" if kind.namespaced else name


# How many changes per kind Listers.changed_since reaches back at least.
JOURNAL_LENGTH = 4096


@dataclass(eq=False)
class Listers:
    """Read-only views (for plugins) of the cluster's other objects, kept by the cache."""

    # kind name -> object key (object_key) -> object
    objects: dict[str, dict[str, Json]] = field(
        default_factory=lambda: {k.name: {} for k in KINDS})
    # namespace name -> its labels (a view kept in step with the Namespace objects, read
    # per pod by the engine's namespaceSelector and by InterPodAffinity's namespaceSelector)
    namespace_labels: dict[str, Mapping[str, str]] = field(default_factory=dict)
    # kind name -> bumped on every change of an object of that kind; plugin caches keyed on
    # it stay valid while it is unchanged.
    generations: dict[str, int] = field(default_factory=lambda: {k.name: 0 for k in KINDS})
    # kind name -> the keys of its latest changes, oldest first: the change that made
    # generation g is at index g - journal_start[kind] (see changed_since). Bounded.
    journal: dict[str, list[str]] = field(default_factory=lambda: {k.name: [] for k in KINDS})
    journal_start: dict[str, int] = field(default_factory=lambda: {k.name: 1 for k in KINDS})

    # -- writing (the cache, or an offline loader) ----------------------------------------
    def apply(self, kind: Kind, event: str, obj: Json) -> Json | None:
        """Record an ADDED / MODIFIED / DELETED object; returns the previous version."""
        store = self.objects[kind.name]
        key = object_key(kind, obj)
        if event == "DELETED":
            old = store.pop(key, None)
            if kind is NAMESPACE:
                self.namespace_labels.pop(key, None)
        else:
            old = store.get(key)
            store[key] = obj
            if kind is NAMESPACE:
                self.namespace_labels[key] = (obj.get("metadata") or {}).get("labels") or {}
        self.generations[kind.name] += 1
        journal = self.journal[kind.name]
        journal.append(key)
        if len(journal) > 2 * JOURNAL_LENGTH:
            del journal[:JOURNAL_LENGTH]
            self.journal_start[kind.name] += JOURNAL_LENGTH
        return old

    def changed_since(self, kind: Kind, generation: int) -> list[str] | None:
        """The keys of the objects of `kind` added, changed or deleted after the kind was
        at `generation` (oldest first, repeats possible), for a reader that keeps its own
        view up to date without walking every object; None when the journal no longer
        reaches that far back (the reader must walk them all)."""
        start = self.journal_start[kind.name]
        if generation + 1 < start or generation > self.generations[kind.name]:
            return None
        return self.journal[kind.name][generation + 1 - start:]

    def load(self, objects: Iterable[Json]) -> int:
        """Add every object of a known kind (by its `kind` field); returns how many."""
        n = 0
        for obj in objects:
            kind = KINDS_BY_NAME.get(obj.get("kind") or "")
            if kind is not None:
                self.apply(kind, "ADDED", obj)
                n += 1
        return n

    # -- reading (plugins) ----------------------------------------------------------------
    def get(self, kind: Kind, name: str, namespace: str = "") -> Json | None:
        return self.objects[kind.name].get(f"{namespace}/{name}" if kind.namespaced else name)

    def list(self, kind: Kind, namespace: str | None = None) -> list[Json]:
        """Every object of `kind`, or of one namespace, in key order."""
        store = self.objects[kind.name]
        if namespace is None or not kind.namespaced:
            return [store[k] for k in sorted(store)]
        prefix = namespace + "/"
        return [store[k] for k in sorted(store) if k.startswith(prefix)]

    def namespace(self, name: str) -> Mapping[str, str] | None:
        """A namespace's labels; None when the namespace is not known."""
        return self.namespace_labels.get(name)

    def pvc(self, namespace: str, name: str) -> Json | None:
        return self.get(PERSISTENT_VOLUME_CLAIM, name, namespace)

    def pv(self, name: str) -> Json | None:
        return self.get(PERSISTENT_VOLUME, name)

    def storage_class(self, name: str) -> Json | None:
        return self.get(STORAGE_CLASS, name)

    def csi_node(self, name: str) -> Json | None:
        return self.get(CSI_NODE, name)

    def priority_class(self, name: str) -> Json | None:
        return self.get(PRIORITY_CLASS, name)
