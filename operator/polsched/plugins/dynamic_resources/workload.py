"""ResourceClaims of a PodGroup, shared by its members (DRAWorkloadResourceClaims, beta and
off by default in v1.37; it needs DynamicResourceAllocation and GenericWorkload).

Upstream: k8s.io/dynamic-resource-allocation@v0.37.1 resourceclaim/resourceclaim.go
(IsForPod, IsReservedForPod, BindTo, NameFromPodGroup, IsForPodGroup) as the
DynamicResources plugin (dynamicresources.go) calls them with the gate on:

- a PodGroup lists claims in spec.resourceClaims (by resourceClaimName, or from a
  resourceClaimTemplateName: kube-controller-manager's resourceclaim controller creates
  one claim for the group, owned by it, names it in the group's
  status.resourceClaimStatuses and in each member's status.resourceClaimStatuses);
- a member's pod claim that matches one of its group's (same name, same
  resourceClaimName, same resourceClaimTemplateName) is reserved for the PodGroup
  (status.reservedFor names `scheduling.k8s.io` `podgroups`), not for the pod: the claim
  stays reserved while the group lives, whichever members come and go;
- a claim made from a template may be owned by the member's PodGroup instead of the pod;
- a claim reserved for the member's PodGroup counts as reserved for the member.

Pure functions over the API objects; the plugin decides when to call them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from polsched.framework import podgroups as pgs
from polsched.framework.types import Json, PodInfo

GATE = "DRAWorkloadResourceClaims"
SCHEDULING_GROUP = "scheduling.k8s.io"
PODGROUPS = "podgroups"
_UNSUPPORTED = "none of the supported fields are set"


def pod_ref(pod: PodInfo) -> dict[str, str]:
    """The pod as a ResourceClaimConsumerReference (apiGroup "" is left out, as the API
    server returns it)."""
    return {"resource": "pods", "name": pod.name, "uid": pod.uid}


def group_ref(pod_group: Json) -> dict[str, str]:
    meta = pod_group.get("metadata") or {}
    return {"apiGroup": SCHEDULING_GROUP, "resource": PODGROUPS,
            "name": str(meta.get("name") or ""), "uid": str(meta.get("uid") or "")}


def _controller(obj: Json) -> Mapping[str, Any] | None:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("controller"):
            return ref
    return None


def is_for_pod(pod: PodInfo, claim: Json, accept_group: bool) -> str:
    """resourceclaim.IsForPod: "" when the claim was made for the pod (its controller is
    the pod) or, with `accept_group` (the gate on), for the pod's PodGroup (controller
    kind PodGroup of scheduling.k8s.io/*, named as the pod's group: a pod does not know
    its group's uid); otherwise why not."""
    meta = claim.get("metadata") or {}
    ns, name = meta.get("namespace"), meta.get("name")
    if ns != pod.namespace:
        return (f"ResourceClaim {ns}/{name} is not in the same namespace as Pod "
                f"{pod.namespace}/{pod.name}")
    ctrl = _controller(claim)
    if ctrl is not None and ctrl.get("uid") == pod.uid:
        return ""
    group = pgs.pod_group_name(pod)
    if accept_group and group is not None:
        if ctrl is not None and ctrl.get("name") == group and ctrl.get("kind") == "PodGroup" \
                and str(ctrl.get("apiVersion") or "").startswith(SCHEDULING_GROUP + "/"):
            return ""
        return (f"ResourceClaim {ns}/{name} was not created for Pod {pod.namespace}/"
                f"{pod.name} (neither Pod nor PodGroup {group} is the owner)")
    return (f"ResourceClaim {ns}/{name} was not created for Pod {pod.namespace}/{pod.name} "
            "(Pod is not owner)")


def reserved_for_pod(pod: PodInfo, claim: Json, accept_group: bool) -> bool:
    """resourceclaim.IsReservedForPod: the pod's uid is in status.reservedFor or, with
    `accept_group`, an entry names the pod's PodGroup (by group, resource and name)."""
    group = pgs.pod_group_name(pod) if accept_group else None
    for r in (claim.get("status") or {}).get("reservedFor") or []:
        if not isinstance(r, Mapping):
            continue
        if r.get("uid") == pod.uid:
            return True
        if group is not None and r.get("apiGroup") == SCHEDULING_GROUP and \
                r.get("resource") == PODGROUPS and r.get("name") == group:
            return True
    return False


def reserved_only_for(claim: Json, uid: str) -> bool:
    reserved = (claim.get("status") or {}).get("reservedFor") or []
    return len(reserved) == 1 and isinstance(reserved[0], Mapping) and \
        reserved[0].get("uid") == uid


def _group_claims(pod_group: Json) -> list[Mapping[str, Any]]:
    claims = (pod_group.get("spec") or {}).get("resourceClaims") or []
    return [c for c in claims if isinstance(c, Mapping)]


def bind_to(pod: PodInfo, pod_group: Json | None,
            pod_claim: Mapping[str, Any]) -> tuple[dict[str, str] | None, str]:
    """resourceclaim.BindTo: (the object the claim is reserved for, error). The PodGroup
    when one of its claims has the pod claim's name, resourceClaimName and
    resourceClaimTemplateName; else the pod. `pod_group` is None with the gate off."""
    if not pod_claim.get("resourceClaimName") and \
            not pod_claim.get("resourceClaimTemplateName"):
        return None, (f"Pod {pod.namespace}/{pod.name} claim {pod_claim.get('name')}: "
                      f"{_UNSUPPORTED}")
    if pod_group is not None:
        meta = pod_group.get("metadata") or {}
        gns, gname = meta.get("namespace"), meta.get("name")
        member_of = pgs.pod_group_name(pod)
        if member_of is None:
            return None, f"Pod {pod.namespace}/{pod.name} does not belong to a PodGroup"
        if pod.namespace != gns or member_of != gname:
            return None, (f"Pod {pod.namespace}/{pod.name} belongs to PodGroup "
                          f"{pod.namespace}/{member_of}, not PodGroup {gns}/{gname}")
        for gc in _group_claims(pod_group):
            if not gc.get("resourceClaimName") and not gc.get("resourceClaimTemplateName"):
                return None, f"PodGroup {gns}/{gname} claim {gc.get('name')}: {_UNSUPPORTED}"
            if gc.get("name") == pod_claim.get("name") and \
                    gc.get("resourceClaimName") == pod_claim.get("resourceClaimName") and \
                    gc.get("resourceClaimTemplateName") == \
                    pod_claim.get("resourceClaimTemplateName"):
                return group_ref(pod_group), ""
    return pod_ref(pod), ""


def name_from_pod_group(pod_group: Json, group_claim: Mapping[str, Any]
                        ) -> tuple[str | None, bool, str]:
    """resourceclaim.NameFromPodGroup: (name, must check the owner, error)."""
    meta = pod_group.get("metadata") or {}
    where = f"PodGroup {meta.get('namespace')}/{meta.get('name')}"
    if group_claim.get("resourceClaimName"):
        return str(group_claim["resourceClaimName"]), False, ""
    if group_claim.get("resourceClaimTemplateName"):
        for s in (pod_group.get("status") or {}).get("resourceClaimStatuses") or []:
            if isinstance(s, Mapping) and s.get("name") == group_claim.get("name"):
                name = s.get("resourceClaimName")
                return (str(name) if name else None), True, ""
        return None, False, f"{where}: ResourceClaim not created yet"
    return None, False, f"{where}, spec.resourceClaim {group_claim.get('name')}: {_UNSUPPORTED}"


def is_for_pod_group(pod_group: Json, claim: Json) -> str:
    """resourceclaim.IsForPodGroup: "" when the PodGroup (by uid) controls the claim."""
    gmeta, cmeta = pod_group.get("metadata") or {}, claim.get("metadata") or {}
    where = f"ResourceClaim {cmeta.get('namespace')}/{cmeta.get('name')}"
    group = f"PodGroup {gmeta.get('namespace')}/{gmeta.get('name')}"
    if cmeta.get("namespace") != gmeta.get("namespace"):
        return f"{where} is not in the same namespace as {group}"
    ctrl = _controller(claim)
    if ctrl is None or ctrl.get("uid") != gmeta.get("uid"):
        return f"{where} was not created for {group} (PodGroup is not owner)"
    return ""


def group_claims(pod_group: Json) -> list[Mapping[str, Any]]:
    """spec.resourceClaims, the well-formed entries."""
    return _group_claims(pod_group)
