"""--metrics-listen: the default address is best effort and on loopback only, an explicit
one must bind, and an empty one turns the endpoints off; --health-listen serves the probes
alone."""

from __future__ import annotations

import asyncio
import logging
import socket
from unittest import mock

import pytest

from polsched.controller.process import endpoints

pytestmark = pytest.mark.unit


def taken_port() -> tuple[socket.socket, int]:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    return s, int(s.getsockname()[1])


def test_explicit_address_that_cannot_bind_ends_the_process() -> None:
    s, port = taken_port()
    with s, pytest.raises(SystemExit, match=f"--metrics-listen 127.0.0.1:{port}"):
        asyncio.run(endpoints.serve_metrics(f"127.0.0.1:{port}", lambda: True))


def test_explicit_malformed_address_ends_the_process() -> None:
    with pytest.raises(SystemExit, match="expected HOST:PORT"):
        asyncio.run(endpoints.serve_metrics("8080", lambda: True))


def test_default_address_taken_is_skipped_with_a_warning(
        caplog: pytest.LogCaptureFixture) -> None:
    s, port = taken_port()
    with s, mock.patch.object(endpoints, "DEFAULT_METRICS_LISTEN", f"127.0.0.1:{port}"), \
            caplog.at_level(logging.WARNING):
        assert asyncio.run(endpoints.serve_metrics(None, lambda: True)) is None
    assert f"not serving metrics: 127.0.0.1:{port}" in caplog.text


def test_empty_address_disables() -> None:
    assert asyncio.run(endpoints.serve_metrics("", lambda: True)) is None


def test_serves_on_the_address_given() -> None:
    async def main() -> None:
        runner = await endpoints.serve_metrics("127.0.0.1:0", lambda: False)
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


def non_loopback_address() -> str | None:
    """An address of this machine beyond loopback (the interface of its default route)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.255.255.255", 1))  # UDP: nothing is sent
        except OSError:
            return None
        addr = str(s.getsockname()[0])
    return None if addr.startswith("127.") or addr == "0.0.0.0" else addr


async def get(host: str, port: int, path: str) -> str:
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(f"GET {path} HTTP/1.0\r\n\r\n".encode())
    status = (await reader.readline()).decode()
    writer.close()
    return status


def test_metrics_are_not_reachable_beyond_loopback_by_default() -> None:
    """`polsched run` without --metrics-listen: /metrics answers on loopback, and a
    connection to the machine's own non-loopback address is refused. (The port is made
    free-for-the-test; the host is the real default's.)"""
    from polsched.controller.process import options

    other = non_loopback_address()
    if other is None:
        pytest.skip("this machine has no address beyond loopback")
    host = options.DEFAULT_METRICS_LISTEN.rpartition(":")[0]

    async def main() -> None:
        with mock.patch.object(endpoints, "DEFAULT_METRICS_LISTEN", f"{host}:0"):
            runner = await endpoints.serve_metrics(None, lambda: True)
        assert runner is not None
        try:
            port = runner.addresses[0][1]
            assert " 200 " in await get("127.0.0.1", port, "/metrics")
            with pytest.raises(OSError):
                await get(other, port, "/metrics")
        finally:
            await runner.cleanup()

    asyncio.run(main())


def test_health_listen_serves_the_probes_and_not_the_metrics() -> None:
    async def main() -> None:
        runner = await endpoints.serve_metrics("", lambda: True, health_listen="127.0.0.1:0")
        assert runner is not None
        try:
            port = runner.addresses[0][1]
            assert " 200 " in await get("127.0.0.1", port, "/healthz")
            assert " 200 " in await get("127.0.0.1", port, "/readyz")
            assert " 404 " in await get("127.0.0.1", port, "/metrics")
        finally:
            await runner.cleanup()

    asyncio.run(main())


def test_health_listen_that_cannot_bind_ends_the_process() -> None:
    s, port = taken_port()
    with s, pytest.raises(SystemExit, match=f"--health-listen 127.0.0.1:{port}"):
        asyncio.run(endpoints.serve_metrics("", lambda: True,
                                           health_listen=f"127.0.0.1:{port}"))
