"""Leader election on a coordination.k8s.io/v1 Lease, as client-go's leaderelection.

One holder at a time: the holder renews spec.renewTime every `renew_period`; another
candidate takes over only when it has seen the same record unchanged for
leaseDurationSeconds (measured on its own monotonic clock, as client-go's observedTime,
so clock skew between machines does not matter), or when the holder released it (empty
holderIdentity). Every write is a PUT carrying the resourceVersion it read, so two
candidates racing for an expired lease cannot both win: the API server answers the
loser with 409 Conflict. A holder that cannot renew within `renew_deadline` steps down
before its lease can expire, so two holders never overlap: every call of a round is cut
at the renew deadline (a renew that hangs cannot keep a holder leading), and
`valid_until()` gives the same bound to the calls made under the lease (binds, status
writes). The deadline counts from when the last successful renew was *sent*: another
candidate can only have seen that renewTime after it was written, so its expiry clock
starts later than ours.

Used by `polsched run` (one Lease for the operator, on a thread of its own: LeaseThread)
and by Dedicated schedulers (one Lease per policy). A candidate whose identity is already
the holder (a restarted process with a stable identity) takes the lease back at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from polsched.cluster.client import ApiClient, ApiError, is_unreachable
from polsched.controller.process.options import LEASE_DURATION_SECONDS, RENEW_PERIOD_SECONDS
from polsched.objects import Json
from polsched.scheduler import metrics

log = logging.getLogger(__name__)

# The longest another holder's lease is honoured, in multiples of our own duration.
OBSERVED_DURATION_FACTOR = 2




@dataclass(frozen=True)
class LeaseTiming:
    """How long a lease is held (leaseDurationSeconds), how often the holder renews it,
    and how long a holder that cannot renew keeps acting (client-go's RenewDeadline;
    None: 2/3 of the duration, client-go's default ratio)."""

    duration: int = LEASE_DURATION_SECONDS
    renew_period: float = RENEW_PERIOD_SECONDS
    renew_deadline: float | None = None


def micro_time(now: datetime | None = None) -> str:
    """metav1.MicroTime as the API server writes it."""
    return (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def lease_path(namespace: str, name: str = "") -> str:
    base = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
    return f"{base}/{name}" if name else base


class LeaseElector:
    """Campaign for a Lease; `on_change(leading)` is called on every transition."""

    def __init__(self, client: ApiClient, *, namespace: str, name: str, identity: str,
                 on_change: Callable[[bool], None] | None = None,
                 timing: LeaseTiming = LeaseTiming()) -> None:
        self.client = client
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration = timing.duration
        self.renew_period = timing.renew_period
        # client-go's defaults keep RenewDeadline at 2/3 of LeaseDuration.
        self.renew_deadline = timing.renew_deadline or timing.duration * 2 / 3
        self._on_change = on_change
        self.leading = False
        # The record as last seen and when (monotonic) it last changed.
        self._observed: tuple[str, str, str] | None = None
        self._observed_at = 0.0
        self._last_renew = 0.0  # monotonic time the last successful write was sent
        self._sent = 0.0  # monotonic time the write under way was sent
        self._stopped = asyncio.Event()
        metrics.leader(name, False)  # a backup until it acquires the lease

    def valid_until(self) -> float:
        """Monotonic time until which calls made under the lease may run: the renew
        deadline of the last successful renew while leading, else 0 (already passed)."""
        if not self.leading:
            return 0.0
        return self._last_renew + self.renew_deadline

    # -- the loop -------------------------------------------------------------------------
    async def run(self) -> None:
        """Campaign and renew until stop(); then release the lease if held."""
        try:
            while not self._stopped.is_set():
                # A holder's round ends at its renew deadline, whatever the network does;
                # a candidate's round is bounded the same way so that it campaigns again.
                budget = (self.valid_until() - time.monotonic()) if self.leading \
                    else self.renew_deadline
                try:
                    if budget <= 0:
                        raise TimeoutError("the renew deadline passed")
                    ok = await asyncio.wait_for(self.try_acquire_or_renew(), budget)
                except asyncio.CancelledError:
                    raise
                except TimeoutError:
                    # During an outage ApiClient.outage has said so; stepping down is
                    # logged below.
                    log.log(logging.DEBUG if self.client.outage.down else logging.WARNING,
                            "lease %s/%s: not renewed within the renew deadline (%.1fs)",
                            self.namespace, self.name, self.renew_deadline)
                    ok = self.leading and time.monotonic() < self.valid_until()
                except Exception as e:  # network trouble: keep the lease until the deadline
                    hint = ""
                    if getattr(e, "status", None) == 404 and "namespaces" in str(e):
                        # Nothing is scheduled until the Lease can be taken: say how to fix it.
                        hint = (f"; create the namespace (kubectl create namespace "
                                f"{self.namespace}) or pass --namespace")
                    if is_unreachable(e):  # an outage: ApiClient.outage says so once
                        log.debug("lease %s/%s: %r", self.namespace, self.name, e)
                    else:
                        log.warning("lease %s/%s: %s%s", self.namespace, self.name, e, hint)
                    ok = self.leading and time.monotonic() < self.valid_until()
                self._set_leading(ok)
                pause = self.renew_period
                if self.leading:  # wake up in time to step down at the deadline
                    pause = max(min(pause, self.valid_until() - time.monotonic()), 0.0)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopped.wait(), pause)
        finally:
            if self.leading:
                with contextlib.suppress(Exception):
                    await asyncio.shield(self.release())
            self._set_leading(False)

    def stop(self) -> None:
        self._stopped.set()

    def _set_leading(self, leading: bool) -> None:
        if leading == self.leading:
            return
        self.leading = leading
        metrics.leader(self.name, leading)
        log.info("lease %s/%s: %s %s", self.namespace, self.name, self.identity,
                 "acquired leadership" if leading else "is not the leader")
        if self._on_change is not None:
            self._on_change(leading)

    # -- one round --------------------------------------------------------------------------
    async def try_acquire_or_renew(self) -> bool:
        """One round of client-go's tryAcquireOrRenew. True: we hold the lease now."""
        now_mono = time.monotonic()
        try:
            lease = await self.client.get(lease_path(self.namespace, self.name))
        except ApiError as e:
            if e.status != 404:
                raise
            return await self._create()
        spec: Json = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        record = (holder, str(spec.get("renewTime") or ""),
                  str(spec.get("leaseDurationSeconds") or ""))
        if record != self._observed:
            self._observed = record
            self._observed_at = now_mono
        duration = self.observed_duration(spec.get("leaseDurationSeconds"))
        if holder and holder != self.identity and now_mono - self._observed_at < duration:
            return False  # someone else holds a lease that has not expired
        new_spec: Json = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.lease_duration,
            "renewTime": micro_time(),
            "acquireTime": (spec.get("acquireTime") or micro_time()) if holder == self.identity
            else micro_time(),
            "leaseTransitions": int(spec.get("leaseTransitions") or 0)
            + (0 if holder == self.identity else 1),
        }
        body = {**lease, "spec": new_spec}
        self._sent = time.monotonic()
        try:
            updated = await self.client.put(lease_path(self.namespace, self.name), body)
        except ApiError as e:
            if e.status == 409:  # someone wrote in between: read again next round
                return False
            raise
        self._remember(updated)
        return True

    def observed_duration(self, raw: object) -> float:
        """Another holder's leaseDurationSeconds, capped at OBSERVED_DURATION_FACTOR times
        ours: whoever may write the Lease (a Dedicated scheduler's token could, before
        its role lost the operator's Lease) would otherwise park every candidate for
        decades with 2147483647. The cap is safe: a holder that stops renewing steps
        down at 2/3 of its own duration, so candidates wait long enough for any peer
        whose duration is up to 3 times ours (peers of one Deployment share theirs)."""
        try:
            observed = float(raw) if isinstance(raw, int | float | str) and raw else 0.0
        except ValueError:
            observed = 0.0
        if not observed > 0:
            return float(self.lease_duration)
        return min(observed, OBSERVED_DURATION_FACTOR * float(self.lease_duration))

    async def _create(self) -> bool:
        now = micro_time()
        body = {
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {"holderIdentity": self.identity,
                     "leaseDurationSeconds": self.lease_duration,
                     "acquireTime": now, "renewTime": now, "leaseTransitions": 0},
        }
        self._sent = time.monotonic()
        try:
            created = await self.client.post(lease_path(self.namespace), body)
        except ApiError as e:
            if e.status == 409:  # created by another candidate first
                return False
            raise
        self._remember(created)
        return True

    def _remember(self, lease: Json) -> None:
        spec = lease.get("spec") or {}
        self._observed = (str(spec.get("holderIdentity") or ""), str(spec.get("renewTime") or ""),
                          str(spec.get("leaseDurationSeconds") or ""))
        self._observed_at = time.monotonic()
        self._last_renew = self._sent

    async def release(self) -> None:
        """Give the lease up (client-go's ReleaseOnCancel): the next candidate need not
        wait for it to expire."""
        try:
            lease = await self.client.get(lease_path(self.namespace, self.name))
        except ApiError:
            return
        spec = lease.get("spec") or {}
        if spec.get("holderIdentity") != self.identity:
            return
        body = {**lease, "spec": {**spec, "holderIdentity": "", "leaseDurationSeconds": 1,
                                  "renewTime": micro_time()}}
        with contextlib.suppress(ApiError):
            await self.client.put(lease_path(self.namespace, self.name), body)


class LeaseThread:
    """A LeaseElector on a thread of its own, with its own event loop and API client, as
    client-go runs leader election in a goroutine of its own: a renewal never waits for
    the caller's event loop. The operator's loop, with 50 policies under load, let 6-7.5 s
    pass between two renewals (watch events, decisions and bind answers came first) and
    lost the lease at the 10 s renew deadline; each loss dropped the queued binds and
    decided those pods again (bench/NOTES.md "many-policies, third pass"). A thread gets
    the GIL back within the interpreter's switch interval (5 ms) however busy the loop is.

    The arguments of LeaseElector, but `make_client` builds the thread's ApiClient (an
    aiohttp session belongs to one loop). `valid_until()` may be read from any thread
    (binds and status writes are cut there, as with LeaseElector: leadership lost stops
    them at once, before `on_change(False)` reaches the caller); `on_change(leading)`
    runs on the loop that awaits run(), in order."""

    def __init__(self, make_client: Callable[[], ApiClient], *, namespace: str, name: str,
                 identity: str, on_change: Callable[[bool], None] | None = None,
                 timing: LeaseTiming = LeaseTiming()) -> None:
        self._make_client = make_client
        self._on_change = on_change
        self._lease = (namespace, name, identity)
        self._timing = timing
        self._elector: LeaseElector | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # the thread's
        self._stop = threading.Event()

    @property
    def leading(self) -> bool:
        e = self._elector
        return e is not None and e.leading

    def valid_until(self) -> float:
        """As LeaseElector.valid_until (monotonic, from any thread)."""
        e = self._elector
        return e.valid_until() if e is not None else 0.0

    async def run(self) -> None:
        """Campaign and renew on the thread until stop(); return once it has released the
        lease (if held) and ended. Cancelling stops it too."""
        caller = asyncio.get_running_loop()
        done: asyncio.Future[None] = caller.create_future()

        def deliver(leading: bool) -> None:
            if self._on_change is not None:
                with contextlib.suppress(RuntimeError):  # the caller's loop has closed
                    caller.call_soon_threadsafe(self._on_change, leading)

        def finished(error: BaseException | None) -> None:
            if done.done():
                return
            if error is None:
                done.set_result(None)
            else:
                done.set_exception(error)

        def main() -> None:
            error: BaseException | None = None
            try:
                asyncio.run(self._campaign(deliver))
            except BaseException as e:  # handed to run()'s caller
                error = e
            with contextlib.suppress(RuntimeError):
                caller.call_soon_threadsafe(finished, error)

        threading.Thread(target=main, name="polsched-lease", daemon=True).start()
        try:
            await asyncio.shield(done)
        except asyncio.CancelledError:
            self.stop()
            raise

    async def _campaign(self, deliver: Callable[[bool], None]) -> None:
        client = self._make_client()
        try:
            namespace, name, identity = self._lease
            elector = LeaseElector(client, namespace=namespace, name=name, identity=identity,
                                   on_change=deliver, timing=self._timing)
            self._elector = elector
            self._loop = asyncio.get_running_loop()
            if self._stop.is_set():
                elector.stop()
            await elector.run()
        finally:
            await client.close()

    def stop(self) -> None:
        """Stop campaigning (from any thread); the lease is released if held."""
        self._stop.set()
        loop, elector = self._loop, self._elector
        if loop is not None and elector is not None:
            with contextlib.suppress(RuntimeError):  # the thread's loop has ended
                loop.call_soon_threadsafe(elector.stop)
