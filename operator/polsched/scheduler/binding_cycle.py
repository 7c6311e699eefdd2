"""The extension points around a decision: Reserve, Permit and the binding cycle's
WaitOnPermit, PreBind and PostBind, as kube-scheduler's framework/runtime/framework.go runs
them (RunReservePluginsReserve/Unreserve, RunPermitPlugins, WaitOnPermit,
RunPreBindPlugins, RunPostBindPlugins) with its messages.

The engine calls these from schedule_one; this module holds no engine state, so the
order, the statuses and the unreserve-on-failure rules are tested on their own with
plugins built by the production builder. Bind itself is the engine's (the Binder, or a
binding extender).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from polsched.framework.cycle_state import CycleState
from polsched.framework.interfaces import (
    PermitPlugin,
    PostBindPlugin,
    PreBindPlugin,
    ReservePlugin,
)
from polsched.framework.status import SUCCESS, Code, Status
from polsched.framework.types import PodInfo
from polsched.framework.waiting_pods import WaitingPod, go_duration

log = logging.getLogger(__name__)

# framework.go maxTimeout: no plugin may hold a pod at Permit for longer.
MAX_PERMIT_TIMEOUT = 15 * 60.0


@dataclass(frozen=True)
class BindingPlugins:
    """The plugins of one pod's binding cycle (the pipeline's entries that apply to it)."""

    reserve: tuple[ReservePlugin, ...] = ()
    permit: tuple[PermitPlugin, ...] = ()
    pre_bind: tuple[PreBindPlugin, ...] = ()
    post_bind: tuple[PostBindPlugin, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.reserve or self.permit or self.pre_bind or self.post_bind)


NONE = BindingPlugins()


def _as_error(point: str, plugin: str, st: Status) -> Status:
    # Go's %q of the plugin name
    return Status(Code.ERROR, (f'running {point} plugin "{plugin}": {st.message}',), plugin)


def run_reserve(bp: BindingPlugins, state: CycleState, pod: PodInfo, node: str) -> Status:
    """RunReservePluginsReserve: in order; the first failure is returned (a rejection with
    its plugin, anything else as an error). The caller unreserves on failure."""
    for p in bp.reserve:
        try:
            st = p.reserve(state, pod, node)
        except Exception as err:  # noqa: BLE001 - a plugin bug is an error status
            st = Status.error(f"{type(err).__name__}: {err}")
        if not st.ok:
            if st.rejected:
                return Status(st.code, st.reasons, p.name)
            return _as_error("Reserve", p.name, st)
    return SUCCESS


def run_unreserve(bp: BindingPlugins, state: CycleState, pod: PodInfo, node: str) -> None:
    """RunReservePluginsUnreserve: every Reserve plugin, in reverse order."""
    for p in reversed(bp.reserve):
        try:
            p.unreserve(state, pod, node)
        except Exception:  # noqa: BLE001 - one failing Unreserve must not skip the others
            log.exception("Unreserve of %s failed for %s",
                                                  p.name, pod.key)


def run_permit(bp: BindingPlugins, state: CycleState, pod: PodInfo, node: str
               ) -> tuple[Status, dict[str, float]]:
    """RunPermitPlugins: Success, a rejection or error (with its plugin), or Wait with the
    waiting plugins' timeouts (each at most 15 minutes)."""
    waits: dict[str, float] = {}
    for p in bp.permit:
        try:
            st, timeout = p.permit(state, pod, node)
        except Exception as err:  # noqa: BLE001
            st, timeout = Status.error(f"{type(err).__name__}: {err}"), 0.0
        if st.ok:
            continue
        if st.rejected:
            return Status(st.code, st.reasons, p.name), {}
        if st.code is Code.WAIT:
            waits[p.name] = min(timeout, MAX_PERMIT_TIMEOUT)
            continue
        return _as_error("Permit", p.name, st), {}
    if waits:
        return Status(Code.WAIT, ("one or more plugins asked to wait and no plugin "
                                  "rejected pod",)), waits
    return SUCCESS, {}


async def run_pre_bind(bp: BindingPlugins, state: CycleState, pod: PodInfo,
                       node: str) -> Status:
    """RunPreBindPlugins: in order; the first failure is returned."""
    for p in bp.pre_bind:
        try:
            st = await p.pre_bind(state, pod, node)
        except Exception as err:  # noqa: BLE001
            st = Status.error(f"{type(err).__name__}: {err}")
        if not st.ok:
            if st.rejected:
                return Status(st.code, st.reasons, p.name)
            return _as_error("PreBind", p.name, st)
    return SUCCESS


def run_post_bind(bp: BindingPlugins, state: CycleState, pod: PodInfo, node: str) -> None:
    """RunPostBindPlugins: informational; failures are logged only."""
    for p in bp.post_bind:
        try:
            p.post_bind(state, pod, node)
        except Exception:  # noqa: BLE001
            log.exception("PostBind of %s failed for %s",
                                                  p.name, pod.key)


# plugin ids -> (the plugins, kept so their ids stay theirs; their BindingPlugins)
_SORTED: dict[tuple[int, ...], tuple[Sequence[object], BindingPlugins]] = {}
_SORTED_MAX = 256


def binding_plugins(plugins: Sequence[object]) -> BindingPlugins:
    """The binding-cycle plugins among `plugins` (in order, each once). Called per bound
    pod with the same few plugin sets: the answer is remembered (isinstance against the
    runtime-checkable point protocols is slow)."""
    key = tuple(map(id, plugins))
    got = _SORTED.get(key)
    if got is not None:
        return got[1]
    bp = BindingPlugins(
        reserve=tuple(p for p in plugins if isinstance(p, ReservePlugin)),
        permit=tuple(p for p in plugins if isinstance(p, PermitPlugin)),
        pre_bind=tuple(p for p in plugins if isinstance(p, PreBindPlugin)),
        post_bind=tuple(p for p in plugins if isinstance(p, PostBindPlugin)),
    )
    if len(_SORTED) >= _SORTED_MAX:
        _SORTED.clear()
    _SORTED[key] = (tuple(plugins), bp)
    return bp


__all__ = ["MAX_PERMIT_TIMEOUT", "NONE", "BindingPlugins", "WaitingPod", "binding_plugins",
           "go_duration", "run_permit", "run_post_bind", "run_pre_bind", "run_reserve",
           "run_unreserve"]
