"""--metrics-listen: the default address is best effort, an explicit one must bind, and an
empty one turns the endpoints off."""

from __future__ import annotations

import asyncio
import logging
import socket
from unittest import mock

import pytest

from polsched.controller import operator

pytestmark = pytest.mark.unit


def taken_port() -> tuple[socket.socket, int]:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    return s, int(s.getsockname()[1])


def test_explicit_address_that_cannot_bind_ends_the_process() -> None:
    s, port = taken_port()
    with s, pytest.raises(SystemExit, match=f"--metrics-listen 127.0.0.1:{port}"):
        asyncio.run(operator.serve_metrics(f"127.0.0.1:{port}", lambda: True))


def test_explicit_malformed_address_ends_the_process() -> None:
    with pytest.raises(SystemExit, match="expected HOST:PORT"):
        asyncio.run(operator.serve_metrics("8080", lambda: True))


def test_default_address_taken_is_skipped_with_a_warning(
        caplog: pytest.LogCaptureFixture) -> None:
    s, port = taken_port()
    with s, mock.patch.object(operator, "DEFAULT_METRICS_LISTEN", f"127.0.0.1:{port}"), \
            caplog.at_level(logging.WARNING):
        assert asyncio.run(operator.serve_metrics(None, lambda: True)) is None
    assert f"not serving metrics: 127.0.0.1:{port}" in caplog.text


def test_empty_address_disables() -> None:
    assert asyncio.run(operator.serve_metrics("", lambda: True)) is None


def test_serves_on_the_address_given() -> None:
    async def main() -> None:
        runner = await operator.serve_metrics("127.0.0.1:0", lambda: False)
        assert runner is not None
        try:
            host, port = runner.addresses[0][:2]
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(b"GET /readyz HTTP/1.0\r\n\r\n")
            status = (await reader.readline()).decode()
            writer.close()
            assert " 503 " in status  # not ready: the cache has not synced
        finally:
            await runner.cleanup()

    asyncio.run(main())
