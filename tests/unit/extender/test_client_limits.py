"""HTTPExtender's bounds (issue 26, finding 5) against real HTTP extenders on 127.0.0.1:
an answer larger than the cap fails the call without being read, answer text that
reaches messages is bounded and never the body, and the destination policy is enforced
when connecting."""

from __future__ import annotations

import ipaddress
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from polsched.api.admission import DestinationPolicy
from polsched.extender import HTTPExtender
from polsched.extender.client import MAX_ANSWER_BYTES, MAX_REASON_CHARS
from polsched.framework.interfaces import ExtenderError
from tests.unit.extender.conftest import StartExtender
from tests.unit.extender.fake_extender import Answer, config, make_node, make_pod, run

pytestmark = pytest.mark.unit

NODES = [make_node("n1"), make_node("n2")]
HUGE = 300 * 1024 * 1024
CHUNK = b"\x20" * (1024 * 1024)


class _Flood(ThreadingHTTPServer):
    daemon_threads = True
    mode = "length"
    sent = 0

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # the client hung up on the flood: expected


class _FloodHandler(BaseHTTPRequestHandler):
    """Answers every POST with a 300 MB body, as fast as the client reads it:
    Content-Length, chunked, or (HTTP/1.0) until the connection closes."""

    protocol_version = "HTTP/1.1"
    server: _Flood

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers["Content-Length"]))
        mode = self.server.mode
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        if mode == "length":
            self.send_header("Content-Length", str(HUGE))
        elif mode == "chunked":
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Connection", "close")
        self.end_headers()
        prefix = b'{"NodeNames": ["n1"], "Error": "'
        self.wfile.write(b"%x\r\n%s\r\n" % (len(prefix), prefix) if mode == "chunked"
                         else prefix)
        for _ in range(HUGE // len(CHUNK)):
            if mode == "chunked":
                self.wfile.write(b"%x\r\n%s\r\n" % (len(CHUNK), CHUNK))
            else:
                self.wfile.write(CHUNK)
            self.server.sent += len(CHUNK)
        self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass


@pytest.fixture
def flood() -> Iterator[_Flood]:
    server = _Flood(("127.0.0.1", 0), _FloodHandler)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("mode", ["length", "chunked", "until-close"])
def test_a_300_mb_answer_fails_the_call_without_being_read(flood: _Flood, mode: str) -> None:
    flood.mode = mode
    url = f"http://127.0.0.1:{flood.server_address[1]}/"
    ext = HTTPExtender(config(url, filter_verb="filter", node_cache_capable=True))

    async def call() -> Any:
        try:
            return await ext.filter(make_pod(), NODES)
        finally:
            await ext.close()

    with pytest.raises(ExtenderError) as err:
        run(call())
    message = str(err.value)
    assert message.startswith(f"failed filter with extender at URL {url}filter: its answer "
                              "is larger than the ")
    assert "bytes allowed" in message
    # Not read: the server could only push what fits in the socket buffers past the cap
    # (it stops when the client closes), far from the 300 MB it meant to send.
    assert flood.sent < MAX_ANSWER_BYTES + 64 * 1024 * 1024


def test_an_answers_error_text_is_bounded_and_printable(start_extender: StartExtender) -> None:
    long_error = "line one\nline two\r\n\x1b[31m" + "x" * 5000
    server = start_extender({"/filter": lambda args: {"Error": long_error}})
    ext = HTTPExtender(config(server.url, filter_verb="filter", node_cache_capable=True))

    async def call() -> Any:
        try:
            return await ext.filter(make_pod(), NODES)
        finally:
            await ext.close()

    with pytest.raises(ExtenderError) as err:
        run(call())
    message = str(err.value)
    prefix = f"failed filter with extender at URL {server.url}filter: "
    assert message.startswith(prefix + "line one line two")
    assert len(message) <= len(prefix) + MAX_REASON_CHARS + 3
    assert message.isprintable()


def test_an_invalid_answer_is_reported_without_its_body(start_extender: StartExtender) -> None:
    secret = b"<html>token=s3cr3t-session-cookie</html>"
    server = start_extender({"/filter": lambda args: Answer(200, secret)})
    ext = HTTPExtender(config(server.url, filter_verb="filter", node_cache_capable=True))

    async def call() -> Any:
        try:
            return await ext.filter(make_pod(), NODES)
        finally:
            await ext.close()

    with pytest.raises(ExtenderError) as err:
        run(call())
    assert "invalid JSON" in str(err.value)
    assert "s3cr3t" not in str(err.value) and "html" not in str(err.value)


def test_a_refused_destination_is_refused_when_connecting(
        start_extender: StartExtender) -> None:
    server = start_extender({"/filter": lambda args: {"NodeNames": ["n1"]}})
    port = int(server.url.rsplit(":", 1)[1].strip("/"))
    # By name: the client resolves it and checks the addresses it would connect to.
    url = f"http://localhost:{port}/"
    refused = HTTPExtender(config(url, filter_verb="filter", node_cache_capable=True),
                           destinations=DestinationPolicy())

    async def call(ext: HTTPExtender) -> Any:
        try:
            return await ext.filter(make_pod(), NODES)
        finally:
            await ext.close()

    with pytest.raises(ExtenderError) as err:
        run(call(refused))
    assert "refused by the destination policy" in str(err.value)
    assert "loopback" in str(err.value)
    assert server.requests == []
    # Allowed by an exception: the same extender answers.
    allowed = HTTPExtender(
        config(url, filter_verb="filter", node_cache_capable=True),
        destinations=DestinationPolicy(allow=(ipaddress.ip_network("127.0.0.0/8"),
                                              ipaddress.ip_network("::1/128"))))
    feasible, _, _ = run(call(allowed))
    assert [n.name for n in feasible] == ["n1"]


def test_the_api_servers_own_port_is_refused_even_when_loopback_is_allowed() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    policy = DestinationPolicy(deny=(), allow=()).with_api_server("127.0.0.1", port)
    ext = HTTPExtender(config(f"http://127.0.0.1:{port}/", filter_verb="filter"),
                       destinations=policy)

    async def call() -> Any:
        try:
            return await ext.filter(make_pod(), NODES)
        finally:
            await ext.close()

    with pytest.raises(ExtenderError, match="the API server's own address"):
        run(call())


def test_an_oversized_answer_honours_ignorable(flood: _Flood) -> None:
    """The cap makes the extender a failed one: skipped when ignorable, the cycle's error
    (naming it) when not."""
    import random

    from polsched.framework import PipelineError, Snapshot
    from polsched.scheduler.algorithm import schedule_pod
    from tests.unit.pipelines import build

    url = f"http://127.0.0.1:{flood.server_address[1]}/"

    async def schedule(ignorable: bool) -> str | None:
        ext = HTTPExtender(config(url, filter_verb="filter", node_cache_capable=True,
                                  ignorable=ignorable))
        pl = build(extenders=[ext], rng=random.Random(0))
        try:
            return (await schedule_pod(pl, make_pod(), Snapshot(NODES))).node
        finally:
            await ext.close()

    assert run(schedule(True)) in ("n1", "n2")
    with pytest.raises(PipelineError, match="its answer is larger than the"):
        run(schedule(False))
