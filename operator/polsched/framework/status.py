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
        if self.plugin:
            return self
        key = (id(self), plugin)
        got = _LABELLED.get(key)
        if got is not None:
            return got
        out = Status(self.code, self.reasons, plugin)
        if id(self) in _SHARED_IDS:  # alive for good: its id names it for good
            _LABELLED[key] = out
        return out

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

# shared(): one Status per (code, reasons), kept for the life of the process, and each
# one's with_plugin results, keyed by its id (never reused: the statuses stay alive). A
# filter that rejects many nodes with the same reasons (NodeResourcesFit's "Insufficient
# cpu" on every full node, and again in each of preemption's dry runs) then builds no
# Status per node. Bounded: past _SHARED_MAX distinct ones, shared() builds afresh.
_SHARED_MAX = 1024
_SHARED: dict[tuple[Code, tuple[str, ...]], Status] = {}
_SHARED_IDS: set[int] = set()
_LABELLED: dict[tuple[int, str], Status] = {}


def shared(code: Code, reasons: tuple[str, ...]) -> Status:
    """Status(code, reasons), the same object for the same arguments (see _SHARED)."""
    key = (code, reasons)
    got = _SHARED.get(key)
    if got is not None:
        return got
    st = Status(code, reasons)
    if len(_SHARED) < _SHARED_MAX:
        _SHARED[key] = st
        _SHARED_IDS.add(id(st))
    return st
SKIP = Status(Code.SKIP)
