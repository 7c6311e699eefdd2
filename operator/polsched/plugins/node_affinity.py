"""NodeAffinity: spec.nodeSelector and required node affinity must match the node (filter);
matching preferred node affinity terms add their weights (scorer).

Copies kube-scheduler's nodeaffinity plugin (pkg/scheduler/framework/plugins/nodeaffinity/
node_affinity.go) and component-helpers' scheduling/corev1/nodeaffinity/nodeaffinity.go:
terms are ORed, a term's matchExpressions (node labels) and matchFields (only
metadata.name exists) are ANDed, an empty term matches nothing, a required term that does
not parse is skipped while a preferred term that does not parse is an error (the parser,
shared with PodTopologySpread and the volume plugins, is framework.nodeaffinity). Args:
addedAffinity (NodeAffinityArgs), which every pod must also satisfy / is scored by.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from polsched.framework import events as ev
from polsched.framework import signers
from polsched.framework.cycle_state import CycleState
from polsched.framework.interfaces import (
    FilterPlugin,
    Handle,
    NodeSetFilter,
    PreFilterPlugin,
    PreFilterResult,
    PreScorePlugin,
    ScoreExtensions,
    ScorePlugin,
    SignFragment,
    SignPlugin,
    default_normalize,
)
from polsched.framework.nodeaffinity import (
    OBJECT_NAME_FIELD,
    PREFERRED,
    REQUIRED,
    RequiredNodeAffinity,
    Term,
    compile_node_selector,
    compile_preferred,
    matches_any,
    preferred_score,
    terms_nodes,
)
from polsched.framework.registry import ArgsError, PluginSpec
from polsched.framework.selectors import NodeSet, SelectorError
from polsched.framework.status import SKIP, SUCCESS, Code, Status, shared
from polsched.framework.types import NodeInfo, PodInfo, Snapshot

NAME = "NodeAffinity"

ERR_REASON_POD = "node(s) didn't match Pod's node affinity/selector"
ERR_REASON_ENFORCED = "node(s) didn't match scheduler-enforced node affinity"
ERR_REASON_CONFLICT = "pod affinity terms conflict"

_PRE_FILTER_KEY = "PreFilter" + NAME
_PRE_SCORE_KEY = "PreScore" + NAME
_PRE_SCORE_NODES_KEY = "PreScoreNodes" + NAME

_POD_MISMATCH = shared(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (ERR_REASON_POD,))
_ENFORCED_MISMATCH = Status.unresolvable(ERR_REASON_ENFORCED)


def _named_nodes(required: Any) -> frozenset[str] | None:
    """PreFilter's node-name shortcut (NodeAffinity.PreFilter): when every required term
    names nodes with matchFields metadata.name In, the union of those names (an empty set:
    the terms conflict, no node can match); None when some term names no nodes (the terms
    are ORed, so every node may match)."""
    terms = required.get("nodeSelectorTerms") if isinstance(required, Mapping) else None
    if not isinstance(terms, list) or not terms:
        return None
    union: set[str] = set()
    for t in terms:
        names: set[str] | None = None
        fields = t.get("matchFields") if isinstance(t, Mapping) else None
        for r in fields if isinstance(fields, list) else ():
            if (isinstance(r, Mapping) and r.get("key") == OBJECT_NAME_FIELD
                    and r.get("operator") == "In"):
                values = {v for v in r.get("values") or () if isinstance(v, str)}
                names = values if names is None else names & values
        if names is None:
            return None
        union |= names
    return frozenset(union)


class NodeAffinity(SignPlugin,
                   PreFilterPlugin, FilterPlugin, NodeSetFilter, PreScorePlugin, ScorePlugin,
                   ScoreExtensions, ev.EnqueueExtensions):
    NAME = NAME

    def sign_pod(self, pod: PodInfo) -> Sequence[SignFragment] | None:
        """SignPod (OpportunisticBatching): what of the pod this plugin reads."""
        return [(signers.NODE_AFFINITY, signers.node_affinity(pod)),
                (signers.NODE_SELECTOR, dict(pod.node_selector))]

    def __init__(self, added_required: tuple[Term, ...] | None,
                 added_preferred: tuple[tuple[int, Term], ...]) -> None:
        self.added_required = added_required
        self.added_preferred = added_preferred

    # -- filter ------------------------------------------------------------------------
    def pre_filter(self, state: CycleState, pod: PodInfo,
                   snapshot: Snapshot) -> Status | PreFilterResult:
        required = (pod.affinity.get("nodeAffinity") or {}).get(REQUIRED)
        if required is None and self.added_required is None and not pod.node_selector:
            return SKIP
        state.write(_PRE_FILTER_KEY, RequiredNodeAffinity.of(pod))
        named = _named_nodes(required) if required is not None else None
        if named is None:
            return SUCCESS
        if not named:
            return Status.unresolvable(ERR_REASON_CONFLICT)
        # Only the named nodes are filtered; the others are "didn't satisfy plugin(s)".
        return PreFilterResult(named)

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        if self.added_required is not None and not matches_any(self.added_required, node):
            return _ENFORCED_MISMATCH
        required: RequiredNodeAffinity | None = state.get(_PRE_FILTER_KEY)
        if required is None:
            required = RequiredNodeAffinity.of(pod)
        return SUCCESS if required.matches(node) else _POD_MISMATCH

    def filter_nodes(self, state: CycleState, pod: PodInfo,
                     snapshot: Snapshot) -> NodeSet | None:
        required: RequiredNodeAffinity | None = state.get(_PRE_FILTER_KEY)
        if required is None:
            return None
        index = snapshot.node_index()
        out = required.nodes(index)
        if self.added_required is not None:
            out = out.and_(terms_nodes(self.added_required, index))
        return out

    def filter_rejection(self, state: CycleState, pod: PodInfo) -> Status | None:
        # With added affinity, a node may fail either, with different reasons.
        return _POD_MISMATCH if self.added_required is None else None

    # -- score -------------------------------------------------------------------------
    @staticmethod
    def _pod_preferred(pod: PodInfo) -> tuple[tuple[int, Term], ...]:
        raw = (pod.affinity.get("nodeAffinity") or {}).get(PREFERRED)
        if raw is None:
            return ()
        # Paths relative to the list, as nodeaffinity.NewPreferredSchedulingTerms words its
        # errors ("[0].matchExpressions[0].values..."; our wording after the path differs).
        return compile_preferred(raw, "")

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo],
                  snapshot: Snapshot) -> Status:
        try:
            preferred = self._pod_preferred(pod)
        except SelectorError as err:
            return Status.error(str(err))
        if not preferred and not self.added_preferred:
            return SKIP
        terms = self.added_preferred + preferred
        state.write(_PRE_SCORE_KEY, terms)
        # Each term's nodes, from the snapshot's label index: score_nodes then sums set
        # memberships instead of matching every term against every node.
        index = snapshot.node_index()
        state.write(_PRE_SCORE_NODES_KEY, [(w, term.nodes(index)) for w, term in terms])
        return SUCCESS

    def _terms(self, state: CycleState, pod: PodInfo) -> tuple[tuple[int, Term], ...]:
        terms: tuple[tuple[int, Term], ...] | None = state.get(_PRE_SCORE_KEY)
        if terms is None:
            terms = self.added_preferred + self._pod_preferred(pod)
        return terms

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        return preferred_score(self._terms(state, pod), node)

    def score_nodes(self, state: CycleState, pod: PodInfo,
                    nodes: Sequence[NodeInfo]) -> list[int] | Status:
        node_sets: list[tuple[int, NodeSet]] | None = state.get(_PRE_SCORE_NODES_KEY)
        if node_sets is not None:
            # The pipeline scores nodes of the snapshot PreScore indexed.
            names = [n.name for n in nodes]
            out = [0] * len(names)
            for w, ns in node_sets:
                hit = ns.names
                if ns.complement:
                    out = [o if x in hit else o + w for o, x in zip(out, names, strict=True)]
                else:
                    out = [o + w if x in hit else o for o, x in zip(out, names, strict=True)]
            return out
        try:
            terms = self._terms(state, pod)
        except SelectorError as err:
            return Status.error(str(err))
        return [preferred_score(terms, n) for n in nodes]

    def normalize_score(self, state: CycleState, pod: PodInfo, scores: list[int]) -> Status:
        return default_normalize(scores)

    # -- queueing hints ------------------------------------------------------------------
    def events_to_register(self) -> tuple[ev.ClusterEventWithHint, ...]:
        r, a = ev.Resource, ev.ActionType
        return (ev.event(r.NODE, a.ADD | a.UPDATE_NODE_LABEL, self._after_node_change),)

    def _after_node_change(self, pod: PodInfo, old: Any, new: Any) -> ev.QueueingHint:
        """isSchedulableAfterNodeChange: the node matches the pod's required affinity now
        and did not before."""
        node = ev.node_of(new)
        if self.added_required is not None and not matches_any(self.added_required, node):
            return ev.QUEUE_SKIP
        required = RequiredNodeAffinity.of(pod)
        if not required.matches(node):
            return ev.QUEUE_SKIP
        if old is None:
            return ev.QUEUE
        return ev.QUEUE_SKIP if required.matches(ev.node_of(old)) else ev.QUEUE


_ARGS_FIELDS = ("addedAffinity",)
_ADDED_FIELDS = (REQUIRED, PREFERRED)


def new(args: Mapping[str, Any] | None, handle: Handle) -> NodeAffinity:
    """NodeAffinityArgs, validated as ValidateNodeAffinityArgs does."""
    args = args or {}
    if not isinstance(args, Mapping):
        raise ArgsError("", "must be an object with addedAffinity")
    for key in args:
        if key not in _ARGS_FIELDS:
            raise ArgsError(str(key), "unknown field; NodeAffinity args have addedAffinity")
    added = args.get("addedAffinity")
    if added is None:
        return NodeAffinity(None, ())
    if not isinstance(added, Mapping):
        raise ArgsError("addedAffinity", f"must be an object with {REQUIRED} and/or {PREFERRED}")
    for key in added:
        if key not in _ADDED_FIELDS:
            raise ArgsError(f"addedAffinity.{key}",
                            f"unknown field; addedAffinity has {REQUIRED} and {PREFERRED}")
    required: tuple[Term, ...] | None = None
    preferred: tuple[tuple[int, Term], ...] = ()
    try:
        if added.get(REQUIRED) is not None:
            required = compile_node_selector(added[REQUIRED], f"addedAffinity.{REQUIRED}",
                                             lazy=False)
        if added.get(PREFERRED):
            preferred = compile_preferred(added[PREFERRED], f"addedAffinity.{PREFERRED}")
    except SelectorError as err:
        raise ArgsError(err.path, err.message) from err
    return NodeAffinity(required, preferred)


SPEC = PluginSpec(name=NAME, filter=new, score=new)
