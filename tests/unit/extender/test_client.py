"""HTTPExtender against real HTTP extenders on 127.0.0.1: the verbs, both node modes,
managedResources, errors as upstream words them, timeouts, keep-alive and TLS."""

from __future__ import annotations

import base64
import json
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from polsched.extender import HTTPExtender, wire
from polsched.extender.client import (
    ExtenderSetupError,
    SecretReader,
    build_extenders,
    secret_ca_reader,
)
from polsched.framework import interfaces
from polsched.framework.interfaces import ExtenderError
from tests.unit.extender.conftest import StartExtender
from tests.unit.extender.fake_extender import (
    DROP,
    Answer,
    config,
    free_port,
    make_node,
    make_pod,
    run,
)

pytestmark = pytest.mark.unit

NODES = [make_node("n1"), make_node("n2"), make_node("n3")]


async def call_filter(ext: HTTPExtender, pod: Any = None, nodes: Any = None) -> Any:
    try:
        return await ext.filter(pod or make_pod(), NODES if nodes is None else nodes)
    finally:
        await ext.close()


async def call_prioritize(ext: HTTPExtender) -> dict[str, int]:
    try:
        return await ext.prioritize(make_pod(), NODES)
    finally:
        await ext.close()


# -- filter ------------------------------------------------------------------------------


def test_filter_node_cache_capable_sends_and_reads_node_names(
        start_extender: StartExtender) -> None:
    server = start_extender({"/filter": lambda args: {
        "NodeNames": ["n3", "n1"],
        "FailedNodes": {"n2": "n2 is busy"},
        "FailedAndUnresolvableNodes": {"n2": "n2 is gone"},
        "Error": "",
    }})
    pod = make_pod("web", labels={"want": "you"})
    ext = HTTPExtender(config(server.url, filter_verb="filter", node_cache_capable=True))
    feasible, failed, unresolvable = run(call_filter(ext, pod))

    (sent,) = server.bodies("/filter")
    assert list(sent) == ["Pod", "Nodes", "NodeNames"]
    assert sent == {"Pod": pod.raw, "Nodes": None, "NodeNames": ["n1", "n2", "n3"]}
    assert [n.name for n in feasible] == ["n3", "n1"]
    assert feasible[0] is NODES[2]
    assert failed == {"n2": "n2 is busy"}
    assert unresolvable == {"n2": "n2 is gone"}


def test_filter_without_node_cache_sends_and_reads_whole_nodes(
        start_extender: StartExtender) -> None:
    def keep_n2(args: Any) -> Any:
        items = [n for n in args["Nodes"]["items"] if n["metadata"]["name"] == "n2"]
        return {"Nodes": {"items": items}, "FailedNodes": {"n1": "no", "n3": "no"}}

    server = start_extender({"/filter": keep_n2})
    ext = HTTPExtender(config(server.url, filter_verb="filter", node_cache_capable=False))
    feasible, failed, _ = run(call_filter(ext))

    (sent,) = server.bodies("/filter")
    assert sent == {"Pod": make_pod().raw,
                    "Nodes": {"metadata": {}, "items": [n.raw for n in NODES]},
                    "NodeNames": None}
    assert feasible == [NODES[1]]
    assert failed == {"n1": "no", "n3": "no"}


def test_filter_sends_a_changed_node_not_a_stale_cached_encoding(
        start_extender: StartExtender) -> None:
    server = start_extender({"/filter": lambda args: {"Nodes": args["Nodes"]}})
    node = make_node("n1", labels={"v": "1"})
    ext = HTTPExtender(config(server.url, filter_verb="filter"))

    async def twice() -> None:
        await ext.filter(make_pod(), [node])
        node.set_node({"metadata": {"name": "n1", "labels": {"v": "2"}}})
        await ext.filter(make_pod(), [node])
        await ext.close()

    run(twice())
    first, second = server.bodies("/filter")
    assert first["Nodes"]["items"][0]["metadata"]["labels"] == {"v": "1"}
    assert second["Nodes"]["items"][0]["metadata"]["labels"] == {"v": "2"}


def test_url_is_prefix_with_trailing_slashes_trimmed_plus_verb(
        start_extender: StartExtender) -> None:
    server = start_extender({"/scheduler/my-filter": lambda args: {"NodeNames": ["n1"]}})
    url = server.url + "scheduler//"
    ext = HTTPExtender(config(url, filter_verb="my-filter", node_cache_capable=True))
    feasible, _, _ = run(call_filter(ext))
    assert [r.path for r in server.requests] == ["/scheduler/my-filter"]
    assert server.requests[0].headers["Content-Type"] == "application/json"
    assert feasible == [NODES[0]]
    assert ext.name == url  # the configured urlPrefix, as upstream's Name()


def test_filter_answer_listing_a_node_twice_keeps_it_once_in_its_first_place(
        start_extender: StartExtender) -> None:
    server = start_extender({"/filter": lambda args: {"NodeNames": ["n2", "n1", "n2"]}})
    ext = HTTPExtender(config(server.url, filter_verb="filter", node_cache_capable=True))
    feasible, _, _ = run(call_filter(ext))
    assert feasible == [NODES[1], NODES[0]]


def test_filter_and_prioritize_send_the_pod_as_it_is_now(
        start_extender: StartExtender) -> None:
    # The pod's JSON is encoded once for the two calls of its cycle; a pod object seen
    # later (another pod, or the same pod updated) is encoded anew.
    server = start_extender({
        "/filter": lambda args: {"NodeNames": args["NodeNames"]},
        "/prioritize": lambda args: [{"Host": n, "Score": 1} for n in args["NodeNames"]],
    })
    ext = HTTPExtender(config(server.url, filter_verb="filter", prioritize_verb="prioritize",
                              node_cache_capable=True))
    first = make_pod("web", labels={"v": "1"})
    updated = make_pod("web", labels={"v": "2"})

    async def calls() -> None:
        await ext.filter(first, NODES)
        await ext.prioritize(first, NODES)
        await ext.filter(updated, NODES)
        await ext.prioritize(updated, NODES)
        await ext.close()

    run(calls())
    labels = [r.json["Pod"]["metadata"]["labels"] for r in server.requests]
    assert labels == [{"v": "1"}, {"v": "1"}, {"v": "2"}, {"v": "2"}]
    assert [r.json["Pod"] for r in server.requests[2:]] == [updated.raw, updated.raw]


def test_requests_name_the_host_and_polsched(start_extender: StartExtender) -> None:
    server = start_extender({"/filter": lambda args: {"NodeNames": ["n1"]}})
    ext = HTTPExtender(config(server.url, filter_verb="filter", node_cache_capable=True))
    run(call_filter(ext))
    headers = server.requests[0].headers
    assert headers["Host"] == f"127.0.0.1:{server.port}"
    assert headers["User-Agent"].startswith("polsched/")
    assert headers["Content-Length"] == str(len(server.requests[0].body))


def test_an_http_1_0_extender_answering_without_content_length() -> None:
    # Python's http.server speaks HTTP/1.0 by default: no Content-Length, the body ends
    # when the connection closes. Go's client reads such answers; so does polsched.
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            args = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(json.dumps({"NodeNames": args["NodeNames"][:2]}).encode())

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/"
        ext = HTTPExtender(config(url, filter_verb="filter", node_cache_capable=True))

        async def twice() -> list[int]:
            out = [len((await ext.filter(make_pod(), NODES))[0]) for _ in range(2)]
            await ext.close()
            return out

        assert run(twice()) == [2, 2]
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(("url", "why"), [
    ("ftp://127.0.0.1/", "unsupported protocol scheme 'ftp'"),
    ("http://127.0.0.1:port/", "Port could not be cast to integer value"),
])
def test_a_url_prefix_that_cannot_be_used_fails_each_call_naming_the_url(
        url: str, why: str) -> None:
    ext = HTTPExtender(config(url, filter_verb="filter"))  # built: a call says what is wrong
    with pytest.raises(ExtenderError) as err:
        run(call_filter(ext))
    assert str(err.value).startswith(f'Post "{url}filter": ')
    assert why in str(err.value)


def test_filter_answer_with_lowercase_keys(start_extender: StartExtender) -> None:
    server = start_extender({"/filter": lambda args: {
        "nodenames": ["n1"], "failedNodes": {"n2": "x", "n3": "y"}, "error": ""}})
    ext = HTTPExtender(config(server.url, filter_verb="filter", node_cache_capable=True))
    feasible, failed, _ = run(call_filter(ext))
    assert feasible == [NODES[0]]
    assert failed == {"n2": "x", "n3": "y"}


def test_filter_answer_naming_an_unknown_node_is_an_error(
        start_extender: StartExtender) -> None:
    server = start_extender({"/filter": lambda args: {"NodeNames": ["n1", "n9"]}})
    ext = HTTPExtender(config(server.url, filter_verb="filter", node_cache_capable=True))
    with pytest.raises(ExtenderError) as err:
        run(call_filter(ext))
    assert str(err.value) == (f'extender "{server.url}" claims a filtered node "n9" which is '
                              "not found in the input node list")


def test_filter_answer_with_unknown_whole_node_is_an_error(
        start_extender: StartExtender) -> None:
    server = start_extender({"/filter": lambda args: {
        "Nodes": {"items": [{"metadata": {"name": "elsewhere"}}]}}})
    ext = HTTPExtender(config(server.url, filter_verb="filter"))
    with pytest.raises(ExtenderError, match='filtered node "elsewhere"'):
        run(call_filter(ext))


def test_filter_error_field_is_an_error_naming_the_url(start_extender: StartExtender) -> None:
    server = start_extender({"/filter": lambda args: {"Error": "cache not synced"}})
    ext = HTTPExtender(config(server.url, filter_verb="filter", node_cache_capable=True))
    with pytest.raises(ExtenderError) as err:
        run(call_filter(ext))
    assert str(err.value) == (f"failed filter with extender at URL {server.url}filter: "
                              "cache not synced")


def test_filter_non_200_is_upstreams_error(start_extender: StartExtender) -> None:
    server = start_extender({"/filter": lambda args: Answer(503, b"overloaded")})
    ext = HTTPExtender(config(server.url, filter_verb="filter"))
    with pytest.raises(ExtenderError) as err:
        run(call_filter(ext))
    assert str(err.value) == f"failed filter with extender at URL {server.url}filter, code 503"


def test_filter_unknown_verb_path_404(start_extender: StartExtender) -> None:
    server = start_extender({})
    ext = HTTPExtender(config(server.url, filter_verb="filter"))
    with pytest.raises(ExtenderError, match="code 404"):
        run(call_filter(ext))


@pytest.mark.parametrize("body", [b"", b"<html>oops</html>", b'{"NodeNames": ["n1"'])
def test_filter_garbage_json_is_a_clear_error(start_extender: StartExtender,
                                              body: bytes) -> None:
    server = start_extender({"/filter": lambda args: Answer(200, body)})
    ext = HTTPExtender(config(server.url, filter_verb="filter", node_cache_capable=True))
    with pytest.raises(ExtenderError) as err:
        run(call_filter(ext))
    assert f"the filter answer of the extender at URL {server.url}filter" in str(err.value)


def test_filter_wrong_shape_is_a_clear_error(start_extender: StartExtender) -> None:
    server = start_extender({"/filter": lambda args: {"NodeNames": "n1"}})
    ext = HTTPExtender(config(server.url, filter_verb="filter", node_cache_capable=True))
    with pytest.raises(ExtenderError, match="ExtenderFilterResult.NodeNames"):
        run(call_filter(ext))


def test_no_filter_verb_passes_every_node_without_a_request(
        start_extender: StartExtender) -> None:
    server = start_extender({})
    ext = HTTPExtender(config(server.url, prioritize_verb="prioritize"))
    assert not ext.is_filter()
    assert run(call_filter(ext)) == (NODES, {}, {})
    assert server.requests == []


# -- prioritize -------------------------------------------------------------------------


def test_prioritize_returns_host_scores(start_extender: StartExtender) -> None:
    server = start_extender({"/prioritize": lambda args: [
        {"Host": n, "Score": i * 5} for i, n in enumerate(args["NodeNames"])]})
    ext = HTTPExtender(config(server.url, prioritize_verb="prioritize", weight=3,
                              node_cache_capable=True))
    assert ext.is_prioritizer() and ext.weight == 3
    assert run(call_prioritize(ext)) == {"n1": 0, "n2": 5, "n3": 10}
    (sent,) = server.bodies("/prioritize")
    assert sent == {"Pod": make_pod().raw, "Nodes": None, "NodeNames": ["n1", "n2", "n3"]}


def test_prioritize_lowercase_keys_and_no_clamping(start_extender: StartExtender) -> None:
    server = start_extender({"/prioritize": lambda args: [
        {"host": "n1", "score": 4}, {"host": "n1", "score": 3},
        {"host": "n2", "score": 99}, {"host": "n3", "score": -2}]})
    ext = HTTPExtender(config(server.url, prioritize_verb="prioritize"))
    # A host listed twice gets the sum (upstream adds every entry); scores outside 0..10
    # are kept as they are, as upstream's prioritizeNodes does.
    assert run(call_prioritize(ext)) == {"n1": 7, "n2": 99, "n3": -2}


def test_prioritize_garbage_is_an_error(start_extender: StartExtender) -> None:
    server = start_extender({"/prioritize": lambda args: {"Host": "n1", "Score": 1}})
    ext = HTTPExtender(config(server.url, prioritize_verb="prioritize"))
    with pytest.raises(ExtenderError, match="HostPriorityList"):
        run(call_prioritize(ext))


# -- bind and preempt ---------------------------------------------------------------------


def test_bind_sends_binding_args(start_extender: StartExtender) -> None:
    server = start_extender({"/bind": lambda args: {"Error": ""}})
    ext = HTTPExtender(config(server.url, bind_verb="bind"))
    pod = make_pod("web")

    async def bind() -> None:
        await ext.bind(pod, "n2")
        await ext.close()

    assert ext.is_binder()
    run(bind())
    (sent,) = server.bodies("/bind")
    assert list(sent) == ["PodName", "PodNamespace", "PodUID", "Node"]
    assert sent == {"PodName": "web", "PodNamespace": "default", "PodUID": "uid-web",
                    "Node": "n2"}


def test_bind_error_field_is_an_error(start_extender: StartExtender) -> None:
    server = start_extender({"/bind": lambda args: {"error": "node n2 is full"}})
    ext = HTTPExtender(config(server.url, bind_verb="bind"))

    async def bind() -> None:
        try:
            await ext.bind(make_pod(), "n2")
        finally:
            await ext.close()

    with pytest.raises(ExtenderError, match=f"failed bind with extender at URL {server.url}"
                                            "bind: node n2 is full"):
        run(bind())


def test_bind_without_bind_verb_is_refused() -> None:
    ext = HTTPExtender(config("http://127.0.0.1:1/"))
    assert not ext.is_binder()
    with pytest.raises(ExtenderError, match="unexpected empty bindVerb in extender"):
        run(ext.bind(make_pod(), "n1"))


def victim(name: str) -> dict[str, Any]:
    return make_pod(name).raw


@pytest.mark.parametrize("cache_capable", [True, False])
def test_preempt_call_shape_and_answer(start_extender: StartExtender,
                                       cache_capable: bool) -> None:
    server = start_extender({"/preempt": lambda args: {"NodeNameToMetaVictims": {
        "n1": {"Pods": [{"UID": "uid-v2"}], "NumPDBViolations": 0}}}})
    ext = HTTPExtender(config(server.url, preempt_verb="preempt",
                              node_cache_capable=cache_capable))
    offered = {"n1": wire.Victims((victim("v1"), victim("v2")), 1),
               "n2": wire.Victims((victim("v3"),), 0)}
    pod = make_pod("big")

    async def preempt() -> dict[str, interfaces.Victims]:
        try:
            return await ext.process_preemption(pod, offered)
        finally:
            await ext.close()

    assert ext.supports_preemption()
    kept = run(preempt())
    (sent,) = server.bodies("/preempt")
    assert list(sent) == ["Pod", "NodeNameToVictims", "NodeNameToMetaVictims"]
    assert sent["Pod"] == pod.raw
    if cache_capable:
        assert sent["NodeNameToVictims"] is None
        assert sent["NodeNameToMetaVictims"] == {
            "n1": {"Pods": [{"UID": "uid-v1"}, {"UID": "uid-v2"}], "NumPDBViolations": 1},
            "n2": {"Pods": [{"UID": "uid-v3"}], "NumPDBViolations": 0}}
    else:
        assert sent["NodeNameToMetaVictims"] is None
        assert sent["NodeNameToVictims"] == {
            "n1": {"Pods": [victim("v1"), victim("v2")], "NumPDBViolations": 1},
            "n2": {"Pods": [victim("v3")], "NumPDBViolations": 0}}
    # The offered NumPDBViolations stands until preemption recounts it for the victims kept.
    assert kept == {"n1": wire.Victims((victim("v2"),), 1)}


def test_preempt_answer_naming_a_pod_not_offered_drops_it(
        start_extender: StartExtender) -> None:
    # uid-other is on n1 in the cluster, but was not offered: upstream would take it.
    server = start_extender({"/preempt": lambda args: {"NodeNameToMetaVictims": {
        "n1": {"Pods": [{"UID": "uid-other"}, {"UID": "uid-v1"}]},
        "n2": {"Pods": [{"UID": "uid-nowhere"}]}}}})
    ext = HTTPExtender(config(server.url, preempt_verb="preempt"))

    async def preempt() -> dict[str, interfaces.Victims]:
        try:
            return await ext.process_preemption(
                make_pod(), {"n1": wire.Victims((victim("v1"),)),
                             "n2": wire.Victims((victim("v2"),))})
        finally:
            await ext.close()

    assert run(preempt()) == {"n1": wire.Victims((victim("v1"),))}


# -- managedResources -----------------------------------------------------------------


def test_managed_resources_interest() -> None:
    ext = HTTPExtender(config("http://127.0.0.1:1/", managed=["example.com/foo"]))
    plain = make_pod(containers=[{"name": "c", "resources": {"requests": {"cpu": "1"}}}])
    requests = make_pod(containers=[
        {"name": "a"}, {"name": "b", "resources": {"requests": {"example.com/foo": "1"}}}])
    limits = make_pod(containers=[{"name": "c", "resources": {"limits": {"example.com/foo": 2}}}])
    init = make_pod(init_containers=[
        {"name": "i", "resources": {"limits": {"example.com/foo": "1"}}}])
    other = make_pod(containers=[{"name": "c", "resources": {"limits": {"example.com/bar": 1}}}])
    assert not ext.is_interested(plain)
    assert not ext.is_interested(other)
    assert ext.is_interested(requests)
    assert ext.is_interested(limits)
    assert ext.is_interested(init)


def test_no_managed_resources_means_interested_in_every_pod() -> None:
    ext = HTTPExtender(config("http://127.0.0.1:1/"))
    assert ext.is_interested(make_pod())


# -- transport: failures, timeout, keep-alive -----------------------------------------------


def test_connection_refused_is_an_error_naming_the_url() -> None:
    url = f"http://127.0.0.1:{free_port()}/"
    ext = HTTPExtender(config(url, filter_verb="filter"))
    with pytest.raises(ExtenderError) as err:
        run(call_filter(ext))
    assert str(err.value).startswith(f'Post "{url}filter": ')


def test_http_timeout_is_honoured_against_a_hanging_extender(
        start_extender: StartExtender) -> None:
    server = start_extender({})
    server.routes["/filter"] = server.hang
    ext = HTTPExtender(config(server.url, filter_verb="filter", http_timeout_seconds=0.3))
    # run() fails the test with TimeoutError if httpTimeout is not applied.
    with pytest.raises(ExtenderError) as err:
        run(call_filter(ext), timeout=15)
    assert str(err.value) == f'Post "{server.url}filter": no answer within httpTimeout (0.3s)'


def test_default_http_timeout_is_five_seconds() -> None:
    assert HTTPExtender(config("http://x/", http_timeout_seconds=0)).timeout_seconds == 5.0


def test_twenty_calls_share_one_tcp_connection(start_extender: StartExtender) -> None:
    server = start_extender({
        "/filter": lambda args: {"NodeNames": args["NodeNames"]},
        "/prioritize": lambda args: [{"Host": n, "Score": 1} for n in args["NodeNames"]],
        "/fail": lambda args: Answer(500, b"no"),
    })
    ext = HTTPExtender(config(server.url, filter_verb="filter", prioritize_verb="prioritize",
                              node_cache_capable=True))
    failing = HTTPExtender(config(server.url, filter_verb="fail"))

    async def many() -> None:
        for i in range(10):
            await ext.filter(make_pod(f"p{i}"), NODES)
            await ext.prioritize(make_pod(f"p{i}"), NODES)
        await ext.close()

    run(many())
    assert len(server.requests) == 20
    assert server.connections == 1

    async def errors() -> None:
        for _ in range(3):
            with pytest.raises(ExtenderError, match="code 500"):
                await failing.filter(make_pod(), NODES)
        await failing.close()

    # Error answers are read to the end, so they do not cost a connection either.
    run(errors())
    assert server.connections == 2


def drop_second_request(answer: Any) -> Any:
    """A route that answers, then drops the kept-alive connection on the next request
    without answering (as a server whose idle timeout just fired), then answers again."""
    calls: list[int] = []

    def route(args: Any) -> Any:
        calls.append(1)
        return DROP if len(calls) == 2 else answer
    return route


def test_a_dropped_pooled_connection_is_retried_once_for_filter(
        start_extender: StartExtender) -> None:
    server = start_extender({"/filter": drop_second_request({"NodeNames": ["n1"]})})
    ext = HTTPExtender(config(server.url, filter_verb="filter", node_cache_capable=True))

    async def three() -> list[int]:
        out = [len((await ext.filter(make_pod(), NODES))[0]) for _ in range(3)]
        await ext.close()
        return out

    assert run(three()) == [1, 1, 1]
    assert len(server.requests) == 4
    assert server.connections == 2


def test_bind_is_not_retried_when_the_connection_drops(start_extender: StartExtender) -> None:
    server = start_extender({"/bind": drop_second_request({"Error": ""})})
    ext = HTTPExtender(config(server.url, bind_verb="bind"))

    async def twice() -> None:
        try:
            await ext.bind(make_pod(), "n1")
            await ext.bind(make_pod(), "n1")
        finally:
            await ext.close()

    with pytest.raises(ExtenderError, match=f'Post "{server.url}bind": '):
        run(twice())
    assert len(server.requests) == 2


def test_a_new_event_loop_gets_a_working_pool(start_extender: StartExtender) -> None:
    server = start_extender({"/filter": lambda args: {"NodeNames": args["NodeNames"]}})
    ext = HTTPExtender(config(server.url, filter_verb="filter", node_cache_capable=True))

    async def once() -> int:
        feasible, _, _ = await ext.filter(make_pod(), NODES)
        return len(feasible)

    assert run(once()) == 3
    assert run(once()) == 3  # the first loop is gone; its session must not be reused
    run(ext.close())


# -- TLS ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("tls")
    cert, key = d / "tls.crt", d / "tls.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1", "-addext",
         "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True)
    return cert, key


@pytest.fixture
def https_extender(tls_files: tuple[Path, Path]) -> Iterator[str]:
    import json as _json
    import ssl

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def do_POST(self) -> None:  # noqa: N802
            body = _json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            data = _json.dumps({"NodeNames": body["NodeNames"][:1]}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(tls_files[0]), str(tls_files[1]))
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    yield f"https://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


def https_filter(ext: HTTPExtender) -> list[str]:
    feasible, _, _ = run(call_filter(ext))
    return [n.name for n in feasible]


def test_https_with_the_ca_from_a_secret(https_extender: str,
                                         tls_files: tuple[Path, Path]) -> None:
    ca = tls_files[0].read_text()
    ext = HTTPExtender(config(https_extender, filter_verb="filter", node_cache_capable=True,
                              ca_secret_ref=("polsched-system", "ext-ca")), ca_pem=ca)
    assert https_filter(ext) == ["n1"]


def test_https_with_inline_ca_data(https_extender: str, tls_files: tuple[Path, Path]) -> None:
    ext = HTTPExtender(config(https_extender, filter_verb="filter", node_cache_capable=True,
                              enable_https=True, ca_data=tls_files[0].read_text()))
    assert https_filter(ext) == ["n1"]


def test_https_unknown_ca_is_refused(https_extender: str) -> None:
    ext = HTTPExtender(config(https_extender, filter_verb="filter", node_cache_capable=True))
    with pytest.raises(ExtenderError, match=f'Post "{https_extender}filter": .*certificate'):
        https_filter(ext)


def test_https_insecure_and_enable_https_without_ca_skip_verification(
        https_extender: str) -> None:
    insecure = HTTPExtender(config(https_extender, filter_verb="filter",
                                   node_cache_capable=True, tls_insecure=True))
    assert https_filter(insecure) == ["n1"]
    # pkg/scheduler/extender.go makeTransport: enableHTTPS with no CA is insecure.
    no_ca = HTTPExtender(config(https_extender, filter_verb="filter", node_cache_capable=True,
                                enable_https=True))
    assert https_filter(no_ca) == ["n1"]


def test_invalid_ca_is_refused_when_the_extender_is_built() -> None:
    with pytest.raises(ExtenderError, match="tlsConfig: the CA certificate"):
        HTTPExtender(config("https://127.0.0.1:1/"), ca_pem="-----BEGIN CERTIFICATE-----\nxx\n")


# -- building a policy's extenders ------------------------------------------------------------


def secrets(objects: dict[tuple[str, str], dict[str, Any]]) -> SecretReader:
    async def read(namespace: str, name: str) -> dict[str, Any]:
        if (namespace, name) not in objects:
            raise LookupError(f"404 NotFound: secrets {name!r} not found")
        return objects[(namespace, name)]
    return read


def test_build_extenders_reads_the_ca_of_a_ca_secret_ref(https_extender: str,
                                                         tls_files: tuple[Path, Path]) -> None:
    ca = base64.b64encode(tls_files[0].read_bytes()).decode()
    cfgs = [config("http://127.0.0.1:1/"),
            config(https_extender, filter_verb="filter", node_cache_capable=True,
                   ca_secret_ref=("polsched-system", "ext-ca"))]
    built = run(build_extenders(cfgs, secret_ca_reader(secrets({("polsched-system", "ext-ca"):
                                                                {"data": {"ca.crt": ca}}}))))
    assert [e.config for e in built] == cfgs
    assert https_filter(built[1]) == ["n1"]  # verified against the Secret's CA


@pytest.mark.parametrize(("reader", "message"), [
    (None, "Secret polsched-system/ext-ca can only be read from the cluster"),
    (secrets({}), "cannot read Secret polsched-system/ext-ca: 404 NotFound"),
    (secrets({("polsched-system", "ext-ca"): {"data": {"tls.crt": "eA=="}}}),
     "Secret polsched-system/ext-ca has no key ca.crt"),
    (secrets({("polsched-system", "ext-ca"): {"data": {"ca.crt": "not base64!"}}}),
     "ca.crt is not base64-encoded text"),
])
def test_build_extenders_names_the_field_of_an_unusable_ca_secret_ref(
        reader: SecretReader | None, message: str) -> None:
    cfgs = [config("http://127.0.0.1:1/"),
            config("https://127.0.0.1:1/", ca_secret_ref=("polsched-system", "ext-ca"))]
    with pytest.raises(ExtenderSetupError) as exc:
        run(build_extenders(cfgs, None if reader is None else secret_ca_reader(reader)))
    assert exc.value.path == "spec.extenders[1].tlsConfig.caSecretRef"
    assert message in exc.value.message


def test_build_extenders_names_the_entry_the_client_refuses() -> None:
    """A config the client cannot use (a CA that is not PEM) is an ExtenderSetupError on
    the entry, and the extenders built before it are closed, not leaked."""
    cfgs = [config("http://127.0.0.1:1/"),
            config("https://127.0.0.1:1/", ca_secret_ref=("polsched-system", "ext-ca"))]

    async def not_pem(namespace: str, name: str, path: str) -> str:
        return "-----BEGIN CERTIFICATE-----\nxx\n"

    with pytest.raises(ExtenderSetupError) as exc:
        run(build_extenders(cfgs, not_pem))
    assert exc.value.path == "spec.extenders[1]"
    assert "the extender client could not be built" in exc.value.message
