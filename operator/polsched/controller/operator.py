"""`polsched run`: the operator. It watches SchedulingPolicies (controller.policywatch);
every Shared policy runs in this process's Engine, every Dedicated one gets its own
Deployment.

Only the holder of the operator's Lease binds pods, writes status and applies Dedicated
manifests; a standby replica keeps its cache and pipelines warm, so a takeover costs no
more than the lease expiry. kopf runs only to serve the admission webhook
(--webhook-listen): without it, kopf is neither imported nor started (its import and
start were ~0.2 s of CPU before the first bind; bench/NOTES.md "Issue 15, fourth pass:
start-up"), and the process runs until SIGTERM or SIGINT. kopf has no handlers on
policies, so it neither delays a hot reload behind its per-object bookkeeping nor writes
annotations on them (objects from older versions may still carry its progress and
diff-base annotations under polsched.io; nothing reads them). Posting kopf's handler
events is limited to warnings."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import socket
import uuid
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from polsched.api import GROUP
from polsched.api.admission import AdmissionRules, DestinationPolicy, parse_networks
from polsched.cluster.cache import ClusterCache
from polsched.cluster.client import ApiClient, ApiError
from polsched.controller import credentials, gcpolicy, namespaces, policywatch
from polsched.controller.deployments import DEFAULT_IMAGE, DedicatedDeployer
from polsched.controller.health import Liveness
from polsched.controller.leases import LeaseTiming
from polsched.controller.options import (
    DEFAULT_EXTENDER_DENY,
    DEFAULT_EXTENDER_DENY_IN_CLUSTER,
    DEFAULT_METRICS_LISTEN,
)
from polsched.controller.process import Election, Process, ProcessConfig, lease_client
from polsched.controller.reconciler import PolicyReconciler
from polsched.scheduler import metrics
from polsched.scheduler.engine import EngineOptions

if TYPE_CHECKING:
    import kopf
    from aiohttp import web

    from polsched.scheduler.engine import Engine

log = logging.getLogger(__name__)

OPERATOR_LEASE = "polsched-operator"
OPERATOR_CONTAINER = "operator"  # the container's name in manifests/templates/operator.yaml.j2


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
    return AdmissionRules.make(reserved, destinations,
                               allow_default_scheduler=args.allow_default_scheduler_name)


def admission_flags(args: argparse.Namespace) -> list[str]:
    """The admission flags given to this process, for the Dedicated schedulers it
    deploys: they load and call extenders under the same rules."""
    out: list[str] = []
    if args.reserved_scheduler_names:
        out.append(f"--reserved-scheduler-names={args.reserved_scheduler_names}")
    if args.allow_default_scheduler_name:
        out.append("--allow-default-scheduler-name")
    if args.extender_deny is not None:
        out.append(f"--extender-deny={args.extender_deny}")
    if args.extender_allow:
        out.append(f"--extender-allow={args.extender_allow}")
    return out


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
    return AdmissionRules(rules.reserved_scheduler_names, destinations)


def probes_for(engine: Engine, liveness: Liveness) -> tuple[Callable[[], bool],
                                                            Callable[[], bool]]:
    """(ready, healthy) of a scheduling process: ready once the cache has synced and
    while healthy; healthy while its scheduling loop and long-running tasks run and an
    elected leader leads (controller.health)."""
    liveness.check("scheduling loop", engine.loop_alive)

    def ready() -> bool:
        return engine.cache.synced and liveness.healthy()

    return ready, liveness.healthy


class Endpoints:
    """The HTTP servers of --metrics-listen and --health-listen, stopped together."""

    def __init__(self, runners: list[web.AppRunner]) -> None:
        self.runners = runners

    @property
    def addresses(self) -> list[Any]:
        """The (host, port, ...) of every socket served, metrics first."""
        return [a for r in self.runners for a in r.addresses]

    async def cleanup(self) -> None:
        for runner in self.runners:
            with contextlib.suppress(Exception):
                await runner.cleanup()


async def serve_metrics(listen: str | None, ready: Callable[[], bool],
                        healthy: Callable[[], bool] = lambda: True,
                        health_listen: str | None = None) -> Endpoints | None:
    """Start /metrics, /healthz and /readyz (`--metrics-listen`), and the probes alone on
    `health_listen` (`--health-listen`). Metrics: None is the default address (loopback
    only), given up with a warning when it is taken (a second operator on a laptop must
    still run); "": disabled. An address given explicitly that cannot be served ends the
    process, as kube-scheduler's does: probes pointed at it would fail anyway."""
    explicit = listen is not None
    address = DEFAULT_METRICS_LISTEN if listen is None else listen
    runners: list[web.AppRunner] = []
    if address:
        try:
            runner = await metrics.serve(address, ready=ready, healthy=healthy)
        except (OSError, ValueError) as e:
            if explicit:
                raise SystemExit(f"polsched: --metrics-listen {address}: {e}") from e
            log.warning("not serving metrics: %s: %s (set --metrics-listen to another "
                        "address, or to '' to silence this)", address, e)
        else:
            runners.append(runner)
            for addr in runner.addresses:
                host, port = addr[0], addr[1]
                log.info("serving /metrics, /healthz and /readyz on http://%s:%s",
                         f"[{host}]" if ":" in host else host, port)
    if health_listen:
        try:
            runner = await metrics.serve(health_listen, ready=ready, healthy=healthy,
                                         with_metrics=False)
        except (OSError, ValueError) as e:
            await Endpoints(runners).cleanup()
            raise SystemExit(f"polsched: --health-listen {health_listen}: "
                             f"{str(e).replace('--metrics-listen', '--health-listen')}"
                             ) from e
        runners.append(runner)
        for addr in runner.addresses:
            host, port = addr[0], addr[1]
            log.info("serving /healthz and /readyz on http://%s:%s",
                     f"[{host}]" if ":" in host else host, port)
    return Endpoints(runners) if runners else None


def webhook_server(args: argparse.Namespace, client: ApiClient) -> kopf.WebhookServerProtocol:
    """The webhook server `polsched run`'s flags ask for (controller.webhook)."""
    from polsched.controller import webhook

    service = webhook.parse_service(args.webhook_service) if args.webhook_service else None
    names = (webhook.service_names(service[0], service[1]) if service is not None
             else [webhook.split_listen(args.webhook_listen)[0]])
    certs: webhook.CertificateSource
    if service is not None or args.webhook_secret is not None:
        certs = webhook.CertificateManager(client, args.namespace,
                                           args.webhook_secret or webhook.DEFAULT_SECRET, names,
                                           ca_secret=getattr(args, "webhook_ca_secret", None))
    else:
        certs = webhook.EphemeralCertificates(names)
    publish: webhook.Publisher = (webhook.CABundleInjector(client) if service is not None
                                  else webhook.URLConfiguration(client))
    return webhook.ManagedWebhookServer(args.webhook_listen, certs, service=service,
                                        publish=publish)


async def own_image(client: ApiClient) -> str | None:
    """In a pod ($POD_NAME, $POD_NAMESPACE from the downward API): the image this
    container runs, which Dedicated schedulers then run too, whatever name the install
    gave it (kustomize `images:`, a private registry)."""
    pod, namespace = os.environ.get("POD_NAME"), os.environ.get("POD_NAMESPACE")
    if not pod or not namespace:
        return None
    try:
        obj = await client.get(f"/api/v1/namespaces/{namespace}/pods/{pod}")
    except ApiError as e:
        log.warning("cannot read my own pod %s/%s for its image (%s); Dedicated schedulers "
                    "run %s unless --dedicated-image says otherwise", namespace, pod, e,
                    DEFAULT_IMAGE)
        return None
    containers = (obj.get("spec") or {}).get("containers") or []
    for c in containers:
        if c.get("name") == OPERATOR_CONTAINER:
            return str(c["image"])
    return str(containers[0]["image"]) if len(containers) == 1 else None


def settings_for(args: argparse.Namespace, client: ApiClient) -> kopf.OperatorSettings:
    from polsched.controller.kopf_import import kopf

    settings = kopf.OperatorSettings()
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=GROUP)
    settings.posting.level = logging.WARNING
    settings.peering.standalone = True  # our Lease decides who acts, not kopf's peering
    if args.webhook_listen:
        # The configuration is ours (controller.webhook), never kopf's managed one.
        settings.admission.server = webhook_server(args, client)
    return settings


def register_handlers(registry: kopf.OperatorRegistry, kubeconfig: str | None) -> None:
    """kopf's part: its API credentials. Policies reach the reconciler through our own
    watch (controller.policywatch), not kopf's handlers: kopf handles one object's events
    in turn and PATCHes its bookkeeping after each change, and a hot reload waited behind
    those round trips."""
    from polsched.controller.kopf_import import kopf

    @kopf.on.login(registry=registry)
    def _login(**_: Any) -> kopf.ConnectionInfo:
        return credentials.connection_info(kubeconfig)


def serve_webhook(args: argparse.Namespace, client: ApiClient, rules: AdmissionRules
                  ) -> Coroutine[Any, Any, None]:
    """kopf, for the admission webhook (--webhook-listen) and nothing else: set up now (a
    flag it cannot use ends the process before anything starts), run by awaiting the
    result, which returns when kopf stops (on SIGTERM or SIGINT)."""
    from polsched.controller import webhook
    from polsched.controller.kopf_import import kopf

    registry = kopf.OperatorRegistry()
    register_handlers(registry, args.kubeconfig)
    webhook.register(registry, rules, client)
    settings = settings_for(args, client)
    return kopf.operator(registry=registry, settings=settings, clusterwide=True,
                         standalone=True)


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


async def operate(args: argparse.Namespace, *, client: ApiClient,
                  cache: ClusterCache) -> None:
    """The operator, until SIGTERM or SIGINT. client and cache: made by controller.boot,
    the cache's lists already sent; this closes both when it ends."""
    identity = args.identity or default_identity()
    # The namespace check runs while the process sets up; the Lease waits for it.
    namespace_ready = asyncio.get_running_loop().create_task(
        namespaces.ensure(client, args.namespace), name="polsched-namespace")

    async def abandon(*started: asyncio.Task[Any], engine: Any = None) -> None:
        """Set-up failed before the watches started: stop what runs, close the client."""
        for t in (namespace_ready, *started):
            t.cancel()
            with contextlib.suppress(BaseException):
                await t
        if engine is not None:
            await engine.stop()
        await client.close()

    try:
        # A flag that does not parse ends the process before anything is served.
        rules = await resolve_api_servers(admission_rules(args, client.host))
    except SystemExit:
        await cache.stop()
        await abandon()
        raise
    # The Lease is renewed on its own thread and client: under load, this loop (every
    # policy's watch events, decisions and binds) renewed too late and lost the lease
    # (controller.leases).
    election = Election(args.namespace, OPERATOR_LEASE,
                        LeaseTiming(args.lease_duration, args.renew_period),
                        lease_client(args.kubeconfig, client, credentials.budget(args)))
    config = ProcessConfig(identity, election, args.status_interval,
                           EngineOptions(annotate_decisions=args.annotate_decisions,
                                         shadow_budget=args.shadow_budget,
                                         node_metrics_interval=args.node_metrics_interval),
                           liveness_grace=max(30.0, 2.0 * args.lease_duration))
    image = args.dedicated_image or await own_image(client) or DEFAULT_IMAGE
    deployer = DedicatedDeployer(client, namespace=args.namespace, image=image,
                                 args=admission_flags(args))
    process = Process(client, cache, config,
                      lambda engine, writer: PolicyReconciler(
                          client, engine, writer, deployer=deployer, records_last_good=True,
                          rules=rules))
    engine, writer, reconciler = process.engine, process.writer, process.reconciler
    liveness: Liveness = process.liveness
    elector = process.elector
    assert elector is not None
    # The cache's lists (sent by controller.boot) are applied while the rest sets up (the
    # namespace check, the metrics server, kopf): the sync is the longest part of the
    # start-up.
    sync = asyncio.get_running_loop().create_task(engine.start(), name="polsched-sync")
    ready, healthy = probes_for(engine, liveness)
    try:
        # Ready once the cache has synced (engine.start() returns then), while healthy.
        probes = await serve_metrics(args.metrics_listen, ready, healthy, args.health_listen)
    except SystemExit:
        await abandon(sync, engine=engine)
        raise
    try:
        await namespace_ready
    except BaseException:
        if probes is not None:
            await probes.cleanup()
        await abandon(sync, engine=engine)
        raise
    # The Lease and the policy watch start while the cache syncs (start-up to first bind
    # was their sum); taking the lead waits for the sync (Process: leading means binding
    # and writing counts from the cache).
    # The process runs until this ends: kopf (serving the webhook) or a signal.
    main = serve_webhook(args, client, rules) if args.webhook_listen else until_stopped()
    loop = asyncio.get_running_loop()
    campaign = loop.create_task(elector.run(), name="polsched-lease")
    operator_task = loop.create_task(
        main, name="polsched-kopf" if args.webhook_listen else "polsched-signals")
    # Policies listed before the sync are applied to the engine, which starts their
    # schedulers once it has started.
    policies = loop.create_task(policywatch.watch_policies(client, reconciler),
                                name="polsched-policies")
    liveness.task("policy watch", policies)
    liveness.task("lease election", campaign)
    try:
        await sync
        gcpolicy.freeze()
        process.synced()
        log.info("polsched operator %s started (lease %s/%s)", identity, args.namespace,
                 OPERATOR_LEASE)
        await operator_task
    finally:
        policies.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await policies
        if not operator_task.done():  # the sync failed
            operator_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await operator_task
        engine.set_leader(None, False)  # no new binds, then persist the last counts
        await writer.close()
        elector.stop()
        try:
            await asyncio.wait_for(campaign, 5)
        except (TimeoutError, asyncio.CancelledError, Exception):
            log.debug("lease release did not finish", exc_info=True)
        await process.close_leadership()
        await reconciler.close()
        await engine.stop()
        await client.close()
        if probes is not None:
            await probes.cleanup()
