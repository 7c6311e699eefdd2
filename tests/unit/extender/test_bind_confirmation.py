"""A bind an extender claims is confirmed by the watch (issue 36): the Binder reports it
BOUND once the watched pods show the pod on that node, and FAILED (so that the scheduler
forgets the assumed pod, requeues it and reports the failure) when they have not within
the bound; a pod the watch shows on another node is a CONFLICT. The extender is a real
HTTP server on 127.0.0.1 that answers every bind with success."""

from __future__ import annotations

import asyncio
import logging
from typing import cast

import pytest

from polsched.cluster.client import ApiClient
from polsched.extender import HTTPExtender
from polsched.framework.types import PodInfo
from polsched.scheduler.binder import Binder, BindOutcome
from tests.unit.extender.conftest import StartExtender
from tests.unit.extender.fake_extender import config, make_pod

pytestmark = pytest.mark.unit


def bound(pod: PodInfo, node: str) -> PodInfo:
    raw = {**pod.raw, "spec": {**pod.raw["spec"], "nodeName": node}}
    return PodInfo.from_json(raw)


def bind_claimed(start_extender: StartExtender, watch: dict[str, PodInfo],
                 show: PodInfo | None = None, confirm: float = 30.0
                 ) -> tuple[BindOutcome, str]:
    """Bind `pod` through a lying extender; `show`, when given, is what the watch shows
    once the extender has answered."""
    server = start_extender({"/bind": lambda args: {"Error": ""}})
    ext = HTTPExtender(config(server.url, bind_verb="bind"))
    pod = make_pod("web")
    watch[pod.key] = pod

    async def main() -> tuple[BindOutcome, str]:
        # No API call may happen: the extender binds (a client that fails on any use).
        binder = Binder(cast(ApiClient, None), watched=watch,
                        extender_bind_confirm_seconds=confirm)
        got: asyncio.Future[tuple[BindOutcome, str]] = \
            asyncio.get_running_loop().create_future()
        binder.bind(pod, "n1", lambda o, m: got.set_result((o, m)), [ext])
        if show is not None:
            while not server.requests:  # the extender has been asked
                await asyncio.sleep(0.01)
            watch[pod.key] = show
        try:
            return await asyncio.wait_for(got, 60)
        finally:
            await binder.close()
            await ext.close()
    return asyncio.run(main())


def test_a_claimed_bind_the_watch_never_shows_fails(
        start_extender: StartExtender, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, "polsched.scheduler.binder"):
        outcome, message = bind_claimed(start_extender, {}, confirm=0.3)
    assert outcome is BindOutcome.FAILED
    assert "answered the bind of pod default/web to node n1, but the pod was not seen " \
           "bound within 0.3s" in message
    assert message in caplog.text


def test_a_claimed_bind_the_watch_shows_is_bound(start_extender: StartExtender) -> None:
    pod = make_pod("web")
    assert bind_claimed(start_extender, {}, show=bound(pod, "n1")) == (BindOutcome.BOUND, "")


def test_a_claimed_bind_the_watch_shows_elsewhere_is_a_conflict(
        start_extender: StartExtender) -> None:
    outcome, message = bind_claimed(start_extender, {}, show=bound(make_pod("web"), "n7"))
    assert outcome is BindOutcome.CONFLICT and "bound to node 'n7'" in message
