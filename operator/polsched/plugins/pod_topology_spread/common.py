"""What PodTopologySpread's filtering and scoring share (upstream's common.go): the
constraints of a pod (its own, or the default ones built from the Services and workload
controllers that select it), the node inclusion policies, and the counts of matching pods
per topology domain, kept across cycles (node_memo.Aggregate).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from polsched.framework import listers as ls
from polsched.framework.cycle_state import Budget
from polsched.framework.interfaces import Handle
from polsched.framework.nodeaffinity import REQUIRED, RequiredNodeAffinity
from polsched.framework.selectors import (
    Matcher,
    compile_label_selector,
)
from polsched.framework.types import NodeInfo, PodInfo, Snapshot
from polsched.plugins import taint_toleration
from polsched.plugins.node_memo import Aggregate, AggregateMemo, Entry, Share
from polsched.plugins.pod_topology_spread.args import (
    HONOR,
    IGNORE,
    LABEL_HOSTNAME,
    SCHEDULE_ANYWAY,
    SYSTEM_DEFAULTING,
    PodTopologySpreadArgs,
)

NAME = "PodTopologySpread"

MAX_INT32 = 2**31 - 1


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


class NodeInclusion:
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
                and not p.deleting:
            n += 1
    return n


def has_keys(labels: Mapping[str, str], constraints: Sequence[SpreadConstraint]) -> bool:
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


class SpreadBase:
    """The plugin's state and the helpers both cycles use; PodTopologySpread (plugin.py)
    is this with filtering.Filtering and scoring.Scoring."""

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
                   require_all: bool = True, budget: Budget | None = None) -> Aggregate:
        """Every node's matching pods per constraint and domain, summed (group i: domain
        value -> pods of constraint i), kept across cycles (node_memo.Aggregate) on
        everything a node's share depends on, the default constraints' selector included.
        A node takes part when it has every topologyKey (when `require_all`); a constraint
        counts it when its node inclusion policies let it in. When scoring, hostname
        constraints are not summed per domain: group -1-i holds node name -> pods of
        constraint i, for every node with the hostname label (Score counts those per node,
        without the inclusion policies, as upstream). `budget`: the attempt's time budget,
        checked once per node counted."""
        agg = self._counts.get((action, pod.namespace, _spread_signature(pod, action),
                                default_sig, require_all))
        scoring = action == SCHEDULE_ANYWAY
        namespace = pod.namespace
        inclusion: list[NodeInclusion] = []

        def share(node: NodeInfo) -> Share:
            labels = node.labels
            if require_all and not has_keys(labels, constraints):
                return ()
            if budget is not None:
                budget.check("%s, counting the pods its constraints select", NAME)
            if not inclusion:
                inclusion.append(NodeInclusion(pod))
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
                       budget: Budget | None = None) -> list[dict[str, int]] | None:
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
                    if budget is not None:
                        budget.check("%s, counting the pods its constraints select", NAME)
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
