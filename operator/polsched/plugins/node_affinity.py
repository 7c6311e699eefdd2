"""NodeAffinity: spec.nodeSelector and required node affinity must match the node (filter);
matching preferred node affinity terms add their weights (scorer).

Copies kube-scheduler's nodeaffinity plugin (pkg/scheduler/framework/plugins/nodeaffinity/
node_affinity.go) and component-helpers' scheduling/corev1/nodeaffinity/nodeaffinity.go:
terms are ORed, a term's matchExpressions (node labels) and matchFields (only
metadata.name exists) are ANDed, an empty term matches nothing, a required term that does
not parse is skipped while a preferred term that does not parse is an error. Args:
addedAffinity (NodeAffinityArgs), which every pod must also satisfy / is scored by.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from polsched.framework import events as ev
from polsched.framework import names
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
    default_normalize,
)
from polsched.framework.registry import ArgsError, PluginSpec
from polsched.framework.selectors import (
    ALL_NODES,
    NO_NODES,
    NodeSet,
    Requirement,
    SelectorError,
    compile_requirements,
    parse_requirements,
    requirements_nodes,
)
from polsched.framework.status import SKIP, SUCCESS, Status
from polsched.framework.types import NodeIndex, NodeInfo, PodInfo, Snapshot

NAME = "NodeAffinity"

ERR_REASON_POD = "node(s) didn't match Pod's node affinity/selector"
ERR_REASON_ENFORCED = "node(s) didn't match scheduler-enforced node affinity"
ERR_REASON_CONFLICT = "pod affinity terms conflict"

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
# metav1.ObjectNameField: the only node field a matchFields requirement can name.
OBJECT_NAME_FIELD = "metadata.name"

_PRE_FILTER_KEY = "PreFilter" + NAME
_PRE_SCORE_KEY = "PreScore" + NAME
_PRE_SCORE_NODES_KEY = "PreScoreNodes" + NAME

_POD_MISMATCH = Status.unresolvable(ERR_REASON_POD)
_ENFORCED_MISMATCH = Status.unresolvable(ERR_REASON_ENFORCED)

# apimachinery validation.IsValidLabelValue
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")

FieldMatcher = Callable[[Mapping[str, str]], bool]


@dataclass(frozen=True, slots=True)
class Term:
    """A parsed NodeSelectorTerm; None for a part the term does not have."""

    labels: Callable[[Mapping[str, str]], bool] | None
    fields: FieldMatcher | None
    # The same requirements, structured, for nodes(): label requirements, and
    # (key, is In, value) field requirements.
    label_reqs: tuple[Requirement, ...] = ()
    field_reqs: tuple[tuple[str, bool, str], ...] = ()

    def nodes(self, index: NodeIndex) -> NodeSet:
        """The nodes this term matches, as matches() decides node by node (node names
        are never empty in a snapshot: the cache keys nodes by name)."""
        out = requirements_nodes(self.label_reqs, index.labels)
        for key, equal, value in self.field_reqs:
            if key != OBJECT_NAME_FIELD:  # no other field exists: In fails, NotIn passes
                out = out.and_(NO_NODES if equal else ALL_NODES)
            else:
                out = out.and_(NodeSet(frozenset((value,)), not equal))
        return out

    def matches(self, node: NodeInfo) -> bool:
        if self.labels is not None and not self.labels(node.labels):
            return False
        # Upstream skips matchFields for a node without a name (no fields to match).
        if self.fields is not None and node.name and not self.fields(
                {OBJECT_NAME_FIELD: node.name}):
            return False
        return True


def _path(base: str, child: str) -> str:
    return f"{base}.{child}" if base else child


def _compile_field_requirements(reqs: Any, path: str
                                ) -> tuple[FieldMatcher, tuple[tuple[str, bool, str], ...]]:
    """nodeSelectorRequirementsAsFieldSelector: In / NotIn with exactly one value each.
    Also returns them as (key, is In, value)."""
    if not isinstance(reqs, list):
        raise SelectorError(path, "must be a list")
    checks: list[tuple[str, bool, str]] = []
    for i, r in enumerate(reqs):
        rpath = f"{path}[{i}]"
        if not isinstance(r, Mapping):
            raise SelectorError(rpath, "must be an object with key, operator and values")
        key = r.get("key")
        if not isinstance(key, str) or not key:
            raise SelectorError(_path(rpath, "key"), "must be a non-empty string")
        op = r.get("operator")
        if op not in ("In", "NotIn"):
            raise SelectorError(_path(rpath, "operator"),
                                f"unsupported operator {op!r}: must be one of In, NotIn")
        values = r.get("values") or []
        if not isinstance(values, list) or len(values) != 1 or not isinstance(values[0], str):
            raise SelectorError(_path(rpath, "values"), "must have one element")
        checks.append((key, op == "In", values[0]))
    frozen = tuple(checks)

    def match(fields: Mapping[str, str]) -> bool:
        for key, equal, value in frozen:
            if (fields.get(key, "") == value) is not equal:
                return False
        return True
    return match, frozen


def _check_label_syntax(reqs: Any, path: str) -> None:
    """labels.NewRequirement's syntax checks, which compile_requirements leaves out: keys
    are qualified names and values are label values. A pod's term failing them matches no
    node, as upstream."""
    if not isinstance(reqs, list):
        return
    for i, r in enumerate(reqs):
        if not isinstance(r, Mapping):
            continue
        key = r.get("key")
        if isinstance(key, str) and key:
            errs = names.qualified_name(key)
            if errs:
                raise SelectorError(f"{path}[{i}].key",
                                    f"invalid value {key!r}: {'; '.join(errs)}")
        values = r.get("values")
        for v in values if isinstance(values, list) else ():
            if isinstance(v, str) and (len(v) > 63 or not _LABEL_VALUE.match(v)):
                raise SelectorError(
                    f"{path}[{i}].values", f"invalid value {v!r}: a valid label must be an "
                    "empty string or at most 63 alphanumeric characters, '-', '_' or '.', "
                    "starting and ending with an alphanumeric character")


def compile_term(term: Any, path: str) -> Term | None:
    """One NodeSelectorTerm; None when it is empty (it then matches nothing and is dropped).
    Raises SelectorError naming the field."""
    if not isinstance(term, Mapping):
        raise SelectorError(path, "must be an object with matchExpressions and/or matchFields")
    exprs = term.get("matchExpressions")
    fields = term.get("matchFields")
    if not exprs and not fields:
        return None
    label_matcher = None
    label_reqs: tuple[Requirement, ...] = ()
    if exprs:
        epath = _path(path, "matchExpressions")
        label_matcher = compile_requirements(exprs, epath)
        _check_label_syntax(exprs, epath)
        label_reqs = parse_requirements(exprs)
    field_matcher = None
    field_reqs: tuple[tuple[str, bool, str], ...] = ()
    if fields:
        field_matcher, field_reqs = _compile_field_requirements(fields,
                                                                _path(path, "matchFields"))
    return Term(label_matcher, field_matcher, label_reqs, field_reqs)


def compile_node_selector(selector: Any, path: str, lazy: bool) -> tuple[Term, ...]:
    """A v1.NodeSelector's terms. With lazy (a pod's own affinity, as upstream's
    LazyErrorNodeSelector) a term that does not parse is dropped: it matches no node.
    Without lazy (our args) it raises SelectorError."""
    if not isinstance(selector, Mapping):
        raise SelectorError(path, "must be an object with nodeSelectorTerms")
    raw = selector.get("nodeSelectorTerms") or []
    tpath = _path(path, "nodeSelectorTerms")
    if not isinstance(raw, list):
        raise SelectorError(tpath, "must be a list")
    terms: list[Term] = []
    for i, t in enumerate(raw):
        try:
            term = compile_term(t, f"{tpath}[{i}]")
        except SelectorError:
            if lazy:
                continue
            raise
        if term is not None:
            terms.append(term)
    return tuple(terms)


def compile_preferred(raw: Any, path: str) -> tuple[tuple[int, Term], ...]:
    """PreferredSchedulingTerms: (weight, term), dropping zero weights and empty terms.
    Raises SelectorError naming the field."""
    if not isinstance(raw, list):
        raise SelectorError(path, "must be a list")
    out: list[tuple[int, Term]] = []
    for i, p in enumerate(raw):
        ppath = f"{path}[{i}]"
        if not isinstance(p, Mapping):
            raise SelectorError(ppath, "must be an object with weight and preference")
        weight = p.get("weight") or 0
        if isinstance(weight, bool) or not isinstance(weight, int):
            raise SelectorError(_path(ppath, "weight"), "must be an integer")
        if weight == 0:
            continue
        term = compile_term(p.get("preference") or {}, _path(ppath, "preference"))
        if term is not None:
            out.append((weight, term))
    return tuple(out)


def _matches_all(terms: Sequence[Term], node: NodeInfo) -> bool:
    """A NodeSelector: any term matches; no term at all matches nothing."""
    for term in terms:
        if term.matches(node):
            return True
    return False


def _terms_nodes(terms: Sequence[Term], index: NodeIndex) -> NodeSet:
    """The nodes _matches_all passes."""
    out = NO_NODES
    for term in terms:
        out = out.or_(term.nodes(index))
    return out


def _preferred_score(terms: Sequence[tuple[int, Term]], node: NodeInfo) -> int:
    return sum(weight for weight, term in terms if term.matches(node))


@dataclass(frozen=True, slots=True)
class RequiredNodeAffinity:
    """nodeaffinity.RequiredNodeAffinity: nodeSelector labels AND the required terms (None
    when the pod has no required node affinity)."""

    node_selector: tuple[tuple[str, str], ...]
    terms: tuple[Term, ...] | None

    @classmethod
    def of(cls, pod: PodInfo) -> RequiredNodeAffinity:
        required = (pod.affinity.get("nodeAffinity") or {}).get(REQUIRED)
        terms = None
        if required is not None:
            try:
                terms = compile_node_selector(required, "", lazy=True)
            except SelectorError:
                terms = ()
        return cls(tuple(pod.node_selector.items()), terms)

    def matches(self, node: NodeInfo) -> bool:
        labels = node.labels
        for key, value in self.node_selector:
            if labels.get(key) != value:
                return False
        return self.terms is None or _matches_all(self.terms, node)

    def nodes(self, index: NodeIndex) -> NodeSet:
        """The nodes matches() passes."""
        out = ALL_NODES
        for key, value in self.node_selector:
            names = index.labels.get(key, {}).get(value)
            out = out.and_(NodeSet(names) if names is not None else NO_NODES)
        if self.terms is not None:
            out = out.and_(_terms_nodes(self.terms, index))
        return out


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


class NodeAffinity(PreFilterPlugin, FilterPlugin, NodeSetFilter, PreScorePlugin, ScorePlugin,
                   ScoreExtensions, ev.EnqueueExtensions):
    NAME = NAME

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
        if self.added_required is not None and not _matches_all(self.added_required, node):
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
            out = out.and_(_terms_nodes(self.added_required, index))
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
        return _preferred_score(self._terms(state, pod), node)

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
        return [_preferred_score(terms, n) for n in nodes]

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
        if self.added_required is not None and not _matches_all(self.added_required, node):
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
