"""The cluster admin's tenancy configuration: who may claim which schedulerName, which of
the default plugins that protect nodes a policy may switch off, and how many Dedicated
policies may run with what resources.

It is the admin's, not a policy author's: `polsched run --tenancy-config FILE` reads it
(the chart renders FILE from its `tenancy:` values into a ConfigMap), the loader checks
each policy against it (AdmissionRules.tenancy), and the webhook checks the claimant
against the request's userInfo. The file:

    apiVersion: polsched.io/v1alpha1
    kind: SchedulingTenancy
    schedulerNames:            # absent or empty: anyone who may create a policy claims any name
      - names: ["team-a-*"]    # fnmatch patterns
        users: [alice]
        groups: [team-a]
    allowDisabling: []         # of TaintToleration, NodeAffinity, NodeUnschedulable
    nameGraceSeconds: 300      # how long a deleted owner keeps its name
    dedicated:
      maxPolicies: 3
      maxReplicas: 2
      maxResources: {cpu: "2", memory: 4Gi}   # per container, requests and limits

Purely data-manipulative, no I/O (the caller reads the file).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from polsched.framework import resources

KIND = "SchedulingTenancy"

# Default plugins that keep pods off nodes the admin fenced: cordoned nodes, NoSchedule
# taints (control plane, reserved pools) and required node affinity. Switching one off
# lets a policy's pods past the fence (and past PodTolerationRestriction), so only the
# admin may allow it.
PROTECTED_PLUGINS: tuple[str, ...] = ("NodeUnschedulable", "NodeAffinity", "TaintToleration")

DEFAULT_NAME_GRACE_SECONDS = 300

FIELDS = ("apiVersion", "kind", "schedulerNames", "allowDisabling", "nameGraceSeconds",
          "dedicated")
GRANT_FIELDS = ("names", "users", "groups")
DEDICATED_FIELDS = ("maxPolicies", "maxReplicas", "maxResources")


class TenancyError(ValueError):
    """The configuration does not parse; the message names the field."""


@dataclass(frozen=True)
class NameGrant:
    """Users and groups who may claim the schedulerNames matching `names`."""

    names: tuple[str, ...]
    users: frozenset[str] = frozenset()
    groups: frozenset[str] = frozenset()

    def covers(self, scheduler_name: str) -> bool:
        return any(fnmatch.fnmatchcase(scheduler_name, p) for p in self.names)

    def admits(self, username: str, groups: Iterable[str]) -> bool:
        return username in self.users or not self.groups.isdisjoint(groups)


@dataclass(frozen=True)
class DedicatedCaps:
    """None: no cap."""

    max_policies: int | None = None
    max_replicas: int | None = None
    max_resources: Mapping[str, Decimal] = field(default_factory=dict)


@dataclass(frozen=True)
class Tenancy:
    name_grants: tuple[NameGrant, ...] = ()
    allow_disabling: frozenset[str] = frozenset()
    name_grace_seconds: int = DEFAULT_NAME_GRACE_SECONDS
    dedicated: DedicatedCaps = DedicatedCaps()

    @property
    def protected_plugins(self) -> tuple[str, ...]:
        """The protected plugins a policy must keep."""
        return tuple(p for p in PROTECTED_PLUGINS if p not in self.allow_disabling)

    def claim_refusal(self, scheduler_name: str, username: str,
                      groups: Iterable[str]) -> str:
        """Why this user may not claim `scheduler_name` ("" when they may)."""
        if not self.name_grants:
            return ""
        groups = list(groups)
        covering = [g for g in self.name_grants if g.covers(scheduler_name)]
        if any(g.admits(username, groups) for g in covering):
            return ""
        if not covering:
            return (f"no entry of the tenancy configuration's schedulerNames covers "
                    f"{scheduler_name!r}: ask the cluster admin to grant it")
        users = sorted(set().union(*(g.users for g in covering)))
        granted = sorted(set().union(*(g.groups for g in covering)))
        return (f"user {username!r} is not granted {scheduler_name!r} by the tenancy "
                f"configuration (granted to users {users} and groups {granted})")


def _strings(value: Any, path: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise TenancyError(f"{path}: must be a list of non-empty strings")
    return tuple(value)


def _count(value: Any, path: str, lo: int) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < lo:
        raise TenancyError(f"{path}: must be an integer >= {lo}")
    return value


def _unknown(obj: Mapping[str, Any], path: str, known: tuple[str, ...]) -> None:
    for key in obj:
        if key not in known:
            raise TenancyError(f"{path}.{key}: unknown field; known: {', '.join(known)}")


def parse_tenancy(obj: Any) -> Tenancy:
    """The configuration from its parsed YAML; TenancyError names the field at fault."""
    if obj is None:
        return Tenancy()
    if not isinstance(obj, Mapping):
        raise TenancyError("the tenancy configuration must be a mapping")
    _unknown(obj, "tenancy", FIELDS)
    if obj.get("kind", KIND) != KIND:
        raise TenancyError(f"tenancy.kind: must be {KIND}")
    grants: list[NameGrant] = []
    raw_grants = obj.get("schedulerNames") or []
    if not isinstance(raw_grants, list):
        raise TenancyError("tenancy.schedulerNames: must be a list")
    for i, raw in enumerate(raw_grants):
        path = f"tenancy.schedulerNames[{i}]"
        if not isinstance(raw, Mapping):
            raise TenancyError(f"{path}: must be a mapping")
        _unknown(raw, path, GRANT_FIELDS)
        names = _strings(raw.get("names"), f"{path}.names")
        if not names:
            raise TenancyError(f"{path}.names: required")
        grants.append(NameGrant(names, frozenset(_strings(raw.get("users"), f"{path}.users")),
                                frozenset(_strings(raw.get("groups"), f"{path}.groups"))))
    allow = _strings(obj.get("allowDisabling"), "tenancy.allowDisabling")
    for i, name in enumerate(allow):
        if name not in PROTECTED_PLUGINS:
            raise TenancyError(f"tenancy.allowDisabling[{i}]: {name!r} is not protected "
                               f"(protected: {', '.join(PROTECTED_PLUGINS)})")
    grace = _count(obj.get("nameGraceSeconds"), "tenancy.nameGraceSeconds", 0)
    dedicated = DedicatedCaps()
    raw_ded = obj.get("dedicated")
    if raw_ded is not None:
        if not isinstance(raw_ded, Mapping):
            raise TenancyError("tenancy.dedicated: must be a mapping")
        _unknown(raw_ded, "tenancy.dedicated", DEDICATED_FIELDS)
        caps: dict[str, Decimal] = {}
        raw_res = raw_ded.get("maxResources") or {}
        if not isinstance(raw_res, Mapping):
            raise TenancyError("tenancy.dedicated.maxResources: must be a mapping")
        for rname, qty in raw_res.items():
            try:
                caps[str(rname)] = resources.parse_quantity(qty)
            except (resources.QuantityError, ValueError, TypeError) as e:
                raise TenancyError(f"tenancy.dedicated.maxResources.{rname}: {e}") from e
        dedicated = DedicatedCaps(
            max_policies=_count(raw_ded.get("maxPolicies"), "tenancy.dedicated.maxPolicies", 0),
            max_replicas=_count(raw_ded.get("maxReplicas"), "tenancy.dedicated.maxReplicas", 1),
            max_resources=caps)
    return Tenancy(tuple(grants), frozenset(allow),
                   DEFAULT_NAME_GRACE_SECONDS if grace is None else grace, dedicated)


# What a process without the admin's configuration knows (AdmissionRules' default: the
# offline tools, `polsched validate`, tests of one plugin): every default may be disabled.
# The operator never runs with it: without --tenancy-config it runs parse_tenancy(None),
# which protects the fencing plugins.
OPEN_TENANCY = Tenancy(allow_disabling=frozenset(PROTECTED_PLUGINS))
