"""A watchdog for the event loop of the long-running commands: says when the loop stops
turning, and where it is stuck.

Everything polsched does (the scheduling cycles, the binds, the events, the lease's
deadline) runs on one asyncio loop; a synchronous call that takes seconds stalls all of
it at once, and from outside looks like binds and events that never got their answer
(issue 29: a gang left with one member bound and no Scheduled event). The loop beats a
heartbeat every BEAT_SECONDS; a daemon thread checks it, and when it is older than
`threshold` it logs a warning with the stack the loop's thread is running now (once per
stall), and another when the loop turns again, with how long it stood still. A loop that
only runs late (a busy machine) is told from one that is blocked by that stack.

No I/O but the log; the thread only reads the heartbeat and sys._current_frames().
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import threading
import time
import traceback

log = logging.getLogger(__name__)

# How often the loop beats, and how often the thread looks.
BEAT_SECONDS = 0.25
# A loop that has not beaten for this long is reported.
LAG_SECONDS = 1.0


class LoopWatch:
    """Start with `start()` inside the loop to watch; `stop()` ends the heartbeat and the
    thread. `stalls` counts the stalls reported (for tests and /metrics curiosity)."""

    def __init__(self, threshold: float = LAG_SECONDS, beat: float = BEAT_SECONDS) -> None:
        self.threshold = threshold
        self.beat = beat
        self.stalls = 0
        self._last = time.monotonic()
        self._loop_thread = 0
        self._task: asyncio.Task[None] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._loop_thread = threading.get_ident()
        self._last = time.monotonic()
        self._task = asyncio.get_running_loop().create_task(self._heartbeat(),
                                                            name="polsched-loopwatch")
        self._thread = threading.Thread(target=self._watch, name="polsched-loopwatch",
                                        daemon=True)
        self._thread.start()

    def lag(self) -> float:
        """Seconds since the loop last turned (beats every `beat` seconds while it runs):
        what /healthz checks (controller.process.health). Read from any thread."""
        if self._task is None:
            return 0.0
        return max(0.0, time.monotonic() - self._last - self.beat)

    async def _heartbeat(self) -> None:
        while True:
            self._last = time.monotonic()
            await asyncio.sleep(self.beat)

    def _watch(self) -> None:
        reported = 0.0  # the heartbeat a stall was reported for
        while not self._stop.wait(min(self.beat, self.threshold / 2)):
            last = self._last
            lag = time.monotonic() - last
            if lag > self.threshold + self.beat and reported != last:
                reported = last
                self.stalls += 1
                frame = sys._current_frames().get(self._loop_thread)
                where = "".join(traceback.format_stack(frame)) if frame is not None else "?"
                log.warning("the event loop has not turned for %.1fs (binds, events and "
                            "watches wait meanwhile); it is running:\n%s", lag, where)
            elif reported and reported != last:
                log.warning("the event loop turns again after %.1fs",
                            last - reported)
                reported = 0.0

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, 5.0)
            self._thread = None
