"""/metrics, /healthz and /readyz of a scheduling process (the operator, a Dedicated
scheduler): the HTTP servers of --metrics-listen and --health-listen, and the probes they
answer (ready once the cache has synced, healthy per controller.process.health).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from polsched.controller.process import secure_metrics
from polsched.controller.process.health import Liveness
from polsched.controller.process.options import DEFAULT_METRICS_LISTEN
from polsched.scheduler import metrics

if TYPE_CHECKING:
    from aiohttp import web

    from polsched.cluster.client import ApiClient
    from polsched.scheduler.engine import Engine

log = logging.getLogger(__name__)


def probes_for(engine: Engine, liveness: Liveness) -> tuple[Callable[[], bool],
                                                            Callable[[], bool]]:
    """(ready, healthy) of a scheduling process: ready once the cache has synced and
    while healthy; healthy while its scheduling loop and long-running tasks run and an
    elected leader leads (controller.process.health)."""
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
                        health_listen: str | None = None,
                        secure: secure_metrics.Options | None = None,
                        client: ApiClient | None = None) -> Endpoints | None:
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
    if secure is not None and client is not None:
        try:
            runner = await secure_metrics.serve(secure, client)
        except (OSError, ValueError, RuntimeError) as e:
            await Endpoints(runners).cleanup()
            raise SystemExit(f"polsched: --metrics-secure-listen {secure.listen}: {e}") from e
        runners.append(runner)
        for addr in runner.addresses:
            host, port = addr[0], addr[1]
            log.info("serving /metrics to authorized tokens on https://%s:%s",
                     f"[{host}]" if ":" in host else host, port)
    return Endpoints(runners) if runners else None
