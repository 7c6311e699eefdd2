"""The last good generation of a policy, kept on the object so that it survives a restart.

"A bad policy never replaces a good running one" holds in memory by keeping the last
Policy that loaded; a process that starts while the current spec is invalid has no such
Policy. So when a generation loads, the operator records it in the annotation
`polsched.io/last-good` as compact JSON {"generation": N, "spec": {...}}; a process that
starts on an invalid spec loads that record instead (under the object's current name and
uid, with generation N) and runs it, while Valid=False reports the current error.

Only the operator (the Lease holder) writes the record, for Shared and Dedicated policies
alike: it loads every spec anyway, and its ClusterRole already has `patch` on
schedulingpolicies. A Dedicated scheduler only reads it, so its role stays read-only on
the object itself. The operator writes it in the background just after the swap
(PolicyReconciler._record_last_good_soon), off the hot reload's path. A metadata patch
does not bump .metadata.generation, so the reconciler does not reload on its own write.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from polsched.api import GROUP, Policy, PolicyError, load_policy
from polsched.api.admission import DEFAULT_RULES, AdmissionRules
from polsched.api.validate_files import schema_errors
from polsched.plugins import CATALOG

log = logging.getLogger(__name__)

ANNOTATION = f"{GROUP}/last-good"


@dataclass(frozen=True)
class LastGood:
    generation: int
    spec: Mapping[str, Any]


def encode(generation: int, spec: Mapping[str, Any]) -> str:
    """The annotation's value: compact, keys sorted, so equal records are equal strings."""
    return json.dumps({"generation": generation, "spec": spec}, separators=(",", ":"),
                      sort_keys=True)


def read(body: Mapping[str, Any]) -> LastGood | None:
    """The record on the object, or None when absent or not a record (someone edited it:
    it is then ignored, never an error)."""
    annotations = (body.get("metadata") or {}).get("annotations") or {}
    raw = annotations.get(ANNOTATION) if isinstance(annotations, Mapping) else None
    if not isinstance(raw, str):
        return None
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    generation, spec = data.get("generation"), data.get("spec")
    if isinstance(generation, bool) or not isinstance(generation, int) or generation < 1 \
            or not isinstance(spec, dict):
        return None
    return LastGood(generation, spec)


def recorded_generation(body: Mapping[str, Any]) -> int | None:
    rec = read(body)
    return rec.generation if rec is not None else None


def restore(body: Mapping[str, Any], rules: AdmissionRules = DEFAULT_RULES
            ) -> tuple[Policy, Mapping[str, Any]] | None:
    """Load the recorded last good generation of `body` (whose own spec did not load):
    the Policy and the spec it came from, or None when there is no usable record. A record
    of a generation newer than the object's is not ours and is ignored; one that no longer
    loads (an upgrade removed a plugin it uses) is logged and ignored."""
    meta = body.get("metadata") or {}
    name = str(meta.get("name") or "")
    current = meta.get("generation")
    rec = read(body)
    if rec is None:
        return None
    if isinstance(current, int) and rec.generation > current:
        log.warning("SchedulingPolicy %s: annotation %s names generation %d, newer than the "
                    "object's %d; ignored", name, ANNOTATION, rec.generation, current)
        return None
    old = {"apiVersion": body.get("apiVersion"), "kind": body.get("kind"),
           "metadata": {**meta, "generation": rec.generation}, "spec": dict(rec.spec)}
    # The annotation is writable by whoever may edit the policy, and the API server never
    # checked its spec against the CRD's schema: check it as the API server would a new
    # spec (lengths, list sizes), then load it under the operator's rules.
    refused = schema_errors(old)
    if refused:
        log.warning("SchedulingPolicy %s: the last good generation %d recorded in %s breaks "
                    "the CRD's schema (%s); ignored", name, rec.generation, ANNOTATION,
                    "; ".join(f"{e.path}: {e.message}" for e in refused[:3]))
        return None
    try:
        policy = load_policy(old, CATALOG, rules=rules)
    except PolicyError as e:
        log.warning("SchedulingPolicy %s: the last good generation %d recorded in %s no "
                    "longer loads either: %s", name, rec.generation, ANNOTATION, e)
        return None
    log.info("SchedulingPolicy %s: the current spec does not load; running the last good "
             "generation %d recorded in %s", name, rec.generation, ANNOTATION)
    return policy, rec.spec


def patch(uid: str, generation: int, spec: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON merge patch recording `generation`. metadata.uid is immutable, so carrying it
    makes the write fail rather than land on an object deleted and created again."""
    return {"metadata": {"uid": uid, "annotations": {ANNOTATION: encode(generation, spec)}}}
