"""The pod fields plugins sign (OpportunisticBatching), as k8s.io/kube-scheduler@v0.37.1
framework/signers.go: a signer's name and a canonical form of what it reads, so that two
pods that differ only in order (tolerations, volumes, node selector terms) sign alike.

Pure: reads a PodInfo's spec, returns JSON-able values.
"""

from __future__ import annotations

import json
from typing import Any

from polsched.framework import device_classes as dc
from polsched.framework.device_classes import DeviceClassResolver
from polsched.framework.types import Json, PodInfo

# The feature gate (Beta, on by default in v1.37: pkg/features/kube_features.go).
OPPORTUNISTIC_BATCHING = "OpportunisticBatching"

DYNAMIC_RESOURCES = "v1.Pod.Spec.DynamicResources"
IMAGE_NAMES = "v1.Pod.Spec.CanonicalImageNames()"
LABELS = "v1.Pod.Labels"
NODE_NAME = "v1.Pod.Spec.NodeName"
NODE_AFFINITY = "v1.Pod.Spec.Affinity.NodeAffinity"
NODE_SELECTOR = "v1.Pod.Spec.Affinity.NodeSelector"
HOST_PORTS = "v1.Pod.Spec.HostPorts()"
RESOURCES = "v1.Pod.Spec.ContainerRequestsAndOverheads()"
SCHEDULER_NAME = "v1.Pod.Spec.SchedulerName"
TOLERATIONS = "v1.Pod.Spec.Tolerations"
VOLUMES = "v1.Pod.Spec.Volumes.NonSyntheticSources()"
FEATURES = "v1.Pod.Spec.RequiredFeatures()"


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def host_ports(pod: PodInfo) -> list[int]:
    """HostPortsSigner: the host ports of every container and init container, sorted, once
    each (neither the IP nor the protocol, as upstream)."""
    spec = pod.spec
    ports = {int(p.get("hostPort") or 0)
             for c in (*(spec.get("containers") or ()), *(spec.get("initContainers") or ()))
             for p in c.get("ports") or ()}
    ports.discard(0)
    return sorted(ports)


def _requirements(reqs: Any) -> list[str]:
    """NodeSelectorRequirementsSigner: each requirement with its values sorted."""
    out = []
    for r in reqs or ():
        r = dict(r)
        if isinstance(r.get("values"), list):
            r["values"] = sorted(str(v) for v in r["values"])
        out.append(_dumps(r))
    return sorted(out)


def _term(term: Json) -> dict[str, list[str]]:
    return {"MatchExpressions": _requirements(term.get("matchExpressions")),
            "MatchFields": _requirements(term.get("matchFields"))}


def node_affinity(pod: PodInfo) -> dict[str, list[str]] | None:
    """NodeAffinitySigner: the required terms and the preferred ones (with their weights),
    each canonical and sorted; None without a node affinity."""
    na = pod.affinity.get("nodeAffinity")
    if na is None:
        return None
    required = (na.get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get(
        "nodeSelectorTerms") or ()
    preferred = na.get("preferredDuringSchedulingIgnoredDuringExecution") or ()
    return {"Required": sorted(_dumps(_term(t or {})) for t in required),
            "Preferred": sorted(_dumps({"Weight": p.get("weight", 0),
                                        "Preference": _term(p.get("preference") or {})})
                                for p in preferred)}


def tolerations(pod: PodInfo) -> list[Json]:
    """TolerationsSigner: the tolerations ordered by key, then value."""
    return sorted(pod.tolerations, key=lambda t: (str(t.get("key") or ""),
                                                  str(t.get("value") or "")))


def volumes(pod: PodInfo) -> list[str]:
    """VolumesSigner: every volume's source but ConfigMaps and Secrets (which do not change
    where a pod fits and would make every pod's signature its own), sorted."""
    out = []
    for v in pod.spec.get("volumes") or ():
        if "configMap" in v or "secret" in v:
            continue
        out.append(_dumps({k: x for k, x in v.items() if k != "name"}))
    return sorted(out)


def resources(pod: PodInfo) -> list[tuple[str, int]]:
    """computePodResourceRequest (the spec's requests with overhead), by name."""
    return sorted(pod.spec_requests.items())


def signature(scheduler_name: str, fragments: list[tuple[str, Any]]) -> str:
    """SignPod's JSON of the fragments (a later fragment with the same name replaces an
    earlier one, as upstream's map), with the scheduler's name."""
    sig: dict[str, Any] = {SCHEDULER_NAME: scheduler_name}
    for key, value in fragments:
        sig[key] = value
    return _dumps(sig)


def requests_dra_extended_resource(pod: PodInfo, classes: DeviceClassResolver) -> bool:
    """shouldDelegateResourceToDRA for any of the pod's extended resources: a DeviceClass
    serves it (DRAExtendedResource), so whether it fits is DynamicResources' to say per
    node, and the pod is not signable."""
    if not classes.any_class():
        return False
    return any(qty and dc.is_dra_extended_resource_name(name)
               and classes.get_device_class(name) is not None
               for name, qty in pod.spec_requests.items())
