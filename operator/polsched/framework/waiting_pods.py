"""WaitingPod: a pod that Permit plugins hold in its binding cycle (kube-scheduler's
framework/runtime/waiting_pods_map.go).

The engine creates one when Permit answers Wait and keeps it, by pod uid, in the map that
every plugin's Handle.waiting_pods shows, so that a plugin (a coscheduling gang, a quota
check) can allow or reject pods that wait; each waiting plugin's timeout rejects the pod
when it passes. Needs a running asyncio loop (timers); no I/O.
"""

from __future__ import annotations

import asyncio

from polsched.framework.status import SUCCESS, Code, Status
from polsched.framework.types import PodInfo


def go_duration(seconds: float) -> str:
    """Go's time.Duration String() for the durations Permit timeouts use."""
    if seconds < 1:
        ms = seconds * 1000
        return f"{ms:g}ms"
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    out = f"{s:g}s"
    if m or h:
        out = f"{int(m)}m" + out
    if h:
        out = f"{int(h)}h" + out
    return out


class WaitingPod:
    """Allowed once every waiting plugin allows it; rejected by any of them, or when a
    plugin's timeout passes (newWaitingPod)."""

    def __init__(self, pod: PodInfo, waits: dict[str, float]) -> None:
        self.pod = pod
        self._pending: dict[str, asyncio.TimerHandle] = {}
        self._result: asyncio.Future[Status] = asyncio.get_running_loop().create_future()
        loop = asyncio.get_running_loop()
        for plugin, timeout in waits.items():
            msg = (f"rejected due to timeout after waiting {go_duration(timeout)} "
                   f"at plugin {plugin}")
            self._pending[plugin] = loop.call_later(timeout, self.reject, plugin, msg)

    @property
    def pending_plugins(self) -> list[str]:
        return sorted(self._pending)

    def allow(self, plugin: str) -> None:
        timer = self._pending.pop(plugin, None)
        if timer is not None:
            timer.cancel()
        if not self._pending:
            self._stop(SUCCESS)

    def reject(self, plugin: str, message: str) -> bool:
        """Unschedulable, from `plugin`. False when the pod was already decided."""
        return self._stop(Status(Code.UNSCHEDULABLE, (message,), plugin))

    def _stop(self, st: Status) -> bool:
        if self._result.done():
            return False
        for timer in self._pending.values():
            timer.cancel()
        self._pending.clear()
        self._result.set_result(st)
        return True

    async def wait(self) -> Status:
        """WaitOnPermit."""
        st = await self._result
        if st.ok or st.rejected:
            return st
        return Status(Code.ERROR, (f"waiting on permit for pod: {st.message}",), st.plugin)
