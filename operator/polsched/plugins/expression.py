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
names no variables other than pod, node and type names (free variables of its syntax
tree, polsched.cel.syntax); it is at most MAX_EXPRESSION_LENGTH characters; and its
estimated cost is within STATIC_COST_LIMIT.

Cost. CEL has no loops or recursion, so the work of one evaluation is bounded by the
expression and the sizes of what it reads. The CEL library offers neither a cost limit nor
a timeout, and an evaluation holds the event loop (and the GIL) until it ends, so no timer
can stop one. The budget is therefore enforced around the evaluation, as Kubernetes does
for its CEL (a static estimate at admission, a cost limit per call and a budget per
request):

- static: polsched.cel.cost estimates one evaluation from the parsed expression, with
  every list, map and string read from pod and node at its declared input bound
  (cost.ITEM_RULES, CHAR_RULES: 64 items, 4096 characters unless the API bounds them);
  over STATIC_COST_LIMIT units (about 10 ms) the policy is refused with the estimate.
- inputs: the pod's and the node's views are measured where the estimate read them; a
  list, map or string over its bound, or a view of more than cost.MAX_VIEW_VALUES values,
  is refused before any evaluation (the pod: UnschedulableAndUnresolvable on PreFilter;
  the node: UnschedulableAndUnresolvable for that node). So no evaluation can cost more
  than its static estimate plus the conversion of one view.
- per pod: each evaluation that runs (a cached outcome is free) is charged its cost with
  the sizes measured (the static estimate for expressions under CHEAP_COST) plus
  the conversion of every view converted for it (VIEW_VALUE_COST per value, one unit per
  VIEW_CHARS_PER_UNIT characters of its strings and keys), against POD_COST_BUDGET units
  (about 0.1 s) shared by the Expression entries of one scheduling attempt. Past it the
  filter rejects the remaining nodes (UnschedulableAndUnresolvable, BUDGET_MESSAGE) and
  the scorer fails the attempt: the pod gets a FailedScheduling naming the budget, and the
  loop moves on to other pods and policies.
- per entry: the same charges also draw on a token bucket of RATE_UNITS_PER_SECOND
  (about a fifth of the loop; RATE_BURST held), so many pods of one policy, each within
  its budget, cannot take turn after turn of the loop shared by every policy (it pops one
  pod per policy in turn). Out of units, nodes are refused as for the budget, with
  RATE_MESSAGE, and the pod is tried again later.

Measured with 5000 nodes of ~11 KB JSON (2 cores, Python 3.11, machine
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
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any

from polsched.cel import cost as celcost
from polsched.cel import regex as celregex
from polsched.cel import syntax as celsyntax
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
# The cost budgets, in polsched.cel.cost units (about 0.1 us each on the CEL library in
# use): one evaluation at the declared input bounds, and all evaluations of one pod's
# scheduling attempt (Kubernetes: PerCallLimit 1e6 and RuntimeCELCostBudget 1e7 of
# cel-go's cheaper units; ours are ~10 ms and ~0.1 s of loop time).
STATIC_COST_LIMIT = 100_000
POD_COST_BUDGET = 1_000_000
# Under this static estimate an evaluation is charged the estimate itself; above, it is
# estimated again with the sizes measured on its pod and node (cached by those sizes), so
# `'gpu' in node.metadata.labels`, 512 units at the declared 256 labels, is charged for
# the node's real labels: a cold cache of 5000 nodes must not look 5000 times that dear.
CHEAP_COST = 100
# The CEL library converts a view to its own values at about 1.5 us per value, and
# copies its strings and map keys at up to about 3 ns per character (measured: 25 strings
# of 60,000 characters, which count as 27 values, took as long as 1000 short values).
VIEW_VALUE_COST = 20
VIEW_CHARS_PER_UNIT = 16


def conversion_cost(values: int, chars: int) -> int:
    """What converting a view of `values` values holding `chars` characters costs."""
    return values * VIEW_VALUE_COST + chars // VIEW_CHARS_PER_UNIT

BUDGET_MESSAGE = (f"node(s) were not evaluated: the pod's Expression evaluations used "
                  f"their budget of {POD_COST_BUDGET} cost units for one scheduling attempt")
# Each Expression entry may spend at most this many units a second (about a fifth of the
# loop), as a token bucket holding two attempts' budgets: many pods of one policy, each
# within its own budget, cannot take the loop from the other policies in turn.
RATE_UNITS_PER_SECOND = 2_000_000
RATE_BURST = 2 * POD_COST_BUDGET
RATE_MESSAGE = (f"node(s) were not evaluated: this policy's Expression evaluations are "
                f"over their rate of {RATE_UNITS_PER_SECOND} cost units a second; the pod "
                f"is tried again later")
VARIABLES = ("pod", "node")
# How far into an object the context is trimmed: node.metadata.labels.zone keeps only
# that label. Any depth is exact; the bound only keeps the paths short.
_VIEW_DEPTH = 8

# A set of field paths to keep, or None for the whole object.
Paths = frozenset[tuple[str, ...]] | None
Sizes = Mapping[tuple[str, ...], int]


def read_paths(source: str, var: str) -> Paths:
    """The field paths of `var` the expression reads, up to _VIEW_DEPTH segments, or None
    when it reads the variable whole (bare, or indexed by a computed key). From the
    parsed expression, so comments and string literals never count."""
    return celsyntax.field_paths(celsyntax.parse(source), var, _VIEW_DEPTH)


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
    if _MATCHES in text:  # say what the author wrote (see _linear_regex)
        text = text.split("Error: ", 1)[-1]
    return text or type(err).__name__


@dataclass(frozen=True)
class Compiled:
    source: str
    program: cel.Program
    reads_pod: bool
    reads_node: bool
    pod_paths: Paths
    node_paths: Paths
    tree: celsyntax.Expr
    # One evaluation's cost with its inputs at their declared bounds.
    static_cost: int
    # The functions the program calls besides the library's: `matches` on RE2 (see
    # _linear_regex), or none.
    functions: Mapping[str, Callable[..., Any]]
    # The paths of pod and node data the estimate read, with their declared bounds:
    # what is measured and checked on the real objects.
    pod_checks: celcost.Checks
    node_checks: celcost.Checks

    # Refined estimates by the sizes they were computed from (nodes alike share them).
    _charges: dict[tuple[tuple[int, ...], tuple[int, ...]], int] = field(
        default_factory=dict, compare=False, repr=False)

    def charge(self, pod_sizes: Sizes, node_sizes: Sizes) -> int:
        """What one evaluation on inputs of these sizes costs."""
        if self.static_cost <= CHEAP_COST:
            return self.static_cost
        # the sizes' keys are always Checks.paths, in order: their values identify them
        key = (tuple(pod_sizes.values()), tuple(node_sizes.values()))
        known = self._charges.get(key)
        if known is None:
            if len(self._charges) >= 256:
                self._charges.clear()
            known = self._charges[key] = celcost.estimate(
                self.tree, celcost.Measured(pod_sizes, node_sizes))
        return known


def compile_expression(source: Any, path: str = "expression") -> Compiled:
    """Compile and check an expression; ArgsError at `path` when it cannot run or costs
    more than STATIC_COST_LIMIT."""
    if not isinstance(source, str) or not source.strip():
        raise ArgsError(path, "is required: a CEL expression over pod and node")
    if len(source) > MAX_EXPRESSION_LENGTH:
        raise ArgsError(path, f"is {len(source)} characters long; the limit is "
                              f"{MAX_EXPRESSION_LENGTH}")
    try:
        _cel().compile(source)
    except Exception as err:  # the library raises ValueError with the parser's message
        raise ArgsError(path, str(err)) from err
    try:
        tree = celsyntax.parse(source)
    except celsyntax.ParseError as err:
        raise ArgsError(path, f"cannot be read for its cost estimate: {err}") from err
    runnable, functions = _linear_regex(source, tree, path)
    program = _cel().compile(runnable)
    names = celsyntax.free_variables(tree)
    unknown = sorted(names - set(VARIABLES) - celsyntax.TYPE_NAMES)
    if unknown:
        raise ArgsError(path, f"undeclared reference to {', '.join(map(repr, unknown))}: "
                              "the variables are pod and node")
    bounds = celcost.Bounds()
    static = celcost.estimate(tree, bounds)
    if static > STATIC_COST_LIMIT:
        raise ArgsError(path, f"estimated cost {static} exceeds the budget "
                              f"{STATIC_COST_LIMIT} of one evaluation (every list, map and "
                              "string read from pod and node counted at its declared bound, "
                              "comprehensions multiplied by the size they walk; see "
                              "docs/api-reference.md, Expression budgets)")
    return Compiled(
        source=source,
        program=program,
        reads_pod="pod" in names,
        reads_node="node" in names,
        pod_paths=celsyntax.field_paths(tree, "pod", _VIEW_DEPTH),
        node_paths=celsyntax.field_paths(tree, "node", _VIEW_DEPTH),
        tree=tree,
        static_cost=static,
        functions=functions,
        pod_checks=celcost.Checks.of("pod", bounds),
        node_checks=celcost.Checks.of("node", bounds),
    )


# What `matches` is renamed to in the source the library compiles (an identifier no
# Kubernetes CEL library defines).
_MATCHES = "_polsched_re2_matches"


def _linear_regex(source: str, tree: celsyntax.Expr,
                  path: str) -> tuple[str, Mapping[str, Callable[..., Any]]]:
    """The source with every `matches` call running on RE2, and the function it calls.

    The library's own `matches` compiles its pattern on every evaluation (the Rust regex
    crate: `\\w{200}` ~110 ms each time), outside any budget. Renamed, the call reaches a
    function of ours instead (a library function called as a method gets its target as
    the first argument), with the constant patterns compiled here, once, and refused
    (ArgsError at `path`) when they are not RE2 or compile too large
    (polsched.cel.regex); a pattern computed at run time goes through its bounded cache.
    RE2 is also what Kubernetes' CEL runs (Go's regexp), so `\\w` is ASCII, as there."""
    constants: dict[str, celregex.Regex] = {}
    for pattern in _constant_patterns(tree):
        try:
            constants[pattern] = celregex.compile_regex(pattern)
        except celregex.RegexError as err:
            raise ArgsError(path, str(err)) from err
    tokens = celsyntax.tokenize(source)
    if any(t.kind == "ident" and t.text == _MATCHES for t in tokens):
        # the name is ours: called directly it would run a regex the cost model never saw
        raise ArgsError(path, f"undeclared reference to {_MATCHES!r}")
    starts = [t.pos for t, after in zip(tokens, tokens[1:], strict=False)
              if t.kind == "ident" and t.text == "matches" and after.text == "("]
    if not starts:
        return source, {}
    out, last = [], 0
    for start in starts:
        out.append(source[last:start])
        out.append(_MATCHES)
        last = start + len("matches")
    out.append(source[last:])

    def matches(subject: Any, pattern: Any) -> bool:
        if not isinstance(subject, str) or not isinstance(pattern, str):
            raise TypeError("no such overload: matches applies to a string and a string")
        compiled = constants.get(pattern)
        if compiled is None:
            compiled = celregex.compile_regex(pattern)
        return compiled.matches(subject)

    return "".join(out), {_MATCHES: matches}


def _constant_patterns(e: celsyntax.Expr) -> Iterator[str]:
    if isinstance(e, celsyntax.Call) and e.function == "matches" and e.args:
        last = e.args[-1]
        if isinstance(last, celsyntax.Literal) and isinstance(last.value, str):
            yield last.value
    for child in celsyntax.children(e):
        yield from _constant_patterns(child)


class Refused(str):
    """An outcome's error text when the evaluation did not run: an input over its bound
    (the node's), the pod's budget or the entry's rate spent. Filters reject with
    Unresolvable."""


# An evaluation's outcome: (True, value) or (False, error text or Refused).
Outcome = tuple[bool, Any]


class Budget:
    """The cost units one pod's scheduling attempt may still spend on evaluations, shared
    by every Expression entry of the pipeline (one per CycleState)."""

    __slots__ = ("left",)
    KEY = f"{NAME}/budget"

    def __init__(self, units: int = POD_COST_BUDGET) -> None:
        self.left = units

    @classmethod
    def of(cls, state: CycleState) -> Budget:
        b: Budget | None = state.get(cls.KEY)
        if b is None:
            b = cls()
            state.write(cls.KEY, b)
        return b


_SPENT: Outcome = (False, Refused(BUDGET_MESSAGE))
_THROTTLED: Outcome = (False, Refused(RATE_MESSAGE))


class Rate:
    """A token bucket of cost units: RATE_UNITS_PER_SECOND, up to RATE_BURST held."""

    __slots__ = ("tokens", "last", "clock", "rate", "burst")

    def __init__(self, clock: Callable[[], float] = time.monotonic,
                 rate: int = RATE_UNITS_PER_SECOND, burst: int = RATE_BURST) -> None:
        self.clock = clock
        self.rate = rate
        self.burst = burst
        self.tokens = float(burst)
        self.last = clock()

    def take(self, units: int) -> bool:
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
        self.last = now
        if units > self.tokens:
            return False
        self.tokens -= units
        return True


@dataclass(frozen=True)
class PodView:
    """The part of a pod an expression reads, and a key equal for pods whose parts are
    equal (the replicas of one Deployment, when the expression reads their labels);
    its measured sizes, what converting it costs (conversion_cost), and why it is refused
    (an input over its bound) or ""."""

    view: Json
    key: str
    sizes: Sizes
    conversion: int = 0
    refused: str = ""


_NO_POD = PodView({}, "", {})
# Outcomes kept per node version for pod-and-node expressions, one per distinct pod view.
_PER_NODE_POD_VIEWS = 16


class _NodeEntry:
    """What is cached for one node version of a pod-and-node expression: the converted
    view (None when the node is over an input bound: `refused`), its sizes, the outcomes
    per pod view."""

    __slots__ = ("raw", "context", "sizes", "refused", "outcomes")

    def __init__(self, raw: Mapping[str, Any], context: cel.Context | None, sizes: Sizes,
                 refused: Outcome | None) -> None:
        self.raw = raw
        self.context = context
        self.sizes = sizes
        self.refused = refused
        self.outcomes: dict[str, Outcome] = {}


class Evaluator:
    """Runs one compiled expression against (pod, node), caching per node version what
    does not depend on the pod, or depends on it only through an equal view. Charges
    each evaluation it runs to the pod's Budget; refuses inputs over their bounds.
    Never raises."""

    def __init__(self, compiled: Compiled, rate: Rate | None = None) -> None:
        self.c = compiled
        self.rate = rate or Rate()
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
        if not self.c.reads_pod:
            return _NO_POD
        view = project(pod.raw, self.c.pod_paths)
        try:  # before the key: an inflated pod is never serialized whole
            sizes, values, chars = celcost.measure(view, self.c.pod_checks)
        except celcost.InputBoundError as err:
            return PodView(view, "", {}, refused=(
                f"the pod exceeds an input bound of expression {self.c.source}: {err}"))
        return PodView(view, json.dumps(view, sort_keys=True, default=str), sizes,
                       conversion_cost(values, chars))

    def _measure_node(self, view: Json) -> tuple[Sizes, int, Outcome | None]:
        """The node view's sizes and conversion cost, or the refusal of a node over a
        bound."""
        try:
            sizes, values, chars = celcost.measure(view, self.c.node_checks)
            return sizes, conversion_cost(values, chars), None
        except celcost.InputBoundError as err:
            return {}, 0, (False, Refused(
                f"node(s) exceed an input bound of expression {self.c.source}: {err}"))

    def _run(self, context: dict[str, Any] | cel.Context) -> Outcome:
        try:
            return True, self.c.program.execute(context)
        except BaseException as err:  # the Rust core may raise pyo3's PanicException
            if isinstance(err, KeyboardInterrupt | SystemExit):
                raise
            return False, _error_text(err)

    def _spend(self, charge: int, budget: Budget) -> Outcome | None:
        """Charge the pod's budget and this entry's rate; the refusal when either is out
        (never cached: another pod, or a later second, may have the units)."""
        if charge > budget.left:
            return _SPENT
        if not self.rate.take(charge):
            return _THROTTLED
        budget.left -= charge
        return None

    def evaluate_pod(self, pod: PodView, budget: Budget) -> Outcome:
        """For per_pod expressions."""
        spent = self._spend(self.c.charge(pod.sizes, {}) + pod.conversion, budget)
        if spent is not None:
            return spent
        context: dict[str, Any] = {"pod": pod.view} if self.c.reads_pod else {}
        return self._run({**context, **self.c.functions} if self.c.functions else context)

    def evaluate(self, pod: PodView, node: NodeInfo, budget: Budget) -> Outcome:
        c = self.c
        if not c.reads_pod:
            # Identity of the node object, not (name, generation): see the module doc.
            hit = self._outcomes.get(node.name)
            if hit is not None and hit[0] is node.raw:
                return hit[1]
            view = project(node.raw, c.node_paths)
            sizes, conversion, refused = self._measure_node(view)
            if refused is None:
                spent = self._spend(c.charge({}, sizes) + conversion, budget)
                if spent is not None:
                    return spent
            outcome = refused or self._run(
                {"node": view, **self.c.functions} if c.functions else {"node": view})
            self._outcomes[node.name] = (node.raw, outcome)
            return outcome
        entry = self._entries.get(node.name)
        if entry is None or entry.raw is not node.raw:
            view = project(node.raw, c.node_paths)
            sizes, conversion, refused = self._measure_node(view)
            context = None
            if refused is None:
                spent = self._spend(conversion, budget)
                if spent is not None:
                    return spent
                try:
                    context = _cel().Context({"node": view}, dict(c.functions) or None)
                except Exception as err:  # noqa: BLE001 - a value the CEL core cannot hold
                    refused = (False, _error_text(err))
            entry = _NodeEntry(node.raw, context, sizes, refused)
            self._entries[node.name] = entry
        else:
            known = entry.outcomes.get(pod.key)
            if known is not None:
                return known
        if entry.context is None:
            assert entry.refused is not None
            return entry.refused
        spent = self._spend(c.charge(pod.sizes, entry.sizes) + pod.conversion, budget)
        if spent is not None:
            return spent
        # The context is ours alone and a cycle runs without awaiting, so replacing its
        # pod is safe; converting a small pod view is cheap next to converting the node.
        try:
            entry.context.add_variable("pod", pod.view)
        except Exception as err:  # noqa: BLE001 - a value the CEL core cannot hold
            return False, _error_text(err)
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
    budget: Budget
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
        # Refusals repeat per node: one Status per message.
        self._refusals: dict[str, Status] = {}

    def _status(self, outcome: Outcome) -> Status:
        ok, value = outcome
        if not ok:
            if isinstance(value, Refused):
                st = self._refusals.get(value)
                if st is None:
                    if len(self._refusals) > 256:
                        self._refusals.clear()
                    st = self._refusals[value] = Status.unresolvable(value)
                return st
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
            ps = _PodState(self._eval.pod_view(pod), Budget.of(state))
            if ps.pod.refused:
                ps.result = Status.unresolvable(ps.pod.refused)
            elif self._eval.per_pod:
                ps.result = self._status(self._eval.evaluate_pod(ps.pod, ps.budget))
            state.write(self._state_key, ps)
        return ps

    def pre_filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> Status:
        # Never Skip: the pipeline records skips by plugin name, which would also skip
        # every other Expression entry of the policy.
        self._eval.forget_missing(snapshot)
        ps = self._pod_state(state, pod)
        if ps.pod.refused:
            # A pod over an input bound fits no node: say so once, for the whole pod.
            result: Status = ps.result
            return result
        return SUCCESS

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        ps = self._pod_state(state, pod)
        if ps.pod.refused or self._eval.per_pod:
            result: Status = ps.result
            return result
        return self._status(self._eval.evaluate(ps.pod, node, ps.budget))

    def bind_filter(self, state: CycleState, pod: PodInfo) -> Callable[[NodeInfo], Status]:
        ps = self._pod_state(state, pod)
        if ps.pod.refused or self._eval.per_pod:
            result: Status = ps.result
            return lambda node: result
        evaluate, status, view, budget = self._eval.evaluate, self._status, ps.pod, ps.budget
        return lambda node: status(evaluate(view, node, budget))


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
            ps = _PodState(self._eval.pod_view(pod), Budget.of(state))
            if self._eval.per_pod and not ps.pod.refused:
                ps.result = self._eval.evaluate_pod(ps.pod, ps.budget)
            state.write(self._state_key, ps)
        return ps

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo],
                  snapshot: Snapshot) -> Status:
        # Never Skip, for the same reason as ExpressionFilter.pre_filter.
        self._eval.forget_missing(snapshot)
        ps = self._pod_state(state, pod)
        if ps.pod.refused:
            return Status.error(ps.pod.refused)
        return SUCCESS

    def _outcomes(self, state: CycleState, pod: PodInfo,
                  nodes: Sequence[NodeInfo]) -> list[Outcome] | Status:
        ps = self._pod_state(state, pod)
        if ps.pod.refused:
            return Status.error(ps.pod.refused)
        if self._eval.per_pod:
            outcomes = [ps.result] * len(nodes)
        else:
            evaluate, view, budget = self._eval.evaluate, ps.pod, ps.budget
            outcomes = [evaluate(view, n, budget) for n in nodes]
        spent = out_of_budget(outcomes)
        if spent is not None:
            # Scores of some nodes only would mislead: end the attempt, naming the budget.
            return Status.error(spent)
        return outcomes

    def raw_score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> float:
        outcomes = self._outcomes(state, pod, [node])
        return 0.0 if isinstance(outcomes, Status) else _number(outcomes[0])

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        return round(self.raw_score(state, pod, node))

    def score_nodes(self, state: CycleState, pod: PodInfo,
                    nodes: Sequence[NodeInfo]) -> list[int] | Status:
        outcomes = self._outcomes(state, pod, nodes)
        if isinstance(outcomes, Status):
            return outcomes
        return stash_raw(state, self._raw_key, [_number(o) for o in outcomes])

    def normalize_score(self, state: CycleState, pod: PodInfo, scores: list[int]) -> Status:
        normalize_raw(state, self._raw_key, scores)
        return SUCCESS


def out_of_budget(outcomes: Sequence[Outcome]) -> str | None:
    """The message of the first outcome refused for the budget or the rate, or None."""
    for o in outcomes:
        if o is _SPENT or o is _THROTTLED:
            return str(o[1])
    return None


def new_filter(args: Mapping[str, Any], handle: Handle) -> FilterPlugin:
    return ExpressionFilter(args)


def new_scorer(args: Mapping[str, Any], handle: Handle) -> ScorePlugin:
    return ExpressionScorer(args)


SPEC = PluginSpec(NAME, filter=new_filter, score=new_scorer)
