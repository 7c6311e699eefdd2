"""`polsched scheduler --policy NAME`: the process of a Dedicated policy's Deployment.

It runs an Engine for that one policy, watches the policy for hot reload (a plain watch
on one object; no kopf, since there is one object and no handler bookkeeping to keep) and
writes its status with the same batching as the operator. As kube-scheduler
(--leader-elect defaults to true), it always elects, whatever spec.runtime.replicas says:
a Lease named after the policy elects the one process that binds and writes status, the
others keep a warm cache. Deciding from `replicas` at start-up let every rollout of a
1-replica policy run two schedulers at once, each with its own cache (issue 11). Its parts
are wired, started and stopped by controller.process.server's Process, as the operator's:
the Lease is renewed on a thread of its own.
"""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path

from polsched.cluster.cache import ClusterCache
from polsched.cluster.client import ApiClient
from polsched.controller.policies.reconciler import DedicatedScope, PolicyReconciler
from polsched.controller.process import credentials, secure_metrics
from polsched.controller.process.leases import LeaseTiming
from polsched.controller.process.server import (
    Election,
    Process,
    ProcessConfig,
    admission_rules,
    default_identity,
    lease_client,
    resolve_api_servers,
)
from polsched.scheduler.engine import EngineOptions

log = logging.getLogger(__name__)


def lease_name(policy: str) -> str:
    return f"polsched-scheduler-{policy}"


def _wants_election(args: argparse.Namespace) -> bool:
    """--leader-elect: true unless explicitly false (a single process run by hand for
    debugging); "auto", the old default, elects too."""
    return bool(args.leader_elect != "false")


async def schedule(args: argparse.Namespace, *, client: ApiClient,
                   cache: ClusterCache) -> None:
    """The Dedicated scheduler, until SIGTERM or SIGINT. client and cache: made by
    controller.process.boot, the cache's lists already sent; this closes both when it
    ends."""
    identity = args.identity or os.environ.get("POD_NAME") or default_identity()
    try:
        rules = await resolve_api_servers(admission_rules(args, client.host))
    except SystemExit:
        await cache.stop()
        await client.close()
        raise
    elect = _wants_election(args)
    # A client of its own, as kube-scheduler's leader-election client (on its own
    # thread, controller.process.server): renewals never queue behind binds for the same
    # client-side budget.
    election = Election(args.lease_namespace, lease_name(args.policy),
                        LeaseTiming(args.lease_duration, args.renew_period),
                        lease_client(args.kubeconfig, client, credentials.budget(args))
                        ) if elect else None
    # Its extenders' CA Secrets are mounted in its pod (controller.dedicated.deployments).
    scope = DedicatedScope(args.policy, (args.namespace, Path(args.extender_ca_dir))
                           if args.extender_ca_dir else None)
    config = ProcessConfig(identity, election, args.status_interval,
                           EngineOptions(node_metrics_interval=args.node_metrics_interval,
                                         attempt_budget=args.attempt_budget),
                           liveness_grace=max(30.0, 2.0 * args.lease_duration),
                           metrics_listen=args.metrics_listen,
                           health_listen=args.health_listen, policy=args.policy,
                           secure_metrics=secure_metrics.options(args))
    process = Process(client, cache, config,
                      lambda engine, writer: PolicyReconciler(
                          client, engine, writer, dedicated=scope, rules=rules))
    lease = f" (lease {args.lease_namespace}/{lease_name(args.policy)})" if elect else ""
    await process.run(started=f"polsched scheduler for SchedulingPolicy {args.policy} "
                              f"started as {identity}{lease}")
