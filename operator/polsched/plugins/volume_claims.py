"""PersistentVolume / PersistentVolumeClaim / StorageClass rules the volume plugins share.

Copies the parts of k8s.io/component-helpers/storage/volume (helpers.go, pv_helpers.go),
component-helpers/storage/ephemeral and apis/core/v1/helper that VolumeBinding,
VolumeRestrictions, VolumeZone and NodeVolumeLimits use, on the objects as plain JSON
dicts (as the listers keep them). Purely data: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from decimal import Decimal
from typing import Any

from polsched.framework.nodeaffinity import Term, compile_lazy, labels_match_any
from polsched.framework.resources import QuantityError, parse_quantity
from polsched.framework.selectors import Matcher, SelectorError, compile_label_selector
from polsched.objects import Json

# component-helpers/storage/volume pv_helpers.go
ANN_BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
ANN_BOUND_BY_CONTROLLER = "pv.kubernetes.io/bound-by-controller"
ANN_SELECTED_NODE = "volume.kubernetes.io/selected-node"
NOT_SUPPORTED_PROVISIONER = "kubernetes.io/no-provisioner"
# v1.BetaStorageClassAnnotation
ANN_BETA_STORAGE_CLASS = "volume.beta.kubernetes.io/storage-class"
WAIT_FOR_FIRST_CONSUMER = "WaitForFirstConsumer"
READ_WRITE_ONCE_POD = "ReadWriteOncePod"


def meta(obj: Mapping[str, Any]) -> Json:
    m: Json = obj.get("metadata") or {}
    return m


def spec(obj: Mapping[str, Any]) -> Json:
    s: Json = obj.get("spec") or {}
    return s


def annotations_of(obj: Mapping[str, Any]) -> Mapping[str, str]:
    a: Mapping[str, str] = meta(obj).get("annotations") or {}
    return a


def not_found(resource: str, name: str) -> str:
    """apierrors.NewNotFound(...).Error(), as a lister's Get reports a missing object:
    `persistentvolumeclaim "data" not found`, `storageclass.storage.k8s.io "fast" not found`."""
    return f'{resource} "{name}" not found'


PVC_RESOURCE = "persistentvolumeclaim"
PV_RESOURCE = "persistentvolume"
STORAGE_CLASS_RESOURCE = "storageclass.storage.k8s.io"


# -- pods' claims -------------------------------------------------------------------------
def pod_claims(pod: Mapping[str, Any]) -> Iterator[tuple[str, bool]]:
    """(claim name, ephemeral) of every volume that uses a PVC: persistentVolumeClaim
    volumes and generic ephemeral volumes (ephemeral.VolumeClaimName: "<pod>-<volume>")."""
    pod_name = meta(pod).get("name") or ""
    for vol in spec(pod).get("volumes") or ():
        pvc = vol.get("persistentVolumeClaim")
        if pvc is not None:
            yield pvc.get("claimName") or "", False
        elif vol.get("ephemeral") is not None:
            yield f"{pod_name}-{vol.get('name') or ''}", True


def has_claims(pod: Mapping[str, Any]) -> bool:
    for vol in spec(pod).get("volumes") or ():
        if vol.get("persistentVolumeClaim") is not None or vol.get("ephemeral") is not None:
            return True
    return False


def volume_is_for_pod(pod: Mapping[str, Any], pvc: Mapping[str, Any]) -> str:
    """ephemeral.VolumeIsForPod: "" when the pod controls the PVC, else the error text."""
    pm, cm = meta(pod), meta(pvc)
    owned = any(ref.get("controller") and ref.get("uid") == pm.get("uid")
                for ref in cm.get("ownerReferences") or ())
    if cm.get("namespace") != pm.get("namespace") or not owned:
        return (f"PVC {cm.get('namespace')}/{cm.get('name')} was not created for pod "
                f"{pm.get('namespace')}/{pm.get('name')} (pod is not owner)")
    return ""


# -- classes ------------------------------------------------------------------------------
def claim_class(pvc: Mapping[str, Any]) -> str:
    """GetPersistentVolumeClaimClass: the beta annotation wins over spec.storageClassName."""
    ann = annotations_of(pvc)
    if ANN_BETA_STORAGE_CLASS in ann:
        return ann[ANN_BETA_STORAGE_CLASS]
    return spec(pvc).get("storageClassName") or ""


def volume_class(pv: Mapping[str, Any]) -> str:
    """GetPersistentVolumeClass."""
    ann = annotations_of(pv)
    if ANN_BETA_STORAGE_CLASS in ann:
        return ann[ANN_BETA_STORAGE_CLASS]
    return spec(pv).get("storageClassName") or ""


def claim_key(pvc: Mapping[str, Any]) -> str:
    m = meta(pvc)
    return f"{m.get('namespace') or ''}/{m.get('name') or ''}"


def is_fully_bound(pvc: Mapping[str, Any]) -> bool:
    """volumeBinder.isPVCFullyBound: volumeName set and pv.kubernetes.io/bind-completed."""
    return bool(spec(pvc).get("volumeName")) and ANN_BIND_COMPLETED in annotations_of(pvc)


# -- quantities ---------------------------------------------------------------------------
def storage(resources: Mapping[str, Any] | None) -> Decimal:
    """The `storage` quantity of a ResourceList (0 when absent or malformed)."""
    raw = (resources or {}).get("storage")
    if raw is None:
        return Decimal(0)
    try:
        return parse_quantity(raw)
    except QuantityError:
        return Decimal(0)


def claim_request(pvc: Mapping[str, Any]) -> Decimal:
    return storage((spec(pvc).get("resources") or {}).get("requests"))


def volume_capacity(pv: Mapping[str, Any]) -> Decimal:
    return storage(spec(pv).get("capacity"))


def quantity_value(q: Decimal) -> int:
    """resource.Quantity.Value(): rounded up to an integer."""
    i = int(q)
    return i + 1 if q > i else i


# -- node affinity of PVs, topologies of classes --------------------------------------------
# (name, resourceVersion) -> the PV's required terms, None when it has no required selector
_affinity_cache: dict[tuple[str, str], tuple[Term, ...] | None] = {}


def _compile_pv_affinity(pv: Mapping[str, Any]) -> tuple[Term, ...] | None:
    """The required terms of a PV's nodeAffinity (a term that does not parse matches
    nothing, LazyErrorNodeSelector); None when it has no required selector."""
    na = spec(pv).get("nodeAffinity")
    if not na or na.get("required") is None:
        return None
    return compile_lazy(na.get("required"))


def volume_node_affinity_matches(pv: Mapping[str, Any], node_labels: Mapping[str, str]) -> bool:
    """volume.CheckNodeAffinity(pv, node.Labels) == nil. The node it checks has labels
    only, no name, so matchFields are not evaluated (nodeaffinity's extractNodeFields)."""
    m = meta(pv)
    key = (m.get("name") or "", m.get("resourceVersion") or "")
    if key[1] and key in _affinity_cache:
        hit = _affinity_cache[key]
    else:
        hit = _compile_pv_affinity(pv)
        if key[1]:
            if len(_affinity_cache) > 20000:
                _affinity_cache.clear()
            _affinity_cache[key] = hit
    return hit is None or labels_match_any(hit, node_labels)


def topology_terms_match(terms: Sequence[Mapping[str, Any]] | None,
                         node_labels: Mapping[str, str]) -> bool:
    """v1helper.MatchTopologySelectorTerms: no terms match every node; otherwise some term
    whose every matchLabelExpressions requirement has the node's label among its values."""
    if not terms:
        return True
    for term in terms:
        ok = True
        for req in term.get("matchLabelExpressions") or ():
            value = node_labels.get(req.get("key") or "")
            if value is None or value not in (req.get("values") or ()):
                ok = False
                break
        if ok:
            return True
    return False


# -- matching claims to volumes -------------------------------------------------------------
def is_volume_bound_to_claim(pv: Mapping[str, Any], pvc: Mapping[str, Any]) -> bool:
    ref = spec(pv).get("claimRef")
    if not ref:
        return False
    m = meta(pvc)
    if ref.get("name") != m.get("name") or ref.get("namespace") != m.get("namespace"):
        return False
    return not (ref.get("uid") and ref.get("uid") != m.get("uid"))


def volume_mode_mismatches(pvc: Mapping[str, Any], pv: Mapping[str, Any]) -> bool:
    return (spec(pvc).get("volumeMode") or "Filesystem") != \
        (spec(pv).get("volumeMode") or "Filesystem")


def access_modes_fit(pvc: Mapping[str, Any], pv: Mapping[str, Any]) -> bool:
    """CheckAccessModes: every mode the claim asks for is one the volume offers."""
    offered = set(spec(pv).get("accessModes") or ())
    return all(m in offered for m in spec(pvc).get("accessModes") or ())


class MatchError(Exception):
    """FindMatchingVolume could not evaluate the claim (its selector does not parse)."""


def find_matching_volume(pvc: Mapping[str, Any], volumes: Sequence[Mapping[str, Any]],
                         node_labels: Mapping[str, str],
                         excluded: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """volume.FindMatchingVolume with a node and delayBinding (the scheduler's call), the
    VolumeAttributesClass gate on (GA, locked): the volume pre-bound to this claim when it
    fits the node, else the smallest Available volume of the claim's class, size, mode,
    attributes class, selector, node affinity and access modes; None when there is none."""
    pvc_spec = spec(pvc)
    requested = claim_request(pvc)
    requested_class = claim_class(pvc)
    selector: Matcher | None = None
    if pvc_spec.get("selector") is not None:
        try:
            selector = compile_label_selector(pvc_spec["selector"])
        except SelectorError as err:
            raise MatchError(f"error creating internal label selector for claim: "
                             f"{claim_key(pvc)}: {err}") from err
    claim_vac = pvc_spec.get("volumeAttributesClassName") or ""
    smallest: Mapping[str, Any] | None = None
    smallest_qty = Decimal(0)
    for pv in volumes:
        pv_meta, pv_spec = meta(pv), spec(pv)
        if (pv_meta.get("name") or "") in excluded:
            continue
        if pv_spec.get("claimRef") and not is_volume_bound_to_claim(pv, pvc):
            continue
        qty = volume_capacity(pv)
        if qty < requested:
            continue
        if volume_mode_mismatches(pvc, pv):
            continue
        if claim_vac != (pv_spec.get("volumeAttributesClassName") or ""):
            continue
        if pv_meta.get("deletionTimestamp"):
            continue
        affinity_ok = volume_node_affinity_matches(pv, node_labels)
        if is_volume_bound_to_claim(pv, pvc):
            return pv if affinity_ok else None
        if ((pv.get("status") or {}).get("phase")) != "Available":
            continue
        if selector is not None and not selector(pv_meta.get("labels") or {}):
            continue
        if volume_class(pv) != requested_class:
            continue
        if not affinity_ok:
            continue
        if not access_modes_fit(pvc, pv):
            continue
        if smallest is None or smallest_qty > qty:
            smallest, smallest_qty = pv, qty
    return smallest


def contains_access_mode(pvc: Mapping[str, Any], mode: str) -> bool:
    return mode in (spec(pvc).get("accessModes") or ())


# -- queueing hints (shared by the volume plugins' EnqueueExtensions) ------------------------
def pod_uses_claim(pod: Mapping[str, Any], pvc: Mapping[str, Any] | None,
                   ephemeral: bool = True) -> bool:
    """The changed claim is one of the pod's (same namespace, a persistentVolumeClaim
    volume's claimName or, with `ephemeral`, a generic ephemeral volume's claim name)."""
    if pvc is None:
        return False
    m = meta(pvc)
    if m.get("namespace") != meta(pod).get("namespace"):
        return False
    name = m.get("name")
    return any(n == name for n, eph in pod_claims(pod) if ephemeral or not eph)
