"""metav1.Condition bookkeeping for a policy's status: Ready and Valid.

As apimachinery's meta.SetStatusCondition: lastTransitionTime changes only when the
status flips, so `kubectl get spol` and watchers can tell how long a policy has been in
its state. Purely data-manipulative.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

READY = "Ready"
VALID = "Valid"

# Reasons (CamelCase, as Kubernetes condition reasons).
RUNNING = "Running"
SCHEDULER_NAME_CONFLICT = "SchedulerNameConflict"
INVALID_SPEC = "InvalidSpec"
LOADED = "Loaded"
DEDICATED = "Dedicated"
WAITING_FOR_LEADER = "WaitingForLeader"


@dataclass(frozen=True)
class Condition:
    type: str
    status: bool
    reason: str
    message: str
    observed_generation: int

    def to_dict(self, last_transition_time: str) -> dict[str, Any]:
        return {
            "type": self.type,
            "status": "True" if self.status else "False",
            "reason": self.reason,
            "message": self.message,
            "observedGeneration": self.observed_generation,
            "lastTransitionTime": last_transition_time,
        }


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def merge_conditions(previous: list[dict[str, Any]] | None, wanted: list[Condition],
                     now: str) -> list[dict[str, Any]]:
    """The conditions list to write: `wanted` in order, each keeping the previous
    lastTransitionTime when its status did not change. Types not in `wanted` are kept
    as they were (another writer may own them)."""
    prev = {c.get("type"): c for c in previous or () if isinstance(c, dict)}
    out: list[dict[str, Any]] = []
    for cond in wanted:
        old = prev.pop(cond.type, None)
        status = "True" if cond.status else "False"
        ltt = now
        if old is not None and old.get("status") == status and old.get("lastTransitionTime"):
            ltt = str(old["lastTransitionTime"])
        out.append(cond.to_dict(ltt))
    out.extend(prev.values())
    return out
