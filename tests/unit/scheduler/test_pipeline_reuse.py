"""A hot reload's pipeline takes over the replaced pipeline's unchanged plugins
(build_pipeline's `reuse`, as the engine's apply() calls it): which plugins are taken
over, and that the pipeline decides exactly as one built from scratch would."""

from __future__ import annotations

import random
from typing import Any

import pytest

from polsched.api import load_policy
from polsched.api.model import Policy
from polsched.cluster.cache import ClusterCache
from polsched.framework.interfaces import Handle
from polsched.framework.pipeline import Pipeline
from polsched.plugins import CATALOG
from polsched.scheduler.pipelines import build_pipeline
from tests.unit.pipelines import decide_at_once, labelled_node, policy_object, sized_pod

pytestmark = pytest.mark.unit

PRIORITY = "example.com/priority"


def policy(generation: int, scorers: list[dict[str, Any]], **spec: Any) -> Policy:
    obj = policy_object(scorers=scorers, **spec)
    obj["metadata"]["generation"] = generation
    return load_policy(obj, CATALOG)


def label_value(weight: int, key: str = PRIORITY) -> dict[str, Any]:
    return {"name": "NodeLabelValue", "weight": weight, "args": {"key": key}}


def plugins(pl: Pipeline) -> list[Any]:
    return [p for _, p in pl.built_from]


def test_a_weight_change_takes_over_every_plugin_and_an_args_change_rebuilds_its_own(
        ) -> None:
    old = build_pipeline(policy(1, [label_value(1)]))
    assert len(plugins(old)) == len(old.filters) + len(old.scorers) + \
        len(old.pre_enqueue_plugins)
    new = build_pipeline(policy(2, [label_value(2)]), reuse=old)
    assert [id(p) for p in plugins(new)] == [id(p) for p in plugins(old)]
    assert new.describe()["scorers"] != old.describe()["scorers"]  # the weights are new
    assert "NodeLabelValue:2" in new.describe()["scorers"]

    other = build_pipeline(policy(3, [label_value(2, key="example.com/other")]), reuse=new)
    kept = {id(p) for p in plugins(new)}
    rebuilt = [e.name for e in other.scorers if id(e.plugin) not in kept]
    assert rebuilt == ["NodeLabelValue"]
    assert all(id(e.plugin) in kept for e in other.filters)


def expression(weight: int, expr: str = "20 - size(node.metadata.name)") -> dict[str, Any]:
    return {"name": "Expression", "weight": weight, "args": {"expression": expr}}


def test_a_plugin_listed_twice_is_taken_over_once_per_entry() -> None:
    twice = [expression(1), expression(3)]  # Expression may repeat, here with equal args
    old = build_pipeline(policy(1, twice, defaultPlugins=False))
    new = build_pipeline(policy(2, [expression(3), expression(1)], defaultPlugins=False),
                         reuse=old)
    ids = [id(e.plugin) for e in new.scorers]
    assert len(set(ids)) == 2
    assert set(ids) == {id(e.plugin) for e in old.scorers}
    # A third entry of the same plugin finds no plugin left to take over.
    more = build_pipeline(policy(3, [*twice, expression(5)], defaultPlugins=False), reuse=new)
    assert len({id(e.plugin) for e in more.scorers}) == 3
    assert len({id(e.plugin) for e in more.scorers} & set(ids)) == 2


def decide_with_reloads(reuse: bool) -> list[str | None]:
    """300 pods on 30 nodes; every 20 pods the policy is reloaded with another weight (and
    every 60 with another label key), built with or without taking over plugins."""
    cache = ClusterCache(None)
    for i in range(30):
        cache.on_node_event("ADDED", labelled_node(i, PRIORITY))
    handle = Handle(listers=cache.listers)
    pl: Pipeline | None = None
    placed: list[str | None] = []
    for i in range(300):
        if i % 20 == 0:
            key = PRIORITY if (i // 60) % 2 == 0 else "zone-less"
            scorers = [label_value(1 + (i // 20) % 3, key=key)]
            pl = build_pipeline(policy(1 + i // 20, scorers), handle,
                                reuse=pl if reuse else None, rng=random.Random(i))
        assert pl is not None
        cache.on_pod_event("ADDED", sized_pod(i, "test"))
        placed.append(decide_at_once(pl, cache, i))
    return placed


def test_a_pipeline_that_took_over_plugins_decides_as_a_fresh_one() -> None:
    fresh = decide_with_reloads(reuse=False)
    assert len(set(fresh)) > 5 and None in fresh  # spread, and some pods fit nowhere
    assert decide_with_reloads(reuse=True) == fresh
