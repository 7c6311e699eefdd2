"""Hot reload, measured where users feel it (issue 15): from the PATCH of a policy's spec
being answered to the first pod decided by the generation that PATCH made.

The operator's engine records that moment itself (scheduler/profile.py Profile.first_decision)
and exports it on /metrics as two gauges per policy:
polsched_policy_first_decision_generation and
polsched_policy_first_decision_timestamp_seconds (time.time()). The driver, a child
process, PATCHes, notes time.time() when the answer arrives, then scrapes /metrics until
the generation gauge reaches the patched generation, and takes the exported timestamp
minus its own: both are CLOCK_REALTIME read on one host, so they compare (a wall-clock
step during a run would show as one absurd figure; NTP's slewing is at most 500 ppm,
50 us over 100 ms). The scrape interval only delays the driver, never the figure.

The pods stream in at a fixed rate (`create_paced`) for as long as the reloads take, so
every reload happens while pods arrive and wait; run.py counts those whose first
decision came before the last bind ("under load").
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import re
import time
from collections.abc import Sequence
from typing import Any

from bench import measure

# Between two scrapes while waiting for a generation: short enough not to delay the next
# patch much, long enough that the scrapes cost the scheduler little CPU.
SCRAPE_INTERVAL = 0.02
# A generation not decided within this is recorded as unobserved.
GIVE_UP_S = 10.0

_GAUGE = re.compile(r'^polsched_policy_first_decision_'
                    r'(generation|timestamp_seconds|wait_seconds|idle_seconds)'
                    r'\{policy="([^"]*)"\} (\S+)$', re.M)


def parse_first_decision(text: str, policy: str
                         ) -> tuple[int, float, float, float] | None:
    """(generation, timestamp, wait after the swap, of which idle: no pod queued) of
    `policy` from a /metrics exposition, or None."""
    values = {name: float(v) for name, p, v in _GAUGE.findall(text) if p == policy}
    gen = values.get("generation")
    ts = values.get("timestamp_seconds")
    if gen is None or ts is None:
        return None
    return int(gen), ts, values.get("wait_seconds", 0.0), values.get("idle_seconds", 0.0)


async def create_paced(client: Any, path: str, bodies: Sequence[bytes], rate: float,
                       concurrency: int, stop_after: Any = None,
                       ) -> list[tuple[float, float]]:
    """measure.create_objects, but body i is sent no sooner than i/rate seconds after the
    start: a steady stream, one pod at a time, not bursts (a burst each 100 ms would leave
    the queue empty between bursts, and a reload would wait for the next one).
    `stop_after`: an object with `done()`; once it is true the rest is sent at once (the
    reloads are over; the pods still have to exist)."""
    times: list[tuple[float, float]] = [(0.0, 0.0)] * len(bodies)
    start = time.monotonic()
    next_index = 0

    async def worker() -> None:
        nonlocal next_index
        while next_index < len(bodies):
            i = next_index
            next_index += 1
            due = start + i / rate - time.monotonic()
            if due > 0 and not (stop_after is not None and stop_after.done()):
                await asyncio.sleep(due)
            (times[i],) = await measure.create_objects(client, path, [bodies[i]], 1)

    await asyncio.gather(*(worker() for _ in range(max(1, concurrency))))
    return times


def drive(kubeconfig: str, policy_path: str, policy: str, metrics_url: str,
          patches: list[dict[str, Any]], interval: float, stop: Any, finished: Any,
          out: Any) -> None:
    asyncio.run(_drive(kubeconfig, policy_path, policy, metrics_url, patches, interval,
                       stop, finished, out))


async def _drive(kubeconfig: str, policy_path: str, policy: str, metrics_url: str,
                 patches: list[dict[str, Any]], interval: float, stop: Any, finished: Any,
                 out: Any) -> None:
    import aiohttp

    from polsched.cluster.client import ApiClient

    records: list[dict[str, Any]] = []
    async with ApiClient.from_kubeconfig(kubeconfig) as client, \
            aiohttp.ClientSession() as http:
        async def scrape() -> tuple[int, float, float, float] | None:
            async with http.get(metrics_url) as resp:
                return parse_first_decision(await resp.text(), policy)

        for patch in patches:
            if stop.is_set():
                break
            sent = time.monotonic()
            answer = await client.patch(policy_path, patch, "merge")
            answered_wall = time.time()
            answered = time.monotonic()
            generation = int(answer["metadata"]["generation"])
            decided: float | None = None
            wait: float | None = None
            idle: float | None = None
            while time.monotonic() - answered < GIVE_UP_S:
                seen = await scrape()
                if seen is not None and seen[0] >= generation:
                    if seen[0] == generation:
                        decided, wait, idle = seen[1] - answered_wall, seen[2], seen[3]
                    break
                await asyncio.sleep(SCRAPE_INTERVAL)
            records.append({
                "generation": generation, "sent": sent, "answered": answered,
                "answered_wall": answered_wall,  # to line up with the operator's log
                "patch_s": answered - sent,
                # the first decision on the monotonic clock, for run.py's "under load"
                "decided": None if decided is None else answered + decided,
                "latency_s": None if decided is None else max(0.0, decided),
                # of which after the engine swapped the pipeline in
                "wait_s": wait,
                # and of that, before the pod it decided was queued (nothing to decide)
                "idle_s": idle})
            await asyncio.sleep(interval)
    finished.set()
    out.put(records)


class FirstDecisionDriver:
    """The parent's handle: start(), done() (all patches sent or stopped), result()."""

    def __init__(self, kubeconfig: str, policy_path: str, policy: str, metrics_url: str,
                 patches: list[dict[str, Any]], interval: float) -> None:
        ctx = mp.get_context("spawn")
        self._stop = ctx.Event()
        self._finished = ctx.Event()
        self._out: Any = ctx.Queue()
        self._res: list[dict[str, Any]] | None = None
        self._proc = ctx.Process(target=drive, daemon=True,
                                 args=(kubeconfig, policy_path, policy, metrics_url,
                                       patches, interval, self._stop, self._finished,
                                       self._out))

    def start(self) -> None:
        self._proc.start()

    def stop(self) -> None:
        """No more patches (the pods have all been created)."""
        self._stop.set()

    def done(self) -> bool:
        return self._finished.is_set() or not self._proc.is_alive()

    def result(self, timeout: float) -> list[dict[str, Any]]:
        import queue

        if self._res is not None:
            return self._res
        try:
            res: list[dict[str, Any]] = self._out.get(timeout=timeout)
        except queue.Empty:
            self._stop.set()
            try:
                res = self._out.get(timeout=30)
            except queue.Empty:
                res = []
        self._proc.join(10)
        if self._proc.is_alive():
            self._proc.kill()
        self._res = res
        return res


def summary(records: list[dict[str, Any]], last_bind: float) -> dict[str, Any]:
    """The run's reload figures. `last_bind`: the monotonic time of the workload's last
    bind; a reload counts as under load when its generation decided its first pod (a pod
    of the stream) before then."""
    lat = [r["latency_s"] for r in records if r["latency_s"] is not None]
    return {
        "measure": "PATCH answered .. first pod decided by the new generation "
                   "(polsched_policy_first_decision_* on /metrics)",
        "patches": len(records), "observed": len(lat),
        "under_load": sum(1 for r in records
                          if r["decided"] is not None and r["decided"] < last_bind),
        "latency_ms": measure.summarize_ms(lat),
        "patch_answer_ms": measure.summarize_ms([r["patch_s"] for r in records]),
        # The latency's two parts: until the engine had the new pipeline (the watch event
        # reaching the operator, load and build), and from then to the first decision.
        "until_swapped_ms": measure.summarize_ms(
            [max(0.0, r["latency_s"] - r["wait_s"]) for r in records
             if r["latency_s"] is not None and r.get("wait_s") is not None]),
        "swap_to_decision_ms": measure.summarize_ms(
            [r["wait_s"] for r in records if r.get("wait_s") is not None]),
        # The swap -> decision part is partly no pod to decide: the stream's next pod had
        # not reached the queue yet (the API server's watch under load). The latency less
        # that idle time is how long a pod already waiting would have waited.
        "idle_after_swap_ms": measure.summarize_ms(
            [r["idle_s"] for r in records if r.get("idle_s") is not None]),
        "latency_less_idle_ms": measure.summarize_ms(
            [max(0.0, r["latency_s"] - r["idle_s"]) for r in records
             if r["latency_s"] is not None and r.get("idle_s") is not None]),
        "reloads_idle_after_swap": sum(1 for r in records if (r.get("idle_s") or 0) > 0),
        "unobserved_generations": [r["generation"] for r in records
                                   if r["latency_s"] is None],
        "per_patch_ms": [None if r["latency_s"] is None else round(r["latency_s"] * 1000, 2)
                         for r in records]}
