"""Batched, monotonic writes of a SchedulingPolicy's status.

The engine calls back on every bind; a PATCH per bind would cost the API server more
than the bind itself. So each policy has a slot: callbacks only mark it dirty, and one
task per policy writes the whole current status at most every `interval` seconds (sooner
when the pipeline changed, so status.observedGeneration follows an edit at once), or
every (writing policies)/STATUS_WRITES_PER_SECOND seconds when that is longer. Counts
are read from the engine when the write happens, not accumulated from callbacks, so a
burst of binds costs one PATCH and no increment can be lost. bindsTotal and
unschedulableAttempts never go backwards: each write takes the maximum of what the
object said when we first saw it, what we wrote last and what the engine counts.

A write is a JSON merge patch of the changed status fields to the status subresource;
kopf keeps its own bookkeeping in annotations, so nothing else writes these fields.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from polsched.api.model import GROUP, PLURAL, VERSION
from polsched.cluster.client import ApiClient, ApiError, is_unreachable
from polsched.controller.policies import conditions
from polsched.controller.policies.ledger import BindLedger, before_creation
from polsched.controller.process.options import STATUS_INTERVAL_SECONDS
from polsched.objects import Json
from polsched.scheduler import metrics
from polsched.scheduler.engine import SchedulerStats

log = logging.getLogger(__name__)


# After a failed write: wait, then try again with the then-current status.
RETRY_DELAY = 1.0
# Upper bound of one status write.
WRITE_TIMEOUT = 30.0
# Count writes (not pipeline changes) of all policies together, per second at most: each
# policy writes at most every max(interval, writing policies / this) seconds (those that
# wrote within the last policies / this seconds: StatusWriter.period). One policy keeps
# the interval (0.3 s, ~3 writes a second); 50 busy policies write every 10 s each
# instead of 166 PATCHes a second. A status PATCH of a SchedulingPolicy costs the API
# server 4.5-9 ms of CPU and etcd ~1.2 ms (measured: 300 merge patches of bindsTotal on
# this machine's control plane), two or three times a pod's Binding, and comes back to
# the operator as a watch event; at 10 a second, 50 policies made ~130 more writes than
# one policy in the many-policies bench's ~20 s, ~1 s of the machine's CPU (issue 15).
STATUS_WRITES_PER_SECOND = 5.0


def status_path(name: str) -> str:
    return f"/apis/{GROUP}/{VERSION}/{PLURAL}/{name}/status"


@dataclass(frozen=True)
class StatusView:
    """What the controller decided about one policy; the live counts come from the engine.

    `running` is the engine's scheduler whose stats fill the counts (None: nothing of
    ours runs it, e.g. a SchedulerNameConflict loser; the counts are then left alone).
    `observed_generation` and `pipeline` describe the pipeline that runs (None: none).
    """

    scheduler_name: str
    running: str | None
    observed_generation: int | None
    pipeline: Mapping[str, list[str]] | None
    conditions: tuple[conditions.Condition, ...]


def compose(view: StatusView, stats: SchedulerStats | None, previous: Mapping[str, Any],
            now: str, binds: tuple[int, str] | None = None) -> Json:
    """The status to write, given the last known status `previous`. Pure. `binds`: the
    (bindsTotal, lastBindTime) pair of the BindLedger, which then replaces the engine's
    in-memory count."""
    out: Json = {"schedulerName": view.scheduler_name}
    generation = view.observed_generation
    pipeline: Mapping[str, list[str]] | None = view.pipeline
    if stats is not None and stats.shadow is not None:
        out["shadow"] = stats.shadow  # a shadow policy binds nothing: no bind counts
    elif stats is not None:
        out["boundPods"] = stats.bound_pods
        out["boundGangs"] = stats.bound_gangs
        out["pendingPods"] = stats.pending_pods
        last_bind = stats.last_bind_time or previous.get("lastBindTime")
        if binds is not None:
            out["bindsTotal"] = max(_int(previous.get("bindsTotal")), binds[0])
            last_bind = binds[1] or previous.get("lastBindTime")
        else:
            out["bindsTotal"] = max(_int(previous.get("bindsTotal")), stats.binds_total)
        out["unschedulableAttempts"] = max(_int(previous.get("unschedulableAttempts")),
                                           stats.unschedulable_attempts)
        out["preemptionsTotal"] = max(_int(previous.get("preemptionsTotal")),
                                      stats.preemptions_total)
        out["preemptionVictimsTotal"] = max(_int(previous.get("preemptionVictimsTotal")),
                                            stats.preemption_victims)
        last_preemption = stats.last_preemption or previous.get("lastPreemption")
        if last_preemption:
            out["lastPreemption"] = last_preemption
        if last_bind:
            out["lastBindTime"] = last_bind
        # The engine knows what it really runs; prefer it over what we asked for.
        if stats.observed_generation:
            generation = stats.observed_generation
        if stats.pipeline:
            pipeline = stats.pipeline
    if generation is not None:
        out["observedGeneration"] = generation
    if pipeline is not None:
        out["pipeline"] = {k: list(pipeline.get(k, ())) for k in
                           ("filters", "scorers", "extenders")}
    prev_conditions = previous.get("conditions")
    wanted = list(view.conditions)
    prev_list = prev_conditions if isinstance(prev_conditions, list) else None
    if stats is not None and stats.shadow is None:
        # MetricsAvailable: only while the policy has load-aware scorers.
        if stats.node_metrics is not None:
            ok, reason, message = stats.node_metrics
            wanted.append(conditions.Condition(conditions.METRICS_AVAILABLE, ok, reason,
                                               message, generation or 0))
        elif prev_list is not None:
            prev_list = [c for c in prev_list if not isinstance(c, dict)
                         or c.get("type") != conditions.METRICS_AVAILABLE]
    out["conditions"] = conditions.merge_conditions(prev_list, wanted, now)
    return out


def changed_fields(desired: Mapping[str, Any], previous: Mapping[str, Any]) -> Json:
    return {k: v for k, v in desired.items() if previous.get(k) != v}


def _int(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


@dataclass
class _Slot:
    name: str
    view: StatusView
    written: Json
    created: str = ""  # metadata.creationTimestamp
    dirty: asyncio.Event = field(default_factory=asyncio.Event)
    urgent: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    # When its last successful status write ended (monotonic; counts and pipeline changes
    # alike); -inf before the first. StatusWriter.period counts the slots that wrote lately.
    last_write: float = float("-inf")


class StatusWriter:
    """One batching task per policy; see the module docstring.

    `stats(scheduler_name)` reads the engine. Writes happen only while enabled (the
    leader writes; a standby replica keeps its slots current but silent)."""

    def __init__(self, client: ApiClient, stats: Callable[[str], SchedulerStats | None], *,
                 interval: float = STATUS_INTERVAL_SECONDS, enabled: bool = True,
                 deadline: Callable[[], float] | None = None,
                 ledger: BindLedger | None = None) -> None:
        self._client = client
        # bindsTotal and lastBindTime, exact across restarts (controller.policies.ledger).
        self.ledger = ledger
        # The lease's renew deadline (LeaseElector.valid_until): a write is cut there.
        self.deadline = deadline
        self._stats = stats
        self.interval = interval
        self._slots: dict[str, _Slot] = {}
        # scheduler name -> the slots whose view runs it (touch_scheduler, once per bind the
        # ledger counts: a scan of every slot cost O(policies) per bind); None: stale.
        self._by_running: dict[str, list[_Slot]] | None = None
        self._enabled = asyncio.Event()
        if enabled:
            self._enabled.set()
        self.writes = 0  # PATCHes sent, for tests and logs

    # -- what the controller calls --------------------------------------------------------
    def update(self, name: str, view: StatusView, observed_status: Mapping[str, Any],
               *, urgent: bool = False, created: str = "") -> None:
        """Set the decided part of `name`'s status. `observed_status` is the object's status
        as last read: it seeds the counters and conditions the first time. `created` is
        its metadata.creationTimestamp: binds before it are not this policy's."""
        slot = self._slots.get(name)
        if slot is None:
            slot = _Slot(name, view, dict(observed_status), created)
            self._slots[name] = slot
            self._by_running = None
            slot.task = asyncio.get_running_loop().create_task(
                self._loop(slot), name=f"polsched-status-{name}")
            urgent = True
        else:
            if slot.view != view:
                if slot.view.running != view.running:
                    self._by_running = None
                slot.view = view
                urgent = True
            self._adopt(slot, observed_status)
        slot.dirty.set()
        if urgent:
            slot.urgent.set()

    def observed(self, name: str, observed_status: Mapping[str, Any]) -> None:
        """The object's status as a watch event showed it, nothing else changed (most
        often the echo of our own write): counters ahead of ours are adopted, as in
        update(), and the slot is written only if that changed something."""
        slot = self._slots.get(name)
        if slot is not None and self._adopt(slot, observed_status):
            slot.dirty.set()

    def _adopt(self, slot: _Slot, observed_status: Mapping[str, Any]) -> bool:
        """Counters in the object may be ahead of ours (another replica led before):
        take them. Whether anything was taken."""
        before = dict(slot.written)
        seen = _int(observed_status.get("bindsTotal"))
        # A status without bindsTotal has no pair to take: taking it as 0 would make the
        # slot believe 0 was written, and a policy that never binds would never show it.
        if observed_status.get("bindsTotal") is not None and (
                seen > _int(slot.written.get("bindsTotal")) or (
                    seen == _int(slot.written.get("bindsTotal"))
                    and not self._enabled.is_set())):
            # The pair goes together: the ledger counts on from it.
            slot.written["bindsTotal"] = seen
            if observed_status.get("lastBindTime"):
                slot.written["lastBindTime"] = observed_status["lastBindTime"]
        for key in ("unschedulableAttempts", "preemptionsTotal", "preemptionVictimsTotal"):
            seen = _int(observed_status.get(key))
            if seen > _int(slot.written.get(key)):
                slot.written[key] = seen
        return slot.written != before

    def touch_scheduler(self, scheduler_name: str) -> None:
        """As touch, for the policy whose scheduler is `scheduler_name`."""
        by_running = self._by_running
        if by_running is None:
            by_running = self._by_running = {}
            for slot in self._slots.values():
                if slot.view.running is not None:
                    by_running.setdefault(slot.view.running, []).append(slot)
        for slot in by_running.get(scheduler_name, ()):
            slot.dirty.set()

    def touch(self, name: str) -> None:
        """The counts of `name` changed: write them within `interval`."""
        slot = self._slots.get(name)
        if slot is not None:
            slot.dirty.set()

    def written(self, name: str) -> Mapping[str, Any]:
        slot = self._slots.get(name)
        return slot.written if slot is not None else {}

    def drop(self, name: str) -> None:
        """The policy is gone: stop writing its status."""
        slot = self._slots.pop(name, None)
        self._by_running = None
        metrics.forget_policy_conditions(name)
        if slot is not None and slot.task is not None:
            slot.task.cancel()
        if slot is not None and slot.view.running is not None and self.ledger is not None:
            self.ledger.close(slot.view.running)

    def set_enabled(self, enabled: bool) -> None:
        if enabled:
            self._enabled.set()
            for slot in self._slots.values():
                slot.dirty.set()
                slot.urgent.set()
        else:
            self._enabled.clear()
            if self.ledger is not None:  # the next leader counts on from what we wrote
                self.ledger.close()

    async def flush_all(self) -> None:
        """Write every dirty slot now (on shutdown, so the last counts are persisted)."""
        if not self._enabled.is_set():
            return
        for slot in list(self._slots.values()):
            if slot.dirty.is_set():
                slot.dirty.clear()
                with contextlib.suppress(Exception):
                    await self._flush(slot)

    async def close(self) -> None:
        await self.flush_all()
        for name in list(self._slots):
            self.drop(name)

    def period(self, now: float | None = None) -> float:
        """Seconds between two count writes of one policy: the interval, longer when many
        policies write and share STATUS_WRITES_PER_SECOND. Only the policies that wrote
        within the longest period (all of them writing) count: one busy policy among 50
        idle ones keeps writing every interval, 50 busy ones every 50 / budget seconds."""
        longest = len(self._slots) / STATUS_WRITES_PER_SECOND
        if longest <= self.interval:
            return self.interval
        now = time.monotonic() if now is None else now
        writing = sum(1 for slot in self._slots.values() if now - slot.last_write <= longest)
        return max(self.interval, writing / STATUS_WRITES_PER_SECOND)

    # -- the batching loop ----------------------------------------------------------------
    async def _loop(self, slot: _Slot) -> None:
        while True:
            await slot.dirty.wait()
            await self._enabled.wait()
            slot.dirty.clear()
            slot.urgent.clear()
            try:
                await self._flush(slot)
                slot.last_write = time.monotonic()
            except asyncio.CancelledError:
                raise
            except ApiError as e:
                if e.status == 404:
                    log.debug("SchedulingPolicy %s is gone; status not written", slot.name)
                    continue
                log.warning("SchedulingPolicy %s: status write failed: %s", slot.name, e)
                slot.dirty.set()
                await asyncio.sleep(RETRY_DELAY)
                continue
            except Exception as e:
                if is_unreachable(e) or isinstance(e, TimeoutError):
                    # An outage: ApiClient.outage says so once; retry quietly.
                    log.debug("SchedulingPolicy %s: status write failed: %r", slot.name, e)
                else:
                    log.exception("SchedulingPolicy %s: status write failed", slot.name)
                slot.dirty.set()
                await asyncio.sleep(RETRY_DELAY)
                continue
            # Rate limit: at most one write per period, unless the pipeline changed.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(slot.urgent.wait(), self.period())

    def _open_accounts(self) -> None:
        """Open the ledger's account of every policy that binds and has none yet, from
        what its slot wrote: one pass over the cache for all (they all open on their
        first write after the lead is taken, 50 passes with 50 policies)."""
        assert self.ledger is not None
        pairs: dict[str, tuple[int, str | None]] = {}
        for slot in self._slots.values():
            running = slot.view.running
            if running is None or running in pairs or self.ledger.is_open(running):
                continue
            try:
                stats = self._stats(running)
            except KeyError:
                continue
            if stats is not None and stats.shadow is None:
                pairs[running] = (_int(slot.written.get("bindsTotal")),
                                  str(slot.written.get("lastBindTime") or "")
                                  or before_creation(slot.created))
        self.ledger.open_many(pairs)

    async def _flush(self, slot: _Slot) -> None:
        view = slot.view
        stats = None
        if view.running is not None:
            try:
                stats = self._stats(view.running)
            except KeyError:
                stats = None
        binds: tuple[int, str] | None = None
        if stats is not None and stats.shadow is None and view.running is not None \
                and self.ledger is not None:
            if not self.ledger.is_open(view.running):
                self._open_accounts()
            binds = self.ledger.persistable(view.running)
        desired = compose(view, stats, slot.written, conditions.now_rfc3339(), binds)
        metrics.policy_conditions(slot.name, desired.get("conditions") or ())
        patch = changed_fields(desired, slot.written)
        if not patch:
            return
        left = WRITE_TIMEOUT
        if self.deadline is not None:
            left = min(left, self.deadline() - time.monotonic())
            if left <= 0:  # no longer leading: the next leader writes
                slot.dirty.set()
                return
        async with asyncio.timeout(left):
            await self._client.patch(status_path(slot.name), {"status": patch}, "merge")
        self.writes += 1
        slot.written.update(patch)
