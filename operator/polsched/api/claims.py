"""Who owns a schedulerName when several SchedulingPolicies claim it.

A schedulerName is cluster-wide, like a kube-scheduler profile's: the oldest claimant
(metadata.creationTimestamp, then name) keeps it, except that a claimant the operator
last reported as not owning it (Ready reason SchedulerNameConflict in its status) never
takes it from one it did not: an owner re-created under its own name within the grace
period (controller.policies.book) is the newest claimant, and keeps its name after the
grace period and across restarts. creationTimestamp has a resolution of one second: of
claimants created in the same second, one the operator already reported Ready keeps the
name (the first one it ran), before the name order. A shadow policy (spec.shadowOf)
claims none, since it decides the pods of the policy it shadows. The operator applies this rule
(controller.policies.book.PolicyBook) and the dry-run commands repeat it
(polsched.commands.dryrun), so that `polsched explain` and `simulate` pick the policy the
operator runs. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol


class Claim(Protocol):
    """A policy's claim on a schedulerName."""

    @property
    def name(self) -> str: ...        # metadata.name
    @property
    def created(self) -> str: ...     # metadata.creationTimestamp (RFC 3339 sorts as read)
    @property
    def claimed(self) -> str: ...     # the schedulerName it claims
    @property
    def shadow_of(self) -> str: ...   # spec.shadowOf, "" when not a shadow
    @property
    def conflicting(self) -> bool: ...  # reported_conflicting(its status)
    @property
    def running(self) -> bool: ...      # reported_running(its status)


# The Ready reason the operator reports on a claimant that does not own its name
# (controller.policies.conditions.SCHEDULER_NAME_CONFLICT).
CONFLICT_REASON = "SchedulerNameConflict"


def _ready(status: Any) -> Mapping[str, Any] | None:
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    for c in conditions if isinstance(conditions, list) else ():
        if isinstance(c, Mapping) and c.get("type") == "Ready":
            return c
    return None


def reported_conflicting(status: Any) -> bool:
    """Whether `status` (a SchedulingPolicy's) says Ready=False for CONFLICT_REASON."""
    ready = _ready(status)
    return ready is not None and ready.get("reason") == CONFLICT_REASON


def reported_running(status: Any) -> bool:
    """Whether `status` (a SchedulingPolicy's) says Ready=True: the operator ran it."""
    ready = _ready(status)
    return ready is not None and ready.get("status") == "True"


@dataclass(frozen=True)
class ObjectClaim:
    """The claim of a SchedulingPolicy object as written (not loaded)."""

    name: str
    created: str
    claimed: str
    shadow_of: str
    conflicting: bool = False
    running: bool = False

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> ObjectClaim:
        meta = obj.get("metadata")
        meta = meta if isinstance(meta, Mapping) else {}
        spec = obj.get("spec")
        spec = spec if isinstance(spec, Mapping) else {}
        name = str(meta.get("name") or "")
        wanted = spec.get("schedulerName")
        shadow = spec.get("shadowOf")
        return cls(name=name, created=str(meta.get("creationTimestamp") or ""),
                   claimed=wanted if isinstance(wanted, str) and wanted else name,
                   shadow_of=shadow if isinstance(shadow, str) else "",
                   conflicting=reported_conflicting(obj.get("status")),
                   running=reported_running(obj.get("status")))


def owners(claims: Iterable[Claim]) -> dict[str, str]:
    """schedulerName -> the name of the policy that owns it: of the claimants that are not
    shadows, the oldest (by creationTimestamp; in the same second, one reported running
    first; then name) of those not reported conflicting, else the oldest."""
    out: dict[str, str] = {}
    for c in sorted(claims, key=lambda c: (c.conflicting, c.created, not c.running, c.name)):
        if not c.shadow_of:
            out.setdefault(c.claimed, c.name)
    return out
