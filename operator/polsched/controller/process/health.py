"""/healthz and /readyz of a process that schedules (the operator, a Dedicated scheduler).

kube-scheduler's /healthz includes the leader-election check (client-go
leaderelection.HealthzAdaptor.Check): a process that holds the lease but has stopped
doing the leader's work is unhealthy, so the kubelet restarts it and another replica
takes over. Answering 200 while the lease is renewed and nothing is bound is the worst
case: nobody notices, and no other replica can take the lease.

Here the process is unhealthy when
- a task that must run until shutdown has ended: the scheduling loop (Engine), the
  policy watch, the lease election;
- it was elected leader more than `grace` seconds ago and the leadership was not
  applied (the reconciler's set_leading did not complete: nothing binds);
- the scheduling loop has not turned for more than its lag limit (measured by the loop
  watchdog, controller.process.loopwatch): /healthz is answered from a thread of its
  own (controller.process.endpoints), so a stalled loop is seen by its measured lag, not
  by a probe that times out.
Ready (/readyz) additionally needs the cache to have synced.

Purely bookkeeping: callers report what happens; `problems()` says what is wrong now.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

# How long an elected leader may take to start leading (one status listing and a sync
# of every policy) before /healthz says it is stuck.
DEFAULT_GRACE_SECONDS = 30.0


class Liveness:
    def __init__(self, *, grace: float = DEFAULT_GRACE_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.grace = grace
        self._clock = clock
        self._checks: dict[str, Callable[[], bool]] = {}
        self._tasks: dict[str, asyncio.Task[Any]] = {}
        self._elected_at: float | None = None
        self._applied = False
        self._reported: tuple[str, ...] = ()
        self._lags: dict[str, tuple[Callable[[], float], float]] = {}

    def check(self, what: str, alive: Callable[[], bool]) -> None:
        """`alive()` must stay true (e.g. "scheduling loop")."""
        self._checks[what] = alive

    def task(self, what: str, task: asyncio.Task[Any]) -> None:
        """`task` must run until the process stops."""
        self._tasks[what] = task

    def lag(self, what: str, measure: Callable[[], float], limit: float) -> None:
        """`measure()` (seconds `what` has not turned) must stay within `limit`."""
        self._lags[what] = (measure, limit)

    def elected(self, leading: bool) -> None:
        """The lease was won (True) or lost (False)."""
        self._elected_at = self._clock() if leading else None
        self._applied = not leading

    def applied(self, leading: bool) -> None:
        """The leadership `leading` now holds: binds and status writes (or none)."""
        if leading == (self._elected_at is not None):
            self._applied = True

    def problems(self) -> list[str]:
        # Called from the serving thread while the loop may add checks: iterate copies.
        out = [f"the {what} has stopped" for what, alive in list(self._checks.items())
               if not alive()]
        for what, (measure, limit) in list(self._lags.items()):
            lag = measure()
            if lag > limit:
                out.append(f"the {what} has not turned for {lag:.1f}s (limit {limit:.0f}s)")
        for what, task in list(self._tasks.items()):
            if task.done():
                error = None if task.cancelled() else task.exception()
                out.append(f"the {what} has stopped" + (f" ({error!r})" if error else ""))
        elected = self._elected_at
        if elected is not None and not self._applied:
            waited = self._clock() - elected
            if waited > self.grace:
                out.append(f"elected leader {waited:.0f}s ago but not scheduling")
        key = tuple(out)
        if key != self._reported:  # once per change, not on every probe
            self._reported = key
            if out:
                log.error("unhealthy: %s", "; ".join(out))
        return out

    def healthy(self) -> bool:
        return not self.problems()

    def explain(self) -> str:
        """What is wrong now, for the body of a failing /healthz."""
        return "; ".join(self.problems())
