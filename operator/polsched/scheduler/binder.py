"""Binder: the binding cycle, run in the background.

As kube-scheduler's bindingCycle (schedule_one.go) the scheduling loop assumes the pod and
moves on; the bind runs in the background, at most `concurrency` at a time per scheduler
(each policy has its own lane, so one policy's slow binds never delay another's).
DefaultBinder (pkg/scheduler/framework/plugins/defaultbinder) posts a v1 Binding to
pods/binding; an extender with a bindVerb that is interested in the pod binds instead
(extendersBinding: the first such extender; one that fails and is ignorable is skipped,
and the default binder binds when none did).

The outcome goes back to the scheduler through a callback, which forgets the assumed pod
and requeues it when the bind failed. A 409 Conflict means the pod is already bound
(someone else won, or our own earlier bind went through): it is never bound twice.

An extender's bind is only its word: a pod it claims to have bound is reported BOUND once
the watch shows it on that node, and when the watch has not within
`extender_bind_confirm_seconds` (an extender that answers without binding, or binds
elsewhere) the bind is reported FAILED, so that the pod is forgotten from the cache every
policy shares (its capacity is no longer held), requeued, and its failure reported, rather
than assumed forever.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence

import aiohttp

from polsched.cluster.client import ApiClient, ApiError
from polsched.framework.interfaces import BindingExtender, ExtenderError
from polsched.framework.types import PodInfo
from polsched.objects import Json
from polsched.scheduler.writers import wants_writer

log = logging.getLogger(__name__)


class BindOutcome(enum.Enum):
    BOUND = "Bound"
    # 409: already assigned to a node, or the name now belongs to another pod (UID).
    CONFLICT = "Conflict"
    # 404: the pod is gone.
    GONE = "Gone"
    FAILED = "Failed"
    # Never sent: leadership was lost (or the lease's renew deadline passed) while the
    # bind was queued. The pod goes back to its queue untouched; the next leader binds it.
    DROPPED = "Dropped"


BindCallback = Callable[[BindOutcome, str], None]
# pod, node, callback, binding extenders, annotations
_BindJob = tuple[PodInfo, str, BindCallback, list[BindingExtender], Mapping[str, str] | None]


def binding(pod: PodInfo, node_name: str,
            annotations: Mapping[str, str] | None = None) -> Json:
    """The v1 Binding DefaultBinder posts; the UID makes a recreated pod refuse it.
    `annotations` end up on the pod: the API server merges a Binding's annotations into
    the pod's (pkg/registry/core/pod/storage setPodNodeAndMetadata)."""
    meta: Json = {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid}
    if annotations:
        meta["annotations"] = dict(annotations)
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": meta,
        "target": {"apiVersion": "v1", "kind": "Node", "name": node_name},
    }


_quote = json.encoder.encode_basestring_ascii


def encode_binding(pod: PodInfo, node_name: str,
                   annotations: Mapping[str, str] | None = None) -> bytes:
    """`binding` as the bytes posted: what json.dumps(..., separators=(",", ":")) makes
    of it, joined from quoted strings (one per bound pod)."""
    if annotations:
        return json.dumps(binding(pod, node_name, annotations),
                          separators=(",", ":")).encode()
    q = _quote
    return "".join((
        '{"apiVersion":"v1","kind":"Binding","metadata":{"name":', q(pod.name),
        ',"namespace":', q(pod.namespace), ',"uid":', q(pod.uid),
        '},"target":{"apiVersion":"v1","kind":"Node","name":', q(node_name), "}}",
    )).encode("ascii")


def binding_extenders(extenders: Sequence[object], pod: PodInfo) -> list[BindingExtender]:
    """The extenders that would bind `pod`, in order (extendersBinding tries them in turn
    while they fail and are ignorable)."""
    return [ext for ext in extenders
            if isinstance(ext, BindingExtender) and ext.is_binder() and ext.is_interested(pod)]


# A call under the lease must end before the lease can pass to another holder.
Deadline = Callable[[], float | None]
# Upper bound of one bind when nothing tighter applies (ApiClient's request default).
BIND_TIMEOUT = 60.0
# A bind with less time than this before the lease's deadline is not sent: it could not
# complete under the lease (and a timer that fires a hair early must not let one through).
MIN_BIND_TIME = 0.5
# How long a bind that ended without an answer counts as possibly done (the API server's
# own request timeout is 60 s).
UNCERTAIN_SECONDS = 60.0
# A bind sent this long ago with no answer yet is logged (once), and so is one answered
# after longer: on a healthy API server a Binding is answered in well under a second.
SLOW_BIND_SECONDS = 5.0
# How long the watch has to show a pod an extender claims to have bound (Binder's
# extender_bind_confirm_seconds): a watch event follows a bind within well under a second.
EXTENDER_BIND_CONFIRM_SECONDS = 5.0
# How often the claimed binds waiting for the watch are looked at (only while any wait).
_CONFIRM_POLL_SECONDS = 0.05


class _Claim:
    """A bind an extender answered, waiting for the watch to show it."""

    __slots__ = ("done", "extender", "node", "pod", "until")

    def __init__(self, pod: PodInfo, node: str, done: BindCallback, extender: str,
                 until: float) -> None:
        self.pod, self.node, self.done, self.extender, self.until = (
            pod, node, done, extender, until)


class _Lane:
    """One scheduler's binds: its own queue and writers, so that one policy's slow
    extender or failing writes never hold another policy's binds (issue 11).

    The queue hands out the highest pod priority first, in arrival order within a
    priority. kube-scheduler starts each binding cycle at once (a goroutine per pod);
    here binds queue behind `concurrency` writers, and a preemptor, whose victims are
    already gone, waited behind every measured pod decided before it (the preemption
    workload's preemptor latency). Which node each pod gets is decided before the queue:
    the order only changes which Binding is posted first."""

    def __init__(self, name: str) -> None:
        self.name = name
        # (-priority, arrival, job)
        self.queue: asyncio.PriorityQueue[tuple[int, int, _BindJob]] = asyncio.PriorityQueue()
        self.seq = 0
        self.workers: list[asyncio.Task[None]] = []
        self.idle = 0  # workers waiting for a bind
        self.pending = 0  # queued or being written
        # Binds taken from the queue that wait for a slot (Binder._posts): not sent yet, so
        # drop_queued drops them too.
        self.waiting: set[_Waiting] = set()


class _Waiting:
    __slots__ = ("job", "dropped")

    def __init__(self, job: _BindJob) -> None:
        self.job = job
        self.dropped = False


class Binder:
    """Per scheduler (a lane), up to `concurrency` writer coroutines drain a queue of
    binds: no task, semaphore and done-callback per pod (that plumbing was a visible share
    of the scheduler's CPU per pod). A lane starts a writer when a bind finds every writer
    busy, in its event loop, and keeps it.

    kube-scheduler starts every binding cycle at once (a goroutine each). Here a bind
    waits for a writer only when `concurrency` binds are already in flight: with 32, a
    150 pods/s stream on a loaded API server (a bind answered in 0.3-0.6 s) held binds
    in the queue for 120-250 ms at p50 (bench/NOTES.md, issue 15 third pass).

    `deadline()`, when set, is the monotonic time by which every bind must have ended
    (the lease's renew deadline): a bind is sent with a timeout that ends there, and a
    bind still queued when it has passed is dropped, never sent."""

    def __init__(self, client: ApiClient, *, concurrency: int = 96,
                 deadline: Deadline | None = None,
                 watched: Mapping[str, PodInfo] | None = None,
                 extender_bind_confirm_seconds: float = EXTENDER_BIND_CONFIRM_SECONDS,
                 ) -> None:
        self._client = client
        # The pods as the watch shows them (the cache's), by key: where an extender's
        # claimed bind is confirmed. None: claims are taken as answered (no cache).
        self._watched = watched
        self._confirm_seconds = extender_bind_confirm_seconds
        # Pod key -> the claimed bind waiting for the watch, looked at by _confirm_claims.
        self._claims: dict[str, _Claim] = {}
        self._claims_task: asyncio.Task[None] | None = None
        self._concurrency = max(concurrency, 1)
        self._lanes: dict[str, _Lane] = {}
        # Bindings posted to the API server, all lanes together: `concurrency` at a time,
        # as with one policy. Per lane, 50 policies had 1600 binds waiting for the
        # client's connections, and the lease renewal queued behind them (issue 15).
        # Extender binds are not counted: a hanging extender holds its own lane only.
        self._posts = asyncio.Semaphore(self._concurrency)
        self.deadline = deadline
        # The timeouts of the binds in flight, cut by the watchdog when the deadline
        # passes (a renewal moves the deadline on, so a fixed timeout would be wrong).
        self._in_flight: set[asyncio.Timeout] = set()
        # Pod key -> when a bind that was sent ended without an answer (timeout, cut at
        # the deadline, connection lost): it may have happened all the same. The bind
        # ledger (controller.policies.ledger) waits for these before it settles a second.
        self.uncertain: dict[str, float] = {}
        self._watchdog: asyncio.Task[None] | None = None
        # Pod key -> (monotonic time sent, node) of the binds sent and not answered yet,
        # looked at every second by `_watch_slow` (no timer per bind).
        self._sent: dict[str, tuple[float, str]] = {}
        self._slow_reported: set[str] = set()
        self._slow_watch: asyncio.Task[None] | None = None

    @property
    def in_flight(self) -> int:
        return sum(lane.pending for lane in self._lanes.values())

    def writers(self, lane: str) -> int:
        """How many writers `lane` runs now (it starts one when a bind finds every writer
        busy, up to `concurrency`)."""
        got = self._lanes.get(lane)
        return len(got.workers) if got is not None else 0

    @property
    def saturated(self) -> bool:
        """Every one of the `concurrency` slots for Bindings is taken."""
        return self._posts.locked()

    def bind(self, pod: PodInfo, node_name: str, done: BindCallback,
             extenders: Sequence[object] = (),
             annotations: Mapping[str, str] | None = None, *, lane: str = "") -> None:
        """Start binding `pod` to `node_name` in `lane` (the scheduler's name);
        `done(outcome, message)` is called after. `annotations` ride on the Binding (not on
        an extender's bind)."""
        got = self._lanes.get(lane)
        if got is None:
            got = self._lanes[lane] = _Lane(lane)
        if self.deadline is not None and self._watchdog is None:
            self._watchdog = asyncio.get_running_loop().create_task(
                self._watch_deadline(), name="polsched-binder-deadline")
        if self._slow_watch is None:
            self._slow_watch = asyncio.get_running_loop().create_task(
                self._watch_slow(), name="polsched-binder-slow")
        got.pending += 1
        got.seq += 1
        got.queue.put_nowait((-pod.priority, got.seq, (
            pod, node_name, done, binding_extenders(extenders, pod), annotations)))
        self._grow(got)

    def _grow(self, lane: _Lane) -> None:
        """One more writer when every one is busy (the queue holds the binds no idle writer
        has taken yet), up to `concurrency`, as polsched.scheduler.writers says: the slots
        are `_posts`, and a writer that gets one grows its lane then."""
        if wants_writer(lane.queue.qsize(), lane.idle, len(lane.workers), self._concurrency,
                        self._posts):
            lane.workers.append(asyncio.get_running_loop().create_task(
                self._work(lane), name=f"polsched-binder-{lane.name}-{len(lane.workers)}"))

    def drop_queued(self, lane: str | None = None) -> int:
        """Leadership was lost: take every bind not yet sent out of the queue (of `lane`,
        or of all lanes) and report it DROPPED. Synchronous, so nothing else runs first.
        Returns how many were dropped."""
        lanes = list(self._lanes.values()) if lane is None else \
            [x for x in (self._lanes.get(lane),) if x is not None]
        dropped: list[_BindJob] = []
        for got in lanes:
            while True:
                try:
                    _prio, _seq, job = got.queue.get_nowait()
                except asyncio.QueueEmpty:
                    break
                got.queue.task_done()
                got.pending -= 1
                dropped.append(job)
            for waiting in got.waiting:  # their workers see `dropped` and send nothing
                waiting.dropped = True
                dropped.append(waiting.job)
            got.waiting.clear()
        for pod, _node, done, _ext, _ann in dropped:
            _call(done, pod, BindOutcome.DROPPED, "leadership lost before the bind was sent")
        return len(dropped)

    def uncertain_keys(self) -> set[str]:
        """Pods whose last bind may have happened without our hearing of it (forgotten
        after UNCERTAIN_SECONDS: by then its watch event has long arrived)."""
        now = time.monotonic()
        for key, at in list(self.uncertain.items()):
            if now - at > UNCERTAIN_SECONDS:
                del self.uncertain[key]
        return set(self.uncertain)

    def _may_send(self) -> bool:
        """False when the lease's deadline is (nearly) over: the bind is not sent."""
        until = self.deadline() if self.deadline is not None else None
        return until is None or until - time.monotonic() >= MIN_BIND_TIME

    async def _watch_deadline(self) -> None:
        """Cut the binds in flight when the deadline passes. asyncio's loop clock is
        time.monotonic, the clock of the deadline."""
        loop = asyncio.get_running_loop()
        while True:
            until = self.deadline() if self.deadline is not None else None
            now = time.monotonic()
            if until is None:
                await asyncio.sleep(1.0)
            elif now >= until:
                for cm in list(self._in_flight):
                    cm.reschedule(loop.time())
                await asyncio.sleep(0.1)
            else:
                await asyncio.sleep(until - now)

    async def _watch_slow(self) -> None:
        """Log, once per bind, a bind sent SLOW_BIND_SECONDS ago that has no answer yet
        (the API server, the connection or the extender holds it; its pod stays assumed
        and, for a gang, the group's other members may be bound meanwhile)."""
        while True:
            await asyncio.sleep(1.0)
            now = time.monotonic()
            for key, (sent, node) in list(self._sent.items()):
                if now - sent >= SLOW_BIND_SECONDS and key not in self._slow_reported:
                    self._slow_reported.add(key)
                    log.warning("bind of %s to %s sent %.1fs ago has no answer yet "
                                "(%d binds in flight)", key, node, now - sent, len(self._sent))

    async def _work(self, lane: _Lane) -> None:
        queue = lane.queue
        while True:
            lane.idle += 1
            try:
                _prio, _seq, job = await queue.get()
            finally:
                lane.idle -= 1
            try:
                await self._bind(lane, job)
            finally:
                lane.pending -= 1
                queue.task_done()

    async def _bind(self, lane: _Lane, job: _BindJob) -> None:
        if job[3]:  # extenders: not counted in _posts
            await self._send(*job, tenant=lane.name)
            return
        waiting = _Waiting(job)
        lane.waiting.add(waiting)
        try:
            async with self._posts:
                if waiting.dropped:  # drop_queued reported it
                    return
                lane.waiting.discard(waiting)
                self._grow(lane)
                await self._send(*job, tenant=lane.name)
        finally:
            lane.waiting.discard(waiting)

    async def _send(self, pod: PodInfo, node_name: str, done: BindCallback,
                    extenders: Sequence[BindingExtender],
                    annotations: Mapping[str, str] | None = None, *,
                    tenant: str = "") -> None:
        """Bind; `tenant`: the lane (the policy), whose share of the client's request
        budget the Binding takes (cluster.client.FairTokens)."""
        if not self._may_send():
            _call(done, pod, BindOutcome.DROPPED, "the lease's renew deadline passed")
            return
        outcome, message = BindOutcome.BOUND, ""
        claimed_by = ""  # the extender that answered the bind
        sent = time.monotonic()
        self._sent[pod.key] = (sent, node_name)
        try:
            # The deadline cuts the whole bind, extender and Binding alike.
            async with asyncio.timeout(BIND_TIMEOUT) as cm:
                self._in_flight.add(cm)
                try:
                    bound = False
                    # extendersBinding (schedule_one.go): the first interested binder extender
                    # binds; one that fails and is ignorable is skipped, and when none bound
                    # the default binder posts the Binding.
                    for extender in extenders:
                        try:
                            await extender.bind(pod, node_name)
                        except (ExtenderError, aiohttp.ClientError, TimeoutError) as err:
                            if not _ignorable(extender):
                                raise
                            log.info("skipping extender in bind for %s as it returned error and "
                                     "has ignorable flag set: %s", pod.key,
                                     str(err) or type(err).__name__)
                            continue
                        bound = True
                        claimed_by = str(getattr(extender, "name", "") or "extender")
                        break
                    if not bound:
                        await self._client.send(
                            "POST",
                            f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/binding",
                            encode_binding(pod, node_name, annotations), timeout=BIND_TIMEOUT,
                            tenant=f"bind:{tenant}")
                finally:
                    self._in_flight.discard(cm)
        except ApiError as err:
            message = err.message or str(err)
            if err.status == 409:
                outcome = BindOutcome.CONFLICT
            elif err.status == 404:
                outcome = BindOutcome.GONE
            else:
                outcome = BindOutcome.FAILED
                if err.status >= 500:  # a server error (504: timed out) may come after the write
                    self.uncertain[pod.key] = time.monotonic()
        except (ExtenderError, aiohttp.ClientError, TimeoutError) as err:
            outcome, message = BindOutcome.FAILED, str(err) or type(err).__name__
            if isinstance(err, TimeoutError) or (
                    isinstance(err, aiohttp.ClientError)
                    and not isinstance(err, aiohttp.ClientConnectorError)):
                self.uncertain[pod.key] = time.monotonic()
        except Exception as err:  # a bug here must not leave the pod assumed forever
            log.exception("binding %s failed", pod.key)
            outcome, message = BindOutcome.FAILED, str(err) or type(err).__name__
        finally:
            self._sent.pop(pod.key, None)
        took = time.monotonic() - sent
        if pod.key in self._slow_reported:
            self._slow_reported.discard(pod.key)
            log.warning("bind of %s to %s answered after %.1fs: %s %s", pod.key, node_name,
                        took, outcome.value, message)
        elif log.isEnabledFor(logging.DEBUG):
            log.debug("bind of %s to %s: %s in %.3fs %s", pod.key, node_name, outcome.value,
                      took, message)
        if claimed_by and outcome is BindOutcome.BOUND and self._watched is not None:
            self._claim(_Claim(pod, node_name, done, claimed_by,
                               time.monotonic() + self._confirm_seconds))
            return
        _call(done, pod, outcome, message)

    # -- extender binds: confirmed by the watch ------------------------------------------
    def _claim(self, claim: _Claim) -> None:
        if self._settle(claim, time.monotonic()):
            return
        self._claims[claim.pod.key] = claim
        if self._claims_task is None or self._claims_task.done():
            self._claims_task = asyncio.get_running_loop().create_task(
                self._confirm_claims(), name="polsched-binder-claims")

    def _settle(self, claim: _Claim, now: float) -> bool:
        """Report `claim` when the watch has decided it, or its time is up; False while
        it still waits."""
        assert self._watched is not None
        pod = claim.pod
        current = self._watched.get(pod.key)
        if current is not None and current.uid == pod.uid and current.node_name:
            if current.node_name == claim.node:
                _call(claim.done, pod, BindOutcome.BOUND, "")
            else:
                log.warning("extender %s claimed the bind of %s to %s, but the watch shows "
                            "it on %s", claim.extender, pod.key, claim.node,
                            current.node_name)
                _call(claim.done, pod, BindOutcome.CONFLICT,
                      f"bound to node {current.node_name!r}, not to {claim.node!r} as the "
                      f"extender {claim.extender} said")
            return True
        if current is None or current.uid != pod.uid:
            _call(claim.done, pod, BindOutcome.GONE, "the pod was deleted")
            return True
        if now < claim.until:
            return False
        message = (f"extender {claim.extender} answered the bind of pod {pod.key} to node "
                   f"{claim.node}, but the pod was not seen bound within "
                   f"{self._confirm_seconds:g}s; the pod is retried")
        log.warning("%s", message)
        # It may yet happen (a late bind, a slow watch): the ledger waits for it.
        self.uncertain[pod.key] = time.monotonic()
        _call(claim.done, pod, BindOutcome.FAILED, message)
        return True

    async def _confirm_claims(self) -> None:
        """Look at the claimed binds until none waits (a poll, not a timer per bind)."""
        claims = self._claims
        while claims:
            await asyncio.sleep(_CONFIRM_POLL_SECONDS)
            now = time.monotonic()
            for key, claim in list(claims.items()):
                if self._settle(claim, now):
                    del claims[key]

    async def close(self, timeout: float = 10.0) -> None:
        """Let binds queued or in flight finish (within `timeout`), then stop the
        writers."""
        lanes = list(self._lanes.values())
        if self._claims_task is not None:
            self._claims_task.cancel()
            self._claims_task = None
        if self._slow_watch is not None:
            self._slow_watch.cancel()
            self._slow_watch = None
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        if any(lane.pending for lane in lanes):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    asyncio.gather(*(lane.queue.join() for lane in lanes)), timeout)
        for lane in lanes:
            for t in lane.workers:
                t.cancel()
        for lane in lanes:
            for t in lane.workers:
                with contextlib.suppress(asyncio.CancelledError):
                    await t
            lane.workers = []


def _ignorable(extender: BindingExtender) -> bool:
    return bool(getattr(extender, "ignorable", False))


def _call(done: BindCallback, pod: PodInfo, outcome: BindOutcome, message: str) -> None:
    try:
        done(outcome, message)
    except Exception:
        log.exception("bind callback for %s failed", pod.key)
