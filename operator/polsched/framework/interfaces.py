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

A plugin reads other cluster objects (namespaces, PVCs, Services...) only through its
typed `Handle.listers`, filled by the one builder the engine, explain, simulate and the
tests share (polsched.scheduler.pipelines).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from polsched.framework.cycle_state import CycleState
from polsched.framework.listers import Listers
from polsched.framework.load import LoadSource
from polsched.framework.nominator import Nominator
from polsched.framework.selectors import NodeSet
from polsched.framework.status import SUCCESS, Status
from polsched.framework.types import NodeInfo, PodInfo, Snapshot
from polsched.framework.waiting_pods import WaitingPod

MAX_NODE_SCORE = 100
MIN_NODE_SCORE = 0


class Plugin:
    NAME: ClassVar[str] = ""

    @property
    def name(self) -> str:
        return self.NAME


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


class PostFilterPlugin(Plugin):
    """A filter plugin's own PostFilter (DynamicResources'), run when no node fits, before
    DefaultPreemption, in filter order (upstream's default profile orders DynamicResources
    before DefaultPreemption). Success or UnschedulableAndUnresolvable ends the PostFilter
    phase; Unschedulable lets the next one run, its reasons leading the message; Error ends
    the phase with an error. May write to the API server through Handle.api (it may
    deallocate a claim); does nothing where there is no client (explain, simulate)."""

    async def post_filter(self, state: CycleState, pod: PodInfo) -> Status:
        raise NotImplementedError


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


class PreBindPlugin(Plugin):
    async def pre_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        """Runs in the binding cycle, before the Binding is posted; may write to the API
        server through Handle.api. A failure unreserves and requeues the pod."""
        raise NotImplementedError


class PostBindPlugin(Plugin):
    def post_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        """Informational, after a successful bind."""
        raise NotImplementedError


class ScoreExtensions:
    """Optional on a ScorePlugin: map raw scores into 0..MAX_NODE_SCORE, in place."""

    def normalize_score(self, state: CycleState, pod: PodInfo, scores: list[int]) -> Status:
        raise NotImplementedError


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
    # Node usage from the Metrics API for the load-aware scorers (framework.load): the
    # process's one NodeMetricsWatcher, a snapshot's StaticLoad offline; None where no
    # usage is known (every node then has no metrics: Trimaran's neutral score).
    load: LoadSource | None = None


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
