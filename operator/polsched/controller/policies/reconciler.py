"""From the book of policies to running schedulers: what the engine runs, what gets a
Dedicated Deployment, and what each policy's status says.

`observe(body)` and `forget(name)` are called from watch events (controller.policies.watch,
in the operator and in a Dedicated scheduler); both end in `sync()`, which compares what
should run with what runs and changes only the difference. sync() is idempotent, so an
event that changes nothing (a status write, a re-list) costs a dict lookup, and it
awaits no API call for a Shared policy without extenders: the next event's reload never
waits for a round trip.

Hot reload is the engine's atomic swap: a spec that loads builds a new Policy (its
plugins constructed off to the side by the loader), and engine.apply() swaps it in;
decisions under way finish on the old pipeline. A spec that does not load leaves the
last good Policy in place and only sets Valid=False. The operator (`records_last_good`)
records each generation that loads on the object (controller.policies.lastgood), in the
background after the swap, so that a process starting on a bad spec runs the last good
one instead of nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from polsched.api import GROUP, PLURAL, VERSION, FieldError, Policy, PolicyError, claims
from polsched.api.admission import DEFAULT_RULES, AdmissionRules
from polsched.api.loader import ca_bundle_problem
from polsched.api.model import RuntimeMode
from polsched.cluster.client import ApiClient, ApiError
from polsched.controller.policies import conditions as cond
from polsched.controller.policies import extender_ca, lastgood
from polsched.controller.policies.book import PolicyBook, PolicyRecord
from polsched.controller.policies.events import PolicyEvents
from polsched.controller.policies.names import LEASE as _NAMES_LEASE
from polsched.controller.policies.names import NameStore
from polsched.controller.policies.status import StatusView, StatusWriter
from polsched.extender.client import ExtenderSetupError, HTTPExtender, build_extenders
from polsched.scheduler import metrics
from polsched.scheduler.engine import SHADOW_PREFIX, Counters, Engine

log = logging.getLogger(__name__)

SHARED = RuntimeMode.SHARED
DEDICATED = RuntimeMode.DEDICATED
# Ready reasons of a shadow policy (spec.shadowOf).
SHADOWING = "Shadowing"
SHADOW_TARGET_NOT_RUNNING = "ShadowTargetNotRunning"
SHADOW_NOT_ALLOWED = "ShadowNotAllowed"
# Valid=False reason when a generation loaded but its pipeline or an extender could not
# be built (a CA Secret unreadable or not PEM, a plugin or client bug): contained in the
# policy, whose last good pipeline (if any) keeps running.
BUILD_FAILED = "BuildFailed"
# Ready reason of a Dedicated policy whose Deployment's name is taken by an object that
# polsched did not make for it (controller.dedicated.deployments.ForeignObject).
DEDICATED_OBJECT_CONFLICT = "DedicatedObjectConflict"
# A Dedicated policy over the admin's cap, or whose objects the API server refused.
DEDICATED_REFUSED = "DedicatedRefused"
# Extenders of a replaced pipeline are closed after decisions under way had time to end.
EXTENDER_CLOSE_DELAY = 30.0
# A Dedicated Deployment refused for a foreign object is tried again this often, so that
# removing the object is enough (no event of ours follows it).
CONFLICT_RETRY_SECONDS = 5.0


class Deployer(Protocol):
    """Renders and applies a Dedicated policy's Deployment (controller.dedicated.deployments).
    apply() raises ForeignObject when the name is taken by an object it did not make."""

    async def apply(self, record: PolicyRecord) -> None: ...

    async def delete(self, name: str) -> None: ...


@dataclass(frozen=True)
class DedicatedScope:
    """What a Dedicated scheduler's reconciler runs: its one policy, and where its pod has
    its extenders' CA Secrets mounted: (namespace, directory), one subdirectory each
    (controller.dedicated.deployments.EXTENDER_CA_DIR), read there, not through the API."""

    policy: str
    mounted_cas: tuple[str, Path] | None = None


@dataclass(frozen=True)
class OperatorDuties:
    """What the operator's reconciler does besides running policies (none of it in a
    Dedicated scheduler): `deployer` deploys Dedicated policies while leading;
    `records_last_good` writes the last-good record while leading; `names` records the
    owner of each schedulerName and the names held for deleted owners."""

    deployer: Deployer | None = None
    records_last_good: bool = False
    names: NameStore | None = None


class PolicyReconciler:
    """Runs policies in `engine`.

    `dedicated`: set in a Dedicated scheduler, which runs its one Dedicated policy (the
    operator runs every Shared one). `duties` (OperatorDuties), set in the operator:
    `deployer` deploys Dedicated policies while leading; `records_last_good` writes the
    last-good record while leading. `rules`: the operator's reserved scheduler names and
    extender destination policy. `names`: set in the operator, where the owner of each
    schedulerName and the names held for deleted owners are recorded
    (controller.policies.names), so that a restart keeps them: read before the first
    listing is synced, written by the leader whenever they change.

    A fault in one policy never leaves it: any exception while loading, building or
    applying one policy's pipeline, extenders or shadow is caught here and shown in
    that policy's status (Valid=False, reason BuildFailed, Ready=False) and in a Warning
    event regarding it; every other policy is synced as if it were not there.
    """

    def __init__(self, client: ApiClient, engine: Engine, writer: StatusWriter, *,
                 dedicated: DedicatedScope | None = None,
                 duties: OperatorDuties = OperatorDuties(),
                 rules: AdmissionRules = DEFAULT_RULES) -> None:
        deployer, records_last_good, names = duties.deployer, duties.records_last_good, \
            duties.names
        self.client = client
        # Which policies this process schedules itself, and (Dedicated) the one policy.
        self.runs_mode: RuntimeMode = DEDICATED if dedicated is not None else SHARED
        self.only = dedicated.policy if dedicated is not None else None
        self.mounted_cas = dedicated.mounted_cas if dedicated is not None else None
        self.engine = engine
        self.writer = writer
        self.rules = rules
        self.book = PolicyBook(rules)
        self.names = names
        self._names_restored = names is None
        # (held names and their owners, recorded owners) last written; None: write.
        self._names_saved: tuple[dict[str, str], dict[str, str]] | None = None
        self._names_dirty = False
        self._names_saving: asyncio.Task[None] | None = None
        self.events = PolicyEvents(client)
        self.deployer = deployer
        self.leading = deployer is None  # the deployer acts only while leading
        self.events.enabled = self.leading  # set_leading turns them on and off
        self._lock = asyncio.Lock()
        # scheduler name -> (policy name, the Policy object applied)
        self._applied: dict[str, tuple[str, Policy]] = {}
        self._extenders: dict[str, list[HTTPExtender]] = {}
        # shadow policy name -> (live scheduler name, the shadow Policy) attached
        self._shadows: dict[str, tuple[str, Policy]] = {}
        # policy name -> the generation deployed (Dedicated)
        self._deployed: dict[str, int] = {}
        # policy name -> why its Dedicated Deployment was not applied (ForeignObject)
        self._conflicts: dict[str, str] = {}
        # policy name -> (generation, why) its Dedicated scheduler is not deployed: over
        # the tenancy's maxPolicies (generation None: looked at again on every sync, no
        # API call), or refused by the API server (reported once; not applied again
        # until the policy's next generation).
        self._refused: dict[str, tuple[int | None, str]] = {}
        self._conflict_retry: asyncio.Task[None] | None = None
        self.records_last_good = records_last_good
        # policy name -> (uid, generation) of the last-good record written or tried: one
        # attempt per generation (a refused write is not retried on every status event).
        self._record_tried: dict[str, tuple[str, int]] = {}
        self._recording: asyncio.Task[None] | None = None  # _record_last_good_soon
        self._record_again = False
        self._background: set[asyncio.Task[Any]] = set()
        # Set when leadership is gained: the next sync seeds every scheduler's counters.
        self._reseed = False
        # Set when the last sync left work undone (an extender's CA Secret unreadable, a
        # Dedicated apply failed): the next event of any policy syncs again, as before.
        self._retry = False
        engine.on_change(self._on_engine_change)

    # -- events -------------------------------------------------------------------------
    async def observe(self, body: Mapping[str, Any]) -> None:
        name = str(body["metadata"]["name"])
        if self.only is not None and name != self.only:
            return
        if (body.get("metadata") or {}).get("deletionTimestamp"):
            # Being deleted (another finalizer holds it): its scheduler stops now.
            await self.forget(name)
            return
        async with self._lock:
            started = time.perf_counter()
            rec, reloaded = self.book.observe(body)
            if not reloaded and not self._retry and not self._reseed:
                # The same generation again, most often the echo of a status write (ours:
                # with 50 policies, 5 a second): what runs, the views and the owners
                # depend on nothing that changed, so the O(policies) diff is skipped and
                # only the counters seen in the status are offered to the writer.
                self.writer.observed(rec.name, rec.status)
                return
            if reloaded:
                if rec.error is not None:
                    log.warning("%s", rec.error)
                else:
                    log.info("SchedulingPolicy %s: generation %d loaded", rec.name,
                             rec.generation)
            await self._sync()
            if reloaded:
                # Loading the spec and building its pipeline (and extenders, whose CA
                # Secret read can still refuse the generation) in _sync.
                metrics.policy_reload(rec.name, _reload_result(rec),
                                      time.perf_counter() - started)

    async def observe_all(self, bodies: Sequence[Mapping[str, Any]]) -> None:
        """observe() for every object of a listing, with one sync for all of them: the
        first listing of 50 policies ran 50 syncs, each O(policies), before the first
        pod could be scheduled. What runs afterwards is what 50 observe() calls leave."""
        live: list[Mapping[str, Any]] = []
        for body in bodies:
            name = str(body["metadata"]["name"])
            if self.only is not None and name != self.only:
                continue
            if (body.get("metadata") or {}).get("deletionTimestamp"):
                await self.forget(name)
                continue
            live.append(body)
        if not self._names_restored:
            async with self._lock:
                await self._restore_names(bodies)
        if not live:
            self.book.forget_unknown_owners()
            return
        async with self._lock:
            loads: list[tuple[PolicyRecord, float]] = []
            for body in live:
                started = time.perf_counter()
                rec, reloaded = self.book.observe(body)
                if not reloaded:
                    self.writer.observed(rec.name, rec.status)
                    continue
                if rec.error is not None:
                    log.warning("%s", rec.error)
                else:
                    log.info("SchedulingPolicy %s: generation %d loaded", rec.name,
                             rec.generation)
                loads.append((rec, time.perf_counter() - started))
                # A large valid policy takes ~1 s to load: let the loop turn between
                # them (binds, events, the webhook) rather than after the whole listing.
                await asyncio.sleep(0)
            # A listing is whole: a recorded owner not in it was deleted meanwhile.
            self.book.forget_unknown_owners()
            if not loads and not self._retry and not self._reseed:
                return
            started = time.perf_counter()
            await self._sync()
            synced = time.perf_counter() - started
            for rec, took in loads:
                metrics.policy_reload(rec.name, _reload_result(rec), took + synced)

    async def _restore_names(self, bodies: Sequence[Mapping[str, Any]]) -> None:
        """The owners a previous process recorded and the names it held for deleted
        owners (controller.policies.names), before the first listing is synced; retried
        at the next listing when the record cannot be read. With no record yet (the first
        start of an operator that keeps one), the owners are taken once from what the
        operator last reported in the status of `bodies` (the listing)."""
        assert self.names is not None
        try:
            stored = await self.names.load()
        except Exception as e:  # noqa: BLE001 - the webhook still refuses a second claimant
            log.warning("the owners of schedulerNames could not be read from Lease %s/%s "
                        "(%s); tried again at the next listing", self.names.namespace,
                        _NAMES_LEASE, e)
            return
        self.book.restore(stored.holds, self.names.wall())
        self.book.restore_recorded(stored.owners if stored.exists else claims.reported_owners(
            claims.ObjectClaim.of(b) for b in bodies))
        self._names_restored = True
        for sname, (owner, _) in sorted(self.book.held().items()):
            log.info("schedulerName %r is held for the deleted SchedulingPolicy %s",
                     sname, owner)
        self._resync_on_release()

    def _save_names_soon(self) -> None:
        """Write the record (owners and holds) when it changed, in the background: a
        policy's scheduler starts or stops without waiting for the write."""
        store = self.names
        # Not before the record was read: a record not read back would be overwritten.
        if store is None or not self.leading or not self._names_restored:
            return
        if self._names_snapshot() == self._names_saved:
            return
        self._names_dirty = True
        if self._names_saving is not None and not self._names_saving.done():
            return

        async def save() -> None:
            while self._names_dirty and self.leading:
                self._names_dirty = False
                snapshot = self._names_snapshot()
                try:
                    await store.save(self.book.held_until(store.wall()), snapshot[1])
                except Exception as e:  # noqa: BLE001 - kept in memory all the same
                    log.warning("the owners of schedulerNames could not be recorded in "
                                "Lease %s/%s (%s): a restart may hand a name to another "
                                "claimant", store.namespace, _NAMES_LEASE, e)
                    return
                self._names_saved = snapshot

        self._names_saving = task = asyncio.get_running_loop().create_task(save())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _names_snapshot(self) -> tuple[dict[str, str], dict[str, str]]:
        return ({s: o for s, (o, _) in self.book.held().items()}, self.book.recorded())

    async def forget(self, name: str) -> None:
        async with self._lock:
            rec = self.book.forget(name)
            self.writer.drop(name)
            self._deployed.pop(name, None)
            self._conflicts.pop(name, None)
            self._refused.pop(name, None)
            self._record_tried.pop(name, None)
            self.events.forget(name)
            if rec is not None:
                log.info("SchedulingPolicy %s deleted: its scheduler stops", name)
            await self._sync()
            self._resync_on_release()

    def _resync_on_release(self) -> None:
        """Sync again when the first held schedulerName is released (book.held), so that
        the next claimant takes it over without waiting for an event."""
        delay = self.book.next_release()
        if delay is None:
            return

        async def later() -> None:
            await asyncio.sleep(delay + 0.05)
            await self.resync()
            self._resync_on_release()

        task = asyncio.get_running_loop().create_task(later())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def set_leading(self, leading: bool) -> None:
        """Leadership changed (the Lease). Losing it stops binds and status writes at once.
        Gaining it first re-seeds the engine's counters from the status the previous
        leader persisted (a standby bound nothing, so its own counts are stale), then
        lets the engine bind and the writer write."""
        if not leading:
            self.engine.set_leader(None, False)
            self.writer.set_enabled(False)
            self.events.enabled = False
        async with self._lock:
            self.leading = leading
            if leading:
                self._deployed.clear()  # re-apply: a previous leader may have left changes
                self._names_saved = None  # and record the names as this process knows them
                self._record_tried.clear()
                self._reseed = True
                await self._refresh_status()
            await self._sync()
            if leading and self.leading:
                self.engine.set_leader(None, True)
                self.writer.set_enabled(True)
                self.events.enabled = True
                owners = self.book.owners()
                for rec in self.book.records():  # faults found while standing by
                    if self._view(rec, owners) is not None:
                        self._report(rec)

    async def _refresh_status(self) -> None:
        """Read each policy's status as the previous leader last wrote it: the counters to
        go on from must be the persisted ones, not whatever our watch saw last. One list
        for every policy (a GET each took 50 round trips on every lease gained)."""
        records = self.book.records()
        if not records:
            return
        # A Dedicated scheduler's one policy: one GET, not every policy's object.
        path = f"/apis/{GROUP}/{VERSION}/{PLURAL}" + (f"/{records[0].name}"
                                                       if len(records) == 1 else "")
        try:
            got = await self.client.get(path)
        except Exception as e:  # noqa: BLE001 - an unreachable server must not stop the
            # lead from being taken (set_leading would end before engine.set_leader).
            log.warning("SchedulingPolicy %s: reading the status failed: %s",
                        ", ".join(r.name for r in records), e)
            return
        for obj in (got.get("items") or ()) if len(records) > 1 else (got,):
            meta = obj.get("metadata") or {}
            rec = self.book.get(str(meta.get("name") or ""))
            if rec is not None and meta.get("uid") == rec.uid:
                rec.status = obj.get("status") or {}

    def known(self) -> set[str]:
        """The names of the policies in the book."""
        return {rec.name for rec in self.book.records()}

    async def resync(self) -> None:
        async with self._lock:
            await self._sync()

    # -- the diff -------------------------------------------------------------------------
    def _runs_here(self, rec: PolicyRecord) -> bool:
        return rec.loaded is not None and rec.mode == self.runs_mode

    async def _sync(self) -> None:
        self._retry = False
        owners = self.book.owners()
        want: dict[str, PolicyRecord] = {}
        for rec in self.book.records():
            if owners.get(rec.claimed) == rec.name and self._runs_here(rec):
                want[rec.claimed] = rec
        for sname in list(self._applied):
            if sname not in want:
                self.engine.remove(sname)
                del self._applied[sname]
                self._close_later(self._extenders.pop(sname, []))
        for sname, rec in want.items():
            try:
                await self._sync_one(sname, rec)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - contained in this policy
                self._build_failed(rec, e, "spec")
        self._reseed = False
        await self._sync_shadows(owners)
        # The status first: the writer's task sends it (at once for a pipeline change)
        # while the API calls below wait on the server. After them, a hot reload's
        # observedGeneration waited for the last-good PATCH's round trip (+40-120 ms under
        # load, bench/NOTES.md "Reload latency"). The views depend on nothing below.
        for rec in self.book.records():
            try:
                view = self._view(rec, owners)
                if view is not None:  # this process speaks for the policy
                    self.writer.update(rec.name, view, rec.status, created=rec.created)
                    self._report(rec)
            except Exception:  # a status bug must not stop the other policies' status
                log.exception("SchedulingPolicy %s: computing its status failed", rec.name)
        self._save_names_soon()
        if self.deployer is not None and self.leading:
            await self._deploy(owners)
        if self.records_last_good and self.leading:
            self._record_last_good_soon()

    async def _sync_one(self, sname: str, rec: PolicyRecord) -> None:
        """Run `rec`'s loaded policy under `sname`: swap in its pipeline if it is not
        the one running. Raises whatever building it raised (the caller contains it)."""
        policy = rec.loaded
        assert policy is not None
        applied = self._applied.get(sname)
        if applied is not None and applied[1] is policy:
            if self._reseed:
                # Same pipeline, new leader: only the counters change (the engine
                # keeps the larger of its own and these).
                seed = self._persisted_counters(rec)
                log.info("SchedulingPolicy %s: counting on from bindsTotal=%d "
                         "unschedulableAttempts=%d", rec.name, seed.binds_total,
                         seed.unschedulable_attempts)
                self.engine.reseed(sname, seed)
            return
        try:
            extenders = await self._build_extenders(policy)
        except PolicyError as e:  # the old pipeline (if any) keeps running
            rec.build_error = e
            self._retry = True
            log.warning("%s", e)
            return
        counters: Counters | None = None
        if applied is None or applied[0] != rec.name or self._reseed:
            counters = self._persisted_counters(rec)
        try:
            self.engine.apply(policy, extenders=extenders, counters=counters)
        except BaseException:
            self._close_later(extenders)
            raise
        self._applied[sname] = (rec.name, policy)
        self._close_later(self._extenders.pop(sname, []))
        self._extenders[sname] = extenders
        rec.build_error = None

    def _build_failed(self, rec: PolicyRecord, err: Exception, path: str) -> None:
        """An unexpected fault while building or applying `rec`'s pipeline: shown in its
        status and events, retried on the next event (a bug may depend on the cluster's
        state); the other policies go on."""
        log.error("SchedulingPolicy %s: building its pipeline failed; its last good "
                  "pipeline (if any) keeps running, the other policies are not affected",
                  rec.name, exc_info=err)
        rec.build_error = PolicyError(
            [FieldError(path, f"the pipeline could not be built ({type(err).__name__}: "
                              f"{truncate(str(err))}); a polsched bug or an unusable "
                              "referenced object")], rec.name)
        self._retry = True

    def _report(self, rec: PolicyRecord) -> None:
        """A Warning event for the fault `rec` shows in its status, once per fault."""
        if rec.error is not None:
            self.events.warn(rec.name, rec.uid, cond.INVALID_SPEC, str(rec.error))
        elif rec.build_error is not None:
            self.events.warn(rec.name, rec.uid, BUILD_FAILED, str(rec.build_error))
        elif rec.shadow_refusal:
            self.events.warn(rec.name, rec.uid, SHADOW_NOT_ALLOWED, rec.shadow_refusal)
        else:
            self.events.resolved(rec.name)

    def _shadow_target(self, rec: PolicyRecord, owners: Mapping[str, str]
                       ) -> tuple[PolicyRecord | None, str]:
        """The live policy record a shadow attaches to, or None and why not."""
        target = self.book.get(rec.shadow_of)
        if target is None:
            return None, f"SchedulingPolicy {rec.shadow_of!r} does not exist"
        if target.shadow_of:
            return None, f"SchedulingPolicy {rec.shadow_of!r} is a shadow itself"
        if target.loaded is None or owners.get(target.claimed) != target.name:
            return None, f"SchedulingPolicy {rec.shadow_of!r} does not run (see its status)"
        if target.mode != self.runs_mode:
            return None, (f"SchedulingPolicy {rec.shadow_of!r} runs {target.mode}; only "
                          f"{self.runs_mode} policies can be shadowed here")
        if target.claimed not in self._applied:
            return None, f"SchedulingPolicy {rec.shadow_of!r} does not run (see its status)"
        if not self.shadow_allowed(rec, target):
            return None, self.shadow_refused(rec)
        return target, ""

    @staticmethod
    def shadow_allowed(rec: PolicyRecord, target: PolicyRecord) -> bool:
        """A shadow sees every pod of the policy it shadows: the shadowed policy's owner
        opts in by listing the shadow in spec.allowedShadows (of its running spec)."""
        return target.loaded is not None and rec.name in target.loaded.allowed_shadows

    @staticmethod
    def shadow_refused(rec: PolicyRecord) -> str:
        return (f"SchedulingPolicy {rec.shadow_of!r} does not allow {rec.name!r} to shadow "
                f"it: its spec.allowedShadows must list {rec.name!r} (a shadow sees every "
                f"pod of the policy it shadows, so whoever may edit {rec.shadow_of!r} "
                "decides)")

    async def _sync_shadows(self, owners: Mapping[str, str]) -> None:
        """Attach each loaded shadow to its live policy's scheduler, detach the rest."""
        want: dict[str, tuple[str, str, Policy]] = {}
        for rec in self.book.records():
            rec.shadow_refusal = ""
            if rec.loaded is None or not rec.shadow_of or rec.loaded.shadow_of != rec.shadow_of:
                continue
            if self.only is not None:
                continue  # a Dedicated scheduler runs one policy, not shadows
            target, _ = self._shadow_target(rec, owners)
            if target is not None:
                want[rec.name] = (target.name, target.claimed, rec.loaded)
            else:
                other = self.book.get(rec.shadow_of)
                if other is not None and other.loaded is not None and \
                        not self.shadow_allowed(rec, other):
                    rec.shadow_refusal = self.shadow_refused(rec)
        for name in list(self._shadows):
            if name not in want:
                self.engine.remove_shadow(name)
                del self._shadows[name]
                self._close_later(self._extenders.pop(SHADOW_PREFIX + name, []))
        for name, (live, sname, policy) in want.items():
            if self._shadows.get(name) == (sname, policy) and \
                    self.engine.shadow_stats(name) is not None:
                continue
            shadow_rec = self.book.get(name)
            try:
                extenders = await self._build_extenders(policy)
            except PolicyError as e:
                if shadow_rec is not None:
                    shadow_rec.build_error = e
                self._retry = True
                continue
            except Exception as e:  # noqa: BLE001 - contained in this shadow
                if shadow_rec is not None:
                    self._build_failed(shadow_rec, e, "spec")
                continue
            try:
                self.engine.apply_shadow(policy, live, sname, extenders=extenders)
            except Exception as e:  # noqa: BLE001 - contained in this shadow
                self._close_later(extenders)
                if shadow_rec is not None:
                    self._build_failed(shadow_rec, e, "spec.shadowOf")
                continue
            self._shadows[name] = (sname, policy)
            self._close_later(self._extenders.pop(SHADOW_PREFIX + name, []))
            self._extenders[SHADOW_PREFIX + name] = extenders
            if shadow_rec is not None:
                shadow_rec.build_error = None

    async def _deploy(self, owners: Mapping[str, str]) -> None:
        assert self.deployer is not None
        from polsched.controller.dedicated.deployments import ForeignObject

        def dedicated_owner(rec: PolicyRecord) -> bool:
            return (rec.loaded is not None and rec.mode == DEDICATED
                    and owners.get(rec.claimed) == rec.name)

        # The admin's cap: the oldest maxPolicies Dedicated policies run.
        cap = self.rules.tenancy.dedicated.max_policies
        ranked = sorted((r for r in self.book.records() if dedicated_owner(r)),
                        key=lambda r: (r.created, r.name))
        over = {r.name for r in ranked[cap:]} if cap is not None else set()
        for rec in self.book.records():
            dedicated = dedicated_owner(rec) and rec.name not in over
            if rec.name in over:
                self._set_refused(rec, owners, None, (
                    f"the cluster admin allows {cap} Dedicated policies (tenancy "
                    f"dedicated.maxPolicies) and {cap} older ones exist; this one is "
                    f"deployed when one of them goes, or run it Shared"))
            elif self._refused.get(rec.name, (0, ""))[0] is None:
                self._set_refused(rec, owners, None, None)
            if dedicated:
                if self._deployed.get(rec.name) == rec.generation:
                    continue
                refused = self._refused.get(rec.name)
                if refused is not None and refused[0] == rec.generation:
                    continue  # reported once; the next generation is tried again
                try:
                    await self.deployer.apply(rec)
                    self._deployed[rec.name] = rec.generation
                    self._set_conflict(rec, owners, None)
                    self._set_refused(rec, owners, None, None)
                except ApiError as e:
                    if e.status in (400, 403, 422):  # not made better by retrying
                        log.warning("SchedulingPolicy %s: the API server refused its "
                                    "Dedicated scheduler: %s", rec.name, e)
                        self._set_refused(rec, owners, rec.generation, (
                            f"the API server refused the Dedicated scheduler's objects "
                            f"({e.status} {e.reason}: {e.message[:256]}); fix "
                            f"spec.runtime and apply again"))
                    else:
                        self._retry = True
                        log.warning("SchedulingPolicy %s: applying the Dedicated scheduler "
                                    "failed: %s", rec.name, e)
                except ForeignObject as e:
                    # Stalled until someone removes the object or renames the policy;
                    # _retry_conflicts looks again every CONFLICT_RETRY_SECONDS (not
                    # every event of every policy: a GET each time).
                    if self._conflicts.get(rec.name) != str(e):
                        log.warning("SchedulingPolicy %s: %s", rec.name, e)
                    self._set_conflict(rec, owners, str(e))
                except Exception:
                    self._retry = True
                    log.exception("SchedulingPolicy %s: applying the Dedicated scheduler "
                                  "failed", rec.name)
            elif rec.name in self._deployed or rec.name in self._conflicts:
                # Switched to Shared, or lost its name.
                self._set_conflict(rec, owners, None)
                try:
                    await self.deployer.delete(rec.name)
                    self._deployed.pop(rec.name, None)
                except Exception:
                    self._retry = True
                    log.exception("SchedulingPolicy %s: removing the Dedicated scheduler "
                                  "failed", rec.name)
        if self._conflicts and (self._conflict_retry is None or self._conflict_retry.done()):
            self._conflict_retry = asyncio.get_running_loop().create_task(
                self._retry_conflicts(), name="polsched-dedicated-conflicts")

    async def _retry_conflicts(self) -> None:
        await asyncio.sleep(CONFLICT_RETRY_SECONDS)
        async with self._lock:
            self._conflict_retry = None  # the sync below schedules the next, if needed
            if self._conflicts and self.leading:
                for name in self._conflicts:
                    self._deployed.pop(name, None)
                await self._sync()

    def _set_refused(self, rec: PolicyRecord, owners: Mapping[str, str],
                     generation: int | None, message: str | None) -> None:
        """Record (or clear, message None) why a Dedicated policy is not deployed, and
        write the status it changes (no scheduler of its own runs to write it)."""
        before = self._refused.get(rec.name)
        after = (generation, message) if message is not None else None
        if before == after:
            return
        if after is None:
            self._refused.pop(rec.name, None)
        else:
            self._refused[rec.name] = after
        view = self._view(rec, owners)
        if view is None:
            self.writer.drop(rec.name)
        else:
            self.writer.update(rec.name, view, rec.status, created=rec.created)

    def _set_conflict(self, rec: PolicyRecord, owners: Mapping[str, str],
                      message: str | None) -> None:
        """Record (or clear) a Dedicated policy's ForeignObject and write the status it
        changes: the operator writes a Dedicated policy's status only while its
        Deployment cannot be applied (no scheduler of its own runs to write it)."""
        before = self._conflicts.get(rec.name)
        if message is None:
            self._conflicts.pop(rec.name, None)
        else:
            self._conflicts[rec.name] = message
        if before == message:
            return
        view = self._view(rec, owners)
        if view is None:
            self.writer.drop(rec.name)
        else:
            self.writer.update(rec.name, view, rec.status, created=rec.created)
        if message is None and view is None and self.leading:
            task = asyncio.get_running_loop().create_task(
                self._conflict_cleared(rec.name, rec.generation))
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    async def _conflict_cleared(self, name: str, generation: int) -> None:
        """Replace the DedicatedObjectConflict verdict once the Deployment is applied:
        Ready=Unknown (Reconciling) until the Dedicated scheduler writes its own status.
        Only while the verdict is still ours (the JSON patch tests it), so a status the
        new scheduler already wrote is never overwritten."""
        path = f"/apis/{GROUP}/{VERSION}/{PLURAL}/{name}/status"
        try:
            obj = await self.client.get(path)
            conds = list((obj.get("status") or {}).get("conditions") or ())
            i = next((i for i, c in enumerate(conds) if c.get("type") == cond.READY), None)
            if i is None or conds[i].get("reason") != DEDICATED_OBJECT_CONFLICT:
                return
            ready = cond.Condition(cond.READY, cond.UNKNOWN, cond.STARTING,
                                   "the Dedicated scheduler's Deployment is applied; its "
                                   "scheduler writes this status once it runs", generation)
            merged = cond.merge_conditions(conds, list(cond.kstatus(ready, stalled=False)),
                                           cond.now_rfc3339())
            await self.client.patch(path, [
                {"op": "test", "path": f"/status/conditions/{i}/reason",
                 "value": DEDICATED_OBJECT_CONFLICT},
                {"op": "replace", "path": "/status/conditions", "value": merged}], "json")
        except ApiError as e:
            log.info("SchedulingPolicy %s: clearing DedicatedObjectConflict: %s", name, e)

    def _record_last_good_soon(self) -> None:
        """Write the last-good records in the background, off the reload's path: _sync
        runs under the lock that the next watch event's observe() waits for, and the
        record's PATCH took up to a second under load (bench/NOTES.md "Hot reload under
        load"). One writer at a time, and each pass reads the book when it runs, so the
        record only ever moves to the newest generation that loaded (never back to an
        older one, never to one that did not load)."""
        if self._recording is not None and not self._recording.done():
            self._record_again = True
            return

        async def record() -> None:
            while True:
                self._record_again = False
                if not (self.records_last_good and self.leading):
                    return
                try:
                    await self._record_last_good()
                except Exception as e:  # unreachable: the next good generation tries again
                    log.warning("recording the last good generations failed: %r", e)
                if not self._record_again:
                    return

        self._recording = asyncio.get_running_loop().create_task(
            record(), name="polsched-last-good")

    async def last_good_recorded(self) -> None:
        """Return once the last-good writes asked for so far are done."""
        while self._recording is not None and not self._recording.done():
            await asyncio.wait({self._recording})

    async def _record_last_good(self) -> None:
        """Write the last-good record of each policy whose running generation (the last
        that loaded) is not the one recorded yet (only when the good generation changes).
        Written in the background, a good generation may be followed by a bad one before
        its turn comes: it is still the one to record."""
        for rec in self.book.records():
            policy, spec = rec.loaded, rec.loaded_spec
            if policy is None or spec is None or rec.recorded == policy.generation \
                    or self._record_tried.get(rec.name) == (rec.uid, policy.generation):
                continue
            generation = policy.generation
            self._record_tried[rec.name] = (rec.uid, generation)
            try:
                await self.client.patch(f"/apis/{GROUP}/{VERSION}/{PLURAL}/{rec.name}",
                                        lastgood.patch(rec.uid, generation, spec), "merge")
            except ApiError as e:
                log.warning("SchedulingPolicy %s: recording generation %d in annotation %s "
                            "failed (a restart on a bad spec would not find it): %s",
                            rec.name, generation, lastgood.ANNOTATION, e)
                continue
            rec.recorded = generation

    # -- status ----------------------------------------------------------------------------
    def _view(self, rec: PolicyRecord, owners: Mapping[str, str]) -> StatusView | None:
        """The conditions of `rec`'s current generation (controller.policies.conditions): Ready only
        when that generation runs; Stalled when it cannot run without an edit; Reconciling
        while it is on its way."""
        gen = rec.generation
        if rec.error is not None:
            valid = cond.Condition(cond.VALID, False, cond.INVALID_SPEC,
                                   _error_message(rec.error, rec.loaded), gen)
        elif rec.build_error is not None:
            # It loaded, but what it needs (a CA Secret, an extender client) could not be
            # built: the running pipeline, if any, is the previous one.
            applied = self._applied.get(rec.claimed)
            running = applied[1] if applied is not None and applied[0] == rec.name \
                and applied[1] is not rec.loaded else None
            valid = cond.Condition(cond.VALID, False, BUILD_FAILED,
                                   _error_message(rec.build_error, running), gen)
        else:
            valid = cond.Condition(cond.VALID, True, cond.LOADED,
                                   f"generation {gen} loaded", gen)
        if rec.shadow_of and rec.loaded is not None and rec.loaded.shadow_of == rec.shadow_of:
            return self._shadow_view(rec, owners, valid)
        owner = owners.get(rec.claimed)
        held = self.book.held().get(rec.claimed)
        if owner is None and held is not None and held[0] != rec.name:
            ready = cond.Condition(
                cond.READY, False, cond.SCHEDULER_NAME_CONFLICT,
                f"schedulerName {rec.claimed!r} is held for SchedulingPolicy {held[0]!r}, "
                f"its owner until deleted, for {self.rules.tenancy.name_grace_seconds} s "
                f"after the delete (tenancy nameGraceSeconds), so that a re-created "
                f"{held[0]!r} gets it back; this policy takes it over after that", gen)
            return StatusView(rec.claimed, None, None, None,
                              (*cond.kstatus(ready, stalled=False), valid))
        if owner != rec.name:
            ready = cond.Condition(
                cond.READY, False, cond.SCHEDULER_NAME_CONFLICT,
                f"schedulerName {rec.claimed!r} is already used by SchedulingPolicy "
                f"{owner!r}, which owns it; change spec.schedulerName or delete {owner!r}",
                gen)
            return StatusView(rec.claimed, None, None, None,
                              (*cond.kstatus(ready, stalled=True), valid))
        if rec.loaded is None:
            ready = cond.Condition(cond.READY, False, cond.INVALID_SPEC,
                                   "no generation of this policy has loaded yet; see Valid", gen)
            return StatusView(rec.claimed, None, None, None,
                              (*cond.kstatus(ready, stalled=True), valid))
        if not self._runs_here(rec):
            refused = self._refused.get(rec.name)
            if refused is not None:
                ready = cond.Condition(cond.READY, False, DEDICATED_REFUSED, refused[1], gen)
                return StatusView(rec.claimed, None, None, None,
                                  (*cond.kstatus(ready, stalled=True), valid))
            conflict = self._conflicts.get(rec.name)
            if conflict is not None:
                ready = cond.Condition(cond.READY, False, DEDICATED_OBJECT_CONFLICT,
                                       conflict, gen)
                return StatusView(rec.claimed, None, None, None,
                                  (*cond.kstatus(ready, stalled=True), valid))
            # Another process runs it (the operator leaves a Dedicated policy's status to
            # its scheduler, and a Dedicated scheduler leaves a Shared one to the operator).
            return None
        policy = rec.loaded
        applied = self._applied.get(rec.claimed)
        if applied is None:
            ready = cond.Condition(cond.READY, False,
                                   BUILD_FAILED if rec.build_error is not None
                                   else cond.INVALID_SPEC,
                                   "the pipeline could not be built; see Valid", gen)
            return StatusView(rec.claimed, None, None, None,
                              (*cond.kstatus(ready, stalled=True), valid))
        running = applied[1]
        msg = (f"scheduler {policy.scheduler_name!r} runs generation {running.generation}"
               + (" (paused: no new binds)" if running.paused else ""))
        if rec.error is not None:
            # The last good pipeline keeps scheduling, but this generation will not run.
            problems = "; ".join(str(e) for e in rec.error.errors)
            ready = cond.Condition(cond.READY, False, cond.INVALID_SPEC,
                                   f"generation {gen} does not load: {problems}; {msg}", gen)
            stalled = True
        elif rec.build_error is not None and running is not policy:
            problems = "; ".join(str(e) for e in rec.build_error.errors)
            ready = cond.Condition(cond.READY, False, BUILD_FAILED,
                                   f"generation {gen} could not be built: {problems}; {msg}",
                                   gen)
            stalled = False  # retried on the next event (a Secret may appear)
        elif running.generation != gen:
            ready = cond.Condition(cond.READY, cond.UNKNOWN, cond.PROGRESSING,
                                   f"generation {gen} is starting; {msg}", gen)
            stalled = False
        else:
            ready = cond.Condition(cond.READY, True, cond.RUNNING, msg, gen)
            stalled = False
        return StatusView(rec.claimed, rec.claimed, running.generation, None,
                          (*cond.kstatus(ready, stalled=stalled), valid))

    def _shadow_view(self, rec: PolicyRecord, owners: Mapping[str, str],
                     valid: cond.Condition) -> StatusView | None:
        gen = rec.generation
        if self.only is not None:
            return None  # the operator writes shadows' status
        target, why = self._shadow_target(rec, owners)
        attached = self._shadows.get(rec.name)
        if target is None or attached is None:
            refused = bool(rec.shadow_refusal)
            ready = cond.Condition(cond.READY, False,
                                   SHADOW_NOT_ALLOWED if refused else SHADOW_TARGET_NOT_RUNNING,
                                   why or "not attached yet", gen)
            # Waits for its target to run (kstatus Reconciling), unless its spec is bad
            # or the target's owner has to allow it.
            return StatusView("", None, None, None,
                              (*cond.kstatus(ready, stalled=rec.error is not None or refused),
                               valid))
        running = attached[1]
        ready = cond.Condition(
            cond.READY, True, SHADOWING,
            f"generation {running.generation} decides beside SchedulingPolicy {target.name!r} "
            f"(schedulerName {target.claimed!r}) and binds nothing", gen)
        return StatusView("", SHADOW_PREFIX + rec.name, running.generation, None,
                          (*cond.kstatus(ready, stalled=False), valid))

    def _on_engine_change(self, scheduler_name: str) -> None:
        applied = self._applied.get(scheduler_name)
        if applied is not None:
            self.writer.touch(applied[0])
        for name, (sname, _) in self._shadows.items():
            if sname == scheduler_name:
                self.writer.touch(name)

    def _persisted_counters(self, rec: PolicyRecord) -> Counters:
        written = self.writer.written(rec.name)

        def most(key: str) -> int:
            values = [rec.status.get(key), written.get(key)]
            return max(int(v) for v in values if isinstance(v, int | float)) \
                if any(isinstance(v, int | float) for v in values) else 0

        last = written.get("lastBindTime") or rec.status.get("lastBindTime")
        return Counters(binds_total=most("bindsTotal"),
                        unschedulable_attempts=most("unschedulableAttempts"),
                        last_bind_time=str(last) if last else None,
                        preemptions_total=most("preemptionsTotal"),
                        preemption_victims=most("preemptionVictimsTotal"))

    # -- extenders -------------------------------------------------------------------------
    async def _build_extenders(self, policy: Policy) -> list[HTTPExtender]:
        """One client per spec.extenders entry (extender.client.build_extenders, as explain
        and simulate build them). Raises PolicyError naming the entry for anything that
        goes wrong, expected (a CA Secret unreadable) or not."""
        try:
            return await build_extenders(policy.extenders, self._read_ca,
                                         destinations=self.rules.destinations)
        except ExtenderSetupError as e:
            raise PolicyError([FieldError(e.path, e.message)], policy.name) from e

    async def _read_ca(self, namespace: str, name: str, path: str) -> str:
        """The CA of a caSecretRef, checked as PEM certificates: from the pod's mount in a
        Dedicated scheduler (its namespace's Secrets), else through the API."""
        if self.mounted_cas is not None and namespace == self.mounted_cas[0]:
            return self._read_mounted_ca(self.mounted_cas[1], namespace, name, path)
        return await extender_ca.read_ca(self.client, namespace, name, path)

    @staticmethod
    def _read_mounted_ca(directory: Path, namespace: str, name: str, path: str) -> str:
        """ca.crt of Secret namespace/name as the kubelet mounted it (optional: a missing
        Secret or key leaves no file)."""
        try:
            pem = (directory / name / "ca.crt").read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise PolicyError([FieldError(path, f"Secret {namespace}/{name} has no readable "
                                                f"key ca.crt in this pod ({e})")]) from e
        problem = ca_bundle_problem(pem)
        if problem:
            raise PolicyError([FieldError(path, f"Secret {namespace}/{name} key ca.crt must "
                                                f"be PEM CA certificates: {problem}")])
        return pem

    def _close_later(self, extenders: Sequence[HTTPExtender]) -> None:
        if not extenders:
            return

        async def close() -> None:
            await asyncio.sleep(EXTENDER_CLOSE_DELAY)
            for ext in extenders:
                try:
                    await ext.close()
                except Exception:
                    log.debug("closing extender %s failed", ext.name, exc_info=True)

        task = asyncio.get_running_loop().create_task(close())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def close(self) -> None:
        await self.events.close()
        for task in list(self._background):
            task.cancel()
        if self._conflict_retry is not None:
            self._conflict_retry.cancel()
        if self._recording is not None:
            self._recording.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._recording
        for exts in self._extenders.values():
            for ext in exts:
                try:
                    await ext.close()
                except Exception:
                    log.debug("closing extender %s failed", ext.name, exc_info=True)
        self._extenders.clear()


def _reload_result(rec: PolicyRecord) -> str:
    return "error" if rec.error is not None or rec.build_error is not None else "success"


def truncate(text: str, limit: int = 300) -> str:
    """A message from elsewhere (an exception), bounded for a condition or an event."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 4] + " ..."


def _error_message(error: PolicyError, running: Policy | None) -> str:
    problems = "; ".join(str(e) for e in error.errors)
    if running is not None:
        return f"{problems} (generation {running.generation} keeps running)"
    return problems

