"""CycleState: data that plugins share within one scheduling cycle of one pod."""

from __future__ import annotations

from typing import Any, Protocol


class Budget(Protocol):
    """An attempt's time budget as plugins see it (framework.budget.AttemptBudget)."""

    @property
    def deadline(self) -> float:
        """time.monotonic() past which the attempt is over its budget."""

    def check(self, where: str, *args: object) -> None:
        """Raise budget.BudgetExceeded (a PipelineError) if past the deadline, naming
        `where` with `args` %-formatted into it."""


class CycleState:
    __slots__ = ("_data", "budget", "pod_group", "skip_filter", "skip_score")

    def __init__(self, pod_group: CycleState | None = None,
                 budget: Budget | None = None) -> None:
        self._data: dict[str, Any] = {}
        # The attempt's time budget (framework.budget), checked by the runtime and by the
        # plugins with long loops; None: no budget (explain, what-ifs outside an attempt).
        # A member of a pod-group cycle shares its group's.
        if budget is None and pod_group is not None:
            budget = pod_group.budget
        self.budget: Budget | None = budget
        # In a pod-group cycle, the group's own CycleState (upstream's
        # CycleState.GetPodGroupSchedulingCycle), which every member's cycle shares:
        # DynamicResources keeps each member's PreFilter state there for its
        # PodGroupPostFilter. None outside a pod-group cycle.
        self.pod_group = pod_group
        # Plugins whose PreFilter / PreScore returned Skip in this cycle.
        self.skip_filter: set[str] = set()
        self.skip_score: set[str] = set()

    def write(self, key: str, value: Any) -> None:
        self._data[key] = value

    def read(self, key: str) -> Any:
        """The value a plugin wrote earlier in this cycle; KeyError when it wrote none."""
        return self._data[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self._data.get(key, default)

    def clone(self) -> CycleState:
        """A copy for a what-if (nominated pods, preemption's victims), as upstream's
        CycleState.Clone. Shallow: a PreFilterExtensions add_pod/remove_pod must write a
        new value for its key (copy on write), never change the one it read in place."""
        out = CycleState(self.pod_group, self.budget)
        out._data = dict(self._data)
        out.skip_filter = set(self.skip_filter)
        out.skip_score = set(self.skip_score)
        return out
