"""Policies of one engine with equal plugin entries run the same plugin objects
(build_pipeline's `share`, as Engine.apply calls it): which plugins are shared, which are
not (extenders, per-pod state), and that the shared pipelines decide exactly as pipelines
with plugins of their own."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from polsched.api import load_policy
from polsched.api.model import Policy
from polsched.cluster.cache import ClusterCache
from polsched.cluster.client import ApiClient
from polsched.extender.client import HTTPExtender
from polsched.framework.interfaces import (
    Handle,
    PermitPlugin,
    PostBindPlugin,
    PreBindPlugin,
    ReservePlugin,
)
from polsched.framework.pipeline import Pipeline
from polsched.plugins import CATALOG
from polsched.scheduler.engine import Engine
from polsched.scheduler.pipelines import build_pipeline
from tests.unit.pipelines import decide_at_once, labelled_node, policy_object, sized_pod

pytestmark = pytest.mark.unit

PRIORITY = "example.com/priority"


def policy(name: str, key: str = PRIORITY, extender: bool = False, generation: int = 1
           ) -> Policy:
    spec: dict[str, Any] = {"schedulerName": name}
    if extender:  # never called here: only its presence matters
        spec["extenders"] = [{"urlPrefix": "http://127.0.0.1:9/", "filterVerb": "filter"}]
    obj = policy_object(scorers=[{"name": "NodeLabelValue", "weight": 2,
                                  "args": {"key": key}}], name=name, **spec)
    obj["metadata"]["generation"] = generation
    return load_policy(obj, CATALOG)


def plugin_ids(pl: Pipeline) -> dict[str, int]:
    return {f"{k.point}/{k.name}": id(p) for k, p in pl.built_from}  # type: ignore[attr-defined]


PER_POD = (ReservePlugin, PermitPlugin, PreBindPlugin, PostBindPlugin)


def test_equal_plugins_of_two_policies_are_one_object_unless_per_pod_or_extenders(
        ) -> None:
    asyncio.run(_applied_through_the_engine())


async def _applied_through_the_engine() -> None:
    engine = Engine(ApiClient("https://127.0.0.1:9"))
    try:
        engine.apply(policy("a"))
        engine.apply(policy("b"))
        engine.apply(policy("c", key="example.com/other"))
        a, b, c = (engine.pipeline(n) for n in "abc")
        per_pod = {id(p) for _, p in a.built_from if isinstance(p, PER_POD)}
        assert per_pod  # the default profile has some (VolumeBinding)
        ia, ib, ic = plugin_ids(a), plugin_ids(b), plugin_ids(c)
        assert ia.keys() == ib.keys()
        shared = {k for k in ia if ia[k] == ib[k]}
        assert shared == {k for k in ia if ia[k] not in per_pod}
        assert len(shared) > 5
        # c's NodeLabelValue has other args: its own; the rest is a's.
        assert {k for k in ic if ic[k] != ia[k]} == \
            {"score/NodeLabelValue"} | {k for k in ia if ia[k] in per_pod}

        # A policy with an extender shares nothing, built or reloaded.
        d = policy("d", extender=True)
        # As the reconciler does: the policy's extenders built (none is ever called here).
        engine.apply(d, extenders=[HTTPExtender(cfg) for cfg in d.extenders])
        ids_d = set(plugin_ids(engine.pipeline("d")).values())
        assert not ids_d & set(ia.values())
        a2 = policy("a", extender=True, generation=2)
        engine.apply(a2, extenders=[HTTPExtender(cfg) for cfg in a2.extenders])
        assert not set(plugin_ids(engine.pipeline("a")).values()) & set(ib.values())
        engine.apply(policy("a", generation=3))  # without it again: shares b's
        assert plugin_ids(engine.pipeline("a"))["score/NodeLabelValue"] == \
            ib["score/NodeLabelValue"]
    finally:
        await engine.client.close()


def decide_three_policies(share: bool) -> tuple[list[str | None], int]:
    """300 pods on 30 nodes, pod i decided by policy i % 3 (two with equal plugins, one
    with another label key), its pipeline built sharing or not."""
    cache = ClusterCache(None)
    for i in range(30):
        cache.on_node_event("ADDED", labelled_node(i, PRIORITY))
    handle = Handle(listers=cache.listers)
    pls: list[Pipeline] = []
    for k, key in enumerate((PRIORITY, PRIORITY, "zone-less")):
        pls.append(build_pipeline(policy(f"s{k}", key=key), handle, rng=random.Random(k),
                                  share=list(pls) if share else ()))
    placed: list[str | None] = []
    for i in range(300):
        cache.on_pod_event("ADDED", sized_pod(i, f"s{i % 3}"))
        placed.append(decide_at_once(pls[i % 3], cache, i))
    objects = {id(p) for pl in pls for _, p in pl.built_from}
    return placed, len(objects)


def test_pipelines_sharing_plugins_decide_as_pipelines_with_their_own() -> None:
    own, n_own = decide_three_policies(share=False)
    assert len(set(own)) > 5 and None in own  # spread, and some pods fit nowhere
    shared, n_shared = decide_three_policies(share=True)
    assert n_shared < n_own
    assert shared == own
