"""DRAExtendedResource: the special ResourceClaim for extended resources served by devices.

Upstream: pkg/scheduler/framework/plugins/dynamicresources/extendeddynamicresources.go.
A pod whose containers request an extended resource that a DeviceClass serves
(framework/device_classes.py) gets one claim for all such resources, which the scheduler
makes itself:

- PreFilter: the claim a previous attempt created (annotated
  `resource.kubernetes.io/extended-resource-claim: "true"`, controlled by the pod), or an
  in-memory one named SPECIAL_NAME with no requests (preFilterExtendedResources);
- Filter: per node, the requests for the resources the node does not advertise in
  allocatable (one request per container and resource, createRequestsAndMappings);
- PreBind: the claim is created (generateName `<pod>-extended-resources-`), allocated and
  reserved like any other, and the pod's status.extendedResourceClaimStatus maps each
  container's resource to its request.

Pure data: no I/O (the plugin makes the API calls).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from polsched.framework import resources as res
from polsched.framework.device_classes import DeviceClassResolver
from polsched.objects import Json

# specialClaimInMemName: not a valid object name, so never a real claim's.
SPECIAL_NAME = "<extended-resources>"
# resourceapi.ExtendedResourceClaimAnnotation
ANNOTATION = "resource.kubernetes.io/extended-resource-claim"


def is_special(claim: Json) -> bool:
    return (claim.get("metadata") or {}).get("name") == SPECIAL_NAME


def find_claim(pod_name: str, pod_uid: str, claims: Iterable[Json]) -> Json | None:
    """findExtendedResourceClaim: the annotated claim the pod controls."""
    for c in claims:
        meta = c.get("metadata") or {}
        if (meta.get("annotations") or {}).get(ANNOTATION) != "true":
            continue
        for ref in meta.get("ownerReferences") or []:
            if ref.get("name") == pod_name and ref.get("controller") and \
                    ref.get("uid") == pod_uid:
                return c
    return None


def special_claim(namespace: str, pod_name: str, pod_uid: str) -> dict[str, Any]:
    """The in-memory claim of preFilterExtendedResources: a temporary uid (for the claims
    in flight), the generateName and owner the created claim will have, no requests."""
    return {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {
            "namespace": namespace, "name": SPECIAL_NAME, "uid": str(uuid.uuid4()),
            "generateName": f"{pod_name}-extended-resources-",
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": pod_name,
                                 "uid": pod_uid, "controller": True}],
            "annotations": {ANNOTATION: "true"},
        },
        "spec": {},
    }


def _long_and_short_lived(containers: Sequence[Mapping[str, Any]], n_init: int
                          ) -> tuple[list[int], list[int]]:
    """partitionContainerIndices: init containers that are not sidecars are short-lived."""
    long_lived, short_lived = [], []
    for i, c in enumerate(containers):
        if i < n_init and c.get("restartPolicy") != "Always":
            short_lived.append(i)
        else:
            long_lived.append(i)
    return long_lived, short_lived


def _container_request(index: int, container: Mapping[str, Any], resource: str,
                       class_name: str, reusable: Sequence[Json | None]
                       ) -> tuple[Json | None, list[dict[str, str]]]:
    """createResourceRequestAndMappings: the container's request for `resource` (None
    when the requests it may reuse cover it) and its mappings."""
    creqs = ((container.get("resources") or {}).get("requests")) or {}
    if resource not in creqs:
        return None, []
    try:
        q = res.parse_quantity(creqs[resource])
    except ValueError:
        return None, []
    if q != q.to_integral_value() or q == 0:
        return None, []
    want = int(q)
    mappings: list[dict[str, str]] = []
    cname = str(container.get("name", ""))
    have = 0
    for r in reusable:
        if r is None:
            continue
        have += int(r["exactly"]["count"])
        mappings.append({"containerName": cname, "resourceName": resource,
                         "requestName": str(r["name"])})
        if have >= want:
            return None, mappings
    # The request's name: the container's index among initContainers + containers and
    # the resource's index among the container's sorted request names.
    ridx = sorted(creqs).index(resource)
    name = f"container-{index}-request-{ridx}"
    request = {"name": name, "exactly": {"deviceClassName": class_name,
                                         "allocationMode": "ExactCount",
                                         "count": want - have}}
    mappings.append({"containerName": cname, "resourceName": resource, "requestName": name})
    return request, mappings


def requests_and_mappings(pod_spec: Mapping[str, Any], resources: Iterable[str],
                          classes: DeviceClassResolver
                          ) -> tuple[list[Json], list[dict[str, str]]]:
    """createRequestsAndMappings: the claim's device requests for `resources` (sorted by
    name) and the pod's requestMappings. A non-sidecar init container reuses the requests
    of the long-lived containers after it, and the short-lived ones share the largest
    request among them, since they run one at a time."""
    inits = list(pod_spec.get("initContainers") or [])
    containers = inits + list(pod_spec.get("containers") or [])
    long_lived, short_lived = _long_and_short_lived(containers, len(inits))
    requests: list[Json] = []
    mappings: list[dict[str, str]] = []
    for resource in sorted(resources):
        cls = classes.get_device_class(resource)
        if cls is None:
            continue
        class_name = str((cls.get("metadata") or {}).get("name") or "")
        long_requests: list[Json | None] = [None] * len(containers)
        long_mappings: list[dict[str, str]] = []
        for i in long_lived:
            r, m = _container_request(i, containers[i], resource, class_name, [])
            long_requests[i] = r
            long_mappings.extend(m)
        biggest: Json | None = None
        short_names: set[str] = set()
        short_mappings: list[dict[str, str]] = []
        for i in short_lived:
            r, m = _container_request(i, containers[i], resource, class_name,
                                      long_requests[i:])
            if r is not None:
                short_names.add(str(r["name"]))
                if biggest is None or biggest["exactly"]["count"] < r["exactly"]["count"]:
                    biggest = r
            short_mappings.extend(m)
        if biggest is not None and len(short_names) > 1:
            short_names.discard(str(biggest["name"]))
            for mapping in short_mappings:
                if mapping["requestName"] in short_names:
                    mapping["requestName"] = str(biggest["name"])
        if biggest is not None:
            requests.append(biggest)
        requests.extend(r for r in long_requests if r is not None)
        mappings.extend(long_mappings)
        mappings.extend(short_mappings)
    requests.sort(key=lambda r: str(r["name"]))
    return requests, mappings


__all__ = ["ANNOTATION", "SPECIAL_NAME", "find_claim", "is_special", "requests_and_mappings",
           "special_claim"]
