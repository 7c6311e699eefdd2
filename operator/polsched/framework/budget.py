"""The time budget of one scheduling attempt (issue 36, "time is the budget").

Every attempt the engine runs carries an `AttemptBudget` on its CycleState: a deadline on
the monotonic clock, `seconds` after the attempt began. The runtime checks it between
plugins at PreFilter, PreScore and Score and every few nodes of the Filter loop; the
plugins whose one call can be long check it inside (InterPodAffinity's walks over the
existing pods, DynamicResources' device allocation, as upstream's DRA filter timeout
does with the context's deadline). Past the deadline `check` raises `BudgetExceeded`, a
PipelineError: the attempt ends there, the pod gets a FailedScheduling (and
PodScheduled=False, reason SchedulerError) naming the budget, and it is tried again
after its backoff. The scheduling loop then moves on to other pods and policies.

The cost models (CEL's cost units, the bounds on pods and policies) remain the first
line of defence, estimated before anything runs; this deadline is the last one, for
whatever they missed. Python cannot interrupt a call, so a single plugin call between
two checks can still overrun by its own length; the checks sit where the loops are.

`polsched explain` runs without a budget (it evaluates every node on purpose).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from polsched.framework.diagnosis import PipelineError
from polsched.framework.status import Status

# The default budget of one attempt: far above a normal attempt (a few ms to ~100 ms at
# 5000 nodes in the benchmark), far below the liveness probe (the loop's lag fails
# /healthz at 30 s). `polsched run --attempt-budget` sets it; 0 turns it off.
DEFAULT_ATTEMPT_BUDGET_SECONDS = 1.0
# The Filter loop looks at the clock once every so many nodes (a clock read costs about
# as much as one cheap filter on one node).
NODES_PER_CHECK = 16


class BudgetExceeded(PipelineError):
    """An attempt ran past its time budget; the message names the budget and where."""


def budget_message(seconds: float, where: str) -> str:
    return (f"the scheduling attempt used its time budget of {seconds:g}s "
            f"(--attempt-budget) in {where}; the pod is tried again after a backoff")


class AttemptBudget:
    """The deadline of one attempt. `check(where)` raises BudgetExceeded past it."""

    __slots__ = ("_clock", "deadline", "seconds")

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self._clock = clock
        self.deadline = clock() + seconds

    def expired(self) -> bool:
        return self._clock() > self.deadline

    def check(self, where: str, *args: object) -> None:
        """`where`, with `args` %-formatted into it only when the budget is past: the
        checks run every few nodes, and formatting each place was most of their cost."""
        if self._clock() > self.deadline:
            raise BudgetExceeded(Status.error(budget_message(
                self.seconds, where % args if args else where)))


def new_budget(seconds: float | None) -> AttemptBudget | None:
    """A budget of `seconds`, or None when the budget is off (None or <= 0)."""
    return AttemptBudget(seconds) if seconds is not None and seconds > 0 else None
