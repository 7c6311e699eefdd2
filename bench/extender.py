#!/usr/bin/env python3
"""The bench extender: a kube-scheduler extender (k8s.io/kube-scheduler/extender/v1) that
answers from node names alone, so both schedulers pay the same, small cost per call and
the bench measures the scheduler's side of the exchange.

  filter      (nodeCacheCapable: NodeNames in, NodeNames out) rejects every bench node
              whose number is a multiple of 10, with a reason in FailedNodes.
  prioritize  scores a node (its number mod 11): 0..10, MaxExtenderPriority.

  python bench/extender.py --port 0     # prints "ready <port>" once listening

On SIGTERM it prints a JSON line with the number of calls per verb.

It speaks HTTP/1.1 itself on an asyncio.Protocol (kept-alive connections, requests with
a Content-Length, as both schedulers send them) rather than through aiohttp's server:
every scheduler calls it twice per pod, and on the bench's two cores aiohttp's ~0.8 ms
per call was CPU taken from the scheduler under test and the API server alike. The
answers are the same JSON as before.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from typing import Any, cast

REASON = "the bench extender rejects every tenth node"
_HEAD_LIMIT = 64 * 1024
_REASONS = {200: b"OK", 400: b"Bad Request", 404: b"Not Found", 405: b"Method Not Allowed",
            411: b"Length Required"}


def node_number(name: str) -> int:
    digits = name.rsplit("-", 1)[-1]
    return int(digits) if digits.isdigit() else 1


def _names(args: dict[str, Any]) -> list[str]:
    names = args.get("NodeNames") or args.get("nodenames") or args.get("nodeNames")
    if isinstance(names, list):
        return [n for n in names if isinstance(n, str)]
    items = (args.get("Nodes") or {}).get("items") or []
    return [(n.get("metadata") or {}).get("name", "") for n in items]


def filter_answer(args: dict[str, Any]) -> Any:
    names = _names(args)
    kept = [n for n in names if node_number(n) % 10 != 0]
    failed = {n: REASON for n in names if node_number(n) % 10 == 0}
    return {"NodeNames": kept, "FailedNodes": failed, "Error": ""}


def prioritize_answer(args: dict[str, Any]) -> Any:
    return [{"Host": n, "Score": node_number(n) % 11} for n in _names(args)]


ROUTES = {"/filter": ("filter", filter_answer), "/prioritize": ("prioritize", prioritize_answer)}


class Connection(asyncio.Protocol):
    """One client connection: requests in, answers out, in order."""

    def __init__(self, calls: dict[str, int]) -> None:
        self.calls = calls
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while self.transport is not None:
            buf = self.buf
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > _HEAD_LIMIT:
                    self._answer(400, b'{"Error":"header too long"}', close=True)
                return
            lines = bytes(buf[:end]).decode("latin-1").split("\r\n")
            method, path, version = (lines[0].split(" ", 2) + ["", ""])[:3]
            length = -1
            close = version == "HTTP/1.0"
            for line in lines[1:]:
                key, _, value = line.partition(":")
                key = key.strip().lower()
                if key == "content-length":
                    length = int(value)
                elif key == "connection":
                    value = value.strip().lower()
                    close = value == "close" or (close and value != "keep-alive")
                elif key == "transfer-encoding":
                    length = -2
            if length < 0:
                self._answer(411, b'{"Error":"a request body needs a Content-Length"}',
                             close=True)
                return
            start = end + 4
            if len(buf) - start < length:
                return
            body = bytes(buf[start:start + length])
            del buf[:start + length]
            self._serve(method, path.split("?", 1)[0], body, close)

    def _serve(self, method: str, path: str, body: bytes, close: bool) -> None:
        route = ROUTES.get(path)
        if route is None:
            self._answer(404, b"404 page not found\n", close)
            return
        if method != "POST":
            self._answer(405, b'{"Error":"POST only"}', close)
            return
        verb, answer = route
        self.calls[verb] += 1
        try:
            args = json.loads(body)
        except ValueError:
            self._answer(400, b'{"Error":"the body is not JSON"}', close)
            return
        self._answer(200, json.dumps(answer(args), separators=(",", ":")).encode(), close)

    def _answer(self, status: int, payload: bytes, close: bool) -> None:
        assert self.transport is not None
        self.transport.write(
            b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n%s"
            % (status, _REASONS.get(status, b"Error"), len(payload),
               b"Connection: close\r\n" if close else b"", payload))
        if close:
            self.transport.close()
            self.transport = None


async def serve(host: str, port: int) -> dict[str, int]:
    calls = {"filter": 0, "prioritize": 0}
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Connection(calls), host, port, backlog=1024)
    port = server.sockets[0].getsockname()[1]  # the port the OS picked for --port 0
    print(f"ready {port}", flush=True)
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    await stop.wait()
    server.close()
    return calls


def main() -> int:
    p = argparse.ArgumentParser(description="bench extender (filter + prioritize)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    a = p.parse_args()
    print(json.dumps(asyncio.run(serve(a.host, a.port))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
