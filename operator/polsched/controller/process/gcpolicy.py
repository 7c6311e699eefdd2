"""The cyclic garbage collector's policy of the long-running commands (`polsched run`,
`polsched schedule`), and its pauses on /metrics.

A collection stops the event loop for as long as it walks its generation. The young ones
are short (a few ms); a full (generation 2) pass walks every tracked object of the heap:
on the hotreload bench (7500 pods streaming in) 37-110 ms of CPU each, four a run, and they
found nothing to free (bench/NOTES.md, "Issue 15, fifth pass"). Three settings:

- `apply()`, at start: the thresholds. The third (how many generation-1 passes before a
  full one is considered; CPython also waits for the long-lived objects to grow by a
  quarter) goes from 10 to 100, so full passes come ten times less often; the young
  generations keep CPython's defaults, and so their short pauses. Garbage in cycles is
  still collected: by the young passes, and by the full ones that still come.
- No collection between `apply()` and `freeze()`, the start-up: it allocates the
  imported modules and the listed cluster, which all live as long as the process, so
  the young passes over them (one every 700 allocations, a few hundred over 2500 listed
  pods) free nothing: 10-20 ms less CPU before the sync on the preemption bench (four
  start-ups with and without; bench/NOTES.md, "Issue 15, seventh pass: start-up"),
  within that bench's noise, more where more is allocated. What the start-up leaves in
  cycles is frozen with the rest, never freed: 489 objects on that bench, measured by a
  full collection at the freeze (38 ms there, ten times that at 30 000 pods, so it is not
  made). A start-up that takes longer than STARTUP_PAUSE_SECONDS (an API server that does
  not answer, and the retries' garbage) gets the collector back then (`resume()`).
- `freeze()`, once the cache has synced: what exists then (the imported modules, the
  listed cluster) lives as long as the process, so it leaves the collector's passes
  (gc.freeze), and the collector starts. Objects made later are collected as before;
  frozen ones that are dropped are still freed by their reference count.

$POLSCHED_GC_THRESHOLDS ("700,10,100") overrides the thresholds, for measuring.
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Mapping
from typing import Any

from polsched.scheduler import metrics

THRESHOLDS = (700, 10, 100)
STARTUP_PAUSE_SECONDS = 10.0  # the longest start-up without collections (resume)
ENV = "POLSCHED_GC_THRESHOLDS"


def thresholds(environ: Mapping[str, str] = os.environ) -> tuple[int, int, int]:
    """The thresholds to apply: $POLSCHED_GC_THRESHOLDS or THRESHOLDS."""
    raw = environ.get(ENV, "").strip()
    if not raw:
        return THRESHOLDS
    try:
        values = tuple(int(v) for v in raw.split(","))
    except ValueError:
        values = ()
    if len(values) != 3 or any(v < 0 for v in values):
        raise SystemExit(f"polsched: ${ENV}: {raw!r} is not three non-negative integers "
                         "(gen0,gen1,gen2), e.g. 700,10,100")
    return values[0], values[1], values[2]


_started: list[float] = [0.0]


def _on_gc(phase: str, info: dict[str, Any]) -> None:
    if phase == "start":
        _started[0] = time.perf_counter()
    else:
        metrics.gc_pause(int(info["generation"]), time.perf_counter() - _started[0])


def apply(environ: Mapping[str, str] = os.environ) -> None:
    """At the start of a long-running command: the thresholds, each collection's pause
    observed on /metrics (polsched_gc_pause_seconds), and no collection until freeze()."""
    t = thresholds(environ)
    gc.set_threshold(*t)
    metrics.gc_thresholds(t)
    if _on_gc not in gc.callbacks:
        gc.callbacks.append(_on_gc)
    gc.disable()


def resume() -> None:
    """STARTUP_PAUSE_SECONDS after apply() (controller.process.boot): collect again,
    synced or not."""
    gc.enable()


def freeze() -> None:
    """Once the cache has synced: everything alive now leaves the collector's passes,
    which start now."""
    gc.freeze()
    metrics.gc_frozen(gc.get_freeze_count())
    gc.enable()
