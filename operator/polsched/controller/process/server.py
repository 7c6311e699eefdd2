"""The one composition root of a scheduling process: `polsched run` (the operator) and
`polsched scheduler --policy NAME` (a Dedicated policy's Deployment) are built here, from
the same parts, each given to its constructor.

The parts: the Lease (renewed on a thread of its own, controller.process.leases.LeaseThread: on
the event loop, under load, the operator lost its lease), the Engine (its binds end by
the lease's renew deadline), the StatusWriter with its BindLedger (writes end there too)
and the PolicyReconciler. What differs between the two processes is data (ProcessConfig,
the reconciler's options), not wiring: before this module each wired the parts by setting
attributes after construction, and the Dedicated one kept renewing its Lease on the event
loop after the operator had stopped.

Leadership follows one rule in both: losing the lease stops binding and status writes at
once (before the next await), then tells the reconciler; gaining it waits until the cache
has synced (`synced()`), since leading means binding and writing counts from the cache,
and yields to any later change. A reconciler that fails to take the lead is retried
every second, and /healthz reports it once the grace has passed (controller.process.health).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from polsched.cluster.cache import ClusterCache
from polsched.cluster.client import ApiClient
from polsched.controller.policies.ledger import BindLedger
from polsched.controller.policies.reconciler import PolicyReconciler
from polsched.controller.policies.status import StatusWriter
from polsched.controller.process import credentials
from polsched.controller.process.health import Liveness
from polsched.controller.process.leases import LeaseThread, LeaseTiming
from polsched.scheduler.engine import Engine, EngineOptions

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Election:
    """The Lease that elects the one process that binds and writes status."""

    namespace: str
    name: str
    timing: LeaseTiming
    # Builds the lease thread's own client (an aiohttp session belongs to one loop).
    make_client: Callable[[], ApiClient]


@dataclass(frozen=True)
class ProcessConfig:
    identity: str
    # None: no election, this process leads from the start (a Dedicated scheduler run
    # with --leader-elect=false).
    election: Election | None
    status_interval: float
    engine: EngineOptions = EngineOptions()
    # How long leadership may go unapplied, or a watched task be down, before /healthz
    # fails (controller.process.health.Liveness).
    liveness_grace: float = 30.0


def lease_client(kubeconfig: str | None, client: ApiClient,
                 budget: Mapping[str, Any]) -> Callable[[], ApiClient]:
    """What builds the lease thread's client: its own, from the same credentials and with
    a request budget of its own (`budget`: credentials.budget, as kube-scheduler's
    leader-election client); an outage is reported once for the process (the main
    client's Outage)."""

    def make() -> ApiClient:
        own = credentials.api_client(kubeconfig, **budget)
        own.outage = client.outage
        return own

    return make


# Builds the reconciler of the process from the engine and the writer (the operator's
# with its Dedicated deployer, a Dedicated scheduler's restricted to its policy).
ReconcilerFactory = Callable[[Engine, StatusWriter], PolicyReconciler]


class Process:
    """The parts of one scheduling process, wired; the caller runs them (engine.start(),
    elector.run(), the policy watch) in the order its start-up wants."""

    def __init__(self, client: ApiClient, cache: ClusterCache, config: ProcessConfig,
                 reconciler: ReconcilerFactory) -> None:
        self.config = config
        election = config.election
        # What /healthz reports: the engine's loop, the watched tasks, the leadership.
        self.liveness = Liveness(grace=config.liveness_grace)
        self.elector: LeaseThread | None = None
        deadline = None
        if election is not None:
            self.elector = LeaseThread(
                election.make_client, namespace=election.namespace, name=election.name,
                identity=config.identity, on_change=self._on_leading,
                timing=election.timing)
            # Binds and status writes end by the lease's renew deadline (issue 11).
            deadline = self.elector.valid_until
        self.engine = Engine(client, identity=config.identity, cache=cache,
                             bind_deadline=deadline, options=config.engine)
        # Nobody binds before the lease says so (when there is one).
        self.engine.set_leader(None, election is None)
        # bindsTotal exact across SIGKILL and failover: counted against the API server.
        ledger = BindLedger(cache, on_change=self._touch, binder=self.engine.binder)
        self.writer = StatusWriter(client, self.engine.stats,
                                   interval=config.status_interval,
                                   enabled=election is None, deadline=deadline, ledger=ledger)
        self.reconciler = reconciler(self.engine, self.writer)
        # Policy events come from the process that writes the policies' status.
        self.reconciler.events.enabled = election is None
        self._synced = asyncio.Event()
        self._turns = 0  # leadership changes so far: a deferred gain yields to a later one
        self._tasks: set[asyncio.Task[Any]] = set()

    def _touch(self, scheduler_name: str) -> None:
        self.writer.touch_scheduler(scheduler_name)

    def synced(self) -> None:
        """The engine has started (its cache synced): a lease gained may be acted on."""
        self._synced.set()

    def _on_leading(self, leading: bool) -> None:
        self._turns += 1
        if not leading:  # stop binding now, not after the next await
            self.engine.set_leader(None, False)
            self.writer.set_enabled(False)
            self.liveness.elected(False)
        t = asyncio.get_running_loop().create_task(self._lead(leading, self._turns))
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    async def _lead(self, leading: bool, turn: int) -> None:
        if leading:
            await self._synced.wait()
            if turn != self._turns:
                return
            self.liveness.elected(True)  # from now on, leading is due within the grace
        while True:
            try:
                await self.reconciler.set_leading(leading)
            except Exception:
                # Not leading while holding the lease binds nothing: try again, and
                # /healthz reports it once the grace has passed (controller.process.health).
                log.exception("applying leadership=%s failed; retrying", leading)
                await asyncio.sleep(1.0)
                if turn != self._turns:
                    return
                continue
            self.liveness.applied(leading)
            return

    async def close_leadership(self) -> None:
        """Cancel the leadership changes still under way (at shutdown)."""
        for t in list(self._tasks):
            t.cancel()
        for t in list(self._tasks):
            try:
                await t
            except (asyncio.CancelledError, Exception):  # noqa: PERF203
                pass
