"""cluster.http1, the lean write path's HTTP/1.1 framing, against real sockets on
127.0.0.1: a server that answers with exactly the bytes a test gives it (split where
the test says), so the parser meets Content-Length, chunked bodies cut mid-chunk,
Connection: close and a server that hangs up. The API server itself is exercised through
this path by the e2e binder, engine and outage tests. Also the watch stream's line
splitting, fed the same way."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import aiohttp
import pytest

from polsched.cluster import http1
from polsched.cluster.client import ApiClient, ApiError

pytestmark = pytest.mark.unit

HEAD = b"POST /api/v1/namespaces/ns/pods/p/binding HTTP/1.1\r\nHost: x\r\n"


class Server:
    """Reads one request per answer (to the end of its Content-Length body), records
    it, then writes the next answer's pieces one by one."""

    def __init__(self, answers: Sequence[Sequence[bytes] | None]) -> None:
        self.answers = list(answers)
        self.requests: list[bytes] = []
        self.connections = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while self.answers:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length:"))
                self.requests.append(head + await reader.readexactly(length))
                answer = self.answers.pop(0)
                if answer is None:  # hang up without answering
                    break
                for piece in answer:
                    writer.write(piece)
                    await writer.drain()
                    await asyncio.sleep(0.01)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()


def serve(answers: Sequence[Sequence[bytes] | None],
          body: Callable[[http1.Http1Writer, Server], Awaitable[None]],
          per_connection: Sequence[Server] = ()) -> Server:
    """Run `body` against a server on 127.0.0.1 answering `answers`; with
    `per_connection`, each new connection is served by the next of those instead."""
    server = Server(answers)
    servers = list(per_connection)

    async def handle(r: asyncio.StreamReader, wr: asyncio.StreamWriter) -> None:
        await (servers.pop(0) if servers else server).handle(r, wr)

    async def main() -> None:
        srv = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = srv.sockets[0].getsockname()[1]
        writer = http1.Http1Writer("127.0.0.1", port, None)
        try:
            await asyncio.wait_for(body(writer, server), 10)
        finally:
            writer.close()
            srv.close()
            await srv.wait_closed()

    asyncio.run(main())
    return server


def test_content_length_answers_reuse_one_connection() -> None:
    ok = b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"

    async def body(w: http1.Http1Writer, s: Server) -> None:
        assert await w.send(HEAD, b'{"a":1}') == (201, b"{}")
        assert await w.send(HEAD, b"xyz") == (201, b"{}")
        assert w.opened == 1

    s = serve([[ok[:10], ok[10:50], ok[50:]], [ok]], body)
    assert s.connections == 1
    assert s.requests[0].endswith(b"Content-Length: 7\r\n\r\n{\"a\":1}")
    assert s.requests[0].startswith(HEAD)


def test_chunked_answer_cut_inside_chunks() -> None:
    answer = (b"HTTP/1.1 409 Conflict\r\nTransfer-Encoding: chunked\r\n\r\n"
              b"5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\n\r\n")

    async def body(w: http1.Http1Writer, s: Server) -> None:
        pieces = await w.send(HEAD, b"{}")
        assert pieces == (409, b"hello, world")

    serve([[answer[:60], answer[60:66], answer[66:78], answer[78:]]], body)


def test_chunked_answer_whose_reads_end_in_an_empty_line_inside_a_chunk() -> None:
    # The parser walks the chunks only when the buffer ends with an empty line; a read
    # that ends so inside a chunk's data must not be taken for the end of the message.
    answer = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
              b"6\r\nab\r\n\r\n\r\n3\r\ncde\r\n0\r\n\r\n")
    cut = answer.index(b"ab\r\n\r\n") + 6

    async def body(w: http1.Http1Writer, s: Server) -> None:
        assert await w.send(HEAD, b"{}") == (200, b"ab\r\n\r\ncde")

    serve([[answer[:cut], answer[cut:]]], body)


def test_answer_without_length_ends_when_the_server_closes() -> None:
    # An HTTP/1.0 server (Python's http.server by default) sends no Content-Length and
    # closes the connection after the body: the body is what came before the close.
    answer = b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n"

    async def body(w: http1.Http1Writer, s: Server) -> None:
        assert await w.send(HEAD, b"{}") == (200, b'{"a": 1}')
        assert await w.send(HEAD, b"{}") == (200, b"[]")
        assert w.opened == 2

    # The server closes the connection after each answer list entry it ran out of.
    serve([], body, per_connection=[Server([[answer, b'{"a"', b": 1}"]]),
                                    Server([[answer, b"[]"]])])


def test_an_interim_100_continue_is_skipped() -> None:
    answer = (b"HTTP/1.1 100 Continue\r\n\r\n"
              b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")

    async def body(w: http1.Http1Writer, s: Server) -> None:
        assert await w.send(HEAD, b"{}") == (200, b"{}")

    serve([[answer[:20], answer[20:]]], body)


def test_no_timeout_starts_no_sweeper() -> None:
    ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"

    async def body(w: http1.Http1Writer, s: Server) -> None:
        assert await w.send(HEAD, b"{}", timeout=None) == (200, b"{}")
        assert w._sweeper is None  # the caller bounds the call (the extender client)

    serve([[ok]], body)


def test_connection_close_opens_a_new_connection() -> None:
    closing = b"HTTP/1.1 201 Created\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"

    async def body(w: http1.Http1Writer, s: Server) -> None:
        assert (await w.send(HEAD, b"{}"))[0] == 201
        assert (await w.send(HEAD, b"{}"))[0] == 201
        assert w.opened == 2

    serve([[closing], [closing]], body)


def test_hang_up_before_the_answer_is_a_server_disconnect() -> None:
    async def body(w: http1.Http1Writer, s: Server) -> None:
        with pytest.raises(aiohttp.ServerDisconnectedError):
            await w.send(HEAD, b"{}")

    serve([None], body)


def test_refused_connection_is_a_connector_error() -> None:
    async def main() -> None:
        srv = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = srv.sockets[0].getsockname()[1]
        srv.close()
        await srv.wait_closed()
        w = http1.Http1Writer("127.0.0.1", port, None)
        with pytest.raises(aiohttp.ClientConnectorError):
            await w.send(HEAD, b"{}")

    asyncio.run(main())


def test_a_cancelled_request_does_not_leave_its_answer_to_the_next() -> None:
    late = b"HTTP/1.1 201 Created\r\nContent-Length: 4\r\n\r\nlate"
    fresh = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfresh"

    async def body(w: http1.Http1Writer, s: Server) -> None:
        task = asyncio.ensure_future(w.send(HEAD, b"{}"))
        while not s.requests:  # sent, not yet answered
            await asyncio.sleep(0.001)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await w.send(HEAD, b"{}") == (200, b"fresh")
        assert w.opened == 2

    serve([[b"", b"", late], [fresh]], body)


def test_an_unanswered_request_times_out_and_its_connection_is_not_reused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(http1, "SWEEP_SECONDS", 0.05)
    ok = b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n{}"

    async def body(w: http1.Http1Writer, s: Server) -> None:
        with pytest.raises(TimeoutError):
            await w.send(HEAD, b"{}", timeout=0.1)
        assert await w.send(HEAD, b"{}") == (201, b"{}")
        assert w.opened == 2

    # The first answer comes long after the timeout: the pieces are slept between.
    serve([[b"", *([b""] * 100), ok], [ok]], body)


def test_api_client_send_raises_the_decoded_status_on_an_error() -> None:
    status = (b'{"kind":"Status","apiVersion":"v1","status":"Failure","message":"pods '
              b'\\"p\\" not found","reason":"NotFound","code":404}')
    answer = b"HTTP/1.1 404 Not Found\r\nContent-Length: %d\r\n\r\n%s" % (len(status), status)
    ok = b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n{}"
    server = Server([[answer], [ok]])

    async def main() -> None:
        srv = await asyncio.start_server(server.handle, "127.0.0.1", 0)
        port = srv.sockets[0].getsockname()[1]
        async with ApiClient(f"http://127.0.0.1:{port}", token=lambda: "Bearer t0k") as c:
            with pytest.raises(ApiError) as err:
                await c.send("POST", "/api/v1/namespaces/ns/pods/p/binding", b"{}")
            assert (err.value.status, err.value.reason) == (404, "NotFound")
            assert await c.send("POST", "/apis/events.k8s.io/v1/namespaces/ns/events",
                                b"{}") == 201
        srv.close()
        await srv.wait_closed()

    asyncio.run(asyncio.wait_for(main(), 10))
    first = server.requests[0].split(b"\r\n")
    assert first[0] == b"POST /api/v1/namespaces/ns/pods/p/binding HTTP/1.1"
    assert b"Authorization: Bearer t0k" in first
    assert b"Content-Type: application/json" in first
    assert any(line.startswith(b"Host: 127.0.0.1:") for line in first)


def test_watch_splits_lines_across_chunks_and_keeps_long_ones() -> None:
    """ApiClient.watch's line splitting (aiohttp reads the stream): events cut anywhere,
    several per chunk, blank keep-alive lines, one line far over 128 KiB."""
    events: list[dict[str, Any]] = [
        {"type": "ADDED", "object": {"metadata": {"name": f"p{i}", "resourceVersion": str(i)}}}
        for i in range(20)]
    events[7]["object"]["metadata"]["annotations"] = {"big": "x" * 300_000}
    stream = b"".join(json.dumps(e).encode() + b"\n" + (b"\n" if i % 5 == 0 else b"")
                      for i, e in enumerate(events))
    cuts = [0, 3, 4, 50, 51, 400, 9000, 9001, 200_000, len(stream) - 2, len(stream)]
    pieces = [stream[a:b] for a, b in zip(cuts, cuts[1:], strict=False)]

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n")
        for piece in pieces:
            writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            await writer.drain()
            await asyncio.sleep(0.01)
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        writer.close()

    async def main() -> list[tuple[str, dict[str, object]]]:
        srv = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = srv.sockets[0].getsockname()[1]
        async with ApiClient(f"http://127.0.0.1:{port}") as c:
            got = [e async for e in c.watch("/api/v1/pods")]
        srv.close()
        await srv.wait_closed()
        return got

    got = asyncio.run(asyncio.wait_for(main(), 20))
    assert got == [(e["type"], e["object"]) for e in events]


# -- the chunked parser is incremental ----------------------------------------------------


def _protocol_fed(pieces: Sequence[bytes], limit: int | None = None,
                  ) -> tuple[http1._Answer, list[int], asyncio.Future[tuple[int, bytes]]]:
    """An _Answer fed `pieces` as reads arrive (the protocol a connection runs; the
    framing is pure parsing), with the size of its buffer after each read."""
    loop = asyncio.new_event_loop()
    try:
        conn = http1._Answer()
        conn.limit = limit
        waiter: asyncio.Future[tuple[int, bytes]] = loop.create_future()
        conn.waiter = waiter
        sizes = []
        for piece in pieces:
            conn.data_received(piece)
            sizes.append(len(conn.buf))
        return conn, sizes, waiter
    finally:
        loop.close()


def test_a_chunked_answer_is_consumed_as_it_arrives() -> None:
    # 20000 reads, each a whole chunk whose data is an empty line: every read ends the way
    # a complete message does. Each read's framing is consumed when it is read, not kept
    # to be walked again from the start at the next one (it was 0.6 s per read at 4 MiB).
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    chunk = b"2\r\n\r\n\r\n"
    _, sizes, waiter = _protocol_fed([head] + [chunk] * 20000 + [b"0\r\n\r\n"])
    assert waiter.result() == (200, b"\r\n" * 20000)
    assert max(sizes) <= len(head)


@pytest.mark.parametrize("cut", range(1, 40))
def test_a_chunked_answer_split_anywhere_parses_the_same(cut: int) -> None:
    answer = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
              b"5;name=x\r\nhello\r\nA\r\n, world!!!\r\n0\r\nTrailer: t\r\n\r\n")
    pieces = [answer[i:i + cut] for i in range(0, len(answer), cut)]
    _, _, waiter = _protocol_fed(pieces)
    assert waiter.result() == (200, b"hello, world!!!")


@pytest.mark.parametrize("framing", [
    b"-5\r\nhello\r\n0\r\n\r\n",       # a negative size
    b"0x5\r\nhello\r\n0\r\n\r\n",       # not hex digits only
    b"5\r\nhelloXX0\r\n\r\n",           # data not followed by CRLF
    b"1" * 5000,                        # a size line that never ends
])
def test_bad_chunk_framing_fails_the_answer(framing: bytes) -> None:
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    conn, _, waiter = _protocol_fed([head, framing])
    assert isinstance(waiter.exception(), aiohttp.ServerDisconnectedError)
    assert conn.lost


def test_a_chunked_answer_over_the_limit_fails_as_soon_as_it_passes_it() -> None:
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    chunk = b"400\r\n" + b"x" * 1024 + b"\r\n"
    _, sizes, waiter = _protocol_fed([head] + [chunk] * 8, limit=4096)
    assert isinstance(waiter.exception(), http1.AnswerTooLarge)
