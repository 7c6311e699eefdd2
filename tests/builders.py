"""The one set of test builders for pods and nodes, after kube-scheduler's
pkg/scheduler/testing/wrappers.go (`MakePod().Name("p").Req(...).Obj()`).

A builder holds the JSON object the API server would serve and returns it from `obj()`;
`info()` turns it into the engine's own PodInfo/NodeInfo through `from_json`, as the
cache does, so a test sees what the engine sees. Every setter returns the builder.

Where this differs from upstream, it is so that a test states every field it relies on:
- `make_node()` starts with no resources (upstream sets pods=32); `capacity()` sets
  capacity and allocatable alike, as upstream does, and `allocatable()` sets allocatable
  alone, the shape most unit tests use.
- `req()` adds a container named "c" (then "c1", "c2", ...) with no image, where upstream
  names it "con0" with the pause image; the engine reads neither.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

from polsched.framework.types import NodeInfo, PodInfo

Json = dict[str, Any]


class PodWrapper:
    """A pod under construction: `make_pod().name("p").namespace("ns").req(cpu="1").obj()`."""

    def __init__(self) -> None:
        self._obj: Json = {"metadata": {}, "spec": {}}
        self._type: Json = {}

    # metadata

    def typed(self) -> PodWrapper:
        """Adds apiVersion and kind, as in a listed or dumped object (a snapshot)."""
        self._type = {"apiVersion": "v1", "kind": "Pod"}
        return self

    def name(self, name: str) -> PodWrapper:
        self._obj["metadata"]["name"] = name
        return self

    def namespace(self, namespace: str) -> PodWrapper:
        self._obj["metadata"]["namespace"] = namespace
        return self

    def uid(self, uid: str) -> PodWrapper:
        self._obj["metadata"]["uid"] = uid
        return self

    def resource_version(self, rv: str) -> PodWrapper:
        self._obj["metadata"]["resourceVersion"] = rv
        return self

    def created(self, timestamp: str) -> PodWrapper:
        """metadata.creationTimestamp (the queue's tie-break after priority)."""
        self._obj["metadata"]["creationTimestamp"] = timestamp
        return self

    def terminating(self, timestamp: str = "2026-01-01T00:00:00Z") -> PodWrapper:
        self._obj["metadata"]["deletionTimestamp"] = timestamp
        return self

    def label(self, key: str, value: str) -> PodWrapper:
        self._obj["metadata"].setdefault("labels", {})[key] = value
        return self

    def labels(self, labels: Mapping[str, str]) -> PodWrapper:
        self._obj["metadata"].setdefault("labels", {}).update(labels)
        return self

    def metadata(self, **fields: Any) -> PodWrapper:
        """Sets metadata fields that have no setter of their own, by their API names."""
        self._obj["metadata"].update(fields)
        return self

    def annotation(self, key: str, value: str) -> PodWrapper:
        self._obj["metadata"].setdefault("annotations", {})[key] = value
        return self


    # spec

    def scheduler(self, name: str) -> PodWrapper:
        """spec.schedulerName (upstream's SchedulerName)."""
        self._obj["spec"]["schedulerName"] = name
        return self

    def node(self, name: str) -> PodWrapper:
        """spec.nodeName: the pod is bound (upstream's Node)."""
        self._obj["spec"]["nodeName"] = name
        return self

    def priority(self, priority: int) -> PodWrapper:
        self._obj["spec"]["priority"] = priority
        return self

    def zero_termination_grace_period(self) -> PodWrapper:
        """terminationGracePeriodSeconds 0: a deleted pod goes at once (test clusters)."""
        self._obj["spec"]["terminationGracePeriodSeconds"] = 0
        return self

    def container(self, name: str = "", *, image: str | None = None,
                  requests: Mapping[str, str] | None = None,
                  limits: Mapping[str, str] | None = None,
                  **fields: Any) -> PodWrapper:
        """Appends a container; its name defaults to "c", then "c1", "c2", ..."""
        containers = self._obj["spec"].setdefault("containers", [])
        c: Json = {"name": name or _container_name(len(containers))}
        if image is not None:
            c["image"] = image
        resources: Json = {}
        if requests:
            resources["requests"] = dict(requests)
        if limits:
            resources["limits"] = dict(limits)
        if resources:
            c["resources"] = resources
        c.update(fields)
        containers.append(c)
        return self

    def containers(self, containers: Iterable[Json]) -> PodWrapper:
        """Sets spec.containers to exactly `containers`."""
        self._obj["spec"]["containers"] = list(containers)
        return self

    def req(self, **requests: str) -> PodWrapper:
        """Appends a container requesting `requests` (upstream's Req)."""
        return self.container(requests=requests)

    def init_container(self, name: str = "", **fields: Any) -> PodWrapper:
        inits = self._obj["spec"].setdefault("initContainers", [])
        inits.append({"name": name or f"init{len(inits)}", **fields})
        return self

    def overhead(self, overhead: Mapping[str, str]) -> PodWrapper:
        self._obj["spec"]["overhead"] = dict(overhead)
        return self

    def tolerations(self, tolerations: Iterable[Json]) -> PodWrapper:
        self._obj["spec"]["tolerations"] = list(tolerations)
        return self

    def node_selector(self, selector: Mapping[str, str]) -> PodWrapper:
        self._obj["spec"]["nodeSelector"] = dict(selector)
        return self

    def affinity(self, affinity: Json) -> PodWrapper:
        """spec.affinity, whole (nodeAffinity, podAffinity, podAntiAffinity)."""
        self._obj["spec"]["affinity"] = affinity
        return self

    def required_node_affinity(self, terms: Any) -> PodWrapper:
        """spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution."""
        affinity = self._obj["spec"].setdefault("affinity", {})
        affinity.setdefault("nodeAffinity", {})[
            "requiredDuringSchedulingIgnoredDuringExecution"] = terms
        return self

    def pvc(self, claim: str, volume: str = "") -> PodWrapper:
        """Appends a volume that mounts the PersistentVolumeClaim `claim`."""
        volumes = self._obj["spec"].setdefault("volumes", [])
        volumes.append({"name": volume or f"v{len(volumes)}",
                        "persistentVolumeClaim": {"claimName": claim}})
        return self

    def volume(self, volume: Json) -> PodWrapper:
        self._obj["spec"].setdefault("volumes", []).append(volume)
        return self

    def resource_claim(self, name: str, **source: str) -> PodWrapper:
        """Appends spec.resourceClaims[] {name, resourceClaimName | resourceClaimTemplateName}."""
        self._obj["spec"].setdefault("resourceClaims", []).append({"name": name, **source})
        return self

    def pod_group(self, name: str) -> PodWrapper:
        """spec.schedulingGroup.podGroupName (upstream's PodGroupName)."""
        self._obj["spec"]["schedulingGroup"] = {"podGroupName": name}
        return self

    def spec(self, **fields: Any) -> PodWrapper:
        """Sets spec fields that have no setter of their own, by their API names."""
        self._obj["spec"].update(fields)
        return self

    # status

    def phase(self, phase: str) -> PodWrapper:
        self._obj.setdefault("status", {})["phase"] = phase
        return self

    def nominated_node_name(self, name: str) -> PodWrapper:
        self._obj.setdefault("status", {})["nominatedNodeName"] = name
        return self

    def status(self, **fields: Any) -> PodWrapper:
        self._obj.setdefault("status", {}).update(fields)
        return self

    # results

    def obj(self) -> Json:
        """The pod as the API server serves it (a copy: the builder may be reused)."""
        return {**self._type, **copy.deepcopy(self._obj)}

    def info(self) -> PodInfo:
        return PodInfo.from_json(self.obj())


class NodeWrapper:
    """A node under construction: `make_node().name("n1").label("zone", "a").obj()`."""

    def __init__(self) -> None:
        self._obj: Json = {"metadata": {}}
        self._type: Json = {}

    def typed(self) -> NodeWrapper:
        """Adds apiVersion and kind, as in a listed or dumped object (a snapshot)."""
        self._type = {"apiVersion": "v1", "kind": "Node"}
        return self

    def name(self, name: str) -> NodeWrapper:
        self._obj["metadata"]["name"] = name
        return self

    def uid(self, uid: str) -> NodeWrapper:
        self._obj["metadata"]["uid"] = uid
        return self

    def resource_version(self, rv: str) -> NodeWrapper:
        self._obj["metadata"]["resourceVersion"] = rv
        return self

    def label(self, key: str, value: str) -> NodeWrapper:
        self._obj["metadata"].setdefault("labels", {})[key] = value
        return self

    def labels(self, labels: Mapping[str, str]) -> NodeWrapper:
        self._obj["metadata"].setdefault("labels", {}).update(labels)
        return self

    def metadata(self, **fields: Any) -> NodeWrapper:
        """Sets metadata fields that have no setter of their own, by their API names."""
        self._obj["metadata"].update(fields)
        return self

    def annotation(self, key: str, value: str) -> NodeWrapper:
        self._obj["metadata"].setdefault("annotations", {})[key] = value
        return self

    def capacity(self, resources: Mapping[str, str]) -> NodeWrapper:
        """status.capacity and status.allocatable both (upstream's Capacity)."""
        self._obj.setdefault("status", {})["capacity"] = dict(resources)
        self._obj["status"]["allocatable"] = dict(resources)
        return self

    def allocatable(self, resources: Mapping[str, str]) -> NodeWrapper:
        """status.allocatable alone."""
        self._obj.setdefault("status", {})["allocatable"] = dict(resources)
        return self

    def images(self, images: Mapping[str, int]) -> NodeWrapper:
        """status.images: image name -> size in bytes, one name per image."""
        self._obj.setdefault("status", {})["images"] = [
            {"names": [name], "sizeBytes": size} for name, size in images.items()]
        return self

    def taint(self, key: str, effect: str = "NoSchedule", value: str | None = None
              ) -> NodeWrapper:
        taint: Json = {"key": key, "effect": effect}
        if value is not None:
            taint["value"] = value
        self._obj.setdefault("spec", {}).setdefault("taints", []).append(taint)
        return self

    def taints(self, taints: Iterable[Json]) -> NodeWrapper:
        self._obj.setdefault("spec", {})["taints"] = list(taints)
        return self

    def unschedulable(self, unschedulable: bool = True) -> NodeWrapper:
        self._obj.setdefault("spec", {})["unschedulable"] = unschedulable
        return self

    def spec(self, **fields: Any) -> NodeWrapper:
        self._obj.setdefault("spec", {}).update(fields)
        return self

    def status(self, **fields: Any) -> NodeWrapper:
        self._obj.setdefault("status", {}).update(fields)
        return self

    def obj(self) -> Json:
        """The node as the API server serves it (a copy: the builder may be reused)."""
        return {**self._type, **copy.deepcopy(self._obj)}

    def info(self, *pods: PodInfo) -> NodeInfo:
        """The node as the cache holds it, with `pods` on it."""
        info = NodeInfo.from_json(self.obj())
        for pod in pods:
            info.add_pod(pod)
        return info


def make_pod() -> PodWrapper:
    return PodWrapper()


def make_node() -> NodeWrapper:
    return NodeWrapper()


def _container_name(index: int) -> str:
    return "c" if index == 0 else f"c{index}"
