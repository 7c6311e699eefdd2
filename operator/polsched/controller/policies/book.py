"""The controller's book of SchedulingPolicies: the latest spec of each, the last one
that loaded, and who owns which schedulerName.

A schedulerName is cluster-wide, like a kube-scheduler profile: when two policies claim
one, the older (creationTimestamp, then name) gets it and the newer waits with
Ready=False/SchedulerNameConflict (the webhook refuses the newer one at admission). The
book records each name's owner, and the recorded owner keeps its name while it claims it
(api.claims.owners), so an owner re-created within the grace period keeps it after the
grace period too. Nothing a policy author can write (the status, annotations) enters the
decision. The record and the holds outlive a restart through controller.policies.names
(restore, held_until, recorded).
Deleting the owner does not hand the name over at once: for the tenancy's
nameGraceSeconds the name stays held for a policy of the owner's name, so that a delete
and re-create (a GitOps replace) gets it back, and another team's idle policy never
silently receives the owner's pods; after the grace the next oldest claimant owns it. A spec that
does not load never replaces the last one that did (hot reload keeps the good pipeline
running), not even across a restart: a process that starts on a spec that does not
load runs the last good generation recorded on the object (controller.policies.lastgood), if any.
Purely data-manipulative: no I/O, no engine calls.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from polsched.api import FieldError, Policy, PolicyError, claims, load_policy
from polsched.api.admission import DEFAULT_RULES, AdmissionRules
from polsched.api.model import RuntimeMode
from polsched.controller.policies import lastgood
from polsched.plugins import CATALOG


@dataclass
class PolicyRecord:
    name: str
    uid: str
    created: str  # metadata.creationTimestamp; RFC 3339 in UTC sorts as it reads
    generation: int
    # The name it claims: the loaded one if any (that is what runs), else what the
    # latest spec says, so that even an invalid policy shows in conflicts.
    claimed: str
    loaded: Policy | None  # the last spec that loaded (what should run)
    error: PolicyError | None  # why the latest generation did not load, if it did not
    status: Mapping[str, Any]  # the object's status as last seen
    # The spec `loaded` came from (what the last-good record holds), and the generation
    # the object's last-good record names as last seen (None: no record).
    loaded_spec: Mapping[str, Any] | None = None
    recorded: int | None = None
    # spec.shadowOf (of the loaded spec, else the latest): a shadow claims no name.
    shadow_of: str = ""
    # Why `loaded` could not be built and run (a CA Secret not PEM, a client bug): set
    # and cleared by the reconciler, which retries. Not a load error (`error`).
    build_error: PolicyError | None = None
    # Why this shadow is not attached: its target does not allow it ("" otherwise).
    shadow_refusal: str = ""

    @property
    def mode(self) -> RuntimeMode:
        return self.loaded.runtime.mode if self.loaded is not None else RuntimeMode.SHARED


def _shadow_of(body: Mapping[str, Any]) -> str:
    spec = body.get("spec") or {}
    name = spec.get("shadowOf") if isinstance(spec, Mapping) else None
    return name if isinstance(name, str) else ""


def _claimed_name(body: Mapping[str, Any]) -> str:
    spec = body.get("spec") or {}
    name = spec.get("schedulerName") if isinstance(spec, Mapping) else None
    return name if isinstance(name, str) and name else str(body["metadata"]["name"])


class PolicyBook:
    """`rules`: the operator's admission rules every spec is loaded against."""

    def __init__(self, rules: AdmissionRules = DEFAULT_RULES,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._records: dict[str, PolicyRecord] = {}
        self.rules = rules
        self._clock = clock
        # schedulerName -> (the policy that owned it when deleted, until when it is held)
        self._released: dict[str, tuple[str, float]] = {}
        # schedulerName -> the policy that owns it, as last decided (owners())
        self._recorded: dict[str, str] = {}

    def observe(self, body: Mapping[str, Any]) -> tuple[PolicyRecord, bool]:
        """Record the object as seen in a watch event. Loads the spec when its generation
        is new. Returns the record and whether the spec was (re)loaded."""
        meta = body["metadata"]
        name = str(meta["name"])
        uid = str(meta.get("uid") or "")
        generation = int(meta.get("generation") or 0)
        status = body.get("status") or {}
        rec = self._records.get(name)
        if rec is not None and rec.uid != uid:
            rec = None  # deleted and created again under the same name
        if rec is not None and rec.generation == generation:
            rec.status = status
            rec.recorded = lastgood.recorded_generation(body)
            return rec, False
        loaded = rec.loaded if rec is not None else None
        loaded_spec = rec.loaded_spec if rec is not None else None
        error: PolicyError | None = None
        try:
            loaded = load_policy(dict(body), CATALOG, rules=self.rules)
            loaded_spec = body.get("spec") or {}
        except PolicyError as e:
            error = e
        except Exception as e:  # noqa: BLE001 - a loader bug is this policy's fault only
            error = PolicyError([FieldError("spec", f"could not be loaded ({type(e).__name__}"
                                                    f": {e}); a polsched bug, please report")],
                                name)
        if error is not None and loaded is None:
            # Nothing in memory (we just started): the last-good record, if any.
            try:
                restored = lastgood.restore(body, self.rules)
            except Exception:  # noqa: BLE001 - a damaged record is no record
                restored = None
            if restored is not None:
                loaded, loaded_spec = restored
        claimed = loaded.scheduler_name if loaded is not None else _claimed_name(body)
        new = PolicyRecord(name=name, uid=uid, created=str(meta.get("creationTimestamp") or ""),
                           generation=generation, claimed=claimed, loaded=loaded, error=error,
                           status=status, loaded_spec=loaded_spec,
                           recorded=lastgood.recorded_generation(body),
                           shadow_of=loaded.shadow_of if loaded is not None
                           else _shadow_of(body))
        self._records[name] = new
        return new, True

    def forget(self, name: str) -> PolicyRecord | None:
        was_owner = self.owners()
        rec = self._records.pop(name, None)
        self._recorded = {s: o for s, o in self._recorded.items() if o != name}
        if rec is not None and was_owner.get(rec.claimed) == name:
            grace = self.rules.tenancy.name_grace_seconds
            if grace > 0:
                self._released[rec.claimed] = (name, self._clock() + grace)
        return rec

    def held(self) -> dict[str, tuple[str, float]]:
        """schedulerName -> (its deleted owner, until when): names held for a policy of
        the owner's name within the grace period."""
        now = self._clock()
        for sname, (_, until) in list(self._released.items()):
            if until <= now:
                del self._released[sname]
        return dict(self._released)

    def held_until(self, wall_now: float) -> dict[str, tuple[str, float]]:
        """held(), with each end as wall-clock time (`wall_now`: the wall clock now), for
        the record a restart reads back (controller.policies.names)."""
        now = self._clock()
        return {s: (owner, wall_now + (until - now)) for s, (owner, until) in self.held().items()}

    def recorded(self) -> dict[str, str]:
        """schedulerName -> its owner as last decided: what a restart must read back
        (restore_recorded) so that the same policies keep their names."""
        return dict(self._recorded)

    def restore_recorded(self, recorded: Mapping[str, str]) -> None:
        """The owners a previous process recorded; names decided here already are kept."""
        for sname, owner in recorded.items():
            self._recorded.setdefault(sname, owner)

    def restore(self, holds: Mapping[str, tuple[str, float]], wall_now: float) -> None:
        """Hold again the names a previous process held (wall-clock ends, as held_until
        gives them): a restart within the grace period keeps them held. No hold lasts
        longer than this process's grace from now; one held here already is kept."""
        grace = self.rules.tenancy.name_grace_seconds
        now = self._clock()
        for sname, (owner, until) in holds.items():
            left = min(until - wall_now, grace)
            if left > 0 and sname not in self._released:
                self._released[sname] = (owner, now + left)

    def next_release(self) -> float | None:
        """Seconds until the first held name is released (None: none held)."""
        held = self.held()
        if not held:
            return None
        return max(0.0, min(until for _, until in held.values()) - self._clock())

    def get(self, name: str) -> PolicyRecord | None:
        return self._records.get(name)

    def records(self) -> list[PolicyRecord]:
        return sorted(self._records.values(), key=lambda r: r.name)

    def owners(self) -> dict[str, str]:
        """schedulerName -> the name of the policy that owns it (api.claims.owners: the
        recorded owner while it claims the name, else the oldest claimant that is not a
        shadow), except that a held name (held()) is owned only by a policy of its former
        owner's name, and by nobody while there is none. Records the result."""
        out = claims.owners(self._records.values(), self._recorded)
        for sname, (former, _) in self.held().items():
            rec = self._records.get(former)
            if rec is not None and rec.claimed == sname and not rec.shadow_of:
                out[sname] = former
            else:
                out.pop(sname, None)
        # The record follows the decision, except for a recorded owner this book has not
        # seen (yet): a restart observes its listing one object at a time.
        recorded = {s: o for s, o in self._recorded.items() if o not in self._records}
        recorded.update(out)
        self._recorded = recorded
        return out

    def forget_unknown_owners(self) -> None:
        """Drop the recorded owners that are not in the book, once it holds a whole
        listing: policies deleted while no process watched."""
        self._recorded = {s: o for s, o in self._recorded.items() if o in self._records}

    def owner_of(self, scheduler_name: str) -> str | None:
        return self.owners().get(scheduler_name)
