"""Real HTTP extenders for the extender tests: http.server on 127.0.0.1, an ephemeral port,
a thread per connection, HTTP/1.1 keep-alive like a Go extender.

A route maps a path ("/filter") to a function of the decoded request body that returns
what to answer: a JSON-able value (200), or an Answer for any status and raw bytes. The
server records every request and counts the TCP connections it accepted.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar

from polsched.extender.config import ExtenderConfig, ManagedResource
from polsched.framework.types import NodeInfo, PodInfo
from tests import builders

T = TypeVar("T")


@dataclass(frozen=True)
class Answer:
    """status 0: close the connection without answering."""

    status: int = 200
    body: bytes = b""


DROP = Answer(0)


@dataclass(frozen=True)
class Request:
    path: str
    body: bytes
    headers: Mapping[str, str]

    @property
    def json(self) -> Any:
        return json.loads(self.body)


Route = Callable[[Any], Any]


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], owner: FakeExtender) -> None:
        self.owner = owner
        super().__init__(address, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that gave up (timeout tests) makes the handler's write fail: expected.
        pass

    def verify_request(self, request: Any, client_address: Any) -> bool:
        # Called once per accepted TCP connection.
        with self.owner.lock:
            self.owner.connections += 1
        return True


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out as two writes; without this, Nagle and delayed ACKs add
    # 40 ms to every answer on a kept-alive connection.
    disable_nagle_algorithm = True
    server: _Server

    def do_POST(self) -> None:  # noqa: N802
        owner = self.server.owner
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with owner.lock:
            owner.requests.append(Request(self.path, body, dict(self.headers.items())))
        route = owner.routes.get(self.path)
        if route is None:
            answer = Answer(404, b"404 page not found\n")
        else:
            try:
                parsed = json.loads(body) if body else None
            except ValueError:
                parsed = None
            result = route(parsed)
            answer = result if isinstance(result, Answer) else Answer(
                200, json.dumps(result).encode())
        if answer.status == 0:
            self.close_connection = True
            return
        self.send_response(answer.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer.body)))
        self.end_headers()
        self.wfile.write(answer.body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass


@dataclass
class FakeExtender:
    routes: dict[str, Route]
    port: int = 0
    requests: list[Request] = field(default_factory=list)
    connections: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    # Set at teardown so that handlers parked by `hang` return.
    released: threading.Event = field(default_factory=threading.Event)
    _server: _Server | None = None

    def start(self) -> FakeExtender:
        self._server = _Server(("127.0.0.1", self.port), self)
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True).start()
        return self

    def stop(self) -> None:
        self.released.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def bodies(self, path: str) -> list[Any]:
        with self.lock:
            return [r.json for r in self.requests if r.path == path]

    def hang(self, _body: Any) -> Any:
        """A route that never answers (until the test ends)."""
        self.released.wait(30)
        return {}


def free_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def run(coro: Coroutine[Any, Any, T], timeout: float = 20) -> T:
    """Run a test coroutine on a fresh loop; a hang fails the test instead of pytest's
    global timeout."""
    return asyncio.run(asyncio.wait_for(coro, timeout))


def config(url: str, **kw: Any) -> ExtenderConfig:
    managed = tuple(ManagedResource(n) for n in kw.pop("managed", ()))
    return ExtenderConfig(url_prefix=url, managed_resources=managed, **kw)


def make_pod(name: str = "p", labels: dict[str, str] | None = None,
             containers: list[dict[str, Any]] | None = None,
             init_containers: list[dict[str, Any]] | None = None) -> PodInfo:
    p = (builders.make_pod().typed().name(name).namespace("default").uid(f"uid-{name}")
         .labels(labels or {}).containers(containers or [{"name": "c", "image": "pause"}]))
    if init_containers:
        p.spec(initContainers=init_containers)
    return p.info()


def make_node(name: str, labels: dict[str, str] | None = None) -> NodeInfo:
    return (builders.make_node().typed().name(name).labels(labels or {})
            .allocatable({"cpu": "4", "memory": "8Gi", "pods": "110"}).info())
