"""Node selectors and required node affinity, parsed once: the one parser of a
v1.NodeSelector that NodeAffinity, PodTopologySpread and the volume plugins (a PV's
nodeAffinity) share.

Follows component-helpers' scheduling/corev1/nodeaffinity/nodeaffinity.go (v0.37.1):
terms are ORed; a term's matchExpressions (node labels, labels.NewRequirement's syntax
checks included) and matchFields (nodeSelectorRequirementsAsFieldSelector: In or NotIn
with one value; only metadata.name exists on a node) are ANDed; an empty term matches
nothing; a node without a name (a PV's check, volume.CheckNodeAffinity) skips matchFields.
A pod's own selector is lazy (LazyErrorNodeSelector): a term that does not parse matches
nothing. Args are strict (NewNodeSelector): a term that does not parse is an error.
Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from polsched.framework import names
from polsched.framework.selectors import (
    ALL_NODES,
    NO_NODES,
    Labels,
    NodeSet,
    Requirement,
    SelectorError,
    compile_requirements,
    parse_requirements,
    requirements_nodes,
)
from polsched.framework.types import NodeIndex, NodeInfo, PodInfo

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
# metav1.ObjectNameField: the only node field a matchFields requirement can name.
OBJECT_NAME_FIELD = "metadata.name"

# apimachinery validation.IsValidLabelValue
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")

FieldMatcher = Callable[[Mapping[str, str]], bool]
LabelPredicate = Callable[[Labels], bool]


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

    def matches_labels(self, labels: Labels) -> bool:
        """matches() for a node that has labels and no name (matchFields skipped)."""
        return self.labels is None or self.labels(labels)


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
    """A v1.NodeSelector's terms. With lazy (a pod's or a PV's, as upstream's
    LazyErrorNodeSelector) a term that does not parse is dropped: it matches no node.
    Without lazy (our args, NewNodeSelector) it raises SelectorError."""
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


def compile_lazy(selector: Any) -> tuple[Term, ...]:
    """compile_node_selector(lazy=True) that never raises: a selector that is not even a
    NodeSelector matches nothing."""
    try:
        return compile_node_selector(selector, "", lazy=True)
    except SelectorError:
        return ()


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


def matches_any(terms: Sequence[Term], node: NodeInfo) -> bool:
    """NodeSelector.Match: any term matches; no term at all matches nothing."""
    for term in terms:
        if term.matches(node):
            return True
    return False


def labels_match_any(terms: Sequence[Term], labels: Labels) -> bool:
    """matches_any for a node that has labels and no name (volume.CheckNodeAffinity)."""
    for term in terms:
        if term.matches_labels(labels):
            return True
    return False


def terms_nodes(terms: Sequence[Term], index: NodeIndex) -> NodeSet:
    """The nodes matches_any passes."""
    out = NO_NODES
    for term in terms:
        out = out.or_(term.nodes(index))
    return out


def preferred_score(terms: Sequence[tuple[int, Term]], node: NodeInfo) -> int:
    """PreferredSchedulingTerms.Score: the weights of the terms the node matches."""
    return sum(weight for weight, term in terms if term.matches(node))


@dataclass(frozen=True, slots=True)
class RequiredNodeAffinity:
    """nodeaffinity.RequiredNodeAffinity (GetRequiredNodeAffinity): the pod's nodeSelector
    labels AND its required terms (None when the pod has no required node affinity), the
    terms lazy as upstream's Match ignores their parse errors."""

    node_selector: tuple[tuple[str, str], ...]
    terms: tuple[Term, ...] | None

    @classmethod
    def of(cls, pod: PodInfo) -> RequiredNodeAffinity:
        required = (pod.affinity.get("nodeAffinity") or {}).get(REQUIRED)
        terms = None if required is None else compile_lazy(required)
        return cls(tuple(pod.node_selector.items()), terms)

    @property
    def empty(self) -> bool:
        """Whether it matches every node (no nodeSelector, no required affinity)."""
        return not self.node_selector and self.terms is None

    def matches(self, node: NodeInfo) -> bool:
        labels = node.labels
        for key, value in self.node_selector:
            if labels.get(key) != value:
                return False
        return self.terms is None or matches_any(self.terms, node)

    def nodes(self, index: NodeIndex) -> NodeSet:
        """The nodes matches() passes."""
        out = ALL_NODES
        for key, value in self.node_selector:
            names_ = index.labels.get(key, {}).get(value)
            out = out.and_(NodeSet(names_) if names_ is not None else NO_NODES)
        if self.terms is not None:
            out = out.and_(terms_nodes(self.terms, index))
        return out

    def label_only(self) -> tuple[tuple[str, ...], LabelPredicate] | None:
        """matches() as a predicate on a node's labels alone, with the label keys it reads
        (it gives the same answer on any labels that agree on those keys); None when a
        term has matchFields (it reads the node's name)."""
        keys = {k for k, _ in self.node_selector}
        label_terms: list[LabelPredicate] | None = None
        if self.terms is not None:
            label_terms = []
            for term in self.terms:
                if term.fields is not None:
                    return None
                keys.update(key for key, _op, _values in term.label_reqs)
                label_terms.append(term.labels or _match_all)
        selector = self.node_selector

        def match(labels: Labels) -> bool:
            for k, v in selector:
                if labels.get(k) != v:
                    return False
            if label_terms is None:
                return True
            for expr_match in label_terms:
                if expr_match(labels):
                    return True
            return False
        return tuple(sorted(keys)), match


def _match_all(labels: Labels) -> bool:
    return True
