"""The node metrics watcher: node usage from the Metrics API for the load-aware scorers.

One per process (the engine makes it and puts it into the Handle every policy's plugins
are built with), shared by every policy that needs it: it polls
`GET /apis/metrics.k8s.io/v1beta1/nodes` (metrics-server, through the API server's
aggregation layer) every `interval` seconds, the smallest interval any live scorer asked
for (`metricsIntervalSeconds`) or the operator's default (`--node-metrics-interval`),
and only while some scorer wants it: a process without load-aware policies makes no
such request. It keeps the last HISTORY distinct samples of each node (a sample repeats
until metrics-server scrapes again) for the mean and deviation the variance-based
algorithms read. The scorers read what it holds; nothing on the per-pod path calls the
API server (`requests` counts every call it makes, by verb and path).

A node's metrics are missing when it was never served, and stale when it has not been
served for STALE_INTERVALS polling intervals (metrics-server drops a node it cannot
scrape): both read as None, the scorers' neutral score, and `missing()` reports them for
the policies' MetricsAvailable condition and `polsched explain`.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import math
import re
import time
import weakref
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from polsched.cluster.client import ApiClient, ApiError
from polsched.framework import resources as res
from polsched.framework.load import (
    NODE_METRICS_PATH,
    FirstSeen,
    NodeLoad,
    NodeMetricsState,
    ResourceLoad,
)
from polsched.framework.types import NodeInfo, PodInfo

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_SECONDS = 15.0
# Distinct samples kept per node: at metrics-server's default 15 s resolution, the last
# 2.5 minutes; enough for a deviation, short enough to follow a change of load.
HISTORY = 10
STALE_INTERVALS = 3
# A node unserved this long (seconds) is dropped ("never seen" again in explain).
FORGET_AFTER = 3600.0
# Bounds on what one answer may make us keep (untrusted input): nodes per answer.
MAX_NODES = 100_000

_DURATION = re.compile(r"(?P<n>[0-9]+(?:\.[0-9]*)?)(?P<u>h|ms|us|µs|ns|m|s)")
_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def parse_duration(text: str) -> float:
    """A Go duration string as metav1.Duration writes it ("10.5s", "1m0s") in seconds."""
    total, pos = 0.0, 0
    for m in _DURATION.finditer(text):
        if m.start() != pos:
            raise ValueError(f"invalid duration {text!r}")
        total += float(m.group("n")) * _UNITS[m.group("u")]
        pos = m.end()
    if pos != len(text) or not text:
        raise ValueError(f"invalid duration {text!r}")
    return total


def parse_time(text: str) -> float:
    """An RFC 3339 timestamp (metav1.Time) as Unix seconds."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


class _Node:
    __slots__ = ("cpu", "load", "memory", "seen", "stamps")

    def __init__(self) -> None:
        self.cpu: collections.deque[float] = collections.deque(maxlen=HISTORY)
        self.memory: collections.deque[float] = collections.deque(maxlen=HISTORY)
        self.stamps: collections.deque[float] = collections.deque(maxlen=HISTORY)
        self.seen = -math.inf  # when last served (our clock)
        self.load: NodeLoad | None = None


class NodeMetricsWatcher:
    """framework.load.LoadSource over the Metrics API (see the module docstring)."""

    def __init__(self, client: ApiClient, *, interval: float = DEFAULT_INTERVAL_SECONDS,
                 clock: Callable[[], float] = time.time) -> None:
        self.client = client
        self.default_interval = interval
        self._clock = clock
        self._nodes: dict[str, _Node] = {}
        self._wants: weakref.WeakKeyDictionary[object, float | None] = (
            weakref.WeakKeyDictionary())
        self._seen = FirstSeen(clock)
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._closed = False
        # Every request made, by (verb, path): the metrics path's whole cost.
        self.requests: collections.Counter[tuple[str, str]] = collections.Counter()
        self.polls = 0
        self.last_poll: float | None = None  # our clock, of the last successful poll
        self.last_error: str | None = None
        # Called when the set of nodes without fresh metrics changes, or a poll fails or
        # recovers (the engine touches the status of the policies that read load).
        self.on_change: Callable[[], None] | None = None
        # Called after every request with its outcome (the engine counts them in
        # polsched_node_metrics_requests_total).
        self.on_request: Callable[[bool], None] | None = None
        self._missing_key: tuple[object, ...] = ()
        # interval's inputs (want() calls, live owners) and its value: node_load reads it
        # for every node of every pod scored.
        self._wants_version = 0
        self._interval: tuple[int, int, float] = (-1, -1, interval)

    # -- LoadSource --------------------------------------------------------------------
    def node_load(self, name: str) -> NodeLoad | None:
        node = self._nodes.get(name)
        if node is None or node.load is None:
            return None
        if self._clock() - node.seen > self.stale_after:
            return None
        return node.load

    def state(self, name: str) -> NodeMetricsState:
        node = self._nodes.get(name)
        if node is None or node.seen == -math.inf:
            return NodeMetricsState(name, None, None)
        age = max(self._clock() - node.seen, 0.0)
        return NodeMetricsState(name, node.load if age <= self.stale_after else None, age)

    def in_flight(self, node: NodeInfo, since: float) -> Sequence[PodInfo]:
        return self._seen.pods_since(node, since)

    def want(self, owner: object, interval: float | None) -> None:
        self._wants[owner] = interval
        self._wants_version += 1
        self._wake.set()
        if self._task is None and not self._closed:
            with contextlib.suppress(RuntimeError):  # no running loop: start() does it
                self._task = asyncio.get_running_loop().create_task(
                    self._run(), name="polsched-node-metrics")

    # -- what the engine and the status read ---------------------------------------------
    @property
    def wanted(self) -> bool:
        return len(self._wants) > 0

    def wants(self, owner: object) -> bool:
        return owner in self._wants

    @property
    def interval(self) -> float:
        version, live, value = self._interval
        if version != self._wants_version or live != len(self._wants):
            asked = [v for v in self._wants.values() if v is not None]
            value = min(asked) if asked else self.default_interval
            self._interval = (self._wants_version, len(self._wants), value)
        return value

    @property
    def stale_after(self) -> float:
        return STALE_INTERVALS * self.interval

    def missing(self, names: Sequence[str]) -> list[NodeMetricsState]:
        """The states of the nodes of `names` without fresh metrics."""
        return [st for n in names if (st := self.state(n)).load is None]

    # -- lifecycle -----------------------------------------------------------------------
    def start(self) -> None:
        if self._task is None and not self._closed and self.wanted:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name="polsched-node-metrics")

    async def close(self) -> None:
        self._closed = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _run(self) -> None:
        while not self._closed:
            if not self.wanted:
                self._wake.clear()
                await self._wake.wait()
                continue
            started = time.monotonic()
            await self.poll()
            # Wait out the interval; a scorer that asks for a shorter one (a wake)
            # shortens the wait.
            while not self._closed and self.wanted:
                self._wake.clear()
                rest = started + self.interval - time.monotonic()
                if rest <= 0:
                    break
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), rest)

    async def poll(self) -> None:
        """One request for every node's usage; what it answers is kept."""
        self.requests[("GET", NODE_METRICS_PATH)] += 1
        try:
            answer = await self.client.get(NODE_METRICS_PATH)
        except asyncio.CancelledError:
            raise
        except Exception as err:  # ApiError, and the transport's errors (aiohttp, OSError)
            msg = (f"{err.status} {err.reason}: {err.message}" if isinstance(err, ApiError)
                   else f"{type(err).__name__}: {err}")
            msg = f"GET {NODE_METRICS_PATH}: {msg}"
            if self.on_request is not None:
                self.on_request(False)
            if msg != self.last_error:
                log.warning("node metrics unavailable: %s", msg)
            self.last_error = msg
            self._check_changed()
            return
        if self.on_request is not None:
            self.on_request(True)
        self.ingest(answer)
        self.polls += 1
        self.last_error = None
        self._check_changed()

    def ingest(self, answer: Any) -> None:
        """Keep a NodeMetricsList's samples (bounded; malformed items are skipped)."""
        now = self._clock()
        self.last_poll = now
        items = answer.get("items") if isinstance(answer, dict) else None
        if not isinstance(items, list):
            return
        for item in items[:MAX_NODES]:
            try:
                name = item["metadata"]["name"]
                usage = item["usage"]
                cpu = float(res.parse_quantity(usage["cpu"]) * 1000)
                memory = float(res.parse_quantity(usage["memory"]))
                stamp = parse_time(item["timestamp"])
                window = parse_duration(item.get("window") or "0s")
            except (KeyError, TypeError, ValueError, AttributeError, res.QuantityError):
                continue
            if not isinstance(name, str) or not name or not (
                    math.isfinite(cpu) and math.isfinite(memory)):
                continue
            node = self._nodes.get(name)
            if node is None:
                if len(self._nodes) >= MAX_NODES:
                    continue
                node = self._nodes[name] = _Node()
            node.seen = now
            if node.stamps and node.stamps[-1] == stamp:
                continue  # the same sample again: metrics-server has not scraped since
            node.stamps.append(stamp)
            node.cpu.append(cpu)
            node.memory.append(memory)
            node.load = NodeLoad(ResourceLoad.of(node.cpu), ResourceLoad.of(node.memory),
                                 stamp, window, len(node.stamps))
        # Nodes not served for a long while (deleted ones, with node churn) are forgotten,
        # with what FirstSeen kept of their pods: memory stays bounded by the live nodes.
        gone = [n for n, node in self._nodes.items() if now - node.seen > FORGET_AFTER]
        if gone:
            self.forget(gone)

    def forget(self, names: Sequence[str]) -> None:
        """Drop what is kept of deleted nodes."""
        for n in names:
            self._nodes.pop(n, None)
        self._seen.forget(names)

    def _check_changed(self) -> None:
        now = self._clock()
        stale = tuple(sorted(n for n, node in self._nodes.items()
                             if now - node.seen > self.stale_after))
        # The served nodes count too: a node served for the first time leaves the
        # "never seen" list without any node turning stale (after a first poll that the
        # Metrics API answered before it served any node, nothing else would change).
        key = (self.last_error is None, stale, frozenset(self._nodes))
        if key != self._missing_key:
            self._missing_key = key
            if self.on_change is not None:
                try:
                    self.on_change()
                except Exception:
                    log.exception("node metrics on_change callback failed")
