"""What the scheduler writes about its decisions besides the binding: events, a pod's
PodScheduled condition and a PodGroup's condition, written as kube-scheduler writes them
(its profile's event recorder, and schedule_one.go's updatePod and
updatePodGroupCondition). One recorder per profile does both, since both go out in the
background, bounded, in the order they were decided.

Events use the events.k8s.io/v1 API through a recorder like client-go's
tools/events (event_recorder.go makeEvent, event_broadcaster.go recordToSink):
reportingController is the scheduler name (the profile's schedulerName, as
profile.NewRecorderFactory), reportingInstance "<controller>-<hostname>", the event named
"<pod>.<unix nanoseconds in hex>". Identical events for the same pod are folded into an
EventSeries instead of new objects: the second occurrence patches series.count at once,
later ones are written at most every `series_flush` seconds, and a series ends 6 minutes
after its last occurrence (upstream's finishTime).

On a failed attempt the pod gets PodScheduled=False (reason Unschedulable, or
SchedulerError for errors) through a strategic-merge patch of pods/status, skipped when
the condition would not change (schedule_one.go updatePod, podutil.UpdatePodCondition).

Every write runs in the background, at most `concurrency` at a time: the scheduling cycle
never waits on the API server. One object's status patches still go out one at a time, in
the order they were decided (upstream sends them synchronously, so they land in order).
Events take their tokens from the client's event bucket (ApiClient.event_limiter), as
kube-scheduler's events go through a client of their own.

A flood of events cannot grow memory without limit (client-go tools/events and
tools/record):
- at most 1000 event writes wait (event_broadcaster.go maxQueuedEvents), across the
  recorders sharing an EventBudget (the engine's policies: one per process, as one
  broadcaster); a new event beyond that is dropped (watch.DropIfChannelFull);
- a pod's new events pass a spam filter (record.EventSourceObjectSpamFilter: a token
  bucket per object, burst 25, then one per 5 minutes, for the 4096 objects seen last);
  repeats of one event only count up its series and are not filtered;
- at most `max_series` (4096, record's maxLruCacheEntries) series are remembered, the
  least recently seen forgotten first.
Drops are counted in polsched_events_dropped_total{controller,reason}. PodScheduled
condition patches are never dropped: they carry the pod's state, not a message.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import random
import socket
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import aiohttp

from polsched.cluster.client import ApiClient, ApiError, is_unreachable
from polsched.framework.diagnosis import truncate_message
from polsched.framework.messages import condition_message
from polsched.framework.types import PodInfo
from polsched.objects import Json
from polsched.scheduler import metrics
from polsched.scheduler.writers import wants_writer

log = logging.getLogger(__name__)

NORMAL = "Normal"
WARNING = "Warning"
# v1.PodReasonUnschedulable / v1.PodReasonSchedulerError
REASON_UNSCHEDULABLE = "Unschedulable"
REASON_SCHEDULER_ERROR = "SchedulerError"

SERIES_FINISH_SECONDS = 6 * 60.0
_RETRIES = 3
# client-go tools/events event_broadcaster.go maxQueuedEvents
MAX_QUEUED_EVENTS = 1000
# client-go tools/record events_cache.go: maxLruCacheEntries, defaultSpamBurst,
# defaultSpamQPS
MAX_CACHED = 4096
SPAM_BURST = 25
SPAM_QPS = 1 / 300
# A write (event or status patch, with its retries) that took longer is logged.
SLOW_WRITE_SECONDS = 5.0


def micro_time(t: float) -> str:
    """metav1.MicroTime as RFC3339 with microseconds (as datetime's isoformat of
    `datetime.fromtimestamp(t, UTC)`, without building a datetime per event)."""
    sec, us = _split(t)
    return f"{_seconds(sec)}.{us:06d}Z"


def rfc3339(t: float) -> str:
    """metav1.Time: RFC3339 in seconds."""
    return _seconds(_split(t)[0]) + "Z"


def _split(t: float) -> tuple[int, int]:
    """Whole seconds and microseconds, rounded as datetime.fromtimestamp rounds."""
    sec = int(t // 1)
    us = round((t - sec) * 1e6)
    if us >= 1_000_000:
        sec, us = sec + 1, us - 1_000_000
    return sec, us


_last_second: list[Any] = [None, ""]


def _seconds(sec: int) -> str:
    """'YYYY-MM-DDTHH:MM:SS' in UTC; the last one is remembered (events come in bursts)."""
    last = _last_second
    if last[0] != sec:
        last[1] = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec))
        last[0] = sec
    text: str = last[1]
    return text


_quote = json.encoder.encode_basestring_ascii


@dataclass(frozen=True, slots=True)
class EventRecord:
    """One events.k8s.io/v1 Event about a pod, as the recorder creates it (makeEvent)."""

    name: str
    namespace: str
    event_time: str
    controller: str
    instance: str
    action: str
    reason: str
    regarding: PodInfo
    note: str
    type_: str
    # The other pod involved (the preemptor of a Preempted event).
    related: PodInfo | None = None


def event_body(e: EventRecord) -> Json:
    """The events.k8s.io/v1 Event the recorder creates (makeEvent)."""
    body: Json = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": e.name, "namespace": e.namespace},
        "eventTime": e.event_time,
        "reportingController": e.controller,
        "reportingInstance": e.instance,
        "action": e.action,
        "reason": e.reason,
        "regarding": _object_reference(e.regarding),
        "note": e.note,
        "type": e.type_,
    }
    if e.related is not None:
        body["related"] = _object_reference(e.related)
    return body


def _object_reference(pod: PodInfo) -> Json:
    return {"kind": "Pod", "namespace": pod.namespace, "name": pod.name, "uid": pod.uid,
            "apiVersion": "v1", "resourceVersion": pod.resource_version}


def encode_event(e: EventRecord) -> bytes:
    """`event_body` as the bytes posted: what json.dumps(..., separators=(",", ":"))
    makes of it, joined from quoted strings (one event per bound pod: the dict and the
    generic encoder were a visible share of the CPU per pod)."""
    q = _quote
    parts = [
        '{"apiVersion":"events.k8s.io/v1","kind":"Event","metadata":{"name":', q(e.name),
        ',"namespace":', q(e.namespace), '},"eventTime":', q(e.event_time),
        ',"reportingController":', q(e.controller), ',"reportingInstance":', q(e.instance),
        ',"action":', q(e.action), ',"reason":', q(e.reason), ',"regarding":',
        _encode_reference(e.regarding), ',"note":', q(e.note), ',"type":', q(e.type_)]
    if e.related is not None:
        parts += [',"related":', _encode_reference(e.related)]
    parts.append("}")
    return "".join(parts).encode("ascii")


def _encode_reference(pod: PodInfo) -> str:
    q = _quote
    return "".join(('{"kind":"Pod","namespace":', q(pod.namespace), ',"name":', q(pod.name),
                    ',"uid":', q(pod.uid), ',"apiVersion":"v1","resourceVersion":',
                    q(pod.resource_version), "}"))


class EventBudget:
    """How many event writes may wait for the API server, shared by the recorders of one
    process as client-go's one broadcaster per process (maxQueuedEvents)."""

    def __init__(self, limit: int = MAX_QUEUED_EVENTS) -> None:
        self.limit = max(limit, 1)
        self.queued = 0

    @property
    def full(self) -> bool:
        return self.queued >= self.limit


class SpamFilter:
    """record.EventSourceObjectSpamFilter: a token bucket per object (`burst` events, then
    `qps` per second), for the `size` objects seen last (an LRU)."""

    def __init__(self, burst: int = SPAM_BURST, qps: float = SPAM_QPS,
                 size: int = MAX_CACHED) -> None:
        self.burst = burst
        self.qps = qps
        self.size = size
        self._buckets: dict[str, tuple[float, float]] = {}  # key -> (tokens, at)

    def allow(self, key: str, now: float) -> bool:
        tokens, at = self._buckets.pop(key, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - at) * self.qps)
        allowed = tokens >= 1.0
        if allowed:
            tokens -= 1.0
        self._buckets[key] = (tokens, now)  # most recent last
        if len(self._buckets) > self.size:
            del self._buckets[next(iter(self._buckets))]
        return allowed


@dataclass
class _Series:
    namespace: str
    name: str
    count: int
    last: float
    written_count: int


@dataclass(frozen=True)
class EventLimits:
    """How a recorder bounds what it writes: a series' count is written at most every
    `flush` seconds, at most `max_cached` series are remembered, and `spam_filter` (its
    own SpamFilter when None) rate-limits the events about one object."""

    flush: float = 30.0
    max_cached: int = MAX_CACHED
    spam_filter: SpamFilter | None = None


class EventRecorder:
    def __init__(self, client: ApiClient, reporting_controller: str, *,
                 concurrency: int = 96, limits: EventLimits = EventLimits(),
                 clock: Callable[[], float] = time.time,
                 shared: asyncio.Semaphore | None = None,
                 budget: EventBudget | None = None) -> None:
        series_flush, max_series = limits.flush, limits.max_cached
        spam_filter = limits.spam_filter
        self._client = client
        self.reporting_controller = reporting_controller
        self.reporting_instance = f"{reporting_controller}-{socket.gethostname()}"[:128]
        self._concurrency = max(concurrency, 1)
        self._series_flush = series_flush
        self._clock = clock
        # Writes wait in a queue drained by up to `concurrency` writer coroutines (started
        # as writes find them busy): a task per event was a visible share of the CPU per
        # pod. As many as the engine's binds in flight by default: a backlog's events keep
        # pace with its binds only with as many in flight.
        # (the write, whether it is an event: those count against max_queued)
        self._queue: asyncio.Queue[tuple[Coroutine[Any, Any, None], bool]] = asyncio.Queue()
        # Event writes waiting, here and in the recorders sharing the budget.
        self._budget = budget or EventBudget()
        self._queued_events = 0  # of them, this recorder's
        self._max_series = max(max_series, 1)
        self._spam = spam_filter or SpamFilter()
        self.dropped = 0  # events not written (queue full or spam)
        self._workers: list[asyncio.Task[None]] = []
        self._idle = 0  # writers waiting for a write
        # Writes in flight across the recorders that share it (the engine's policies), so
        # that many policies write no more at once than one does.
        self._shared = shared
        # (type, action, reason, pod uid, note) -> the event written for it
        self._series: dict[tuple[str, str, str, str, str], _Series] = {}
        self._flusher: asyncio.Task[None] | None = None
        # Status patches decided but not yet sent, by object (path): one object's patches
        # go out one at a time, in the order they were decided (status_lane).
        self._lanes: dict[str, collections.deque[Json]] = {}

    # -- what the scheduler records -------------------------------------------------------
    def scheduled(self, pod: PodInfo, node_name: str) -> None:
        self.event(pod, NORMAL, "Scheduled", "Binding",
                   f"Successfully assigned {pod.namespace}/{pod.name} to {node_name}")

    def failed_scheduling(self, pod: PodInfo, message: str) -> None:
        self.event(pod, WARNING, "FailedScheduling", "Scheduling", truncate_message(message))

    def event(self, pod: PodInfo, type_: str, reason: str, action: str, note: str,
              related: PodInfo | None = None) -> None:
        """Record an event about `pod` in the background; `related` is the other pod
        involved (the preemptor of a Preempted event)."""
        now = self._clock()
        key = (type_, action, reason, pod.uid, note)
        series = self._series.pop(key, None)
        if series is not None and now - series.last < SERIES_FINISH_SECONDS:
            self._series[key] = series  # the most recently seen last
            series.count += 1
            series.last = now
            # Upstream patches the series at its second occurrence; with the queue full,
            # the flusher writes the count later (nothing is lost but time).
            if series.count == 2 and not self._budget.full:
                self._spawn(self._write_series(series), event=True)
            self._ensure_flusher()
            return
        if not self._spam.allow(pod.uid or f"{pod.namespace}/{pod.name}", now):
            self._drop("spam")
            return
        if not self._room():
            return
        ns = pod.namespace or "default"
        name = f"{pod.name}.{time.time_ns():x}"
        body = encode_event(EventRecord(name, ns, micro_time(now), self.reporting_controller,
                                        self.reporting_instance, action, reason, pod, note,
                                        type_, related))
        self._series[key] = _Series(ns, name, 1, now, 1)
        if len(self._series) > self._max_series:
            del self._series[next(iter(self._series))]  # the least recently seen
        self._spawn(self._create(ns, name, body), event=True)
        self._ensure_flusher()

    def _room(self) -> bool:
        """Whether one more event write may wait; counts the drop when not."""
        if not self._budget.full:
            return True
        self._drop("queue_full")
        return False

    def _drop(self, reason: str) -> None:
        self.dropped += 1
        metrics.event_dropped(self.reporting_controller, reason)
        if self.dropped == 1 or self.dropped % 1000 == 0:
            log.warning("events of %s dropped (%s): %d so far", self.reporting_controller,
                        reason, self.dropped)

    @property
    def queued_events(self) -> int:
        """Event writes waiting for a writer."""
        return self._queued_events

    @property
    def pending_writes(self) -> int:
        """Every write waiting for a writer: events and status patches (those held behind
        a patch of the same object included)."""
        return self._queue.qsize() + sum(len(lane) for lane in self._lanes.values())

    def set_pod_scheduled_false(self, pod: PodInfo, reason: str, message: str,
                                nominated_node_name: str | None = None) -> None:
        """PodScheduled=False with `reason` and the full `message` (not cut to a note, as
        upstream), unless the pod already says exactly that; with status.nominatedNodeName
        set (a name) or cleared ("") in the same patch when it changes (updatePod)."""
        message = condition_message(message)  # capped and sanitised, whatever made it
        status = pod.raw.get("status") or {}
        conditions = status.get("conditions") or ()
        nnn_changed = nominated_node_name is not None and \
            (status.get("nominatedNodeName") or "") != nominated_node_name
        old = next((c for c in conditions if c.get("type") == "PodScheduled"), None)
        if old is not None and old.get("status") == "False" and old.get("reason") == reason \
                and old.get("message") == message and not nnn_changed:
            return
        transition = old.get("lastTransitionTime") if old is not None and \
            old.get("status") == "False" else None
        condition: Json = {
            "type": "PodScheduled", "status": "False", "reason": reason, "message": message,
            "lastProbeTime": None,
            "lastTransitionTime": transition or rfc3339(self._clock()),
        }
        generation = (pod.raw.get("metadata") or {}).get("generation")
        if generation:  # PodObservedGenerationTracking
            condition["observedGeneration"] = generation
        path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/status"
        patch: Json = {"status": {"conditions": [condition]}}
        if nnn_changed:
            patch["status"]["nominatedNodeName"] = nominated_node_name or None
        self._spawn_status(path, patch)

    async def nominate_for_binding(self, pod: PodInfo, node_name: str) -> None:
        """NominatedNodeNameForExpectation (on by default since v1.35): before a binding
        cycle that waits on Permit or whose PreBind has work, status.nominatedNodeName is
        set to the chosen node, unless the pod already says so (updatePod with
        ModeOverride), so that other components (the cluster autoscaler) know where the pod
        is going. Awaited before the binding, so it never lands after it (the API server
        clears the field when the pod is bound: ClearingNominatedNodeNameAfterBinding).
        One call; a failure is logged and the binding goes on, as upstream."""
        if (pod.raw.get("status") or {}).get("nominatedNodeName") == node_name:
            return
        path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/status"
        try:
            await self._client.patch(path, {"status": {"nominatedNodeName": node_name}},
                                     "strategic")
        except (ApiError, aiohttp.ClientError, TimeoutError) as err:
            log.warning("Failed to update the nominated node name in the binding cycle: "
                        "pod %s, nominatedNodeName %s: %s", pod.key, node_name, err)

    def set_pod_group_condition(self, namespace: str, name: str, condition: Json) -> None:
        """Patch one condition into a PodGroup's status (util.PatchPodGroupStatus); the
        caller decides whether it changed (updatePodGroupCondition)."""
        path = (f"/apis/scheduling.k8s.io/v1beta1/namespaces/{namespace}/podgroups/{name}"
                "/status")
        self._spawn_status(path, {"status": {"conditions": [condition]}})

    # -- plumbing -------------------------------------------------------------------------
    def _spawn(self, coro: Coroutine[Any, Any, None], event: bool = False) -> None:
        if event:
            self._queued_events += 1
            self._budget.queued += 1
        self._queue.put_nowait((coro, event))
        self._grow()

    def _grow(self) -> None:
        """One more writer when every one is busy, up to `concurrency`, by the binder's
        rule (polsched.scheduler.writers): the slots are `shared`, when given."""
        if wants_writer(self._queue.qsize(), self._idle, len(self._workers),
                        self._concurrency, self._shared):
            self._workers.append(asyncio.get_running_loop().create_task(
                self._work(), name=f"polsched-events-{len(self._workers)}"))

    async def _work(self) -> None:
        queue = self._queue
        while True:
            self._idle += 1
            try:
                coro, event = await queue.get()
            finally:
                self._idle -= 1
            if event:
                self._queued_events -= 1
                self._budget.queued -= 1
            began = time.monotonic()
            try:
                if self._shared is None:
                    await coro
                else:
                    async with self._shared:
                        self._grow()
                        await coro
            except Exception:
                log.exception("event write failed")
            finally:
                queue.task_done()
            took = time.monotonic() - began
            if took >= SLOW_WRITE_SECONDS:
                log.warning("a write of %s (%s) took %.1fs (%d writes waiting)",
                            self.reporting_controller, getattr(coro, "__qualname__", "?"), took,
                            queue.qsize())

    async def _call(self, what: str, fn: Callable[[], Coroutine[Any, Any, Json]]) -> Json | None:
        delay = 0.5
        for attempt in range(_RETRIES):
            retry_after: float | None = None
            try:
                return await fn()
            except ApiError as err:
                if err.status < 500 and err.status != 429 or attempt == _RETRIES - 1:
                    raise
                retry_after = err.retry_after
            except (aiohttp.ClientError, TimeoutError) as err:
                if attempt == _RETRIES - 1:
                    if is_unreachable(err):  # an outage: ApiClient.outage says so once
                        log.debug("%s failed: %r", what, err)
                    else:
                        log.warning("%s failed: %s", what, err)
                    return None
            # Jittered as event_broadcaster.go attemptRecording (wait.Jitter(sleep, 0.25)),
            # so that many recorders do not retry in step; at least the Retry-After.
            await asyncio.sleep(max(delay * (1 + 0.25 * random.random()), retry_after or 0.0))
            delay *= 2
        return None

    async def _create(self, ns: str, name: str, body: bytes) -> None:
        path = f"/apis/events.k8s.io/v1/namespaces/{ns}/events"

        async def post() -> Json:
            # The created Event comes back whole; nobody reads it.
            await self._client.send("POST", path, body, events=True)
            return {}

        try:
            await self._call("event", post)
        except ApiError as err:
            log.warning("event %s/%s rejected: %s", ns, name, err)

    async def _write_series(self, s: _Series) -> None:
        count, last = s.count, s.last
        path = f"/apis/events.k8s.io/v1/namespaces/{s.namespace}/events/{s.name}"
        patch = {"series": {"count": count, "lastObservedTime": micro_time(last)}}
        try:
            await self._call("event series", lambda: self._client.patch(
                path, patch, "strategic", events=True))
            s.written_count = max(s.written_count, count)
        except ApiError as err:
            # NotFound: the event expired (TTL) or was deleted; upstream creates it again,
            # we let the next distinct event say it.
            log.debug("event series %s/%s: %s", s.namespace, s.name, err)
            s.written_count = count

    def _spawn_status(self, path: str, patch: Json) -> None:
        """Send a status patch after the ones already decided for the same object.

        Upstream patches a pod's PodScheduled condition (updatePod) and a PodGroup's
        condition (updatePodGroupCondition) synchronously in the cycle that decided them,
        so one object's patches land in decision order. Here they are written in the
        background by up to `concurrency` writers, with retries: without a lane, a
        PodGroup's False (a first attempt, its patch slow or retried on a loaded API
        server) could land after the True of the attempt that bound the gang, and stay.
        A lane holds the object's next patches (not a writer) until its patch in flight
        is answered."""
        lane = self._lanes.get(path)
        if lane is not None:  # a patch of this object is queued or in flight
            lane.append(patch)
            return
        self._lanes[path] = collections.deque()
        self._spawn(self._status_lane(path, patch))

    async def _status_lane(self, path: str, patch: Json) -> None:
        try:
            await self._patch_status(path, patch)
        finally:
            lane = self._lanes.get(path)
            task = asyncio.current_task()
            if not lane or (task is not None and task.cancelling()):
                # Done, or the recorder is closing: what was not sent is dropped, as
                # close() drops the queued writes.
                self._lanes.pop(path, None)
            else:
                self._spawn(self._status_lane(path, lane.popleft()))

    async def _patch_status(self, path: str, patch: Json) -> None:
        try:
            await self._call("pod condition", lambda: self._client.patch(path, patch,
                                                                          "strategic"))
        except ApiError as err:
            if err.status != 404:  # a deleted pod needs no condition
                log.warning("patch %s: %s", path, err)

    def _ensure_flusher(self) -> None:
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.get_running_loop().create_task(self._flush_loop())

    async def _flush_loop(self) -> None:
        while self._series:
            await asyncio.sleep(self._series_flush)
            self.flush_series()

    def flush_series(self, final: bool = False) -> None:
        """Write series counts not yet written; drop series that have finished."""
        now = self._clock()
        for key, s in list(self._series.items()):
            if s.count > s.written_count and not self._budget.full:
                s.written_count = s.count
                self._spawn(self._write_series(s), event=True)
            if final or now - s.last >= SERIES_FINISH_SECONDS:
                del self._series[key]

    async def close(self, timeout: float = 5.0) -> None:
        """Write what is pending (within `timeout`), then stop."""
        if self._flusher is not None:
            self._flusher.cancel()
        self.flush_series(final=True)
        if self._workers:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._queue.join(), timeout)
            # In rounds: a write recorded while a writer is awaited here (a binding cycle
            # unwinding) starts a writer that this round did not cancel; awaited, it
            # would wait for the next write forever.
            while self._workers:
                workers, self._workers = self._workers, []
                for t in workers:
                    t.cancel()
                for t in workers:
                    with contextlib.suppress(asyncio.CancelledError):
                        await t
            while not self._queue.empty():  # not written in time: dropped
                coro, event = self._queue.get_nowait()
                coro.close()
                if event:
                    self._queued_events -= 1
                    self._budget.queued -= 1
                self._queue.task_done()
            self._lanes.clear()  # their heads were dropped above: nothing follows them
        # Likewise the series flusher: an event recorded while this closes starts a new
        # one (its first await of the old one saw it cancelled); awaited uncancelled, it
        # loops while its series live, six minutes (the hang issue 29's test_gangs[stop]
        # showed in a task dump: Engine.stop awaiting _flush_loop).
        while self._flusher is not None:
            flusher, self._flusher = self._flusher, None
            flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await flusher
