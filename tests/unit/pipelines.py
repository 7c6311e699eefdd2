"""Pipelines and plugins for unit tests, built the way production builds them.

A test writes the policy (a SchedulingPolicy dict, or just its filters and scorers), the
loader validates it as the operator would, and scheduler.pipelines.build_pipeline builds
it with a Handle whose listers the test fills (Listers.load of namespaces, PVCs...). So a
test cannot pass on wiring that the engine lacks.

    pl = build(filters=[{"name": "NodeName"}], defaults=False)
    plugin = build_plugin("InterPodAffinity", objects=[namespace("team-a", team="a")])

Plugins that exist only in a test are registered with `registry=` (a Registry of their
PluginSpecs); the loader then resolves names in it instead of polsched.plugins.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from polsched import plugins
from polsched.api import load_policy
from polsched.api.model import Policy
from polsched.framework.interfaces import FilterPlugin, Handle, ScorePlugin
from polsched.framework.listers import Listers
from polsched.framework.pipeline import Extender, Pipeline
from polsched.framework.registry import Registry
from polsched.scheduler.pipelines import build_pipeline

Json = dict[str, Any]


def policy_object(filters: Sequence[Json] | None = None, scorers: Sequence[Json] | None = None,
                  *, defaults: bool = True, name: str = "test", **spec: Any) -> Json:
    """A SchedulingPolicy object; `defaults=False` turns the default plugins off."""
    body: Json = dict(spec)
    if filters is not None:
        body["filters"] = list(filters)
    if scorers is not None:
        body["scorers"] = list(scorers)
    if not defaults:
        body["defaultPlugins"] = False
    return {"apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
            "metadata": {"name": name}, "spec": body}


def load(obj: Mapping[str, Any] | None = None, *, registry: Registry | None = None,
         filters: Sequence[Json] | None = None, scorers: Sequence[Json] | None = None,
         defaults: bool = True, **spec: Any) -> Policy:
    """Load `obj`, or a policy made of `filters`, `scorers` and `spec` fields."""
    if obj is None:
        obj = policy_object(filters, scorers, defaults=defaults, **spec)
    if registry is None or registry is plugins.REGISTRY:
        return load_policy(obj)
    # A test's own registry has no default profile.
    return load_policy(obj, registry=registry, default_filters=(), default_scorers=())


def listers_of(objects: Iterable[Json] = ()) -> Listers:
    """Listers holding `objects` (any kind in framework.listers.KINDS, by `kind`)."""
    listers = Listers()
    listers.load(objects)
    return listers


def build(obj: Mapping[str, Any] | None = None, *, objects: Iterable[Json] = (),
          listers: Listers | None = None, extenders: Sequence[Extender] = (),
          registry: Registry | None = None, rng: random.Random | None = None,
          filters: Sequence[Json] | None = None, scorers: Sequence[Json] | None = None,
          defaults: bool = True, **spec: Any) -> Pipeline:
    """The Pipeline the engine would run for this policy, its plugins reading `listers`
    (or listers filled with `objects`)."""
    policy = load(obj, registry=registry, filters=filters, scorers=scorers,
                  defaults=defaults, **spec)
    handle = Handle(listers=listers if listers is not None else listers_of(objects))
    return build_pipeline(policy, handle, extenders, rng=rng or random.Random(1))


def build_plugin(name: str, args: Mapping[str, Any] | None = None, *, point: str = "filter",
                 objects: Iterable[Json] = (), listers: Listers | None = None,
                 registry: Registry | None = None, **spec: Any) -> Any:
    """The one plugin instance a policy listing only `name` (with `args`) at `point`
    ("filter" or "score") gets from the builder."""
    entry: Json = {"name": name}
    if args is not None:
        entry["args"] = args
    pl = build(registry=registry, objects=objects, listers=listers, defaults=False,
               filters=[entry] if point == "filter" else None,
               scorers=[entry] if point == "score" else None, **spec)
    plugin: FilterPlugin | ScorePlugin = (pl.filters[0].plugin if point == "filter"
                                          else pl.scorers[0].plugin)
    return plugin


def namespace(name: str, **labels: str) -> Json:
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name,
                                                  **labels}}}
