"""`polsched run`: the operator. It watches SchedulingPolicies (controller.policies.watch);
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
from collections.abc import Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any

from polsched.api import GROUP
from polsched.api.admission import AdmissionRules
from polsched.cluster import featuregates
from polsched.cluster.cache import ClusterCache
from polsched.cluster.client import ApiClient, ApiError
from polsched.controller.dedicated.deployments import (
    DEFAULT_IMAGE,
    DedicatedDeployer,
    Inherited,
)
from polsched.controller.policies.names import NameStore
from polsched.controller.policies.reconciler import OperatorDuties, PolicyReconciler
from polsched.controller.process import credentials, namespaces, secure_metrics
from polsched.controller.process.leases import LeaseTiming
from polsched.controller.process.server import (
    Election,
    Process,
    ProcessConfig,
    admission_rules,
    default_identity,
    lease_client,
    resolve_api_servers,
    until_stopped,
)
from polsched.scheduler.engine import EngineOptions

if TYPE_CHECKING:
    import kopf

    from polsched.controller.policies.status import StatusWriter
    from polsched.scheduler.engine import Engine

log = logging.getLogger(__name__)

OPERATOR_LEASE = "polsched-operator"
OPERATOR_CONTAINER = "operator"  # the container's name in manifests/templates/operator.yaml.j2


def admission_flags(args: argparse.Namespace, rules: AdmissionRules | None = None) -> list[str]:
    """The admission flags given to this process, for the Dedicated schedulers it
    deploys: they load and call extenders under the same rules. `rules`: this process's,
    whose tenancy's allowDisabling they get as --allow-disabling (the file stays the
    operator's; the rest of it is the operator's and the webhook's to apply)."""
    out: list[str] = []
    if args.reserved_scheduler_names:
        out.append(f"--reserved-scheduler-names={args.reserved_scheduler_names}")
    if args.allow_default_scheduler_name:
        out.append("--allow-default-scheduler-name")
    if args.extender_deny is not None:
        out.append(f"--extender-deny={args.extender_deny}")
    if args.extender_allow:
        out.append(f"--extender-allow={args.extender_allow}")
    if rules is not None and rules.tenancy.allow_disabling:
        out.append(f"--allow-disabling={','.join(sorted(rules.tenancy.allow_disabling))}")
    return out


def webhook_server(args: argparse.Namespace, client: ApiClient) -> kopf.WebhookServerProtocol:
    """The webhook server `polsched run`'s flags ask for (controller.webhook)."""
    from polsched.controller.webhook import configuration, rotator, server

    service = server.parse_service(args.webhook_service) if args.webhook_service else None
    names = (server.service_names(service[0], service[1]) if service is not None
             else [server.split_listen(args.webhook_listen)[0]])
    certs: rotator.CertificateSource
    if getattr(args, "webhook_certificates", "self-managed") == "external":
        # Served as the issuer (cert-manager) keeps them; its CA injector, not this
        # process, puts the CA into the configuration's caBundle.
        certs = rotator.ExternalCertificates(client, args.namespace,
                                             args.webhook_secret or rotator.DEFAULT_SECRET)
        return server.ManagedWebhookServer(args.webhook_listen, certs, service=service,
                                           publish=None, timing=server.Timing(ca_switch_delay=0.0),
                                           client_ca=getattr(args, "webhook_client_ca", None))
    if service is not None or args.webhook_secret is not None:
        certs = rotator.CertificateManager(client, args.namespace,
                                           args.webhook_secret or rotator.DEFAULT_SECRET, names,
                                           ca_secret=getattr(args, "webhook_ca_secret", None))
    else:
        certs = rotator.EphemeralCertificates(names)
    publish: configuration.Publisher = (
        configuration.CABundleInjector(client) if service is not None
        else configuration.URLConfiguration(client))
    return server.ManagedWebhookServer(args.webhook_listen, certs, service=service,
                                       publish=publish,
                                       client_ca=getattr(args, "webhook_client_ca", None))


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
    from polsched.controller.process.kopf_import import kopf

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
    watch (controller.policies.watch), not kopf's handlers: kopf handles one object's events
    in turn and PATCHes its bookkeeping after each change, and a hot reload waited behind
    those round trips."""
    from polsched.controller.process.kopf_import import kopf

    @kopf.on.login(registry=registry)
    def _login(**_: Any) -> kopf.ConnectionInfo:
        return credentials.connection_info(kubeconfig)


def serve_webhook(args: argparse.Namespace, client: ApiClient, rules: AdmissionRules,
                  held: Callable[[], Mapping[str, tuple[str, float]]] | None = None,
                  recorded: Callable[[], Mapping[str, str]] | None = None
                  ) -> Coroutine[Any, Any, None]:
    """kopf, for the admission webhook (--webhook-listen) and nothing else: set up now (a
    flag it cannot use ends the process before anything starts), run by awaiting the
    result, which returns when kopf stops (on SIGTERM or SIGINT)."""
    from polsched.controller.process.kopf_import import kopf
    from polsched.controller.webhook import admission

    registry = kopf.OperatorRegistry()
    register_handlers(registry, args.kubeconfig)
    admission.register(registry, rules, client, held, recorded)
    settings = settings_for(args, client)
    return kopf.operator(registry=registry, settings=settings, clusterwide=True,
                         standalone=True)


async def operate(args: argparse.Namespace, *, client: ApiClient,
                  cache: ClusterCache) -> None:
    """The operator, until SIGTERM or SIGINT. client and cache: made by
    controller.process.boot, the cache's lists already sent; this closes both when it
    ends."""
    identity = args.identity or default_identity()
    # The namespace check runs while the process sets up; the Lease waits for it.
    namespace_ready = asyncio.get_running_loop().create_task(
        namespaces.ensure(client, args.namespace), name="polsched-namespace")
    try:
        # A flag that does not parse ends the process before anything is served.
        rules = await resolve_api_servers(admission_rules(args, client.host))
    except SystemExit:
        await cache.stop()
        namespace_ready.cancel()
        with contextlib.suppress(BaseException):
            await namespace_ready
        await client.close()
        raise
    # The Lease is renewed on its own thread and client: under load, this loop (every
    # policy's watch events, decisions and binds) renewed too late and lost the lease
    # (controller.process.leases).
    election = Election(args.namespace, OPERATOR_LEASE,
                        LeaseTiming(args.lease_duration, args.renew_period),
                        lease_client(args.kubeconfig, client, credentials.budget(args)))
    config = ProcessConfig(identity, election, args.status_interval,
                           EngineOptions(annotate_decisions=args.annotate_decisions,
                                         shadow_budget=args.shadow_budget,
                                         node_metrics_interval=args.node_metrics_interval,
                                         attempt_budget=args.attempt_budget),
                           liveness_grace=max(30.0, 2.0 * args.lease_duration),
                           metrics_listen=args.metrics_listen,
                           health_listen=args.health_listen,
                           secure_metrics=secure_metrics.options(args))
    image = args.dedicated_image or await own_image(client) or DEFAULT_IMAGE
    deployer = DedicatedDeployer(client, namespace=args.namespace, image=image,
                                 inherited=Inherited(
                                     tuple(admission_flags(args, rules)),
                                     feature_gates=featuregates.from_env(),
                                     metrics_listen=args.metrics_listen,
                                     metrics_secure_listen=args.metrics_secure_listen))
    reconcilers: list[PolicyReconciler] = []

    def reconciler(engine: Engine, writer: StatusWriter) -> PolicyReconciler:
        duties = OperatorDuties(deployer=deployer, records_last_good=True,
                                names=NameStore(client, args.namespace))
        made = PolicyReconciler(client, engine, writer, duties=duties, rules=rules)
        reconcilers.append(made)
        return made

    def held() -> dict[str, tuple[str, float]]:
        # The names this process's book holds for deleted owners (the webhook refuses
        # other claimants of them within the grace period).
        return reconcilers[-1].book.held() if reconcilers else {}

    def recorded() -> dict[str, str]:
        # The owners this process's book recorded (api.claims.owners keeps them).
        return reconcilers[-1].book.recorded() if reconcilers else {}

    process = Process(client, cache, config, reconciler)

    def kopf() -> Coroutine[Any, Any, None]:
        return serve_webhook(args, client, rules, held, recorded)

    # The process runs until kopf (serving the webhook) stops, or a signal.
    await process.run(kopf if args.webhook_listen else until_stopped,
                      prerequisite=namespace_ready,
                      started=f"polsched operator {identity} started (lease "
                              f"{args.namespace}/{OPERATOR_LEASE})")
