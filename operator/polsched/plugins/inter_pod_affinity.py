"""InterPodAffinity: required pod (anti-)affinity as a filter, preferred terms as a scorer.

Reimplements kube-scheduler's interpodaffinity plugin (pkg/scheduler/framework/plugins/
interpodaffinity/{filtering,scoring,plugin}.go, v1.36). The v1.36 hostname fast path is an
optimisation with the same outcome and is not copied.

PreFilter / PreScore walk the snapshot once per pod and reduce it to counts per topology
pair (topologyKey, value); Filter and Score per node are dict lookups on the node's labels.
The counts are kept across cycles per what they depend on (node_memo.Aggregate): the next
pod of the same workload only rescans the nodes that changed since, not every node.

namespaceSelector: kube-scheduler resolves it with the namespace lister of its Handle; here
the namespace labels come from ``Handle.listers.namespace_labels`` (namespace name ->
labels), which the cluster cache keeps in step with its watch of namespaces. A namespace
the listers do not know matches no non-empty namespaceSelector, as upstream.

matchLabelKeys / mismatchLabelKeys: the API server merges them into labelSelector when the
pod is created (pkg/registry/core/pod/strategy.go applyMatchLabelKeysAndMismatchLabelKeys);
we merge them again when parsing a term, which is a no-op for pods the API server already
mutated and makes pods built elsewhere (tests, older servers) behave the same.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from polsched.framework import events as ev
from polsched.framework import signers
from polsched.framework.cycle_state import Budget, CycleState
from polsched.framework.interfaces import (
    MAX_NODE_SCORE,
    FilterPlugin,
    Handle,
    PreFilterExtensions,
    PreFilterPlugin,
    PreScorePlugin,
    ScoreExtensions,
    ScorePlugin,
    SignFragment,
    SignPlugin,
)
from polsched.framework.registry import ArgsError, PluginSpec
from polsched.framework.selectors import Matcher, SelectorError, compile_label_selector
from polsched.framework.status import SKIP, SUCCESS, Status
from polsched.framework.types import NodeInfo, PodInfo, Snapshot
from polsched.plugins.node_memo import Aggregate, AggregateMemo, Share

NAME = "InterPodAffinity"

# filtering.go
ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH = (
    "node(s) didn't satisfy existing pods anti-affinity rules")
ERR_REASON_AFFINITY_RULES_NOT_MATCH = "node(s) didn't match pod affinity rules"
ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH = "node(s) didn't match pod anti-affinity rules"

_PRE_FILTER_KEY = "PreFilter" + NAME
_PRE_SCORE_KEY = "PreScore" + NAME

DEFAULT_ARGS: Mapping[str, Any] = {
    "hardPodAffinityWeight": 1,
    "ignorePreferredTermsOfExistingPods": False,
}
# apis/config/validation: ValidateInterPodAffinityArgs
_MAX_HARD_POD_AFFINITY_WEIGHT = 100

NamespaceLabels = Mapping[str, Mapping[str, str]]
TopologyPair = tuple[str, str]
# topologyKey -> topology value -> count
Counts = dict[str, dict[str, int]]
_NO_LABELS: Mapping[str, str] = {}
_NO_COUNTS: Mapping[str, int] = {}


# -- affinity terms -----------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class AffinityTerm:
    """A parsed v1.PodAffinityTerm (framework.AffinityTerm), with its weight when preferred."""

    selector: Matcher
    topology_key: str
    namespaces: frozenset[str]
    # namespaceSelector {}: every namespace.
    all_namespaces: bool
    # A non-empty namespaceSelector, matched against namespace labels; None when absent.
    namespace_selector: Matcher | None
    weight: int = 0

    def matches(self, pod: PodInfo, ns_labels: Mapping[str, str] | None) -> bool:
        """AffinityTerm.Matches: the pod's namespace is selected and its labels match.
        `ns_labels` are the labels of the pod's namespace, None when unknown."""
        if (self.all_namespaces or pod.namespace in self.namespaces
                or (self.namespace_selector is not None and ns_labels is not None
                    and self.namespace_selector(ns_labels))):
            return self.selector(pod.labels)
        return False


def _merge_label_keys(selector: Any, term: Mapping[str, Any],
                      pod_labels: Mapping[str, str]) -> Any:
    """matchLabelKeys adds `key In (value)`, mismatchLabelKeys `key NotIn (value)`, for keys
    the owning pod has; a null labelSelector stays null (it selects nothing anyway)."""
    match_keys = term.get("matchLabelKeys") or ()
    mismatch_keys = term.get("mismatchLabelKeys") or ()
    if selector is None or not isinstance(selector, Mapping) or not (match_keys or mismatch_keys):
        return selector
    exprs = list(selector.get("matchExpressions") or ())
    for keys, op in ((match_keys, "In"), (mismatch_keys, "NotIn")):
        for key in keys:
            if isinstance(key, str) and key in pod_labels:
                exprs.append({"key": key, "operator": op, "values": [pod_labels[key]]})
    return {**selector, "matchExpressions": exprs}


def _parse_term(pod: PodInfo, term: Any, weight: int, path: str) -> AffinityTerm:
    if not isinstance(term, Mapping):
        raise SelectorError(path, "must be an object")
    selector = _merge_label_keys(term.get("labelSelector"), term, pod.labels)
    matcher = compile_label_selector(selector, f"{path}.labelSelector")
    namespaces = frozenset(term.get("namespaces") or ())
    ns_sel = term.get("namespaceSelector")
    all_namespaces = False
    ns_matcher: Matcher | None = None
    if ns_sel is None:
        # getNamespacesFromPodAffinityTerm: neither namespaces nor a selector means the
        # pod's own namespace.
        if not namespaces:
            namespaces = frozenset((pod.namespace,))
    elif isinstance(ns_sel, Mapping) and not ns_sel.get("matchLabels") \
            and not ns_sel.get("matchExpressions"):
        all_namespaces = True
    else:
        ns_matcher = compile_label_selector(ns_sel, f"{path}.namespaceSelector")
    return AffinityTerm(matcher, str(term.get("topologyKey") or ""), namespaces,
                        all_namespaces, ns_matcher, weight)


def _parse_terms(pod: PodInfo, kind: str, when: str) -> tuple[AffinityTerm, ...]:
    """One list of a pod's terms, e.g. podAntiAffinity.requiredDuringScheduling...; raises
    SelectorError naming the field."""
    section = pod.affinity.get(kind) or {}
    raw = section.get(when) or ()
    base = f"spec.affinity.{kind}.{when}"
    terms: list[AffinityTerm] = []
    for i, item in enumerate(raw):
        path = f"{base}[{i}]"
        if when.startswith("preferred"):
            if not isinstance(item, Mapping):
                raise SelectorError(path, "must be an object")
            weight = item.get("weight") or 0
            terms.append(_parse_term(pod, item.get("podAffinityTerm"), int(weight),
                                     f"{path}.podAffinityTerm"))
        else:
            terms.append(_parse_term(pod, item, 0, path))
    return tuple(terms)


_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
_PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


@dataclass(frozen=True, slots=True)
class PodTerms:
    """All affinity terms of one pod (framework.PodInfo's four term lists)."""

    required_affinity: tuple[AffinityTerm, ...] = ()
    required_anti_affinity: tuple[AffinityTerm, ...] = ()
    preferred_affinity: tuple[AffinityTerm, ...] = ()
    preferred_anti_affinity: tuple[AffinityTerm, ...] = ()

    @staticmethod
    def parse(pod: PodInfo, strict: bool) -> PodTerms:
        """strict: raise SelectorError on the first malformed term (the incoming pod);
        otherwise a malformed list is dropped, as framework.NewPodInfo leaves it empty."""
        lists: list[tuple[AffinityTerm, ...]] = []
        for kind, when in (("podAffinity", _REQUIRED), ("podAntiAffinity", _REQUIRED),
                           ("podAffinity", _PREFERRED), ("podAntiAffinity", _PREFERRED)):
            try:
                lists.append(_parse_terms(pod, kind, when))
            except (SelectorError, TypeError, ValueError):
                if strict:
                    raise
                lists.append(())
        return PodTerms(*lists)


_EMPTY_TERMS = PodTerms()


class _TermsCache:
    """Parsed terms of existing pods, reused while the PodInfo object is the same (the
    cache builds a new PodInfo for every pod version). `strict`: parsed as an incoming
    pod's (a parse error is raised, never kept): the queueing hints' parked pods."""

    __slots__ = ("_entries", "_limit", "_strict")

    def __init__(self, strict: bool = False) -> None:
        self._entries: dict[str, tuple[PodInfo, PodTerms]] = {}
        self._limit = 4096
        self._strict = strict

    def get(self, pod: PodInfo) -> PodTerms:
        if not pod.has_affinity:
            return _EMPTY_TERMS
        hit = self._entries.get(pod.key)
        if hit is not None and hit[0] is pod:
            return hit[1]
        terms = PodTerms.parse(pod, strict=self._strict)
        if len(self._entries) >= self._limit:
            # Entries of deleted pods are never looked up again: start over rather than
            # track deletions; live pods are re-parsed once.
            self._entries.clear()
        self._entries[pod.key] = (pod, terms)
        return terms

    def grow_to(self, live: int) -> None:
        self._limit = max(self._limit, 2 * live)


class _IncomingTerms:
    """PodTerms.parse(pod, strict=True) for incoming pods, reused by pods of the same shape:
    the terms depend only on the pod's namespace, its podAffinity and podAntiAffinity as
    written, and its labels (matchLabelKeys). A parse error is raised, never kept."""

    __slots__ = ("_entries", "_last")

    def __init__(self) -> None:
        self._entries: dict[tuple[str, str, tuple[tuple[str, str], ...]], PodTerms] = {}
        self._last: tuple[PodInfo | None, PodTerms] = (None, _EMPTY_TERMS)

    def get(self, pod: PodInfo) -> PodTerms:
        last = self._last
        if last[0] is pod:
            return last[1]
        affinity = pod.affinity
        sections = (affinity.get("podAffinity"), affinity.get("podAntiAffinity"))
        if sections == (None, None):
            terms = _EMPTY_TERMS
        else:
            key = (pod.namespace, json.dumps(sections, sort_keys=True, default=str),
                   tuple(sorted(pod.labels.items())))
            hit = self._entries.get(key)
            if hit is None:
                hit = PodTerms.parse(pod, strict=True)
                if len(self._entries) >= 256:
                    self._entries.clear()
                self._entries[key] = hit
            terms = hit
        self._last = (pod, terms)
        return terms


def _namespace_lookup(handle: Handle) -> NamespaceLabels:
    # The listers' live view (the cache updates it in place as namespaces change).
    return handle.listers.namespace_labels


# -- args -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class InterPodAffinityArgs:
    hard_pod_affinity_weight: int = 1
    ignore_preferred_terms_of_existing_pods: bool = False


def parse_args(args: Mapping[str, Any] | None) -> InterPodAffinityArgs:
    """InterPodAffinityArgs (KubeSchedulerConfiguration v1), defaulted and validated."""
    if not args:
        args = DEFAULT_ARGS
    if not isinstance(args, Mapping):
        raise ArgsError("", "must be an object with hardPodAffinityWeight and/or "
                            "ignorePreferredTermsOfExistingPods")
    for key in args:
        if key not in DEFAULT_ARGS:
            raise ArgsError(str(key), "unknown field: InterPodAffinity takes hardPodAffinityWeight "
                                      "and ignorePreferredTermsOfExistingPods")
    weight = args.get("hardPodAffinityWeight", DEFAULT_ARGS["hardPodAffinityWeight"])
    if isinstance(weight, bool) or not isinstance(weight, int) \
            or not 0 <= weight <= _MAX_HARD_POD_AFFINITY_WEIGHT:
        raise ArgsError("hardPodAffinityWeight",
                        f"must be an integer in [0-{_MAX_HARD_POD_AFFINITY_WEIGHT}], "
                        f"got {weight!r}")
    ignore = args.get("ignorePreferredTermsOfExistingPods", False)
    if not isinstance(ignore, bool):
        raise ArgsError("ignorePreferredTermsOfExistingPods",
                        f"must be true or false, got {ignore!r}")
    return InterPodAffinityArgs(weight, ignore)


# -- filter ---------------------------------------------------------------------------------

@dataclass(slots=True)
class _FilterState:
    affinity_terms: tuple[AffinityTerm, ...]
    anti_affinity_terms: tuple[AffinityTerm, ...]
    # Counts per topology pair, as topologyKey -> value -> count (a key only while it has
    # values; an entry only while non-zero):
    # existing pods matching ALL the incoming pod's affinity terms
    affinity_counts: Counts
    # existing pods matching each incoming anti-affinity term
    anti_affinity_counts: Counts
    # existing pods whose required anti-affinity terms match the incoming pod
    existing_anti_affinity_counts: Counts
    # satisfyPodAffinity's escape hatch: no pod matches anywhere and the pod matches its
    # own affinity terms, so the first pod of a group with self-affinity can land.
    self_affinity_ok: bool
    # What Filter checks after the affinity terms, in order: a node whose value of
    # topologyKey has a count > 0 fails with the status (anti-affinity terms first,
    # then existing pods' anti-affinity).
    checks: tuple[tuple[str, Mapping[str, int], Status], ...] = ()


def _filter_state(affinity: tuple[AffinityTerm, ...], anti: tuple[AffinityTerm, ...],
                  affinity_counts: Counts, anti_counts: Counts, existing: Counts,
                  self_ok: bool) -> _FilterState:
    checks: list[tuple[str, Mapping[str, int], Status]] = []
    for t in anti:
        by_value = anti_counts.get(t.topology_key)
        if by_value:
            checks.append((t.topology_key, by_value, _ANTI_AFFINITY_NOT_MATCH))
    for key, by_value in existing.items():
        if by_value:
            checks.append((key, by_value, _EXISTING_ANTI_AFFINITY_NOT_MATCH))
    return _FilterState(affinity, anti, affinity_counts, anti_counts, existing, self_ok,
                        tuple(checks))


def _required_signature(pod: PodInfo) -> str:
    """What the incoming pod's required terms are made of: the terms as written and the
    pod's values of their matchLabelKeys / mismatchLabelKeys."""
    required = [(pod.affinity.get(kind) or {}).get(_REQUIRED) or []
                for kind in ("podAffinity", "podAntiAffinity")]
    keys = sorted({k for terms in required for t in terms if isinstance(t, Mapping)
                   for k in (*(t.get("matchLabelKeys") or ()), *(t.get("mismatchLabelKeys") or ()))
                   if isinstance(k, str)})
    return json.dumps([required, [(k, pod.labels.get(k)) for k in keys]], sort_keys=True,
                      default=str)


def _add(found: dict[tuple[Hashable, str], int], group: Hashable, node: NodeInfo,
         key: str) -> None:
    value = node.labels.get(key)
    if value is not None:
        slot = (group, value)
        found[slot] = found.get(slot, 0) + 1


def _entries(found: dict[tuple[Hashable, str], int]) -> Share:
    return tuple((group, value, n) for (group, value), n in found.items())


def _update_count(counts: Counts, node: NodeInfo, key: str, delta: int) -> None:
    """topologyToMatchedTermCount.update: an entry down to zero is deleted. `counts` is the
    what-if's own copy, but its inner dicts are copied before they change."""
    value = node.labels.get(key)
    if value is not None:
        by_value = dict(counts.get(key) or ())
        n = by_value.get(value, 0) + delta
        if n:
            by_value[value] = n
        else:
            by_value.pop(value, None)
        if by_value:
            counts[key] = by_value
        else:
            counts.pop(key, None)


_AFFINITY = "affinity"
_ANTI = "anti"


class InterPodAffinityFilter(SignPlugin, PreFilterPlugin, PreFilterExtensions, FilterPlugin,
                             ev.EnqueueExtensions):
    NAME = NAME

    def sign_pod(self, pod: PodInfo) -> Sequence[SignFragment] | None:
        """SignPod (OpportunisticBatching): what of the pod this plugin reads."""
        # Not signable with inter-pod (anti-)affinity of its own; else its labels, which
        # existing pods' terms may select (unless those terms are ignored).
        if pod.affinity.get("podAffinity") is not None or \
                pod.affinity.get("podAntiAffinity") is not None:
            return None
        if self.args.ignore_preferred_terms_of_existing_pods:
            return []
        return [(signers.LABELS, dict(pod.labels))]

    def __init__(self, args: InterPodAffinityArgs, handle: Handle) -> None:
        self.args = args
        self._namespaces = _namespace_lookup(handle)
        self._terms = _TermsCache()
        self._incoming = _IncomingTerms()
        # The parked pods' terms for the queueing hints, parsed once per pod version:
        # re-parsed on every event, a parked pod with 3000 terms cost 70 ms per pod event
        # in the cluster (issue 36).
        self._parked = _TermsCache(strict=True)
        # The counts per signature, kept up to date with the nodes that change.
        self._counts = AggregateMemo()

    def pre_filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> Status:
        try:
            terms = self._incoming.get(pod)
        except (SelectorError, TypeError, ValueError) as err:
            return Status.unresolvable(f"parsing pod: {err}")
        affinity = terms.required_affinity
        anti = terms.required_anti_affinity
        if not affinity and not anti and not snapshot.pods_with_required_anti_affinity:
            return SKIP  # no terms either way: O(1), not a walk over every node
        lookup = self._namespaces
        own_ns_labels = None if lookup is None else lookup.get(pod.namespace, _NO_LABELS)

        # getExistingAntiAffinityCounts: only nodes with pods carrying required anti-affinity.
        existing = self._existing_anti_affinity_counts(pod, own_ns_labels, snapshot,
                                                       state.budget)
        if not existing and not affinity and not anti:
            return SKIP
        affinity_counts: Counts = {}
        anti_counts: Counts = {}
        if affinity or anti:
            affinity_counts, anti_counts = self._incoming_counts(pod, terms, snapshot,
                                                                 state.budget)

        own_ns = None if lookup is None else lookup.get(pod.namespace)
        self_ok = (not affinity_counts and bool(affinity)
                   and all(t.matches(pod, own_ns) for t in affinity))
        state.write(_PRE_FILTER_KEY, _filter_state(
            affinity, anti, affinity_counts, anti_counts, existing, self_ok))
        return SUCCESS

    def _existing_anti_affinity_counts(self, pod: PodInfo,
                                       own_ns_labels: Mapping[str, str] | None,
                                       snapshot: Snapshot,
                                       budget: Budget | None = None) -> Counts:
        """getExistingAntiAffinityCounts: per topology pair, the existing pods whose
        required anti-affinity terms match the incoming pod; only nodes holding such pods
        are looked at. The result depends on the incoming pod's namespace, labels and
        namespace labels only, so the counts are kept per those (node_memo.Aggregate)."""
        signature = ("existing", pod.namespace, tuple(sorted(pod.labels.items())),
                     None if own_ns_labels is None else tuple(sorted(own_ns_labels.items())))
        cached = self._terms.get

        def share(node: NodeInfo) -> Share:
            if not node.pods_with_required_anti_affinity:
                return ()
            if budget is not None:  # the attempt's time budget, once per node walked
                budget.check("PreFilter %s, the existing pods' anti-affinity terms", NAME)
            found: dict[tuple[Hashable, str], int] = {}
            for other in node.pods.values():
                if other.has_required_anti_affinity:
                    for t in cached(other).required_anti_affinity:
                        if t.matches(pod, own_ns_labels):
                            _add(found, t.topology_key, node, t.topology_key)
            return _entries(found)

        self._terms.grow_to(snapshot.pods_with_required_anti_affinity)
        return cast(Counts, self._counts.get(signature).sync(snapshot, share))

    def _incoming_counts(self, pod: PodInfo, terms: PodTerms, snapshot: Snapshot,
                         budget: Budget | None = None) -> tuple[Counts, Counts]:
        """getIncomingAffinityAntiAffinityCounts: per topology pair, the existing pods that
        match ALL the incoming pod's affinity terms, and those matching each of its
        anti-affinity terms. Kept per the terms across cycles unless a term has a
        non-empty namespaceSelector (its result then depends on namespace labels, which
        change without the nodes: counted afresh)."""
        affinity = terms.required_affinity
        anti = terms.required_anti_affinity
        lookup = self._namespaces
        if all(t.namespace_selector is None for t in (*affinity, *anti)):
            agg = self._counts.get(("incoming", pod.namespace, _required_signature(pod)))
        else:
            agg = Aggregate()

        def share(node: NodeInfo) -> Share:
            if budget is not None:  # the attempt's time budget, once per node walked
                budget.check("PreFilter %s, the pod's %d required terms", NAME,
                             len(affinity) + len(anti))
            found: dict[tuple[Hashable, str], int] = {}
            for other in node.pods.values():
                ns_labels = None if lookup is None else lookup.get(other.namespace)
                if affinity and all(t.matches(other, ns_labels) for t in affinity):
                    for t in affinity:
                        _add(found, (_AFFINITY, t.topology_key), node, t.topology_key)
                for t in anti:
                    if t.matches(other, ns_labels):
                        _add(found, (_ANTI, t.topology_key), node, t.topology_key)
            return _entries(found)

        totals = agg.sync(snapshot, share)
        affinity_counts: Counts = {}
        anti_counts: Counts = {}
        for group, by_value in totals.items():
            kind, key = cast(tuple[str, str], group)
            (affinity_counts if kind == _AFFINITY else anti_counts)[key] = \
                cast(dict[str, int], by_value)
        return affinity_counts, anti_counts

    # PreFilterExtensions (filtering.go AddPod / RemovePod, preFilterState.updateWithPod): a
    # pod added to or removed from a node in a what-if (nominated pods, preemption).
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
        s: _FilterState | None = state.get(_PRE_FILTER_KEY)
        if s is None:
            return
        lookup = self._namespaces
        own_ns = lookup.get(pod.namespace, _NO_LABELS)
        other_ns = lookup.get(other.namespace)
        # New dicts, not the cycle's changed in place: a what-if works on a copy of the
        # state, which may share them (and the cycle's are the plugin's running counts).
        existing = dict(s.existing_anti_affinity_counts)
        if other.has_required_anti_affinity:
            for t in self._terms.get(other).required_anti_affinity:
                if t.matches(pod, own_ns):
                    _update_count(existing, node, t.topology_key, delta)
        affinity = dict(s.affinity_counts)
        if s.affinity_terms and all(t.matches(other, other_ns) for t in s.affinity_terms):
            for t in s.affinity_terms:
                _update_count(affinity, node, t.topology_key, delta)
        anti = dict(s.anti_affinity_counts)
        for t in s.anti_affinity_terms:
            if t.matches(other, other_ns):
                _update_count(anti, node, t.topology_key, delta)
        own = lookup.get(pod.namespace)
        self_ok = (not affinity and bool(s.affinity_terms)
                   and all(t.matches(pod, own) for t in s.affinity_terms))
        state.write(_PRE_FILTER_KEY, _filter_state(
            s.affinity_terms, s.anti_affinity_terms, affinity, anti, existing, self_ok))

    def bind_filter(self, state: CycleState, pod: PodInfo
                    ) -> Callable[[NodeInfo], Status] | None:
        """This cycle's Filter as a function of the node alone, for the pipeline's per-node
        loop: without affinity terms, only the checks' lookups are left (one label lookup
        when they share a topologyKey, as hostname anti-affinity does)."""
        s: _FilterState = state.read(_PRE_FILTER_KEY)
        if s.affinity_terms:
            return None
        checks = s.checks
        if not checks:
            return _pass
        if len(checks) == 1:
            key, by_value, status = checks[0]
            get = by_value.get

            def one(node: NodeInfo) -> Status:
                value = node.labels.get(key)
                if value is not None and get(value, 0) > 0:
                    return status
                return SUCCESS
            return one
        if len(checks) == 2 and checks[0][0] == checks[1][0]:
            key = checks[0][0]
            get1, status1 = checks[0][1].get, checks[0][2]
            get2, status2 = checks[1][1].get, checks[1][2]

            def two(node: NodeInfo) -> Status:
                value = node.labels.get(key)
                if value is not None:
                    if get1(value, 0) > 0:
                        return status1
                    if get2(value, 0) > 0:
                        return status2
                return SUCCESS
            return two

        def many(node: NodeInfo) -> Status:
            labels = node.labels
            for key, by_value, status in checks:
                value = labels.get(key)
                if value is not None and by_value.get(value, 0) > 0:
                    return status
            return SUCCESS
        return many

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        s: _FilterState = state.read(_PRE_FILTER_KEY)
        labels = node.labels
        if s.affinity_terms:
            pods_exist = True
            counts = s.affinity_counts
            for t in s.affinity_terms:
                value = labels.get(t.topology_key)
                if value is None:
                    # All topology labels must exist on the node.
                    return _AFFINITY_NOT_MATCH
                if (counts.get(t.topology_key) or _NO_COUNTS).get(value, 0) <= 0:
                    pods_exist = False
            if not pods_exist and not s.self_affinity_ok:
                return _AFFINITY_NOT_MATCH
        for key, by_value, status in s.checks:
            value = labels.get(key)
            if value is not None and by_value.get(value, 0) > 0:
                return status
        return SUCCESS

    # -- queueing hints ------------------------------------------------------------------
    def events_to_register(self) -> tuple[ev.ClusterEventWithHint, ...]:
        r, a = ev.Resource, ev.ActionType
        return (
            ev.event(r.ASSIGNED_POD, a.ADD | a.UPDATE_POD_LABEL | a.DELETE,
                     self._after_assigned_pod_change),
            ev.event(r.TARGET_POD, a.UPDATE_POD_LABEL, ev.queue_always),
            ev.event(r.NODE, a.ADD | a.UPDATE_NODE_LABEL, self._after_node_change),
        )

    def _after_assigned_pod_change(self, pod: PodInfo, old: Any,
                                   new: Any) -> ev.QueueingHint:
        """isSchedulableAfterAssignedPodChange: a pod now matches all the pod's affinity
        terms, or no longer matches (or left) its anti-affinity, or a deleted pod's own
        anti-affinity rejected the pod."""
        for p in (new, old):
            if p is not None and not p.node_name and not p.nominated_node:
                return ev.QUEUE_SKIP
        terms = self._parked.get(pod)

        def all_match(ts: Sequence[AffinityTerm], p: PodInfo) -> bool:
            return bool(ts) and all(t.matches(p, None) for t in ts)

        def any_match(ts: Sequence[AffinityTerm], p: PodInfo) -> bool:
            return any(t.matches(p, None) for t in ts)

        affinity, anti = terms.required_affinity, terms.required_anti_affinity
        if new is not None and old is not None:
            if not all_match(affinity, old) and all_match(affinity, new):
                return ev.QUEUE
            if any_match(anti, old) and not any_match(anti, new):
                return ev.QUEUE
            return ev.QUEUE_SKIP
        if new is not None:
            return ev.QUEUE if all_match(affinity, new) else ev.QUEUE_SKIP
        if any_match(anti, old):
            return ev.QUEUE
        old_anti = self._terms.get(old).required_anti_affinity
        return ev.QUEUE if any_match(old_anti, pod) else ev.QUEUE_SKIP

    def _after_node_change(self, pod: PodInfo, old: Any, new: Any) -> ev.QueueingHint:
        """isSchedulableAfterNodeChange: a topology key of the pod's terms appeared or
        changed (affinity), or went away or changed (anti-affinity)."""
        terms = self._parked.get(pod)
        before, after = ev.node_of(old), ev.node_of(new)
        for t in terms.required_affinity:
            if before is None:
                if t.topology_key in after.labels:
                    return ev.QUEUE
                continue
            had, has = t.topology_key in before.labels, t.topology_key in after.labels
            if (not had and has) or (had and has and before.labels[t.topology_key]
                                     != after.labels[t.topology_key]):
                return ev.QUEUE
        for t in terms.required_anti_affinity:
            if before is None:
                return ev.QUEUE
            had, has = t.topology_key in before.labels, t.topology_key in after.labels
            if (had and not has) or (had and has and before.labels[t.topology_key]
                                     != after.labels[t.topology_key]):
                return ev.QUEUE
        return ev.QUEUE_SKIP


def _pass(node: NodeInfo) -> Status:
    return SUCCESS


_AFFINITY_NOT_MATCH = Status.unresolvable(ERR_REASON_AFFINITY_RULES_NOT_MATCH)
_ANTI_AFFINITY_NOT_MATCH = Status.unschedulable(ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH)
_EXISTING_ANTI_AFFINITY_NOT_MATCH = Status.unschedulable(
    ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH)


# -- scorer ---------------------------------------------------------------------------------

# topologyKey -> topology value -> summed weight
ScoreMap = dict[str, dict[str, int]]


def _process_term(found: list[tuple[str, str, int]], term: AffinityTerm, weight: int,
                  pod: PodInfo, ns_labels: Mapping[str, str] | None, node: NodeInfo) -> None:
    """scoreMap.processTerm, collecting (topologyKey, value, weight) for the node's share."""
    if term.matches(pod, ns_labels):
        value = node.labels.get(term.topology_key)
        if value is not None:
            found.append((term.topology_key, value, weight))


def _preferred_signature(pod: PodInfo) -> str:
    """The incoming pod's preferred terms as written and its values of their label keys."""
    preferred = [(pod.affinity.get(kind) or {}).get(_PREFERRED) or []
                 for kind in ("podAffinity", "podAntiAffinity")]
    keys = sorted({k for items in preferred for item in items if isinstance(item, Mapping)
                   for t in (item.get("podAffinityTerm") or {},) if isinstance(t, Mapping)
                   for k in (*(t.get("matchLabelKeys") or ()), *(t.get("mismatchLabelKeys") or ()))
                   if isinstance(k, str)})
    return json.dumps([preferred, [(k, pod.labels.get(k)) for k in keys]], sort_keys=True,
                      default=str)


class InterPodAffinityScorer(SignPlugin, PreScorePlugin, ScorePlugin, ScoreExtensions):
    NAME = NAME

    def sign_pod(self, pod: PodInfo) -> Sequence[SignFragment] | None:
        """SignPod (OpportunisticBatching): what of the pod this plugin reads."""
        # Not signable with inter-pod (anti-)affinity of its own; else its labels, which
        # existing pods' terms may select (unless those terms are ignored).
        if pod.affinity.get("podAffinity") is not None or \
                pod.affinity.get("podAntiAffinity") is not None:
            return None
        if self.args.ignore_preferred_terms_of_existing_pods:
            return []
        return [(signers.LABELS, dict(pod.labels))]

    def __init__(self, args: InterPodAffinityArgs, handle: Handle) -> None:
        self.args = args
        self._namespaces = _namespace_lookup(handle)
        self._terms = _TermsCache()
        self._incoming = _IncomingTerms()
        self._scores = AggregateMemo()

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo],
                  snapshot: Snapshot) -> Status:
        pod_affinity = pod.affinity.get("podAffinity") or {}
        pod_anti = pod.affinity.get("podAntiAffinity") or {}
        has_constraints = bool(pod_affinity.get(_PREFERRED) or pod_anti.get(_PREFERRED))
        # Optionally ignore existing pods' preferences when the incoming pod has none.
        if self.args.ignore_preferred_terms_of_existing_pods and not has_constraints:
            return SKIP
        try:
            terms = self._incoming.get(pod)
        except (SelectorError, TypeError, ValueError) as err:
            return Status.error(f"failed to parse pod: {err}")

        # Without preferred terms of its own only existing pods with affinity score
        # (HavePodsWithAffinityList): none in the cluster, nothing to walk.
        if not has_constraints and not snapshot.pods_with_affinity:
            return SKIP
        lookup = self._namespaces
        own_ns_labels = None if lookup is None else lookup.get(pod.namespace, _NO_LABELS)
        hard_weight = self.args.hard_pod_affinity_weight
        preferred = terms.preferred_affinity
        preferred_anti = terms.preferred_anti_affinity
        cached = self._terms.get
        # A node's share depends on the node, the incoming pod's preferred terms, and its
        # namespace, labels and namespace labels (which existing pods' terms match): the
        # scores are kept per those across cycles (node_memo.Aggregate), unless a term has
        # a namespaceSelector (namespace labels change without the nodes: counted afresh).
        if all(t.namespace_selector is None for t in (*preferred, *preferred_anti)):
            agg = self._scores.get((
                "score", pod.namespace, tuple(sorted(pod.labels.items())),
                None if own_ns_labels is None else tuple(sorted(own_ns_labels.items())),
                _preferred_signature(pod)))
        else:
            agg = Aggregate()

        budget = state.budget

        def share(node: NodeInfo) -> Share:
            # Unless the incoming pod has preferred terms, only pods with affinity matter.
            if not has_constraints and not node.pods_with_affinity:
                return ()
            if not node.labels:
                return ()
            if budget is not None:  # the attempt's time budget, once per node walked
                budget.check("PreScore %s", NAME)
            found: list[tuple[str, str, int]] = []
            for other in node.pods.values():
                if has_constraints:
                    ns_labels = None if lookup is None else lookup.get(other.namespace)
                    for t in preferred:
                        _process_term(found, t, t.weight, other, ns_labels, node)
                    for t in preferred_anti:
                        _process_term(found, t, -t.weight, other, ns_labels, node)
                if not other.has_affinity:
                    continue
                existing = cached(other)
                if hard_weight > 0:
                    for t in existing.required_affinity:
                        _process_term(found, t, hard_weight, pod, own_ns_labels, node)
                for t in existing.preferred_affinity:
                    _process_term(found, t, t.weight, pod, own_ns_labels, node)
                for t in existing.preferred_anti_affinity:
                    _process_term(found, t, -t.weight, pod, own_ns_labels, node)
            return tuple(found)

        self._terms.grow_to(snapshot.pods_with_affinity)
        scores = agg.sync(snapshot, share)
        # Upstream skips when no node produced a score entry; entries that sum to zero
        # still count as produced.
        if not scores:
            return SKIP
        state.write(_PRE_SCORE_KEY, scores)
        return SUCCESS

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        scores: ScoreMap = state.read(_PRE_SCORE_KEY)
        labels = node.labels
        total = 0
        for key, by_value in scores.items():
            value = labels.get(key)
            if value is not None:
                total += by_value.get(value, 0)
        return total

    def normalize_score(self, state: CycleState, pod: PodInfo, scores: list[int]) -> Status:
        """Min-max scaling into 0..MAX_NODE_SCORE: affinity scores are positive and
        anti-affinity scores negative, so the lowest raw score maps to 0."""
        if not scores or not state.get(_PRE_SCORE_KEY):
            return SUCCESS
        lo, hi = min(scores), max(scores)
        diff = hi - lo
        for i, s in enumerate(scores):
            scores[i] = int(MAX_NODE_SCORE * ((s - lo) / diff)) if diff > 0 else 0
        return SUCCESS


# -- registration ---------------------------------------------------------------------------

def new_filter(args: Mapping[str, Any], handle: Handle) -> InterPodAffinityFilter:
    return InterPodAffinityFilter(parse_args(args), handle)


def new_scorer(args: Mapping[str, Any], handle: Handle) -> InterPodAffinityScorer:
    return InterPodAffinityScorer(parse_args(args), handle)


SPEC = PluginSpec(name=NAME, filter=new_filter, score=new_scorer, default_args=DEFAULT_ARGS)
