"""/metrics, /healthz and /readyz of a scheduling process (the operator, a Dedicated
scheduler): the HTTP servers of --metrics-listen and --health-listen, and the probes they
answer (ready once the cache has synced, healthy per controller.process.health).

They are served by an event loop of their own on a thread of its own (ServingThread), as
kube-scheduler serves /healthz from goroutines apart from its scheduling cycle: a pod or a
policy that holds the scheduling loop for seconds must not make /healthz time out (the
kubelet would restart the process, and the restart would meet the same pod). What the
probes read (a task's state, a timestamp, a flag) is read across threads as plain
attribute reads; the loop's lag is measured, not inferred from a probe's silence.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from polsched.controller.process import secure_metrics
from polsched.controller.process.health import Liveness
from polsched.controller.process.options import DEFAULT_METRICS_LISTEN
from polsched.scheduler import metrics

if TYPE_CHECKING:
    from aiohttp import web

    from polsched.cluster.client import ApiClient
    from polsched.scheduler.engine import Engine

log = logging.getLogger(__name__)

T = TypeVar("T")


class ServingThread:
    """An asyncio loop on a daemon thread: what runs on it answers whatever the
    scheduling loop is doing. `call(coro)` runs `coro` there and awaits its result from
    the caller's loop; `stop()` ends the loop and joins the thread."""

    def __init__(self, name: str = "polsched-serving") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            self.loop.close()

    async def call(self, coro: Coroutine[Any, Any, T]) -> T:
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self.loop))

    async def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        await asyncio.to_thread(self._thread.join, 5.0)


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
    """The HTTP servers of --metrics-listen and --health-listen, served on `thread`, and
    of --metrics-secure-listen (`on_loop`: served on the caller's loop, whose API client
    makes its TokenReviews and SubjectAccessReviews), stopped together (and the thread
    with them)."""

    def __init__(self, runners: list[web.AppRunner], thread: ServingThread,
                 on_loop: list[web.AppRunner] | None = None) -> None:
        self.runners = runners
        self.thread = thread
        self.on_loop = on_loop or []

    @property
    def addresses(self) -> list[Any]:
        """The (host, port, ...) of every socket served, metrics first."""
        return [a for r in [*self.runners, *self.on_loop] for a in r.addresses]

    async def cleanup(self) -> None:
        for runner in self.runners:
            with contextlib.suppress(Exception):
                await self.thread.call(runner.cleanup())
        for runner in self.on_loop:
            with contextlib.suppress(Exception):
                await runner.cleanup()
        await self.thread.stop()


async def serve_metrics(listen: str | None, ready: Callable[[], bool],
                        healthy: Callable[[], bool] = lambda: True,
                        health_listen: str | None = None,
                        explain: Callable[[], str] | None = None,
                        secure: tuple[secure_metrics.Options, ApiClient] | None = None
                        ) -> Endpoints | None:
    """Start /metrics, /healthz and /readyz (`--metrics-listen`), and the probes alone on
    `health_listen` (`--health-listen`). Metrics: None is the default address (loopback
    only), given up with a warning when it is taken (a second operator on a laptop must
    still run); "": disabled. An address given explicitly that cannot be served ends the
    process, as kube-scheduler's does: probes pointed at it would fail anyway.
    `explain()`: the body of a failing /healthz (what is wrong). Served on a
    ServingThread of their own. `secure`: --metrics-secure-listen's options and the API
    client that reviews its tokens, served on this loop."""
    thread = ServingThread()
    try:
        served = Endpoints(await _serve(thread, listen, ready, healthy, health_listen,
                                        explain), thread)
        if secure is not None:
            served.on_loop.append(await _serve_secure(*secure, served))
    except BaseException:
        await thread.stop()
        raise
    if not served.runners and not served.on_loop:
        await thread.stop()
        return None
    return served


async def _serve_secure(options: secure_metrics.Options, client: ApiClient,
                        served: Endpoints) -> web.AppRunner:
    """--metrics-secure-listen on this loop; what `served` already serves is stopped if
    it cannot be served."""
    try:
        runner = await secure_metrics.serve(options, client)
    except (OSError, ValueError, RuntimeError) as e:
        await served.cleanup()
        raise SystemExit(f"polsched: --metrics-secure-listen {options.listen}: {e}") from e
    for addr in runner.addresses:
        host, port = addr[0], addr[1]
        log.info("serving /metrics to authorized tokens on https://%s:%s",
                 f"[{host}]" if ":" in host else host, port)
    return runner


async def _serve(thread: ServingThread, listen: str | None, ready: Callable[[], bool],
                 healthy: Callable[[], bool], health_listen: str | None,
                 explain: Callable[[], str] | None) -> list[web.AppRunner]:
    explicit = listen is not None
    address = DEFAULT_METRICS_LISTEN if listen is None else listen
    runners: list[web.AppRunner] = []
    if address:
        try:
            runner = await thread.call(metrics.serve(address, ready=ready, healthy=healthy,
                                                     explain=explain))
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
            runner = await thread.call(metrics.serve(health_listen, ready=ready,
                                                     healthy=healthy, with_metrics=False,
                                                     explain=explain))
        except (OSError, ValueError) as e:
            for r in runners:
                with contextlib.suppress(Exception):
                    await thread.call(r.cleanup())
            raise SystemExit(f"polsched: --health-listen {health_listen}: "
                             f"{str(e).replace('--metrics-listen', '--health-listen')}"
                             ) from e
        runners.append(runner)
        for addr in runner.addresses:
            host, port = addr[0], addr[1]
            log.info("serving /healthz and /readyz on http://%s:%s",
                     f"[{host}]" if ":" in host else host, port)
    return runners
