"""The preemption executor's in-memory path: a victim that Permit plugins hold (a waiting
pod) is rejected without any API call, its Preempted event says so, and the preemptor is
retried at once. (Evictions through the API server are in tests/e2e/test_preemption.py.)"""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from polsched.cluster.client import ApiClient
from polsched.framework import PodInfo
from polsched.framework.nominator import Nominator
from polsched.framework.waiting_pods import WaitingPod
from polsched.preemption.executor import Executor
from tests.builders import make_pod

pytestmark = pytest.mark.unit


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str, str | None]] = []

    def event(self, p: PodInfo, type_: str, reason: str, action: str, note: str,
              related: PodInfo | None = None) -> None:
        self.events.append((p.name, reason, note, related.name if related else None))


def test_a_waiting_victim_is_preempted_in_memory() -> None:
    async def run() -> tuple[Any, ...]:
        victim = make_pod().name("victim").namespace("ns").uid("victim").containers([]).info()
        preemptor = (make_pod().name("pre").namespace("ns").uid("pre").containers([]).priority(10)
                     .info())
        waiting = WaitingPod(victim, {"Gate": 30.0})
        # No API call may happen: a client that would fail on any use.
        executor = Executor(cast(ApiClient, None), Nominator(), {}, {victim.uid: waiting})
        recorder, retried = Recorder(), list[PodInfo]()
        executor.actuate("sched", recorder, preemptor, "n1", [victim], retried.append)
        assert executor.running(preemptor.uid)
        await executor.close()
        return await waiting.wait(), recorder.events, retried, executor.running(preemptor.uid)

    status, events, retried, running = asyncio.run(run())
    assert status.rejected and status.message == "preempted"
    assert events == [("victim", "Preempted",
                       "Preempted by pod pre on node n1 (in kube-scheduler memory).", "pre")]
    assert [p.name for p in retried] == ["pre"] and not running
