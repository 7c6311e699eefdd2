"""The devices in use, as DynamicResources sees them (upstream's allocateddevices.go, the
allocatedDevices tracker, and the DRA manager's in-flight allocations): what allocated
claims use (AllocatedIndex, kept across cycles), and the allocations Reserve made that
the cache has not shown yet (ClaimTracker, one per cluster view, shared by every
policy's plugin)."""

from __future__ import annotations

import itertools
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from polsched.dra import AllocatedState, Quantity, model
from polsched.framework import listers as ls
from polsched.framework.types import Json

# How long a claim PreBind created stays in flight while the cache has not shown it.
UNSEEN_GRACE_SECONDS = 60.0


@dataclass
class InFlight:
    allocation: dict[str, Any]
    written_rv: str | None = None  # the claim's resourceVersion once PreBind wrote it
    # The claim as PreBind wrote it (upstream's AssumeClaimAfterAPICall): what a pod tried
    # before the cache has caught up sees (ClaimTracker.assumed).
    written: dict[str, Any] | None = None
    key: str = ""  # the claim's "namespace/name" in the listers, when known
    # False for a claim PreBind created (the extended-resources claim) until the cache
    # has shown it: its absence then means "not seen yet", not "deleted".
    seen: bool = True
    created_at: float = 0.0  # time.monotonic() of that create
    # Pods of one pod-group cycle that share this allocation (a claim of their PodGroup,
    # or one they all name): the allocation leaves when the last of them is unreserved
    # (upstream's inFlightAllocation.sharers).
    sharers: int = 1


class ClaimTracker:
    """Allocations made in Reserve and not yet seen in the cache's claims (upstream's
    inFlightAllocations plus the assume cache). One per cluster view (Listers), shared by
    every policy's plugin, so that two policies never hand out the same device."""

    def __init__(self) -> None:
        self.in_flight: dict[str, InFlight] = {}

    def settle(self, listers: ls.Listers) -> None:
        """Forget in-flight allocations the cache has caught up with."""
        if not self.in_flight:
            return
        store = listers.objects[ls.RESOURCE_CLAIM.name]
        by_uid: dict[Any, Json] | None = None
        for uid in list(self.in_flight):
            entry = self.in_flight[uid]
            if entry.written_rv is None:
                continue
            # By key when known (one lookup, not a walk over every claim per pod).
            if entry.key:
                claim = store.get(entry.key)
                if claim is not None and (claim.get("metadata") or {}).get("uid") != uid:
                    claim = None
            else:
                if by_uid is None:
                    by_uid = {(c.get("metadata") or {}).get("uid"): c for c in store.values()}
                claim = by_uid.get(uid)
            if claim is None:
                # Gone from the cache: deleted, so its devices are free. A claim created
                # by PreBind that the watch has not delivered yet is still in flight (its
                # devices must not be handed out again), for at most UNSEEN_GRACE_SECONDS
                # (a claim deleted before the watch ever showed it).
                if entry.seen or time.monotonic() - entry.created_at > UNSEEN_GRACE_SECONDS:
                    del self.in_flight[uid]
                continue
            entry.seen = True
            rv = (claim.get("metadata") or {}).get("resourceVersion") or ""
            if _rv_at_least(rv, entry.written_rv):
                del self.in_flight[uid]


    def assumed(self, claim: Json) -> Json:
        """The claim as the assume cache has it: what PreBind wrote while the cache still
        shows an older version, else `claim` (a member of a pod-group cycle that lost the
        PreBind race, retried at once, finds the claim allocated as upstream does)."""
        if not self.in_flight:
            return claim
        meta = claim.get("metadata") or {}
        entry = self.in_flight.get(str(meta.get("uid") or ""))
        if entry is None or entry.written is None or entry.written_rv is None:
            return claim
        if _rv_at_least(str(meta.get("resourceVersion") or ""), entry.written_rv):
            return claim
        return entry.written


def _rv_at_least(rv: str, want: str) -> bool:
    try:
        return int(rv) >= int(want)
    except ValueError:
        return rv == want


_TRACKERS: weakref.WeakKeyDictionary[ls.Listers, ClaimTracker] = weakref.WeakKeyDictionary()


def tracker_for(listers: ls.Listers) -> ClaimTracker:
    t = _TRACKERS.get(listers)
    if t is None:
        t = _TRACKERS[listers] = ClaimTracker()
    return t


def allocated_state(listers: ls.Listers) -> AllocatedState:
    """GatherAllocatedState over a cluster view: devices of allocated claims and of the
    allocations its ClaimTracker holds in flight."""
    state = AllocatedState()
    seen: set[str] = set()
    for raw in listers.objects[ls.RESOURCE_CLAIM.name].values():
        alloc = (raw.get("status") or {}).get("allocation")
        if alloc is not None:
            seen.add(str((raw.get("metadata") or {}).get("uid") or ""))
            add_allocation(state, alloc)
    for uid, entry in tracker_for(listers).in_flight.items():
        if uid not in seen:
            add_allocation(state, entry.allocation)
    return state


class AllocatedIndex:
    """GatherAllocatedState's claims part, kept across cycles: what each allocated claim
    uses, by claim key and claim object, with a count per device. Between two cycles only
    a few claims change (the last pod's), so `refresh` re-reads only the claims the
    listers' journal names (Listers.changed_since) whose object changed (the cache
    replaces a claim's dict on every change) instead of every allocation in the cluster
    (upstream keeps the same tally in its allocatedDevices tracker, fed by claim
    events)."""

    def __init__(self) -> None:
        self._generation = -1
        self._by_key: dict[str, tuple[Json, AllocatedState | None, str]] = {}
        self._refs: dict[model.DeviceID, int] = {}
        self.devices: set[model.DeviceID] = set()
        self.uids: set[str] = set()  # of the claims with an allocation
        # Per pool (driver, pool name): a new number whenever one of its devices enters
        # or leaves `devices` (AllocatedState.pool_versions).
        self.pool_versions: dict[tuple[str, str], int] = {}
        self._clock = itertools.count(1)
        # Claims with shared (consumable-capacity) results: rare, summed per state().
        self._shared_keys: set[str] = set()

    def refresh(self, listers: ls.Listers) -> None:
        gen = listers.generations[ls.RESOURCE_CLAIM.name]
        if gen == self._generation:
            return
        store = listers.objects[ls.RESOURCE_CLAIM.name]
        by_key = self._by_key
        keys = None if self._generation < 0 else listers.changed_since(ls.RESOURCE_CLAIM,
                                                                       self._generation)
        if keys is None:  # the first time, or too many changes since: walk them all
            keys = list(store)
            for key in [k for k in by_key if k not in store]:
                self._drop(key, by_key.pop(key))
        for key in keys:
            raw = store.get(key)
            hit = by_key.get(key)
            if hit is not None and hit[0] is raw:
                continue
            if hit is not None:
                self._drop(key, hit)
            if raw is None:  # deleted
                by_key.pop(key, None)
                continue
            alloc = (raw.get("status") or {}).get("allocation")
            uid = str((raw.get("metadata") or {}).get("uid") or "")
            part = None
            if alloc is not None:
                part = AllocatedState()
                add_allocation(part, alloc)
                for d in part.devices:
                    n = self._refs.get(d, 0)
                    self._refs[d] = n + 1
                    if not n:
                        self.devices.add(d)
                        self.pool_versions[(d[0], d[1])] = next(self._clock)
                if part.shared or part.capacity:
                    self._shared_keys.add(key)
                self.uids.add(uid)
            by_key[key] = (raw, part, uid)
        self._generation = gen

    def _drop(self, key: str, hit: tuple[Json, AllocatedState | None, str]) -> None:
        part = hit[1]
        if part is None:
            return
        for d in part.devices:
            n = self._refs[d] - 1
            if n:
                self._refs[d] = n
            else:
                del self._refs[d]
                self.devices.discard(d)
                self.pool_versions[(d[0], d[1])] = next(self._clock)
        self._shared_keys.discard(key)
        self.uids.discard(hit[2])

    def state(self) -> AllocatedState:
        """The allocated state (read-only: its device set is the index's own)."""
        state = AllocatedState(self.devices, pool_versions=self.pool_versions)
        for key in self._shared_keys:
            part = self._by_key[key][1]
            assert part is not None
            state.shared |= part.shared
            for d, caps in part.capacity.items():
                entry = state.capacity.setdefault(d, {})
                for n, q in caps.items():
                    entry[n] = entry[n].add(q) if n in entry else q
        return state


def add_allocation(state: AllocatedState, alloc: Mapping[str, Any]) -> None:
    """The devices one allocation uses (upstream's allocatedDevices tracker)."""
    for r in ((alloc.get("devices") or {}).get("results") or []):
        did = (str(r.get("driver", "")), str(r.get("pool", "")), str(r.get("device", "")))
        if r.get("adminAccess"):
            continue  # admin access does not take the device
        share = r.get("shareID")
        if share:
            state.shared.add((did, str(share)))
            consumed = r.get("consumedCapacity") or {}
            if consumed:
                entry = state.capacity.setdefault(did, {})
                for n, q in consumed.items():
                    qq = Quantity.parse(q)
                    entry[n] = entry[n].add(qq) if n in entry else qq
        else:
            state.devices.add(did)
