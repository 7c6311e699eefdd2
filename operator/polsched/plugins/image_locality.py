"""ImageLocality: prefer nodes that already have the pod's images, weighted by image size
and by how widely the image is spread (an image on every node says little).

Copies kube-scheduler's imagelocality plugin (pkg/scheduler/framework/plugins/imagelocality/
image_locality.go): the sum over the pod's images (init containers, containers, image
volumes) present on the node of size * nodesWithImage / allNodes, clamped to
[23MB, 1000MB * number of images] and scaled to 0..100. No NormalizeScore.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from polsched.framework import signers
from polsched.framework.cycle_state import CycleState
from polsched.framework.interfaces import (
    MAX_NODE_SCORE,
    Handle,
    PreScorePlugin,
    ScorePlugin,
    SignFragment,
    SignPlugin,
)
from polsched.framework.registry import ArgsError, PluginSpec
from polsched.framework.status import SKIP, SUCCESS, Status
from polsched.framework.types import NodeInfo, PodInfo, Snapshot

NAME = "ImageLocality"

MB = 1024 * 1024
# Below it an image counts as absent; the largest a single container's image counts.
MIN_THRESHOLD = 23 * MB
MAX_CONTAINER_THRESHOLD = 1000 * MB

_PRE_SCORE_KEY = "PreScore" + NAME


def normalized_image_name(name: str) -> str:
    """normalizedImageName: append ":latest" when the name has neither tag nor digest."""
    if name.rfind(":") <= name.rfind("/"):
        name = name + ":latest"
    return name


def pod_images(spec: Mapping[str, Any]) -> tuple[list[str], int]:
    """The pod's normalized image names and the image count (sumImageScores): init
    containers, containers and image volumes."""
    names: list[str] = []
    count = 0
    for c in (*(spec.get("initContainers") or ()), *(spec.get("containers") or ())):
        names.append(normalized_image_name(c.get("image") or ""))
        count += 1
    for v in spec.get("volumes") or ():
        image = v.get("image")
        if image is None:
            continue
        names.append(normalized_image_name(image.get("reference") or ""))
        count += 1
    return names, count


def calculate_priority(sum_scores: int, image_count: int) -> int:
    """calculatePriority: clamp the summed image scores and scale to 0..MAX_NODE_SCORE."""
    max_threshold = MAX_CONTAINER_THRESHOLD * image_count
    if sum_scores < MIN_THRESHOLD:
        sum_scores = MIN_THRESHOLD
    elif sum_scores > max_threshold:
        sum_scores = max_threshold
    return MAX_NODE_SCORE * (sum_scores - MIN_THRESHOLD) // (max_threshold - MIN_THRESHOLD)


@dataclass(frozen=True, slots=True)
class _PodImages:
    # (normalized name, nodes that have it / all nodes), only images some node has.
    spread: tuple[tuple[str, float], ...]
    count: int


def _pod_images(pod: PodInfo, snapshot_image_nodes: Mapping[str, int],
                total_nodes: int) -> _PodImages:
    names, count = pod_images(pod.spec)
    spread = tuple((n, snapshot_image_nodes[n] / total_nodes) for n in names
                   if snapshot_image_nodes.get(n))
    return _PodImages(spread, count)


class ImageLocality(SignPlugin, PreScorePlugin, ScorePlugin):
    NAME = NAME

    def sign_pod(self, pod: PodInfo) -> Sequence[SignFragment] | None:
        """SignPod (OpportunisticBatching): what of the pod this plugin reads."""
        spec = pod.spec
        names = {normalized_image_name(str(c.get("image") or ""))
                 for c in (*(spec.get("containers") or ()), *(spec.get("initContainers") or ()))}
        return [(signers.IMAGE_NAMES, sorted(names))]

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo],
                  snapshot: Snapshot) -> Status:
        images = _pod_images(pod, snapshot.image_nodes, len(snapshot)) if len(snapshot) \
            else _PodImages((), 0)
        # No node has any of the images: every score would be 0.
        if not images.spread:
            return SKIP
        state.write(_PRE_SCORE_KEY, images)
        return SUCCESS

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        return self.score_nodes(state, pod, (node,))[0]

    def score_nodes(self, state: CycleState, pod: PodInfo,
                    nodes: Sequence[NodeInfo]) -> list[int]:
        images: _PodImages | None = state.get(_PRE_SCORE_KEY)
        if images is None:  # PreScore was not run: nothing to go on
            return [0] * len(nodes)
        out = []
        for node in nodes:
            node_images = node.images
            total = 0
            for name, spread in images.spread:
                size = node_images.get(name)
                if size is not None:
                    # scaledImageScore: int64(float64(size) * spread)
                    total += int(size * spread)
            out.append(calculate_priority(total, images.count))
        return out


def new(args: Mapping[str, Any] | None, handle: Handle) -> ImageLocality:
    if args:
        raise ArgsError("", f"{NAME} takes no args; remove them")
    return ImageLocality()


SPEC = PluginSpec(name=NAME, score=new)
