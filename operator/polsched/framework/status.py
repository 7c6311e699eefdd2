"""Status: the outcome of one plugin at one extension point.

Expected outcomes (a node does not fit, a plugin has nothing to do) are Status values,
never exceptions, as in kube-scheduler's framework (pkg/scheduler/framework/interface.go).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Code(enum.IntEnum):
    SUCCESS = 0
    ERROR = 1
    UNSCHEDULABLE = 2
    # The node cannot become feasible by preempting pods on it.
    UNSCHEDULABLE_AND_UNRESOLVABLE = 3
    WAIT = 4
    # PreFilter / PreScore: the plugin has nothing to do for this pod; its Filter / Score
    # is not called in this cycle.
    SKIP = 5


@dataclass(frozen=True, slots=True)
class Status:
    code: Code = Code.SUCCESS
    reasons: tuple[str, ...] = ()
    # The plugin that produced the status; the pipeline fills it in when it is empty.
    plugin: str = ""

    @property
    def ok(self) -> bool:
        return self.code is Code.SUCCESS

    @property
    def rejected(self) -> bool:
        return self.code in (Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE)

    @property
    def message(self) -> str:
        return ", ".join(self.reasons)

    def with_plugin(self, plugin: str) -> Status:
        return self if self.plugin else Status(self.code, self.reasons, plugin)

    @staticmethod
    def unschedulable(*reasons: str) -> Status:
        return Status(Code.UNSCHEDULABLE, reasons)

    @staticmethod
    def unresolvable(*reasons: str) -> Status:
        return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, reasons)

    @staticmethod
    def error(*reasons: str) -> Status:
        return Status(Code.ERROR, reasons)


SUCCESS = Status()
SKIP = Status(Code.SKIP)
