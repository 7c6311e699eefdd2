"""ClaimTracker.settle: an allocation stays in flight until the cache shows the claim at
(or past) the resourceVersion PreBind wrote, so that no second pod is handed its devices
in between. A claim PreBind itself created (the extended-resources claim) may be missing
from the cache only because the watch has not delivered it yet: that is not a deletion."""

from __future__ import annotations

from typing import Any

import pytest

from polsched.framework import listers as ls
from polsched.framework.listers import Listers
from polsched.plugins.dynamic_resources import allocated
from polsched.plugins.dynamic_resources.allocated import ClaimTracker, InFlight

pytestmark = pytest.mark.unit


def claim(name: str, uid: str, rv: str) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "ns", "uid": uid, "resourceVersion": rv},
            "spec": {"devices": {"requests": []}}}


def created_entry(now: float) -> InFlight:
    """What PreBind leaves after creating the claim and writing its status (rv 12)."""
    return InFlight(allocation={"devices": {}}, written_rv="12", key="ns/ext",
                     seen=False, created_at=now)


def test_created_claim_not_yet_in_the_cache_stays_in_flight(
        monkeypatch: pytest.MonkeyPatch) -> None:
    now = 1000.0
    monkeypatch.setattr("time.monotonic", lambda: now)
    listers, tracker = Listers(), ClaimTracker()
    tracker.in_flight["u1"] = created_entry(now)
    tracker.settle(listers)
    assert "u1" in tracker.in_flight, "dropped before the watch delivered the created claim"
    # The watch delivers the create (before the status write): still in flight.
    listers.apply(ls.RESOURCE_CLAIM, "ADDED", claim("ext", "u1", "11"))
    tracker.settle(listers)
    assert "u1" in tracker.in_flight
    # Then the status write: settled.
    listers.apply(ls.RESOURCE_CLAIM, "MODIFIED", claim("ext", "u1", "12"))
    tracker.settle(listers)
    assert "u1" not in tracker.in_flight


def test_seen_claim_deleted_from_the_cache_frees_its_devices() -> None:
    listers, tracker = Listers(), ClaimTracker()
    listers.apply(ls.RESOURCE_CLAIM, "ADDED", claim("ext", "u1", "11"))
    tracker.in_flight["u1"] = created_entry(0.0)
    tracker.settle(listers)  # seen at rv 11 < 12: still in flight, now known to exist
    assert tracker.in_flight["u1"].seen
    listers.apply(ls.RESOURCE_CLAIM, "DELETED", claim("ext", "u1", "11"))
    tracker.settle(listers)
    assert "u1" not in tracker.in_flight


def test_existing_claim_absent_is_deleted() -> None:
    """A claim that was in the cache when Reserve allocated it (seen by default): absent
    means deleted."""
    listers, tracker = Listers(), ClaimTracker()
    tracker.in_flight["u2"] = InFlight(allocation={}, written_rv="5", key="ns/c")
    tracker.settle(listers)
    assert "u2" not in tracker.in_flight


def test_created_claim_never_seen_is_forgotten_after_the_grace(
        monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr("time.monotonic", lambda: now[0])
    listers, tracker = Listers(), ClaimTracker()
    tracker.in_flight["u1"] = created_entry(now[0])
    now[0] += allocated.UNSEEN_GRACE_SECONDS - 1
    tracker.settle(listers)
    assert "u1" in tracker.in_flight
    now[0] += 2
    tracker.settle(listers)
    assert "u1" not in tracker.in_flight


def test_a_claim_prebind_wrote_is_seen_as_written_until_the_cache_catches_up() -> None:
    # AssumeClaimAfterAPICall: a pod tried between PreBind's write and the watch event
    # (a gang member that lost the PreBind race, retried at once) meets the claim
    # allocated, not an allocation in flight.
    tracker = ClaimTracker()
    stale = claim("c", "u1", "10")
    written = {**claim("c", "u1", "12"), "status": {"allocation": {"devices": {}}}}
    tracker.in_flight["u1"] = InFlight(allocation={"devices": {}}, written_rv="12",
                                       key="ns/c", written=written)
    assert tracker.assumed(stale) is written
    caught_up = claim("c", "u1", "12")
    assert tracker.assumed(caught_up) is caught_up
    # Not written yet (Reserve only): the cache's copy.
    tracker.in_flight["u1"] = InFlight(allocation={"devices": {}}, key="ns/c")
    assert tracker.assumed(stale) is stale
