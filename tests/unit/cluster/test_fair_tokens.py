"""The client's request budget is shared fairly among tenants (issue 36, finding 5):
one tenant's burst of writes, queued for tokens, does not reserve the bucket ahead of
another tenant's next request, as client-go's first-come order did (a policy whose
extender failed spent the budget of every other policy's binds). Against a real HTTP
server on 127.0.0.1 standing in for the API server, which records the order requests
arrive in."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web

from polsched.cluster.client import ApiClient, ClientLimits

pytestmark = pytest.mark.unit


def arrival_order(flood: int, then: int) -> list[str]:
    """Tenant "noisy" queues `flood` writes at once, then tenant "quiet" `then`; the
    tenants in the order their requests reached the server."""
    order: list[str] = []

    async def handle(request: web.Request) -> web.Response:
        order.append(request.path.rsplit("/", 1)[1])
        return web.json_response({})

    async def main() -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", handle)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        # Burst 1: every request but the first waits for a token, 500 a second.
        client = ApiClient(f"http://127.0.0.1:{runner.addresses[0][1]}",
                           limits=ClientLimits(qps=500, burst=1))
        try:
            noisy = [asyncio.ensure_future(client.send("POST", "/w/noisy", b"{}",
                                                       tenant="noisy"))
                     for _ in range(flood)]
            await asyncio.sleep(0)  # they have all asked for their tokens
            quiet = [asyncio.ensure_future(client.send("POST", "/w/quiet", b"{}",
                                                       tenant="quiet"))
                     for _ in range(then)]
            await asyncio.gather(*noisy, *quiet)
        finally:
            await client.close()
            await runner.cleanup()

    asyncio.run(main())
    return order


def test_a_tenant_behind_a_flood_gets_every_other_token() -> None:
    order = arrival_order(60, 3)
    assert len(order) == 63
    # Noisy and quiet alternate while both wait: the quiet tenant's three are among the
    # first ten (in first-come order they were the last three, behind the whole flood).
    quiet = [i for i, t in enumerate(order) if t == "quiet"]
    assert len(quiet) == 3 and max(quiet) < 10


def test_a_single_tenant_is_served_in_order_and_not_slower() -> None:
    assert arrival_order(20, 0) == ["noisy"] * 20
