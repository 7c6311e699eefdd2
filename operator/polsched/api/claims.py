"""Who owns a schedulerName when several SchedulingPolicies claim it.

A schedulerName is cluster-wide, like a kube-scheduler profile's: the oldest claimant
(metadata.creationTimestamp, then name) keeps it; a shadow policy (spec.shadowOf) claims
none, since it decides the pods of the policy it shadows. The operator applies this rule
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


@dataclass(frozen=True)
class ObjectClaim:
    """The claim of a SchedulingPolicy object as written (not loaded)."""

    name: str
    created: str
    claimed: str
    shadow_of: str

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
                   shadow_of=shadow if isinstance(shadow, str) else "")


def owners(claims: Iterable[Claim]) -> dict[str, str]:
    """schedulerName -> the name of the policy that owns it: the oldest claimant (by
    creationTimestamp, then name) that is not a shadow."""
    out: dict[str, str] = {}
    for c in sorted(claims, key=lambda c: (c.created, c.name)):
        if not c.shadow_of:
            out.setdefault(c.claimed, c.name)
    return out
