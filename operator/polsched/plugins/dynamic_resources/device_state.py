"""What DynamicResources reads off devices and claims besides the allocator: the taints
DeviceTaintRules add to a slice's devices, and whether an allocated claim's devices met
their binding conditions (isClaimReadyForBinding). Split from plugin.py."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from polsched.dra import model
from polsched.framework.types import Json


def apply_taint_rules(s: model.Slice, rules: list[Json]) -> model.Slice:
    """The slice with the taints of the DeviceTaintRules that select its devices (by
    driver, pool and device name; ResourceSlice tracker's applyPatches)."""
    added: dict[int, list[Json]] = {}
    for rule in rules:
        spec = rule.get("spec") or {}
        sel = spec.get("deviceSelector") or {}
        if sel.get("driver") is not None and sel["driver"] != s.driver:
            continue
        if sel.get("pool") is not None and sel["pool"] != s.pool:
            continue
        taint = spec.get("taint")
        if not isinstance(taint, Mapping):
            continue
        for i, d in enumerate(s.devices):
            if sel.get("device") is not None and sel["device"] != d.name:
                continue
            added.setdefault(i, []).append(dict(taint))
    if not added:
        return s
    devices = tuple(dataclasses.replace(d, taints=(*d.taints, *added[i])) if i in added else d
                    for i, d in enumerate(s.devices))
    return dataclasses.replace(s, devices=devices)


def _has_binding_conditions(alloc: Mapping[str, Any] | None) -> bool:
    return any(r.get("bindingConditions") for r in
               ((alloc or {}).get("devices") or {}).get("results") or [])


def claim_ready_for_binding(claim: Json) -> tuple[bool, str]:
    """isClaimReadyForBinding: (ready, why binding failed)."""
    status = claim.get("status") or {}
    alloc = status.get("allocation")
    if alloc is None:
        return False, ""
    devices = status.get("devices") or []
    for r in (alloc.get("devices") or {}).get("results") or []:
        if not r.get("bindingConditions"):
            continue
        dev = next((d for d in devices if (d.get("driver"), d.get("pool"), d.get("device"))
                    == (r.get("driver"), r.get("pool"), r.get("device"))), None)
        if dev is None:
            return False, ""
        conds = {c.get("type"): c for c in dev.get("conditions") or []}
        for name in r.get("bindingFailureConditions") or []:
            c = conds.get(name)
            if c is not None and c.get("status") == "True":
                meta = claim.get("metadata") or {}
                # Go's %q of the message (a JSON string is that, for the text drivers
                # write).
                quoted = json.dumps(str(c.get("message", "")), ensure_ascii=False)
                return False, (f"claim={meta.get('name')}, reason={c.get('reason', '')}, "
                               f"message={quoted}")
        for name in r.get("bindingConditions") or []:
            c = conds.get(name)
            if c is None or c.get("status") != "True":
                return False, ""
    return True, ""
