"""Device selectors' syntax: what cel-go accepts and the Rust CEL core does not,
rewritten into what it runs (see polsched.dra.device_cel for the list), on polsched.cel.
syntax's tokens.

The rewrites edit the text, so the tokens keep the whitespace and comments between them.
Each rewrite is one call of a helper that device_cel's functions provide and that
evaluates its argument once, so nested rewrites do not grow the text; cel.bind is
expanded by substitution, bounded by MAX_EXPANDED_LENGTH.
Pure data: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from polsched.cel import syntax as celsyntax

# After expanding cel.bind: nested binds duplicate their init, bounded here.
MAX_EXPANDED_LENGTH = 64 * 1024


class CELError(ValueError):
    """A selector that does not compile, or an evaluation that fails."""


# --- tokens --------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Token:
    kind: str  # "str", "ident", "num", "op", "ws"
    text: str
    value: str = ""  # a string literal's value


def tokenize(source: str) -> list[Token]:
    """CEL source as tokens for the rewrites below, which edit the text: polsched.cel.
    syntax's lexer (the one the Expression plugin parses with), with the whitespace and
    comments between its tokens kept as "ws" tokens, `true`, `false`, `null` and `in` as
    identifiers and a string literal's decoded value. Raises CELError where that lexer
    refuses the text (an unterminated string, a bad escape, a character CEL has not)."""
    try:
        lexed = celsyntax.tokenize(source)
    except celsyntax.ParseError as err:
        raise CELError(f"compilation failed: {err}") from err
    out: list[Token] = []
    end = 0
    for t in lexed:
        if t.pos > end:
            out.append(Token("ws", source[end:t.pos]))
        if t.kind == "eof":
            break
        if t.kind == "literal":
            lit = t.value
            assert lit is not None
            if lit.kind in ("string", "bytes"):
                out.append(Token("str", t.text, str(lit.value)))
            elif lit.kind in ("bool", "null"):
                out.append(Token("ident", t.text))
            else:
                out.append(Token("num", t.text))
        elif t.kind == "punct" and t.text != "in":
            out.append(Token("op", t.text))
        else:
            out.append(Token("ident", t.text))
        end = t.pos + len(t.text)
    return out


def _code(tokens: Sequence[Token]) -> list[int]:
    """Indexes of the non-whitespace tokens."""
    return [k for k, t in enumerate(tokens) if t.kind != "ws"]


MACROS = frozenset({"all", "exists", "exists_one", "map", "filter"})


def _expand_one_bind(tokens: list[Token]) -> list[Token] | None:
    """Rewrite the innermost cel.bind(...) in tokens, or None when there is none."""
    code = _code(tokens)
    start = -1
    for p in range(len(code) - 3):
        a, b, c, d = (tokens[code[p + q]] for q in range(4))
        if (a.text == "cel" and b.text == "." and c.text == "bind" and d.text == "("
                and (p == 0 or tokens[code[p - 1]].text != ".")):
            start = p  # keep the last: its arguments hold no other bind
    if start < 0:
        return None
    # Split the arguments at top-level commas.
    depth = 0
    args: list[list[int]] = [[]]
    p = start + 4
    end = -1
    while p < len(code):
        t = tokens[code[p]]
        if t.text in "([{" and t.kind == "op":
            depth += 1
        elif t.text in ")]}" and t.kind == "op":
            if depth == 0:
                end = p
                break
            depth -= 1
        if t.text == "," and t.kind == "op" and depth == 0:
            args.append([])
        else:
            args[-1].append(code[p])
        p += 1
    if end < 0 or len(args) != 3:
        raise CELError("cel.bind needs three arguments: cel.bind(name, init, expression)")
    name_toks = [tokens[k] for k in args[0]]
    if len(name_toks) != 1 or name_toks[0].kind != "ident":
        raise CELError("cel.bind: the first argument must be a variable name")
    name = name_toks[0].text
    init = tokens[args[1][0]:args[1][-1] + 1] if args[1] else []
    body_range = range(args[2][0], args[2][-1] + 1) if args[2] else range(0)
    # A comprehension in the body that binds the same name would shadow it.
    original = [tokens[k] for k in body_range]
    bcode = _code(original)
    for q in range(len(bcode) - 2):
        x, y, z = (original[bcode[q + r]] for r in range(3))
        # (two-variable forms are rewritten before binds are expanded: their variables
        # are substituted already)
        if x.text == "." and y.text in MACROS and z.text == "(" and q + 3 < len(bcode):
            if original[bcode[q + 3]].text == name:
                raise CELError(f"cel.bind: the variable {name!r} is bound again by "
                               f"{y.text}() inside the expression; rename one of them")
    body: list[Token] = []
    prev = prev2 = ""
    for k in body_range:
        t = tokens[k]
        if t.kind == "ident" and t.text == name and not _is_field_name(prev, prev2):
            body.append(Token("op", "("))
            body.extend(init)
            body.append(Token("op", ")"))
        else:
            body.append(t)
        if t.kind != "ws":
            prev, prev2 = t.text, prev
    first, last = code[start], code[end]
    return tokens[:first] + [Token("op", "(")] + body + [Token("op", ")")] + tokens[last + 1:]


def _is_field_name(prev: str, prev2: str) -> bool:
    """Whether an identifier after these two tokens names a field (`.f`, `.?f`), not a
    variable."""
    return prev == "." or (prev == "?" and prev2 == ".")


def expand_binds(source: str) -> str:
    tokens = tokenize(source)
    while True:
        rewritten = _expand_one_bind(tokens)
        if rewritten is None:
            return "".join(t.text for t in tokens)
        tokens = rewritten
        if sum(len(t.text) for t in tokens) > MAX_EXPANDED_LENGTH:
            raise CELError(f"expanding cel.bind makes the expression longer than "
                           f"{MAX_EXPANDED_LENGTH} characters")


# --- syntax the Rust core lacks, rewritten into what it has -------------------------------
#
# Each rewrite replaces one construct by an equivalent expression and starts again on the
# new text, until none is left (as expand_binds); every name it introduces starts with
# "__" and a number, so it never meets a user's. The rewritten text is bounded by
# MAX_EXPANDED_LENGTH, and its comprehensions count against MAX_COMPREHENSION_DEPTH.

_TWO_VAR = {"all": 3, "exists": 3, "existsOne": 3, "exists_one": 3,
            "transformList": (3, 4), "transformMap": (3, 4),
            "transformMapEntry": (3, 4)}


def _matching(tokens: Sequence[Token], code: list[int], p: int) -> int:
    """The code index of the bracket that closes (or, for a closer, opens) code[p]."""
    pairs = {"(": ")", "[": "]", "{": "}"}
    opener = tokens[code[p]].text
    step = 1 if opener in pairs else -1
    depth = 0
    q = p
    while 0 <= q < len(code):
        t = tokens[code[q]]
        if t.kind == "op" and t.text in "([{":
            depth += step
        elif t.kind == "op" and t.text in ")]}":
            depth -= step
        if depth == 0:
            return q
        q += step
    raise CELError("unbalanced brackets")


def _arguments(tokens: Sequence[Token], code: list[int], p: int) -> tuple[list[list[int]],
                                                                         int]:
    """The top-level comma-separated arguments (code indexes) of the call whose "(" is
    code[p], and the code index of its ")"."""
    end = _matching(tokens, code, p)
    args: list[list[int]] = [[]]
    depth = 0
    for q in range(p + 1, end):
        t = tokens[code[q]]
        if t.kind == "op" and t.text in "([{":
            depth += 1
        elif t.kind == "op" and t.text in ")]}":
            depth -= 1
        if t.kind == "op" and t.text == "," and depth == 0:
            args.append([])
        else:
            args[-1].append(q)
    return ([] if args == [[]] else args), end


def _operand_start(tokens: Sequence[Token], code: list[int], end: int) -> int:
    """The code index where the member chain (a.b[c].d(e)...) ending at code[end]
    starts: the receiver of a `.?` or `[?` that follows it."""
    k = end
    while True:
        t = tokens[code[k]]
        if t.kind == "op" and t.text in ")]}":
            k = _matching(tokens, code, k)
            before = tokens[code[k - 1]] if k > 0 else None
            if t.text == ")" and before is not None and before.kind == "ident":
                k -= 1  # a call: its name
            elif t.text == "]" and before is not None and before.text != "in" and (
                    before.kind in ("ident", "str", "num") or before.text in ")]}"):
                k -= 1  # an index: its operand
                continue
        elif t.kind not in ("ident", "str", "num"):
            raise CELError(f"optional syntax after {t.text!r}: expected an operand")
        if k >= 2 and tokens[code[k - 1]].text == "." and tokens[code[k - 2]].kind != "op":
            k -= 2
        elif k >= 2 and tokens[code[k - 1]].text == "." and \
                tokens[code[k - 2]].text in ")]}":
            k -= 2
        elif k >= 3 and tokens[code[k - 1]].text == "?" and tokens[code[k - 2]].text == ".":
            k -= 3
        else:
            return k


def _text(tokens: Sequence[Token], code: list[int], first: int, last: int) -> str:
    return "".join(t.text for t in tokens[code[first]:code[last] + 1])


def _rewrite_one_optional(tokens: list[Token], serial: int) -> str | None:
    """`E.?f` and `E[?k]` (cel-go's optional selection and index, on a value or on an
    optional) as cel.bind expressions over optional.of / optional.none; None when the
    text has neither."""
    code = _code(tokens)
    for p in range(1, len(code) - 1):
        a, b = tokens[code[p]], tokens[code[p + 1]]
        if a.kind != "op" or b.text != "?" or a.text not in (".", "["):
            continue
        if a.text == "[" and not (tokens[code[p - 1]].kind in ("ident", "str", "num")
                                  or tokens[code[p - 1]].text in ")]}"):
            continue  # an optional element of a list literal: not supported
        start = _operand_start(tokens, code, p - 1)
        receiver = _text(tokens, code, start, p - 1)
        if a.text == ".":
            if p + 2 >= len(code) or tokens[code[p + 2]].kind != "ident":
                raise CELError("optional selection: expected a field name after '.?'")
            field = tokens[code[p + 2]].text
            last = p + 2
            replacement = f"__optional_field({receiver}, {field!r})"
        else:
            close = _matching(tokens, code, p)
            if close <= p + 2:
                raise CELError("optional index: expected a key after '[?'")
            key = _text(tokens, code, p + 2, close - 1)
            last = close
            replacement = f"__optional_index({receiver}, {key})"
        head = "".join(t.text for t in tokens[:code[start]])
        tail = "".join(t.text for t in tokens[code[last] + 1:])
        return head + "(" + replacement + ")" + tail
    return None


def _substitute(tokens: Sequence[Token], names: Mapping[str, str]) -> str:
    """The text with each variable in `names` (an identifier not after ".") replaced."""
    out, prev, prev2 = [], "", ""
    for t in tokens:
        if t.kind == "ident" and t.text in names and not _is_field_name(prev, prev2):
            out.append(names[t.text])
        else:
            out.append(t.text)
        if t.kind != "ws":
            prev, prev2 = t.text, prev
    return "".join(out)


def _rewrite_one_two_var(tokens: list[Token], serial: int) -> str | None:
    """The last two-variable comprehension (cel-go ext.TwoVarComprehensions: all, exists,
    existsOne, transformList, transformMap with an index or key and a value) as a
    one-variable macro over `__pairs(range)`, the [key, value] pairs of a map or the
    [index, value] pairs of a list; None when there is none."""
    code = _code(tokens)
    found = None
    for p in range(len(code) - 3, 0, -1):  # the last one: none inside its arguments
        a, b, c = (tokens[code[p + q]] for q in range(3))
        if a.text != "." or b.text not in _TWO_VAR or c.text != "(":
            continue
        args, end = _arguments(tokens, code, p + 2)
        counts = _TWO_VAR[b.text]
        if len(args) not in (counts if isinstance(counts, tuple) else (counts,)):
            continue
        if b.text in MACROS and (len(args[1]) != 1 or
                                  tokens[code[args[1][0]]].kind != "ident"):
            continue  # the one-variable form (x, predicate) or map(x, p, e)
        found = (p, args, end)
        break
    if found is None:
        return None
    p, args, end = found
    method = tokens[code[p + 1]].text
    names = []
    for arg in args[:2]:
        if len(arg) != 1 or tokens[code[arg[0]]].kind != "ident":
            raise CELError(f"{method}: the first two arguments must be variable names")
        names.append(tokens[code[arg[0]]].text)
    if names[0] == names[1]:
        raise CELError(f"{method}: the two variables must differ")
    pair = f"__p{serial}"
    subst = {names[0]: f"{pair}[0]", names[1]: f"{pair}[1]"}
    rest = ["".join([" "] + [_substitute(tokens[code[arg[0]]:code[arg[-1]] + 1], subst)])
            for arg in args[2:]]
    start = _operand_start(tokens, code, p - 1)
    pairs = f"__pairs({_text(tokens, code, start, p - 1)})"
    if method in ("all", "exists", "existsOne", "exists_one"):
        macro = "exists_one" if method == "existsOne" else method
        new = f"{pairs}.{macro}({pair},{rest[0]})"
    elif method == "transformList":
        new = f"{pairs}.map({pair},{','.join(rest)})"
    elif method == "transformMap":  # one walk, since a map's order may differ between two
        keep = rest[0] + "," if len(rest) == 2 else ""
        new = f"__from_pairs({pairs}.map({pair},{keep} [{pair}[0],{rest[-1]}]))"
    else:  # transformMapEntry: the entries (maps) merged, a repeated key an error
        new = f"__merge_entries({pairs}.map({pair},{','.join(rest)}))"
    head = "".join(t.text for t in tokens[:code[start]])
    tail = "".join(t.text for t in tokens[code[end] + 1:])
    return head + "(" + new + ")" + tail


# Macros of cel-go's ext.Lists (v2+: sortBy) and optional library (v1: optMap,
# optFlatMap) that the core lacks; each takes a variable name and an expression.
_ONE_VAR = frozenset({"sortBy", "optMap", "optFlatMap"})


def _rewrite_one_macro(tokens: list[Token], serial: int) -> str | None:
    """The last sortBy / optMap / optFlatMap call as the core's map macro over the list
    (or, for an optional, the zero or one values it holds) and a helper; None when
    there is none. sortByMacro (ext/lists.go) and optMap / optFlatMap (cel/library.go)
    bind the variable the same way, in a comprehension."""
    code = _code(tokens)
    found = None
    for p in range(len(code) - 3, 0, -1):
        a, b, c = (tokens[code[p + q]] for q in range(3))
        if a.text == "." and b.kind == "ident" and b.text in _ONE_VAR and c.text == "(":
            found = p
            break
    if found is None:
        return None
    p = found
    method = tokens[code[p + 1]].text
    args, end = _arguments(tokens, code, p + 2)
    if len(args) != 2:
        raise CELError(f"{method}() takes a variable name and an expression")
    if len(args[0]) != 1 or tokens[code[args[0][0]]].kind != "ident":
        raise CELError(f"{method}() variable name must be a simple identifier")
    var = tokens[code[args[0][0]]].text
    body = _text(tokens, code, args[1][0], args[1][-1])
    start = _operand_start(tokens, code, p - 1)
    target = _text(tokens, code, start, p - 1)
    if method == "sortBy":
        new = f"__sort_by(({target}).map({var}, [{var}, {body}]))"
    elif method == "optMap":
        new = f"__optional_first(__optional_values({target}).map({var}, {body}))"
    else:
        # boxed: the core's map() unwraps an optional result
        new = (f"__optional_flat(__optional_values({target}).map({var}, "
               f"__optional_box({body})))")
    head = "".join(t.text for t in tokens[:code[start]])
    tail = "".join(t.text for t in tokens[code[end] + 1:])
    return head + "(" + new + ")" + tail


def _rewrite_one_string(tokens: list[Token], serial: int) -> str | None:
    """The last `string(x)` not yet rewritten, as a conversion that also knows the IP
    and CIDR values of this library (library/ip.go and cidr.go's String)."""
    code = _code(tokens)
    found = None
    for p in range(len(code) - 1):
        t = tokens[code[p]]
        if t.kind == "ident" and t.text == "string" and tokens[code[p + 1]].text == "(" \
                and (p == 0 or tokens[code[p - 1]].text != "."):
            found = p
    if found is None:
        return None
    args, end = _arguments(tokens, code, found + 1)
    if len(args) != 1:
        return None  # left to the core, which reports the overload
    arg = _text(tokens, code, args[0][0], args[0][-1])
    s = f"__s{serial}"
    # string(bool) too, which the core lacks.
    new = (f"cel.bind({s}, {arg}, __is_address({s}) ? __address_text({s}) : type({s}) == "
           f"bool ? ({s} ? \"true\" : \"false\") : __string({s}))")
    head = "".join(t.text for t in tokens[:code[found]])
    tail = "".join(t.text for t in tokens[code[end] + 1:])
    return head + "(" + new + ")" + tail


def _is_operand_end(t: Token) -> bool:
    """Whether a bracket after t indexes (or calls) t, rather than opening a literal."""
    return (t.kind in ("str", "num") or (t.kind == "ident" and t.text != "in")
            or (t.kind == "op" and t.text in ")]}"))


def _entry_colon(tokens: Sequence[Token], code: list[int], arg: list[int]) -> int:
    """The position in arg of the `:` between a map entry's key and value (a `?:` of a
    conditional in the key does not count)."""
    depth = pending = 0
    for n, q in enumerate(arg):
        t = tokens[code[q]]
        if t.kind != "op":
            continue
        if t.text in "([{":
            depth += 1
        elif t.text in ")]}":
            depth -= 1
        elif depth == 0 and t.text == "?" and n > 0:
            pending += 1
        elif depth == 0 and t.text == ":":
            if pending == 0:
                return n
            pending -= 1
    raise CELError("map literal: expected 'key: value'")


def _rewrite_one_optional_literal(tokens: list[Token], serial: int) -> str | None:
    """The first list or map literal with an optional element (`[a, ?b]`, `{?k: v}`,
    cel-go's OptionalTypes): a list of what is present, concatenated, or a map built
    from [key, value] entries, where an absent optional entry removes its key (evalList
    and evalMap in cel-go's interpreter/interpretable.go). None when there is none."""
    code = _code(tokens)
    # One linear pass finds the first literal with an element that starts with `?`
    # (`[?`, `{?`, `, ?` inside it), so a deep nest of plain brackets costs no more.
    stack: list[int] = []
    marked = -1
    for q in range(len(code)):
        t = tokens[code[q]]
        if t.kind == "op" and t.text in "([{":
            stack.append(q)
        elif t.kind == "op" and t.text in ")]}":
            if stack:
                stack.pop()
        elif t.text == "?" and q > 0 and stack and tokens[code[q - 1]].text in "[{,":
            o = stack[-1]
            if tokens[code[o]].text in "[{" and not (o > 0 and (_is_operand_end(
                    tokens[code[o - 1]]) or tokens[code[o - 1]].text == ".")):
                marked = o if marked < 0 else min(marked, o)
    if marked < 0:
        return None
    p = marked
    t = tokens[code[p]]
    args, end = _arguments(tokens, code, p)
    if args and not args[-1]:
        args.pop()  # a trailing comma
    parts: list[str] = []
    plain: list[str] = []
    for arg in args:
        if not arg:
            raise CELError("list or map literal: empty element")
        optional = tokens[code[arg[0]]].text == "?"
        body = arg[1:] if optional else arg
        if not body:
            raise CELError("optional element: expected an expression after '?'")
        if t.text == "[":
            text = _text(tokens, code, body[0], body[-1])
            if not optional:
                plain.append(text)
                continue
            item = f"__optional_element({text})"
        else:
            colon = _entry_colon(tokens, code, body)
            if colon == 0 or colon == len(body) - 1:
                raise CELError("map literal: expected 'key: value'")
            key = _text(tokens, code, body[0], body[colon - 1])
            value = _text(tokens, code, body[colon + 1], body[-1])
            if not optional:
                plain.append(f"[({key}), ({value})]")
                continue
            item = f"__optional_entry({key}, {value})"
        if plain:
            parts.append("[" + ", ".join(plain) + "]")
            plain = []
        parts.append(item)
    if plain:
        parts.append("[" + ", ".join(plain) + "]")
    new = " + ".join(parts)
    if t.text == "{":
        new = f"__map_entries({new})"
    head = "".join(x.text for x in tokens[:code[p]])
    tail = "".join(x.text for x in tokens[code[end] + 1:])
    return head + "(" + new + ")" + tail


# What a call or a parenthesized group must show for its value to be possibly an
# optional (the helpers above, the optional.* functions, and the methods returning one).
_OPTIONAL_CALLS = frozenset({"__optional_field", "__optional_index", "__select"})
_OPTIONAL_METHODS = frozenset({"or", "first", "last"})


def _is_optional_marker(tokens: Sequence[Token], code: list[int], q: int) -> bool:
    t = tokens[code[q]]
    return t.kind == "ident" and (t.text in _OPTIONAL_CALLS or t.text == "optional" or (
        t.text in _OPTIONAL_METHODS and q > 0 and tokens[code[q - 1]].text == "."))


def _rewrite_one_optional_operand(tokens: list[Token], serial: int) -> str | None:
    """A field selection or index on a value that may be an optional without a `.?`
    chain leading to it (`(m.?a).b`, `optional.of(m).b`, a cel.bind variable holding
    `m.?a`): cel-go selects optionally when the value is an optional at run time
    (applyQualifiers), so these become `__select(operand, key, is_field)`, which does
    either. A parenthesized group qualifies when it holds a call that can yield an
    optional; a call when it is one. None when there is none. Linear in the text: the
    brackets are matched and the markers counted once."""
    code = _code(tokens)
    opener: dict[int, int] = {}
    closer: dict[int, int] = {}
    stack: list[int] = []
    marks = [0]
    for q, k in enumerate(code):
        t = tokens[k]
        if t.kind == "op" and t.text in "([{":
            stack.append(q)
        elif t.kind == "op" and t.text in ")]}":
            if not stack:
                raise CELError("unbalanced brackets")
            o = stack.pop()
            opener[q], closer[o] = o, q
        marks.append(marks[-1] + _is_optional_marker(tokens, code, q))
    for p in range(len(code) - 1):
        t, nxt = tokens[code[p]], tokens[code[p + 1]]
        if t.kind != "op" or t.text != ")" or p not in opener:
            continue
        if nxt.text == "." and p + 2 < len(code) and tokens[code[p + 2]].kind == "ident" \
                and not (p + 3 < len(code) and tokens[code[p + 3]].text == "("):
            key, last, field = repr(tokens[code[p + 2]].text), p + 2, "true"
        elif nxt.kind == "op" and nxt.text == "[" and p + 1 in closer:
            close = closer[p + 1]
            if close == p + 2:
                continue
            key, last, field = _text(tokens, code, p + 2, close - 1), close, "false"
        else:
            continue
        open_ = opener[p]
        before = tokens[code[open_ - 1]] if open_ > 0 else None
        if before is not None and before.kind == "ident":  # a call
            dot = tokens[code[open_ - 2]] if open_ > 1 else None
            owner = tokens[code[open_ - 3]] if open_ > 2 else None
            optional = before.text in _OPTIONAL_CALLS or (
                dot is not None and dot.text == "." and (
                    before.text in _OPTIONAL_METHODS or (
                        owner is not None and owner.text == "optional"
                        and before.text in ("of", "ofNonZeroValue", "none"))))
            if not optional:
                continue
            start = _operand_start(tokens, code, p)
        else:
            if marks[p] - marks[open_ + 1] == 0:
                continue
            start = open_
        receiver = _text(tokens, code, start, p)
        head = "".join(x.text for x in tokens[:code[start]])
        tail = "".join(x.text for x in tokens[code[last] + 1:])
        return f"{head}(__select({receiver}, {key}, {field})){tail}"
    return None


def rewrite_optional_operands(source: str) -> str:
    """rewrite_syntax's last step, once cel.bind is expanded (a bound variable may hold
    an optional)."""
    text = source
    for serial in range(MAX_REWRITES + 1):
        new = _rewrite_one_optional_operand(tokenize(text), serial)
        if new is None:
            return text
        text = new
        if len(text) > MAX_EXPANDED_LENGTH:
            raise CELError(f"the expression, rewritten for the CEL core, is longer "
                           f"than {MAX_EXPANDED_LENGTH} characters")
    raise CELError(f"more than {MAX_REWRITES} selections on optional values in one "
                   "expression")


def _chain_optional_qualifiers(source: str) -> str:
    """cel-go's optional chaining: after `.?f` or `[?k]`, the plain field selections and
    indexes that follow are optional too (`m.?a.b` is `m.?a.?b`, an optional of the
    field; applyQualifiers in cel-go's interpreter/attributes.go). A method call ends
    the chain."""
    tokens = tokenize(source)
    code = _code(tokens)
    insert: set[int] = set()  # code indexes after which a "?" goes
    p = 0
    while p < len(code) - 1:
        a, b = tokens[code[p]], tokens[code[p + 1]]
        in_chain = a.kind == "op" and b.text == "?" and (
            a.text == "." or (a.text == "[" and p > 0 and _is_operand_end(
                tokens[code[p - 1]])))
        if not in_chain:
            p += 1
            continue
        q = p
        while q < len(code):
            t = tokens[code[q]]
            nxt = tokens[code[q + 1]] if q + 1 < len(code) else None
            if t.text == "." and nxt is not None and nxt.text == "?":
                q += 3  # `.?f`
            elif t.text == "." and nxt is not None and nxt.kind == "ident" and not (
                    q + 2 < len(code) and tokens[code[q + 2]].text == "("):
                insert.add(q)
                q += 2
            elif t.text == "[" and t.kind == "op":
                if nxt is None or nxt.text != "?":
                    insert.add(q)
                q = _matching(tokens, code, q) + 1
            else:
                break
        p = max(q, p + 1)
    if not insert:
        return source
    at = {code[q] for q in insert}
    return "".join(t.text + ("?" if k in at else "") for k, t in enumerate(tokens))


# Each rewrite tokenizes the whole text again: a bound on their number, counted before
# the first, keeps a hostile selector (thousands of `.?`) from costing seconds to
# compile. Real selectors use a few.
MAX_REWRITES = 32


def _rewrite_candidates(tokens: Sequence[Token]) -> int:
    """An upper bound of the rewrites a text needs (each `.?`, `[?`, call of a
    two-variable macro name and `string(`)."""
    code = [t for t in tokens if t.kind != "ws"]
    n = 0
    for k in range(1, len(code)):
        a, b = code[k - 1], code[k]
        if b.text == "?" and a.kind == "op" and a.text in (".", "[", "{", ","):
            n += 1
        elif a.text == "." and b.kind == "ident" and (b.text in _TWO_VAR or
                                                      b.text in _ONE_VAR):
            n += 1
        elif b.kind == "ident" and b.text == "string" and a.text != ".":
            n += 1
    return n + (1 if code and code[0].text == "string" else 0)


def rewrite_syntax(source: str) -> str:
    """The selector with optional selection and index, two-variable comprehensions and
    string() of IPs and CIDRs rewritten into what the Rust core runs."""
    serial = 0
    # Counted after chaining: each qualifier chained after an optional one is a rewrite.
    text = _chain_optional_qualifiers(source)
    if _rewrite_candidates(tokenize(text)) > MAX_REWRITES * 4:
        raise CELError(f"more than {MAX_REWRITES} uses of optional syntax, two-variable "
                       "comprehensions and string() in one expression")
    for rewrite in (_rewrite_one_optional_literal, _rewrite_one_optional,
                    _rewrite_one_two_var, _rewrite_one_macro, _rewrite_one_string):
        while True:
            new = rewrite(tokenize(text), serial)
            if new is None:
                break
            text = new
            serial += 1
            if serial > MAX_REWRITES:
                raise CELError(f"more than {MAX_REWRITES} uses of optional syntax, "
                               "two-variable comprehensions and string() in one expression")
            if len(text) > MAX_EXPANDED_LENGTH:
                raise CELError(f"the expression, rewritten for the CEL core, is longer "
                               f"than {MAX_EXPANDED_LENGTH} characters")
    return text.replace("__string(", "string(")


__all__ = ["MACROS", "MAX_EXPANDED_LENGTH", "CELError", "Token", "expand_binds",
           "rewrite_optional_operands", "rewrite_syntax", "tokenize"]
