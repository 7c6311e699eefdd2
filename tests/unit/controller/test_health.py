"""controller.process.health: /healthz says 503 when a task the process needs has stopped or an
elected leader does not lead, served over real HTTP by the metrics server."""

from __future__ import annotations

import argparse
import asyncio
import urllib.request

import pytest

from polsched.controller.process import server
from polsched.controller.process.health import Liveness
from polsched.controller.process.options import add_run_arguments
from polsched.scheduler import metrics

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_an_elected_leader_that_does_not_lead_is_unhealthy_after_the_grace() -> None:
    clock = Clock()
    live = Liveness(grace=30, clock=clock)
    assert live.healthy()
    live.elected(True)
    clock.now += 29
    assert live.healthy()  # taking the lead takes a moment
    clock.now += 2
    assert live.problems() == ["elected leader 31s ago but not scheduling"]
    live.applied(True)
    assert live.healthy()
    live.elected(False)  # lost: stepping down is immediate, nothing to wait for
    clock.now += 100
    assert live.healthy()


def test_a_stale_apply_does_not_count_for_a_new_term() -> None:
    clock = Clock()
    live = Liveness(grace=1, clock=clock)
    live.elected(True)
    live.applied(False)  # the end of a previous term, applied late
    clock.now += 2
    assert not live.healthy()


def test_a_stopped_task_or_check_is_unhealthy() -> None:
    async def main() -> list[str]:
        live = Liveness()

        async def fails() -> None:
            raise RuntimeError("watch broke")

        forever = asyncio.get_running_loop().create_task(asyncio.sleep(3600))
        broken = asyncio.get_running_loop().create_task(fails())
        live.task("policy watch", broken)
        live.task("lease election", forever)
        loop_alive = [True]
        live.check("scheduling loop", lambda: loop_alive[0])
        await asyncio.sleep(0)
        loop_alive[0] = False
        problems = live.problems()
        forever.cancel()
        return problems

    assert asyncio.run(main()) == [
        "the scheduling loop has stopped",
        "the policy watch has stopped (RuntimeError('watch broke'))"]


def test_healthz_and_readyz_answer_503_when_unhealthy() -> None:
    async def main() -> list[int]:
        live = Liveness()
        alive = [True]
        live.check("scheduling loop", lambda: alive[0])
        runner = await metrics.serve("127.0.0.1:0", ready=live.healthy, healthy=live.healthy)
        port = runner.addresses[0][1]

        def get(path: str) -> int:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}") as r:
                    return int(r.status)
            except urllib.error.HTTPError as e:
                return e.code

        try:
            codes = [await asyncio.to_thread(get, "/healthz")]
            alive[0] = False
            codes += [await asyncio.to_thread(get, "/healthz"),
                      await asyncio.to_thread(get, "/readyz")]
            return codes
        finally:
            await runner.cleanup()

    assert asyncio.run(main()) == [200, 503, 503]


def test_admission_rules_from_the_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    parser = argparse.ArgumentParser()
    add_run_arguments(parser)
    args = parser.parse_args(["--reserved-scheduler-names", "volcano, yunikorn",
                              "--extender-allow", "127.0.0.0/8"])
    rules = server.admission_rules(args, "https://10.0.0.1:6443")
    assert rules.reserved_scheduler_names == {"default-scheduler", "volcano", "yunikorn"}
    d = rules.destinations
    assert d.refuses_address("169.254.169.254", 80)
    assert not d.refuses_address("127.0.0.1", 8888)
    assert d.refuses_address("10.0.0.1", 6443) and not d.refuses_address("10.0.0.1", 8080)
    bad = parser.parse_args(["--extender-deny", "10.0.0.0/33"])
    with pytest.raises(SystemExit, match="--extender-deny: '10.0.0.0/33' is not a CIDR"):
        server.admission_rules(bad, "https://10.0.0.1:6443")


def test_loopback_is_refused_by_default_in_a_pod_only(monkeypatch: pytest.MonkeyPatch) -> None:
    parser = argparse.ArgumentParser()
    add_run_arguments(parser)
    args = parser.parse_args([])
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    outside = server.admission_rules(args, "https://127.0.0.1:6443").destinations
    assert not outside.refuses_address("127.0.0.1", 8888)  # an extender run beside it
    assert outside.refuses_address("127.0.0.1", 6443)  # never the API server
    assert outside.refuses_address("169.254.169.254", 80)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    inside = server.admission_rules(args, "https://10.96.0.1:443").destinations
    assert "loopback" in inside.refuses_address("127.0.0.1", 8888)
    assert inside.refuses_address("10.96.0.1", 443)
    assert inside.refuses_address("kubernetes.default.svc.cluster.local", 443)
    assert not inside.refuses_address("extender.example.svc", 8888)
