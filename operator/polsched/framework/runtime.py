"""The runtime of one policy's plugins: every `run_*_plugins` of both cycles, as
kube-scheduler's framework/runtime/framework.go (frameworkImpl).

A Pipeline holds a policy's filter and score entries, its PreEnqueue and PostFilter
plugins and its extenders, and computes once, when it is built, the plugins of each
extension point (`PluginSet`): PreFilter, Filter, PreScore, Score, PostFilter, Reserve,
Permit, PreBind, PostBind. An entry with `when` applies to the pods its selector matches,
so a pod's PluginSet is looked up by which entries apply to it (computed once per
combination).

The runners here are upstream's, one per point, with its messages: RunPreFilterPlugins,
RunFilterPlugins, RunFilterPluginsWithNominatedPods, RunPreFilterExtensionAddPod /
RemovePod, RunPostFilterPlugins, RunPreScorePlugins, RunScorePlugins (Score, NormalizeScore
and the weights), RunReservePluginsReserve / Unreserve, RunPermitPlugins,
RunPreBindPlugins and RunPostBindPlugins. PreEnqueue runs in the scheduling queue
(scheduler.queue, runPreEnqueuePlugins there as upstream), on `pre_enqueue_plugins`.
Bind is the scheduler's (the Binder, or a binding extender).
The search over nodes that calls them is scheduler.algorithm's.

A Pipeline is immutable once built; hot reload builds a new one and swaps the reference.
Its only mutable state is the search's: the round-robin start index (`next_start`), the
tie-break source (`rng`) and a cache of nodes with their nominated pods.
"""

from __future__ import annotations

import functools
import itertools
import logging
import operator
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import TypeVar, overload

from polsched.framework import events, signers
from polsched.framework.budget import NODES_PER_CHECK
from polsched.framework.cycle_state import CycleState
from polsched.framework.diagnosis import FitError, PipelineError, PostFilterResult
from polsched.framework.interfaces import (
    MAX_NODE_SCORE,
    MIN_NODE_SCORE,
    Extender,
    ExtensionPoint,
    FilterPlugin,
    Handle,
    NodeSetFilter,
    PermitPlugin,
    Placement,
    PlacementFeasiblePlugin,
    PlacementGeneratePlugin,
    PlacementProgress,
    PlacementScorePlugin,
    Plugin,
    PodGroupAssignments,
    PodGroupInfo,
    PodGroupPostFilterPlugin,
    PodGroupPostFilterResult,
    PodGroupSchedulingFunc,
    PostBindPlugin,
    PostFilterPlugin,
    PreBindPlugin,
    PreemptingExtender,
    PreEnqueuePlugin,
    PreFilterExtensions,
    PreFilterPlugin,
    PreFilterResult,
    PreScorePlugin,
    ReservePlugin,
    ScoreExtensions,
    ScorePlugin,
    SignFragment,
    SignPlugin,
)
from polsched.framework.nominator import Nominator
from polsched.framework.selectors import Matcher, NodeSet
from polsched.framework.status import SKIP, SUCCESS, Code, Status
from polsched.framework.types import NodeInfo, PodInfo, Snapshot

log = logging.getLogger(__name__)

_E = TypeVar("_E", "FilterEntry", "ScoreEntry")

_node_name = operator.attrgetter("name")

# framework.go maxTimeout: no plugin may hold a pod at Permit for longer.
MAX_PERMIT_TIMEOUT = 15 * 60.0


@dataclass(frozen=True, eq=False)
class FilterEntry:
    plugin: FilterPlugin
    # when.podSelector: the entry applies only to pods whose labels match.
    when: Matcher | None = None
    # Unique within the pipeline: the plugin name, "Expression#2" for a second entry of
    # the same plugin. Reasons, skips and explanations are keyed by it.
    label: str = ""

    @functools.cached_property  # read per filter and node: an attribute after the first
    def name(self) -> str:
        return self.label or self.plugin.name


@dataclass(frozen=True, eq=False)
class ScoreEntry:
    plugin: ScorePlugin
    weight: int
    when: Matcher | None = None
    label: str = ""

    @functools.cached_property  # read per filter and node: an attribute after the first
    def name(self) -> str:
        return self.label or self.plugin.name


def _labelled(entries: Sequence[_E]) -> tuple[_E, ...]:
    seen: dict[str, int] = {}
    out = []
    for e in entries:
        n = e.plugin.name
        seen[n] = seen.get(n, 0) + 1
        out.append(replace(e, label=n if seen[n] == 1 else f"{n}#{seen[n]}"))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class PluginSet:
    """The plugins of every extension point for the pods one set of entries applies to,
    in the order they run (filters' before scorers' for a plugin at both)."""

    filters: tuple[FilterEntry, ...]
    scorers: tuple[ScoreEntry, ...]
    pre_filter: tuple[FilterEntry, ...]
    # The PreFilter entries that implement AddPod / RemovePod (PreFilterExtensions).
    pre_filter_add: tuple[FilterEntry, ...]
    pre_filter_remove: tuple[FilterEntry, ...]
    pre_score: tuple[ScoreEntry, ...]
    # The scorers with a NormalizeScore (ScoreExtensions).
    normalize: frozenset[str]
    post_filter: tuple[PostFilterPlugin, ...]
    reserve: tuple[ReservePlugin, ...]
    permit: tuple[PermitPlugin, ...]
    pre_bind: tuple[PreBindPlugin, ...]
    post_bind: tuple[PostBindPlugin, ...]
    # The pod-group cycle's PlacementFeasible plugins (GangScheduling).
    placement_feasible: tuple[PlacementFeasiblePlugin, ...] = ()
    # A rejected group's PodGroupPostFilter plugins, in the PostFilter order
    # (DynamicResources, DefaultPreemption).
    pod_group_post_filter: tuple[PodGroupPostFilterPlugin, ...] = ()

    @classmethod
    def of(cls, filters: Sequence[FilterEntry], scorers: Sequence[ScoreEntry],
           post_filter: Sequence[PostFilterPlugin],
           pre_enqueue: Sequence[PreEnqueuePlugin] = ()) -> PluginSet:
        # A plugin listed as filter and scorer is one instance: reserved once, as
        # upstream's one plugin object per name.
        unique: dict[str, Plugin] = {}
        for e in filters:
            unique.setdefault(e.name, e.plugin)
        for se in scorers:
            unique.setdefault(se.name, se.plugin)
        # A PreEnqueue plugin with other points (GangScheduling's Permit and
        # PlacementFeasible) runs there too.
        for p in pre_enqueue:
            if isinstance(p, PermitPlugin | PlacementFeasiblePlugin):
                unique.setdefault(p.name, p)
        plugins = tuple(unique.values())
        pre_filter = tuple(f for f in filters if isinstance(f.plugin, PreFilterPlugin))
        # The filters' PostFilter plugins (DynamicResources) before the policy's own
        # (DefaultPreemption), as upstream's default profile orders them.
        post = tuple(p for p in plugins if isinstance(p, PostFilterPlugin)) \
            + tuple(p for p in post_filter if p.name not in unique)
        return cls(
            filters=tuple(filters), scorers=tuple(scorers), pre_filter=pre_filter,
            pre_filter_add=tuple(f for f in filters if _implements(f.plugin, "add_pod")),
            pre_filter_remove=tuple(f for f in filters
                                    if _implements(f.plugin, "remove_pod")),
            pre_score=tuple(s for s in scorers if isinstance(s.plugin, PreScorePlugin)),
            normalize=frozenset(s.name for s in scorers
                                if isinstance(s.plugin, ScoreExtensions)),
            post_filter=post,
            reserve=tuple(p for p in plugins if isinstance(p, ReservePlugin)),
            permit=tuple(p for p in plugins if isinstance(p, PermitPlugin)),
            pre_bind=tuple(p for p in plugins if isinstance(p, PreBindPlugin)),
            post_bind=tuple(p for p in plugins if isinstance(p, PostBindPlugin)),
            placement_feasible=tuple(p for p in plugins
                                     if isinstance(p, PlacementFeasiblePlugin)),
            pod_group_post_filter=tuple(p for p in post
                                        if isinstance(p, PodGroupPostFilterPlugin)),
        )

    def at(self, point: ExtensionPoint) -> tuple[Plugin | FilterEntry | ScoreEntry, ...]:
        """The plugins (or entries) of one extension point; () for PreEnqueue and Bind,
        which are the queue's and the binder's."""
        by_point: dict[ExtensionPoint, tuple[Plugin | FilterEntry | ScoreEntry, ...]] = {
            ExtensionPoint.PRE_FILTER: self.pre_filter,
            ExtensionPoint.FILTER: self.filters,
            ExtensionPoint.POST_FILTER: self.post_filter,
            ExtensionPoint.PRE_SCORE: self.pre_score,
            ExtensionPoint.SCORE: self.scorers,
            ExtensionPoint.RESERVE: self.reserve,
            ExtensionPoint.PERMIT: self.permit,
            ExtensionPoint.PLACEMENT_FEASIBLE: self.placement_feasible,
            ExtensionPoint.POD_GROUP_POST_FILTER: self.pod_group_post_filter,
            ExtensionPoint.PRE_BIND: self.pre_bind,
            ExtensionPoint.POST_BIND: self.post_bind,
        }
        return by_point.get(point, ())

    @property
    def binding(self) -> bool:
        """Whether the pod has any Reserve, Permit, PreBind or PostBind plugin."""
        return bool(self.reserve or self.permit or self.pre_bind or self.post_bind)


def _implements(plugin: object, method: str) -> bool:
    """A PreFilterExtensions method the plugin declares and implements."""
    if not isinstance(plugin, PreFilterExtensions):
        return False
    return getattr(type(plugin), method) is not getattr(PreFilterExtensions, method)


@dataclass(frozen=True, slots=True)
class Narrowed:
    """The intersection of a cycle's PreFilterResults: the only nodes Filter visits (None:
    every node) and the plugins whose results narrowed them."""

    node_names: frozenset[str] | None = None
    plugins: tuple[str, ...] = ()


ALL_NODES = Narrowed()


def go_list(names: Sequence[str]) -> str:
    """A sorted []string as Go's %v prints it: [A B]."""
    return "[" + " ".join(names) + "]"


def filter_error(name: str, st: Status) -> PipelineError:
    """RunFilterPlugins: a Filter may only reject; an Error aborts the cycle."""
    return PipelineError(Status.error(
        f'running "{name}" filter plugin: {st.message}').with_plugin(name))


# Code.String() of upstream, for the few messages that print a code.
_GO_CODES = {Code.SUCCESS: "Success", Code.ERROR: "Error", Code.UNSCHEDULABLE: "Unschedulable",
             Code.UNSCHEDULABLE_AND_UNRESOLVABLE: "UnschedulableAndUnresolvable",
             Code.WAIT: "Wait", Code.SKIP: "Skip"}


def _as_error(point: ExtensionPoint, plugin: str, st: Status) -> Status:
    # Go's %q of the plugin name
    return Status(Code.ERROR, (f'running {point.value} plugin "{plugin}": {st.message}',),
                  plugin)


@dataclass
class PlacementScores:
    """fwk.PlacementPluginScores: one placement's weighted score from each PlacementScore
    plugin (by name, in the profile's order) and their total."""

    placement: Placement
    scores: dict[str, int] = field(default_factory=dict)
    total: int = 0


@dataclass
class Scores:
    """What RunScorePlugins computed for the feasible nodes (in their order)."""

    totals: list[int]
    # Scorer (or extender) name -> its weighted scores.
    weighted: dict[str, Sequence[int]] = field(default_factory=dict)
    # With explain: scorer name -> (raw scores, normalized scores).
    explained: dict[str, tuple[list[int], list[int]]] = field(default_factory=dict)
    # Scorer name -> its raw scores (NodePluginScores.RawScores), kept by a pipeline that
    # batches (Pipeline.keeps_raw_scores) for the batch's later NormalizeScore.
    raw: dict[str, list[int]] = field(default_factory=dict)


class _Weighted(Sequence[int]):
    """A scorer's normalized scores times its weight, computed when read."""

    __slots__ = ("values", "weight")

    def __init__(self, values: list[int], weight: int) -> None:
        self.values = values
        self.weight = weight

    def __len__(self) -> int:
        return len(self.values)

    @overload
    def __getitem__(self, i: int) -> int: ...
    @overload
    def __getitem__(self, i: slice) -> list[int]: ...
    def __getitem__(self, i: int | slice) -> int | list[int]:
        if isinstance(i, slice):
            return [v * self.weight for v in self.values[i]]
        return self.values[i] * self.weight


# Copies of nodes get generations no real node has, so that caches keyed by
# (node.name, node.generation) never take a copy's result for the live node's.
_copy_generations = itertools.count(-(1 << 40), -(1 << 20))


_NODE_FIELDS = [f.name for f in fields(NodeInfo)]
_NODE_VALUES = operator.attrgetter(*_NODE_FIELDS)
# The fields a copy gets its own container of, and where they sit in _NODE_FIELDS.
_NODE_COPIED = tuple((_NODE_FIELDS.index(name), kind) for name, kind in (
    ("requested", dict), ("pods", dict), ("used_ports", set)))
_NODE_GENERATION_AT = _NODE_FIELDS.index("generation")


def node_copy(node: NodeInfo) -> NodeInfo:
    """A copy of `node` whose pods may be added and removed (NodeInfo.Snapshot); the live
    NodeInfo is not touched. dataclasses.replace without its generic per-field work
    (preemption copies each candidate node)."""
    values = list(_NODE_VALUES(node))
    for i, kind in _NODE_COPIED:
        values[i] = kind(values[i])
    values[_NODE_GENERATION_AT] = next(_copy_generations)
    return NodeInfo(*values)


# How many distinct combinations of `when` entries a pipeline remembers the PluginSet of.
_PLUGIN_SETS_MAX = 256


class Pipeline:
    """One policy's plugins and extenders, and the runners of every extension point
    (frameworkImpl). Implements interfaces.FrameworkHandle for its PostFilter plugins."""

    def __init__(
        self,
        filters: Sequence[FilterEntry],
        scorers: Sequence[ScoreEntry],
        extenders: Sequence[Extender] = (),
        percentage_of_nodes_to_score: int = 0,
        post_filter: Sequence[PostFilterPlugin] = (),
        pre_enqueue: Sequence[PreEnqueuePlugin] = (),
        handle: Handle | None = None,
    ) -> None:
        """`handle`: the one the plugins were built with; the pipeline counts the pods of
        its nominator and breaks ties with its rng (its own when None). Pod groups go
        through the default algorithm unless use_placement_algorithm says otherwise."""
        self.placement_algorithm = False
        self.placement_generate: tuple[PlacementGeneratePlugin, ...] = ()
        self.placement_score: tuple[tuple[PlacementScorePlugin, int], ...] = ()
        nominator = handle.nominator if handle is not None else None
        rng = handle.rng if handle is not None else None
        self.filters = _labelled(filters)
        self.scorers = _labelled(scorers)
        # PreEnqueue: the queue runs these before a pod may enter the active queue.
        self.pre_enqueue_plugins = tuple(pre_enqueue)
        self._post_filter = tuple(post_filter)
        # Ignorable extenders go last (upstream: scheduler.go buildExtenders).
        self.extenders = tuple(sorted(extenders, key=lambda e: e.ignorable))
        self.percentage_of_nodes_to_score = percentage_of_nodes_to_score
        # The feature gates the plugins were built with (Handle.features).
        self.features = handle.features if handle is not None else frozenset()
        # Pods nominated to nodes (shared by the engine's pipelines); None: none count.
        self._nominator = nominator
        # The search's state (scheduler.algorithm): the tie-break source and where the
        # next search over the nodes starts (upstream's nextStartNodeIndex).
        self.rng = rng or random.Random()
        self.next_start = 0
        # node name -> (the node, its generation, the nominated pods, the node with them):
        # see _with_nominated.
        self._nominated_trials: dict[
            str, tuple[NodeInfo, int, tuple[PodInfo, ...], NodeInfo]] = {}
        # The plugins of every point when every entry applies, and whether some entry
        # applies to some pods only (then plugins_for looks the pod's set up).
        self._all = PluginSet.of(self.filters, self.scorers, self._post_filter,
                                 self.pre_enqueue_plugins)
        self._per_pod = any(e.when is not None for e in self.filters) or any(
            s.when is not None for s in self.scorers)
        self._sets: dict[tuple[bool, ...], PluginSet] = {}
        # computeBatchablePlugins: pods are signed (OpportunisticBatching) only when
        # every filter and scorer is a SignPlugin and no extender runs; polsched's `when`
        # entries, which upstream lacks, turn it off too (a pod's plugins would be part
        # of what it is).
        self._signers: tuple[SignPlugin, ...] = ()
        # Set below: whether Score keeps each scorer's raw scores (Scores.raw) for the
        # batch (OpportunisticBatching on and pods signed).
        self.keeps_raw_scores = False
        plugins: list[tuple[str, Plugin]] = [(e.name, e.plugin) for e in self.filters]
        plugins += [(e.name, e.plugin) for e in self.scorers]
        self.signable = not self.extenders and not self._per_pod and all(
            isinstance(p, SignPlugin) and not p.signs_no_pod() for _, p in plugins)
        if self.signable:
            unique: dict[str, SignPlugin] = {}
            for name, p in plugins:
                if isinstance(p, SignPlugin):
                    unique.setdefault(name, p)
            self._signers = tuple(unique.values())
        self.keeps_raw_scores = self.signable and \
            signers.OPPORTUNISTIC_BATCHING in self.features
        # (what a plugin was built from, the plugin), set by the one builder
        # (scheduler.pipelines.build_pipeline): a hot reload's new pipeline takes over the
        # plugins whose entry did not change, with their warm per-node tables.
        self.built_from: tuple[tuple[object, Plugin], ...] = ()

    def use_placement_algorithm(self, generate: Sequence[PlacementGeneratePlugin],
                                score: Sequence[tuple[PlacementScorePlugin, int]]) -> None:
        """Pod groups go through the placement algorithm (TopologyAwareWorkloadScheduling
        on), with the PlacementGenerate plugins `generate` and the PlacementScore plugins
        with their weights `score`. Set once, by the builder (scheduler.pipelines), before
        the pipeline is used."""
        self.placement_algorithm = True
        self.placement_generate = tuple(generate)
        self.placement_score = tuple(score)

    # -- description -----------------------------------------------------------------
    def describe(self) -> dict[str, list[str]]:
        """What status.pipeline reports."""
        return {
            "filters": [f.name for f in self.filters],
            "scorers": [f"{s.name}:{s.weight}" for s in self.scorers],
            "extenders": [e.name for e in self.extenders],
        }

    @property
    def nominator(self) -> Nominator | None:
        return self._nominator

    @property
    def plugins(self) -> PluginSet:
        """The plugins of every point, all entries included."""
        return self._all

    def plugins_for(self, pod: PodInfo) -> PluginSet:
        """The plugins of every point among the entries that apply to `pod`."""
        if not self._per_pod:
            return self._all
        labels = pod.labels
        mask = tuple(f.when is None or f.when(labels) for f in self.filters) + tuple(
            s.when is None or s.when(labels) for s in self.scorers)
        got = self._sets.get(mask)
        if got is None:
            n = len(self.filters)
            got = PluginSet.of([f for f, m in zip(self.filters, mask[:n], strict=True) if m],
                               [s for s, m in zip(self.scorers, mask[n:], strict=True) if m],
                               self._post_filter, self.pre_enqueue_plugins)
            if len(self._sets) >= _PLUGIN_SETS_MAX:
                self._sets.clear()
            self._sets[mask] = got
        return got

    def sign_pod(self, pod: PodInfo) -> str | None:
        """SignPod: the pod's signature (two pods with the same one get the same
        feasibility and scores on the same nodes in the same state), None when the
        pipeline does not sign pods or one of its plugins cannot sign this one."""
        if not self.signable:
            return None
        fragments: list[SignFragment] = []
        for plugin in self._signers:
            got = plugin.sign_pod(pod)
            if got is None:
                return None
            fragments.extend(got)
        return signers.signature(pod.scheduler_name, fragments)

    def queueing_hints(self) -> dict[str, tuple[events.ClusterEventWithHint, ...]]:
        """Plugin label -> the cluster events that may help a pod it rejected, with their
        hints (EnqueueExtensions), for the scheduling queue."""
        plugins: dict[str, object] = {}
        for e in self.filters:
            plugins.setdefault(e.name, e.plugin)
        for se in self.scorers:
            plugins.setdefault(se.name, se.plugin)
        for p in self.pre_enqueue_plugins:
            plugins.setdefault(p.name, p)
        return events.hint_map(plugins)

    # -- PreFilter and Filter ----------------------------------------------------------
    def run_pre_filter_plugins(self, state: CycleState, pod: PodInfo, snapshot: Snapshot,
                               plugins: PluginSet) -> tuple[Status, Narrowed]:
        """RunPreFilterPlugins: PreFilter of every filter that has one. Skip marks the plugin
        skipped for this cycle; UnschedulableAndUnresolvable returns at once; Unschedulable
        lets the others run (preemption needs their state) and the last one is returned;
        an Error raises PipelineError (the cycle aborts, SchedulerError). The
        PreFilterResults are intersected; an empty intersection is
        UnschedulableAndUnresolvable with upstream's message. Also returns the merged
        result and the plugins that narrowed the nodes."""
        names: frozenset[str] | None = None
        with_nodes: list[str] = []
        rejection: Status | None = None
        budget = state.budget
        for f in plugins.pre_filter:
            if budget is not None:
                budget.check("PreFilter before %s", f.name)
            st = f.plugin.pre_filter(state, pod, snapshot)  # type: ignore[attr-defined]
            if isinstance(st, PreFilterResult):
                if st.node_names is None:
                    continue
                with_nodes.append(f.name)
                names = st.node_names if names is None else names & st.node_names
                if not names:
                    plugins_ = sorted(with_nodes)
                    msg = (f"node(s) didn't satisfy plugin {plugins_[0]}"
                           if len(plugins_) == 1
                           else f"node(s) didn't satisfy plugin(s) {go_list(plugins_)} "
                                "simultaneously")
                    return (Status.unresolvable(msg).with_plugin(f.name),
                            Narrowed(names, tuple(plugins_)))
                continue
            code = st.code
            if code is Code.SUCCESS:
                continue
            if code is Code.SKIP:
                state.skip_filter.add(f.name)
            elif code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
                return st.with_plugin(f.name), ALL_NODES
            elif code is Code.UNSCHEDULABLE:
                rejection = st.with_plugin(f.name)
            else:
                raise PipelineError(Status.error(
                    f'running PreFilter plugin "{f.name}": {st.message}').with_plugin(f.name))
        return (rejection or SUCCESS), Narrowed(names, tuple(sorted(with_nodes)))

    def run_filter_plugins(self, state: CycleState, pod: PodInfo, node: NodeInfo,
                           plugins: PluginSet) -> Status:
        """RunFilterPlugins: all filters on one node; the first rejection wins; an Error
        raises PipelineError."""
        skip = state.skip_filter
        for f in plugins.filters:
            if f.name in skip:
                continue
            st = f.plugin.filter(state, pod, node)
            if st.code is not Code.SUCCESS:
                if st.code is Code.ERROR:
                    raise filter_error(f.name, st)
                return st.with_plugin(f.name)
        return SUCCESS

    def run_filter_plugins_on_nodes(self, state: CycleState, pod: PodInfo, snapshot: Snapshot,
                                    nodes: list[NodeInfo], plugins: PluginSet,
                                    to_find: int, statuses: dict[str, Status]
                                    ) -> tuple[list[NodeInfo], int]:
        """RunFilterPluginsWithNominatedPods over `nodes` (findNodesThatPassFilters' loop):
        from where the previous search stopped (`next_start`, which the caller moves on)
        until `to_find` nodes pass. Each rejected node's status goes into `statuses`; an
        Error raises PipelineError. Returns the feasible nodes and how many nodes were
        processed. The same filters in the same order as run_filter_plugins, resolved once
        per pod instead of per node: this loop runs per pod x node."""
        feasible: list[NodeInfo] = []
        n_nodes = len(nodes)
        start = self.next_start % n_nodes if n_nodes else 0
        filters = plugins.filters
        processed = 0
        # run_filters inlined: this loop runs per pod x node, so the skips and the entries'
        # names are resolved once per pod, not per node.
        skip = state.skip_filter
        # The filters that can name the nodes they pass (NodeSetFilter) do it once for the
        # whole cluster: a node in every such set runs only the other filters; a node
        # outside runs them all in order, so its status is the one Filter gives.
        passing: NodeSet | None = None
        # The filters each node in `passing` runs, as functions of the node.
        rest: list[tuple[str, Callable[[NodeInfo], Status]]] = []
        # For the nodes outside `passing`: every filter in order, those with a NodeSet
        # as a membership test (a node in a filter's set passes it without the call).
        outside_chain: list[tuple[str, Callable[[CycleState, PodInfo, NodeInfo], Status],
                                  NodeSet | None, Status | None]] = []
        for f in filters:
            if f.name in skip:
                continue
            plugin = f.plugin
            ns = rejection = None
            if n_nodes > 1 and isinstance(plugin, NodeSetFilter):
                ns = plugin.filter_nodes(state, pod, snapshot)
                if ns is not None:
                    rejection = plugin.filter_rejection(state, pod)
            outside_chain.append((f.name, plugin.filter, ns, rejection))
            if ns is None:
                bound = plugin.bind_filter(state, pod)
                rest.append((f.name, bound if bound is not None
                             else functools.partial(plugin.filter, state, pod)))
            else:
                passing = ns if passing is None else passing.and_(ns)
        pass_names: frozenset[str] | set[str] = frozenset()
        outside = True  # no NodeSet: every node runs `rest`, which is every filter
        if passing is not None:
            pass_names, outside = passing.names, passing.complement
        success = Code.SUCCESS
        error = Code.ERROR
        # Filters return a few shared Status constants; each gets its plugin once per pod.
        labelled: dict[tuple[int, str], Status] = {}
        keep: list[Status] = []  # the keys' statuses, alive so their ids stay unique

        def reject(node_name: str, name: str, st: Status) -> None:
            if st.code is error:
                raise filter_error(name, st)
            if st.plugin:
                statuses[node_name] = st
                return
            key = (id(st), name)
            wp = labelled.get(key)
            if wp is None:
                wp = labelled[key] = st.with_plugin(name)
                keep.append(st)
            statuses[node_name] = wp

        def passes_outside(node: NodeInfo, node_name: str) -> bool:
            """A node some NodeSetFilter left out: the first rejection in filter order,
            or True (a NodeSet may leave out a node its Filter passes)."""
            for name, fn, ns, rejection in outside_chain:
                if ns is not None:
                    if (node_name in ns.names) is not ns.complement:
                        continue
                    if rejection is not None:
                        reject(node_name, name, rejection)
                        return False
                st = fn(state, pod, node)
                if st.code is not success:
                    reject(node_name, name, st)
                    return False
            return True

        nominated = self.nominated_pods(pod)
        if not nominated and not rest and n_nodes:
            # Every filter left is a NodeSetFilter (alike plain pods): the nodes inside
            # `passing` are feasible without a call, so only the nodes outside it are
            # visited, in the same order and with the same stop as the loop below.
            order = (nodes[start:] + nodes[:start]) if start else nodes
            flags = map(pass_names.__contains__, map(_node_name, order))
            if not outside:
                flags = map(operator.not_, flags)
            # A node outside is rejected by the first filter whose set leaves it out: when
            # that filter's rejection is shared (filter_rejection) it is looked up here;
            # otherwise passes_outside calls the filters in order.
            chain: list[tuple[frozenset[str] | set[str], bool, Status | None]] = []
            for name, _fn, ns, rejection in outside_chain:
                if ns is None or (rejection is not None and rejection.code is error):
                    break
                chain.append((ns.names, ns.complement,
                              None if rejection is None else rejection.with_plugin(name)))
            shared = chain if len(chain) == len(outside_chain) else None
            prev = 0
            budget = state.budget
            checked = 0
            for p in itertools.compress(range(n_nodes), flags):
                need = to_find - len(feasible)
                if p - prev >= need:
                    break
                checked += 1
                if budget is not None and not checked % NODES_PER_CHECK:
                    budget.check("Filter after %d of %d nodes", p, n_nodes)
                feasible.extend(order[prev:p])
                node = order[p]
                node_name = node.name
                prev = p + 1
                if shared is not None:
                    first: Status | None = None
                    for names, complement, shared_rejection in shared:
                        if (node_name in names) is complement:
                            first = shared_rejection
                            break
                    if first is not None:
                        statuses[node_name] = first
                        continue
                if passes_outside(node, node_name):
                    feasible.append(node)
                    if len(feasible) >= to_find:
                        break
            else:
                p = -1
            if p < 0 or len(feasible) < to_find:  # the stop is among the passing nodes
                end = min(prev + to_find - len(feasible), n_nodes)
                feasible.extend(order[prev:end])
                prev = end
            return feasible, prev
        budget = state.budget
        for node in (nodes[start:] + nodes[:start]) if start else nodes:
            if budget is not None and not processed % NODES_PER_CHECK:
                budget.check("Filter after %d of %d nodes", processed, n_nodes)
            processed += 1
            node_name = node.name
            if nominated and node_name in nominated:
                st = self.run_filters_with_nominated(state, pod, node, plugins,
                                                     nominated[node_name])
                if st.ok:
                    feasible.append(node)
                    if len(feasible) >= to_find:
                        break
                else:
                    statuses[node_name] = st
                continue
            if (node_name in pass_names) is outside:
                # Rejected by some NodeSetFilter: the first rejection in filter order.
                if passes_outside(node, node_name):
                    feasible.append(node)
                    if len(feasible) >= to_find:
                        break
                continue
            for name, bound_fn in rest:
                st = bound_fn(node)
                if st.code is not success:
                    reject(node_name, name, st)
                    break
            else:
                feasible.append(node)
                if len(feasible) >= to_find:
                    break
        return feasible, processed

    def nominated_pods(self, pod: PodInfo) -> dict[str, list[PodInfo]]:
        """Node -> the pods nominated there that count for `pod`: an equal or higher
        priority, and not the pod itself (addGENominatedPods)."""
        nominator = self._nominator
        if nominator is None or not len(nominator):
            return {}
        out: dict[str, list[PodInfo]] = {}
        for node_name in nominator.nodes():
            pods = [p for p in nominator.pods_for_node(node_name)
                    if p.priority >= pod.priority and p.uid != pod.uid]
            if pods:
                out[node_name] = pods
        return out

    def nominated_pods_on(self, pod: PodInfo, node_name: str) -> Sequence[PodInfo]:
        """nominated_pods(pod)'s entry for one node, without walking the other nodes (a
        preemption's dry run asks once per victim and candidate node)."""
        nominator = self._nominator
        if nominator is None or not len(nominator):
            return ()
        return [p for p in nominator.pods_for_node(node_name)
                if p.priority >= pod.priority and p.uid != pod.uid]

    def run_filters_with_nominated(self, state: CycleState, pod: PodInfo, node: NodeInfo,
                                   plugins: PluginSet, nominated: Sequence[PodInfo]) -> Status:
        """RunFilterPluginsWithNominatedPods, with the nominated pods given: with nominated
        pods (of an equal or higher priority) on the node the pod must fit; then, if it
        does, without them too (a pod's affinity to a nominated pod must not count, as it
        may never run there)."""
        if not nominated:
            return self.run_filter_plugins(state, pod, node, plugins)
        trial = self._with_nominated(node, nominated)
        trial_state = state.clone()
        for p in nominated:
            st = self.run_pre_filter_extension(trial_state, pod, p, trial, plugins, add=True)
            if not st.ok:
                raise PipelineError(st)
        st = self.run_filter_plugins(trial_state, pod, trial, plugins)
        if not st.ok:
            return st
        return self.run_filter_plugins(state, pod, node, plugins)

    def run_filter_plugins_with_nominated_pods(self, state: CycleState, pod: PodInfo,
                                               node: NodeInfo) -> Status:
        """RunFilterPluginsWithNominatedPods (interfaces.FrameworkHandle)."""
        return self.run_filters_with_nominated(
            state, pod, node, self.plugins_for(pod), self.nominated_pods_on(pod, node.name))

    def _with_nominated(self, node: NodeInfo, nominated: Sequence[PodInfo]) -> NodeInfo:
        """A copy of `node` with the nominated pods added, shared by the pods that see the
        same node (object and generation) and the same nominated pods: every pod decided
        while a preemptor waits for its victims checks its nominated node, and a copy per
        pod (with a generation of its own, so no filter memo ever hit) was most of what
        a nomination cost a decision. Filters and PreFilterExtensions never change the
        NodeInfo they are given (upstream's contract, kept by every plugin here); the
        AddPod extensions read the node's labels and taints only, so they see the copy
        with every nominated pod instead of one at a time to the same effect."""
        pods = tuple(nominated)
        got = self._nominated_trials.get(node.name)
        if got is not None and got[0] is node and got[1] == node.generation \
                and len(got[2]) == len(pods) \
                and all(a is b for a, b in zip(got[2], pods, strict=True)):
            return got[3]
        trial = node_copy(node)
        for p in pods:
            trial.add_pod(p)
        trials = self._nominated_trials
        if len(trials) > 64 and node.name not in trials:
            trials.clear()  # nodes no longer nominated: drop their copies
        trials[node.name] = (node, node.generation, pods, trial)
        return trial

    def run_pre_filter_extension(self, state: CycleState, pod: PodInfo, other: PodInfo,
                                 node: NodeInfo, plugins: PluginSet, add: bool) -> Status:
        """RunPreFilterExtensionAddPod / RemovePod: tell each filter whose PreFilter ran
        (and did not Skip) that `other` was added to or removed from `node`."""
        skip = state.skip_filter
        for f in plugins.pre_filter_add if add else plugins.pre_filter_remove:
            if f.name in skip:
                continue
            ext: PreFilterExtensions = f.plugin  # type: ignore[assignment]
            st = (ext.add_pod if add else ext.remove_pod)(state, pod, other, node)
            if not st.ok:
                return Status.error(
                    f"running {'AddPod' if add else 'RemovePod'} on PreFilter plugin "
                    f"{f.name!r}: {st.message}").with_plugin(f.name)
        return SUCCESS

    def run_pre_filter_extension_add_pod(self, state: CycleState, pod: PodInfo,
                                         to_add: PodInfo, node: NodeInfo) -> Status:
        return self.run_pre_filter_extension(state, pod, to_add, node,
                                             self.plugins_for(pod), add=True)

    def run_pre_filter_extension_remove_pod(self, state: CycleState, pod: PodInfo,
                                            to_remove: PodInfo, node: NodeInfo) -> Status:
        return self.run_pre_filter_extension(state, pod, to_remove, node,
                                             self.plugins_for(pod), add=False)

    def preempting_extenders(self, pod: PodInfo) -> Sequence[PreemptingExtender]:
        return [e for e in self.extenders if isinstance(e, PreemptingExtender)
                and e.supports_preemption() and e.is_interested(pod)]

    # -- PostFilter --------------------------------------------------------------------
    async def run_post_filter_plugins(self, state: CycleState, pod: PodInfo,
                                      snapshot: Snapshot, diagnosis: FitError,
                                      plugins: PluginSet) -> PostFilterResult | None:
        """RunPostFilterPlugins: in order until one succeeds or ends the phase; the
        result carries the phase's message (what FitError appends) and the last
        meaningful nomination. None when the pod has no PostFilter plugin."""
        if not plugins.post_filter:
            return None
        result: PostFilterResult | None = None
        reasons: list[str] = []
        for p in plugins.post_filter:
            r, st = await p.post_filter(self, state, pod, snapshot, diagnosis)
            if st.ok:
                out = r or PostFilterResult()
                out.message = out.message or st.message
                return out
            if st.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
                out = r or PostFilterResult()
                out.message = st.message
                return out
            if not st.rejected:  # any other status is an Error: it ends the phase
                return PostFilterResult(message=st.message)
            # The last meaningful result (one that nominates) wins; any result is kept
            # for its details (polsched explain) when none nominates.
            if r is not None and (r.nominated_node is not None or result is None
                                  or result.nominated_node is None):
                result = r
            reasons.extend(st.reasons)
        if result is None and not reasons:
            return None  # every plugin had nothing to do (no nomination, no message)
        out = result or PostFilterResult()
        out.message = ", ".join(reasons)
        return out

    # -- PreScore and Score ------------------------------------------------------------
    def run_pre_score_plugins(self, state: CycleState, pod: PodInfo,
                              nodes: Sequence[NodeInfo], snapshot: Snapshot,
                              plugins: PluginSet) -> None:
        """RunPreScorePlugins: Skip marks the scorer skipped for this cycle; anything but
        Success raises PipelineError."""
        budget = state.budget
        for s in plugins.pre_score:
            if budget is not None:
                budget.check("PreScore before %s", s.name)
            st = s.plugin.pre_score(state, pod, nodes, snapshot)  # type: ignore[attr-defined]
            if st.code is Code.SKIP:
                state.skip_score.add(s.name)
            elif st.code is not Code.SUCCESS:
                raise PipelineError(Status.error(
                    f'running PreScore plugin "{s.name}": {st.message}').with_plugin(s.name))

    def run_score_plugins(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo],
                          plugins: PluginSet, explain: bool = False) -> Scores:
        """RunScorePlugins: each scorer not skipped scores every node (score_nodes), its
        NormalizeScore maps the scores in place, and its weight multiplies them; errors
        raise PipelineError. Returns the weighted totals per node (same order) and each
        scorer's weighted scores (and, with `explain`, its raw and normalized ones)."""
        totals = [0] * len(nodes)
        out = Scores(totals)
        raw_scores = out.raw if self.keeps_raw_scores else None
        skip = state.skip_score
        budget = state.budget
        for s in plugins.scorers:
            if s.name in skip:
                continue
            if budget is not None:
                budget.check("Score before %s", s.name)
            raw = s.plugin.score_nodes(state, pod, nodes)
            if isinstance(raw, Status):
                raise PipelineError(Status.error(
                    f'running Score plugins: plugin "{s.name}" failed with: {raw.message}'
                ).with_plugin(s.name))
            raw_copy = list(raw) if explain else raw
            if raw_scores is not None:  # kept for the batch's rescoring (NodePluginScores)
                raw_scores[s.name] = list(raw)
            normalized = raw if not explain else list(raw)
            if s.name in plugins.normalize:
                st = s.plugin.normalize_score(  # type: ignore[attr-defined]
                    state, pod, normalized)
                if not st.ok:
                    raise PipelineError(Status.error(
                        f'running Normalize on Score plugins: plugin "{s.name}" failed '
                        f"with: {st.message}").with_plugin(s.name))
            w = s.weight
            if explain:
                weighted = [v * w for v in normalized]
                totals = [t + v for t, v in zip(totals, weighted, strict=True)]
                out.weighted[s.name] = weighted
                out.explained[s.name] = (raw_copy, normalized)
                continue
            # One pass per scorer; its weighted scores are read at two nodes at most
            # (the deciding scorer), so they are not listed.
            # C-level maps (the scores are ints): zip(strict=True)'s length check kept.
            if len(normalized) != len(totals):
                raise ValueError(f"plugin {s.name!r} scored {len(normalized)} nodes "
                                 f"of {len(totals)}")
            if w == 1:
                totals = list(map(operator.add, totals, normalized))
            else:
                totals = list(map(operator.add, totals,
                                  map(operator.mul, normalized, itertools.repeat(w))))
            out.weighted[s.name] = _Weighted(normalized, w)
        out.totals = totals
        return out

    def run_raw_score_plugins(self, state: CycleState, pod: PodInfo, node: NodeInfo,
                              plugins: PluginSet) -> dict[str, int]:
        """RunRawScorePlugins: each scorer not skipped scores one node, before
        NormalizeScore and the weights (the batch's rescoring of the node it chose last).
        Errors raise PipelineError."""
        out: dict[str, int] = {}
        skip = state.skip_score
        for s in plugins.scorers:
            if s.name in skip:
                continue
            raw = s.plugin.score_nodes(state, pod, [node])
            if isinstance(raw, Status):
                raise PipelineError(Status.error(
                    f'running Score plugins: plugin "{s.name}" failed with: {raw.message}'
                ).with_plugin(s.name))
            out[s.name] = raw[0]
        return out

    def normalize_scores(self, state: CycleState, pod: PodInfo,
                         raw_scores: dict[str, list[int]], n: int,
                         plugins: PluginSet) -> list[int]:
        """NormalizeScores: the weighted totals of `n` nodes from their raw scores per
        scorer (a scorer not skipped without raw scores gives 0 on every node, as
        upstream's empty NodeScore). Errors raise PipelineError."""
        totals = [0] * n
        skip = state.skip_score
        for s in plugins.scorers:
            if s.name in skip:
                continue
            scores = list(raw_scores.get(s.name) or [0] * n)
            if s.name in plugins.normalize:
                st = s.plugin.normalize_score(  # type: ignore[attr-defined]
                    state, pod, scores)
                if not st.ok:
                    raise PipelineError(Status.error(
                        f'running Normalize on Score plugins: plugin "{s.name}" failed '
                        f"with: {st.message}").with_plugin(s.name))
            w = s.weight
            totals = list(map(operator.add, totals,
                              map(operator.mul, scores, itertools.repeat(w))))
        return totals

    # -- Reserve, Permit, PreBind, PostBind --------------------------------------------
    def run_reserve_plugins_reserve(self, state: CycleState, pod: PodInfo, node: str,
                                    plugins: PluginSet) -> Status:
        """RunReservePluginsReserve: in order; the first failure is returned (a rejection
        with its plugin, anything else as an error). The caller unreserves on failure."""
        for p in plugins.reserve:
            try:
                st = p.reserve(state, pod, node)
            except Exception as err:  # noqa: BLE001 - a plugin bug is an error status
                st = Status.error(f"{type(err).__name__}: {err}")
            if not st.ok:
                if st.rejected:
                    return Status(st.code, st.reasons, p.name)
                return _as_error(ExtensionPoint.RESERVE, p.name, st)
        return SUCCESS

    def run_reserve_plugins_unreserve(self, state: CycleState, pod: PodInfo, node: str,
                                      plugins: PluginSet) -> None:
        """RunReservePluginsUnreserve: every Reserve plugin, in reverse order."""
        for p in reversed(plugins.reserve):
            try:
                p.unreserve(state, pod, node)
            except Exception:  # one failing Unreserve must not skip the others
                log.exception("Unreserve of %s failed for %s", p.name, pod.key)

    def run_permit_plugins(self, state: CycleState, pod: PodInfo, node: str,
                           plugins: PluginSet) -> tuple[Status, dict[str, float]]:
        """RunPermitPlugins: Success, a rejection or error (with its plugin), or Wait with
        the waiting plugins' timeouts (each at most 15 minutes)."""
        waits: dict[str, float] = {}
        for p in plugins.permit:
            try:
                st, timeout = p.permit(state, pod, node)
            except Exception as err:  # noqa: BLE001
                st, timeout = Status.error(f"{type(err).__name__}: {err}"), 0.0
            if st.ok:
                continue
            if st.rejected:
                return Status(st.code, st.reasons, p.name), {}
            if st.code is Code.WAIT:
                waits[p.name] = min(timeout, MAX_PERMIT_TIMEOUT)
                continue
            return _as_error(ExtensionPoint.PERMIT, p.name, st), {}
        if waits:
            return Status(Code.WAIT, ("one or more plugins asked to wait and no plugin "
                                      "rejected pod",)), waits
        return SUCCESS, {}

    def run_placement_feasible_plugins(self, state: CycleState, group: PodGroupInfo,
                                       progress: PlacementProgress,
                                       plugins: PluginSet) -> Status:
        """RunPlacementFeasiblePlugins: Unschedulable or an error from a plugin ends it;
        a Wait is kept while the others run (the last one is returned); Success when
        every plugin succeeds."""
        status = SUCCESS
        for p in plugins.placement_feasible:
            try:
                st = p.placement_feasible(state, group, progress)
            except Exception as err:  # noqa: BLE001
                st = Status.error(f"{type(err).__name__}: {err}")
            if st.ok:
                continue
            if st.code is Code.WAIT:
                status = Status(st.code, st.reasons, p.name)
                continue
            if st.code is Code.UNSCHEDULABLE:
                return Status(st.code, st.reasons, p.name)
            if st.code is Code.ERROR:
                return Status(Code.ERROR, (f"running PlacementFeasible plugin: "
                                           f"{st.message}",), p.name)
            return Status(Code.ERROR, ("unexpected status from PlacementFeasible plugin: "
                                       f"{_GO_CODES.get(st.code, st.code.name)}",), p.name)
        return status

    async def run_pod_group_post_filter_plugins(
            self, state: CycleState, group: PodGroupInfo, pods: Sequence[PodInfo],
            snapshot: Snapshot, schedule: PodGroupSchedulingFunc, plugins: PluginSet,
            ran: list[tuple[str, Code]] | None = None,
    ) -> tuple[PodGroupPostFilterResult | None, Status]:
        """RunPodGroupPostFilterPlugins (framework/runtime/framework.go): in order; a
        Success returns at once (the group waits on preemption); Unschedulable and
        Unresolvable returns at once with that plugin's status; an Unschedulable adds its
        reasons and the next plugin runs; anything else ends it as an Error
        `error in "<Plugin>" PodGroupPostFilter plugins: <msg>`. Without a plugin, or when
        every one was Unschedulable, an Unschedulable with the reasons gathered (none:
        the group's message then gets an empty reason, as upstream's). `ran`, when given,
        gets each plugin that ran and its own status code (the scheduler's metrics)."""
        reasons: list[str] = []
        rejector = ""
        for p in plugins.pod_group_post_filter:
            try:
                res, st = await p.pod_group_post_filter(self, state, group, pods, snapshot,
                                                        schedule)
            except PipelineError as err:
                st, res = Status.error(str(err)), None
            if ran is not None:
                ran.append((p.name, st.code))
            if st.ok:
                return res, Status(st.code, st.reasons, p.name)
            if st.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
                return res, Status(st.code, st.reasons, p.name)
            if st.code is Code.UNSCHEDULABLE:
                reasons.extend(st.reasons)
                rejector = rejector or p.name
                continue
            return None, Status(Code.ERROR, (f'error in "{p.name}" PodGroupPostFilter '
                                             f"plugins: {st.message}",), p.name)
        return None, Status(Code.UNSCHEDULABLE, tuple(reasons), rejector)

    def run_placement_generate_plugins(self, state: CycleState, group: PodGroupInfo,
                                       nodes: Sequence[NodeInfo],
                                       ) -> tuple[list[Placement], Status]:
        """RunPlacementGeneratePlugins: the placements of the first PlacementGenerate
        plugin out of one of every node (that one alone when there is no plugin). A
        plugin's failure is returned with its name; no placement at all is Unschedulable
        `no feasible placements found`."""
        parent = Placement("", tuple(nodes))
        if not self.placement_generate:
            return [parent], SUCCESS
        p = self.placement_generate[0]
        try:
            placements, st = p.generate_placements(state, group, parent)
        except Exception as err:  # noqa: BLE001
            placements, st = [], Status.error(f"{type(err).__name__}: {err}")
        if not st.ok:
            return [], Status(st.code, st.reasons, p.name)
        if not placements:
            return [], Status(Code.UNSCHEDULABLE, ("no feasible placements found",), p.name)
        return placements, SUCCESS

    def run_placement_score_plugins(self, states: Sequence[CycleState], group: PodGroupInfo,
                                    assignments: Sequence[PodGroupAssignments],
                                    ) -> tuple[list[PlacementScores], Status]:
        """RunPlacementScorePlugins: every plugin scores every placement (`states[i]` is
        placement i's CycleState), the plugins with PlacementScoreExtensions normalize
        theirs, each score is checked to be in 0..MAX_NODE_SCORE and weighted; upstream's
        texts for each failure."""
        raw: dict[str, list[int]] = {}
        for p, _ in self.placement_score:
            scores = []
            for state, a in zip(states, assignments, strict=True):
                try:
                    score, st = p.score_placement(state, group, a)
                except Exception as err:  # noqa: BLE001
                    score, st = 0, Status.error(f"{type(err).__name__}: {err}")
                if not st.ok:
                    return [], Status.error("running PlacementScore plugins: plugin "
                                            f'"{p.name}" failed with: {st.message}')
                scores.append(score)
            raw[p.name] = scores
        for p, _ in self.placement_score:
            try:
                nst = p.normalize_placement_scores(states[0] if states else CycleState(),
                                                   group, raw[p.name])
            except Exception as err:  # noqa: BLE001
                nst = Status.error(f"{type(err).__name__}: {err}")
            if nst is not None and not nst.ok:
                return [], Status.error("running NormalizePlacementScore on PlacementScore "
                                        f'plugins: plugin "{p.name}" failed with: '
                                        f"{nst.message}")
        out = []
        for i, a in enumerate(assignments):
            ps = PlacementScores(a.placement)
            for p, weight in self.placement_score:
                score = raw[p.name][i]
                if not MIN_NODE_SCORE <= score <= MAX_NODE_SCORE:
                    return [], Status.error(
                        "applying score defaultWeights on PlacementScore plugins: plugin "
                        f'"{p.name}" returns an invalid score {score}, it should in the '
                        f"range of [{MIN_NODE_SCORE}, {MAX_NODE_SCORE}] after normalizing")
                ps.scores[p.name] = score * weight
                ps.total += score * weight
            out.append(ps)
        return out, SUCCESS

    def run_pre_bind_pre_flights(self, state: CycleState, pod: PodInfo, node: str,
                                 plugins: PluginSet) -> Status:
        """RunPreBindPreFlights: SUCCESS when any PreBind plugin has work, SKIP when none
        has; the first error as `running PreBindPreFlight "<plugin>": <message>`."""
        out = SKIP
        for p in plugins.pre_bind:
            try:
                st = p.pre_bind_pre_flight(state, pod, node)
            except Exception as err:  # noqa: BLE001
                st = Status.error(f"{type(err).__name__}: {err}")
            if st.ok:
                out = SUCCESS
            elif st.code is Code.ERROR:
                return Status(Code.ERROR, (f'running PreBindPreFlight "{p.name}": '
                                           f"{st.message}",), p.name)
            elif st.code is not Code.SKIP:
                return Status(Code.ERROR, (
                    f"PreBindPreFlight {p.name} returned \"{_GO_CODES[st.code]}\", which "
                    "is unsupported. It is supposed to return Success, Skip, or Error "
                    "status",), p.name)
        return out

    async def run_pre_bind_plugins(self, state: CycleState, pod: PodInfo, node: str,
                                   plugins: PluginSet) -> Status:
        """RunPreBindPlugins: in order; the first failure is returned."""
        for p in plugins.pre_bind:
            try:
                st = await p.pre_bind(state, pod, node)
            except Exception as err:  # noqa: BLE001
                st = Status.error(f"{type(err).__name__}: {err}")
            if not st.ok:
                if st.rejected:
                    return Status(st.code, st.reasons, p.name)
                return _as_error(ExtensionPoint.PRE_BIND, p.name, st)
        return SUCCESS

    def run_post_bind_plugins(self, state: CycleState, pod: PodInfo, node: str,
                              plugins: PluginSet) -> None:
        """RunPostBindPlugins: informational; failures are logged only."""
        for p in plugins.post_bind:
            try:
                p.post_bind(state, pod, node)
            except Exception:
                log.exception("PostBind of %s failed for %s", p.name, pod.key)


__all__ = ["ALL_NODES", "MAX_PERMIT_TIMEOUT", "FilterEntry", "Narrowed", "Pipeline",
           "PlacementScores", "PluginSet", "ScoreEntry", "Scores", "filter_error", "go_list",
           "node_copy"]
