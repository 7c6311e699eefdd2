"""The pipeline: one policy's filters, scorers and extenders, run for one pod.

It follows kube-scheduler's schedulePod (pkg/scheduler/schedule_one.go): PreFilter,
Filter over the nodes starting where the previous cycle stopped until
numFeasibleNodesToFind feasible nodes are found, filter extenders, then PreScore, Score,
NormalizeScore, weights, prioritize extenders, and a random pick among the best.

A Pipeline is immutable once built; hot reload builds a new one and swaps the reference.
The only per-cycle mutable state is the round-robin start index.
"""

from __future__ import annotations

import functools
import itertools
import operator
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, TypeVar, overload

from polsched.framework import events
from polsched.framework.cycle_state import CycleState
from polsched.framework.interfaces import (
    MAX_NODE_SCORE,
    FilterPlugin,
    NodeSetFilter,
    PermitPlugin,
    Plugin,
    PostBindPlugin,
    PostFilterPlugin,
    PreBindPlugin,
    PreEnqueuePlugin,
    PreFilterExtensions,
    PreFilterPlugin,
    PreFilterResult,
    PreScorePlugin,
    ReservePlugin,
    ScoreExtensions,
    ScorePlugin,
)
from polsched.framework.nominator import Nominator, status_nominated_node
from polsched.framework.selectors import Matcher, NodeSet
from polsched.framework.status import SUCCESS, Code, Status
from polsched.framework.types import NodeInfo, PodInfo, Snapshot

_node_name = operator.attrgetter("name")

_E = TypeVar("_E", "FilterEntry", "ScoreEntry")

MIN_FEASIBLE_NODES_TO_FIND = 100
MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND = 5
# k8s.io/kube-scheduler/extender/v1: MaxExtenderPriority
MAX_EXTENDER_PRIORITY = 10
NO_NODE_AVAILABLE = "0/{} nodes are available"
# schedule_one.go ErrNoNodesAvailable: what the event says when the cluster has no nodes.
NO_NODES_AVAILABLE = "no nodes available to schedule pods"
# An upstream quirk we mirror (docs/differences.md): kube-scheduler v1.37's default profile
# runs DynamicResources' PostFilter before DefaultPreemption's, and it reads the state its
# PreFilter writes for every pod. When an earlier PreFilter returned
# UnschedulableAndUnresolvable (a missing PVC, an unbound Immediate PVC, an empty
# PreFilterResult...), that PreFilter never ran, the read fails with fwk.ErrNotFound and
# the whole PostFilter phase ends with that error: the FailedScheduling message reads
# "0/N nodes are available: <PreFilter message>. not found".
DRA_POST_FILTER_NOT_FOUND = "not found"
DYNAMIC_RESOURCES = "DynamicResources"


def _skipped_dynamic_resources(st: Status, filters: Sequence[FilterEntry]) -> bool:
    """Whether the PreFilter rejection `st` returned before DynamicResources' PreFilter
    (a filter of this pod's pipeline) ran: RunPreFilterPlugins returns at once on
    UnschedulableAndUnresolvable, and runs the PreFilters in filter order."""
    if st.code is not Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
        return False
    names = [f.name for f in filters]
    if DYNAMIC_RESOURCES not in names:
        return False
    return st.plugin not in names or names.index(st.plugin) < names.index(DYNAMIC_RESOURCES)


# apimachinery validation.NoteLengthLimit: events carry at most this many characters.
NOTE_LENGTH_LIMIT = 1024


def num_feasible_nodes_to_find(percentage: int, num_all_nodes: int) -> int:
    """schedule_one.go numFeasibleNodesToFind; percentage 0 means adaptive."""
    if num_all_nodes < MIN_FEASIBLE_NODES_TO_FIND:
        return num_all_nodes
    if percentage == 0:
        percentage = 50 - num_all_nodes // 125
        if percentage < MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND:
            percentage = MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND
    n = num_all_nodes * percentage // 100
    return max(n, MIN_FEASIBLE_NODES_TO_FIND)


def truncate_message(message: str) -> str:
    """schedule_one.go truncateMessage."""
    if len(message) <= NOTE_LENGTH_LIMIT:
        return message
    suffix = " ..."
    return message[: NOTE_LENGTH_LIMIT - len(suffix)] + suffix


@dataclass(frozen=True, eq=False)
class FilterEntry:
    plugin: FilterPlugin
    # when.podSelector: the entry applies only to pods whose labels match.
    when: Matcher | None = None
    # Unique within the pipeline: the plugin name, "Expression#2" for a second entry of
    # the same plugin. Reasons, skips and explanations are keyed by it.
    label: str = ""

    @property
    def name(self) -> str:
        return self.label or self.plugin.name


@dataclass(frozen=True, eq=False)
class ScoreEntry:
    plugin: ScorePlugin
    weight: int
    when: Matcher | None = None
    label: str = ""

    @property
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


class Extender(Protocol):
    """What the pipeline needs of an HTTP extender (see polsched.extender)."""

    @property
    def name(self) -> str: ...
    @property
    def ignorable(self) -> bool: ...
    @property
    def weight(self) -> int: ...
    def is_interested(self, pod: PodInfo) -> bool: ...
    def is_filter(self) -> bool: ...
    def is_prioritizer(self) -> bool: ...
    async def filter(self, pod: PodInfo, nodes: Sequence[NodeInfo]
                     ) -> tuple[list[NodeInfo], dict[str, str], dict[str, str]]:
        """Feasible nodes, then failed and failed-and-unresolvable node name -> reason.
        Raises ExtenderError on transport or protocol errors."""
    async def prioritize(self, pod: PodInfo, nodes: Sequence[NodeInfo]) -> dict[str, int]:
        """Host -> score in 0..MAX_EXTENDER_PRIORITY."""


class ExtenderError(Exception):
    pass


@dataclass
class FitError:
    """No node fits: framework.FitError, with its Error() text as `message`."""

    num_all_nodes: int
    # The nodes that were filtered (or all of them when PreFilter rejected the pod).
    node_statuses: dict[str, Status] = field(default_factory=dict)
    pre_filter_msg: str = ""
    # An UnschedulableAndUnresolvable PreFilter status (or an empty PreFilterResult)
    # stopped the PreFilter phase before DynamicResources' PreFilter ran
    # (DRA_POST_FILTER_NOT_FOUND).
    pre_filter_cut_short: bool = False
    post_filter_msg: str = ""
    # The status of every node absent from node_statuses when a PreFilterResult narrowed
    # the nodes ("node(s) didn't satisfy plugin(s) [NodeAffinity]"), as NodeToStatus's
    # AbsentNodesStatus; None otherwise.
    absent_status: Status | None = None
    # Diagnosis.UnschedulablePlugins beyond the plugins of node_statuses: the PreFilter
    # plugins whose results narrowed the nodes.
    unschedulable_plugins: set[str] = field(default_factory=set)

    def status_of(self, node: str) -> Status | None:
        """A node's status in this diagnosis; None when it was not rejected."""
        st = self.node_statuses.get(node)
        return st if st is not None else self.absent_status

    def reason_histogram(self) -> list[str]:
        counts: dict[str, int] = {}
        for st in self.node_statuses.values():
            for r in st.reasons:
                counts[r] = counts.get(r, 0) + 1
        absent = self.num_all_nodes - len(self.node_statuses)
        if self.absent_status is not None and absent > 0:
            for r in self.absent_status.reasons:
                counts[r] = counts.get(r, 0) + absent
        return sorted(f"{n} {r}" for r, n in counts.items())

    @property
    def message(self) -> str:
        if self.num_all_nodes == 0:
            return NO_NODES_AVAILABLE
        msg = NO_NODE_AVAILABLE.format(self.num_all_nodes) + ":"
        if self.pre_filter_msg:
            msg += f" {self.pre_filter_msg}."
        else:
            hist = self.reason_histogram()
            if hist:
                msg += f" {', '.join(hist)}."
        if self.post_filter_msg:
            # The PostFilter message carries its own period (types.go FitError.Error).
            msg += f" {self.post_filter_msg}"
        return msg


@dataclass
class NodeScore:
    """One feasible node's scores, for `polsched explain`: plugin -> (raw, normalized,
    weighted), extender name -> weighted."""

    node: str
    total: int = 0
    plugins: dict[str, tuple[int, int, int]] = field(default_factory=dict)


@dataclass
class Explanation:
    filters: dict[str, Status] = field(default_factory=dict)   # node -> first failing status
    scores: list[NodeScore] = field(default_factory=list)


@dataclass
class PostFilterResult:
    """What a PostFilter (DefaultPreemption) decided for a pod that fits nowhere."""

    # The sentence appended to the FitError text ("preemption: ...").
    message: str = ""
    # The node the pod is nominated to (fwk.NominatingInfo): None leaves the pod's
    # nomination as it is (ModeNoop), "" clears it, a name sets it.
    nominated_node: str | None = None
    # The pods to evict from nominated_node (upstream's Candidate.Victims()).
    victims: tuple[PodInfo, ...] = ()
    num_pdb_violations: int = 0
    # The plugin's own account of how it decided, for `polsched explain`.
    details: Any = None


@dataclass
class ScheduleResult:
    node: str | None
    evaluated_nodes: int = 0
    feasible_nodes: int = 0
    fit_error: FitError | None = None
    post_filter: PostFilterResult | None = None
    # The scorer that contributed most to the winner's lead, for the demo's table.
    deciding_scorer: str = ""
    explanation: Explanation | None = None
    # The cycle's state (what PreFilter/Filter computed), for Reserve, Permit and the
    # binding cycle.
    state: CycleState | None = None


class Pipeline:
    def __init__(
        self,
        filters: Sequence[FilterEntry],
        scorers: Sequence[ScoreEntry],
        extenders: Sequence[Extender] = (),
        percentage_of_nodes_to_score: int = 0,
        post_filter: PostFilter | None = None,
        rng: random.Random | None = None,
        pre_enqueue: Sequence[PreEnqueuePlugin] = (),
        nominator: Nominator | None = None,
    ) -> None:
        self.filters = _labelled(filters)
        self.scorers = _labelled(scorers)
        # PreEnqueue: the queue runs these before a pod may enter the active queue.
        self.pre_enqueue_plugins = tuple(pre_enqueue)
        # The binding cycle's plugins: the filter and score plugin instances that also
        # implement Reserve, Permit, PreBind or PostBind, once per plugin name (a plugin
        # listed as filter and scorer is reserved once, as upstream's one instance), in the
        # order filters then scorers.
        unique: dict[str, Plugin] = {}
        for e in self.filters:
            unique.setdefault(e.name, e.plugin)
        for se in self.scorers:
            unique.setdefault(se.name, se.plugin)
        plugins = tuple(unique.values())
        self._binding_points = (ReservePlugin, PermitPlugin, PreBindPlugin, PostBindPlugin)
        binding = [p for p in plugins if isinstance(p, self._binding_points)]
        # Per pod only when an entry with `when` has a binding point.
        self._binding_per_pod = any(
            e.when is not None and isinstance(e.plugin, self._binding_points)
            for e in self.filters) or any(
            se.when is not None and isinstance(se.plugin, self._binding_points)
            for se in self.scorers)
        self._binding_all: tuple[Plugin, ...] = tuple(binding)
        self.reserve_plugins = tuple(p for p in plugins if isinstance(p, ReservePlugin))
        self.permit_plugins = tuple(p for p in plugins if isinstance(p, PermitPlugin))
        self.pre_bind_plugins = tuple(p for p in plugins if isinstance(p, PreBindPlugin))
        self.post_bind_plugins = tuple(p for p in plugins if isinstance(p, PostBindPlugin))
        # Ignorable extenders go last (upstream: scheduler.go buildExtenders).
        self.extenders = tuple(sorted(extenders, key=lambda e: e.ignorable))
        self.percentage_of_nodes_to_score = percentage_of_nodes_to_score
        self.post_filter = post_filter
        # Pods nominated to nodes (shared by the engine's pipelines); None: none count.
        self.nominator = nominator
        self._rng = rng or random.Random()
        self._next_start = 0
        # node name -> (the node, its generation, the nominated pods, the node with them):
        # see _with_nominated.
        self._nominated_trials: dict[
            str, tuple[NodeInfo, int, tuple[PodInfo, ...], NodeInfo]] = {}
        # (what a plugin was built from, the plugin), set by the one builder
        # (scheduler.pipelines.build_pipeline): a hot reload's new pipeline takes over the
        # plugins whose entry did not change, with their warm per-node tables.
        self.built_from: tuple[tuple[object, Plugin], ...] = ()

    # -- description -----------------------------------------------------------------
    def describe(self) -> dict[str, list[str]]:
        """What status.pipeline reports."""
        return {
            "filters": [f.name for f in self.filters],
            "scorers": [f"{s.name}:{s.weight}" for s in self.scorers],
            "extenders": [e.name for e in self.extenders],
        }

    def binding_plugins_for(self, pod: PodInfo) -> tuple[Plugin, ...]:
        """The plugins with a Reserve, Permit, PreBind or PostBind point among the entries
        that apply to `pod` (once per name, filters first), for its binding cycle."""
        if not self._binding_per_pod:
            return self._binding_all
        fs, ss = self._entries_for(pod)
        unique: dict[str, Plugin] = {}
        for e in fs:
            unique.setdefault(e.name, e.plugin)
        for se in ss:
            unique.setdefault(se.name, se.plugin)
        return tuple(p for p in unique.values() if isinstance(p, self._binding_points))

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

    # -- the cycle ---------------------------------------------------------------------
    def _entries_for(self, pod: PodInfo) -> tuple[list[FilterEntry], list[ScoreEntry]]:
        labels = pod.labels
        fs = [f for f in self.filters if f.when is None or f.when(labels)]
        ss = [s for s in self.scorers if s.when is None or s.when(labels)]
        return fs, ss

    def run_pre_filters(self, state: CycleState, pod: PodInfo, snapshot: Snapshot,
                        filters: Sequence[FilterEntry]) -> tuple[Status, Narrowed]:
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
        for f in filters:
            if not isinstance(f.plugin, PreFilterPlugin):
                continue
            st = f.plugin.pre_filter(state, pod, snapshot)
            if isinstance(st, PreFilterResult):
                if st.node_names is None:
                    continue
                with_nodes.append(f.name)
                names = st.node_names if names is None else names & st.node_names
                if not names:
                    plugins = sorted(with_nodes)
                    msg = (f"node(s) didn't satisfy plugin {plugins[0]}" if len(plugins) == 1
                           else f"node(s) didn't satisfy plugin(s) {_go_list(plugins)} "
                                "simultaneously")
                    return (Status.unresolvable(msg).with_plugin(f.name),
                            Narrowed(names, tuple(plugins)))
                continue
            code = st.code
            if code is Code.SUCCESS:
                continue
            if code is Code.SKIP:
                state.skip_filter.add(f.name)
            elif code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
                return st.with_plugin(f.name), _ALL_NODES
            elif code is Code.UNSCHEDULABLE:
                rejection = st.with_plugin(f.name)
            else:
                raise PipelineError(Status.error(
                    f'running PreFilter plugin "{f.name}": {st.message}').with_plugin(f.name))
        return (rejection or SUCCESS), Narrowed(names, tuple(sorted(with_nodes)))

    def still_fits(self, pod: PodInfo, snapshot: Snapshot, node_name: str) -> bool:
        """PreFilter, then every filter on one node, against the snapshot as it is now: the
        check before assume after a cycle awaited extenders and the cluster moved on."""
        node = snapshot.get(node_name)
        if node is None:
            return False
        state = CycleState()
        filters, _ = self._entries_for(pod)
        st, result = self.run_pre_filters(state, pod, snapshot, filters)
        if not st.ok or (result.node_names is not None and node_name not in result.node_names):
            return False
        return self.run_filters(state, pod, node, filters).ok

    def run_filters(self, state: CycleState, pod: PodInfo, node: NodeInfo,
                    filters: Sequence[FilterEntry]) -> Status:
        """All filters on one node; the first rejection wins (RunFilterPlugins); an Error
        raises PipelineError."""
        skip = state.skip_filter
        for f in filters:
            if f.name in skip:
                continue
            st = f.plugin.filter(state, pod, node)
            if st.code is not Code.SUCCESS:
                if st.code is Code.ERROR:
                    raise _filter_error(f.name, st)
                return st.with_plugin(f.name)
        return SUCCESS

    def nominated_pods(self, pod: PodInfo) -> dict[str, list[PodInfo]]:
        """Node -> the pods nominated there that count for `pod`: an equal or higher
        priority, and not the pod itself (addGENominatedPods)."""
        nominator = self.nominator
        if nominator is None or not len(nominator):
            return {}
        out: dict[str, list[PodInfo]] = {}
        for node_name in nominator.nodes():
            pods = [p for p in nominator.pods_for_node(node_name)
                    if p.priority >= pod.priority and p.uid != pod.uid]
            if pods:
                out[node_name] = pods
        return out

    def run_filters_with_nominated(self, state: CycleState, pod: PodInfo, node: NodeInfo,
                                   filters: Sequence[FilterEntry],
                                   nominated: Sequence[PodInfo]) -> Status:
        """RunFilterPluginsWithNominatedPods: with nominated pods (of an equal or higher
        priority) on the node the pod must fit; then, if it does, without them too (a
        pod's affinity to a nominated pod must not count, as it may never run there)."""
        if not nominated:
            return self.run_filters(state, pod, node, filters)
        trial = self._with_nominated(node, nominated)
        trial_state = state.clone()
        for p in nominated:
            st = self.run_pre_filter_extension(trial_state, pod, p, trial, filters, add=True)
            if not st.ok:
                raise PipelineError(st)
        st = self.run_filters(trial_state, pod, trial, filters)
        if not st.ok:
            return st
        return self.run_filters(state, pod, node, filters)

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
                                 node: NodeInfo, filters: Sequence[FilterEntry],
                                 add: bool) -> Status:
        """RunPreFilterExtensionAddPod / RemovePod: tell each filter whose PreFilter ran
        (and did not Skip) that `other` was added to or removed from `node`."""
        skip = state.skip_filter
        for f in filters:
            plugin = f.plugin
            if f.name in skip or not isinstance(plugin, PreFilterExtensions):
                continue
            base = PreFilterExtensions.add_pod if add else PreFilterExtensions.remove_pod
            method = type(plugin).add_pod if add else type(plugin).remove_pod
            if method is base:
                continue  # declared but not implemented
            st = method(plugin, state, pod, other, node)
            if not st.ok:
                return Status.error(
                    f"running {'AddPod' if add else 'RemovePod'} on PreFilter plugin "
                    f"{f.name!r}: {st.message}").with_plugin(f.name)
        return SUCCESS

    def find_feasible(self, state: CycleState, pod: PodInfo, snapshot: Snapshot,
                      filters: Sequence[FilterEntry], explain: bool = False,
                      ) -> tuple[list[NodeInfo], FitError]:
        """findNodesThatFitPod without the extenders."""
        all_nodes = snapshot.nodes
        n_all = len(all_nodes)
        diagnosis = FitError(n_all)
        st, pre_result = self.run_pre_filters(state, pod, snapshot, filters)
        if not st.ok:
            diagnosis.pre_filter_msg = st.message
            diagnosis.pre_filter_cut_short = _skipped_dynamic_resources(st, filters)
            diagnosis.node_statuses = {n.name: st for n in all_nodes}
            diagnosis.unschedulable_plugins = {st.plugin, *pre_result.plugins}
            return [], diagnosis
        nodes = all_nodes
        if pre_result.node_names is not None:
            # Only the nodes PreFilter allowed (those that exist); the others are absent from
            # node_statuses and counted under absent_status, as upstream's NodeToStatus.
            get = snapshot.get
            nodes = [n for n in (get(name) for name in sorted(pre_result.node_names))
                     if n is not None]
            diagnosis.absent_status = Status.unresolvable(
                f"node(s) didn't satisfy plugin(s) {_go_list(pre_result.plugins)}")
            diagnosis.unschedulable_plugins.update(pre_result.plugins)
        n_nodes = len(nodes)
        to_find = n_nodes if explain else num_feasible_nodes_to_find(
            self.percentage_of_nodes_to_score, n_nodes)
        feasible: list[NodeInfo] = []
        statuses = diagnosis.node_statuses
        start = self._next_start % n_nodes if n_nodes else 0
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
                raise _filter_error(name, st)
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
            for p in itertools.compress(range(n_nodes), flags):
                need = to_find - len(feasible)
                if p - prev >= need:
                    break
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
            if n_all:
                self._next_start = (self._next_start + prev) % n_all
            return feasible, diagnosis
        for node in (nodes[start:] + nodes[:start]) if start else nodes:
            processed += 1
            node_name = node.name
            if nominated and node_name in nominated:
                st = self.run_filters_with_nominated(state, pod, node, filters,
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
        if n_all:
            self._next_start = (self._next_start + processed) % n_all
        return feasible, diagnosis

    def score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo],
              snapshot: Snapshot, scorers: Sequence[ScoreEntry], explain: bool = False,
              ) -> tuple[list[int], dict[str, Sequence[int]]]:
        """Weighted totals per node (same order) and, per scorer, its weighted scores."""
        totals = [0] * len(nodes)
        per_plugin: dict[str, Sequence[int]] = {}
        for s in scorers:
            if isinstance(s.plugin, PreScorePlugin):
                st = s.plugin.pre_score(state, pod, nodes, snapshot)
                if st.code is Code.SKIP:
                    state.skip_score.add(s.name)
                elif st.code is not Code.SUCCESS:
                    raise PipelineError(Status.error(
                        f'running PreScore plugin "{s.name}": {st.message}').with_plugin(s.name))
        for s in scorers:
            if s.name in state.skip_score:
                continue
            raw = s.plugin.score_nodes(state, pod, nodes)
            if isinstance(raw, Status):
                raise PipelineError(Status.error(
                    f'running Score plugins: plugin "{s.name}" failed with: {raw.message}'
                ).with_plugin(s.name))
            raw_copy = list(raw) if explain else raw
            normalized = raw if not explain else list(raw)
            if isinstance(s.plugin, ScoreExtensions):
                st = s.plugin.normalize_score(state, pod, normalized)
                if not st.ok:
                    raise PipelineError(Status.error(
                        f'running Normalize on Score plugins: plugin "{s.name}" failed with: '
                        f"{st.message}").with_plugin(s.name))
            w = s.weight
            if explain:
                weighted = [v * w for v in normalized]
                totals = [t + v for t, v in zip(totals, weighted, strict=True)]
                per_plugin[s.name + "\x00raw"] = raw_copy
                per_plugin[s.name + "\x00norm"] = normalized
                per_plugin[s.name] = weighted
                continue
            # One pass per scorer; its weighted scores are read at two nodes at most
            # (_deciding_scorer), so they are not listed.
            # C-level maps (the scores are ints): zip(strict=True)'s length check kept.
            if len(normalized) != len(totals):
                raise ValueError(f"plugin {s.name!r} scored {len(normalized)} nodes "
                                 f"of {len(totals)}")
            if w == 1:
                totals = list(map(operator.add, totals, normalized))
            else:
                totals = list(map(operator.add, totals,
                                  map(operator.mul, normalized, itertools.repeat(w))))
            per_plugin[s.name] = _Weighted(normalized, w)
        return totals, per_plugin

    async def schedule(self, pod: PodInfo, snapshot: Snapshot,
                       explain: bool = False) -> ScheduleResult:
        """Decide a node for `pod`, or say why none fits. Raises PipelineError when a plugin
        or a non-ignorable extender fails (the pod is retried with backoff)."""
        n_all = len(snapshot.nodes)
        if n_all == 0:
            return ScheduleResult(None, fit_error=FitError(0))
        filters, scorers = self._entries_for(pod)
        if self.nominator is not None and not explain:
            nominated_first = await self._nominated_node_fits(pod, snapshot, filters)
            if nominated_first is not None:
                # evaluateNominatedNode: the node preemption made room on is tried before
                # the others; when it fits it is the only feasible node looked at.
                node_name, nominated_state = nominated_first
                return ScheduleResult(node_name, 1, 1, state=nominated_state)
        state = CycleState()
        feasible, diagnosis = self.find_feasible(state, pod, snapshot, filters, explain)
        evaluated = len(feasible) + len(diagnosis.node_statuses)
        if feasible and self.extenders:
            feasible = await self._extender_filter(pod, feasible, diagnosis)
        explanation = None
        if explain:
            explanation = Explanation(filters=dict(diagnosis.node_statuses))
            if diagnosis.absent_status is not None:  # the nodes a PreFilterResult left out
                seen = {n.name for n in feasible}
                for n in snapshot.nodes:
                    if n.name not in seen:
                        explanation.filters.setdefault(n.name, diagnosis.absent_status)
        if not feasible:
            # Upstream runs PostFilter after a PreFilter rejection too.
            post: PostFilterResult | None = None
            # Filter plugins' own PostFilters first (DynamicResources'), as upstream's
            # RunPostFilterPlugins: their Unschedulable reasons lead the message.
            reasons: list[str] = []
            ended = False
            if not diagnosis.pre_filter_cut_short:
                for f in filters:
                    if not isinstance(f.plugin, PostFilterPlugin):
                        continue
                    st = await f.plugin.post_filter(state, pod)
                    if st.code is Code.UNSCHEDULABLE:
                        reasons.extend(st.reasons)
                        continue
                    # Success, UnschedulableAndUnresolvable or an error ends the phase
                    # with that status alone.
                    ended = True
                    post = PostFilterResult(message=st.message)
                    break
            if self.post_filter is not None and not ended:
                if diagnosis.pre_filter_cut_short:
                    # DynamicResources' PostFilter errors first: no preemption, the
                    # nomination left as it is (nil NominatingInfo).
                    post = PostFilterResult(message=DRA_POST_FILTER_NOT_FOUND)
                else:
                    post = await self.post_filter.post_filter(self, state, pod, snapshot,
                                                              diagnosis, filters)
                    if reasons and post.message:
                        # Both rejected: one Unschedulable status with every reason.
                        post.message = ", ".join([*reasons, post.message])
            elif not ended and reasons:
                post = PostFilterResult(message=", ".join(reasons))
            if post is not None:
                diagnosis.post_filter_msg = post.message
            return ScheduleResult(None, evaluated, 0, diagnosis, explanation=explanation,
                                  post_filter=post)
        if len(feasible) == 1 and not explain:
            return ScheduleResult(feasible[0].name, evaluated, 1, state=state)
        totals, per_plugin = self.score(state, pod, feasible, snapshot, scorers, explain)
        if self.extenders:
            await self._extender_prioritize(pod, feasible, totals, per_plugin)
        best = self._select(totals)
        result = ScheduleResult(feasible[best].name, evaluated, len(feasible), state=state)
        result.deciding_scorer = _deciding_scorer(best, totals, per_plugin)
        if explanation is not None:
            for i, node in enumerate(feasible):
                ns = NodeScore(node.name, totals[i])
                for s in scorers:
                    if s.name in per_plugin:
                        ns.plugins[s.name] = (per_plugin[s.name + "\x00raw"][i],
                                              per_plugin[s.name + "\x00norm"][i],
                                              per_plugin[s.name][i])
                for e in self.extenders:
                    if e.name in per_plugin:
                        ns.plugins[e.name] = (0, 0, per_plugin[e.name][i])
                explanation.scores.append(ns)
            result.explanation = explanation
        return result

    async def _nominated_node_fits(self, pod: PodInfo, snapshot: Snapshot,
                                   filters: Sequence[FilterEntry]
                                   ) -> tuple[str, CycleState] | None:
        """The pod's nominated node (and the cycle's state) when it passes PreFilter, the
        filters (with the other nominated pods) and the filter extenders; None otherwise
        (the full search follows, with a fresh CycleState)."""
        assert self.nominator is not None
        node_name = self.nominator.node_of(pod.key) or status_nominated_node(pod)
        node = snapshot.get(node_name) if node_name else None
        if node is None:
            return None
        state = CycleState()
        st, narrowed = self.run_pre_filters(state, pod, snapshot, filters)
        if not st.ok or (narrowed.node_names is not None
                         and node_name not in narrowed.node_names):
            return None
        st = self.run_filters_with_nominated(state, pod, node, filters,
                                             self.nominated_pods(pod).get(node_name, ()))
        if not st.ok:
            return None
        if self.extenders:
            feasible = await self._extender_filter(pod, [node], FitError(len(snapshot.nodes)))
            if not feasible:
                return None
        return node_name, state

    def _select(self, totals: list[int]) -> int:
        """selectHost: the highest total; ties broken uniformly at random.

        Upstream draws once per tie as it goes (reservoir sampling); one draw among the
        counted ties is the same uniform choice, with list methods instead of a Python loop
        and a random call per tie (most nodes tie when pods are alike)."""
        best = max(totals)
        ties = totals.count(best)
        i = totals.index(best)
        if ties > 1:
            for _ in range(self._rng.randrange(ties)):
                i = totals.index(best, i + 1)
        return i

    async def _extender_filter(self, pod: PodInfo, feasible: list[NodeInfo],
                               diagnosis: FitError) -> list[NodeInfo]:
        """findNodesThatPassExtenders: each interested filter extender in turn."""
        for ext in self.extenders:
            if not feasible:
                break
            if not ext.is_filter() or not ext.is_interested(pod):
                continue
            try:
                feasible, failed, unresolvable = await ext.filter(pod, feasible)
            except ExtenderError as err:
                if ext.ignorable:
                    continue
                raise PipelineError(Status.error(str(err)).with_plugin(ext.name)) from err
            statuses = diagnosis.node_statuses
            for name, reason in unresolvable.items():
                statuses[name] = Status.unresolvable(reason).with_plugin(ext.name)
            for name, reason in failed.items():
                if name not in unresolvable:
                    statuses[name] = Status.unschedulable(reason).with_plugin(ext.name)
        return feasible

    async def _extender_prioritize(self, pod: PodInfo, nodes: list[NodeInfo],
                                   totals: list[int],
                                   per_plugin: dict[str, Sequence[int]]) -> None:
        """Prioritize extenders run concurrently; their errors are ignored (upstream)."""
        import asyncio

        exts = [e for e in self.extenders if e.is_prioritizer() and e.is_interested(pod)]
        if not exts:
            return
        results: list[dict[str, int] | BaseException]
        if len(exts) == 1:  # the usual case: no task and gather for one call
            try:
                results = [await exts[0].prioritize(pod, nodes)]
            except Exception as err:  # noqa: BLE001 - ignored, as gather's below
                results = [err]
        else:
            results = await asyncio.gather(*(e.prioritize(pod, nodes) for e in exts),
                                           return_exceptions=True)
        index = {n.name: i for i, n in enumerate(nodes)}
        for ext, scores in zip(exts, results, strict=True):
            if isinstance(scores, BaseException):
                continue
            weighted = [0] * len(nodes)
            factor = ext.weight * (MAX_NODE_SCORE // MAX_EXTENDER_PRIORITY)
            get = index.get
            for host, score in scores.items():
                i = get(host)
                if i is not None:
                    v = score * factor
                    weighted[i] = v
                    totals[i] += v
            per_plugin[ext.name] = weighted


@dataclass(frozen=True, slots=True)
class Narrowed:
    """The intersection of a cycle's PreFilterResults: the only nodes Filter visits (None:
    every node) and the plugins whose results narrowed them."""

    node_names: frozenset[str] | None = None
    plugins: tuple[str, ...] = ()


_ALL_NODES = Narrowed()


def _go_list(names: Sequence[str]) -> str:
    """A sorted []string as Go's %v prints it: [A B]."""
    return "[" + " ".join(names) + "]"


def _filter_error(name: str, st: Status) -> PipelineError:
    """RunFilterPlugins: a Filter may only reject; an Error aborts the cycle."""
    return PipelineError(Status.error(
        f'running "{name}" filter plugin: {st.message}').with_plugin(name))


class PostFilter(Protocol):
    """A PostFilter plugin (DefaultPreemption): runs when no node fits, with the cycle's
    state (PreFilter done) and the pipeline, whose filters it may run on copies of
    nodes."""

    async def post_filter(self, pipeline: Pipeline, state: CycleState, pod: PodInfo,
                          snapshot: Snapshot, diagnosis: FitError,
                          filters: Sequence[FilterEntry]) -> PostFilterResult: ...


# Copies of nodes get generations no real node has, so that caches keyed by
# (node.name, node.generation) never take a copy's result for the live node's.
_copy_generations = itertools.count(-(1 << 40), -(1 << 20))


def node_copy(node: NodeInfo) -> NodeInfo:
    """A copy of `node` whose pods may be added and removed (NodeInfo.Snapshot); the live
    NodeInfo is not touched."""
    trial = replace(node, requested=dict(node.requested), pods=dict(node.pods),
                    used_ports=set(node.used_ports))
    trial.generation = next(_copy_generations)
    return trial


class PipelineError(Exception):
    """A plugin or a non-ignorable extender failed: the pod is retried with backoff."""

    def __init__(self, status: Status) -> None:
        # The message is upstream's error text (the FailedScheduling event carries it).
        super().__init__(status.message)
        self.status = status


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


def _deciding_scorer(best: int, totals: list[int],
                     per_plugin: Mapping[str, Sequence[int]]) -> str:
    """The scorer whose weighted score put the winner furthest ahead of the runner-up."""
    if len(totals) < 2:
        return ""
    others = list(totals)
    others[best] = min(totals) - 1  # the first highest of the others, without a key function
    runner = others.index(max(others))
    if totals[runner] == totals[best]:
        return ""  # a tie: no scorer decided, the draw among the tied nodes did
    lead = {name: s[best] - s[runner] for name, s in per_plugin.items() if "\x00" not in name}
    name, margin = max(lead.items(), key=lambda kv: kv[1], default=("", 0))
    return name if margin > 0 else ""
