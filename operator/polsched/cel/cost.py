"""What one evaluation of a CEL expression costs, estimated from its syntax tree.

Modelled on cel-go's checker/cost.go (`coster.cost`, `costComprehension`,
`functionCost`), the estimator Kubernetes runs for its per-expression static limit
(k8s.io/apiserver pkg/apis/cel/config.go PerCallLimit) and for CRD validation rules: every
node of the tree has a cost in units and, for lists, maps and strings, a maximum size. A
comprehension (all, exists, exists_one, map, filter) costs the size of what it walks times
the cost of one step, so nested ones multiply. The size of what an expression reads from
`pod` or `node` comes from a `Sizes`: at load, the declared input bounds (`Bounds`, like
a CRD schema's maxItems / maxLength); at run time, the sizes measured on the very objects
(`measure`), so one evaluation is charged what its inputs can make it cost.

Units are calibrated on the CEL library polsched runs (common-expression-language, Rust
core; 2-core machine, Python 3.11): one unit is about 0.1 us (0.07-0.13 measured). An
empty comprehension step is 4 units (~0.27 us); a `matches` call runs RE2 (polsched.cel.
regex), linear in subject x compiled program (at worst ~20 ns, 0.2 unit, per character
and instruction), its pattern compiled once when constant, else charged a compile (300
units plus 10 per pattern character) and the largest program; map and filter copy their
accumulated list at every step (quadratic: 800 elements ~30 ms), so they cost n*(n+1)/2
more; comparing or scanning strings is memcmp-fast (CostModel.string_factor, 0.01 unit a
character, ten times what was measured). The figures are in bench/NOTES.md ("CEL cost
guard").

No I/O.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from polsched.cel import regex
from polsched.cel.syntax import (
    Call,
    Comprehension,
    Expr,
    Ident,
    Index,
    ListLit,
    Literal,
    MapLit,
    Select,
    StructLit,
)

Path = tuple[str, ...]
# Path segments that are not field names: ITER is what a comprehension's variable takes
# (a list's elements, a map's keys), ANY what an index reads (a list's elements, a map's
# values). Field names cannot contain '#' or '*' in CEL selections.
ITER = "#iter"
ANY = "*"
ITEMS = "items"
CHARS = "chars"


@dataclass(frozen=True)
class CostModel:
    """The unit costs (see the module doc for the measurements)."""

    ident: int = 1
    select: int = 2
    call: int = 1
    list_base: int = 10
    map_base: int = 30
    struct_base: int = 40
    step: int = 4            # one comprehension step: its condition and accumulator
    accumulate: int = 11     # map/filter: building the one-element list they append
    string_factor: float = 0.01
    contains_factor: float = 0.1
    regex_base: int = 300
    regex_per_char: int = 10
    regex_scan_factor: float = 0.25
    # RE2's worst case, per subject character and program instruction (polsched.cel.regex)
    regex_inst_factor: float = 0.2


MODEL = CostModel()


class Sizes(Protocol):
    """The largest size a path of pod or node data can have: items of a list or map,
    characters of a string. A path is (variable, field, ..., ITER or ANY, field, ...)."""

    def items(self, path: Path) -> int: ...

    def chars(self, path: Path) -> int: ...


# -- the declared input bounds -------------------------------------------------------------

Rule = tuple[Path, int]

# Patterns: ANY matches any one segment (a field name, ANY, ITER); ITER only ITER.
# The first matching rule wins. Where the API server already bounds a value (a label value
# is at most 63 characters), the bound is the API's, so no valid object exceeds it.
ITEM_RULES: tuple[Rule, ...] = (
    # kubelet reports at most nodeStatusMaxImages (default 50) images
    (("node", "status", "images"), 64),
    (("node", "status", "images", ANY, "names"), 16),
    ((ANY, "metadata", "labels"), 256),
    ((ANY, "metadata", "annotations"), 256),
)
CHAR_RULES: tuple[Rule, ...] = (
    # label and annotation keys: an optional DNS prefix (253) and a 63-character name
    ((ANY, "metadata", "labels", ITER), 317),
    ((ANY, "metadata", "labels", ANY), 63),
    ((ANY, "metadata", "annotations", ITER), 317),
    # the API server caps all annotations of an object together at 256 KiB
    ((ANY, "metadata", "annotations", ANY), 262144),
    ((ANY, "metadata", "name"), 253),
    ((ANY, "metadata", "namespace"), 63),
)
DEFAULT_ITEMS = 64
DEFAULT_CHARS = 4096


def _matches(pattern: Path, path: Path) -> bool:
    if len(pattern) != len(path):
        return False
    for p, s in zip(pattern, path, strict=True):
        if p == ANY:
            continue
        if p != s:
            return False
    return True


def render(path: Path) -> str:
    """pod.spec.containers[*].image: how a path reads in an error."""
    out = path[0] if path else ""
    for seg in path[1:]:
        out += "[*]" if seg in (ITER, ANY) else f".{seg}"
    return out


@dataclass
class Bounds:
    """The declared input bounds, as Sizes. Remembers every (path, kind) the estimate
    asked about: those are what `measure` checks on the real objects."""

    item_rules: tuple[Rule, ...] = ITEM_RULES
    char_rules: tuple[Rule, ...] = CHAR_RULES
    default_items: int = DEFAULT_ITEMS
    default_chars: int = DEFAULT_CHARS
    asked: set[tuple[Path, str]] = field(default_factory=set)

    def bound(self, path: Path, kind: str) -> int:
        rules, default = ((self.item_rules, self.default_items) if kind == ITEMS
                          else (self.char_rules, self.default_chars))
        for pattern, n in rules:
            if _matches(pattern, path):
                return n
        return default

    def items(self, path: Path) -> int:
        self.asked.add((path, ITEMS))
        return self.bound(path, ITEMS)

    def chars(self, path: Path) -> int:
        self.asked.add((path, CHARS))
        return self.bound(path, CHARS)


# -- the estimate --------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Shape:
    """What a value may be: data at `path` (its sizes come from Sizes), or a value the
    expression built (a literal, a concatenation, a map() result) with its own sizes, or
    the union of `parts` (either branch of a ?:)."""

    path: Path | None = None
    items: int = 0
    chars: int = 0
    elem: Shape | None = None   # list elements, map values
    key: Shape | None = None    # map keys
    parts: tuple[Shape, ...] = ()


SCALAR = Shape()


@dataclass(frozen=True, slots=True)
class Estimate:
    cost: int
    shape: Shape


class _Coster:
    def __init__(self, sizes: Sizes, model: CostModel) -> None:
        self.sizes = sizes
        self.m = model
        self.scopes: list[tuple[str, Shape]] = []

    # sizes of a shape
    def items(self, s: Shape) -> int:
        if s.path is not None:
            return self.sizes.items(s.path)
        if s.parts:
            return max(self.items(p) for p in s.parts)
        return s.items

    def chars(self, s: Shape) -> int:
        if s.path is not None:
            return self.sizes.chars(s.path)
        if s.parts:
            return max(self.chars(p) for p in s.parts)
        return s.chars

    def elem(self, s: Shape) -> Shape:
        if s.path is not None:
            return Shape(s.path + (ANY,))
        if s.parts:
            return _union(self.elem(p) for p in s.parts)
        return s.elem or SCALAR

    def iter_var(self, s: Shape) -> Shape:
        if s.path is not None:
            return Shape(s.path + (ITER,))
        if s.parts:
            return _union(self.iter_var(p) for p in s.parts)
        return s.key or s.elem or SCALAR

    def field(self, s: Shape, name: str) -> Shape:
        if s.path is not None:
            return Shape(s.path + (name,))
        if s.parts:
            return _union(self.field(p, name) for p in s.parts)
        return s.elem or SCALAR

    def scan(self, s: Shape, factor: float) -> int:
        return math.ceil(self.chars(s) * factor)

    def cost(self, e: Expr) -> Estimate:
        m = self.m
        if isinstance(e, Literal):
            return Estimate(0, Shape(items=e.size, chars=e.size))
        if isinstance(e, Ident):
            for name, shape in reversed(self.scopes):
                if name == e.name:
                    return Estimate(m.ident, shape)
            return Estimate(m.ident, Shape((e.name,)))
        if isinstance(e, Select):
            op = self.cost(e.operand)
            if e.test_only:
                return Estimate(op.cost + m.select, SCALAR)
            return Estimate(op.cost + m.select, self.field(op.shape, e.field))
        if isinstance(e, Index):
            op, ix = self.cost(e.operand), self.cost(e.index)
            idx = e.index
            shape = (self.field(op.shape, idx.value)
                     if isinstance(idx, Literal) and isinstance(idx.value, str)
                     else self.elem(op.shape))
            return Estimate(op.cost + ix.cost + m.select, shape)
        if isinstance(e, ListLit):
            parts = [self.cost(x) for x in e.elements]
            n = len(parts)
            return Estimate(sum(p.cost for p in parts) + m.list_base + n,
                            Shape(items=n, elem=_union(p.shape for p in parts)))
        if isinstance(e, MapLit):
            keys = [self.cost(k) for k, _ in e.entries]
            values = [self.cost(v) for _, v in e.entries]
            n = len(keys)
            return Estimate(sum(p.cost for p in keys + values) + m.map_base + n,
                            Shape(items=n, key=_union(k.shape for k in keys),
                                  elem=_union(v.shape for v in values)))
        if isinstance(e, StructLit):
            return Estimate(sum(self.cost(v).cost for _, v in e.fields) + m.struct_base,
                            SCALAR)
        if isinstance(e, Comprehension):
            return self._comprehension(e)
        return self._call(e)

    def _comprehension(self, e: Comprehension) -> Estimate:
        """costComprehension: the range, then size(range) x one step."""
        m = self.m
        rng = self.cost(e.range)
        n = self.items(rng.shape)
        self.scopes.append((e.var, self.iter_var(rng.shape)))
        try:
            body = self.cost(e.body)
            pred = self.cost(e.predicate) if e.predicate is not None else None
        finally:
            self.scopes.pop()
        step = body.cost + m.step + (pred.cost if pred is not None else 0)
        total = rng.cost + n * step
        if e.macro in ("map", "filter"):
            total += n * m.accumulate + n * (n + 1) // 2
        if e.macro == "map":
            return Estimate(total, Shape(items=n, elem=body.shape))
        if e.macro == "filter":
            return Estimate(total, Shape(items=n, elem=self.iter_var(rng.shape)))
        return Estimate(total, SCALAR)

    def _call(self, e: Call) -> Estimate:
        m = self.m
        fn = e.function
        target = self.cost(e.target) if e.target is not None else None
        args = [self.cost(a) for a in e.args]
        base = sum(a.cost for a in args) + (target.cost if target is not None else 0)
        n = len(args)
        if fn in ("_&&_", "_||_"):
            return Estimate(base + (n - 1) * m.call, SCALAR)
        if fn == "_?_:_":
            return Estimate(args[0].cost + max(args[1].cost, args[2].cost) + m.call,
                            _union((args[1].shape, args[2].shape)))
        if fn in ("!_", "-_", "_-_", "_*_", "_/_", "_%_"):
            return Estimate(base + max(n - 1, 1) * m.call, SCALAR)
        if fn == "_+_":
            # strings and lists are copied into the result
            items = sum(self.items(a.shape) for a in args)
            chars = sum(self.chars(a.shape) for a in args)
            elem = _union(self.elem(a.shape) for a in args)
            return Estimate(base + (n - 1) * m.call + items + math.ceil(chars * m.string_factor),
                            Shape(items=items, chars=chars, elem=elem))
        if fn in ("_==_", "_!=_", "_<_", "_<=_", "_>_", "_>=_"):
            return Estimate(base + m.call + self._compare(e.args, args), SCALAR)
        if fn == "@in":
            # O(size of the list) with a comparison per element (a map is a lookup, but
            # the parse cannot tell them apart)
            container = args[1].shape
            member = Estimate(0, self.elem(container))
            per = m.call + self._compare(e.args[:1], [args[0], member])
            return Estimate(base + m.call + self.items(container) * per, SCALAR)
        this = target.shape if target is not None else (args[0].shape if args else SCALAR)
        if fn == "size":
            return Estimate(base + m.call, SCALAR)
        if fn in ("startsWith", "endsWith") and target is not None and n == 1:
            return Estimate(base + m.call + self.scan(args[0].shape, m.string_factor), SCALAR)
        if fn == "contains" and target is not None and n == 1:
            return Estimate(base + m.call + self.scan(target.shape, m.string_factor) *
                            max(1, self.scan(args[0].shape, m.contains_factor)), SCALAR)
        if fn == "matches" and n >= 1:
            subject = this if target is not None else args[0].shape
            pattern = e.args[-1]
            if isinstance(pattern, Literal) and isinstance(pattern.value, str):
                # compiled once, when the expression is (polsched.cel.regex)
                compile_cost = 0
                size = _program_size(pattern.value)
            else:
                compile_cost = m.regex_base + m.regex_per_char * self.chars(args[-1].shape)
                size = regex.MAX_PROGRAM_SIZE
            per_char = m.regex_scan_factor + m.regex_inst_factor * size
            return Estimate(base + m.call + compile_cost + self.scan(subject, per_char),
                            SCALAR)
        if fn in ("string", "bytes", "dyn") and n == 1:
            return Estimate(base + m.call + self.scan(args[0].shape, m.string_factor),
                            args[0].shape)
        if fn in ("max", "min"):
            return Estimate(base + m.call + sum(self.items(a.shape) for a in args), SCALAR)
        # int, uint, double, bool, type, timestamp, duration, the timestamp getters and
        # anything else: a constant, plus reading a string argument
        return Estimate(base + m.call + sum(self.scan(a.shape, m.string_factor)
                                            for a in args), SCALAR)

    def _compare(self, exprs: Iterable[Expr], ests: list[Estimate]) -> int:
        """A comparison: constant against a number literal, else a scan of the shorter
        string (equality of lists and maps is charged the same; their size is bounded
        by the view)."""
        if any(isinstance(x, Literal) and x.kind not in ("string", "bytes") for x in exprs):
            return 0
        return min(self.scan(a.shape, self.m.string_factor) for a in ests)


def _union(shapes: Iterable[Shape]) -> Shape:
    distinct: list[Shape] = []
    for s in shapes:
        for p in (s.parts or (s,)):
            if p not in distinct:
                distinct.append(p)
    if not distinct:
        return SCALAR
    if len(distinct) == 1:
        return distinct[0]
    return Shape(parts=tuple(distinct))


def estimate(expr: Expr, sizes: Sizes, model: CostModel = MODEL) -> int:
    """The cost of one evaluation of `expr` when its inputs are at most `sizes`."""
    return _Coster(sizes, model).cost(expr).cost


# -- the inputs, measured -------------------------------------------------------------------

class InputBoundError(ValueError):
    """A pod or node hands an expression more than the declared bounds allow."""

    def __init__(self, path: Path, size: int, bound: int, kind: str) -> None:
        what = "items" if kind == ITEMS else "characters"
        super().__init__(f"{render(path)} has {size} {what}; the bound is {bound}")
        self.path = path


# A view of a pod or node holds at most this many values (maps, lists, scalars): the CEL
# library converts the view at about 1.5 us per value, once per node version for the
# node and once per evaluation for the pod of a pod-and-node expression.
MAX_VIEW_VALUES = 2000


def count_view(obj: Any, limit: int = MAX_VIEW_VALUES) -> tuple[int, int]:
    """How many values `obj` holds (itself included) and how many characters its strings
    and map keys hold: the CEL library copies both into its own values, so converting a
    view costs by either (a view of 25 strings of 60,000 characters takes as long as one
    of 1000 short ones). Counting may stop once the values are past `limit`. Plain dicts
    and lists (what the API's JSON decodes to) take the fast path."""
    if type(obj) is dict:
        items: Iterable[Any] = obj.values()
        chars = sum(len(k) for k in obj if type(k) is str)
    elif type(obj) is list:
        items, chars = obj, 0
    elif isinstance(obj, Mapping):
        items = obj.values()
        chars = sum(len(k) for k in obj if isinstance(k, str | bytes))
    elif isinstance(obj, tuple):
        items, chars = obj, 0
    elif isinstance(obj, str | bytes):
        return 1, len(obj)
    else:
        return 1, 0
    n = 1
    for x in items:
        t = type(x)
        if t is str:
            n += 1
            chars += len(x)
        elif t is int or t is bool or t is float or x is None:
            n += 1
        else:
            values, inner = count_view(x, limit - n)
            n += values
            chars += inner
            if n > limit:
                return n, chars
    return n, chars


@dataclass(frozen=True)
class Measured:
    """Sizes measured on the objects of one evaluation: path -> the largest size seen
    there (`measure` of the pod's view and of the node's), 0 when absent."""

    pod: Mapping[Path, int]
    node: Mapping[Path, int]

    def items(self, path: Path) -> int:
        return (self.pod if path[0] == "pod" else self.node).get(path, 0)

    chars = items


def _reach(root: Any, path: Path) -> list[Any]:
    """The values at `path` below root (path without the variable name)."""
    values = [root]
    for seg in path:
        nxt: list[Any] = []
        for v in values:
            t = type(v)
            if t is dict or (t is not list and isinstance(v, Mapping)):
                if seg == ITER:
                    nxt.extend(v.keys())
                elif seg == ANY:
                    nxt.extend(v.values())
                elif seg in v:
                    nxt.append(v[seg])
            elif (t is list or t is tuple) and (seg == ITER or seg == ANY):
                nxt.extend(v)
        values = nxt
        if not values:
            break
    return values


@dataclass(frozen=True)
class Checks:
    """What `measure` checks on one variable's view: each path the estimate read, with
    its declared bounds (items, characters), resolved once when the expression loads."""

    var: str
    paths: tuple[tuple[Path, int, int], ...]

    @classmethod
    def of(cls, var: str, bounds: Bounds) -> Checks:
        paths = sorted({p for p, _ in bounds.asked if p and p[0] == var})
        return cls(var, tuple((p, bounds.bound(p, ITEMS), bounds.bound(p, CHARS))
                              for p in paths))


def measure(view: Any, checks: Checks) -> tuple[dict[Path, int], int, int]:
    """The sizes of `view` (the data of the variable checks.var) at the paths the
    estimate read, and how many values and characters the view holds (count_view: what
    converting it costs); InputBoundError naming the first path over its declared bound,
    or when the view holds more than MAX_VIEW_VALUES."""
    n, chars = count_view(view)
    if n > MAX_VIEW_VALUES:
        raise InputBoundError((checks.var,), n, MAX_VIEW_VALUES, ITEMS)
    out: dict[Path, int] = {}
    for path, max_items, max_chars in checks.paths:
        largest = 0
        for v in _reach(view, path[1:]):
            t = type(v)
            if t is str or t is bytes:
                if len(v) > max_chars:
                    raise InputBoundError(path, len(v), max_chars, CHARS)
            elif t is dict or t is list or isinstance(v, Mapping | tuple):
                if len(v) > max_items:
                    raise InputBoundError(path, len(v), max_items, ITEMS)
            else:
                continue
            if len(v) > largest:
                largest = len(v)
        out[path] = largest
    return out, n, chars


def _program_size(pattern: str) -> int:
    """A constant pattern's RE2 program size; one that does not compile costs nothing
    here, since compiling the expression refuses it (the caller names the field)."""
    try:
        return regex.compile_regex(pattern).program_size
    except regex.RegexError:
        return 0
