"""polsched.controller.leases: one holder; takeover only after expiry or release; a
restarted process with the same identity takes its lease back at once."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from polsched.controller.leases import LeaseElector, lease_path
from tests.unit.controller.fakes import FakeApi

pytestmark = pytest.mark.unit


def elector(api: FakeApi, identity: str, duration: int = 15) -> LeaseElector:
    return LeaseElector(api, namespace="ns", name="l", identity=identity,  # type: ignore[arg-type]
                        lease_duration=duration)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_first_candidate_creates_and_holds_the_lease() -> None:
    api = FakeApi()
    a, b = elector(api, "a"), elector(api, "b")
    assert run(a.try_acquire_or_renew())
    assert not run(b.try_acquire_or_renew())
    spec = api.objects[lease_path("ns", "l")]["spec"]
    assert spec["holderIdentity"] == "a" and spec["leaseDurationSeconds"] == 15
    assert run(a.try_acquire_or_renew())  # renew


def test_takeover_after_the_holder_stops_renewing(monkeypatch: pytest.MonkeyPatch) -> None:
    api = FakeApi()
    a, b = elector(api, "a", duration=15), elector(api, "b", duration=15)
    clock = [1000.0]
    monkeypatch.setattr("polsched.controller.leases.time.monotonic", lambda: clock[0])
    assert run(a.try_acquire_or_renew())
    assert not run(b.try_acquire_or_renew())
    clock[0] += 14
    assert not run(b.try_acquire_or_renew())  # not expired yet, as b observed it
    clock[0] += 2
    assert run(b.try_acquire_or_renew())
    spec = api.objects[lease_path("ns", "l")]["spec"]
    assert spec["holderIdentity"] == "b" and spec["leaseTransitions"] == 1
    assert not run(a.try_acquire_or_renew())  # a sees b's fresh record


def test_a_released_lease_is_taken_at_once() -> None:
    api = FakeApi()
    a, b = elector(api, "a"), elector(api, "b")
    assert run(a.try_acquire_or_renew())
    assert not run(b.try_acquire_or_renew())
    run(a.release())
    assert run(b.try_acquire_or_renew())


def test_same_identity_takes_its_lease_back() -> None:
    api = FakeApi()
    assert run(elector(api, "op").try_acquire_or_renew())
    assert run(elector(api, "op").try_acquire_or_renew())  # a restarted process


def test_a_stale_write_loses_on_resource_version() -> None:
    api = FakeApi()
    a, b = elector(api, "a"), elector(api, "b")
    assert run(a.try_acquire_or_renew())
    run(a.release())
    real_get = api.get

    async def get_then_race(path: str, params: Any = None) -> Any:
        obj = await real_get(path)
        # Someone else writes between our read and our write.
        other = await real_get(path)
        other["spec"]["holderIdentity"] = "c"
        await api.put(path, other)
        return obj

    api.get = get_then_race  # type: ignore[method-assign]
    assert not run(b.try_acquire_or_renew())
    api.get = real_get  # type: ignore[method-assign]
    assert api.objects[lease_path("ns", "l")]["spec"]["holderIdentity"] == "c"


def test_run_reports_transitions_and_releases_on_stop() -> None:
    api = FakeApi()
    seen: list[bool] = []

    async def scenario() -> None:
        e = LeaseElector(api, namespace="ns", name="l", identity="a",  # type: ignore[arg-type]
                         on_change=seen.append, renew_period=0.01)
        task = asyncio.create_task(e.run())
        await asyncio.sleep(0.05)
        e.stop()
        await task

    run(scenario())
    assert seen == [True, False]
    assert api.objects[lease_path("ns", "l")]["spec"]["holderIdentity"] == ""
