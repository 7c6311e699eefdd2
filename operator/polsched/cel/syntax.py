"""A parser of CEL expressions into a small syntax tree.

The grammar is the one of the CEL language definition (cel-spec doc/langdef.md, "Syntax"),
read as a recursive descent:

    Expr           = ConditionalOr ["?" ConditionalOr ":" Expr]
    ConditionalOr  = [ConditionalOr "||"] ConditionalAnd
    ConditionalAnd = [ConditionalAnd "&&"] Relation
    Relation       = [Relation Relop] Addition          Relop = < <= >= > == != in
    Addition       = [Addition ("+" | "-")] Multiplication
    Multiplication = [Multiplication ("*" | "/" | "%")] Unary
    Unary          = Member | "!" {"!"} Member | "-" {"-"} Member
    Member         = Primary | Member "." IDENT ["(" [ExprList] ")"] | Member "[" Expr "]"
    Primary        = ["."] IDENT ["(" [ExprList] ")"] | "(" Expr ")"
                   | "[" [ExprList] [","] "]" | "{" [MapInits] [","] "}"
                   | ["."] IDENT {"." IDENT} "{" [FieldInits] [","] "}" | LITERAL

with the lexis of the same document: `//` comments to the end of the line; string
literals in single, double or triple quotes, raw (r) and bytes (b) prefixes, escapes;
int, uint (u suffix), hex and double literals; reserved words. The macros (has, all,
exists, exists_one, map, filter) become their own nodes, as cel-go's parser expands
them: a comprehension names the list it walks and the variable it binds.

Used for what the text cannot tell reliably (a quote inside a comment, a bracket inside
a string): the cost estimate, the variables an expression reads and the fields of them.
The CEL library still compiles and runs the expression; this parser only has to agree
with it on the structure. Chains of one operator (a && b && c, a + b + c) become one
n-ary call, so a long chain is a wide tree, not a deep one; nesting (parentheses,
brackets, calls, unary operators, the else branch of ?:) is limited to MAX_NESTING, below
the recursion either parser could take, and the tree's depth (a selection chain adds a
level per field) to MAX_DEPTH, for the recursive readers of the tree.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

MAX_NESTING = 40
# The deepest syntax tree the readers of this module (and the cost estimate) walk
# recursively: a selection chain a.b.c... adds a level per field without nesting.
MAX_DEPTH = 100

RESERVED = frozenset({
    "as", "break", "const", "continue", "else", "for", "function", "if", "import", "let",
    "loop", "package", "namespace", "return", "var", "void", "while",
})
# Identifiers CEL resolves itself (type names, `null`): the CEL library lists them among an
# expression's variables, so the checks for undeclared references leave them out.
TYPE_NAMES = frozenset({"int", "uint", "double", "bool", "string", "bytes", "list", "map",
                        "null_type", "type", "dyn", "null"})
# Macros as cel-go's parser/macro.go expands them: name -> the argument counts it takes
# as a member call (all three-argument forms but map's are plain calls).
COMPREHENSIONS = {"all": (2,), "exists": (2,), "exists_one": (2,), "map": (2, 3),
                  "filter": (2,)}


class ParseError(ValueError):
    """The expression is not CEL; the message says where (1-based column)."""

    def __init__(self, message: str, pos: int) -> None:
        super().__init__(f"{message} at column {pos + 1}")
        self.pos = pos


@dataclass(frozen=True, slots=True)
class Literal:
    kind: str  # int, uint, double, string, bytes, bool, null
    value: object
    # The length of a string (characters) or bytes literal, else 0.
    size: int = 0


@dataclass(frozen=True, slots=True)
class Ident:
    name: str


@dataclass(frozen=True, slots=True)
class Select:
    operand: Expr
    field: str
    # has(a.b): a presence test, not a read of the field.
    test_only: bool = False


@dataclass(frozen=True, slots=True)
class Index:
    operand: Expr
    index: Expr


@dataclass(frozen=True, slots=True)
class Call:
    """A function or an operator. Operators use cel-go's names: _&&_, _||_, _?_:_, !_,
    -_, _+_, _-_, _*_, _/_, _%_, _==_, _!=_, _<_, _<=_, _>_, _>=_, @in. _&&_, _||_ and
    the arithmetic operators of one chain are n-ary."""

    function: str
    target: Expr | None
    args: tuple[Expr, ...]


@dataclass(frozen=True, slots=True)
class ListLit:
    elements: tuple[Expr, ...]


@dataclass(frozen=True, slots=True)
class MapLit:
    entries: tuple[tuple[Expr, Expr], ...]


@dataclass(frozen=True, slots=True)
class StructLit:
    type_name: str
    fields: tuple[tuple[str, Expr], ...]


@dataclass(frozen=True, slots=True)
class Comprehension:
    """range.macro(var, body), or range.map(var, predicate, body)."""

    macro: str
    range: Expr
    var: str
    body: Expr
    predicate: Expr | None = None


Expr = (Literal | Ident | Select | Index | Call | ListLit | MapLit | StructLit
        | Comprehension)
# A parser method that reads one operand.
_Rule = Callable[[], Expr]


# -- lexis ------------------------------------------------------------------------------

_IDENT = re.compile(r"[_a-zA-Z][_a-zA-Z0-9]*")
_NUMBER = re.compile(
    r"(?P<hex>0[xX][0-9a-fA-F]+)(?P<hexu>[uU])?"
    r"|(?P<double>[0-9]*\.[0-9]+(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+)"
    r"|(?P<int>[0-9]+)(?P<intu>[uU])?")
_PUNCT = ("&&", "||", "==", "!=", "<=", ">=", "<", ">", "!", "?", ":", "+", "-", "*", "/",
          "%", "(", ")", "[", "]", "{", "}", ".", ",")
_SIMPLE_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t",
                   "v": "\v", "\\": "\\", "'": "'", '"': '"', "`": "`", "?": "?"}


@dataclass(frozen=True, slots=True)
class Token:
    kind: str  # ident, literal, punct, eof
    text: str
    pos: int
    value: Literal | None = None


def _string(source: str, i: int) -> tuple[Literal, int]:
    """The string or bytes literal starting at i (at its prefix or quote)."""
    start = i
    raw = is_bytes = False
    while source[i] in "rRbB":
        if source[i] in "rR":
            raw = True
        else:
            is_bytes = True
        i += 1
    quote = source[i:i + 3] if source[i:i + 3] in ("'''", '"""') else source[i]
    i += len(quote)
    out: list[str] = []
    n = len(source)
    while True:
        if i >= n:
            raise ParseError("unterminated string literal", start)
        if source.startswith(quote, i):
            i += len(quote)
            break
        c = source[i]
        if c in "\r\n" and len(quote) == 1:
            raise ParseError("newline in a single-quoted string literal", i)
        if c == "\\" and not raw:
            if i + 1 >= n:
                raise ParseError("unterminated string literal", start)
            e = source[i + 1]
            if e in _SIMPLE_ESCAPES:
                out.append(_SIMPLE_ESCAPES[e])
                i += 2
            elif e in "xX" or e in "uU":
                width = {"x": 2, "X": 2, "u": 4, "U": 8}[e]
                digits = source[i + 2:i + 2 + width]
                if len(digits) != width or not re.fullmatch(r"[0-9a-fA-F]+", digits):
                    raise ParseError(f"bad escape \\{e}{digits}", i)
                out.append(chr(min(int(digits, 16), 0x10FFFF)))
                i += 2 + width
            elif e in "0123":
                digits = source[i + 1:i + 4]
                if not re.fullmatch(r"[0-7]{3}", digits):
                    raise ParseError(f"bad octal escape \\{digits}", i)
                out.append(chr(int(digits, 8)))
                i += 4
            else:
                raise ParseError(f"unknown escape \\{e}", i)
            continue
        out.append(c)
        i += 1
    text = "".join(out)
    if is_bytes:
        size = len(text.encode("utf-8", "surrogatepass"))
        return Literal("bytes", text, size), i
    return Literal("string", text, len(text)), i


def tokenize(source: str) -> list[Token]:
    tokens: list[Token] = []
    i, n = 0, len(source)
    while i < n:
        c = source[i]
        if c in " \t\r\n\f\v":
            i += 1
            continue
        if source.startswith("//", i):
            end = source.find("\n", i)
            i = n if end < 0 else end + 1
            continue
        m = _IDENT.match(source, i)
        if m is not None:
            word = m.group()
            nxt = source[m.end():m.end() + 1]
            if (len(word) <= 2 and set(word.lower()) <= {"r", "b"} and nxt in ("'", '"')
                    and len(set(word.lower())) == len(word)):
                lit, i = _string(source, i)
                tokens.append(Token("literal", source[m.start():i], m.start(), lit))
                continue
            if word in ("true", "false"):
                tokens.append(Token("literal", word, i, Literal("bool", word == "true")))
            elif word == "null":
                tokens.append(Token("literal", word, i, Literal("null", None)))
            elif word == "in":
                tokens.append(Token("punct", word, i))
            else:  # a reserved word is a field name after '.': the parser decides
                tokens.append(Token("ident", word, i))
            i = m.end()
            continue
        if c in "'\"":
            lit, end = _string(source, i)
            tokens.append(Token("literal", source[i:end], i, lit))
            i = end
            continue
        if c.isdigit() or (c == "." and source[i + 1:i + 2].isdigit()):
            m = _NUMBER.match(source, i)
            assert m is not None
            if m.group("hex"):
                value = int(m.group("hex"), 16)
                lit = Literal("uint" if m.group("hexu") else "int", value)
            elif m.group("double"):
                lit = Literal("double", float(m.group("double")))
            else:
                lit = Literal("uint" if m.group("intu") else "int", int(m.group("int")))
            tokens.append(Token("literal", m.group(), i, lit))
            i = m.end()
            continue
        for p in _PUNCT:
            if source.startswith(p, i):
                tokens.append(Token("punct", p, i))
                i += len(p)
                break
        else:
            raise ParseError(f"unexpected character {c!r}", i)
    tokens.append(Token("eof", "", n))
    return tokens


# -- syntax -----------------------------------------------------------------------------

_RELOPS = {"<": "_<_", "<=": "_<=_", ">": "_>_", ">=": "_>=_", "==": "_==_",
           "!=": "_!=_", "in": "@in"}
_ADDOPS = {"+": "_+_", "-": "_-_"}
_MULOPS = {"*": "_*_", "/": "_/_", "%": "_%_"}


class _Parser:
    def __init__(self, source: str) -> None:
        self.tokens = tokenize(source)
        self.i = 0
        self.nesting = 0

    @property
    def tok(self) -> Token:
        return self.tokens[self.i]

    def _next(self) -> Token:
        t = self.tokens[self.i]
        self.i += 1
        return t

    def _accept(self, text: str) -> bool:
        t = self.tok
        if t.kind == "punct" and t.text == text:
            self.i += 1
            return True
        return False

    def _expect(self, text: str) -> None:
        if not self._accept(text):
            t = self.tok
            found = "the end" if t.kind == "eof" else repr(t.text)
            raise ParseError(f"expected {text!r}, found {found}", t.pos)

    def _enter(self) -> None:
        self.nesting += 1
        if self.nesting > MAX_NESTING:
            raise ParseError(f"nests deeper than {MAX_NESTING} levels (parentheses, "
                             "brackets, calls, unary operators, conditionals)", self.tok.pos)

    def _leave(self) -> None:
        self.nesting -= 1

    def parse(self) -> Expr:
        e = self.expr()
        if self.tok.kind != "eof":
            raise ParseError(f"unexpected {self.tok.text!r}", self.tok.pos)
        return e

    def expr(self) -> Expr:
        cond = self._chain(self._and, "||", "_||_")
        if self._accept("?"):
            yes = self._chain(self._and, "||", "_||_")
            self._expect(":")
            self._enter()  # a ? b : c ? d : ... recurses once per branch
            no = self.expr()
            self._leave()
            cond = Call("_?_:_", None, (cond, yes, no))
        return cond

    def _chain(self, operand: _Rule, op: str, function: str) -> Expr:
        args = [operand()]
        while self._accept(op):
            args.append(operand())
        return args[0] if len(args) == 1 else Call(function, None, tuple(args))

    def _and(self) -> Expr:
        return self._chain(self._relation, "&&", "_&&_")

    def _relation(self) -> Expr:
        left = self._binary(self._multiplication, _ADDOPS)
        while self.tok.kind == "punct" and self.tok.text in _RELOPS:
            fn = _RELOPS[self._next().text]
            left = Call(fn, None, (left, self._binary(self._multiplication, _ADDOPS)))
        return left

    def _multiplication(self) -> Expr:
        return self._binary(self._unary, _MULOPS)

    def _binary(self, operand: _Rule, ops: dict[str, str]) -> Expr:
        """Left-associative; a run of one operator is one n-ary call."""
        left = operand()
        while self.tok.kind == "punct" and self.tok.text in ops:
            fn = ops[self._next().text]
            right = operand()
            if isinstance(left, Call) and left.function == fn and left.target is None \
                    and fn in ("_+_", "_*_"):
                left = Call(fn, None, (*left.args, right))
            else:
                left = Call(fn, None, (left, right))
        return left

    def _unary(self) -> Expr:
        t = self.tok
        if t.kind == "punct" and t.text in ("!", "-"):
            self._next()
            if t.text == "-" and self.tok.kind == "literal" and \
                    self.tok.value is not None and self.tok.value.kind in ("int", "double"):
                # a negative number literal, as CEL's lexer reads -1
                lit = self._next().value
                assert lit is not None and isinstance(lit.value, int | float)
                return self._member_tail(Literal(lit.kind, -lit.value))
            self._enter()
            operand = self._unary()
            self._leave()
            return Call("!_" if t.text == "!" else "-_", None, (operand,))
        return self._member_tail(self._primary())

    def _args(self, close: str) -> tuple[Expr, ...]:
        args: list[Expr] = []
        if self._accept(close):
            return ()
        while True:
            args.append(self.expr())
            if self._accept(close):
                return tuple(args)
            self._expect(",")
            if self._accept(close):  # a trailing comma
                return tuple(args)

    def _member_tail(self, e: Expr) -> Expr:
        while True:
            if self._accept("."):
                t = self._next()
                if t.kind != "ident":
                    raise ParseError("expected a field or method name after '.'", t.pos)
                if self._accept("("):
                    self._enter()
                    args = self._args(")")
                    self._leave()
                    e = self._method(e, t.text, args, t.pos)
                else:
                    e = Select(e, t.text)
            elif self._accept("["):
                self._enter()
                index = self.expr()
                self._expect("]")
                self._leave()
                e = Index(e, index)
            else:
                return e

    def _method(self, target: Expr, name: str, args: tuple[Expr, ...], pos: int) -> Expr:
        counts = COMPREHENSIONS.get(name)
        if counts is None or len(args) not in counts:
            return Call(name, target, args)
        var = args[0]
        if not isinstance(var, Ident):
            raise ParseError(f"{name}() takes a variable name first", pos)
        if len(args) == 3:
            return Comprehension(name, target, var.name, args[2], predicate=args[1])
        return Comprehension(name, target, var.name, args[1])

    def _primary(self) -> Expr:
        t = self._next()
        if t.kind == "literal":
            assert t.value is not None
            return t.value
        if t.kind == "ident" or (t.kind == "punct" and t.text == "."):
            leading_dot = t.kind == "punct"
            if leading_dot:
                t = self._next()
                if t.kind != "ident":
                    raise ParseError("expected an identifier after a leading '.'", t.pos)
            name = t.text
            if name in RESERVED:
                # cel-go refuses them as identifiers and global calls
                # (VisitIdentOrGlobalCall), not as selected fields (`pod.metadata.namespace`)
                raise ParseError(f"reserved identifier {name!r}", t.pos)
            if self._accept("("):
                self._enter()
                args = self._args(")")
                self._leave()
                if name == "has" and not leading_dot:
                    if len(args) != 1 or not isinstance(args[0], Select):
                        raise ParseError("has() takes one field selection, e.g. "
                                         "has(node.metadata.labels)", t.pos)
                    return Select(args[0].operand, args[0].field, test_only=True)
                return Call(name, None, args)
            # a message construction: a.b.C{field: value}
            dotted = [name]
            save = self.i
            while self._accept("."):
                nt = self._next()
                if nt.kind != "ident":
                    break
                dotted.append(nt.text)
            if self._accept("{"):
                return self._struct(".".join(dotted))
            self.i = save
            return Ident(name)
        if t.kind == "punct":
            if t.text == "(":
                self._enter()
                e = self.expr()
                self._expect(")")
                self._leave()
                return e
            if t.text == "[":
                self._enter()
                items = self._args("]")
                self._leave()
                return ListLit(items)
            if t.text == "{":
                self._enter()
                entries: list[tuple[Expr, Expr]] = []
                if not self._accept("}"):
                    while True:
                        k = self.expr()
                        self._expect(":")
                        entries.append((k, self.expr()))
                        if self._accept("}"):
                            break
                        self._expect(",")
                        if self._accept("}"):
                            break
                self._leave()
                return MapLit(tuple(entries))
        found = "the end" if t.kind == "eof" else repr(t.text)
        raise ParseError(f"unexpected {found}", t.pos)

    def _struct(self, type_name: str) -> Expr:
        self._enter()
        fields: list[tuple[str, Expr]] = []
        if not self._accept("}"):
            while True:
                f = self._next()
                if f.kind != "ident":
                    raise ParseError("expected a field name", f.pos)
                self._expect(":")
                fields.append((f.text, self.expr()))
                if self._accept("}"):
                    break
                self._expect(",")
                if self._accept("}"):
                    break
        self._leave()
        return StructLit(type_name, tuple(fields))


def depth(e: Expr) -> int:
    """The depth of the tree (a leaf is 1), computed without recursion."""
    deepest = 0
    stack: list[tuple[Expr, int]] = [(e, 1)]
    while stack:
        x, d = stack.pop()
        deepest = max(deepest, d)
        if isinstance(x, Comprehension):
            kids: tuple[Expr, ...] = (x.range, x.body) + (
                (x.predicate,) if x.predicate is not None else ())
        else:
            kids = children(x)
        stack.extend((k, d + 1) for k in kids)
    return deepest


def parse(source: str) -> Expr:
    """The syntax tree of `source`; ParseError when it is not CEL, or nests deeper than
    MAX_NESTING or MAX_DEPTH."""
    tree = _Parser(source).parse()
    d = depth(tree)
    if d > MAX_DEPTH:
        raise ParseError(f"is {d} levels deep (selections, calls and operators); the "
                         f"limit is {MAX_DEPTH}", 0)
    return tree


# -- what an expression reads -------------------------------------------------------------

def children(e: Expr) -> tuple[Expr, ...]:
    if isinstance(e, Select):
        return (e.operand,)
    if isinstance(e, Index):
        return (e.operand, e.index)
    if isinstance(e, Call):
        return ((e.target,) if e.target is not None else ()) + e.args
    if isinstance(e, ListLit):
        return e.elements
    if isinstance(e, MapLit):
        return tuple(x for kv in e.entries for x in kv)
    if isinstance(e, StructLit):
        return tuple(v for _, v in e.fields)
    return ()


def free_variables(e: Expr) -> set[str]:
    """The identifiers `e` reads that no comprehension of its own binds."""
    out: set[str] = set()

    def visit(x: Expr, bound: frozenset[str]) -> None:
        if isinstance(x, Ident):
            if x.name not in bound:
                out.add(x.name)
        elif isinstance(x, Comprehension):
            visit(x.range, bound)
            inner = bound | {x.var}
            visit(x.body, inner)
            if x.predicate is not None:
                visit(x.predicate, inner)
        else:
            for c in children(x):
                visit(c, bound)

    visit(e, frozenset())
    return out


def field_paths(e: Expr, var: str, depth: int) -> frozenset[tuple[str, ...]] | None:
    """The field paths of the free variable `var` that `e` reads, each cut at `depth`
    segments (a constant string index counts as a field: labels['a/b']), or None when `e`
    reads `var` whole (bare, or indexed by a computed key). A path that another extends
    is dropped: reading the shorter one keeps the longer."""
    paths: set[tuple[str, ...]] = set()
    whole = False

    def chain(x: Expr) -> tuple[str, ...] | None:
        """The fields of a selection chain rooted at `var`, or None."""
        fields: list[str] = []
        while True:
            if isinstance(x, Select):
                fields.append(x.field)
                x = x.operand
            elif isinstance(x, Index) and isinstance(x.index, Literal) \
                    and isinstance(x.index.value, str):
                fields.append(x.index.value)
                x = x.operand
            else:
                break
        if isinstance(x, Ident) and x.name == var and fields:
            return tuple(reversed(fields))
        return None

    def visit(x: Expr, bound: frozenset[str]) -> None:
        nonlocal whole
        if var in bound:
            return
        if isinstance(x, Select | Index):
            fields = chain(x)
            if fields is not None:
                paths.add(fields[:depth])
                return
        if isinstance(x, Ident):
            if x.name == var:
                whole = True
            return
        if isinstance(x, Comprehension):
            visit(x.range, bound)
            inner = bound | {x.var}
            visit(x.body, inner)
            if x.predicate is not None:
                visit(x.predicate, inner)
            return
        for c in children(x):
            visit(c, bound)

    visit(e, frozenset())
    if whole:
        return None
    return frozenset(p for p in paths if not any(q != p and p[:len(q)] == q for q in paths))
