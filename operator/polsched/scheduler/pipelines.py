"""Building a policy's Pipeline: the one builder for every caller that runs a policy.

The engine runs the pipeline for real, `polsched explain` runs it to show why, the tests
run it to check the plugins: all of them build it here, from a loaded Policy (whose
entries are plugin specs, api.model.PluginEntry) and a typed Handle, so none of them can
run wiring that production lacks (same plugins, order, weights, args, extenders, handle
and PostFilter). Who passes which Handle:

- the engine: Handle(listers=cache.listers, api=client), the live cache's listers;
  DefaultPreemption, the PostFilter, is built from the registry with the same handle;
- explain and other offline callers: Handle(listers=...) with listers they filled from
  the objects they read (Listers.load), or an empty Handle();
- tests: tests/unit/pipelines.py, with listers the test fills.

The policy's ignored_resources (extenders' managedResources with ignoredByScheduler) are
put into the handle here, so no caller can forget them. Pure: no I/O.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, TypeVar

from polsched.cluster.featuregates import TOPOLOGY_AWARE_WORKLOAD_SCHEDULING
from polsched.framework.interfaces import (
    Extender,
    FilterPlugin,
    Handle,
    PermitPlugin,
    PlacementGeneratePlugin,
    PlacementScorePlugin,
    Plugin,
    PostBindPlugin,
    PostFilterPlugin,
    PreBindPlugin,
    PreEnqueuePlugin,
    ReservePlugin,
    ScorePlugin,
)
from polsched.framework.nominator import Nominator
from polsched.framework.runtime import FilterEntry, Pipeline, ScoreEntry
from polsched.framework.types import Json, PodInfo
from polsched.plugins import REGISTRY, pod_group_pods_count, topology_placement
from polsched.plugins import default_preemption as dp
from polsched.plugins import gang_scheduling as gang

if TYPE_CHECKING:
    from polsched.api.model import PluginEntry, Policy


_P = TypeVar("_P", FilterPlugin, ScorePlugin, PreEnqueuePlugin)


class BuildError(RuntimeError):
    """A loaded policy's plugin could not be built: a polsched bug, since the loader built
    it once already to check its args."""


def build_pipeline(policy: Policy, handle: Handle | None = None,
                   extenders: Sequence[Extender] = (), *,
                   rng: random.Random | None = None,
                   reuse: Pipeline | None = None,
                   share: Sequence[Pipeline] = ()) -> Pipeline:
    """The Pipeline that schedules pods for `policy` (a loaded, validated Policy), its
    plugins built with `handle` (an empty Handle when None). DefaultPreemption, the
    PostFilter, reads PodDisruptionBudgets from handle.listers; the filters count the pods
    of handle.nominator (shared by every pipeline of one engine; None offline).

    `reuse`: the pipeline this one replaces (a hot reload), built here with the same
    `handle`. A plugin whose entry is unchanged (point, name, factory, args, and the
    policy's ignored resources, which go into the handle) is taken over instead of built
    again: a plugin is a function of what it was built from and of the cluster, and its
    per-node and per-signature tables follow the cluster (framework.types.NODE_CHANGES),
    so the new pipeline decides as a fresh one would, without rebuilding them on its
    first decisions (bench/NOTES.md "Issue 15, fourth pass"). Weights and `when` are the
    entries', not the plugins': changing them reuses the plugin. Each old plugin goes to
    one new entry at most.

    `share`: the pipelines of the other policies that run in the same engine (built with
    the same `handle`). A plugin whose source equals one of theirs is the same object in
    both, with one set of warm tables: 50 policies built and warmed 50 copies of every
    plugin, and each pod bound invalidated a node's entries in all of them (bench/NOTES.md
    "Issue 15, fifth pass: start-up"). Only where that cannot change a decision: neither
    this pipeline nor the other has extenders (a cycle without extenders never awaits, so
    no other policy's cycle runs in the middle of it), and the plugin keeps no state of
    its own per pod (no Reserve, Permit, PreBind or PostBind)."""
    handle = ph = replace(handle or Handle(), ignored_resources=policy.ignored_resources,
                          rng=rng)
    # A pipeline with extenders takes over none of the plugins it shares with others.
    pool = _Reusable(reuse, exclude=_Shared(share).ids() if extenders else frozenset())
    shared = _Shared(share) if share and not extenders else None
    built: list[tuple[object, Plugin]] = []

    def make(e: PluginEntry, kind: type[_P]) -> _P:
        key = _Source(e, policy.ignored_resources)
        plugin = None
        if shared is not None:  # before its own old one: one copy for all where possible
            plugin = shared.take(key, kind, {id(p) for _, p in built})
        if plugin is None:
            plugin = pool.take(key, kind)
        if plugin is None:
            plugin = _build(e, ph, kind)
        built.append((key, plugin))
        return plugin

    filters = [FilterEntry(make(e, FilterPlugin), e.when) for e in policy.filters]
    scorers = [ScoreEntry(make(e, ScorePlugin), e.weight, e.when) for e in policy.scorers]
    pre_enqueue = [make(e, PreEnqueuePlugin) for e in policy.pre_enqueue]
    post_filter: list[PostFilterPlugin] = []
    if policy.preemption is not None:  # spec.preemption; disabledPlugins may switch it off
        spec = REGISTRY.get(dp.NAME)
        if spec is None or spec.post_filter is None:
            raise BuildError(f"{dp.NAME} is not registered as a PostFilter plugin")
        post_filter.append(spec.post_filter({
            "minCandidateNodesPercentage": policy.preemption.min_candidate_nodes_percentage,
            "minCandidateNodesAbsolute": policy.preemption.min_candidate_nodes_absolute,
        }, ph))
    # A PostFilter plugin with a PreEnqueue point gates there too (DefaultPreemption: a
    # preemptor waits out of the active queue while its victims are evicted).
    pre_enqueue += [p for p in post_filter if isinstance(p, PreEnqueuePlugin)]
    # GangScheduling last, after DefaultPreemption, as applyGangScheduling appends it to
    # upstream's MultiPoint list.
    pre_enqueue.sort(key=lambda p: isinstance(p, gang.GangScheduling))
    # TopologyAwareWorkloadScheduling: applyTopologyAwareWorkloadScheduling appends
    # TopologyPlacementGenerator and PodGroupPodsCount (weight 1) to the default profile;
    # NodeResourcesFit, a scorer, also scores placements, with its weight.
    pipeline = Pipeline(filters, scorers, extenders, policy.percentage_of_nodes_to_score,
                        post_filter=post_filter, pre_enqueue=pre_enqueue, handle=ph)
    if TOPOLOGY_AWARE_WORKLOAD_SCHEDULING in ph.features:
        generate: list[PlacementGeneratePlugin] = [topology_placement.new(None, ph)]
        placement_score: list[tuple[PlacementScorePlugin, int]] = [
            (s.plugin, s.weight) for s in scorers
            if isinstance(s.plugin, PlacementScorePlugin) and s.when is None]
        placement_score.append((pod_group_pods_count.new(None, ph),
                                pod_group_pods_count.WEIGHT))
        pipeline.use_placement_algorithm(generate, placement_score)
    pipeline.built_from = tuple(built)
    return pipeline


def pod_group_lookup_fn(pipeline: Pipeline) -> Callable[[str], Json | None] | None:
    """How the queue of `pipeline` finds a pod group's PodGroup object by its key (its
    GangScheduling plugin's pod_group); None when the pipeline does not run
    GangScheduling."""
    for p in pipeline.pre_enqueue_plugins:
        if isinstance(p, gang.GangScheduling):
            return p.pod_group
    return None


def pod_group_key_fn(pipeline: Pipeline) -> Callable[[PodInfo], str | None] | None:
    """How the queue of `pipeline` tells a pod group's members (its GangScheduling
    plugin's group_key); None when the pipeline does not run GangScheduling (every pod is
    then scheduled alone, as upstream with the GenericWorkload gate off)."""
    for p in pipeline.pre_enqueue_plugins:
        if isinstance(p, gang.GangScheduling):
            return p.group_key
    return None


class _Reusable:
    """The plugins of the pipeline being replaced, by what they were built from."""

    def __init__(self, old: Pipeline | None, exclude: frozenset[int] = frozenset()) -> None:
        self._left: list[tuple[object, Plugin]] = [
            (k, p) for k, p in (old.built_from if old else ()) if id(p) not in exclude]

    def take(self, key: _Source, kind: type[_P]) -> _P | None:
        for i, (k, plugin) in enumerate(self._left):
            if isinstance(k, _Source) and k.same(key) and isinstance(plugin, kind):
                del self._left[i]
                return plugin
        return None


_PER_POD = (ReservePlugin, PermitPlugin, PreBindPlugin, PostBindPlugin)


class _Shared:
    """The plugins other policies' pipelines run, that a new pipeline may run too."""

    def __init__(self, pipelines: Sequence[Pipeline]) -> None:
        self._by_name: dict[str, list[tuple[_Source, Plugin]]] = {}
        for pl in pipelines:
            if pl.extenders:
                continue
            for k, plugin in pl.built_from:
                if isinstance(k, _Source) and not isinstance(plugin, _PER_POD):
                    self._by_name.setdefault(k.name, []).append((k, plugin))

    def ids(self) -> frozenset[int]:
        return frozenset(id(p) for entries in self._by_name.values() for _, p in entries)

    def take(self, key: _Source, kind: type[_P], taken: set[int]) -> _P | None:
        for k, plugin in self._by_name.get(key.name, ()):
            if k.same(key) and isinstance(plugin, kind) and id(plugin) not in taken:
                return plugin
        return None


class _Source:
    """What a plugin was built from: its entry's point, name, factory and args, and the
    policy's ignored resources (the only part of the handle that is the policy's)."""

    __slots__ = ("args", "factory", "ignored", "name", "point")

    def __init__(self, entry: PluginEntry, ignored: frozenset[str]) -> None:
        self.point = entry.point
        self.name = entry.name
        self.factory = entry.factory
        self.args = entry.args
        self.ignored = ignored

    def same(self, other: _Source) -> bool:
        # The factory by identity (the registry's), the rest by value.
        return (self.point == other.point and self.name == other.name
                and self.factory is other.factory and self.args == other.args
                and self.ignored == other.ignored)


def _build(entry: PluginEntry, handle: Handle, kind: type[_P]) -> _P:
    try:
        plugin = entry.factory(entry.args, handle)
    except Exception as err:
        raise BuildError(f"{entry.path}: building {entry.name} failed after its args were "
                         f"validated (a polsched bug): {err}") from err
    if not isinstance(plugin, kind):
        raise BuildError(f"{entry.path}: {entry.name}'s factory returned "
                         f"{type(plugin).__name__}, not a {kind.__name__}")
    return plugin


def nominator_of(pods: Iterable[PodInfo]) -> Nominator:
    """The nominations a cache holding `pods` gives the engine's Nominator: the engine
    hands it every pending pod (Engine.pending_pod_changed: Nominator.update), which keeps
    those with a status.nominatedNodeName. `polsched simulate` and `polsched explain`
    build theirs here, so the filters count the same nominated pods."""
    nominator = Nominator()
    for pod in pods:
        if not pod.node_name and not pod.terminal:
            nominator.update(pod)
    return nominator
