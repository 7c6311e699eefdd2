"""bench/extender.py, the extender every scheduler of the bench calls: started as the
bench starts it, driven by polsched's HTTPExtender and by a plain HTTP/1.1 client (as
Go's sends requests), answering as the bench's violation check expects."""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from polsched.extender import HTTPExtender
from tests.unit.extender.fake_extender import config, make_node, make_pod, run

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[3]
NODES = [make_node(f"bench-node-{i}") for i in range(1, 13)]


@pytest.fixture
def bench_extender() -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    proc = subprocess.Popen([sys.executable, str(ROOT / "bench" / "extender.py")],
                            stdout=subprocess.PIPE)
    assert proc.stdout is not None
    line = proc.stdout.readline().split()
    assert line[:1] == [b"ready"]
    try:
        yield int(line[1]), proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_filter_and_prioritize_through_http_extender(
        bench_extender: tuple[int, subprocess.Popen[bytes]]) -> None:
    port, proc = bench_extender
    ext = HTTPExtender(config(f"http://127.0.0.1:{port}/", filter_verb="filter",
                              prioritize_verb="prioritize", node_cache_capable=True))

    async def cycle() -> tuple[list[str], dict[str, str], dict[str, int]]:
        try:
            feasible, failed, _ = await ext.filter(make_pod(), NODES)
            scores = await ext.prioritize(make_pod(), feasible)
            return [n.name for n in feasible], failed, scores
        finally:
            await ext.close()

    feasible, failed, scores = run(cycle())
    assert feasible == [f"bench-node-{i}" for i in range(1, 13) if i != 10]
    assert list(failed) == ["bench-node-10"]
    assert scores == {name: int(name.rsplit("-", 1)[1]) % 11 for name in feasible}
    proc.terminate()
    out, _ = proc.communicate(timeout=10)
    assert json.loads(out.decode().splitlines()[-1]) == {"filter": 1, "prioritize": 1}


def test_a_kept_alive_client_gets_every_answer_and_unknown_paths_404(
        bench_extender: tuple[int, subprocess.Popen[bytes]]) -> None:
    port, _ = bench_extender
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        body = json.dumps({"Pod": {}, "Nodes": None, "NodeNames": ["n-20", "n-3"]})
        for _ in range(3):
            conn.request("POST", "/filter", body, {"Content-Type": "application/json"})
            resp = conn.getresponse()
            assert resp.status == 200
            assert json.loads(resp.read()) == {
                "NodeNames": ["n-3"], "FailedNodes": {
                    "n-20": "the bench extender rejects every tenth node"}, "Error": ""}
        conn.request("POST", "/bind", "{}")
        resp = conn.getresponse()
        assert resp.status == 404
        resp.read()
        # Whole nodes (nodeCacheCapable false) are read by name too.
        conn.request("POST", "/prioritize", json.dumps(
            {"Pod": {}, "Nodes": {"items": [{"metadata": {"name": "n-13"}}]},
             "NodeNames": None}))
        resp = conn.getresponse()
        assert json.loads(resp.read()) == [{"Host": "n-13", "Score": 2}]
    finally:
        conn.close()
