"""Bounds on what one pod may ask of the scheduler (issue 36, "bounded pods").

The API server admits a pod of up to etcd's 1.5 MiB: thousands of affinity terms,
spread constraints or tolerations, selectors with tens of thousands of values. Each of
them is evaluated against other pods and nodes in every attempt, so such a pod costs
seconds of the loop every policy shares (1000-3000 terms: 1-6 s an attempt). A pod over
any bound below is refused before it is queued, with a FailedScheduling event and
PodScheduled=False naming the field, the count and the bound; it is never attempted
(scheduler.profile keeps it apart, counted as gated) until an update brings it within
bounds.

The bounds are far above what real workloads write (a handful of terms, a few dozen
tolerations, selectors of tens of values) and far below what stalls the loop. They are
documented in docs/security.md ("Bounded pods"); change both together.

Pure: reads the pod's spec only, no plugin, cache or client.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

# Terms in one list: nodeAffinity's required nodeSelectorTerms and its preferred terms,
# and each of podAffinity's and podAntiAffinity's required and preferred lists.
MAX_TERMS = 64
# Requirements in one selector: matchExpressions, matchFields, matchLabels; and the
# entries of spec.nodeSelector.
MAX_REQUIREMENTS = 64
# Values of one requirement (In / NotIn), and a pod term's namespaces, matchLabelKeys,
# mismatchLabelKeys.
MAX_VALUES = 1024
MAX_TOPOLOGY_SPREAD_CONSTRAINTS = 32
MAX_TOLERATIONS = 128

DOC = 'see "Bounded pods" in polsched\'s docs/security.md'


def violation(spec: Mapping[str, Any]) -> str:
    """The first bound the pod spec breaks, as a message naming the field ("" within
    bounds)."""
    return next(_violations(spec), "")


def _over(value: Any, path: str, what: str, bound: int) -> Iterator[str]:
    if isinstance(value, list | dict) and len(value) > bound:
        yield (f"{path} has {len(value)} {what}, over the bound of {bound} this scheduler "
               f"accepts; the pod is not scheduled until it is within bounds ({DOC})")


def _items(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _violations(spec: Mapping[str, Any]) -> Iterator[str]:
    yield from _over(spec.get("nodeSelector"), "spec.nodeSelector", "entries",
                     MAX_REQUIREMENTS)
    yield from _over(spec.get("tolerations"), "spec.tolerations", "tolerations",
                     MAX_TOLERATIONS)
    spread = spec.get("topologySpreadConstraints")
    yield from _over(spread, "spec.topologySpreadConstraints", "constraints",
                     MAX_TOPOLOGY_SPREAD_CONSTRAINTS)
    for i, c in enumerate(_items(spread)):
        c = _map(c)
        path = f"spec.topologySpreadConstraints[{i}]"
        yield from _label_selector(c.get("labelSelector"), f"{path}.labelSelector")
        yield from _over(c.get("matchLabelKeys"), f"{path}.matchLabelKeys", "keys",
                         MAX_VALUES)
    affinity = _map(spec.get("affinity"))
    yield from _node_affinity(_map(affinity.get("nodeAffinity")),
                              "spec.affinity.nodeAffinity")
    for kind in ("podAffinity", "podAntiAffinity"):
        yield from _pod_affinity(_map(affinity.get(kind)), f"spec.affinity.{kind}")


def _requirements(sel: Mapping[str, Any], key: str, path: str) -> Iterator[str]:
    reqs = sel.get(key)
    yield from _over(reqs, f"{path}.{key}", "requirements", MAX_REQUIREMENTS)
    for j, r in enumerate(_items(reqs)):
        yield from _over(_map(r).get("values"), f"{path}.{key}[{j}].values", "values",
                         MAX_VALUES)


def _node_selector_term(term: Any, path: str) -> Iterator[str]:
    term = _map(term)
    for key in ("matchExpressions", "matchFields"):
        yield from _requirements(term, key, path)


def _label_selector(sel: Any, path: str) -> Iterator[str]:
    sel = _map(sel)
    yield from _over(sel.get("matchLabels"), f"{path}.matchLabels", "labels",
                     MAX_REQUIREMENTS)
    yield from _requirements(sel, "matchExpressions", path)


def _node_affinity(na: Mapping[str, Any], path: str) -> Iterator[str]:
    required = _map(na.get("requiredDuringSchedulingIgnoredDuringExecution"))
    terms = required.get("nodeSelectorTerms")
    rpath = f"{path}.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
    yield from _over(terms, rpath, "terms", MAX_TERMS)
    for i, t in enumerate(_items(terms)):
        yield from _node_selector_term(t, f"{rpath}[{i}]")
    preferred = na.get("preferredDuringSchedulingIgnoredDuringExecution")
    ppath = f"{path}.preferredDuringSchedulingIgnoredDuringExecution"
    yield from _over(preferred, ppath, "terms", MAX_TERMS)
    for i, p in enumerate(_items(preferred)):
        yield from _node_selector_term(_map(p).get("preference"), f"{ppath}[{i}].preference")


def _pod_term(term: Any, path: str) -> Iterator[str]:
    term = _map(term)
    yield from _label_selector(term.get("labelSelector"), f"{path}.labelSelector")
    yield from _label_selector(term.get("namespaceSelector"), f"{path}.namespaceSelector")
    for key, what in (("namespaces", "namespaces"), ("matchLabelKeys", "keys"),
                      ("mismatchLabelKeys", "keys")):
        yield from _over(term.get(key), f"{path}.{key}", what, MAX_VALUES)


def _pod_affinity(pa: Mapping[str, Any], path: str) -> Iterator[str]:
    required = pa.get("requiredDuringSchedulingIgnoredDuringExecution")
    rpath = f"{path}.requiredDuringSchedulingIgnoredDuringExecution"
    yield from _over(required, rpath, "terms", MAX_TERMS)
    for i, t in enumerate(_items(required)):
        yield from _pod_term(t, f"{rpath}[{i}]")
    preferred = pa.get("preferredDuringSchedulingIgnoredDuringExecution")
    ppath = f"{path}.preferredDuringSchedulingIgnoredDuringExecution"
    yield from _over(preferred, ppath, "terms", MAX_TERMS)
    for i, p in enumerate(_items(preferred)):
        yield from _pod_term(_map(p).get("podAffinityTerm"), f"{ppath}[{i}].podAffinityTerm")
