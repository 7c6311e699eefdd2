"""The one composition root and the one lifecycle of a scheduling process: `polsched run`
(the operator) and `polsched scheduler --policy NAME` (a Dedicated policy's Deployment)
are built here, from the same parts, each given to its constructor, and run and closed
by the same Process.run() and Process.close() (as kube-scheduler's
cmd/kube-scheduler/app/server.go Setup and Run serve every profile).

The parts: the Lease (renewed on a thread of its own, controller.process.leases
.LeaseThread: on the event loop, under load, the operator lost its lease), the Engine
(its binds end by the lease's renew deadline), the StatusWriter with its BindLedger
(writes end there too), the PolicyReconciler, the policy watch and the probes. What
differs between the two processes is data (ProcessConfig, the reconciler's options, what
runs until the process stops, what the Lease waits for), not wiring: each once wired the
parts and wrote out the start-up and the shutdown itself, and the two drifted apart (the
Dedicated one kept renewing its Lease on the event loop after the operator had stopped).

Leadership follows one rule in both: losing the lease stops binding and status writes at
once (before the next await), then tells the reconciler; gaining it waits until the cache
has synced (`synced()`), since leading means binding and writing counts from the cache,
and yields to any later change. A reconciler that fails to take the lead is retried
every second, and /healthz reports it once the grace has passed (controller.process
.health).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import logging
import os
import signal
import socket
import uuid
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import yaml

from polsched.api.admission import AdmissionRules, DestinationPolicy, parse_networks
from polsched.api.tenancy import PROTECTED_PLUGINS, Tenancy, TenancyError, parse_tenancy
from polsched.cluster.cache import ClusterCache
from polsched.cluster.client import ApiClient
from polsched.controller.policies.ledger import BindLedger
from polsched.controller.policies.reconciler import PolicyReconciler
from polsched.controller.policies.status import StatusWriter
from polsched.controller.policies.watch import watch_policies
from polsched.controller.process import credentials, gcpolicy, secure_metrics
from polsched.controller.process.endpoints import Endpoints, probes_for, serve_metrics
from polsched.controller.process.health import Liveness
from polsched.controller.process.leases import LeaseThread, LeaseTiming
from polsched.controller.process.loopwatch import LoopWatch
from polsched.controller.process.options import (
    DEFAULT_EXTENDER_DENY,
    DEFAULT_EXTENDER_DENY_IN_CLUSTER,
)
from polsched.scheduler.engine import Engine, EngineOptions

log = logging.getLogger(__name__)


def default_identity() -> str:
    # kube-scheduler's id: hostname plus a random suffix, so that two processes on one
    # host (or a restarted pod) never take each other for the holder.
    return f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


def admission_rules(args: argparse.Namespace, api_server: str) -> AdmissionRules:
    """The reserved scheduler names and the extender destination policy of the flags;
    `api_server`: the URL this process reaches the API server at (refused as an
    extender destination, with the in-cluster Service's address). Raises SystemExit
    naming the flag that does not parse."""
    deny_flag = args.extender_deny
    if deny_flag is None:
        deny_flag = (DEFAULT_EXTENDER_DENY_IN_CLUSTER if os.environ.get("KUBERNETES_SERVICE_HOST")
                     else DEFAULT_EXTENDER_DENY)
    try:
        deny = parse_networks(deny_flag, "--extender-deny")
        allow = parse_networks(args.extender_allow, "--extender-allow")
    except ValueError as e:
        raise SystemExit(f"polsched: {e}") from e
    destinations = DestinationPolicy(deny=deny, allow=allow)
    url = urlsplit(api_server)
    if url.hostname:
        destinations = destinations.with_api_server(
            url.hostname, url.port or (443 if url.scheme == "https" else 80))
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), \
        os.environ.get("KUBERNETES_SERVICE_PORT")
    if host and port and port.isdigit():
        destinations = destinations.with_api_server(host, int(port))
    reserved = [n.strip() for n in args.reserved_scheduler_names.split(",") if n.strip()]
    tenancy = read_tenancy(args.tenancy_config)
    switch_off = [n.strip() for n in args.allow_disabling.split(",") if n.strip()]
    for name in switch_off:
        if name not in PROTECTED_PLUGINS:
            raise SystemExit(f"polsched: --allow-disabling: {name!r} is not one of "
                             f"{', '.join(PROTECTED_PLUGINS)}")
    if switch_off:
        tenancy = dataclasses.replace(
            tenancy, allow_disabling=tenancy.allow_disabling | set(switch_off))
    return AdmissionRules.make(reserved, destinations, tenancy,
                               allow_default_scheduler=args.allow_default_scheduler_name)


def read_tenancy(path: str | None) -> Tenancy:
    """The admin's tenancy configuration from --tenancy-config (None: the protective
    defaults). Raises SystemExit naming the file and the field that does not parse."""
    if not path:
        return parse_tenancy(None)
    try:
        with open(path, encoding="utf-8") as f:
            return parse_tenancy(yaml.safe_load(f))
    except (OSError, yaml.YAMLError, TenancyError) as e:
        raise SystemExit(f"polsched: --tenancy-config {path}: {e}") from e


async def resolve_api_servers(rules: AdmissionRules) -> AdmissionRules:
    """The API server's addresses as its names resolve now, refused too (the extender
    client checks resolved addresses when it connects). A name that does not resolve
    is kept as a name."""
    loop = asyncio.get_running_loop()
    destinations = rules.destinations
    for host, port in list(destinations.api_servers):
        try:
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError:
            continue
        for *_, sockaddr in infos:
            destinations = destinations.with_api_server(str(sockaddr[0]), port)
    return dataclasses.replace(rules, destinations=destinations)


async def until_stopped() -> None:
    """Return on SIGTERM or SIGINT: the process's end when kopf does not run (kopf's
    operator() stops on the same signals)."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    signals = (signal.SIGTERM, signal.SIGINT)

    def stopping(sig: signal.Signals) -> None:
        log.info("%s received: stopping", sig.name)
        stop.set()

    for sig in signals:
        loop.add_signal_handler(sig, stopping, sig)
    try:
        await stop.wait()
    finally:
        for sig in signals:  # a second signal during the shutdown ends the process
            loop.remove_signal_handler(sig)


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
    # --metrics-listen (None: the default address) and --health-listen.
    metrics_listen: str | None = None
    health_listen: str | None = None
    # --metrics-secure-listen and --metrics-cert-dir (None: off).
    secure_metrics: secure_metrics.Options | None = None
    # The one policy this process watches (a Dedicated scheduler's); None: every policy.
    policy: str | None = None
    # How long the scheduling loop may stand still before /healthz fails: far above any
    # attempt (the cost model and the budgets bound those), below the restart a stuck
    # process deserves. The kubelet's probe adds its period x failureThreshold.
    max_loop_lag: float = 30.0


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
    """One scheduling process: its parts, wired (the constructor), started and run until
    it is asked to stop (`run()`), then stopped in the order that loses nothing
    (`close()`). The operator and a Dedicated scheduler differ only in what they pass."""

    def __init__(self, client: ApiClient, cache: ClusterCache, config: ProcessConfig,
                 reconciler: ReconcilerFactory) -> None:
        self.client = client
        self.config = config
        election = config.election
        # What /healthz reports: the engine's loop, the watched tasks, the leadership.
        self.liveness = Liveness(grace=config.liveness_grace)
        # Says when the loop stands still, and where (binds and events wait meanwhile);
        # /healthz fails once its lag passes max_loop_lag.
        self.loopwatch = LoopWatch()
        self.liveness.lag("scheduling loop", self.loopwatch.lag, config.max_loop_lag)
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
        # What run() started, for close().
        self._running: list[asyncio.Task[Any]] = []  # the policy watch, then the main task
        self._campaign: asyncio.Task[None] | None = None
        self._probes: Endpoints | None = None
        self._closed = False

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

    async def run(self, until: Callable[[], Coroutine[Any, Any, None]] = until_stopped, *,
                  prerequisite: asyncio.Task[Any] | None = None,
                  started: str = "") -> None:
        """Start the process, run it until `until()` returns (a signal; the operator's
        kopf when it serves the webhook), then close it. `prerequisite`: a task the Lease,
        the policy watch and `until` wait for (the operator's namespace), set up
        meanwhile. `started`: what to log once the cache has synced. A failure to start
        (an address that cannot be served, `prerequisite` failing) stops what runs and is
        raised."""
        loop = asyncio.get_running_loop()
        cfg = self.config
        # The cache's lists (sent by controller.process.boot) are applied while the rest
        # sets up (`prerequisite`, the metrics server, kopf): the sync is the longest part
        # of the start-up.
        self.loopwatch.start()
        sync = loop.create_task(self.engine.start(), name="polsched-sync")
        ready, healthy = probes_for(self.engine, self.liveness)
        try:
            # Ready once the cache has synced (engine.start() returns then), while healthy.
            self._probes = await serve_metrics(cfg.metrics_listen, ready, healthy,
                                               cfg.health_listen, self.liveness.explain,
                                               None if cfg.secure_metrics is None else
                                               (cfg.secure_metrics, self.client))
            if prerequisite is not None:
                await prerequisite
            main = until()
        except BaseException:
            await self._abandon(sync, prerequisite)
            raise
        # The Lease and the policy watch start while the cache syncs (start-up to first
        # bind was their sum); taking the lead waits for the sync (leading means binding
        # and writing counts from the cache).
        if self.elector is not None:
            self._campaign = loop.create_task(self.elector.run(), name="polsched-lease")
        main_task = loop.create_task(main, name=f"polsched-{getattr(until, '__name__', 'main')}")
        # Policies listed before the sync are applied to the engine, which starts their
        # schedulers once it has started.
        policies = loop.create_task(watch_policies(self.client, self.reconciler,
                                                   name=cfg.policy),
                                    name="polsched-policies")
        self._running = [policies, main_task]
        self.liveness.task("policy watch", policies)
        if self._campaign is not None:
            self.liveness.task("lease election", self._campaign)
        try:
            await sync
            gcpolicy.freeze()
            self.synced()
            if started:
                log.info("%s", started)
            await main_task
        finally:
            await self.close()

    async def _abandon(self, *started: asyncio.Task[Any] | None) -> None:
        """Set-up failed before the watches started: stop what runs, close the client."""
        if self._probes is not None:
            await self._probes.cleanup()
        for t in started:
            if t is None:
                continue
            t.cancel()
            with contextlib.suppress(BaseException):
                await t
        await self.engine.stop()
        await self.client.close()
        await self.loopwatch.stop()

    async def close(self) -> None:
        """Stop the process, once: no more policy events and no new binds, then the last
        counts persisted, the Lease released (so a standby takes over at once), the
        leadership changes under way cancelled, the schedulers, the engine and the client
        stopped, the probes last."""
        if self._closed:
            return
        self._closed = True
        for t in self._running:  # the policy watch; the main task, when the sync failed
            if t.done():
                continue
            t.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self.engine.set_leader(None, False)  # no new binds, then persist the last counts
        await self.writer.close()
        if self.elector is not None and self._campaign is not None:
            self.elector.stop()  # releases the lease
            try:
                await asyncio.wait_for(self._campaign, 5)
            except (TimeoutError, asyncio.CancelledError, Exception):
                log.debug("lease release did not finish", exc_info=True)
        await self.close_leadership()
        await self.reconciler.close()
        await self.engine.stop()
        await self.client.close()
        if self._probes is not None:
            await self._probes.cleanup()
        await self.loopwatch.stop()
