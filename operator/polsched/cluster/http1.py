"""A lean HTTP/1.1 client for the scheduler's per-pod writes (the Binding and the event).

Every bound pod costs two small POSTs whose answers nobody reads. Through aiohttp each
costs ~80-90 us of CPU (URL parsing, header multidicts, the request and response objects,
the parser, the connector's bookkeeping): on this 2-core bench it was the largest part of
polsched's CPU per pod after the decision (bench/NOTES.md). Here a request is one bytes
join written to a kept-alive connection, and the answer is parsed only as far as needed
to know where it ends (Content-Length or chunked) and its status; only a non-2xx body is
decoded (by the caller). Everything else (GET, LIST, WATCH, PATCH, ...) stays on aiohttp.

Failures look like aiohttp's to the callers (binder, events), which already tell them
apart: a connection that cannot be opened raises aiohttp.ClientConnectorError (the
request was never sent); one lost before the whole answer arrived raises
aiohttp.ServerDisconnectedError (it may have been applied). A cancelled request (a
timeout) closes its connection: its answer must not be read as the next request's.
No request is retried here: a POST is not idempotent.

An answer can be bounded (`send(..., max_body=N)`, the extender client's answer cap): a
body announced larger than N, or growing past it, fails the request with AnswerTooLarge
as soon as that is known and closes the connection, so at most N plus one read is ever
buffered. A connection can be restricted to some addresses (`address_check`, the
extender destination policy): the host is resolved and only addresses the check does
not refuse are connected to; none left raises DestinationRefused.
"""

from __future__ import annotations

import asyncio
import collections
import socket
import ssl
import time
from collections.abc import Callable
from typing import cast

import aiohttp
from aiohttp.client_reqrep import ConnectionKey

# A kept-alive connection idle for longer is closed rather than reused (aiohttp's
# keepalive_timeout here; the API server closes idle connections after 90 s).
IDLE_SECONDS = 50.0
_HEAD_LIMIT = 64 * 1024
# How often the requests in flight are checked against their timeouts.
SWEEP_SECONDS = 1.0
# asyncio's TLS transport reads into a buffer of 256 KiB per connection (sslproto
# SSLProtocol.max_size), zero-filled, so resident: with a Binding or an event in flight on
# each of up to ~200 connections that was ~20-50 MB of RSS for answers of a few hundred
# bytes. These connections read into 16 KiB (larger answers just take more reads).
SSL_READ_BUFFER = 16 * 1024


class AnswerTooLarge(ValueError):
    """The answer's body is larger than the request's max_body."""

    def __init__(self, limit: int, announced: int | None = None) -> None:
        self.limit = limit
        self.announced = announced
        super().__init__(f"answer body larger than {limit} bytes"
                         + (f" (Content-Length {announced})" if announced is not None else ""))


class DestinationRefused(OSError):
    """Every address the host resolves to is refused by the address check."""


_HEX_DIGITS = frozenset(b"0123456789abcdefABCDEF")
# A chunk-size line (the size, any extensions) or a trailer line longer than this is
# refused: nothing we talk to sends either.
_LINE_LIMIT = 4096
# _Answer.chunk_left when not inside a chunk's data:
_AFTER_DATA = -2  # the CRLF that ends a chunk's data
_SIZE_LINE = -1   # the next chunk-size line
_TRAILERS = -3    # after the last chunk: trailer lines up to an empty line


class _Answer(asyncio.Protocol):
    """One connection: writes a request, collects its answer.

    The answer is parsed as it arrives, each byte once: the head when its end has come,
    then a Content-Length body by counting, and a chunked body chunk by chunk into
    `body` (the framing consumed from `buf` as it is read). A 4 MiB chunked answer in
    small reads used to be walked from its start on every read."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.waiter: asyncio.Future[tuple[int, bytes]] | None = None
        self.lost = False
        self.close_after = False
        self.idle_since = 0.0
        self.deadline = 0.0  # loop time by which the answer must have come
        # (status, body start) of an answer whose body ends when the server closes.
        self.until_close: tuple[int, int] | None = None
        self.limit: int | None = None  # the request's max_body
        self.reset()

    def reset(self) -> None:
        """Ready for the next answer."""
        del self.buf[:]
        self.until_close = None
        self.scanned = 0  # bytes of buf searched for the head's end
        # The parsed head: (status, Content-Length or -1, chunked, body start in buf).
        self.head: tuple[int, int, bool, int] | None = None
        self.body = bytearray()  # a chunked answer's body so far
        self.chunk_left = _SIZE_LINE  # data bytes left in the chunk, or where we are
        self.received = 0  # a chunked answer's bytes after the head, framing counted

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # Any event loop's transport (uvloop's are not asyncio.Transport subclasses).
        self.transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        w = self.waiter
        if w is not None and not w.done() and self.until_close is not None and exc is None:
            status, start = self.until_close
            w.set_result((status, bytes(self.buf[start:])))
            self.reset()
            return
        if w is not None and not w.done():
            w.set_exception(aiohttp.ServerDisconnectedError(
                f"Server disconnected: {exc}" if exc else None))

    def data_received(self, data: bytes) -> None:
        w = self.waiter
        if w is None or w.done():  # nothing asked: a stray byte makes the connection unusable
            self.lost = True
            if self.transport is not None:
                self.transport.close()
            return
        self.buf += data
        try:
            answer = self._parse(len(data))
        except ValueError as err:
            self.lost = True
            self.reset()
            w.set_exception(err if isinstance(err, AnswerTooLarge)
                            else aiohttp.ServerDisconnectedError(f"bad answer: {err}"))
            if self.transport is not None:
                self.transport.close()
            return
        if answer is not None:
            self.reset()
            w.set_result(answer)

    def _parse(self, new: int) -> tuple[int, bytes] | None:
        """The answer when complete; `new` bytes at the end of buf arrived just now."""
        if self.head is None:
            if not self._parse_head():
                return None
            assert self.head is not None
            new = len(self.buf) - self.head[3]  # the body bytes that came with the head
        status, length, chunked, start = self.head
        buf = self.buf
        limit = self.limit
        if chunked:
            self.received += new
            if limit is not None and self.received > limit:
                raise AnswerTooLarge(limit)
            if start:  # the head is parsed: drop it, the body is read from buf's start
                del buf[:start]
                self.head = (status, length, chunked, 0)
            if not self._dechunk():
                return None
            return status, bytes(self.body)
        if length >= 0:
            if len(buf) - start < length:
                return None
            return status, bytes(buf[start:start + length])
        if limit is not None and len(buf) - start > limit:
            raise AnswerTooLarge(limit)
        if status in (204, 304):
            return status, b""
        # No length: the body ends when the server closes (an HTTP/1.0 server, never the
        # API server); connection_lost completes the answer.
        self.until_close = (status, start)
        return None

    def _parse_head(self) -> bool:
        """Parse the head once its end has come (self.head); False until then."""
        buf = self.buf
        end = buf.find(b"\r\n\r\n", max(self.scanned - 3, 0))
        if end < 0:
            self.scanned = len(buf)
            if len(buf) > _HEAD_LIMIT:
                raise ValueError("header too long")
            return False
        if len(buf) < 13 or buf[:7] != b"HTTP/1." or buf[12] not in b" \r":
            raise ValueError(f"status line {bytes(buf[:80])!r}")
        status = int(buf[9:12])
        # Header names are case-insensitive: search a lower-cased copy of the head.
        head = bytes(buf[:end + 2]).lower()
        close = buf[7:8] == b"0"  # HTTP/1.0
        length = -1
        chunked = False
        at = head.find(b"\r\ncontent-length:")
        if at >= 0:
            length = int(head[at + 17:head.index(b"\r\n", at + 2)])
        at = head.find(b"\r\ntransfer-encoding:")
        if at >= 0:
            chunked = b"chunked" in head[at + 20:head.index(b"\r\n", at + 2)]
        at = head.find(b"\r\nconnection:")
        if at >= 0:
            value = head[at + 13:head.index(b"\r\n", at + 2)].strip()
            close = value == b"close" or (close and value != b"keep-alive")
        start = end + 4
        if 100 <= status < 200:  # an interim answer (100 Continue): the real one follows
            del buf[:start]
            self.scanned = 0
            return self._parse_head()
        limit = self.limit
        if limit is not None and not chunked and length > limit:
            raise AnswerTooLarge(limit, length)
        self.close_after = close
        self.head = (status, length, chunked, start)
        return True

    def _dechunk(self) -> bool:
        """Move what has come of a chunked body from buf into body, consuming the
        framing; True when the message is complete (last chunk and trailers)."""
        buf, body = self.buf, self.body
        while True:
            left = self.chunk_left
            if left > 0:
                take = min(left, len(buf))
                body += buf[:take]
                del buf[:take]
                self.chunk_left = left - take
                if self.chunk_left:
                    return False
                self.chunk_left = _AFTER_DATA
            elif left == _AFTER_DATA:
                if len(buf) < 2:
                    return False
                if buf[:2] != b"\r\n":
                    raise ValueError("chunk data not followed by CRLF")
                del buf[:2]
                self.chunk_left = _SIZE_LINE
            else:
                nl = buf.find(b"\r\n")
                if nl < 0:
                    if len(buf) > _LINE_LIMIT:
                        raise ValueError("chunk-size or trailer line too long")
                    return False
                line = bytes(buf[:nl])
                del buf[:nl + 2]
                if left == _TRAILERS:
                    if not line:
                        return True
                    continue
                size_text = line.split(b";", 1)[0].strip()
                if not size_text or not _HEX_DIGITS.issuperset(size_text):
                    raise ValueError(f"chunk size {size_text[:20]!r}")
                size = int(size_text, 16)
                self.chunk_left = size if size else _TRAILERS


def _shrink_read_buffer(transport: asyncio.BaseTransport) -> None:
    """SSL_READ_BUFFER for an asyncio TLS transport (CPython's sslproto; another loop's
    transport, uvloop's, is left as it is). After the handshake, no read is under way."""
    proto = getattr(transport, "_ssl_protocol", None)
    if proto is None or getattr(proto, "max_size", 0) <= SSL_READ_BUFFER \
            or not isinstance(getattr(proto, "_ssl_buffer", None), bytearray):
        return
    proto.max_size = SSL_READ_BUFFER
    proto._ssl_buffer = bytearray(SSL_READ_BUFFER)
    proto._ssl_buffer_view = memoryview(proto._ssl_buffer)


class Http1Writer:
    """Kept-alive HTTP/1.1 connections to one API server, for small writes.

    `send(head, body)` writes `head` (the request line and headers up to, not including,
    Content-Length) and the body, and returns (status, answer body). Connections are
    opened as needed (one per concurrent request) and reused most recent first."""

    def __init__(self, host: str, port: int, ssl_context: ssl.SSLContext | None,
                 server_hostname: str | None = None,
                 address_check: Callable[[str, int], str] | None = None) -> None:
        self.host = host
        # (ip, port) -> why it is refused, "" when it is not (None: connect as given).
        self._address_check = address_check
        self.port = port
        self._ssl = ssl_context
        self._server_hostname = server_hostname if ssl_context is not None else None
        self._idle: collections.deque[_Answer] = collections.deque()
        self._busy: set[_Answer] = set()
        self._sweeper: asyncio.Task[None] | None = None
        self._key = ConnectionKey(host, port, ssl_context is not None,
                                  ssl_context if ssl_context is not None else True,
                                  None, None, None, server_hostname)
        self.opened = 0  # connections opened, for tests and curiosity

    async def _allowed_address(self) -> str:
        """The host resolved, and the first address the check does not refuse: the
        connection goes to the address checked (a name that resolves differently on the
        next lookup cannot slip past)."""
        assert self._address_check is not None
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)
        refused: list[str] = []
        for *_, sockaddr in infos:
            ip = str(sockaddr[0])
            why = self._address_check(ip, self.port)
            if not why:
                return ip
            refused.append(why)
        raise DestinationRefused(
            f"{self.host}:{self.port} refused by the destination policy: "
            + ("; ".join(dict.fromkeys(refused)) or "it resolves to no address"))

    async def _connect(self) -> _Answer:
        loop = asyncio.get_running_loop()
        try:
            host = self.host
            if self._address_check is not None:
                host = await self._allowed_address()
            if self._ssl is not None:
                transport, proto = await loop.create_connection(
                    _Answer, host, self.port, ssl=self._ssl,
                    server_hostname=self._server_hostname or self.host)
                _shrink_read_buffer(transport)
            else:
                _, proto = await loop.create_connection(_Answer, host, self.port)
        except OSError as err:
            raise aiohttp.ClientConnectorError(self._key, err) from err
        except ssl.SSLError as err:  # an OSError subclass, kept for clarity
            raise aiohttp.ClientConnectorError(self._key, err) from err
        self.opened += 1
        return proto

    def _take(self) -> _Answer | None:
        idle = self._idle
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            if not conn.lost and now - conn.idle_since < IDLE_SECONDS:
                return conn
            if conn.transport is not None:
                conn.transport.close()
        return None

    async def send(self, head: bytes, body: bytes,
                   timeout: float | None = 60.0,
                   max_body: int | None = None) -> tuple[int, bytes]:
        """Raises TimeoutError when no whole answer came within `timeout` (to about a
        second: one sweeper checks every request in flight, instead of a timer each).
        None: no timeout here, the caller bounds the call itself (cancelling it closes
        the connection). Raises AnswerTooLarge when the answer's body exceeds
        `max_body` bytes (None: unbounded)."""
        conn = self._take() or await self._connect()
        assert conn.transport is not None
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[tuple[int, bytes]] = loop.create_future()
        conn.reset()
        conn.waiter = waiter
        conn.limit = max_body
        if timeout is None:
            conn.deadline = float("inf")
        else:
            conn.deadline = loop.time() + timeout
            if self._sweeper is None:
                self._sweeper = loop.create_task(self._sweep(),
                                                 name="polsched-http1-timeouts")
        self._busy.add(conn)
        conn.transport.write(b"%sContent-Length: %d\r\n\r\n%s" % (head, len(body), body))
        try:
            answer = await waiter
        except BaseException:
            # Cancelled, timed out or lost: the connection's state is unknown.
            conn.lost = True
            conn.transport.close()
            raise
        finally:
            self._busy.discard(conn)
        conn.waiter = None
        if conn.close_after or conn.lost:
            conn.transport.close()
        else:
            conn.idle_since = time.monotonic()
            self._idle.append(conn)
        return answer

    async def _sweep(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(SWEEP_SECONDS)
            now = loop.time()
            for conn in [c for c in self._busy if c.deadline <= now]:
                w = conn.waiter
                if w is not None and not w.done():
                    w.set_exception(TimeoutError())

    def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        while self._idle:
            conn = self._idle.pop()
            if conn.transport is not None:
                conn.transport.close()
