"""What one scheduling attempt found out: the diagnosis of a pod that fits nowhere, the
explanation `polsched explain` prints, and the result of a decision.

As upstream's framework types (pkg/scheduler/framework/types.go FitError, Diagnosis;
schedule_one.go ScheduleResult). Plain data: the runtime (framework.runtime) and the
search (scheduler.algorithm) fill these in; the engine, explain and simulate read them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from polsched.framework.status import Status

if TYPE_CHECKING:
    from polsched.framework.cycle_state import CycleState
    from polsched.framework.types import PodInfo

NO_NODE_AVAILABLE = "0/{} nodes are available"
# schedule_one.go ErrNoNodesAvailable: what the event says when the cluster has no nodes.
NO_NODES_AVAILABLE = "no nodes available to schedule pods"
# apimachinery validation.NoteLengthLimit: events carry at most this many characters.
NOTE_LENGTH_LIMIT = 1024


def truncate_message(message: str) -> str:
    """schedule_one.go truncateMessage."""
    if len(message) <= NOTE_LENGTH_LIMIT:
        return message
    suffix = " ..."
    return message[: NOTE_LENGTH_LIMIT - len(suffix)] + suffix


class PipelineError(Exception):
    """A plugin or a non-ignorable extender failed: the pod is retried with backoff."""

    def __init__(self, status: Status) -> None:
        # The message is upstream's error text (the FailedScheduling event carries it).
        super().__init__(status.message)
        self.status = status


@dataclass
class FitError:
    """No node fits: framework.FitError, with its Error() text as `message`."""

    num_all_nodes: int
    # The nodes that were filtered (or all of them when PreFilter rejected the pod).
    node_statuses: dict[str, Status] = field(default_factory=dict)
    pre_filter_msg: str = ""
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

    def rejecting_plugins(self) -> set[str]:
        """Diagnosis.UnschedulablePlugins: the plugins that rejected a node, and the
        PreFilter plugins whose results left nodes out (the queueing hints' keys)."""
        return {st.plugin for st in self.node_statuses.values()} | self.unschedulable_plugins

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


@dataclass(frozen=True, slots=True)
class PluginScore:
    """One scorer's (or extender's) scores of one node: raw, after NormalizeScore, and
    times its weight (an extender has only the weighted one)."""

    raw: int
    normalized: int
    weighted: int


@dataclass
class NodeScore:
    """One feasible node's scores, for `polsched explain`: scorer or extender name -> its
    PluginScore."""

    node: str
    total: int = 0
    plugins: dict[str, PluginScore] = field(default_factory=dict)


@dataclass
class Explanation:
    filters: dict[str, Status] = field(default_factory=dict)   # node -> first failing status
    scores: list[NodeScore] = field(default_factory=list)


@dataclass
class PostFilterResult:
    """What the PostFilter plugins (DefaultPreemption) decided for a pod that fits
    nowhere (fwk.PostFilterResult, with the phase's message)."""

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
    """schedule_one.go ScheduleResult: the chosen node, or why none fits."""

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
    # Placed on an OpportunisticBatching hint: how many kept nodes tied for it (the pick
    # among them was random); 0 when the node came from a search.
    hint_ties: int = 0
