"""PodTopologySpread's PreFilter, PreFilterExtensions (AddPod, RemovePod) and Filter,
for DoNotSchedule constraints (upstream's filtering.go): PreFilter counts matching pods
per domain once per pod; Filter per node is a lookup against maxSkew and the global
minimum.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import cast

from polsched.framework.cycle_state import CycleState
from polsched.framework.interfaces import (
    FilterPlugin,
    NodeSetFilter,
    PreFilterExtensions,
    PreFilterPlugin,
)
from polsched.framework.selectors import (
    ALL_NODES,
    NodeSet,
    SelectorError,
)
from polsched.framework.status import SKIP, SUCCESS, Code, Status, shared
from polsched.framework.types import NodeInfo, PodInfo, Snapshot
from polsched.plugins.pod_topology_spread.args import DO_NOT_SCHEDULE
from polsched.plugins.pod_topology_spread.common import (
    MAX_INT32,
    NAME,
    NodeInclusion,
    SpreadBase,
    SpreadConstraint,
    has_keys,
)

# plugin.go
ERR_REASON_CONSTRAINTS_NOT_MATCH = "node(s) didn't match pod topology spread constraints"
ERR_REASON_NODE_LABEL_NOT_MATCH = ERR_REASON_CONSTRAINTS_NOT_MATCH + " (missing required label)"

PRE_FILTER_KEY = "PreFilter" + NAME

@dataclass(slots=True)
class _FilterConstraint:
    topology_key: str
    # domain value -> matching pods
    counts: dict[str, int]
    # a node of domain v fails when counts[v] > limit, where
    # limit = maxSkew + global minimum - (1 if the pod matches its own selector else 0)
    limit: int
    # what the limit is made of, for AddPod / RemovePod
    spread: SpreadConstraint
    self_match: int


def _limit(c: SpreadConstraint, by_value: Mapping[str, int], self_match: int) -> int:
    # minMatchNum: fewer eligible domains than minDomains makes the global minimum 0
    # (MaxInt32 when no domain is eligible is upstream's value, kept for parity).
    min_match = min(by_value.values(), default=MAX_INT32)
    if len(by_value) < c.min_domains:
        min_match = 0
    return c.max_skew + min_match - self_match


class Filtering(SpreadBase, PreFilterPlugin, PreFilterExtensions, FilterPlugin, NodeSetFilter):
    """The filter extension points of PodTopologySpread."""

    def pre_filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> Status:
        try:
            constraints, default_sig = self._constraints_signed(pod, DO_NOT_SCHEDULE)
        except (SelectorError, TypeError, ValueError) as err:
            return Status.error(f"obtaining pod's hard topology spread constraints: {err}")
        if not constraints:
            return SKIP
        counts = self._domain_counts(pod, constraints, snapshot, budget=state.budget)
        if counts is None:
            totals = self._aggregate(pod, constraints, DO_NOT_SCHEDULE, default_sig,
                                     snapshot, budget=state.budget).totals
            # The aggregate's own dicts: read only (AddPod / RemovePod copy them).
            counts = [cast(dict[str, int], totals.get(i) or {})
                      for i in range(len(constraints))]
        compiled: list[_FilterConstraint] = []
        pod_labels = pod.labels
        for c, by_value in zip(constraints, counts, strict=True):
            self_match = 1 if c.selector(pod_labels) else 0
            compiled.append(_FilterConstraint(c.topology_key, by_value,
                                              _limit(c, by_value, self_match), c, self_match))
        state.write(PRE_FILTER_KEY, tuple(compiled))
        return SUCCESS

    # PreFilterExtensions (filtering.go AddPod / RemovePod, updateWithPod): a pod added to
    # or removed from a node in a what-if (nominated pods, preemption's victims).
    def add_pod(self, state: CycleState, pod: PodInfo, pod_to_add: PodInfo,
                node: NodeInfo) -> Status:
        self._update(state, pod, pod_to_add, node, 1)
        return SUCCESS

    def remove_pod(self, state: CycleState, pod: PodInfo, pod_to_remove: PodInfo,
                   node: NodeInfo) -> Status:
        self._update(state, pod, pod_to_remove, node, -1)
        return SUCCESS

    def _update(self, state: CycleState, pod: PodInfo, other: PodInfo, node: NodeInfo,
                delta: int) -> None:
        compiled: tuple[_FilterConstraint, ...] | None = state.get(PRE_FILTER_KEY)
        if compiled is None or other.namespace != pod.namespace:
            return
        labels = node.labels
        if not has_keys(labels, [c.spread for c in compiled]):
            return
        inclusion = NodeInclusion(pod)
        updated = []
        for c in compiled:
            # A new state, not the cycle's dicts changed in place: a what-if works on a
            # copy of the state, which may share them.
            if c.spread.selector(other.labels) and inclusion.includes(c.spread, node):
                by_value = dict(c.counts)
                value = labels[c.topology_key]
                by_value[value] = by_value.get(value, 0) + delta
                c = _FilterConstraint(c.topology_key, by_value,
                                      _limit(c.spread, by_value, c.self_match), c.spread,
                                      c.self_match)
            updated.append(c)
        state.write(PRE_FILTER_KEY, tuple(updated))

    def bind_filter(self, state: CycleState, pod: PodInfo
                    ) -> Callable[[NodeInfo], Status] | None:
        """This cycle's Filter as a function of the node alone, for the pipeline's per-node
        loop (one constraint: a label lookup, a count lookup and a comparison)."""
        constraints: tuple[_FilterConstraint, ...] = state.read(PRE_FILTER_KEY)
        if len(constraints) != 1:
            def many(node: NodeInfo) -> Status:
                labels = node.labels
                for c in constraints:
                    value = labels.get(c.topology_key)
                    if value is None:
                        return _NODE_LABEL_NOT_MATCH
                    if c.counts.get(value, 0) > c.limit:
                        return _CONSTRAINTS_NOT_MATCH
                return SUCCESS
            return many
        key, get, limit = constraints[0].topology_key, constraints[0].counts.get, \
            constraints[0].limit

        def one(node: NodeInfo) -> Status:
            value = node.labels.get(key)
            if value is None:
                return _NODE_LABEL_NOT_MATCH
            if get(value, 0) > limit:
                return _CONSTRAINTS_NOT_MATCH
            return SUCCESS
        return one

    def filter_nodes(self, state: CycleState, pod: PodInfo,
                     snapshot: Snapshot) -> NodeSet | None:
        """The nodes Filter passes, from the snapshot's label index: every node but those
        of the domains over their limit. Only when every node has every topologyKey (then
        each node outside fails the same way) and the keys have few domains (zones, not
        hostnames); None otherwise, and Filter runs per node."""
        constraints: tuple[_FilterConstraint, ...] | None = state.get(PRE_FILTER_KEY)
        if not constraints:
            return None
        index = snapshot.node_index().labels
        n_nodes = len(snapshot.nodes)
        out = ALL_NODES
        for c in constraints:
            by_value = index.get(c.topology_key)
            if by_value is None or len(by_value) > _MAX_DOMAINS_FOR_SETS \
                    or sum(len(names) for names in by_value.values()) != n_nodes:
                return None
            counts, limit = c.counts, c.limit
            blocked = [names for value, names in by_value.items()
                       if counts.get(value, 0) > limit]
            if blocked:
                out = out.and_(NodeSet(blocked[0] if len(blocked) == 1
                                       else set().union(*blocked), True))
        return out

    def filter_rejection(self, state: CycleState, pod: PodInfo) -> Status | None:
        # filter_nodes names a set only when every node has every topologyKey.
        return _CONSTRAINTS_NOT_MATCH

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        constraints: tuple[_FilterConstraint, ...] = state.read(PRE_FILTER_KEY)
        labels = node.labels
        for c in constraints:
            value = labels.get(c.topology_key)
            if value is None:
                return _NODE_LABEL_NOT_MATCH
            if c.counts.get(value, 0) > c.limit:
                return _CONSTRAINTS_NOT_MATCH
        return SUCCESS


# filter_nodes: a topologyKey with more domains is left to Filter per node
_MAX_DOMAINS_FOR_SETS = 64
_CONSTRAINTS_NOT_MATCH = shared(Code.UNSCHEDULABLE, (ERR_REASON_CONSTRAINTS_NOT_MATCH,))
_NODE_LABEL_NOT_MATCH = Status.unresolvable(ERR_REASON_NODE_LABEL_NOT_MATCH)
