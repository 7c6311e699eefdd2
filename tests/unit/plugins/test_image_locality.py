"""ImageLocality, shaped after upstream
pkg/scheduler/framework/plugins/imagelocality/image_locality_test.go
(TestImageLocalityPriority, TestNormalizedImageName)."""

from __future__ import annotations

from typing import Any

import pytest

from polsched.framework import CycleState, NodeInfo, PodInfo, Snapshot
from polsched.framework.status import Code
from polsched.plugins import image_locality
from polsched.plugins.image_locality import MB, normalized_image_name
from tests.builders import make_node, make_pod
from tests.unit.pipelines import args_errors, build_plugin

pytestmark = pytest.mark.unit


def spec(*images: str, init: tuple[str, ...] = (), volumes: tuple[str, ...] = ()
         ) -> dict[str, Any]:
    return {
        "containers": [{"name": f"c{i}", "image": im} for i, im in enumerate(images)],
        "initContainers": [{"name": f"i{i}", "image": im} for i, im in enumerate(init)],
        "volumes": [{"name": f"v{i}", "image": {"reference": ref}}
                    for i, ref in enumerate(volumes)],
    }


def pod(s: dict[str, Any]) -> PodInfo:
    return make_pod().name("p").spec(**s).info()


def images(*entries: tuple[list[str], int]) -> list[dict[str, Any]]:
    return [{"names": names, "sizeBytes": size * MB} for names, size in entries]


NODE_40_300_2000 = images((["gcr.io/40:latest", "gcr.io/40:v1", "gcr.io/40:v1"], 40),
                          (["gcr.io/300:latest", "gcr.io/300:v1"], 300),
                          (["gcr.io/2000:latest"], 2000))
NODE_250_10 = images((["gcr.io/250:latest"], 250), (["gcr.io/10:latest", "gcr.io/10:v1"], 10))
NODE_600_40_900 = images((["gcr.io/600:latest"], 600), (["gcr.io/40:latest"], 40),
                         (["gcr.io/900:latest"], 900))
NODE_300_600_900 = images((["gcr.io/300:latest"], 300), (["gcr.io/600:latest"], 600),
                          (["gcr.io/900:latest"], 900))
NODE_4000_30 = images((["gcr.io/4000:latest"], 4000), (["gcr.io/30:latest"], 30))
NODE_20_30_40 = images((["gcr.io/20:latest"], 20), (["gcr.io/30:latest"], 30),
                       (["gcr.io/40:latest"], 40))
NO_IMAGES: list[dict[str, Any]] = []


def node(name: str, imgs: list[dict[str, Any]]) -> NodeInfo:
    return make_node().name(name).status(images=imgs).info()


def scores(p: PodInfo, node_images: list[list[dict[str, Any]]]) -> list[int]:
    nodes = [node(f"node{i + 1}", imgs) for i, imgs in enumerate(node_images)]
    plugin = build_plugin(image_locality.NAME)
    state = CycleState()
    st = plugin.pre_score(state, p, nodes, Snapshot(nodes))
    if st.code is Code.SKIP:
        return [0] * len(nodes)
    assert st.ok
    scores: list[int] = plugin.score_nodes(state, p, nodes)
    return scores


CASES = [
    ("two images spread on two nodes, prefer the larger image one",
     spec("gcr.io/40", "gcr.io/250"), [NODE_40_300_2000, NODE_250_10], [0, 5]),
    ("two images on one node, prefer this node",
     spec("gcr.io/40", "gcr.io/300"), [NODE_40_300_2000, NODE_250_10], [7, 0]),
    ("if exceed limit, use limit",
     spec("gcr.io/10", "gcr.io/4000"), [NODE_4000_30, NODE_250_10], [100, 0]),
    ("if exceed limit, use limit (with node which has no images present)",
     spec("gcr.io/10", "gcr.io/4000"), [NODE_4000_30, NODE_250_10, NO_IMAGES], [66, 0, 0]),
    ("pod with multiple large images, node2 is preferred",
     spec("gcr.io/300", "gcr.io/600", "gcr.io/900"),
     [NODE_600_40_900, NODE_300_600_900, NO_IMAGES], [32, 36, 0]),
    ("pod with multiple small images",
     spec("gcr.io/30", "gcr.io/40"), [NODE_20_30_40, NODE_4000_30], [1, 0]),
    ("pod with ImageVolume",
     spec("gcr.io/30", volumes=("gcr.io/300",)), [NODE_300_600_900, NODE_4000_30], [6, 0]),
    ("same images as ImageVolume pod but as regular container images",
     spec("gcr.io/30", "gcr.io/300"), [NODE_300_600_900, NODE_4000_30], [6, 0]),
    ("include InitContainers: two images spread on two nodes, prefer the larger image one",
     spec("gcr.io/30", init=("gcr.io/300",)), [NODE_40_300_2000, NODE_20_30_40], [6, 0]),
]


@pytest.mark.parametrize(("s", "node_images", "want"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_image_locality_priority(s: dict[str, Any], node_images: list[list[dict[str, Any]]],
                                 want: list[int]) -> None:
    assert scores(pod(s), node_images) == want


def test_prescore_skips_when_no_node_has_any_image() -> None:
    nodes = [node("node1", NODE_250_10)]
    plugin = build_plugin(image_locality.NAME)
    p = pod(spec("gcr.io/unknown"))
    assert plugin.pre_score(CycleState(), p, nodes, Snapshot(nodes)).code is Code.SKIP


@pytest.mark.parametrize(("name", "want"), [
    ("root", "root:latest"),
    ("gcr.io:5000/root", "gcr.io:5000/root:latest"),
    ("root:tag", "root:tag"),
    ("root@sha256:4813494d137e1631bba301d5acab6e7bb7aa74ce1185d456565ef51d737677b2",
     "root@sha256:4813494d137e1631bba301d5acab6e7bb7aa74ce1185d456565ef51d737677b2"),
], ids=["add :latest postfix 1", "add :latest postfix 2", "keep it as is 1",
        "keep it as is 2"])
def test_normalized_image_name(name: str, want: str) -> None:
    assert normalized_image_name(name) == want


def test_args_are_refused() -> None:
    assert args_errors(image_locality.NAME, {"x": 1})
