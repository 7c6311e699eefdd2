"""Who owns a schedulerName when several SchedulingPolicies claim it.

A schedulerName is cluster-wide, like a kube-scheduler profile's. The operator records
which policy owns each name (controller.policies.book, kept across restarts by
controller.policies.names in a Lease of its own namespace), and the recorded owner keeps
its name while it claims it: an owner re-created under its own name within the grace
period is the newest claimant, yet keeps its name after the grace period and across
restarts, and of claimants created in the same second (creationTimestamp has a resolution
of one second) the one the operator ran first keeps it. A name with no recorded owner
among its claimants goes to the oldest claimant (metadata.creationTimestamp, then name).
A shadow policy (spec.shadowOf) claims none, since it decides the pods of the policy it
shadows.

Nothing a policy author writes decides ownership: not the status (which whoever may
patch `schedulingpolicies/status` can write: an older claimant could clear its own
SchedulerNameConflict report and take the name, or mark another's), not annotations;
only creationTimestamp and the name, which the API server sets and fixes, and the
operator's own record. The dry-run commands (polsched.commands.dryrun), which have no
access to that record, read the operator's reports in the status instead
(reported_owners), to predict the policy the operator runs: a prediction, never a
decision. Pure: no I/O.
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


def owners(claims: Iterable[Claim],
           recorded: Mapping[str, str] | None = None) -> dict[str, str]:
    """schedulerName -> the name of the policy that owns it: of the claimants that are not
    shadows, the one `recorded` names for it (the operator's record of owners), else the
    oldest (by creationTimestamp, then name)."""
    out: dict[str, str] = {}
    for c in sorted(claims, key=lambda c: (c.created, c.name)):
        if c.shadow_of:
            continue
        out.setdefault(c.claimed, c.name)
        if recorded is not None and recorded.get(c.claimed) == c.name:
            out[c.claimed] = c.name
    return out


def reported_owners(claims: Iterable[ObjectClaim]) -> dict[str, str]:
    """schedulerName -> the policy the operator last reported running it (Ready=True,
    not SchedulerNameConflict): what an offline tool, which cannot read the operator's
    record, passes to owners() as `recorded`. The status may be written by others too:
    use it to predict, never to decide."""
    out: dict[str, str] = {}
    for c in sorted(claims, key=lambda c: (c.created, c.name)):
        if c.running and not c.conflicting and not c.shadow_of:
            out.setdefault(c.claimed, c.name)
    return out
