"""PodTopologySpread: a pod's topologySpreadConstraints as a filter (DoNotSchedule) and a
scorer (ScheduleAnyway).

Reimplements kube-scheduler's podtopologyspread plugin (pkg/scheduler/framework/plugins/
podtopologyspread/{common,filtering,scoring,plugin}.go, v1.36). PreFilter / PreScore count
matching pods per topology domain once per pod; Filter and Score per node are dict lookups
(Score also counts the node's own pods for kubernetes.io/hostname constraints, as upstream).
The counts are kept across cycles (node_memo.Aggregate): the next pod of the same workload
only recounts the nodes that changed since, not every node.

Counted pods: same namespace as the incoming pod, labels matching the constraint's selector
(labelSelector plus matchLabelKeys), not terminating (no metadata.deletionTimestamp). A
node takes part in a constraint only when it has every constraint's topologyKey and passes
the constraint's node inclusion policies: nodeAffinityPolicy Honor (the default) requires
the pod's nodeSelector and required node affinity to match the node, nodeTaintsPolicy Honor
(default Ignore) requires the pod to tolerate the node's NoSchedule/NoExecute taints.

Default constraints (args defaultConstraints / defaultingType): upstream applies them only to
pods without constraints of their own, with a selector built from the Services,
ReplicationControllers, ReplicaSets and StatefulSets that select the pod, and skips them
when that selector is empty. polsched has no such listers, so the selector is always empty
and default constraints never apply, whether System or List. (Building the selector from
the pod's own labels instead would spread pods upstream does not spread.) The args are
still validated as upstream does, so a policy that kube-scheduler accepts loads here.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from polsched.framework import events as ev
from polsched.framework import listers as ls
from polsched.framework.cycle_state import CycleState
from polsched.framework.interfaces import (
    MAX_NODE_SCORE,
    FilterPlugin,
    Handle,
    NodeSetFilter,
    PreFilterExtensions,
    PreFilterPlugin,
    PreScorePlugin,
    ScoreExtensions,
    ScorePlugin,
)
from polsched.framework.nodeaffinity import REQUIRED, RequiredNodeAffinity
from polsched.framework.registry import ArgsError, PluginSpec
from polsched.framework.selectors import (
    ALL_NODES,
    Matcher,
    NodeSet,
    SelectorError,
    compile_label_selector,
)
from polsched.framework.status import SKIP, SUCCESS, Status
from polsched.framework.types import NodeInfo, PodInfo, Snapshot
from polsched.plugins import taint_toleration
from polsched.plugins.node_memo import Aggregate, AggregateMemo, Entry, Share

NAME = "PodTopologySpread"

# plugin.go
ERR_REASON_CONSTRAINTS_NOT_MATCH = "node(s) didn't match pod topology spread constraints"
ERR_REASON_NODE_LABEL_NOT_MATCH = ERR_REASON_CONSTRAINTS_NOT_MATCH + " (missing required label)"

_PRE_FILTER_KEY = "PreFilter" + NAME
_PRE_SCORE_KEY = "PreScore" + NAME

LABEL_HOSTNAME = "kubernetes.io/hostname"
LABEL_TOPOLOGY_ZONE = "topology.kubernetes.io/zone"
DO_NOT_SCHEDULE = "DoNotSchedule"
SCHEDULE_ANYWAY = "ScheduleAnyway"
HONOR = "Honor"
IGNORE = "Ignore"
SYSTEM_DEFAULTING = "System"
LIST_DEFAULTING = "List"

# plugin.go systemDefaultConstraints
SYSTEM_DEFAULT_CONSTRAINTS: tuple[Mapping[str, Any], ...] = (
    {"topologyKey": LABEL_HOSTNAME, "whenUnsatisfiable": SCHEDULE_ANYWAY, "maxSkew": 3},
    {"topologyKey": LABEL_TOPOLOGY_ZONE, "whenUnsatisfiable": SCHEDULE_ANYWAY, "maxSkew": 5},
)

DEFAULT_ARGS: Mapping[str, Any] = {"defaultingType": SYSTEM_DEFAULTING}

_MAX_INT32 = 2**31 - 1


# -- constraints ----------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class SpreadConstraint:
    """common.go topologySpreadConstraint: a v1.TopologySpreadConstraint with its selector
    compiled (matchLabelKeys merged) and its defaults applied."""

    max_skew: int
    topology_key: str
    selector: Matcher
    # labels.Selector.Empty(): a selector without requirements counts no pods (although the
    # incoming pod itself matches it), common.go countPodsMatchSelector.
    selector_empty: bool
    min_domains: int = 1
    honor_node_affinity: bool = True
    honor_node_taints: bool = False
    # the selector as compiled (matchLabelKeys merged), as JSON: what the pods it counts
    # on a node depend on besides the namespace
    selector_sig: str = ""


def _compile_constraint(c: Mapping[str, Any], pod_labels: Mapping[str, str],
                        path: str) -> SpreadConstraint:
    sel = c.get("labelSelector")
    match_keys = c.get("matchLabelKeys") or ()
    extra = [{"key": k, "operator": "In", "values": [pod_labels[k]]}
             for k in match_keys if isinstance(k, str) and k in pod_labels]
    # mergeLabelSetWithSelector: the pod's values of matchLabelKeys are ANDed with the
    # selector; a null selector selects nothing and stays so.
    if extra and isinstance(sel, Mapping):
        sel = {**sel, "matchExpressions": [*(sel.get("matchExpressions") or ()), *extra]}
    matcher = compile_label_selector(sel, f"{path}.labelSelector")
    empty = isinstance(sel, Mapping) and not sel.get("matchLabels") \
        and not sel.get("matchExpressions")
    min_domains = c.get("minDomains")
    return SpreadConstraint(
        max_skew=int(c.get("maxSkew") or 0),
        topology_key=str(c.get("topologyKey") or ""),
        selector=matcher,
        selector_empty=empty,
        selector_sig=json.dumps(sel, sort_keys=True, default=str),
        min_domains=1 if min_domains is None else int(min_domains),
        honor_node_affinity=(c.get("nodeAffinityPolicy") or HONOR) == HONOR,
        honor_node_taints=(c.get("nodeTaintsPolicy") or IGNORE) == HONOR,
    )


def pod_constraints(pod: PodInfo, action: str) -> tuple[SpreadConstraint, ...]:
    """The pod's own constraints with whenUnsatisfiable == action (filterTopology-
    SpreadConstraints). Raises SelectorError on a malformed selector."""
    out: list[SpreadConstraint] = []
    for i, c in enumerate(pod.spec.get("topologySpreadConstraints") or ()):
        if isinstance(c, Mapping) and c.get("whenUnsatisfiable") == action:
            out.append(_compile_constraint(c, pod.labels, f"spec.topologySpreadConstraints[{i}]"))
    return tuple(out)


# -- node inclusion -------------------------------------------------------------------------

NodePredicate = Callable[[NodeInfo], bool]


def required_node_affinity(pod: PodInfo) -> NodePredicate:
    """component-helpers nodeaffinity.GetRequiredNodeAffinity(pod).Match, ignoring parse
    errors as PodTopologySpread does: nodeSelector AND any of the required
    nodeSelectorTerms (a malformed or empty term matches no node). The parser is
    framework.nodeaffinity, NodeAffinity's."""
    required = RequiredNodeAffinity.of(pod)
    if required.empty:
        return _every_node
    return required.matches


def _every_node(node: NodeInfo) -> bool:
    return True


class _NodeInclusion:
    """matchNodeInclusionPolicies for one incoming pod; each predicate evaluated at most
    once per node and cycle."""

    __slots__ = ("_affinity", "_tolerations", "_affinity_ok", "_taints_ok")

    def __init__(self, pod: PodInfo) -> None:
        self._affinity = required_node_affinity(pod)
        self._tolerations = taint_toleration.compile_tolerations(pod.tolerations)
        self._affinity_ok: dict[str, bool] = {}
        self._taints_ok: dict[str, bool] = {}

    def includes(self, c: SpreadConstraint, node: NodeInfo) -> bool:
        if c.honor_node_affinity:
            ok = self._affinity_ok.get(node.name)
            if ok is None:
                ok = self._affinity_ok[node.name] = self._affinity(node)
            if not ok:
                return False
        if c.honor_node_taints:
            ok = self._taints_ok.get(node.name)
            if ok is None:
                ok = self._taints_ok[node.name] = taint_toleration.find_untolerated_taint(
                    node.taints, self._tolerations) is None
            if not ok:
                return False
        return True


def count_matching(node: NodeInfo, selector: Matcher, namespace: str) -> int:
    """countPodsMatchSelector for a non-empty selector: pods of `namespace` on the node
    whose labels match, skipping terminating pods (kubernetes#87621)."""
    n = 0
    for p in node.pods.values():
        if p.namespace == namespace and selector(p.labels) \
                and not (p.raw.get("metadata") or {}).get("deletionTimestamp"):
            n += 1
    return n


def _has_keys(labels: Mapping[str, str], constraints: Sequence[SpreadConstraint]) -> bool:
    """nodeLabelsMatchSpreadConstraints: the node has every constraint's topologyKey."""
    for c in constraints:
        if c.topology_key not in labels:
            return False
    return True


def _spread_signature(pod: PodInfo, action: str) -> str:
    """What a node's row depends on besides the node: the pod's constraints of `action`,
    its values of their matchLabelKeys, and what the inclusion policies read."""
    raw = [c for c in pod.spec.get("topologySpreadConstraints") or ()
           if isinstance(c, Mapping) and c.get("whenUnsatisfiable") == action]
    keys = sorted({k for c in raw for k in c.get("matchLabelKeys") or () if isinstance(k, str)})
    node_affinity = (pod.affinity.get("nodeAffinity") or {}).get(REQUIRED)
    return json.dumps([raw, [(k, pod.labels.get(k)) for k in keys], pod.node_selector,
                       node_affinity, pod.tolerations], sort_keys=True, default=str)


# -- args -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class PodTopologySpreadArgs:
    defaulting_type: str = SYSTEM_DEFAULTING
    default_constraints: tuple[Mapping[str, Any], ...] = ()


_CONSTRAINT_FIELDS = frozenset((
    "maxSkew", "topologyKey", "whenUnsatisfiable", "labelSelector", "minDomains",
    "nodeAffinityPolicy", "nodeTaintsPolicy", "matchLabelKeys"))


def _positive_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def _validate_default_constraint(c: Any, path: str) -> None:
    """ValidatePodTopologySpreadArgs for one default constraint, plus the fields upstream's
    decoder types (minDomains, policies, matchLabelKeys)."""
    if not isinstance(c, Mapping):
        raise ArgsError(path, "must be an object with maxSkew, topologyKey and "
                              "whenUnsatisfiable")
    for key in c:
        if key not in _CONSTRAINT_FIELDS:
            raise ArgsError(f"{path}.{key}", "unknown field")
    skew = c.get("maxSkew")
    if not _positive_int(skew):
        raise ArgsError(f"{path}.maxSkew", f"must be an integer greater than 0, got {skew!r}")
    key = c.get("topologyKey")
    if not isinstance(key, str) or not key:
        raise ArgsError(f"{path}.topologyKey", "must be a non-empty label key")
    when = c.get("whenUnsatisfiable")
    if when not in (DO_NOT_SCHEDULE, SCHEDULE_ANYWAY):
        raise ArgsError(f"{path}.whenUnsatisfiable",
                        f"must be {DO_NOT_SCHEDULE} or {SCHEDULE_ANYWAY}, got {when!r}")
    if c.get("labelSelector") is not None:
        raise ArgsError(f"{path}.labelSelector", "must not be set: default constraints "
                        "take their selector from the pod's owners; remove it")
    md = c.get("minDomains")
    if md is not None:
        if not _positive_int(md):
            raise ArgsError(f"{path}.minDomains", f"must be an integer greater than 0, "
                                                  f"got {md!r}")
        if when != DO_NOT_SCHEDULE:
            raise ArgsError(f"{path}.minDomains",
                            f"can only be set when whenUnsatisfiable is {DO_NOT_SCHEDULE}")
    for policy in ("nodeAffinityPolicy", "nodeTaintsPolicy"):
        v = c.get(policy)
        if v is not None and v not in (HONOR, IGNORE):
            raise ArgsError(f"{path}.{policy}", f"must be {HONOR} or {IGNORE}, got {v!r}")
    mlk = c.get("matchLabelKeys")
    if mlk is not None and (not isinstance(mlk, list)
                            or not all(isinstance(k, str) and k for k in mlk)):
        raise ArgsError(f"{path}.matchLabelKeys", "must be a list of label keys")


def parse_args(args: Mapping[str, Any] | None) -> PodTopologySpreadArgs:
    """PodTopologySpreadArgs (KubeSchedulerConfiguration v1), defaulted and validated as
    apis/config/validation ValidatePodTopologySpreadArgs."""
    if not args:
        args = DEFAULT_ARGS
    if not isinstance(args, Mapping):
        raise ArgsError("", "must be an object with defaultingType and/or defaultConstraints")
    for key in args:
        if key not in ("defaultingType", "defaultConstraints"):
            raise ArgsError(str(key), "unknown field: PodTopologySpread takes defaultingType "
                                      "and defaultConstraints")
    defaulting = args.get("defaultingType") or SYSTEM_DEFAULTING
    if defaulting not in (SYSTEM_DEFAULTING, LIST_DEFAULTING):
        raise ArgsError("defaultingType", f"must be {SYSTEM_DEFAULTING} or {LIST_DEFAULTING}, "
                                          f"got {defaulting!r}")
    raw = args.get("defaultConstraints")
    if raw is None:
        raw = []
    if not isinstance(raw, list):
        raise ArgsError("defaultConstraints", "must be a list of constraints")
    if defaulting == SYSTEM_DEFAULTING and raw:
        raise ArgsError("defaultingType", f"must be {LIST_DEFAULTING} when defaultConstraints "
                                          f"are set ({SYSTEM_DEFAULTING} uses the built-in "
                                          "constraints)")
    seen: set[tuple[str, str]] = set()
    for i, c in enumerate(raw):
        path = f"defaultConstraints[{i}]"
        _validate_default_constraint(c, path)
        pair = (c["topologyKey"], c["whenUnsatisfiable"])
        if pair in seen:
            raise ArgsError(path, f"duplicate constraint for topologyKey {pair[0]!r} and "
                                  f"whenUnsatisfiable {pair[1]}")
        seen.add(pair)
    constraints = SYSTEM_DEFAULT_CONSTRAINTS if defaulting == SYSTEM_DEFAULTING else tuple(raw)
    return PodTopologySpreadArgs(defaulting, constraints)


# -- the plugin -----------------------------------------------------------------------------

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
    min_match = min(by_value.values(), default=_MAX_INT32)
    if len(by_value) < c.min_domains:
        min_match = 0
    return c.max_skew + min_match - self_match


@dataclass(slots=True)
class _ScoreState:
    constraints: tuple[SpreadConstraint, ...]
    # per constraint: domain value -> matching pods; empty for hostname constraints,
    # counted per node in Score
    counts: list[dict[str, int]]
    weights: list[float]
    ignored: set[str]
    require_all: bool
    namespace: str
    # per scored node, in the order score_nodes saw them: was it ignored
    ignored_mask: list[bool]
    # the aggregate's nodes and, per hostname constraint i, node name -> matching pods
    shares: Mapping[str, tuple[NodeInfo, int, Share]] = field(default_factory=dict)
    hosts: list[Mapping[str, int]] = field(default_factory=list)


class PodTopologySpread(PreFilterPlugin, PreFilterExtensions, FilterPlugin, NodeSetFilter,
                        PreScorePlugin, ScorePlugin, ScoreExtensions, ev.EnqueueExtensions):
    NAME = NAME

    def __init__(self, args: PodTopologySpreadArgs, handle: Handle) -> None:
        self.args = args
        self.system_defaulted = args.defaulting_type == SYSTEM_DEFAULTING
        self._counts = AggregateMemo()
        # _domain_counts' running counts: nodes per class, and matching pods per class for
        # each selector (pods with different constraints share them: room for many)
        self._classes = AggregateMemo(64)
        self._listers = handle.listers
        # The default constraints by (action, default selector): compiled once per
        # workload, so the memo of node rows is shared by its pods.
        self._defaults: dict[tuple[str, str], tuple[SpreadConstraint, ...]] = {}
        # The pods' own constraints by (action, constraints as JSON, labels).
        self._own: dict[tuple[str, str, tuple[tuple[str, str], ...]],
                        tuple[SpreadConstraint, ...]] = {}
        # namespace -> the selectors of its Services, for the Services' generation
        self._services: tuple[int, dict[str, list[Mapping[str, str]]]] = (-1, {})

    def _constraints(self, pod: PodInfo, action: str) -> tuple[SpreadConstraint, ...]:
        return self._constraints_signed(pod, action)[0]

    def _constraints_signed(self, pod: PodInfo, action: str,
                            ) -> tuple[tuple[SpreadConstraint, ...], str]:
        """getConstraints: the pod's own constraints of `action`, or else the default ones
        (buildDefaultConstraints); with what the defaults' selector is, for the memo."""
        raw = pod.spec.get("topologySpreadConstraints")
        if raw:
            # Compiled once per shape: they depend on the constraints as written and the
            # pod's labels (matchLabelKeys) only. A malformed one raises, never kept.
            shape = (action, json.dumps(raw, sort_keys=True, default=str),
                     tuple(sorted(pod.labels.items())))
            own = self._own.get(shape)
            if own is None:
                own = pod_constraints(pod, action)
                if len(self._own) >= 256:
                    self._own.clear()
                self._own[shape] = own
            return own, ""
        defaults = [c for c in self.args.default_constraints
                    if c.get("whenUnsatisfiable") == action]
        if not defaults:
            return (), ""
        requirements = self._default_selector(pod)
        if not requirements:
            return (), ""  # an empty selector: no default constraints (upstream)
        sig = json.dumps(requirements, sort_keys=True)
        key = (action, sig)
        compiled = self._defaults.get(key)
        if compiled is None:
            if len(self._defaults) > 4096:
                self._defaults.clear()
            selector = {"matchExpressions": requirements}
            compiled = tuple(_compile_constraint({**c, "labelSelector": selector}, {},
                                                 f"defaultConstraints[{i}]")
                             for i, c in enumerate(defaults))
            self._defaults[key] = compiled
        return compiled, sig

    def _service_selectors(self, namespace: str) -> list[Mapping[str, str]]:
        listers = self._listers
        gen = listers.generations[ls.SERVICE.name]
        if self._services[0] != gen:
            by_ns: dict[str, list[Mapping[str, str]]] = {}
            for svc in listers.objects[ls.SERVICE.name].values():
                sel = (svc.get("spec") or {}).get("selector")
                if isinstance(sel, Mapping):  # a nil selector matches nothing
                    ns = (svc.get("metadata") or {}).get("namespace") or ""
                    by_ns.setdefault(ns, []).append(sel)
            self._services = (gen, by_ns)
        return self._services[1].get(namespace, [])

    def _default_selector(self, pod: PodInfo) -> list[dict[str, Any]]:
        """helper.DefaultSelector, as matchExpressions: the labels of the Services
        selecting the pod, then its controller's selector (a ReplicationController's
        labels merged in; a ReplicaSet's or StatefulSet's requirements added)."""
        merged: dict[str, str] = {}
        labels = pod.labels
        for sel in self._service_selectors(pod.namespace):
            if all(labels.get(k) == v for k, v in sel.items()):
                merged.update(sel)
        extra: list[dict[str, Any]] = []
        owner = next((o for o in (pod.raw.get("metadata") or {}).get("ownerReferences") or ()
                      if isinstance(o, Mapping) and o.get("controller")), None)
        if owner is not None:
            api_version, kind = owner.get("apiVersion"), owner.get("kind")
            name = str(owner.get("name") or "")
            if (api_version, kind) == ("v1", "ReplicationController"):
                rc = self._listers.get(ls.REPLICATION_CONTROLLER, name, pod.namespace)
                if rc is not None:
                    merged.update((rc.get("spec") or {}).get("selector") or {})
            elif api_version == "apps/v1" and kind in ("ReplicaSet", "StatefulSet"):
                kind_of = ls.REPLICA_SET if kind == "ReplicaSet" else ls.STATEFUL_SET
                owner_obj = self._listers.get(kind_of, name, pod.namespace)
                owner_sel: Any = (owner_obj.get("spec") or {}).get("selector") \
                    if owner_obj is not None else None
                if isinstance(owner_sel, Mapping):
                    extra = [{"key": k, "operator": "In", "values": [v]}
                             for k, v in (owner_sel.get("matchLabels") or {}).items()]
                    extra += list(owner_sel.get("matchExpressions") or ())
        return [{"key": k, "operator": "In", "values": [v]}
                for k, v in sorted(merged.items())] + extra

    def _aggregate(self, pod: PodInfo, constraints: tuple[SpreadConstraint, ...],
                   action: str, default_sig: str, snapshot: Snapshot,
                   require_all: bool = True) -> Aggregate:
        """Every node's matching pods per constraint and domain, summed (group i: domain
        value -> pods of constraint i), kept across cycles (node_memo.Aggregate) on
        everything a node's share depends on, the default constraints' selector included.
        A node takes part when it has every topologyKey (when `require_all`); a constraint
        counts it when its node inclusion policies let it in. When scoring, hostname
        constraints are not summed per domain: group -1-i holds node name -> pods of
        constraint i, for every node with the hostname label (Score counts those per node,
        without the inclusion policies, as upstream)."""
        agg = self._counts.get((action, pod.namespace, _spread_signature(pod, action),
                                default_sig, require_all))
        scoring = action == SCHEDULE_ANYWAY
        namespace = pod.namespace
        inclusion: list[_NodeInclusion] = []

        def share(node: NodeInfo) -> Share:
            labels = node.labels
            if require_all and not _has_keys(labels, constraints):
                return ()
            if not inclusion:
                inclusion.append(_NodeInclusion(pod))
            includes = inclusion[0].includes
            entries: list[Entry] = []
            for i, c in enumerate(constraints):
                key = c.topology_key
                if scoring and key == LABEL_HOSTNAME:
                    if key in labels:
                        entries.append((-1 - i, node.name, 0 if c.selector_empty
                                        else count_matching(node, c.selector, namespace)))
                elif includes(c, node):
                    entries.append((i, labels.get(key, ""), 0 if c.selector_empty
                                    else count_matching(node, c.selector, namespace)))
            return tuple(entries)

        agg.sync(snapshot, share)
        return agg

    def _domain_counts(self, pod: PodInfo, constraints: tuple[SpreadConstraint, ...],
                       snapshot: Snapshot, require_all: bool = True,
                       ) -> list[dict[str, int]] | None:
        """Per constraint, domain value -> matching pods over the nodes that take part (every
        topologyKey when `require_all`, else a missing key is the value "") and that the
        constraint's inclusion policies let in: what summing every node's row gives,
        from two kinds of running counts that pods with different node affinity share.
        Nodes are told apart only by their constraint keys' values and the label keys the
        pod's required node affinity reads (its class): one count of nodes per class, and
        per constraint selector one count of matching pods per class; the pod's node
        affinity is then evaluated once per class, not per node. None when this does not
        apply (matchFields, a hostname or honored-taints constraint): rows are counted."""
        if any(c.topology_key == LABEL_HOSTNAME or c.honor_node_taints for c in constraints):
            return None
        projected = RequiredNodeAffinity.of(pod).label_only()
        if projected is None:
            return None
        affinity_keys, matches = projected
        keys = tuple(c.topology_key for c in constraints)

        def node_class(node: NodeInfo) -> tuple[tuple[str | None, ...], tuple[str | None, ...]]:
            labels = node.labels
            return (tuple([labels.get(k) for k in keys]),
                    tuple([labels.get(k) for k in affinity_keys]))

        def one_node(node: NodeInfo) -> Share:
            return ((0, node_class(node), 1),)

        classes = self._classes.get(("classes", keys, affinity_keys)).sync(snapshot, one_node)
        included: dict[tuple[str | None, ...], bool] = {}

        def admits(c: SpreadConstraint, proj: tuple[str | None, ...]) -> bool:
            if not c.honor_node_affinity:
                return True
            ok = included.get(proj)
            if ok is None:
                ok = included[proj] = matches(
                    {k: v for k, v in zip(affinity_keys, proj, strict=True) if v is not None})
            return ok

        namespace = pod.namespace
        out: list[dict[str, int]] = []
        for i, c in enumerate(constraints):
            by_value: dict[str, int] = {}
            for cls in classes.get(0) or ():
                values, proj = cast(tuple[tuple[str | None, ...], tuple[str | None, ...]], cls)
                if require_all and None in values:
                    continue
                if admits(c, proj):
                    value = values[i]
                    by_value[value if value is not None else ""] = 0
            if not c.selector_empty and by_value:
                selector = c.selector

                def matching(node: NodeInfo, selector: Matcher = selector) -> Share:
                    n = count_matching(node, selector, namespace)
                    return ((0, node_class(node), n),) if n else ()

                pods = self._classes.get(("pods", namespace, c.selector_sig, keys,
                                         affinity_keys)).sync(snapshot, matching)
                for cls, n in (pods.get(0) or {}).items():
                    values, proj = cast(tuple[tuple[str | None, ...], tuple[str | None, ...]],
                                        cls)
                    if require_all and None in values:
                        continue
                    if admits(c, proj):
                        value = values[i]
                        key = value if value is not None else ""
                        by_value[key] += n
            out.append(by_value)
        return out

    # -- filter --
    def pre_filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> Status:
        try:
            constraints, default_sig = self._constraints_signed(pod, DO_NOT_SCHEDULE)
        except (SelectorError, TypeError, ValueError) as err:
            return Status.error(f"obtaining pod's hard topology spread constraints: {err}")
        if not constraints:
            return SKIP
        counts = self._domain_counts(pod, constraints, snapshot)
        if counts is None:
            totals = self._aggregate(pod, constraints, DO_NOT_SCHEDULE, default_sig,
                                     snapshot).totals
            # The aggregate's own dicts: read only (AddPod / RemovePod copy them).
            counts = [cast(dict[str, int], totals.get(i) or {})
                      for i in range(len(constraints))]
        compiled: list[_FilterConstraint] = []
        pod_labels = pod.labels
        for c, by_value in zip(constraints, counts, strict=True):
            self_match = 1 if c.selector(pod_labels) else 0
            compiled.append(_FilterConstraint(c.topology_key, by_value,
                                              _limit(c, by_value, self_match), c, self_match))
        state.write(_PRE_FILTER_KEY, tuple(compiled))
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
        compiled: tuple[_FilterConstraint, ...] | None = state.get(_PRE_FILTER_KEY)
        if compiled is None or other.namespace != pod.namespace:
            return
        labels = node.labels
        if not _has_keys(labels, [c.spread for c in compiled]):
            return
        inclusion = _NodeInclusion(pod)
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
        state.write(_PRE_FILTER_KEY, tuple(updated))

    def bind_filter(self, state: CycleState, pod: PodInfo
                    ) -> Callable[[NodeInfo], Status] | None:
        """This cycle's Filter as a function of the node alone, for the pipeline's per-node
        loop (one constraint: a label lookup, a count lookup and a comparison)."""
        constraints: tuple[_FilterConstraint, ...] = state.read(_PRE_FILTER_KEY)
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
        constraints: tuple[_FilterConstraint, ...] | None = state.get(_PRE_FILTER_KEY)
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
        constraints: tuple[_FilterConstraint, ...] = state.read(_PRE_FILTER_KEY)
        labels = node.labels
        for c in constraints:
            value = labels.get(c.topology_key)
            if value is None:
                return _NODE_LABEL_NOT_MATCH
            if c.counts.get(value, 0) > c.limit:
                return _CONSTRAINTS_NOT_MATCH
        return SUCCESS

    # -- scorer --
    def pre_score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo],
                  snapshot: Snapshot) -> Status:
        if not snapshot.nodes:
            return SKIP
        try:
            constraints, default_sig = self._constraints_signed(pod, SCHEDULE_ANYWAY)
        except (SelectorError, TypeError, ValueError) as err:
            return Status.error(f"obtaining pod's soft topology spread constraints: {err}")
        if not constraints:
            return SKIP
        # Only non-system-default rules require every topology label on a node, so that
        # nodes without a zone label still get hostname spreading.
        require_all = bool(pod.spec.get("topologySpreadConstraints")) \
            or not self.system_defaulted
        # initPreScoreState: the domains of the feasible nodes, and the nodes to ignore.
        ignored: set[str] = set()
        kept: Sequence[NodeInfo] = nodes
        if require_all:
            kept = [n for n in nodes if _has_keys(n.labels, constraints)]
            if len(kept) != len(nodes):
                ignored = {n.name for n in nodes} - {n.name for n in kept}
        fast = self._domain_counts(pod, constraints, snapshot, require_all)
        shares: Mapping[str, tuple[NodeInfo, int, Share]] = {}
        totals: Mapping[Hashable, Mapping[Hashable, int]] = {}
        if fast is not None:
            totals = cast(Mapping[Hashable, Mapping[Hashable, int]], dict(enumerate(fast)))
        else:
            agg = self._aggregate(pod, constraints, SCHEDULE_ANYWAY, default_sig, snapshot,
                                  require_all)
            totals, shares = agg.totals, agg.shares
        counts: list[dict[str, int]] = []
        weights: list[float] = []
        hosts: list[Mapping[str, int]] = []
        for i, c in enumerate(constraints):
            key = c.topology_key
            if key == LABEL_HOSTNAME:
                # counted per node in Score
                counts.append({})
                weights.append(math.log(len(nodes) - len(ignored) + 2))
                hosts.append(cast(Mapping[str, int], totals.get(-1 - i) or {}))
                continue
            # Only domains of feasible nodes are counted.
            domains = {n.labels.get(key, "") for n in kept}
            total = cast(Mapping[str, int], totals.get(i) or {})
            counts.append({v: total.get(v, 0) for v in domains})
            weights.append(math.log(len(domains) + 2))
            hosts.append({})
        state.write(_PRE_SCORE_KEY, _ScoreState(constraints, counts, weights, ignored,
                                                 require_all, pod.namespace, [],
                                                 shares, hosts))
        return SUCCESS

    def _host_count(self, s: _ScoreState, i: int, c: SpreadConstraint,
                    node: NodeInfo) -> int:
        """The node's pods matching hostname constraint i: the aggregate's count while it
        has the node as it is, else counted."""
        known = s.shares.get(node.name)
        if known is not None and known[0] is node and known[1] == node.generation:
            return s.hosts[i].get(node.name, 0)
        return 0 if c.selector_empty else count_matching(node, c.selector, s.namespace)

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        s: _ScoreState = state.read(_PRE_SCORE_KEY)
        if node.name in s.ignored:
            return 0
        labels = node.labels
        total = 0.0
        for i, c in enumerate(s.constraints):
            value = labels.get(c.topology_key)
            if value is None:
                continue
            if c.topology_key == LABEL_HOSTNAME:
                cnt = self._host_count(s, i, c, node)
            else:
                cnt = s.counts[i].get(value, 0)
            # scoreForCount: maxSkew-1 waters down differences between domains.
            total += cnt * s.weights[i] + (c.max_skew - 1)
        # math.Round: half away from zero (the total is never negative)
        return math.floor(total + 0.5)

    def score_nodes(self, state: CycleState, pod: PodInfo,
                    nodes: Sequence[NodeInfo]) -> list[int] | Status:
        """score per node, with each domain's term (count * weight + maxSkew - 1) worked
        out once per domain instead of per node: the same float operations in the same
        order, so the same scores."""
        s: _ScoreState = state.read(_PRE_SCORE_KEY)
        ignored = s.ignored
        s.ignored_mask = [n.name in ignored for n in nodes] if ignored else [False] * len(nodes)
        plan: list[tuple[str, int, SpreadConstraint, dict[str, float] | None]] = []
        for i, c in enumerate(s.constraints):
            if c.topology_key == LABEL_HOSTNAME:
                plan.append((c.topology_key, i, c, None))
            else:
                w, skew = s.weights[i], c.max_skew - 1
                plan.append((c.topology_key, i, c,
                             {v: cnt * w + skew for v, cnt in s.counts[i].items()}))
        shares, floor = s.shares, math.floor
        out: list[int] = []
        append = out.append
        for node in nodes:
            if ignored and node.name in ignored:
                append(0)
                continue
            labels = node.labels
            total = 0.0
            for key, i, c, terms in plan:
                value = labels.get(key)
                if value is None:
                    continue
                if terms is None:
                    known = shares.get(node.name)
                    if known is not None and known[0] is node \
                            and known[1] == node.generation:
                        cnt = s.hosts[i].get(node.name, 0)
                    else:
                        cnt = 0 if c.selector_empty else count_matching(node, c.selector,
                                                                        s.namespace)
                    total += cnt * s.weights[i] + (c.max_skew - 1)
                else:
                    term = terms.get(value)
                    total += (0 * s.weights[i] + (c.max_skew - 1)) if term is None else term
            append(floor(total + 0.5))
        return out

    def normalize_score(self, state: CycleState, pod: PodInfo, scores: list[int]) -> Status:
        """Fewer matching pods score higher: MAX * (max + min - s) / max over the nodes not
        ignored; ignored nodes get 0."""
        s: _ScoreState | None = state.get(_PRE_SCORE_KEY)
        if s is None:
            return SUCCESS
        mask = s.ignored_mask if len(s.ignored_mask) == len(scores) else [False] * len(scores)
        if scores and not any(mask):
            # The same arithmetic without the per-node mask checks (scores are >= 0).
            lo, hi = min(scores), max(max(scores), 0)
            if hi == 0:
                scores[:] = [MAX_NODE_SCORE] * len(scores)
            else:
                scores[:] = [MAX_NODE_SCORE * (hi + lo - v) // hi for v in scores]
            return SUCCESS
        lo, hi = _MAX_INT64, 0
        for i, v in enumerate(scores):
            if mask[i]:
                continue
            lo = min(lo, v)
            hi = max(hi, v)
        for i, v in enumerate(scores):
            if mask[i]:
                scores[i] = 0
            elif hi == 0:
                scores[i] = MAX_NODE_SCORE
            else:
                scores[i] = MAX_NODE_SCORE * (hi + lo - v) // hi
        return SUCCESS

    # -- queueing hints ------------------------------------------------------------------
    def events_to_register(self) -> tuple[ev.ClusterEventWithHint, ...]:
        r, a = ev.Resource, ev.ActionType
        return (
            ev.event(r.ASSIGNED_POD, a.ADD | a.UPDATE_POD_LABEL | a.DELETE,
                     self._after_assigned_pod_change),
            ev.event(r.TARGET_POD, a.UPDATE_POD_TOLERATION | a.UPDATE_POD_LABEL,
                     self._after_target_pod_change),
            ev.event(r.NODE, a.ADD | a.DELETE | a.UPDATE_NODE_LABEL | a.UPDATE_NODE_TAINT,
                     self._after_node_change),
        )

    @staticmethod
    def _label_change(constraints: Sequence[SpreadConstraint], old: PodInfo,
                      new: PodInfo) -> ev.QueueingHint:
        """isSchedulableAfterPodLabelChange: a constraint selects the pod before xor after."""
        if old.labels == new.labels:
            return ev.QUEUE_SKIP
        for c in constraints:
            if c.selector(old.labels) != c.selector(new.labels):
                return ev.QUEUE
        return ev.QUEUE_SKIP

    def _after_target_pod_change(self, pod: PodInfo, old: Any, new: Any) -> ev.QueueingHint:
        constraints = self._constraints(pod, DO_NOT_SCHEDULE)
        if old.tolerations != new.tolerations and any(c.honor_node_taints
                                                      for c in constraints):
            return ev.QUEUE
        return self._label_change(constraints, old, new)

    def _after_assigned_pod_change(self, pod: PodInfo, old: Any,
                                   new: Any) -> ev.QueueingHint:
        """isSchedulableAfterAssignedPodChange: a pod in the pod's namespace that its
        constraints select arrived, left or changed labels."""
        def involved(other: PodInfo) -> bool:  # involvedInTopologySpreading
            return other.uid == pod.uid or (bool(other.node_name)
                                            and other.namespace == pod.namespace)

        if (new is not None and not involved(new)) or (old is not None and not involved(old)):
            return ev.QUEUE_SKIP
        constraints = self._constraints(pod, DO_NOT_SCHEDULE)
        if new is not None and old is not None:
            return self._label_change(constraints, old, new)
        changed: PodInfo = new if new is not None else old
        if any(c.selector(changed.labels) for c in constraints):
            return ev.QUEUE
        return ev.QUEUE_SKIP

    def _after_node_change(self, pod: PodInfo, old: Any, new: Any) -> ev.QueueingHint:
        constraints = self._constraints(pod, DO_NOT_SCHEDULE)
        before = ev.node_of(old)
        after = ev.node_of(new)
        was = before is not None and _has_keys(before.labels, constraints)
        now = after is not None and _has_keys(after.labels, constraints)
        if before is not None and after is not None:
            if was != now:
                return ev.QUEUE
            if now and (any(before.labels.get(c.topology_key) != after.labels.get(c.topology_key)
                            for c in constraints) or before.taints != after.taints):
                return ev.QUEUE
            return ev.QUEUE_SKIP
        if after is not None:
            return ev.QUEUE if now else ev.QUEUE_SKIP
        return ev.QUEUE if was else ev.QUEUE_SKIP


_MAX_INT64 = 2**63 - 1
# filter_nodes: a topologyKey with more domains is left to Filter per node
_MAX_DOMAINS_FOR_SETS = 64
_CONSTRAINTS_NOT_MATCH = Status.unschedulable(ERR_REASON_CONSTRAINTS_NOT_MATCH)
_NODE_LABEL_NOT_MATCH = Status.unresolvable(ERR_REASON_NODE_LABEL_NOT_MATCH)


def new(args: Mapping[str, Any] | None, handle: Handle) -> PodTopologySpread:
    return PodTopologySpread(parse_args(args), handle)


SPEC = PluginSpec(name=NAME, filter=new, score=new, default_args=DEFAULT_ARGS)
