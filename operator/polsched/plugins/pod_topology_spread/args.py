"""PodTopologySpread's args (PodTopologySpreadArgs: defaultConstraints, defaultingType),
their defaults and validation, as kube-scheduler's apis/config (types_pluginargs.go,
v1/defaults.go, validation/validation_pluginargs.go), and the constants of the API they
name. Checked when a policy loads, never per pod.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from polsched.framework.registry import ArgsError

LABEL_HOSTNAME = "kubernetes.io/hostname"
LABEL_TOPOLOGY_ZONE = "topology.kubernetes.io/zone"
DO_NOT_SCHEDULE = "DoNotSchedule"
SCHEDULE_ANYWAY = "ScheduleAnyway"
HONOR = "Honor"
IGNORE = "Ignore"
SYSTEM_DEFAULTING = "System"
LIST_DEFAULTING = "List"

# plugin.go systemDefaultConstraints
SYSTEM_DEFAULT_CONSTRAINTS: tuple[Mapping[str, Any], ...] = (
    {"topologyKey": LABEL_HOSTNAME, "whenUnsatisfiable": SCHEDULE_ANYWAY, "maxSkew": 3},
    {"topologyKey": LABEL_TOPOLOGY_ZONE, "whenUnsatisfiable": SCHEDULE_ANYWAY, "maxSkew": 5},
)

DEFAULT_ARGS: Mapping[str, Any] = {"defaultingType": SYSTEM_DEFAULTING}


# -- args -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class PodTopologySpreadArgs:
    defaulting_type: str = SYSTEM_DEFAULTING
    default_constraints: tuple[Mapping[str, Any], ...] = ()


_CONSTRAINT_FIELDS = frozenset((
    "maxSkew", "topologyKey", "whenUnsatisfiable", "labelSelector", "minDomains",
    "nodeAffinityPolicy", "nodeTaintsPolicy", "matchLabelKeys"))


def _positive_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def _validate_default_constraint(c: Any, path: str) -> None:
    """ValidatePodTopologySpreadArgs for one default constraint, plus the fields upstream's
    decoder types (minDomains, policies, matchLabelKeys)."""
    if not isinstance(c, Mapping):
        raise ArgsError(path, "must be an object with maxSkew, topologyKey and "
                              "whenUnsatisfiable")
    for key in c:
        if key not in _CONSTRAINT_FIELDS:
            raise ArgsError(f"{path}.{key}", "unknown field")
    skew = c.get("maxSkew")
    if not _positive_int(skew):
        raise ArgsError(f"{path}.maxSkew", f"must be an integer greater than 0, got {skew!r}")
    key = c.get("topologyKey")
    if not isinstance(key, str) or not key:
        raise ArgsError(f"{path}.topologyKey", "must be a non-empty label key")
    when = c.get("whenUnsatisfiable")
    if when not in (DO_NOT_SCHEDULE, SCHEDULE_ANYWAY):
        raise ArgsError(f"{path}.whenUnsatisfiable",
                        f"must be {DO_NOT_SCHEDULE} or {SCHEDULE_ANYWAY}, got {when!r}")
    if c.get("labelSelector") is not None:
        raise ArgsError(f"{path}.labelSelector", "must not be set: default constraints "
                        "take their selector from the pod's owners; remove it")
    md = c.get("minDomains")
    if md is not None:
        if not _positive_int(md):
            raise ArgsError(f"{path}.minDomains", f"must be an integer greater than 0, "
                                                  f"got {md!r}")
        if when != DO_NOT_SCHEDULE:
            raise ArgsError(f"{path}.minDomains",
                            f"can only be set when whenUnsatisfiable is {DO_NOT_SCHEDULE}")
    for policy in ("nodeAffinityPolicy", "nodeTaintsPolicy"):
        v = c.get(policy)
        if v is not None and v not in (HONOR, IGNORE):
            raise ArgsError(f"{path}.{policy}", f"must be {HONOR} or {IGNORE}, got {v!r}")
    mlk = c.get("matchLabelKeys")
    if mlk is not None and (not isinstance(mlk, list)
                            or not all(isinstance(k, str) and k for k in mlk)):
        raise ArgsError(f"{path}.matchLabelKeys", "must be a list of label keys")


def parse_args(args: Mapping[str, Any] | None) -> PodTopologySpreadArgs:
    """PodTopologySpreadArgs (KubeSchedulerConfiguration v1), defaulted and validated as
    apis/config/validation ValidatePodTopologySpreadArgs."""
    if not args:
        args = DEFAULT_ARGS
    if not isinstance(args, Mapping):
        raise ArgsError("", "must be an object with defaultingType and/or defaultConstraints")
    for key in args:
        if key not in ("defaultingType", "defaultConstraints"):
            raise ArgsError(str(key), "unknown field: PodTopologySpread takes defaultingType "
                                      "and defaultConstraints")
    defaulting = args.get("defaultingType") or SYSTEM_DEFAULTING
    if defaulting not in (SYSTEM_DEFAULTING, LIST_DEFAULTING):
        raise ArgsError("defaultingType", f"must be {SYSTEM_DEFAULTING} or {LIST_DEFAULTING}, "
                                          f"got {defaulting!r}")
    raw = args.get("defaultConstraints")
    if raw is None:
        raw = []
    if not isinstance(raw, list):
        raise ArgsError("defaultConstraints", "must be a list of constraints")
    if defaulting == SYSTEM_DEFAULTING and raw:
        raise ArgsError("defaultingType", f"must be {LIST_DEFAULTING} when defaultConstraints "
                                          f"are set ({SYSTEM_DEFAULTING} uses the built-in "
                                          "constraints)")
    seen: set[tuple[str, str]] = set()
    for i, c in enumerate(raw):
        path = f"defaultConstraints[{i}]"
        _validate_default_constraint(c, path)
        pair = (c["topologyKey"], c["whenUnsatisfiable"])
        if pair in seen:
            raise ArgsError(path, f"duplicate constraint for topologyKey {pair[0]!r} and "
                                  f"whenUnsatisfiable {pair[1]}")
        seen.add(pair)
    constraints = SYSTEM_DEFAULT_CONSTRAINTS if defaulting == SYSTEM_DEFAULTING else tuple(raw)
    return PodTopologySpreadArgs(defaulting, constraints)
