"""The suite's HTTP extender (k8s.io/kube-scheduler/extender/v1), one server on 127.0.0.1
that both sides call: its answers depend on the node's name alone (a hash), so the two
schedulers meet the same verdicts and scores for the same scenario.

  filter      (nodeCacheCapable: NodeNames in and out) rejects a node whose hash is 0 mod 4
              (FailedNodes) and one whose hash is 1 mod 7 (FailedAndUnresolvableNodes).
  prioritize  scores a node hash mod 11: 0..10, MaxExtenderPriority.

Both schedulers call it only for pods that request RESOURCE (managedResources, ignored by
NodeResourcesFit), so the other families never meet it.
"""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from conformance.scenarios import EXTENDER_RESOURCE as RESOURCE

WEIGHT = 2
REJECTED = "the conformance extender rejects this node"
UNRESOLVABLE = "the conformance extender never accepts this node"


def node_hash(name: str) -> int:
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "big")


def config(url: str) -> dict[str, Any]:
    """The extender as KubeSchedulerConfiguration.extenders[] and spec.extenders[] take it."""
    return {"urlPrefix": url, "filterVerb": "filter", "prioritizeVerb": "prioritize",
            "weight": WEIGHT, "nodeCacheCapable": True, "enableHTTPS": False,
            "managedResources": [{"name": RESOURCE, "ignoredByScheduler": True}]}


def filter_nodes(args: dict[str, Any]) -> dict[str, Any]:
    names = [n for n in args.get("NodeNames") or () if isinstance(n, str)]
    ok, failed, unresolvable = [], {}, {}
    for n in names:
        h = node_hash(n)
        if h % 4 == 0:
            failed[n] = REJECTED
        elif h % 7 == 1:
            unresolvable[n] = UNRESOLVABLE
        else:
            ok.append(n)
    return {"NodeNames": ok, "FailedNodes": failed,
            "FailedAndUnresolvableNodes": unresolvable, "Error": ""}


def prioritize(args: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"Host": n, "Score": node_hash(n) % 11}
            for n in args.get("NodeNames") or () if isinstance(n, str)]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        args = json.loads(body or b"{}")
        verb = self.path.rstrip("/").rsplit("/", 1)[-1]
        if verb == "filter":
            out: Any = filter_nodes(args)
        elif verb == "prioritize":
            out = prioritize(args)
        else:
            self.send_error(404)
            return
        data = json.dumps(out).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass


class Extender:
    """The server, in a thread of the runner's process, on a free 127.0.0.1 port."""

    def __init__(self) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Extender:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
