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
