"""`polsched scheduler --policy NAME`: the process of a Dedicated policy's Deployment.

It runs an Engine for that one policy, watches the policy for hot reload (a plain watch
on one object; no kopf, since there is one object and no handler bookkeeping to keep) and
writes its status with the same batching as the operator. As kube-scheduler
(--leader-elect defaults to true), it always elects, whatever spec.runtime.replicas says:
a Lease named after the policy elects the one process that binds and writes status, the
others keep a warm cache. Deciding from `replicas` at start-up let every rollout of a
1-replica policy run two schedulers at once, each with its own cache (issue 11).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
from pathlib import Path
from typing import Any

from polsched.cluster.cache import ClusterCache
from polsched.cluster.client import ApiClient
from polsched.controller import credentials, gcpolicy, policywatch
from polsched.controller.health import Liveness
from polsched.controller.leases import LeaseElector
from polsched.controller.ledger import BindLedger
from polsched.controller.operator import (
    admission_rules,
    default_identity,
    probes_for,
    resolve_api_servers,
    serve_metrics,
)
from polsched.controller.reconciler import DEDICATED, PolicyReconciler
from polsched.controller.status import StatusWriter
from polsched.scheduler.engine import Engine

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
    controller.boot, the cache's lists already sent; this closes both when it ends."""
    identity = args.identity or os.environ.get("POD_NAME") or default_identity()
    engine = Engine(client, identity=identity, cache=cache,
                    node_metrics_interval=args.node_metrics_interval)
    liveness = Liveness(grace=max(30.0, 2.0 * args.lease_duration))
    ready, healthy = probes_for(engine, liveness)
    try:
        rules = await resolve_api_servers(admission_rules(args, client.host))
        probes = await serve_metrics(args.metrics_listen, ready, healthy, args.health_listen)
    except SystemExit:
        await engine.cache.stop()
        await client.close()
        raise
    elect = _wants_election(args)
    writer = StatusWriter(client, engine.stats, interval=args.status_interval,
                          enabled=not elect)
    # bindsTotal exact across SIGKILL and failover: counted against the API server.
    writer.ledger = BindLedger(engine.cache, on_change=writer.touch_scheduler,
                               binder=engine.binder)
    reconciler = PolicyReconciler(
        client, engine, writer, runs_mode=DEDICATED, only=args.policy,
        mounted_cas=(args.namespace, Path(args.extender_ca_dir))
        if args.extender_ca_dir else None, rules=rules)
    reconciler.events.enabled = not elect
    engine.set_leader(None, not elect)
    tasks: list[asyncio.Task[Any]] = []
    elector: LeaseElector | None = None
    loop = asyncio.get_running_loop()
    if elect:
        def on_leading(leading: bool) -> None:
            if not leading:  # stop binding now, not after the next await
                engine.set_leader(None, False)
                writer.set_enabled(False)
            liveness.elected(leading)
            t = loop.create_task(lead(leading))
            tasks.append(t)

        async def lead(leading: bool) -> None:
            while True:
                try:
                    await reconciler.set_leading(leading)
                except Exception:  # holding the lease and binding nothing: try again
                    log.exception("applying leadership=%s failed; retrying", leading)
                    await asyncio.sleep(1.0)
                    if elector is None or leading != elector.leading:
                        return
                    continue
                liveness.applied(leading)
                return

        # A client of its own, as kube-scheduler's leader-election client: renewals never
        # queue behind binds for the same client-side budget.
        lease_client = credentials.api_client(args.kubeconfig, **credentials.budget(args))
        lease_client.outage = client.outage  # an outage is reported once for the process
        elector = LeaseElector(lease_client, namespace=args.namespace,
                               name=lease_name(args.policy),
                               identity=identity, on_change=on_leading,
                               lease_duration=args.lease_duration,
                               renew_period=args.renew_period)
        # Binds and status writes end by the lease's renew deadline.
        engine.binder.deadline = elector.valid_until
        writer.deadline = elector.valid_until
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await engine.start()
    gcpolicy.freeze()
    first = asyncio.Event()
    watch = loop.create_task(policywatch.watch_policies(client, reconciler,
                                                        name=args.policy, first=first))
    tasks.append(watch)
    liveness.task("policy watch", watch)
    election = loop.create_task(elector.run()) if elector is not None else None
    if election is not None:
        liveness.task("lease election", election)
    log.info("polsched scheduler for SchedulingPolicy %s started as %s%s", args.policy,
             identity, f" (lease {args.namespace}/{lease_name(args.policy)})" if elect else "")
    try:
        await stop.wait()
    finally:
        engine.set_leader(None, False)
        await writer.close()
        if elector is not None and election is not None:
            elector.stop()  # releases the lease
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(election, 5)
            await elector.client.close()
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        await reconciler.close()
        await engine.stop()
        await client.close()
        if probes is not None:
            await probes.cleanup()
