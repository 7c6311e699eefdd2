#!/usr/bin/env python3
"""`polsched ARGS` with a start-up timeline on stderr, one line per stage reached:

  TL <stage> <seconds since the process was exec'd> cpu <process CPU seconds>

  .venv/bin/python bench/startup_timeline.py run --kubeconfig K --namespace bench \\
      --identity bench --metrics-listen 127.0.0.1:0        # as bench/schedulers.py runs it

Stages: boot's imports done (controller.process.boot), cache lists sent, the rest of the imports
done (on boot's worker thread), each list answered, cache synced, policies listed
and applied (the first pipeline build), the Lease acquired (on its thread), leadership
taken (set_leading), the first scheduling cycle started and done, the first bind
queued, sent and answered (with the number of cycles run by then), exit. Used for bench/NOTES.md
"Issue 15, fourth pass: start-up" and "seventh pass"; the wrappers are installed after the
imports they wrap, so the imports are timed as `polsched run` does them.
"""

from __future__ import annotations

import atexit
import functools
import os
import sys
import time
from typing import Any


def _age() -> float:
    """Seconds since this process started (/proc, clock-tick resolution)."""
    with open("/proc/self/stat") as f:
        start = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/uptime") as f:
        up = float(f.read().split()[0])
    return up - start / os.sysconf("SC_CLK_TCK")


T0 = time.monotonic() - _age()
_seen: set[str] = set()


def mark(stage: str, once: bool = True, note: str = "") -> None:
    if once and stage in _seen:
        return
    _seen.add(stage)
    t = os.times()
    print(f"TL {stage:30s} {time.monotonic() - T0:7.3f} cpu {t.user + t.system:6.3f}{note}",
          file=sys.stderr, flush=True)


def _wrap(cls: Any, name: str, before: str | None, after: str | None) -> None:
    orig = getattr(cls, name)
    if hasattr(orig, "__code__") and orig.__code__.co_flags & 0x80:  # a coroutine function
        @functools.wraps(orig)
        async def wrapped_async(*a: Any, **k: Any) -> Any:
            if before:
                mark(before)
            r = await orig(*a, **k)
            if after:
                mark(after)
            return r
        setattr(cls, name, wrapped_async)
        return

    @functools.wraps(orig)
    def wrapped(*a: Any, **k: Any) -> Any:
        if before:
            mark(before)
        r = orig(*a, **k)
        if after:
            mark(after)
        return r
    setattr(cls, name, wrapped)


def main() -> int:
    mark("python started")
    import polsched.commands.cli
    from polsched.cluster.cache import ClusterCache
    from polsched.cluster.client import ApiClient
    from polsched.controller.process import boot
    mark("boot imports done")

    _wrap(ClusterCache, "prefetch", None, "cache lists sent")
    _wrap(ClusterCache, "start", "cache start", "cache synced")
    list_all = ApiClient.list_all

    async def listed(self: ApiClient, path: str, **k: Any) -> Any:
        r = await list_all(self, path, **k)
        mark(f"listed {path.rsplit('/', 1)[-1]}")
        return r
    ApiClient.list_all = listed  # type: ignore[method-assign]
    run = boot.run

    def booted(args: Any, load: Any) -> int:
        def loaded() -> Any:  # on boot's worker thread: the rest of the imports
            main = load()
            mark("imports done")
            heavy()
            return main
        return run(args, loaded)
    boot.run = booted
    atexit.register(lambda: mark("exit", once=False))
    return polsched.commands.cli.main(sys.argv[1:])


def heavy() -> None:
    """The wrappers of what boot imports on its worker thread."""
    from polsched.controller.policies.reconciler import PolicyReconciler
    from polsched.controller.process import leases
    from polsched.scheduler.binder import Binder
    from polsched.scheduler.engine import Engine
    from polsched.scheduler.schedule_one import ScheduleOne

    _wrap(Engine, "apply", "first pipeline build", "first pipeline built")
    _wrap(PolicyReconciler, "observe_all", "policies listed", "policies applied")
    _wrap(PolicyReconciler, "set_leading", "set_leading start", "set_leading done")
    _wrap(leases.LeaseElector, "_set_leading", None, "lease acquired (its thread)")
    _wrap(ScheduleOne, "schedule_one", "first cycle started", "first cycle done")
    _wrap(Binder, "bind", "first bind queued", None)
    decided = [0]
    schedule_one = ScheduleOne.schedule_one

    async def counted(self: ScheduleOne, *a: Any, **k: Any) -> Any:
        decided[0] += 1
        return await schedule_one(self, *a, **k)
    ScheduleOne.schedule_one = counted  # type: ignore[method-assign]
    send = Binder._send

    async def sent(self: Binder, *a: Any, **k: Any) -> Any:
        mark("first Binding sent", note=f"  ({decided[0]} cycles started)")
        await send(self, *a, **k)
        mark("first Binding answered", note=f"  ({decided[0]} cycles started)")
    Binder._send = sent  # type: ignore[method-assign]


if __name__ == "__main__":
    sys.exit(main())
