"""The facts preemption reads of a victim (kube-scheduler v1.37, pkg/scheduler/framework/
preemption/util.go): terminating by preemption, start time, importance, and the
PodDisruptionBudgets an eviction would break. Shared by the single pod's and the pod
group's preemption and by the executor (the condition it writes)."""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from polsched.framework.selectors import SelectorError, compile_label_selector
from polsched.framework.types import Json, PodInfo

# v1.DisruptionTarget / v1.PodReasonPreemptionByScheduler
DISRUPTION_TARGET = "DisruptionTarget"
REASON_PREEMPTION_BY_SCHEDULER = "PreemptionByScheduler"


def pod_terminating_by_preemption(pod: PodInfo) -> bool:
    """util.go PodTerminatingByPreemption."""
    if not pod.deleting:
        return False
    for c in (pod.raw.get("status") or {}).get("conditions") or ():
        if c.get("type") == DISRUPTION_TARGET:
            return bool(c.get("status") == "True"
                        and c.get("reason") == REASON_PREEMPTION_BY_SCHEDULER)
    return False


@functools.lru_cache(maxsize=4096)  # the sort keys of every dry run parse the same times
def _parse_time(value: str) -> float | None:
    try:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def start_time(pod: PodInfo, now: float) -> float:
    """util.GetPodStartTime: status.startTime, or now for a pod not started."""
    value = (pod.raw.get("status") or {}).get("startTime")
    t = _parse_time(value) if isinstance(value, str) and value else None
    return now if t is None else t


def more_important_pod_key(now: float) -> Callable[[PodInfo], tuple[int, float]]:
    """A sort key putting the more important victim first (MoreImportantVictim for single
    pods: higher priority, then earlier start)."""
    return lambda p: (-p.priority, start_time(p, now))


def filter_victims_with_pdb_violation(
    victims: Sequence[PodInfo], pdbs: Sequence[Json],
) -> tuple[list[tuple[PodInfo, int, list[str]]], list[PodInfo]]:
    """util.go FilterVictimsWithPDBViolation: the victims whose eviction would take a PDB
    below its disruptionsAllowed (with how many pods, and which PDBs), and the others.
    The budgets are spent in the order of `victims`."""
    compiled: list[tuple[str, str, Any, Mapping[str, Any]]] = []
    allowed: list[int] = []
    for pdb in pdbs:
        meta = pdb.get("metadata") or {}
        spec = pdb.get("spec") or {}
        status = pdb.get("status") or {}
        selector = spec.get("selector")
        if not selector or not (selector.get("matchLabels") or selector.get("matchExpressions")):
            matcher = None  # nil or empty: selects nothing here (selector.Empty())
        else:
            try:
                matcher = compile_label_selector(selector)
            except SelectorError:
                matcher = None
        compiled.append((meta.get("namespace") or "", f"{meta.get('namespace')}/{meta.get('name')}",
                         matcher, status.get("disruptedPods") or {}))
        allowed.append(int(status.get("disruptionsAllowed") or 0))

    def violated(pod: PodInfo) -> str:
        if not pod.labels:
            return ""
        for i, (ns, name, matcher, disrupted) in enumerate(compiled):
            if ns != pod.namespace or matcher is None or not matcher(pod.labels):
                continue
            if pod.name in disrupted:
                continue
            allowed[i] -= 1
            if allowed[i] < 0:
                return name
        return ""

    violating: list[tuple[PodInfo, int, list[str]]] = []
    non_violating: list[PodInfo] = []
    for v in victims:
        name = violated(v)
        if name:
            violating.append((v, 1, [name]))
        else:
            non_violating.append(v)
    return violating, non_violating
