"""metav1.Condition bookkeeping for a policy's status, as kstatus reads it.

The types (sigs.k8s.io/cli-utils/pkg/kstatus, which Flux and `kubectl wait` follow, and
which manifests/argocd-health.lua mirrors for Argo CD):

- Ready (normal-true): a scheduler runs the pipeline of the current generation.
- Reconciling (abnormal-true): the current generation is not running yet, and will be
  without anyone's help (a leader is being elected, a pipeline is being built).
- Stalled (abnormal-true): the current generation cannot run until a human changes
  something (the spec does not load, its schedulerName belongs to an older policy).
- Valid: whether the latest spec loaded (kept from before kstatus; Stalled says the
  same for tools that only know kstatus).
- MetricsAvailable (only on policies with load-aware scorers): whether every node has
  fresh usage from the Metrics API; False names the nodes without and when each was last
  served (they get the scorers' neutral score). Informational: Ready does not depend on it.

Every condition carries the generation it describes (observedGeneration), so a reader
never takes a verdict about generation N for one about N+1: `kubectl wait
--for=condition=Ready` skips conditions whose observedGeneration is older than
metadata.generation. Ready is never True for a generation that does not run.

As apimachinery's meta.SetStatusCondition: lastTransitionTime changes only when the
status flips. Purely data-manipulative.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from polsched.api.claims import CONFLICT_REASON

READY = "Ready"
RECONCILING = "Reconciling"
STALLED = "Stalled"
VALID = "Valid"
METRICS_AVAILABLE = "MetricsAvailable"

Status = Literal["True", "False", "Unknown"]
TRUE: Status = "True"
FALSE: Status = "False"
UNKNOWN: Status = "Unknown"

# Reasons (CamelCase, as Kubernetes condition reasons).
RUNNING = "Running"
SCHEDULER_NAME_CONFLICT = CONFLICT_REASON  # api.claims.owners reads it back
INVALID_SPEC = "InvalidSpec"
LOADED = "Loaded"
DEDICATED = "Dedicated"
WAITING_FOR_LEADER = "WaitingForLeader"
PROGRESSING = "Progressing"
STARTING = "Starting"


@dataclass(frozen=True)
class Condition:
    type: str
    status: bool | Status
    reason: str
    message: str
    observed_generation: int

    @property
    def status_text(self) -> Status:
        if isinstance(self.status, bool):
            return TRUE if self.status else FALSE
        return self.status

    def to_dict(self, last_transition_time: str) -> dict[str, Any]:
        return {
            "type": self.type,
            "status": self.status_text,
            "reason": self.reason,
            "message": self.message,
            "observedGeneration": self.observed_generation,
            "lastTransitionTime": last_transition_time,
        }


def kstatus(ready: Condition, *, stalled: bool) -> tuple[Condition, Condition, Condition]:
    """Ready with the Reconciling and Stalled conditions that go with it.

    `ready` True: both False. Not True and `stalled`: Stalled=True with Ready's reason and
    message. Otherwise the controller is still working: Reconciling=True."""
    gen = ready.observed_generation
    if ready.status_text == TRUE:
        return (ready, Condition(RECONCILING, False, ready.reason, "", gen),
                Condition(STALLED, False, ready.reason, "", gen))
    if stalled:
        return (ready, Condition(RECONCILING, False, ready.reason, "", gen),
                Condition(STALLED, True, ready.reason, ready.message, gen))
    return (ready, Condition(RECONCILING, True, ready.reason, ready.message, gen),
            Condition(STALLED, False, ready.reason, "", gen))


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
        ltt = now
        if (old is not None and old.get("status") == cond.status_text
                and old.get("lastTransitionTime")):
            ltt = str(old["lastTransitionTime"])
        out.append(cond.to_dict(ltt))
    out.extend(prev.values())
    return out
