#!/usr/bin/env python3
"""An example kube-scheduler extender, Python standard library only.

It speaks k8s.io/kube-scheduler/extender/v1, so it works with kube-scheduler and with
polsched alike (see policy.yaml next to it), and reproduces the extender tutorials' rule:

  filter      pods labelled want=you may only go to node 10-9-101-66; every other pod
              may go anywhere. Both modes work: with nodeCacheCapable the scheduler sends
              NodeNames and gets NodeNames back, otherwise it sends Nodes (a v1.NodeList)
              and gets the surviving Nodes back. Rejected nodes are listed in FailedNodes
              with the reason, which shows up in the pod's FailedScheduling event.
  prioritize  10 (MaxExtenderPriority) for node 10-9-101-66, 0 for every other node, for
              every pod. The scheduler adds score x weight x 10 to a node's total.
  bind        not implemented (404): leave bindVerb empty.

Run:    python3 policies/extender/example_extender.py --port 8888
Try:    curl -s localhost:8888/filter -d '{"Pod":{"metadata":{"labels":{"want":"you"}}},
          "NodeNames":["10-9-101-66","n2"]}'
Flags:  --host (default 127.0.0.1), --port (default 8888), --node and --label to change
        the rule for clusters whose nodes have other names, -v to log every request.

Answers use the Go field names; requests are read case-insensitively, as Go's
encoding/json reads them.
"""

from __future__ import annotations

import argparse
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MAX_EXTENDER_PRIORITY = 10


class Rule:
    """Pods with `label` (key=value) may only go to `node`; `node` scores highest."""

    def __init__(self, node: str, label: str) -> None:
        key, sep, value = label.partition("=")
        if not sep or not key:
            raise ValueError(f"--label {label!r}: want KEY=VALUE")
        self.node, self.key, self.value = node, key, value

    def reason(self) -> str:
        return f"pods labelled {self.key}={self.value} may only run on node {self.node}"

    def allows(self, pod: dict[str, Any], node_name: str) -> bool:
        labels = _get(_get(pod, "metadata") or {}, "labels") or {}
        return labels.get(self.key) != self.value or node_name == self.node

    def score(self, node_name: str) -> int:
        return MAX_EXTENDER_PRIORITY if node_name == self.node else 0


def _get(obj: Any, key: str) -> Any:
    """A member of a JSON object, the key matched case-insensitively."""
    if not isinstance(obj, dict):
        return None
    if key in obj:
        return obj[key]
    folded = key.lower()
    for k, v in obj.items():
        if k.lower() == folded:
            return v
    return None


def _node_name(node: Any) -> str:
    name = _get(_get(node, "metadata"), "name")
    return name if isinstance(name, str) else ""


def candidates(args: dict[str, Any]) -> tuple[list[str], list[Any] | None]:
    """Node names from ExtenderArgs, plus the node objects when Nodes was sent."""
    names = _get(args, "NodeNames")
    if isinstance(names, list):
        return [n for n in names if isinstance(n, str)], None
    items = _get(_get(args, "Nodes"), "items")
    if isinstance(items, list):
        return [_node_name(n) for n in items], items
    return [], None


def filter_nodes(rule: Rule, args: dict[str, Any]) -> dict[str, Any]:
    """ExtenderFilterResult for ExtenderArgs."""
    pod = _get(args, "Pod") or {}
    names, nodes = candidates(args)
    failed = {n: rule.reason() for n in names if not rule.allows(pod, n)}
    result: dict[str, Any] = {"Nodes": None, "NodeNames": None, "FailedNodes": failed,
                              "FailedAndUnresolvableNodes": {}, "Error": ""}
    if nodes is None:
        result["NodeNames"] = [n for n in names if n not in failed]
    else:
        result["Nodes"] = {"metadata": {},
                           "items": [n for n in nodes if _node_name(n) not in failed]}
    return result


def prioritize_nodes(rule: Rule, args: dict[str, Any]) -> list[dict[str, Any]]:
    """HostPriorityList for ExtenderArgs."""
    names, _ = candidates(args)
    return [{"Host": n, "Score": rule.score(n)} for n in names]


class Handler(BaseHTTPRequestHandler):
    # HTTP/1.1 keeps the scheduler's connection open between pods.
    protocol_version = "HTTP/1.1"
    # Headers and body are separate writes: without this, Nagle's algorithm and the
    # client's delayed ACK add about 40 ms to every answer on a kept-alive connection.
    disable_nagle_algorithm = True
    server_version = "polsched-example-extender/1"
    rule: Rule
    verbose = False

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = 0
        body = self.rfile.read(length) if length > 0 else b""
        verb = self.path.rstrip("/").rsplit("/", 1)[-1]
        if verb not in ("filter", "prioritize"):
            self._answer(404, {"Error": f"verb {verb!r} is not implemented"})
            return
        try:
            args = json.loads(body or b"null")
        except ValueError as exc:
            self._answer(400, {"Error": f"request body is not JSON: {exc}"})
            return
        if not isinstance(args, dict):
            self._answer(400, {"Error": "request body is not an ExtenderArgs object"})
            return
        if verb == "filter":
            self._answer(200, filter_nodes(self.rule, args))
        else:
            self._answer(200, prioritize_nodes(self.rule, args))

    def do_GET(self) -> None:  # noqa: N802
        # A liveness/readiness probe target.
        if self.path in ("/healthz", "/readyz"):
            self._answer(200, "ok")
        else:
            self._answer(404, {"Error": "POST filter or prioritize"})

    def _answer(self, status: int, value: Any) -> None:
        data = json.dumps(value, separators=(",", ":")).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        if self.verbose:
            super().log_message(format, *args)


def make_server(host: str, port: int, rule: Rule, verbose: bool = False) -> ThreadingHTTPServer:
    handler = type("RuleHandler", (Handler,), {"rule": rule, "verbose": verbose})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    return server


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "",
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8888, help="port (default 8888)")
    parser.add_argument("--node", default="10-9-101-66",
                        help="the only node for labelled pods, and the best-scored node")
    parser.add_argument("--label", default="want=you", help="the pod label KEY=VALUE")
    parser.add_argument("-v", "--verbose", action="store_true", help="log every request")
    opts = parser.parse_args(argv)
    try:
        rule = Rule(opts.node, opts.label)
    except ValueError as exc:
        parser.error(str(exc))
    server = make_server(opts.host, opts.port, rule, opts.verbose)
    host, port = server.server_address[:2]
    print(f"example extender on http://{host!s}:{port}/ : {rule.reason()}",
          file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
