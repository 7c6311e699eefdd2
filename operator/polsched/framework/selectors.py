"""Label selectors and node selector requirements, compiled once and matched fast.

Semantics follow apimachinery's labels.Selector (LabelSelector: In, NotIn, Exists,
DoesNotExist) and component-helpers' nodeaffinity (NodeSelectorRequirement adds Gt, Lt).
Compilation validates and raises SelectorError with the field path relative to the
selector; matching never raises.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

Labels = Mapping[str, str]
Matcher = Callable[[Labels], bool]


class SelectorError(ValueError):
    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path
        self.message = message


LABEL_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
NODE_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")


def _int_or_none(s: str | None) -> int | None:
    if s is None:
        return None
    try:
        return int(s)
    except ValueError:
        return None


def compile_requirement(req: Mapping[str, Any], path: str = "",
                        operators: Sequence[str] = NODE_OPERATORS) -> Matcher:
    """One {key, operator, values} requirement."""
    if not isinstance(req, Mapping):
        raise SelectorError(path, "must be an object with key, operator and values")
    key = req.get("key")
    if not isinstance(key, str) or not key:
        raise SelectorError(f"{path}.key" if path else "key", "must be a non-empty string")
    op = req.get("operator")
    opath = f"{path}.operator" if path else "operator"
    vpath = f"{path}.values" if path else "values"
    if op not in operators:
        raise SelectorError(opath, f"unsupported operator {op!r}: "
                                   f"must be one of {', '.join(operators)}")
    values = req.get("values") or []
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise SelectorError(vpath, "must be a list of strings")
    if op in ("In", "NotIn"):
        if not values:
            raise SelectorError(vpath, f"must be non-empty when operator is {op}")
        vs = frozenset(values)
        if op == "In":
            return lambda labels: labels.get(key) in vs
        return lambda labels: labels.get(key) not in vs
    if op in ("Exists", "DoesNotExist"):
        if values:
            raise SelectorError(vpath, f"must be empty when operator is {op}")
        if op == "Exists":
            return lambda labels: key in labels
        return lambda labels: key not in labels
    if len(values) != 1 or _int_or_none(values[0]) is None:
        raise SelectorError(vpath, f"must be a single integer when operator is {op}")
    bound = int(values[0])
    if op == "Gt":
        def gt(labels: Labels) -> bool:
            v = _int_or_none(labels.get(key))
            return v is not None and v > bound
        return gt

    def lt(labels: Labels) -> bool:
        v = _int_or_none(labels.get(key))
        return v is not None and v < bound
    return lt


def compile_requirements(reqs: Any, path: str = "",
                         operators: Sequence[str] = NODE_OPERATORS) -> Matcher:
    """A list of requirements, ANDed; an empty list matches everything."""
    if reqs is None:
        reqs = []
    if not isinstance(reqs, list):
        raise SelectorError(path, "must be a list")
    matchers = [compile_requirement(r, f"{path}[{i}]", operators) for i, r in enumerate(reqs)]
    if not matchers:
        return lambda labels: True
    if len(matchers) == 1:
        return matchers[0]
    return lambda labels: all(m(labels) for m in matchers)


def compile_label_selector(sel: Any, path: str = "") -> Matcher:
    """A metav1.LabelSelector. An empty selector matches everything; None matches nothing
    (as metav1.LabelSelectorAsSelector)."""
    if sel is None:
        return lambda labels: False
    if not isinstance(sel, Mapping):
        raise SelectorError(path, "must be an object with matchLabels and/or matchExpressions")
    ml = sel.get("matchLabels") or {}
    mpath = f"{path}.matchLabels" if path else "matchLabels"
    if not isinstance(ml, Mapping) or not all(isinstance(v, str) for v in ml.values()):
        raise SelectorError(mpath, "must be a map of strings")
    items = tuple(ml.items())
    epath = f"{path}.matchExpressions" if path else "matchExpressions"
    expr = compile_requirements(sel.get("matchExpressions"), epath, LABEL_OPERATORS)
    if not sel.get("matchExpressions"):
        if not items:
            return lambda labels: True
        return lambda labels: all(labels.get(k) == v for k, v in items)
    return lambda labels: all(labels.get(k) == v for k, v in items) and expr(labels)


# -- node sets: a selector evaluated over the whole cluster at once ------------------------

# A parsed requirement: (key, operator, values); values are a frozenset of strings for In
# and NotIn, empty for Exists and DoesNotExist, and the bound for Gt and Lt.
Requirement = tuple[str, str, "frozenset[str] | int"]

_EMPTY: frozenset[str] = frozenset()


class NodeSet:
    """A set of node names, or its complement (every node but `names`): what a filter
    passes, computed from the snapshot's NodeIndex once per pod instead of matched per
    node. Closed under and_/or_ without listing every node."""

    __slots__ = ("names", "complement")

    def __init__(self, names: frozenset[str] | set[str], complement: bool = False) -> None:
        self.names = names
        self.complement = complement

    def __contains__(self, name: str) -> bool:
        return (name in self.names) is not self.complement

    def and_(self, other: NodeSet) -> NodeSet:
        a, b = self, other
        if not a.complement and not b.complement:
            return NodeSet(a.names & b.names)
        if a.complement and b.complement:
            return NodeSet(a.names | b.names, True)
        if a.complement:
            a, b = b, a
        return NodeSet(a.names - b.names)

    def or_(self, other: NodeSet) -> NodeSet:
        a, b = self, other
        if not a.complement and not b.complement:
            return NodeSet(a.names | b.names)
        if a.complement and b.complement:
            return NodeSet(a.names & b.names, True)
        if a.complement:
            a, b = b, a
        return NodeSet(b.names - a.names, True)


ALL_NODES = NodeSet(_EMPTY, True)
NO_NODES = NodeSet(_EMPTY)


def parse_requirements(reqs: Any) -> tuple[Requirement, ...]:
    """The structured form of a requirement list compile_requirements accepted (call it
    after compile_requirements, which validates)."""
    out: list[Requirement] = []
    for r in reqs or ():
        op = r["operator"]
        values = r.get("values") or []
        if op in ("In", "NotIn"):
            out.append((r["key"], op, frozenset(values)))
        elif op in ("Gt", "Lt"):
            out.append((r["key"], op, int(values[0])))
        else:
            out.append((r["key"], op, _EMPTY))
    return tuple(out)


LabelIndex = Mapping[str, Mapping[str, "set[str]"]]


def _union(sets: list[set[str]]) -> frozenset[str] | set[str]:
    if not sets:
        return _EMPTY
    if len(sets) == 1:
        return sets[0]
    return set().union(*sets)


def requirement_nodes(req: Requirement, index: LabelIndex) -> NodeSet:
    """The nodes whose labels satisfy one requirement, exactly as compile_requirement's
    matcher decides per node (a missing key fails In, Exists, Gt, Lt and passes NotIn and
    DoesNotExist)."""
    key, op, values = req
    by_value = index.get(key)
    if by_value is None:
        return ALL_NODES if op in ("NotIn", "DoesNotExist") else NO_NODES
    if op == "In" or op == "NotIn":
        assert isinstance(values, frozenset)
        hit = _union([s for v in values if (s := by_value.get(v)) is not None])
        return NodeSet(hit, op == "NotIn")
    if op == "Exists" or op == "DoesNotExist":
        return NodeSet(_union(list(by_value.values())), op == "DoesNotExist")
    assert isinstance(values, int)
    sets = []
    for v, s in by_value.items():
        n = _int_or_none(v)
        if n is not None and (n > values if op == "Gt" else n < values):
            sets.append(s)
    return NodeSet(_union(sets))


def requirements_nodes(reqs: Sequence[Requirement], index: LabelIndex) -> NodeSet:
    """The requirements ANDed (an empty list: every node)."""
    out = ALL_NODES
    for r in reqs:
        out = out.and_(requirement_nodes(r, index))
    return out
