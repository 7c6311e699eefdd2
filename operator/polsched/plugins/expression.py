"""Expression: polsched's own filter and scorer written in CEL.

Args `{expression: str (required), message: str (filter only, optional)}`. The expression
sees two variables, `pod` and `node`: the objects as the API server serves them (plain
maps and lists, e.g. `node.metadata.labels["zone"]`, `size(pod.metadata.name) <= 5`).
CEL comes from `common-expression-language` (a Rust core); its standard library is the
CEL core (size, has, all/exists/exists_one/map/filter, contains/startsWith/endsWith/
matches, int/uint/double/string/timestamp/duration conversions, type/dyn).

Filter: the expression must return a bool. true passes; false rejects the node
(Unschedulable) with `message`, or "node(s) didn't match expression <expression>". An
evaluation error (a missing key, a type mismatch) or a non-bool result rejects the node
(Unschedulable) with "node(s) could not evaluate expression <expression>: <error>"; it
never fails the pod's cycle.

Scorer: the expression must return a number (int, uint or double; a bool is not a
number); that number is the raw score. An error, a non-number or a non-finite double
counts as 0. Normalization is min-max (framework.normalize, after InterPodAffinity): the
lowest raw score gets 0, the highest 100; when all are equal all get 0.

Checked when the policy loads (ArgsError on `expression`): the expression compiles; it
names no variables other than pod, node, type names and variables bound by its own
comprehensions; it is at most MAX_EXPRESSION_LENGTH characters; comprehensions nest at
most MAX_COMPREHENSION_DEPTH deep.

Cost. CEL has no loops or recursion, so the work of one evaluation is bounded by the
expression's size and, for comprehensions, by the sizes of the lists they walk: at most
L**d element steps where L is the longest list or map walked and d <= 2 the nesting depth
(e.g. 50 images x 50 images). The library offers no cost limit or timeout, hence the static
bounds above. Measured with 5000 nodes of ~11 KB JSON (2 cores, Python 3.11, machine
under load, so upper figures): one bare evaluation of `20 - size(node.metadata.name)`
with a trimmed context about 5 us, with the whole node about 600 us; per node per pod,
a node-only expression served from the cache about 0.5 us; a pod-and-node one on labels
about 0.8 us when an equal pod view was seen on that node version, about 9 us when the
pod view is new. That is because:

- an expression that reads only `node` is evaluated once per node version and its result
  cached per node name with the node object it was computed from (the cache's raw dict,
  replaced on every update of the node; kept referenced, so a node deleted and recreated
  under the same name, or changed, is never mistaken for the one cached: a NodeInfo's
  generation restarts at 1 for a recreated node);
- one that reads only `pod` (or neither) is evaluated once per pod per cycle;
- one that reads both keeps, per node version, its outcomes for the last few distinct
  pod views (what the expression reads of the pod, so replicas share them);
- the context carries only the fields the expression names (`node.metadata.labels.zone`
  keeps that one label, not the node's other labels, images and managedFields), and for
  expressions reading both, the converted node is kept per node version and only the pod
  is added per evaluation.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

from polsched.framework.cycle_state import CycleState
from polsched.framework.interfaces import (
    FilterPlugin,
    Handle,
    PreFilterPlugin,
    PreScorePlugin,
    ScoreExtensions,
    ScorePlugin,
)
from polsched.framework.normalize import normalize_raw, stash_raw
from polsched.framework.registry import ArgsError, PluginSpec
from polsched.framework.status import SUCCESS, Status
from polsched.framework.types import NodeInfo, PodInfo, Snapshot
from polsched.objects import Json

if TYPE_CHECKING:
    import cel


@cache
def _cel() -> Any:
    """The cel module, imported when the first expression compiles: importing it (and
    the prompt_toolkit its package pulls in) is ~80 ms of every start-up otherwise."""
    import cel

    return cel

NAME = "Expression"

MAX_EXPRESSION_LENGTH = 2048
MAX_COMPREHENSION_DEPTH = 2
VARIABLES = ("pod", "node")
# Identifiers CEL resolves itself; the library lists them among an expression's variables.
_TYPE_NAMES = frozenset({"int", "uint", "double", "bool", "string", "bytes", "list", "map",
                         "null_type", "type", "dyn", "null"})
_MACROS = r"(?:all|exists_one|exists|map|filter)"
_MACRO_OPEN = re.compile(r"\.\s*" + _MACROS + r"\s*\(")
_MACRO_BOUND = re.compile(r"\.\s*" + _MACROS + r"\s*\(\s*([A-Za-z_][A-Za-z0-9_]*)\s*,")
_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
# How far into an object the context is trimmed: node.metadata.labels.zone keeps only
# that label. Any depth is exact; the bound only keeps the scan simple.
_VIEW_DEPTH = 8

# A set of field paths to keep, or None for the whole object.
Paths = frozenset[tuple[str, ...]] | None


def _comprehension_depth(source: str) -> int:
    """The deepest nesting of comprehension macros, ignoring text inside string literals."""
    opens = {m.end() - 1 for m in _MACRO_OPEN.finditer(source)}
    stack: list[bool] = []
    depth = deepest = 0
    i, n = 0, len(source)
    while i < n:
        c = source[i]
        if c in "'\"":
            quote = source[i:i + 3] if source[i:i + 3] in ("'''", '"""') else c
            raw = i > 0 and source[i - 1] in "rR"
            i += len(quote)
            while i < n and not source.startswith(quote, i):
                i += 2 if source[i] == "\\" and not raw else 1
            i += len(quote)
            continue
        if c == "(":
            is_macro = i in opens
            stack.append(is_macro)
            if is_macro:
                depth += 1
                deepest = max(deepest, depth)
        elif c == ")" and stack:
            if stack.pop():
                depth -= 1
        i += 1
    return deepest


def read_paths(source: str, var: str) -> Paths:
    """The field paths of `var` the expression reads, up to _VIEW_DEPTH segments, or None
    when it uses the variable in a way we do not trace (bare, indexed, optional field).
    Over-approximates: text in string literals and method names end a path early, which
    only keeps more of the object."""
    paths: set[tuple[str, ...]] = set()
    seg = re.compile(r"\s*\.\s*(" + _IDENT + r")")
    for m in re.finditer(r"(?<![.\w])" + var + r"(?!\w)", source):
        path: list[str] = []
        pos = m.end()
        while len(path) < _VIEW_DEPTH:
            s = seg.match(source, pos)
            if s is None:
                break
            after = source[s.end():].lstrip()
            if after.startswith("("):  # a method call on what came before, not a field
                break
            path.append(s.group(1))
            pos = s.end()
        if not path:
            return None
        paths.add(tuple(path))
    # A path that is a prefix of another keeps the whole subtree anyway.
    return frozenset(p for p in paths if not any(q != p and p[:len(q)] == q for q in paths))


def project(obj: Json, paths: Paths) -> Json:
    """The parts of `obj` on `paths`; absent fields stay absent so has() is unchanged."""
    if paths is None:
        return obj
    out: Json = {}
    for path in paths:
        src: Any = obj
        dst = out
        for i, key in enumerate(path):
            if not isinstance(src, Mapping) or key not in src:
                break
            src = src[key]
            if i == len(path) - 1:
                dst[key] = src
            else:
                nxt = dst.get(key)
                if not isinstance(nxt, dict):
                    nxt = dst[key] = {}
                dst = nxt
    return out


def _error_text(err: BaseException) -> str:
    if isinstance(err, KeyError) and err.args:
        return f"no such key: {err.args[0]}"
    text = str(err)
    return text or type(err).__name__


@dataclass(frozen=True)
class Compiled:
    source: str
    program: cel.Program
    reads_pod: bool
    reads_node: bool
    pod_paths: Paths
    node_paths: Paths


def compile_expression(source: Any, path: str = "expression") -> Compiled:
    """Compile and check an expression; ArgsError at `path` when it cannot run."""
    if not isinstance(source, str) or not source.strip():
        raise ArgsError(path, "is required: a CEL expression over pod and node")
    if len(source) > MAX_EXPRESSION_LENGTH:
        raise ArgsError(path, f"is {len(source)} characters long; the limit is "
                              f"{MAX_EXPRESSION_LENGTH}")
    try:
        program = _cel().compile(source)
    except Exception as err:  # the library raises ValueError with the parser's message
        raise ArgsError(path, str(err)) from err
    names = set(program.variables())
    bound = set(_MACRO_BOUND.findall(source))
    unknown = sorted(names - set(VARIABLES) - bound - _TYPE_NAMES)
    if unknown:
        raise ArgsError(path, f"undeclared reference to {', '.join(map(repr, unknown))}: "
                              "the variables are pod and node")
    depth = _comprehension_depth(source)
    if depth > MAX_COMPREHENSION_DEPTH:
        raise ArgsError(path, f"nests comprehensions (all, exists, exists_one, map, filter) "
                              f"{depth} deep; the limit is {MAX_COMPREHENSION_DEPTH}")
    return Compiled(
        source=source,
        program=program,
        reads_pod="pod" in names,
        reads_node="node" in names,
        pod_paths=read_paths(source, "pod"),
        node_paths=read_paths(source, "node"),
    )


# An evaluation's outcome: (True, value) or (False, error text).
Outcome = tuple[bool, Any]


@dataclass(frozen=True)
class PodView:
    """The part of a pod an expression reads, and a key equal for pods whose parts are
    equal (the replicas of one Deployment, when the expression reads their labels)."""

    view: Json
    key: str


_NO_POD = PodView({}, "")
# Outcomes kept per node version for pod-and-node expressions, one per distinct pod view.
_PER_NODE_POD_VIEWS = 16


class _NodeEntry:
    """What is cached for one node version of a pod-and-node expression."""

    __slots__ = ("raw", "context", "outcomes")

    def __init__(self, raw: Mapping[str, Any], context: cel.Context) -> None:
        self.raw = raw
        self.context = context
        self.outcomes: dict[str, Outcome] = {}


class Evaluator:
    """Runs one compiled expression against (pod, node), caching per node version what
    does not depend on the pod, or depends on it only through an equal view. Never
    raises."""

    def __init__(self, compiled: Compiled) -> None:
        self.c = compiled
        # node-only expressions: node name -> (the node object evaluated, outcome)
        self._outcomes: dict[str, tuple[Mapping[str, Any], Outcome]] = {}
        # pod-and-node expressions: node name -> the node's converted view and outcomes
        self._entries: dict[str, _NodeEntry] = {}

    @property
    def node_only(self) -> bool:
        return self.c.reads_node and not self.c.reads_pod

    @property
    def per_pod(self) -> bool:
        """The result does not depend on the node: evaluate once per pod."""
        return not self.c.reads_node

    def pod_view(self, pod: PodInfo) -> PodView:
        view = project(pod.raw, self.c.pod_paths) if self.c.reads_pod else {}
        return PodView(view, json.dumps(view, sort_keys=True, default=str))

    def _run(self, context: dict[str, Any] | cel.Context) -> Outcome:
        try:
            return True, self.c.program.execute(context)
        except BaseException as err:  # the Rust core may raise pyo3's PanicException
            if isinstance(err, KeyboardInterrupt | SystemExit):
                raise
            return False, _error_text(err)

    def evaluate_pod(self, pod: PodView) -> Outcome:
        """For per_pod expressions."""
        return self._run({"pod": pod.view} if self.c.reads_pod else {})

    def evaluate(self, pod: PodView, node: NodeInfo) -> Outcome:
        c = self.c
        if not c.reads_pod:
            # Identity of the node object, not (name, generation): see the module doc.
            hit = self._outcomes.get(node.name)
            if hit is not None and hit[0] is node.raw:
                return hit[1]
            outcome = self._run({"node": project(node.raw, c.node_paths)})
            self._outcomes[node.name] = (node.raw, outcome)
            return outcome
        entry = self._entries.get(node.name)
        if entry is None or entry.raw is not node.raw:
            entry = _NodeEntry(node.raw,
                               _cel().Context({"node": project(node.raw, c.node_paths)}))
            self._entries[node.name] = entry
        else:
            known = entry.outcomes.get(pod.key)
            if known is not None:
                return known
        # The context is ours alone and a cycle runs without awaiting, so replacing its
        # pod is safe; converting a small pod view is cheap next to converting the node.
        entry.context.add_variable("pod", pod.view)
        outcome = self._run(entry.context)
        if len(entry.outcomes) >= _PER_NODE_POD_VIEWS:
            entry.outcomes.clear()
        entry.outcomes[pod.key] = outcome
        return outcome

    def forget_missing(self, snapshot: Snapshot) -> None:
        """Drop cached nodes that left the cluster, once the caches outgrow it."""
        limit = 2 * len(snapshot) + 64
        by_name = snapshot.by_name
        if len(self._outcomes) > limit:
            self._outcomes = {k: v for k, v in self._outcomes.items() if k in by_name}
        if len(self._entries) > limit:
            self._entries = {k: v for k, v in self._entries.items() if k in by_name}


def _check_keys(args: Mapping[str, Any], allowed: tuple[str, ...], point: str) -> None:
    if not isinstance(args, Mapping):
        raise ArgsError("", f"must be an object with {' and '.join(allowed)}")
    for k in args:
        if k not in allowed:
            raise ArgsError(str(k), f"unknown field: Expression as a {point} takes "
                                    f"{' and '.join(allowed)}")


@dataclass
class _PodState:
    pod: PodView
    # For per_pod expressions: the one Status (filter) or raw score (scorer) of this pod.
    result: Any = None


class ExpressionFilter(PreFilterPlugin, FilterPlugin):
    NAME = NAME

    def __init__(self, args: Mapping[str, Any]) -> None:
        _check_keys(args, ("expression", "message"), "filter")
        self.compiled = compile_expression(args.get("expression"))
        message = args.get("message")
        if message is not None and (not isinstance(message, str) or not message.strip()):
            raise ArgsError("message", "must be a non-empty string")
        source = self.compiled.source
        self._rejection = Status.unschedulable(
            message or f"node(s) didn't match expression {source}")
        self._error_prefix = f"node(s) could not evaluate expression {source}: "
        self._eval = Evaluator(self.compiled)
        self._state_key = f"{NAME}/filter/{id(self)}"

    def _status(self, outcome: Outcome) -> Status:
        ok, value = outcome
        if not ok:
            return Status.unschedulable(self._error_prefix + value)
        if value is True:
            return SUCCESS
        if value is False:
            return self._rejection
        return Status.unschedulable(
            f"{self._error_prefix}returned {type(value).__name__} {value!r}, want bool")

    def _pod_state(self, state: CycleState, pod: PodInfo) -> _PodState:
        ps: _PodState | None = state.get(self._state_key)
        if ps is None:
            ps = _PodState(self._eval.pod_view(pod))
            if self._eval.per_pod:
                ps.result = self._status(self._eval.evaluate_pod(ps.pod))
            state.write(self._state_key, ps)
        return ps

    def pre_filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> Status:
        # Never Skip: the pipeline records skips by plugin name, which would also skip
        # every other Expression entry of the policy.
        self._eval.forget_missing(snapshot)
        self._pod_state(state, pod)
        return SUCCESS

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        ev = self._eval
        if ev.node_only:
            # the evaluator serves this from its per-node-version cache
            return self._status(ev.evaluate(_NO_POD, node))
        ps = self._pod_state(state, pod)
        if ev.per_pod:
            result: Status = ps.result
            return result
        return self._status(ev.evaluate(ps.pod, node))


def _number(outcome: Outcome) -> float:
    ok, value = outcome
    if not ok or isinstance(value, bool) or not isinstance(value, int | float):
        return 0.0
    number = float(value)
    return number if math.isfinite(number) else 0.0


class ExpressionScorer(PreScorePlugin, ScorePlugin, ScoreExtensions):
    NAME = NAME

    def __init__(self, args: Mapping[str, Any]) -> None:
        _check_keys(args, ("expression",), "scorer")
        self.compiled = compile_expression(args.get("expression"))
        self._eval = Evaluator(self.compiled)
        self._state_key = f"{NAME}/score/{id(self)}"
        self._raw_key = f"{NAME}/raw/{id(self)}"

    def _pod_state(self, state: CycleState, pod: PodInfo) -> _PodState:
        ps: _PodState | None = state.get(self._state_key)
        if ps is None:
            ps = _PodState(self._eval.pod_view(pod))
            if self._eval.per_pod:
                ps.result = _number(self._eval.evaluate_pod(ps.pod))
            state.write(self._state_key, ps)
        return ps

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo],
                  snapshot: Snapshot) -> Status:
        # Never Skip, for the same reason as ExpressionFilter.pre_filter.
        self._eval.forget_missing(snapshot)
        self._pod_state(state, pod)
        return SUCCESS

    def raw_score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> float:
        ps = self._pod_state(state, pod)
        if self._eval.per_pod:
            result: float = ps.result
            return result
        return _number(self._eval.evaluate(ps.pod, node))

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        return round(self.raw_score(state, pod, node))

    def score_nodes(self, state: CycleState, pod: PodInfo,
                    nodes: Sequence[NodeInfo]) -> list[int] | Status:
        ps = self._pod_state(state, pod)
        ev = self._eval
        if ev.per_pod:
            raw = [float(ps.result)] * len(nodes)
        else:
            evaluate, view = ev.evaluate, ps.pod
            raw = [_number(evaluate(view, n)) for n in nodes]
        return stash_raw(state, self._raw_key, raw)

    def normalize_score(self, state: CycleState, pod: PodInfo, scores: list[int]) -> Status:
        normalize_raw(state, self._raw_key, scores)
        return SUCCESS


def new_filter(args: Mapping[str, Any], handle: Handle) -> FilterPlugin:
    return ExpressionFilter(args)


def new_scorer(args: Mapping[str, Any], handle: Handle) -> ScorePlugin:
    return ExpressionScorer(args)


SPEC = PluginSpec(NAME, filter=new_filter, score=new_scorer)
