"""Extender fuzz cases: a policy with an HTTP extender, a small cluster, a preemptor, and
how the extender behaves per verb; a hostile extender on 127.0.0.1 that behaves so; and
the run through production code (the policy loaded, its extenders built by
extender.client.build_extenders, its pipeline by scheduler.pipelines.build_pipeline).

Behaviours, per verb (filter, prioritize, preempt, and bind for some cases), each drawn
with its parameters when the case is generated, so that the case replays from its seed
and index:
- honest: a valid answer about what was sent (a subset of the nodes, scores, a subset of
  the offered victims);
- lie: a well-formed answer about what was not sent: nodes that were not candidates or do
  not exist, every pod of the cluster as victims (kube-system ones of priority 2e9
  included), negative PDB counts, duplicates, scores far past the range;
- hostile: a malformed or abusive body (a 600 KB Error of terminal escapes, wrong types,
  JSON nested 100,000 deep, NaN, 1e999, invalid UTF-8, not JSON);
- slow: the answer after a delay around the httpTimeout;
- trickle: the answer a few bytes at a time (head or body), past the timeout or not;
- oversized: an answer past the 4 MiB bound: declared, streamed or chunked;
- http: broken HTTP (no answer, 500, a redirect, a close-delimited HTTP/1.0 body, an
  absurd chunk size, a 1 MiB header line, a short body, not HTTP at all).

The invariants (checked by `run`): nothing but PipelineError escapes the scheduling cycle
and nothing but ExtenderError the client's calls; each call ends within its httpTimeout
(plus slack for a loaded machine); every preemption victim was offered on its node and is
of lower priority than the preemptor; FailedNodes name only nodes that were sent, and the
feasible nodes are among them; every message is bounded and printable; a bind the
extender claims is reported (no pod lost), and reported bound only when the watch shows
the pod on its node (nothing assumed without confirmation).
"""

from __future__ import annotations

import asyncio
import json
import random
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from polsched.api import load_policy
from polsched.cluster.client import ApiClient
from polsched.extender.client import MAX_REASON_CHARS, build_extenders
from polsched.framework import NodeInfo, PodInfo, Snapshot
from polsched.framework import listers as ls
from polsched.framework.diagnosis import PipelineError
from polsched.framework.interfaces import Extender, ExtenderError, Handle, Victims
from polsched.framework.messages import (
    ELLIPSIS,
    MAX_CONDITION_MESSAGE_CHARS,
    condition_message,
)
from polsched.framework.nominator import Nominator
from polsched.plugins import CATALOG
from polsched.scheduler.algorithm import schedule_pod
from polsched.scheduler.binder import Binder, BindOutcome
from polsched.scheduler.pipelines import build_pipeline

Json = dict[str, Any]

VERBS = ("filter", "prioritize", "preempt")  # and bind, drawn apart
MODES = ("honest", "lie", "hostile", "slow", "trickle", "oversized", "http")
# A call may take its httpTimeout plus this much (a loaded machine, the worker's own CPU).
SLACK_SECONDS = 3.0
PORT = "{port}"

# Escape sequences a terminal obeys: clear screen, set title, hyperlink, bidi override.
ESCAPES = "\x1b[2J\x1b]0;owned\x07\x1b]8;;http://x\x1b\\\u202e\r\n\x00"


# -- generation ------------------------------------------------------------------------
def _behaviour(rng: random.Random, timeout: float) -> Json:
    mode = rng.choice(MODES)
    b: Json = {"mode": mode, "seed": rng.randrange(2**32)}
    if mode == "hostile":
        b["payload"] = rng.randrange(len(_HOSTILE))
    elif mode == "slow":
        b["delay"] = round(timeout * rng.choice((0.2, 0.8, 1.2, 3.0)), 3)
        b["then"] = rng.choice(("honest", "lie"))
    elif mode == "trickle":
        b["part"] = rng.choice(("head", "body"))
        b["piece"] = rng.choice((1, 7, 64))
        b["interval"] = round(timeout * rng.choice((0.01, 0.05, 0.3)), 4)
        b["then"] = rng.choice(("honest", "lie"))
    elif mode == "oversized":
        b["how"] = rng.choice(("declared", "stream", "chunked"))
        b["bytes"] = rng.choice((4 * 2**20 + 2**16, 8 * 2**20, 64 * 2**20))
    elif mode == "http":
        b["what"] = rng.choice(_HTTP)
    return b


def _running_pod(rng: random.Random, i: int, node: str) -> Json:
    system = rng.random() < 0.25
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"r{i}", "namespace": "kube-system" if system else "ns",
                         "uid": f"uid-r{i}", "labels": {"app": rng.choice(("db", "web"))}},
            "spec": {"nodeName": node, "schedulerName": "fuzz-ext",
                     "priority": 2_000_000_000 if system else rng.choice((0, 50, 100, 1000)),
                     "containers": [{"name": "c", "image": "x", "resources": {
                         "requests": {"cpu": rng.choice(("500m", "1", "2"))}}}]},
            "status": {"phase": "Running"}}


def generate(rng: random.Random) -> Json:
    """The inputs of an "extender" case (generators.generate adds kind, seed, index)."""
    timeout = rng.choice((0.2, 0.3, 0.5))
    cache_capable = rng.random() < 0.5
    ext: Json = {"urlPrefix": f"http://127.0.0.1:{PORT}/", "nodeCacheCapable": cache_capable,
                 "httpTimeout": f"{int(timeout * 1000)}ms", "ignorable": rng.random() < 0.3}
    verbs = [v for v in VERBS if rng.random() < 0.7] or ["preempt"]
    for verb in verbs:
        ext[f"{verb}Verb"] = verb
    if "prioritize" in verbs:
        ext["weight"] = rng.randint(1, 5)
    nodes: list[Json] = [{"apiVersion": "v1", "kind": "Node",
                          "metadata": {"name": f"n{i}",
                                       "labels": {"kubernetes.io/hostname": f"n{i}"}},
                          "spec": {}, "status": {"allocatable": {
                              "cpu": "2", "memory": "8Gi", "pods": "110"}}}
                         for i in range(rng.randint(1, 5))]
    running = [_running_pod(rng, i, rng.choice(nodes)["metadata"]["name"])
               for i in range(rng.randint(0, 8))]
    preemptor = {"apiVersion": "v1", "kind": "Pod",
                 "metadata": {"name": "preemptor", "namespace": "ns", "uid": "uid-preemptor"},
                 "spec": {"schedulerName": "fuzz-ext",
                          "priority": rng.choice((0, 100, 100, 1000)),
                          "containers": [{"name": "c", "image": "x", "resources": {
                              "requests": {"cpu": rng.choice(("500m", "1", "2"))}}}]},
                 "status": {"phase": "Pending"}}
    case: Json = {"policy": {"apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
                             "metadata": {"name": "fuzz-ext"},
                             "spec": {"schedulerName": "fuzz-ext", "extenders": [ext]}},
                  "nodes": nodes, "running": running, "preemptor": preemptor,
                  "timeout": timeout,
                  "behaviour": {v: _behaviour(rng, timeout) for v in verbs},
                  # the direct calls: which nodes are sent, which victims offered
                  "subset": rng.randrange(2**32)}
    if rng.random() < 0.4:  # the extender binds: what the watch shows after it answers
        ext["bindVerb"] = "bind"
        # An ignorable binder that fails hands the bind to the API server's Binding,
        # which an extender case has none of (only the e2e tests have a real one).
        ext["ignorable"] = False
        case["behaviour"]["bind"] = _behaviour(rng, timeout)
        case["watch"] = rng.choice(("none", "there", "elsewhere"))
    return case


# -- answers ------------------------------------------------------------------------------
def _sent_nodes(body: Any) -> list[str]:
    if not isinstance(body, dict):
        return []
    if body.get("NodeNames") is not None:
        return [str(n) for n in body["NodeNames"]]
    items = (body.get("Nodes") or {}).get("items") or []
    return [str((n.get("metadata") or {}).get("name")) for n in items]


def offered_uids(body: Any) -> dict[str, set[str]]:
    """node -> the UIDs of the victims a preempt request offered there."""
    if not isinstance(body, dict):
        return {}
    out: dict[str, set[str]] = {}
    for key in ("NodeNameToMetaVictims", "NodeNameToVictims"):
        for node, victims in (body.get(key) or {}).items():
            pods = (victims or {}).get("Pods") or []
            out[node] = {str(p.get("UID") or (p.get("metadata") or {}).get("uid"))
                         for p in pods}
    return out


def _honest(verb: str, body: Any, rng: random.Random) -> Any:
    if verb == "bind":
        return {"Error": ""}
    sent = _sent_nodes(body)
    if verb == "filter":
        keep = [n for n in sent if rng.random() < 0.7]
        failed = {n: "the extender says no" for n in sent if n not in keep}
        if isinstance(body, dict) and body.get("NodeNames") is not None:
            return {"NodeNames": keep, "FailedNodes": failed}
        items = [n for n in ((body or {}).get("Nodes") or {}).get("items") or []
                 if (n.get("metadata") or {}).get("name") in keep]
        return {"Nodes": {"items": items}, "FailedNodes": failed}
    if verb == "prioritize":
        return [{"Host": n, "Score": rng.randint(0, 10)} for n in sent]
    offer = offered_uids(body)
    return {"NodeNameToMetaVictims": {
        node: {"Pods": [{"UID": u} for u in sorted(uids) if rng.random() < 0.7]
               or [{"UID": u} for u in sorted(uids)][:1], "NumPDBViolations": 0}
        for node, uids in offer.items() if rng.random() < 0.8}}


def _lie(verb: str, body: Any, rng: random.Random, cluster: list[Json]) -> Any:
    if verb == "bind":  # success claimed whatever was done, or an error of escapes
        return rng.choice(({"Error": ""}, {}, {"Error": ESCAPES * 5000}))
    sent = _sent_nodes(body)
    ghosts = ["ghost", "kube-system", "n0", "n9", "n1\x1b[2J", "", "n0 "]
    if verb == "filter":
        # ghosts among the feasible nodes (refused whole), or only among the failed ones
        names = sent + rng.sample(ghosts, 3) + sent[:1] if rng.random() < 0.5 else sent[1:]
        failed = {g: ESCAPES * 50 for g in ghosts}
        failed.update({n: "no" for n in sent[:1]})
        out: Json = {"FailedNodes": failed, "FailedAndUnresolvableNodes": {"ghost2": "x"}}
        if isinstance(body, dict) and body.get("NodeNames") is not None:
            out["NodeNames"] = names
        else:
            out["Nodes"] = {"items": [{"metadata": {"name": n}} for n in names]}
        if rng.random() < 0.3:
            out["Error"] = ESCAPES * 1000
        return out
    if verb == "prioritize":
        return [{"Host": n, "Score": rng.choice((2**63, -(2**63), 10**30, -1, 11))}
                for n in sent + ghosts] + [{"Host": sent[0] if sent else "x", "Score": 10}] * 3
    every = [(p["spec"]["nodeName"], p["metadata"]["uid"]) for p in cluster]
    answer: dict[str, Json] = {}
    for node, uid in every + [("ghost", "uid-preemptor"), ("n0", "uid-nope")]:
        answer.setdefault(node, {"Pods": [], "NumPDBViolations": rng.choice((-7, 0, 2**40))})
        answer[node]["Pods"].append({"UID": uid})
        answer[node]["Pods"].append({"UID": uid})  # twice
    for node in offered_uids(body):
        answer.setdefault(node, {"Pods": []})
    return {"NodeNameToMetaVictims": answer}


# Hostile bodies (bytes); index chosen at generation.
_HOSTILE: tuple[Callable[[str], bytes], ...] = (
    lambda verb: json.dumps({"Error": ESCAPES + "x" * 600_000}).encode(),
    lambda verb: json.dumps({"NodeNames": ["n0"], "FailedNodes": {
        "n0": ESCAPES * 20_000, "n1": "\ud800" * 1000}}).encode(),
    lambda verb: b"[" * 100_000 + b"]" * 100_000,
    lambda verb: b'{"a":' * 50_000 + b"1" + b"}" * 50_000,
    lambda verb: b'{"NodeNames": "n0", "FailedNodes": [], "NodeNameToMetaVictims": []}',
    lambda verb: b'{"NodeNames": [1, null, {"x": 1}], "FailedNodes": {"n0": 7}}',
    lambda verb: b'[{"Host": "n0", "Score": NaN}, {"Host": "n1", "Score": 1e999}]',
    lambda verb: b'[{"Host": ["n0"], "Score": "10"}, {"Host": null}]',
    lambda verb: b'{"NodeNameToMetaVictims": {"n0": {"Pods": [{"UID": 7}], '
                 b'"NumPDBViolations": "many"}}}',
    lambda verb: b'{"NodeNameToMetaVictims": {"n0": {"Pods": {"UID": "uid-r0"}}}}',
    lambda verb: b"\xff\xfe\xfa invalid utf-8 \xc3\x28",
    lambda verb: b"<html>not json</html>",
    lambda verb: b"",
    lambda verb: b"null",
    lambda verb: b'"just a string"',
    # joined, not json.dumps of a dict: the server shares the worker's GIL, and seconds
    # spent building an answer would be charged to the client's timeout
    lambda verb: b'{"NodeNameToMetaVictims": {' + b", ".join(
        b'"ghost%d": {"Pods": [{"UID": "u%d"}]}' % (i, i) for i in range(100_000)) + b"}}",
    lambda verb: json.dumps({"Nodes": {"items": [{"metadata": {"name": {"x": 1}}}]},
                             "NodeNames": None}).encode(),
    lambda verb: b'{"NodeNames": ["n0"], "NodeNames": ["ghost"]}',
)
_HOSTILE_MADE: dict[tuple[int, str], bytes] = {}


def _hostile(index: int, verb: str) -> bytes:
    """Hostile body `index`, made once per worker."""
    key = (index, verb)
    if key not in _HOSTILE_MADE:
        _HOSTILE_MADE[key] = _HOSTILE[index](verb)
    return _HOSTILE_MADE[key]


_HTTP = ("drop", "500", "302", "http10", "bad-chunk", "huge-header", "short", "garbage",
         "no-length", "continue")


@dataclass
class Plan:
    """What the server writes: (delay before, bytes) pieces, then closes or not."""

    pieces: list[tuple[float, bytes]] = field(default_factory=list)
    close: bool = False


def _response(body: bytes, status: str = "200 OK", extra: str = "") -> bytes:
    return (f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n{extra}"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def plan(behaviour: Json, verb: str, body: Any, count: int, cluster: list[Json]) -> Plan:
    """The server's answer to the `count`th `verb` request, whose decoded body is `body`."""
    mode = behaviour["mode"]
    rng = random.Random(f"{behaviour['seed']}:{count}")

    def answer(kind: str) -> bytes:
        value = _honest(verb, body, rng) if kind == "honest" else _lie(verb, body, rng, cluster)
        return json.dumps(value).encode()

    if mode in ("honest", "lie"):
        return Plan([(0.0, _response(answer(mode)))])
    if mode == "hostile":
        return Plan([(0.0, _response(_hostile(behaviour["payload"], verb)))])
    if mode == "slow":
        return Plan([(behaviour["delay"], _response(answer(behaviour["then"])))])
    if mode == "trickle":
        data = _response(answer(behaviour["then"]))
        split = data.index(b"\r\n\r\n") + 4 if behaviour["part"] == "body" else 0
        n, every = behaviour["piece"], behaviour["interval"]
        pieces = [(0.0, data[:split])] if split else []
        pieces += [(every, data[i:i + n]) for i in range(split, len(data), n)]
        return Plan(pieces[:2000], close=len(pieces) > 2000)
    if mode == "oversized":
        size = behaviour["bytes"]
        if behaviour["how"] == "declared":
            return Plan([(0.0, f"HTTP/1.1 200 OK\r\nContent-Length: {size}\r\n\r\n[".encode())],
                        close=True)
        block = b" " * 2**16
        if behaviour["how"] == "stream":
            head = f"HTTP/1.1 200 OK\r\nContent-Length: {size}\r\n\r\n".encode()
            return Plan([(0.0, head)] + [(0.0, block)] * (size // len(block)), close=True)
        chunk = f"{len(block):x}\r\n".encode() + block + b"\r\n"
        head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        return Plan([(0.0, head)] + [(0.0, chunk)] * (size // len(block)), close=True)
    what = behaviour["what"]
    ok = answer("honest")
    raw: dict[str, Plan] = {
        "drop": Plan([], close=True),
        "500": Plan([(0.0, _response(b'{"Error": "boom"}', "500 Internal Server Error"))]),
        "302": Plan([(0.0, _response(b"", "302 Found", "Location: http://169.254.169.254/\r\n"))]),
        "http10": Plan([(0.0, b"HTTP/1.0 200 OK\r\n\r\n" + ok)], close=True),
        "bad-chunk": Plan([(0.0, b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                                 b"ffffffffffffffff\r\n" + ok)], close=True),
        "huge-header": Plan([(0.0, b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 2**20 + b"\r\n"
                                   + f"Content-Length: {len(ok)}\r\n\r\n".encode() + ok)]),
        "short": Plan([(0.0, f"HTTP/1.1 200 OK\r\nContent-Length: {len(ok) + 1000}\r\n\r\n"
                             .encode() + ok)], close=True),
        "garbage": Plan([(0.0, b"\x16\x03\x01 SSH-2.0-OpenSSH\r\n" + ESCAPES.encode())],
                        close=True),
        "no-length": Plan([(0.0, b"HTTP/1.1 200 OK\r\n\r\n" + ok)], close=True),
        "continue": Plan([(0.0, b"HTTP/1.1 100 Continue\r\n\r\n" + _response(ok))]),
    }
    return raw[what]


# -- the server -------------------------------------------------------------------------
class HostileServer:
    """A raw HTTP/1.1 server on 127.0.0.1 (a thread per connection, kept alive) that
    answers each request as `behaviour[verb]` says, and records what it was sent."""

    def __init__(self, behaviour: Json, cluster: list[Json]) -> None:
        self.behaviour = behaviour
        self.cluster = cluster
        self.requests: list[tuple[str, Any]] = []
        self.lock = threading.Lock()
        self.released = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._conns: list[socket.socket] = []
        self.port: int = self._listener.getsockname()[1]

    def __enter__(self) -> HostileServer:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.released.set()
        self._listener.close()
        with self.lock:
            for c in self._conns:
                c.close()

    def bodies(self, verb: str) -> list[Any]:
        with self.lock:
            return [b for v, b in self.requests if v == verb]

    def _accept(self) -> None:
        while not self.released.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            with self.lock:
                self._conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _read_request(self, conn: socket.socket, buf: bytes) -> tuple[str, bytes, bytes] | None:
        while b"\r\n\r\n" not in buf:
            data = conn.recv(65536)
            if not data or len(buf) > 2**20:
                return None
            buf += data
        head, rest = buf.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        path = lines[0].split(" ")[1] if len(lines[0].split(" ")) > 1 else "/"
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value.strip())
        while len(rest) < length:
            data = conn.recv(65536)
            if not data:
                return None
            rest += data
        return path, rest[:length], rest[length:]

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(10)
        buf = b""
        try:
            while not self.released.is_set():
                got = self._read_request(conn, buf)
                if got is None:
                    return
                path, body, buf = got
                verb = path.rstrip("/").rsplit("/", 1)[-1]
                try:
                    parsed = json.loads(body)
                except ValueError:
                    parsed = None
                with self.lock:
                    self.requests.append((verb, parsed))
                    count = sum(1 for v, _ in self.requests if v == verb)
                behaviour = self.behaviour.get(verb, {"mode": "http", "what": "500"})
                todo = plan(behaviour, verb, parsed, count, self.cluster)
                for delay, data in todo.pieces:
                    if delay and self.released.wait(delay):
                        return
                    conn.sendall(data)
                if todo.close:
                    return
        except OSError:
            return
        finally:
            conn.close()


# -- the run --------------------------------------------------------------------------------
def _check_text(out: Json, where: str, text: str) -> None:
    written = condition_message(text)
    out["max_message"] = max(out["max_message"], len(text))
    if len(written) > MAX_CONDITION_MESSAGE_CHARS + 3 or not written.isprintable():
        out["violations"].append(f"message:{where}: {len(written)} chars written, "
                                 f"printable={written.isprintable()}")


def _check_raw(out: Json, where: str, text: str, limit: int) -> None:
    """Text that production quotes as it is (a FailedNodes reason, an ExtenderError):
    at most `limit` characters (and the ellipsis of a cut), and printable."""
    out["max_message"] = max(out["max_message"], len(text))
    if len(text) > limit + len(ELLIPSIS) or not text.isprintable():
        out["violations"].append(f"message:{where}: {len(text)} chars, "
                                 f"printable={text.isprintable()}")


def _with_port(doc: Any, port: int) -> Any:
    return json.loads(json.dumps(doc).replace(PORT, str(port)))


# A call may also take this many times the CPU the worker spent meanwhile: decoding a
# 4 MiB answer is work, not waiting, and a campaign runs niced on a loaded machine, where
# 0.4 s of CPU took 3.5 s. Waiting past the timeout costs no CPU, so it is still caught.
CPU_FACTOR = 10.0


async def _timed(out: Json, what: str, limit: float, call: Any) -> Any:
    """Await `call`; a violation when it takes longer than `limit` seconds plus
    CPU_FACTOR times the process's CPU meanwhile (and a hard stop 10 s past `limit`, so
    that the worker says which call hung)."""
    started, cpu = time.monotonic(), time.process_time()
    try:
        return await asyncio.wait_for(call, limit + 10)
    except TimeoutError:
        out["violations"].append(f"hang:extender-{what}: no end after {limit + 10:g} s")
        raise
    finally:
        took = time.monotonic() - started
        worked = time.process_time() - cpu
        if took > limit + CPU_FACTOR * worked:
            out["violations"].append(f"timeout:extender-{what}: {took:.2f} s, over the "
                                     f"{limit:g} s allowed (and {worked:.2f} s of CPU)")


def _check_victims(out: Json, where: str, node: str | None, victims: Any,
                   preemptor: PodInfo, offered: dict[str, set[str]] | None,
                   pods: dict[str, PodInfo]) -> None:
    for v in victims:
        out["victims_checked"] = out.get("victims_checked", 0) + 1
        uid = v.uid if isinstance(v, PodInfo) else str((v.get("metadata") or {}).get("uid"))
        info = pods.get(uid)
        if info is None:
            out["violations"].append(f"victim:{where}: {uid!r} is no pod of the cluster")
            continue
        if info.priority >= preemptor.priority:
            out["violations"].append(f"victim:{where}: {info.key} of priority "
                                     f"{info.priority} >= the preemptor's {preemptor.priority}")
        if node is not None and info.node_name != node:
            out["violations"].append(f"victim:{where}: {info.key} is on {info.node_name!r}, "
                                     f"not on {node!r}")
        if offered is not None and uid not in offered.get(node or info.node_name, set()):
            out["violations"].append(f"victim:{where}: {info.key} was not offered")


async def _cycle(case: Json, server: HostileServer, policy: Any, exts: list[Any],
                 out: Json) -> None:
    timeout = float(case["timeout"])
    preemptor = PodInfo.from_json(case["preemptor"])
    pods = {p["metadata"]["uid"]: PodInfo.from_json(p) for p in case["running"]}

    def cluster() -> list[NodeInfo]:
        nodes = {n["metadata"]["name"]: NodeInfo.from_json(n) for n in case["nodes"]}
        for p in case["running"]:
            nodes[p["spec"]["nodeName"]].add_pod(PodInfo.from_json(p))
        return list(nodes.values())

    names = {n["metadata"]["name"] for n in case["nodes"]}
    listers = ls.Listers()
    pipeline = build_pipeline(policy, Handle(listers=listers, nominator=Nominator()), exts)
    verbs = len(case["behaviour"])
    # the cycle: filter, prioritize, preempt once each (a read-only verb may be retried
    # once within the same deadline)
    try:
        result = await _timed(out, "cycle", verbs * timeout + SLACK_SECONDS,
                              schedule_pod(pipeline, preemptor, Snapshot(cluster())))
    except PipelineError as err:
        _check_text(out, "pipeline-error", str(err))
    else:
        out["decisions"] += 1
        if result.fit_error is not None:
            _check_text(out, "fit-error", result.fit_error.message)
            ghosts = set(result.fit_error.node_statuses) - names
            if ghosts:
                out["violations"].append(f"failed-nodes:cycle: statuses of nodes not sent: "
                                         f"{sorted(ghosts)[:5]!r}")
        post = result.post_filter
        if post is not None and post.victims:
            asked = server.bodies("preempt")
            offered = offered_uids(asked[-1]) if asked else None
            _check_victims(out, "cycle", post.nominated_node, post.victims, preemptor,
                           offered, pods)
    # the client's calls directly, on a subset of the nodes and an offer of victims
    rng = random.Random(case["subset"])
    ext: Extender = exts[0]
    nodes = [n for n in cluster() if rng.random() < 0.7]
    sent = {n.name for n in nodes}
    calls: list[tuple[str, Any]] = []
    if ext.is_filter():
        calls.append(("filter", ext.filter(preemptor, nodes)))
    if ext.is_prioritizer():
        calls.append(("prioritize", ext.prioritize(preemptor, nodes)))
    offer: dict[str, Victims] = {}
    for n in nodes:
        lower = [p.raw for p in pods.values()
                 if p.node_name == n.name and p.priority < preemptor.priority]
        if lower:
            offer[n.name] = Victims(tuple(lower), 0)
    if offer and getattr(ext, "supports_preemption", lambda: False)():
        calls.append(("preempt", ext.process_preemption(preemptor, offer)))  # type: ignore[attr-defined]
    for verb, call in calls:
        try:
            answer = await _timed(out, verb, timeout + SLACK_SECONDS, call)
        except ExtenderError as err:
            _check_raw(out, f"extender-{verb}", str(err), MAX_CONDITION_MESSAGE_CHARS)
            continue
        if verb == "filter":
            feasible, failed, unresolvable = answer
            outside = ({n.name for n in feasible} | set(failed) | set(unresolvable)) - sent
            if outside:
                out["violations"].append(f"failed-nodes:filter: names nodes not sent: "
                                         f"{sorted(outside)[:5]!r}")
            for why in list(failed.values()) + list(unresolvable.values()):
                _check_raw(out, "failed-node-reason", why, MAX_REASON_CHARS)
        elif verb == "preempt":
            offered = {n: {str(p["metadata"]["uid"]) for p in v.pods} for n, v in offer.items()}
            for node, victims in answer.items():
                if node not in offer:
                    out["violations"].append(f"victim:preempt: node {node!r} was not offered")
                _check_victims(out, "preempt", node, victims.pods, preemptor, offered, pods)


# How long a claimed bind waits for the watch here (production waits 5 s).
BIND_CONFIRM_SECONDS = 0.3


async def _bind(case: Json, ext: Any, out: Json) -> None:
    """The extender binds the preemptor to n0 through the scheduler's Binder; the watch
    shows the pod nowhere, on n0 or on another node. No pod is lost (the Binder always
    reports), none is taken as bound unless the watch shows it on n0, and the report's
    message is bounded and printable."""
    pod = PodInfo.from_json(case["preemptor"])
    watch: dict[str, PodInfo] = {}
    shown = {"there": "n0", "elsewhere": "n9"}.get(case["watch"])
    if shown is not None:
        watch[pod.key] = PodInfo.from_json({**case["preemptor"], "spec": {
            **case["preemptor"]["spec"], "nodeName": shown}})
    binder = Binder(cast(ApiClient, None), watched=watch,
                    extender_bind_confirm_seconds=BIND_CONFIRM_SECONDS)
    got: asyncio.Future[tuple[BindOutcome, str]] = asyncio.get_running_loop().create_future()
    binder.bind(pod, "n0", lambda o, m: got.set_result((o, m)), [ext])
    try:
        outcome, message = await _timed(
            out, "bind", float(case["timeout"]) + BIND_CONFIRM_SECONDS + SLACK_SECONDS, got)
    except TimeoutError:
        out["violations"].append("lost:bind: the Binder never reported the bind")
        return
    finally:
        await binder.close()
    _check_raw(out, "bind", message, MAX_CONDITION_MESSAGE_CHARS)
    if outcome is BindOutcome.BOUND and case["watch"] != "there":
        out["violations"].append(f"assumed:bind: taken as bound to n0 while the watch "
                                 f"shows it {case['watch']}")


def run(case: Json, out: Json) -> None:
    """Run an "extender" case through production code; add what breaks to out."""
    with HostileServer(case["behaviour"], case["running"]) as server:
        async def go() -> None:
            policy = load_policy(_with_port(case["policy"], server.port), CATALOG)
            exts = await build_extenders(policy.extenders, None)
            try:
                await _cycle(case, server, policy, list(exts), out)
                if exts and exts[0].is_binder():
                    await _bind(case, exts[0], out)
            finally:
                for e in exts:
                    await e.close()
        started = time.perf_counter()
        asyncio.run(go())
        out["sched_seconds"] = time.perf_counter() - started
        out["requests"] = len(server.requests)
