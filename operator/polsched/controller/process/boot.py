"""The first steps of the long-running commands (`polsched run`, `polsched scheduler`):
logging, the garbage collector's policy, and the cache's initial lists sent before most
of polsched is imported.

Importing the operator (the engine, every plugin, the policy model, the reconciler, the
metrics server) takes ~0.1 s of CPU, and the API server answers the initial lists (every
node and pod) on the other core meanwhile. So this module imports only the API client and
the cache, sends the lists, and imports the rest on a worker thread while the event loop
receives the answers. The command's coroutine then gets the client and the cache, which
its Engine syncs as it would have. The start-up stays CPU-bound (the imports, decoding the
lists): this hides only the wait for the API server, 5-33 ms before the first bind on the
preemption bench and 0.3-0.9 s with 50 policies (bench/NOTES.md, "Issue 15, seventh
pass: start-up").
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from polsched.cluster.cache import ClusterCache
from polsched.cluster.client import ApiClient
from polsched.controller.process import credentials, gcpolicy
from polsched.scheduler import metrics


class Main(Protocol):
    def __call__(self, args: argparse.Namespace, *, client: ApiClient,
                 cache: ClusterCache) -> Coroutine[Any, Any, None]: ...


class _QuietOutage(logging.Filter):
    """kopf logs every failed attempt of its API requests (ERROR "Request attempt #N/9
    failed; will retry"): during an API server outage, a line per watch per second. The
    outage is reported once by polsched.cluster.client (ApiClient.outage), so kopf's
    attempts that failed to reach the server are left out; its other errors are not."""

    _UNREACHABLE = ("ClientConnectorError", "ServerDisconnectedError", "ClientOSError",
                    "ClientPayloadError", "ConnectionRefusedError", "ConnectionResetError")

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith("kopf"):
            return True
        msg = record.getMessage()
        return not ("Request attempt" in msg and any(u in msg for u in self._UNREACHABLE))


def configure_logging(verbose: bool) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for handler in logging.getLogger().handlers:
        handler.addFilter(_QuietOutage())
    if not verbose:
        logging.getLogger("kopf").setLevel(logging.WARNING)
        logging.getLogger("aiohttp").setLevel(logging.WARNING)


def run(args: argparse.Namespace, load: Callable[[], Main]) -> int:
    """Run the command whose coroutine `load` imports and returns (on a worker thread,
    while the cache's lists are answered), as `main(args, client=..., cache=...)`."""
    configure_logging(args.verbose)
    gcpolicy.apply()
    asyncio.run(start(args, load))
    return 0


async def start(args: argparse.Namespace, load: Callable[[], Main]) -> None:
    # No collection during the start-up (gcpolicy), for at most this long.
    asyncio.get_running_loop().call_later(gcpolicy.STARTUP_PAUSE_SECONDS, gcpolicy.resume)
    client = credentials.api_client(args.kubeconfig, **credentials.budget(args))
    cache = ClusterCache(client)
    try:
        cache.prefetch()
        main = await asyncio.to_thread(_load, load)
    except BaseException:
        await cache.stop()
        await client.close()
        raise
    # The loop watchdog is the Process's (controller.process.server): /healthz reads its lag.
    await main(args, client=client, cache=cache)


def _load(load: Callable[[], Main]) -> Main:
    """On the worker thread: the command's modules, and the metrics server's."""
    main = load()
    metrics.import_server()
    return main
