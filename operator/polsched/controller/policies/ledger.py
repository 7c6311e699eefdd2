"""Exact status.bindsTotal across restarts and failovers (issue 11, defect 2).

The spec defines bindsTotal as the binds performed since the policy was created. Counting
binds in memory and persisting the count every few hundred milliseconds loses the binds
made between the last write and a SIGKILL or a failover. So the count is kept against the
API server's own record of each bind: the PodScheduled=True condition that the binding
subresource sets, whose lastTransitionTime is the server's time of the bind.

What is persisted is a pair: bindsTotal = N and lastBindTime = W (a second, server time),
meaning "N binds happened up to and including second W, and none after W is counted".
A process that starts leading reads the pair and counts, from its cache, this
scheduler's bound pods scheduled after W. So the count is exact whenever those pods still
exist (a pod bound and deleted between the last write and the crash is lost, as the issue
allows).

The pair may only advance to a second W once no bind of second W or before can still
appear. A second s is settled when (1) SETTLE_SECONDS have passed, on our monotonic
clock, since a bind of second s was first seen (after one, the server's clock has left
s: any bind not yet stamped gets a later second; the rest is margin for late watch
events), and (2) every pod that this scheduler had assumed at that moment has left the
assumed state (its bind was confirmed by the watch, or failed) and every bind that ended
without an answer then (Binder.uncertain: it may have landed all the same) has been seen
or is a minute old (a pod the cache already shows bound is not uncertain: that
bind was seen). Until then the persisted pair lags by about SETTLE_SECONDS; the live
count (binds seen) does not. A second held back for LONG_WAIT_SECONDS is logged with the
binds that hold it. A bind of a settled second seen all the same (after an outage the
cache is relisted; a bind answered with a server error may have landed) is added to the
base with a warning: the pair still means "N binds up to W", and dropping it would
leave bindsTotal short for good.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from polsched.cluster.cache import CacheListener, ClusterCache
from polsched.framework.types import PodInfo
from polsched.scheduler.binder import Binder

log = logging.getLogger(__name__)

# loop.call_later's shape: (delay in seconds, callback, *args) -> a handle (unused).
CallLater = Callable[..., object]

# How long after a second was first seen before it may be folded into the persisted pair:
# the server's clock has left it after one second, and the margin covers watch events of
# binds stamped in it that arrive late (a bind whose answer we never got, so its pod was
# no longer assumed, confirmed by the watch seconds later on a loaded machine: the full
# chaos suite at a load average of 24 lost 46 of 600 with a 1 s margin).
SETTLE_SECONDS = 5.0
# A second still unsettled this long after it was first seen is logged with what holds it.
LONG_WAIT_SECONDS = 3 * SETTLE_SECONDS


def before_creation(created: str) -> str:
    """The watermark of a policy that has persisted no bind yet: the second before its
    metadata.creationTimestamp, so its account counts the binds of its creation second
    on. Without it, a policy deleted and created again under the same schedulerName
    would count the binds of the one before it, whose pods still exist ("" when the
    timestamp is missing or unreadable: every bound pod counts, as before)."""
    try:
        t = datetime.strptime(created, "%Y-%m-%dT%H:%M:%SZ")  # UTC, naive on purpose
    except ValueError:
        return ""
    return (t - timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%SZ")


def scheduled_time(pod: PodInfo) -> str:
    """The PodScheduled=True condition's lastTransitionTime ("" when there is none): the
    API server's time of the bind, RFC3339 in seconds (so ordered as strings)."""
    for c in (pod.raw.get("status") or {}).get("conditions") or ():
        if c.get("type") == "PodScheduled" and c.get("status") == "True":
            return str(c.get("lastTransitionTime") or "")
    return ""


@dataclass
class _Account:
    base: int  # binds up to and including `watermark`
    watermark: str  # "" : none yet
    opened: str = ""  # the watermark it was opened with: binds up to it are in `base`
    seen: dict[str, str] = field(default_factory=dict)  # uid -> second, after watermark
    first_seen: dict[str, float] = field(default_factory=dict)  # second -> monotonic
    # second -> pod keys assumed SETTLE_SECONDS after it was first seen (None: not yet)
    blockers: dict[str, set[str] | None] = field(default_factory=dict)
    said: set[str] = field(default_factory=set)  # seconds _say_waiting logged


class BindLedger(CacheListener):
    """Per scheduler name, the binds counted against the API server's record. Open an
    account when this process starts leading a scheduler, close it when it stops."""

    def __init__(self, cache: ClusterCache,
                 on_change: Callable[[str], None] | None = None,
                 binder: Binder | None = None, *,
                 clock: Callable[[], float] = time.monotonic,
                 call_later: CallLater | None = None) -> None:
        """`clock` and `call_later` are injectable for tests, as the queue's clock: the
        time a second is first seen and its settle delay are read on `clock`, and the
        delays run through `call_later(delay, callback, *args)` (by default the running
        event loop's, which reads the same monotonic clock)."""
        self._cache = cache
        self._clock = clock
        self._call_later = call_later
        # Binds sent but never answered may still land: they block a second too.
        self._binder = binder
        self._on_change = on_change
        self._accounts: dict[str, _Account] = {}
        # second -> the accounts that saw it first and wait for its snapshot: one timer
        # and one pass over the assumed pods per second for every policy together (50
        # policies each timing and scanning their own cost 4% of the operator's samples).
        self._due: dict[str, list[tuple[str, _Account]]] = {}
        cache.add_listener(self)

    # -- accounts ---------------------------------------------------------------------------
    def is_open(self, scheduler_name: str) -> bool:
        return scheduler_name in self._accounts

    def open(self, scheduler_name: str, base: int, watermark: str | None) -> None:
        """Count on from the persisted pair: every bound pod of this scheduler scheduled
        after `watermark` is a bind not yet in `base`."""
        self.open_many({scheduler_name: (base, watermark)})

    def open_many(self, pairs: Mapping[str, tuple[int, str | None]]) -> None:
        """open() for several schedulers (name -> (base, watermark)) in one pass over the
        cache's pods, not one pass each."""
        accounts = {name: _Account(max(base, 0), watermark or "", watermark or "")
                    for name, (base, watermark) in pairs.items()}
        self._accounts.update(accounts)
        recovered = dict.fromkeys(accounts, 0)
        for pod in list(self._cache.pods.values()):
            acct = accounts.get(pod.scheduler_name)
            if acct is not None and pod.node_name:
                recovered[pod.scheduler_name] += self._see(pod.scheduler_name, acct, pod)
        for name, n in recovered.items():
            if n:
                log.info("scheduler %s: %d binds after lastBindTime %s recovered from the "
                         "API server (bindsTotal was %d)", name, n,
                         pairs[name][1] or "(none)", pairs[name][0])

    def close(self, scheduler_name: str | None = None) -> None:
        if scheduler_name is None:
            self._accounts.clear()
        else:
            self._accounts.pop(scheduler_name, None)

    def total(self, scheduler_name: str) -> int | None:
        """Every bind counted so far, settled or not (None: no account)."""
        acct = self._accounts.get(scheduler_name)
        return None if acct is None else acct.base + len(acct.seen)

    def persistable(self, scheduler_name: str) -> tuple[int, str] | None:
        """(bindsTotal, lastBindTime) safe to persist now; None: no account."""
        acct = self._accounts.get(scheduler_name)
        if acct is None:
            return None
        self._settle(acct)
        return acct.base, acct.watermark

    # -- the cache ----------------------------------------------------------------------------
    def assigned_pod_added(self, pod: PodInfo) -> None:
        if self._binder is not None:
            self._binder.uncertain.pop(pod.key, None)  # it did land: no longer uncertain
        acct = self._accounts.get(pod.scheduler_name)
        if acct is not None and self._see(pod.scheduler_name, acct, pod):
            self._changed(pod.scheduler_name)

    def _see(self, name: str, acct: _Account, pod: PodInfo) -> int:
        t = scheduled_time(pod)
        if not t or pod.uid in acct.seen:
            return 0
        if t <= acct.watermark:
            if t <= acct.opened:
                return 0  # in the base it was opened with
            # A bind of a second this account had already settled: its watch event came
            # later than every blocker said it could (it is counted all the same, in the
            # base: the pair still means "binds up to and including the watermark").
            acct.base += 1
            log.warning("scheduler %s: the bind of %s at %s was seen after that second "
                        "was settled (lastBindTime %s); counted late", name, pod.key, t,
                        acct.watermark)
            return 1
        acct.seen[pod.uid] = t
        if t not in acct.first_seen:
            acct.first_seen[t] = self._clock()
            acct.blockers[t] = None
            waiting = self._due.get(t)
            if waiting is None:
                later = self._timer()
                if later is None:
                    return 1
                self._due[t] = waiting = []
                later(SETTLE_SECONDS, self._snapshot, t)
            waiting.append((name, acct))
        return 1

    def _timer(self) -> CallLater | None:
        """call_later, or None outside an event loop (nothing is ever settled then)."""
        if self._call_later is not None:
            return self._call_later
        try:
            return asyncio.get_running_loop().call_later
        except RuntimeError:
            return None

    def _later(self, delay: float, callback: Callable[..., None], *args: Any) -> None:
        later = self._timer()
        assert later is not None, "a timer of the ledger ran outside its event loop"
        later(delay, callback, *args)

    def _current(self, name: str, acct: _Account, second: str) -> bool:
        return second in acct.blockers and self._accounts.get(name) is acct

    def _snapshot(self, second: str) -> None:
        """SETTLE_SECONDS after `second` was first seen: each account that saw it then
        records its scheduler's assumed pods (and the uncertain binds) as its blockers.
        An account that saw it later waits for its own SETTLE_SECONDS."""
        waiting = self._due.pop(second, [])
        now = self._clock()
        ready: list[tuple[str, _Account]] = []
        later: list[tuple[str, _Account]] = []
        for name, acct in waiting:
            if self._current(name, acct, second):
                due = acct.first_seen.get(second, now) + SETTLE_SECONDS
                (ready if due <= now + 0.001 else later).append((name, acct))
        if later:
            # One more snapshot for all of them, when the last is due (each still waits at
            # least its own SETTLE_SECONDS; a later snapshot only blocks more): one pass
            # over the assumed pods, not one per account that saw the second (with 50
            # policies that saw it one after the other, up to 50 passes a second).
            self._due[second] = later
            last = max(acct.first_seen.get(second, now) for _, acct in later)
            self._later(max(0.0, last + SETTLE_SECONDS - now), self._snapshot, second)
        if not ready:
            return
        assumed = self._cache.assumed_keys_by_scheduler()
        uncertain = self._uncertain()
        for name, acct in ready:
            acct.blockers[second] = set(assumed.get(name, ())) | uncertain
        self._poll(second, ready)

    def _poll(self, second: str, accounts: list[tuple[str, _Account]]) -> None:
        """Have the status written again until `second` is folded into the pair (a
        blocker can leave the assumed state by a failed bind, which no event reports)."""
        accounts = [(n, a) for n, a in accounts if self._current(n, a, second)]
        if not accounts:
            return
        for name, acct in accounts:
            self._changed(name)
            self._say_waiting(name, acct, second)
        self._later(SETTLE_SECONDS / 2, self._poll, second, accounts)

    def _say_waiting(self, name: str, acct: _Account, second: str) -> None:
        """Once per second that stays unsettled for LONG_WAIT_SECONDS: which binds hold
        status.bindsTotal back (it lags the binds until they are settled)."""
        blockers = acct.blockers.get(second)
        first = acct.first_seen.get(second)
        if not blockers or first is None or second in acct.said \
                or self._clock() - first < LONG_WAIT_SECONDS:
            return
        uncertain = self._uncertain()
        assumed = sorted(k for k in blockers if self._cache.is_assumed(k))
        unsure = sorted(k for k in blockers if k in uncertain and k not in assumed)
        if not assumed and not unsure:
            return  # settled at the next write
        acct.said.add(second)
        log.info("scheduler %s: the binds of %s are not settled after %.0fs: waiting for %s",
                 name, second, self._clock() - first, "; ".join(
                     f"{what} {', '.join(keys[:5])}{' ...' if len(keys) > 5 else ''}"
                     for what, keys in (("binds in flight:", assumed),
                                        ("binds that ended without an answer:", unsure))
                     if keys))

    def _settle(self, acct: _Account) -> None:
        """Advance the persisted pair over every settled second, in order."""
        uncertain: set[str] | None = None
        for second in sorted(acct.blockers):
            blockers = acct.blockers[second]
            if blockers is None:
                return
            if uncertain is None:
                uncertain = self._uncertain()
            if any(self._cache.is_assumed(key) or key in uncertain for key in blockers):
                return
            folded = [uid for uid, t in acct.seen.items() if t <= second]
            for uid in folded:
                del acct.seen[uid]
            acct.base += len(folded)
            acct.watermark = second
            del acct.blockers[second]
            acct.first_seen.pop(second, None)
            acct.said.discard(second)

    def _uncertain(self) -> set[str]:
        """The binds that may have landed unseen. A pod the cache already shows bound is
        not one of them: its bind was seen, whenever the failed attempt's error came (a
        bind cut after its watch event arrived would otherwise block for
        UNCERTAIN_SECONDS)."""
        if self._binder is None:
            return set()
        keys = self._binder.uncertain_keys()
        if keys:
            pods = self._cache.pods
            keys = {k for k in keys if not ((p := pods.get(k)) is not None and p.node_name)}
        return keys

    def _changed(self, name: str) -> None:
        if self._on_change is not None:
            try:
                self._on_change(name)
            except Exception:
                log.exception("ledger on_change failed")
