"""FailedNodes narrowed to what was sent (issue 36): keys that name nodes the extender
was not sent are ignored, reasons lose terminal escapes and control characters and are
capped, and a pod's PodScheduled condition message is capped whatever produced it."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest
from aiohttp import web

from polsched.cluster.client import ApiClient
from polsched.extender import HTTPExtender
from polsched.extender.client import MAX_REASON_CHARS
from polsched.framework.messages import MAX_CONDITION_MESSAGE_CHARS, sanitized
from polsched.framework.types import PodInfo
from polsched.scheduler import recorder as events
from tests.unit.extender.conftest import StartExtender
from tests.unit.extender.fake_extender import config, make_node, make_pod, run

pytestmark = pytest.mark.unit

NODES = [make_node("n1"), make_node("n2")]
# 631 KB with terminal escapes: clear the screen, a title (OSC), red text, a bell.
HOSTILE = "\x1b[2J\x1b]0;pwned\x07\x1b[31mdisk full\x1b[0m\r\n" + "A" * 631_000


def filter_with(start_extender: StartExtender, answer: dict[str, Any]) -> Any:
    server = start_extender({"/filter": lambda args: answer})
    ext = HTTPExtender(config(server.url, filter_verb="filter", node_cache_capable=True))

    async def call() -> Any:
        try:
            return await ext.filter(make_pod(), NODES)
        finally:
            await ext.close()
    return run(call())


def test_failed_nodes_that_were_not_sent_are_ignored_and_logged(
        start_extender: StartExtender, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, "polsched.extender.client"):
        feasible, failed, unresolvable = filter_with(start_extender, {
            "NodeNames": ["n1"],
            "FailedNodes": {"n2": "full", "ghost": "boo", "n1-other": "x"},
            "FailedAndUnresolvableNodes": {"elsewhere": "never"}})
    assert [n.name for n in feasible] == ["n1"]
    assert failed == {"n2": "full"}
    assert unresolvable == {}
    assert 'names nodes that were not sent, ignored: "ghost", "n1-other", "elsewhere"' \
        in caplog.text


def test_failed_node_reasons_are_sanitised_and_capped(start_extender: StartExtender) -> None:
    _, failed, unresolvable = filter_with(start_extender, {
        "NodeNames": [], "FailedNodes": {"n1": HOSTILE},
        "FailedAndUnresolvableNodes": {"n2": "\x1b[1mbold\x1b[0m\ttab"}})
    assert failed["n1"].startswith("disk full  AAAA")
    assert len(failed["n1"]) <= MAX_REASON_CHARS + 3
    assert failed["n1"].isprintable() and "pwned" not in failed["n1"]
    assert unresolvable == {"n2": "bold tab"}


@pytest.mark.parametrize("text,want", [
    ("plain", "plain"),
    ("\x1b[38;5;196mred\x1b[0m", "red"),
    ("\x1b]8;;http://evil\x1b\\link\x1b]8;;\x1b\\", "link"),  # OSC 8 hyperlink
    ("\x9b2Jcleared", "cleared"),                             # 8-bit CSI
    ("a\nb\x00c\u202ed", "a b c d"),                          # newline, NUL, RTL override
])
def test_sanitized_removes_escapes_and_controls(text: str, want: str) -> None:
    assert sanitized(text, 100) == want


def test_sanitized_stays_linear_on_unterminated_escapes() -> None:
    text = ("\x1b[" + "0" * 1000) * 1000  # a million characters of half-sequences
    assert sanitized(text, len(text)) == ""


def test_a_pod_condition_message_is_capped_and_sanitised() -> None:
    """Through the EventRecorder, against a real HTTP server on 127.0.0.1 standing in
    for the API server: the PodScheduled patch it receives."""
    patches: list[Any] = []

    async def main() -> None:
        got = asyncio.Event()

        async def handle(request: web.Request) -> web.Response:
            patches.append(json.loads(await request.read()))
            got.set()
            return web.json_response({})

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", handle)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        client = ApiClient(f"http://127.0.0.1:{runner.addresses[0][1]}")
        rec = events.EventRecorder(client, "p")
        try:
            pod = PodInfo.from_json({"metadata": {"name": "web", "namespace": "ns",
                                                  "uid": "u"}, "spec": {}})
            rec.set_pod_scheduled_false(pod, "Unschedulable", "0/2 nodes: " + HOSTILE)
            await asyncio.wait_for(got.wait(), 10)
        finally:
            await rec.close()
            await client.close()
            await runner.cleanup()

    asyncio.run(main())
    (patch,) = patches
    (condition,) = patch["status"]["conditions"]
    message = condition["message"]
    assert message.startswith("0/2 nodes: disk full  AAAA")
    assert len(message) <= MAX_CONDITION_MESSAGE_CHARS + 3
    assert message.isprintable()
