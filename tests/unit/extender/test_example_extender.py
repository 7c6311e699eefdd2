"""policies/extender/example_extender.py, driven by HTTPExtender and the pipeline: the
tutorial rule "pods labelled want=you may only go to node 10-9-101-66" in both node
modes, its prioritize rule, keep-alive, and the policy that points at it."""

from __future__ import annotations

import importlib.util
import random
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from polsched.extender import HTTPExtender
from polsched.framework import Snapshot
from polsched.scheduler.algorithm import schedule_pod
from tests.unit.extender.fake_extender import config, make_node, make_pod, run
from tests.unit.pipelines import build

pytestmark = pytest.mark.unit

EXAMPLE = Path(__file__).resolve().parents[3] / "policies" / "extender"
FAVOURED = "10-9-101-66"
REASON = f"pods labelled want=you may only run on node {FAVOURED}"


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("example_extender",
                                                  EXAMPLE / "example_extender.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def example_url() -> Iterator[str]:
    example = load_example()
    server = example.make_server("127.0.0.1", 0, example.Rule(FAVOURED, "want=you"))
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


NODES = [make_node("10-9-101-65"), make_node(FAVOURED), make_node("10-9-101-67")]


@pytest.mark.parametrize("cache_capable", [True, False])
def test_labelled_pods_only_pass_the_favoured_node(example_url: str,
                                                   cache_capable: bool) -> None:
    ext = HTTPExtender(config(example_url, filter_verb="filter",
                              node_cache_capable=cache_capable))

    async def both() -> tuple[object, object]:
        labelled = await ext.filter(make_pod(labels={"want": "you"}), NODES)
        plain = await ext.filter(make_pod(labels={"want": "me"}), NODES)
        await ext.close()
        return labelled, plain

    labelled, plain = run(both())
    assert labelled == ([NODES[1]], {"10-9-101-65": REASON, "10-9-101-67": REASON}, {})
    assert plain == (NODES, {}, {})


def test_prioritize_favours_the_node(example_url: str) -> None:
    ext = HTTPExtender(config(example_url, prioritize_verb="prioritize",
                              node_cache_capable=True))

    async def scores() -> dict[str, int]:
        try:
            return await ext.prioritize(make_pod(), NODES)
        finally:
            await ext.close()

    assert run(scores()) == {"10-9-101-65": 0, FAVOURED: 10, "10-9-101-67": 0}


def test_bind_is_not_implemented(example_url: str) -> None:
    from polsched.framework.interfaces import ExtenderError

    ext = HTTPExtender(config(example_url, bind_verb="bind"))
    with pytest.raises(ExtenderError, match="code 404"):
        run(ext.bind(make_pod(), FAVOURED))
    run(ext.close())


def test_policy_yaml_points_at_the_example_with_the_spec_fields() -> None:
    policy = yaml.safe_load((EXAMPLE / "policy.yaml").read_text())
    assert policy["apiVersion"] == "polsched.io/v1alpha1"
    assert policy["kind"] == "SchedulingPolicy"
    (ext,) = policy["spec"]["extenders"]
    assert ext["urlPrefix"] == "http://127.0.0.1:8888/"
    assert (ext["filterVerb"], ext["prioritizeVerb"]) == ("filter", "prioritize")
    assert ext["weight"] == 1 and ext["nodeCacheCapable"] is True


def test_pipeline_with_the_example_keeps_one_connection() -> None:
    example = load_example()
    server = example.make_server("127.0.0.1", 0, example.Rule(FAVOURED, "want=you"))
    accepted: list[object] = []

    def count(request: object, client_address: object) -> bool:
        accepted.append(client_address)  # once per TCP connection
        return True

    server.verify_request = count
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    ext = HTTPExtender(config(url, filter_verb="filter", prioritize_verb="prioritize",
                              node_cache_capable=True))
    pipeline = build(defaults=False, extenders=[ext], rng=random.Random(0))
    snap = Snapshot(NODES)

    async def twenty_pods() -> list[str | None]:
        placed = []
        for i in range(20):
            labels = {"want": "you"} if i % 2 else {}
            placed.append((await schedule_pod(pipeline, make_pod(f"p{i}", labels), snap)).node)
        await ext.close()
        return placed

    try:
        placed = run(twenty_pods())
    finally:
        server.shutdown()
        server.server_close()
    # Labelled pods are filtered to the favoured node; the others go there by its score.
    assert placed == [FAVOURED] * 20
    assert len(accepted) == 1
