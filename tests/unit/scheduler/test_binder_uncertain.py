"""polsched.scheduler.binder: which failed binds count as possibly done (Binder.uncertain,
which the bind ledger waits for before it settles a second). The client is a plain object
that fails as the API server's answers do; binding against the real API server is tested
in tests/e2e."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import aiohttp
import pytest
from aiohttp.client_reqrep import ConnectionKey

from polsched.cluster.client import ApiClient, ApiError
from polsched.framework.types import PodInfo
from polsched.scheduler.binder import Binder, BindOutcome
from tests.builders import make_pod

pytestmark = pytest.mark.unit


class FailingClient:
    def __init__(self, err: BaseException) -> None:
        self.err = err

    async def send(self, *_: Any, **__: Any) -> int:
        raise self.err


def a_pod() -> PodInfo:
    return (make_pod().name("p").namespace("ns").uid("u1").scheduler("s").container(image="i")
            .phase("Pending").info())


@pytest.mark.parametrize(("err", "outcome", "uncertain"), [
    # The server answered that nothing was written.
    (ApiError(409, "Conflict", "already assigned"), BindOutcome.CONFLICT, False),
    (ApiError(404, "NotFound", "gone"), BindOutcome.GONE, False),
    (ApiError(429, "TooManyRequests", "slow down"), BindOutcome.FAILED, False),
    # A server error may come after the write (504: the server's own timeout).
    (ApiError(504, "Timeout", "request did not complete"), BindOutcome.FAILED, True),
    (ApiError(500, "InternalError", "etcd"), BindOutcome.FAILED, True),
    # Sent, and the connection was lost before the answer.
    (aiohttp.ServerDisconnectedError(), BindOutcome.FAILED, True),
    (TimeoutError(), BindOutcome.FAILED, True),
    # Never sent: the connection could not be opened.
    (aiohttp.ClientConnectorError(ConnectionKey("127.0.0.1", 1, False, True, None, None, None,
                                                None), OSError(111, "refused")),
     BindOutcome.FAILED, False),
])
def test_which_failed_binds_may_have_happened(err: BaseException, outcome: BindOutcome,
                                              uncertain: bool) -> None:
    async def main() -> tuple[BindOutcome, str]:
        binder = Binder(cast(ApiClient, FailingClient(err)))
        done: asyncio.Future[tuple[BindOutcome, str]] = \
            asyncio.get_running_loop().create_future()
        binder.bind(a_pod(), "n1", lambda o, m: done.set_result((o, m)))
        got = await done
        assert ("ns/p" in binder.uncertain_keys()) is uncertain
        await binder.close()
        return got

    got, message = asyncio.run(main())
    assert got is outcome
    assert message
