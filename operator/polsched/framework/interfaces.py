"""Plugin base classes, one per extension point, as kube-scheduler's framework/interface.go.

A plugin subclasses the points it implements. A plugin instance is built once per policy
entry when the policy loads (args validated then) and is called for every pod; it reads
the snapshot it is given and never calls the API server. Scores are 0..MAX_NODE_SCORE
after NormalizeScore.

The scheduling cycle (PreEnqueue when a pod is queued; PreFilter, Filter, PostFilter,
PreScore, Score, NormalizeScore, Reserve, Permit) runs synchronously on the snapshot. The
binding cycle (WaitOnPermit, PreBind, Bind, PostBind) runs in the background; PreBind is
the one point that may write to the API server (VolumeBinding binds PVs/PVCs there),
through `Handle.api`. On any failure after Reserve, Unreserve runs in reverse order.
framework.runtime runs every point (its `run_*_plugins`); scheduler.schedule_one runs one
attempt through them.

Every extension point's protocol lives here, as upstream keeps them in interface.go: the
plugin points, the HTTP extender's (Extender, PreemptingExtender) and what a PostFilter
plugin may ask of the framework that runs it (FrameworkHandle).

A plugin reads other cluster objects (namespaces, PVCs, Services...) only through its
typed `Handle.listers`, filled by the one builder the engine, explain, simulate and the
tests share (polsched.scheduler.pipelines).
"""

from __future__ import annotations

import enum
import random
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, runtime_checkable

from polsched.framework.cycle_state import CycleState
from polsched.framework.diagnosis import FitError, PostFilterResult
from polsched.framework.listers import Listers
from polsched.framework.load import LoadSource
from polsched.framework.nominator import Nominator
from polsched.framework.podgroups import COMPOSITE_PREFIX, PodGroups
from polsched.framework.selectors import NodeSet
from polsched.framework.status import SUCCESS, Status
from polsched.framework.types import Json, NodeInfo, PodInfo, Snapshot
from polsched.framework.waiting_pods import WaitingPod

MAX_NODE_SCORE = 100
MIN_NODE_SCORE = 0
# k8s.io/kube-scheduler/extender/v1: MaxExtenderPriority
MAX_EXTENDER_PRIORITY = 10


class ExtensionPoint(enum.Enum):
    """The framework's extension points, by upstream's names (metrics.PreFilter...)."""

    PRE_ENQUEUE = "PreEnqueue"
    PRE_FILTER = "PreFilter"
    FILTER = "Filter"
    POST_FILTER = "PostFilter"
    PRE_SCORE = "PreScore"
    SCORE = "Score"
    RESERVE = "Reserve"
    PERMIT = "Permit"
    PRE_BIND = "PreBind"
    BIND = "Bind"
    POST_BIND = "PostBind"
    # The pod-group cycle (framework.PlacementFeasiblePlugin, GenericWorkload).
    PLACEMENT_FEASIBLE = "PlacementFeasible"
    # A rejected pod group (framework.PodGroupPostFilterPlugin, GenericWorkload).
    POD_GROUP_POST_FILTER = "PodGroupPostFilter"
    # The placement algorithm (TopologyAwareWorkloadScheduling): candidate sets of nodes
    # for a pod group, and the score of each one the group fits in.
    PLACEMENT_GENERATE = "PlacementGenerate"
    PLACEMENT_SCORE = "PlacementScore"


class Plugin:
    NAME: ClassVar[str] = ""

    @property
    def name(self) -> str:
        return self.NAME


# A fragment of a pod's scheduling signature (fwk.SignFragment): the signer's name (the
# pod field it reads, framework.signers) and a JSON-able value.
SignFragment = tuple[str, Any]


class SignPlugin(Plugin):
    """fwk.SignPlugin (OpportunisticBatching, KEP-5598): what of a pod this plugin's
    PreFilter, Filter, PreScore and Score read. Two pods with equal fragments from every
    plugin get the same feasibility and scores on the same nodes in the same state.
    A pipeline signs pods only when each of its filters and scorers is a SignPlugin."""

    def sign_pod(self, pod: PodInfo) -> Sequence[SignFragment] | None:
        """The pod's fragments; None: the pod cannot be signed (upstream's Unschedulable
        status from SignPod), so it is never batched."""
        raise NotImplementedError

    def signs_no_pod(self) -> bool:
        """Whether sign_pod refuses every pod whatever it is (PodTopologySpread with
        default constraints): the pipeline then never signs, and never batches."""
        return False


class PreEnqueuePlugin(Plugin):
    def pre_enqueue(self, pod: PodInfo) -> Status:
        """Success lets the pod into the active queue; anything else keeps it out (it
        waits, untouched, until an update of the pod lets it in), as SchedulingGates."""
        raise NotImplementedError


@dataclass(frozen=True, slots=True)
class PreFilterResult:
    """framework.PreFilterResult: PreFilter succeeded and only these nodes can fit (None:
    every node). The pipeline intersects the results of all PreFilters and runs Filter on
    those nodes only; the others are reported as upstream reports them."""

    node_names: frozenset[str] | None = None


class PreFilterPlugin(Plugin):
    def pre_filter(self, state: CycleState, pod: PodInfo,
                   snapshot: Snapshot) -> Status | PreFilterResult:
        """Compute what Filter needs for this pod into `state`. Return Skip when Filter has
        nothing to check for this pod, Unschedulable to reject the pod on every node, a
        PreFilterResult (success) to restrict the nodes Filter looks at."""
        raise NotImplementedError


class PreFilterExtensions:
    """Optional on a PreFilterPlugin (framework.PreFilterExtensions): update the state that
    PreFilter computed when a pod is added to or removed from a node in a what-if (pods
    nominated to the node, preemption's victims)."""

    def add_pod(self, state: CycleState, pod: PodInfo, pod_to_add: PodInfo,
                node: NodeInfo) -> Status:
        raise NotImplementedError

    def remove_pod(self, state: CycleState, pod: PodInfo, pod_to_remove: PodInfo,
                   node: NodeInfo) -> Status:
        raise NotImplementedError


class FilterPlugin(Plugin):
    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """Success when the pod fits the node; otherwise Unschedulable (or
        UnschedulableAndUnresolvable) with kube-scheduler's reason strings."""
        raise NotImplementedError

    def bind_filter(self, state: CycleState, pod: PodInfo
                    ) -> Callable[[NodeInfo], Status] | None:
        """Optionally, this cycle's Filter as a function of the node alone, with what it
        reads of the state and the pod resolved once (the pipeline's per-node loop calls
        it); it must return what filter(state, pod, node) returns. None: filter is
        called."""
        return None


class NodeSetFilter:
    """A FilterPlugin that can also tell, once per cycle after its PreFilter, exactly which
    nodes of the snapshot its Filter passes (see framework.selectors.NodeSet). The pipeline
    then calls Filter only on the nodes outside the set, for their statuses. Never more
    nodes than Filter passes; None when it cannot tell."""

    def filter_nodes(self, state: CycleState, pod: PodInfo,
                     snapshot: Snapshot) -> NodeSet | None:
        return None

    def filter_rejection(self, state: CycleState, pod: PodInfo) -> Status | None:
        """The one status Filter gives every node outside the set filter_nodes returned,
        when the set is exact and that status is the same for all: the pipeline then
        records it without calling Filter. None: Filter is called for each."""
        return None


class PreScorePlugin(Plugin):
    def pre_score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo],
                  snapshot: Snapshot) -> Status:
        """Compute what Score needs; Skip when Score has nothing to do for this pod."""
        raise NotImplementedError


class ScorePlugin(Plugin):
    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        """The raw score of one feasible node."""
        raise NotImplementedError

    def score_nodes(self, state: CycleState, pod: PodInfo,
                    nodes: Sequence[NodeInfo]) -> list[int] | Status:
        """Raw scores of the feasible nodes, in order. Override for a faster batch form or
        to return an error Status."""
        score = self.score
        return [score(state, pod, n) for n in nodes]


class ReservePlugin(Plugin):
    """Reserve / Unreserve: claim what the pod will use on the chosen node (in the
    plugin's own state) before the binding cycle, and release it when the pod is not
    bound after all. Unreserve must be idempotent."""

    def reserve(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        raise NotImplementedError

    def unreserve(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        raise NotImplementedError


class PermitPlugin(Plugin):
    def permit(self, state: CycleState, pod: PodInfo, node_name: str) -> tuple[Status, float]:
        """Success to go on binding, Wait (with a timeout in seconds) to hold the pod in
        the binding cycle until allowed or rejected, or a rejection."""
        raise NotImplementedError


@dataclass(frozen=True, slots=True)
class PlacementProgress:
    """framework.PlacementProgress: in a pod-group cycle, how many of the group's members
    are still to be tried and how many are scheduled (assumed or bound, this cycle's
    simulated ones included)."""

    remaining: int
    scheduled: int


@dataclass(frozen=True)
class PodGroupInfo:
    """The pod group a pod-group cycle places (fwk.PodGroupInfo): its namespace, name and
    PodGroup object (scheduling.k8s.io/v1beta1, as the API server sends it). With
    CompositePodGroup on, a node of a tree: a CompositePodGroup (`composite`, its object
    in `pod_group`) has `children` (PodGroups and CompositePodGroups, in GetChildGroups'
    order); a PodGroup has none."""

    namespace: str
    name: str
    pod_group: Json
    composite: bool = False
    children: tuple[PodGroupInfo, ...] = ()

    @property
    def key(self) -> str:
        """fwk.PodGroupKey / CompositePodGroupKey (framework.podgroups' key forms)."""
        return f"{COMPOSITE_PREFIX}{self.namespace}/{self.name}" if self.composite \
            else f"{self.namespace}/{self.name}"


class PlacementFeasiblePlugin(Plugin):
    """framework.PlacementFeasiblePlugin: in the pod-group cycle, before any member is
    tried and after each one, whether the group can still be placed: Success (it is
    placed enough), Wait (not yet: go on with the next member), Unschedulable (it cannot
    be: stop), or an error."""

    def placement_feasible(self, state: CycleState, group: PodGroupInfo,
                           progress: PlacementProgress) -> Status:
        raise NotImplementedError


@dataclass(frozen=True)
class Placement:
    """fwk.Placement: a set of nodes a pod group is tried on as a whole (a topology
    domain's nodes, or every node), named for diagnostics (the domain's label value; ""
    for the placement of every node)."""

    name: str
    nodes: tuple[NodeInfo, ...]


class PlacementGeneratePlugin(Plugin):
    """framework.PlacementGeneratePlugin (TopologyAwareWorkloadScheduling): the placements
    a pod group is to be tried in, out of `parent` (every node of the snapshot). Only the
    first such plugin of a profile runs (RunPlacementGeneratePlugins)."""

    def generate_placements(self, state: CycleState, group: PodGroupInfo,
                            parent: Placement) -> tuple[list[Placement], Status]:
        raise NotImplementedError


@dataclass(frozen=True)
class PodGroupAssignments:
    """fwk.PodGroupAssignments: a placement the group fits in, and the members the
    algorithm placed there (each with its node)."""

    placement: Placement
    assignments: tuple[ProposedAssignment, ...]


class PlacementScorePlugin(Plugin):
    """framework.PlacementScorePlugin: a score for each placement the group fits in (when
    more than one does); the highest weighted total wins, ties broken at random. A plugin
    with `normalize_placement_scores` (PlacementScoreExtensions) scales its raw scores
    to 0..MAX_NODE_SCORE itself; every final score must be in that range."""

    def score_placement(self, state: CycleState, group: PodGroupInfo,
                        placement: PodGroupAssignments) -> tuple[int, Status]:
        raise NotImplementedError

    def normalize_placement_scores(self, state: CycleState, group: PodGroupInfo,
                                   scores: list[int]) -> Status | None:
        """NormalizePlacementScore, in place; None (the default): the plugin has no
        PlacementScoreExtensions."""
        return None


@dataclass(frozen=True)
class ProposedAssignment:
    """fwk.ProposedAssignment: a member the pod-group algorithm placed (node "" when it
    did not fit), with the CycleState its search filled, as the algorithm left it."""

    pod: PodInfo
    node: str
    state: CycleState


# fwk.PodGroupSchedulingFunc: reruns the pod-group algorithm (on the snapshot as it is
# then, with a fresh group CycleState) and returns every member's assignment and the
# group's status. Whatever it assumes is reverted before it returns.
PodGroupSchedulingFunc = Callable[[], Awaitable[tuple[list[ProposedAssignment], Status]]]


@dataclass
class PodGroupPostFilterResult:
    """fwk.PodGroupPostFilterResult: the node each member is nominated to (by pod key,
    "namespace/name"), and, beyond upstream's type (whose executor evicts from inside the
    plugin), the victims the scheduler is to evict before the group is tried again."""

    nominating: dict[str, str] = field(default_factory=dict)
    victims: list[PodInfo] = field(default_factory=list)
    # Of the victims' units, the pod groups taken whole (numPodGroupDisruptions).
    disruptions: int = 0


class PodGroupPostFilterPlugin(Plugin):
    """framework.PodGroupPostFilterPlugin: runs when a pod-group cycle rejects the group
    (Unschedulable), in the profile's order: DynamicResources' before DefaultPreemption's.
    Success (the group waits on preemption, its members nominated) ends the phase;
    Unschedulable lets the next plugin try (its reasons join the phase's message);
    UnschedulableAndUnresolvable ends it; anything else is an Error that the runtime wraps
    as `error in "<Plugin>" PodGroupPostFilter plugins: <msg>`
    (RunPodGroupPostFilterPlugins)."""

    async def pod_group_post_filter(self, handle: FrameworkHandle, state: CycleState,
                                    group: PodGroupInfo, pods: Sequence[PodInfo],
                                    snapshot: Snapshot, schedule: PodGroupSchedulingFunc
                                    ) -> tuple[PodGroupPostFilterResult | None, Status]:
        """`state` is the group's CycleState of the cycle that rejected it, `pods` the
        group's members of that cycle (the unscheduled ones), `schedule` reruns the
        group's algorithm."""
        raise NotImplementedError


class PreBindPlugin(Plugin):
    async def pre_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        """Runs in the binding cycle, before the Binding is posted; may write to the API
        server through Handle.api. A failure unreserves and requeues the pod."""
        raise NotImplementedError

    def pre_bind_pre_flight(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        """PreBindPreFlight: whether PreBind will do something for this pod (SUCCESS), or
        not (SKIP), or an error. Before the binding cycle waits on Permit; a SUCCESS of any
        plugin sets the pod's nominatedNodeName (NominatedNodeNameForExpectation). A
        plugin that does not say is taken to have work."""
        return Status()


class PostBindPlugin(Plugin):
    def post_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        """Informational, after a successful bind."""
        raise NotImplementedError


class ScoreExtensions:
    """Optional on a ScorePlugin: map raw scores into 0..MAX_NODE_SCORE, in place."""

    def normalize_score(self, state: CycleState, pod: PodInfo, scores: list[int]) -> Status:
        raise NotImplementedError


class PostFilterPlugin(Plugin):
    """Runs when no node fits (framework.PostFilterPlugin), in the profile's order:
    DynamicResources' before DefaultPreemption's, as upstream's default profile."""

    async def post_filter(self, handle: FrameworkHandle, state: CycleState, pod: PodInfo,
                          snapshot: Snapshot, diagnosis: FitError
                          ) -> tuple[PostFilterResult | None, Status]:
        """Success (with a result) ends the phase; Unschedulable lets the next plugin try
        (its reasons join the phase's message; a result with a nomination is kept);
        UnschedulableAndUnresolvable ends it; an Error ends it with the error's message
        (RunPostFilterPlugins)."""
        raise NotImplementedError


# -- the HTTP extender (k8s.io/kube-scheduler/extender/v1, pkg/scheduler/framework
#    extender.go) -------------------------------------------------------------------------
class ExtenderError(Exception):
    """An extender call failed (transport, HTTP status, or its answer's Error)."""


@dataclass(frozen=True)
class Victims:
    """extenderv1.Victims: pods (full v1.Pod JSON) that preemption would evict from one
    node, and how many PodDisruptionBudgets that breaks."""

    pods: tuple[Json, ...] = ()
    num_pdb_violations: int = 0


class Extender(Protocol):
    """What the scheduling cycle needs of an HTTP extender (see polsched.extender)."""

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


@runtime_checkable
class PreemptingExtender(Protocol):
    """The part of an extender that preemption calls (its preemptVerb)."""

    @property
    def name(self) -> str: ...
    @property
    def ignorable(self) -> bool: ...
    def is_interested(self, pod: PodInfo) -> bool: ...
    def supports_preemption(self) -> bool: ...
    async def process_preemption(
        self, pod: PodInfo, victims_by_node: Mapping[str, Victims]
    ) -> dict[str, Victims]: ...


@runtime_checkable
class BindingExtender(Protocol):
    """The Bind point an extender may take over (its bindVerb): what the binder needs of
    an HTTP extender (polsched.extender.HTTPExtender)."""

    def is_binder(self) -> bool: ...
    def is_interested(self, pod: PodInfo) -> bool: ...
    async def bind(self, pod: PodInfo, node_name: str) -> None: ...


class FrameworkHandle(Protocol):
    """What a PostFilter plugin may ask of the framework that runs it (upstream's
    framework.Handle, which the frameworkImpl implements): the filters with the nominated
    pods, the PreFilter extensions, the nominated pods, and the extenders' preempt verb.
    framework.runtime.Pipeline implements it."""

    @property
    def nominator(self) -> Nominator | None: ...
    def nominated_pods_on(self, pod: PodInfo, node_name: str) -> Sequence[PodInfo]:
        """The pods nominated to `node_name` that count for `pod` (addGENominatedPods)."""
    def run_filter_plugins_with_nominated_pods(self, state: CycleState, pod: PodInfo,
                                               node: NodeInfo) -> Status:
        """RunFilterPluginsWithNominatedPods with the nominated pods that count for
        `pod`; an Error raises PipelineError."""
    def run_pre_filter_extension_add_pod(self, state: CycleState, pod: PodInfo,
                                         to_add: PodInfo, node: NodeInfo) -> Status: ...
    def run_pre_filter_extension_remove_pod(self, state: CycleState, pod: PodInfo,
                                            to_remove: PodInfo, node: NodeInfo) -> Status: ...
    def preempting_extenders(self, pod: PodInfo) -> Sequence[PreemptingExtender]:
        """The extenders with a preemptVerb interested in `pod`, in order."""


class PodEventRecorder(Protocol):
    """The profile's event recorder (upstream's Handle.EventRecorder), for a binding cycle
    plugin that reports progress (DynamicResources' BindingConditionsPending). The engine
    writes it into the binding cycle's CycleState under EVENT_RECORDER_KEY; absent where
    no events are written (explain, simulate, unit tests)."""

    def event(self, pod: PodInfo, type_: str, reason: str, action: str, note: str,
              related: PodInfo | None = None) -> None: ...


# The CycleState key of the profile's PodEventRecorder during a binding cycle. Per cycle,
# not per plugin: a plugin may be shared by several policies' pipelines, and an event is
# reported under the policy that schedules the pod.
EVENT_RECORDER_KEY = "polsched.io/event-recorder"


class ApiWriter(Protocol):
    """The API calls a PreBind plugin may make (polsched.cluster.client.ApiClient has this
    shape); None where nothing may be written (explain, simulate, unit tests)."""

    async def request(self, method: str, path: str, *, params: Mapping[str, Any] | None = None,
                      body: Any = None, content_type: str = "application/json",
                      timeout: float | None = 60.0) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Handle:
    """What a plugin may know about the scheduler it is built for (framework.Handle)."""

    # Namespaces, PVs, PVCs, StorageClasses, CSINodes, Services, workload controllers,
    # PDBs, PriorityClasses: live views kept by the cluster cache (empty offline unless
    # the caller loads objects into them).
    listers: Listers = field(default_factory=Listers)
    # Resources NodeResourcesFit ignores (extenders' managedResources with
    # ignoredByScheduler), see kube-scheduler's NodeResourcesFitArgs.IgnoredResources.
    ignored_resources: frozenset[str] = frozenset()
    # For PreBind only (see ApiWriter).
    api: ApiWriter | None = None
    # Pods that Permit plugins hold, by uid (GetWaitingPod / IterateOverWaitingPods): a
    # plugin may allow or reject them. Kept by the engine; empty offline.
    waiting_pods: Mapping[str, WaitingPod] = field(default_factory=dict)
    # Pods nominated to nodes (upstream's PodNominator): preemption nominates, the filters
    # count them. One per engine, shared by its pipelines; None where nothing is nominated.
    nominator: Nominator | None = None
    # Whether a preemptor's victims are still being evicted (the engine's preemption
    # executor, by pod uid): DefaultPreemption's PreEnqueue keeps such a pod out of the
    # active queue. None where nothing preempts (explain, simulate, unit tests).
    preempting: Callable[[str], bool] | None = None
    # The source of the random choices a plugin makes (DefaultPreemption's offset); the
    # pipeline's tie-breaks use the same one. None: each makes its own. Seeded in tests and
    # benchmarks, so that their outcomes repeat.
    rng: random.Random | None = None
    # Node usage from the Metrics API for the load-aware scorers (framework.load): the
    # process's one NodeMetricsWatcher, a snapshot's StaticLoad offline; None where no
    # usage is known (every node then has no metrics: Trimaran's neutral score).
    load: LoadSource | None = None
    # Pod groups (scheduling.k8s.io/v1beta1): the PodGroup objects and each group's
    # members (all, assumed, assigned), kept by the cluster cache; `served` says whether
    # the cluster serves PodGroups at all (GenericWorkload). None offline.
    pod_groups: PodGroups | None = None
    # Handle.Activate: move these pending pods to the active queue (GangScheduling's
    # Permit activates a group's unscheduled members). None where nothing is queued.
    activate: Callable[[Sequence[PodInfo]], None] | None = None
    # The Kubernetes feature gates that are on (POLSCHED_FEATURE_GATES with v1.37's
    # defaults, polsched.cluster.featuregates.scheduler_features): TopologyAwareWorkload-
    # Scheduling makes the builder add the placement plugins and the pod-group cycle run
    # the placement algorithm; OpportunisticBatching lets the engine batch alike pods
    # (scheduler.batch). Empty here, so offline callers and tests turn them on by name.
    features: frozenset[str] = frozenset()


def default_normalize(scores: list[int], reverse: bool = False) -> Status:
    """helper.DefaultNormalizeScore: scale to 0..MAX_NODE_SCORE by the maximum; reverse
    flips so that the lowest raw score gets the highest normalized one."""
    max_count = max(scores, default=0)
    if max_count == 0:
        if reverse:
            scores[:] = [MAX_NODE_SCORE] * len(scores)
        return SUCCESS
    if reverse:
        scores[:] = [MAX_NODE_SCORE - MAX_NODE_SCORE * s // max_count for s in scores]
    else:
        scores[:] = [MAX_NODE_SCORE * s // max_count for s in scores]
    return SUCCESS
