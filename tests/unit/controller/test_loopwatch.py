"""The event loop watchdog (controller/process/loopwatch.py): a loop blocked by a synchronous
call is reported with the stack it is stuck in, and again when it turns."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from polsched.controller.process.loopwatch import LoopWatch


def _blocking_call(seconds: float) -> None:
    time.sleep(seconds)  # what a synchronous call on the loop does to every task


def test_a_blocked_loop_is_reported_with_where_it_is_stuck(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "polsched.controller.process.loopwatch")

    async def main() -> None:
        watch = LoopWatch(threshold=0.2, beat=0.05)
        watch.start()
        try:
            await asyncio.sleep(0.2)  # a loop that turns is not reported
            assert watch.stalls == 0
            _blocking_call(1.0)
            # The thread reports the recovery once the loop beats again.
            for _ in range(100):
                if any("turns again" in r.getMessage() for r in caplog.records):
                    break
                await asyncio.sleep(0.05)
        finally:
            await watch.stop()
        assert watch.stalls == 1

    asyncio.run(main())
    stalled = [r.getMessage() for r in caplog.records if "has not turned" in r.getMessage()]
    assert len(stalled) == 1
    assert "_blocking_call" in stalled[0] and "time.sleep" in stalled[0]
    assert any("turns again" in r.getMessage() for r in caplog.records)
