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
from polsched.api import PolicyError, load_policy
from polsched.api.model import Policy
from polsched.framework.interfaces import Extender, FilterPlugin, Handle, ScorePlugin
from polsched.framework.listers import Listers
from polsched.framework.load import LoadSource
from polsched.framework.registry import ArgsError, Catalog, Registry
from polsched.framework.runtime import Pipeline
from polsched.objects import Json
from polsched.plugins import CATALOG
from polsched.scheduler.algorithm import schedule_pod
from polsched.scheduler.pipelines import build_pipeline
from tests.builders import make_node, make_pod


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
        return load_policy(obj, CATALOG)
    # A test's own registry has no default profile.
    return load_policy(obj, Catalog(registry))


def listers_of(objects: Iterable[Json] = ()) -> Listers:
    """Listers holding `objects` (any kind in framework.listers.KINDS, by `kind`)."""
    listers = Listers()
    listers.load(objects)
    return listers


def build(obj: Mapping[str, Any] | None = None, *, objects: Iterable[Json] = (),
          listers: Listers | None = None, extenders: Sequence[Extender] = (),
          registry: Registry | None = None, rng: random.Random | None = None,
          filters: Sequence[Json] | None = None, scorers: Sequence[Json] | None = None,
          defaults: bool = True, node_load: LoadSource | None = None,
          **spec: Any) -> Pipeline:
    """The Pipeline the engine would run for this policy, its plugins reading `listers`
    (or listers filled with `objects`) and node usage from `node_load`."""
    policy = load(obj, registry=registry, filters=filters, scorers=scorers,
                  defaults=defaults, **spec)
    handle = Handle(listers=listers if listers is not None else listers_of(objects),
                    load=node_load)
    return build_pipeline(policy, handle, extenders, rng=rng or random.Random(1))


def build_plugin(name: str, args: Mapping[str, Any] | None = None, *, point: str = "",
                 objects: Iterable[Json] = (), listers: Listers | None = None,
                 registry: Registry | None = None, node_load: LoadSource | None = None,
                 **spec: Any) -> Any:
    """The one plugin instance a policy listing only `name` (with `args`) at `point`
    ("filter" or "score"; by default filter if the plugin has one) gets from the builder."""
    if not point:
        found = (registry or plugins.REGISTRY).get(name)
        point = "filter" if found is not None and found.filter is not None else "score"
    entry: Json = {"name": name}
    if args is not None:
        entry["args"] = args
    try:
        pl = build(registry=registry, objects=objects, listers=listers, defaults=False,
                   node_load=node_load,
                   filters=[entry] if point == "filter" else None,
                   scorers=[entry] if point == "score" else None, **spec)
    except PolicyError as err:
        # The loader refused the args: raise what the factory said, its path relative to
        # the entry's args, so tests of a plugin's args read as they do upstream.
        prefix = f"spec.{'filters' if point == 'filter' else 'scorers'}[0].args"
        first = err.errors[0]
        if len(err.errors) == 1 and first.path.startswith(prefix):
            raise ArgsError(first.path.removeprefix(prefix).removeprefix("."),
                            first.message) from err
        raise
    plugin: FilterPlugin | ScorePlugin = (pl.filters[0].plugin if point == "filter"
                                          else pl.scorers[0].plugin)
    return plugin


def namespace(name: str, **labels: str) -> Json:
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name,
                                                  **labels}}}


def args_errors(name: str, args: Any, *, point: str = "") -> list[str]:
    """The field paths the loader reports for a policy listing only `name` with `args`
    (relative to the entry: "args.hardPodAffinityWeight"); [] when the policy loads."""
    if not point:
        found = plugins.REGISTRY.get(name)
        point = "filter" if found is not None and found.filter is not None else "score"
    key = "filters" if point == "filter" else "scorers"
    try:
        entries: dict[str, Any] = {key: [{"name": name, "args": args}]}
        load(defaults=False, **entries)
    except PolicyError as err:
        prefix = f"spec.{key}[0]."
        return [e.path.removeprefix(prefix) for e in err.errors]
    return []


# A small cluster for tests that decide many pods in turn through a ClusterCache: nodes
# labelled `label_key` (0-6) and zone, pods of three CPU sizes.
def labelled_node(i: int, label_key: str) -> Json:
    return (make_node().name(f"n{i:02d}").resource_version(str(i + 1))
            .labels({label_key: str(i % 7), "zone": f"z{i % 3}"})
            .capacity({"cpu": "2", "memory": "8Gi", "pods": "20"}).obj())


def sized_pod(i: int, scheduler: str, node_name: str | None = None) -> Json:
    cpu = ("100m", "250m", "500m")[i % 3]
    return (make_pod().name(f"p{i:04d}").namespace("ns").uid(f"uid-{i}")
            .resource_version(str(1000 + i) if node_name is None else str(100000 + i))
            .created("2026-01-01T00:00:00Z").scheduler(scheduler).spec(nodeName=node_name)
            .req(cpu=cpu, memory="64Mi").phase("Pending").obj())


def decide_at_once(pl: Pipeline, cache: Any, i: int) -> str | None:
    """Pod i (sized_pod, already in `cache`) decided by `pl`, which has no extenders and
    so must not await; the pod is then recorded on its node in the cache."""
    info = cache.pods[f"ns/p{i:04d}"]
    coro = schedule_pod(pl, info, cache.snapshot)
    try:
        coro.send(None)
        raise AssertionError("a pipeline without extenders awaited")
    except StopIteration as stop:
        result = stop.value
    if result.node is not None:
        cache.on_pod_event("MODIFIED", sized_pod(i, info.scheduler_name, result.node))
    node: str | None = result.node
    return node
