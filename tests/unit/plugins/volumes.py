"""Builders of PVs, PVCs, StorageClasses, CSINodes, pods and nodes for the volume plugins'
unit tests, shaped after upstream's volumebinding test_utils.go (makePV, makePVC...)."""

from __future__ import annotations

from typing import Any

from polsched.framework import NodeInfo, PodInfo
from polsched.framework.listers import Listers
from tests.builders import make_node, make_pod
from tests.unit.pipelines import build_plugin, listers_of

WAIT = "wait-sc"
IMMEDIATE = "immediate-sc"
HOSTNAME = "kubernetes.io/hostname"

_rv = [100]


def _next_rv() -> str:
    _rv[0] += 1
    return str(_rv[0])


def storage_class(name: str, mode: str | None = "WaitForFirstConsumer",
                  provisioner: str = "kubernetes.io/no-provisioner",
                  allowed_topologies: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    sc: dict[str, Any] = {"kind": "StorageClass", "apiVersion": "storage.k8s.io/v1",
                          "metadata": {"name": name, "resourceVersion": _next_rv()},
                          "provisioner": provisioner}
    if mode is not None:
        sc["volumeBindingMode"] = mode
    if allowed_topologies is not None:
        sc["allowedTopologies"] = allowed_topologies
    return sc


def pv(name: str, sc: str = WAIT, capacity: str = "1Gi", phase: str = "Available",
       node: str | None = None, affinity: dict[str, list[str]] | None = None,
       claim: dict[str, Any] | None = None, labels: dict[str, str] | None = None,
       csi: tuple[str, str] | None = None, modes: list[str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"storageClassName": sc, "capacity": {"storage": capacity},
                            "accessModes": modes or ["ReadWriteOnce"]}
    if node is not None:
        affinity = {HOSTNAME: [node]}
    if affinity:
        spec["nodeAffinity"] = {"required": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": k, "operator": "In", "values": v} for k, v in affinity.items()]}]}}
    if claim is not None:
        m = claim["metadata"]
        spec["claimRef"] = {"kind": "PersistentVolumeClaim", "namespace": m["namespace"],
                            "name": m["name"], "uid": m["uid"]}
    if csi is not None:
        spec["csi"] = {"driver": csi[0], "volumeHandle": csi[1]}
    else:
        spec["local"] = {"path": "/mnt/" + name}
    return {"kind": "PersistentVolume", "apiVersion": "v1",
            "metadata": {"name": name, "resourceVersion": _next_rv(), "labels": labels or {}},
            "spec": spec, "status": {"phase": phase}}


def pvc(name: str, sc: str | None = WAIT, request: str = "1Gi", volume: str = "",
        bound: bool = False, phase: str = "Pending", namespace: str = "ns",
        modes: list[str] | None = None, annotations: dict[str, str] | None = None,
        owner_uid: str = "") -> dict[str, Any]:
    anns = dict(annotations or {})
    if bound:
        anns["pv.kubernetes.io/bind-completed"] = "yes"
        phase = "Bound" if phase == "Pending" else phase
    spec: dict[str, Any] = {"accessModes": modes or ["ReadWriteOnce"],
                            "resources": {"requests": {"storage": request}}}
    if sc is not None:
        spec["storageClassName"] = sc
    if volume:
        spec["volumeName"] = volume
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": f"uid-{name}",
                            "resourceVersion": _next_rv(), "annotations": anns}
    if owner_uid:
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": "p",
                                    "uid": owner_uid, "controller": True}]
    return {"kind": "PersistentVolumeClaim", "apiVersion": "v1", "metadata": meta,
            "spec": spec, "status": {"phase": phase}}


def csi_node(name: str, limits: dict[str, int]) -> dict[str, Any]:
    return {"kind": "CSINode", "apiVersion": "storage.k8s.io/v1",
            "metadata": {"name": name, "resourceVersion": _next_rv()},
            "spec": {"drivers": [{"name": d, "nodeID": name, "allocatable": {"count": c}}
                                 for d, c in limits.items()]}}


def pod(name: str = "pod-a", *claims: str, namespace: str = "ns",
        volumes: list[dict[str, Any]] | None = None, node: str = "",
        uid: str = "") -> PodInfo:
    p = make_pod().name(name).namespace(namespace).uid(uid or f"uid-{name}").container()
    p.spec(volumes=[])
    for c in claims:
        p.pvc(c)
    for v in volumes or ():
        p.volume(v)
    if node:
        p.node(node)
    return p.info()


def node(name: str, labels: dict[str, str] | None = None, *pods: PodInfo) -> NodeInfo:
    return (make_node().name(name).labels({HOSTNAME: name, **(labels or {})})
            .allocatable({"cpu": "4", "memory": "8Gi", "pods": "110"}).info(*pods))


def make(name: str, *objects: dict[str, Any], args: dict[str, Any] | None = None,
           listers: Listers | None = None) -> Any:
    """The plugin `name` as the builder builds it for a policy that lists only it, reading
    listers that hold `objects` (or `listers`)."""
    return build_plugin(name, args, objects=objects, listers=listers)


def listers(*objects: dict[str, Any]) -> Listers:
    return listers_of(objects)
