"""controller.process.health: /healthz says 503 when a task the process needs has stopped or an
elected leader does not lead, served over real HTTP by the metrics server."""

from __future__ import annotations

import argparse
import asyncio
import threading
import time
import urllib.error
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


def test_healthz_answers_while_the_scheduling_loop_stalls_and_reports_its_lag() -> None:
    """The probes are served from a thread of their own (controller.process.endpoints),
    wired as the Process wires them: a synchronous stall of the scheduling loop (a pod or
    a policy that holds it) is measured by the loop watchdog and reported by /healthz,
    which keeps answering within 1 s meanwhile."""
    from polsched.controller.process.endpoints import serve_metrics
    from polsched.controller.process.loopwatch import LoopWatch

    async def main() -> list[tuple[int, str]]:
        live = Liveness()
        watch = LoopWatch(threshold=0.2, beat=0.05)
        live.lag("scheduling loop", watch.lag, 0.5)
        watch.start()
        endpoints = await serve_metrics("", live.healthy, live.healthy,
                                        health_listen="127.0.0.1:0", explain=live.explain)
        assert endpoints is not None
        port = endpoints.addresses[0][1]
        answers: list[tuple[int, str]] = []

        def get() -> tuple[int, str]:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz",
                                            timeout=1.0) as r:
                    return int(r.status), r.read().decode()
            except urllib.error.HTTPError as e:
                return e.code, e.read().decode()

        def probe_until_unhealthy() -> None:
            # Each probe must answer within its 1 s timeout while the loop stands still;
            # the loop is unhealthy once its lag passes the limit.
            deadline = time.monotonic() + 15.0
            while time.monotonic() < deadline:
                answers.append(get())
                if answers[-1][0] == 503:
                    return
                time.sleep(0.05)  # polling the condition, not synchronising

        try:
            answers.append(await asyncio.to_thread(get))
            prober = threading.Thread(target=probe_until_unhealthy)
            prober.start()
            prober.join(20.0)  # synchronously, on the loop: the loop stalls meanwhile
            # The loop turns again: healthy once the watchdog's next beat is seen.
            for _ in range(100):
                answers.append(await asyncio.to_thread(get))
                if answers[-1][0] == 200:
                    break
                await asyncio.sleep(0.05)
            return answers
        finally:
            await endpoints.cleanup()
            await watch.stop()

    answers = asyncio.run(main())
    assert answers[0] == (200, "ok")
    stalled = next(a for a in answers if a[0] == 503)
    assert "the scheduling loop has not turned for" in stalled[1]
    assert answers[-1] == (200, "ok")
