"""The CEL parser: structure, the lexis cases a text scan gets wrong, and what it reads."""

from __future__ import annotations

import pytest

from polsched.cel import syntax
from polsched.cel.syntax import Call, Comprehension, Ident, ListLit, Literal, Select, parse

pytestmark = pytest.mark.unit


def test_precedence_and_chains() -> None:
    e = parse("a || b && c == 1 + 2 * 3")
    assert isinstance(e, Call) and e.function == "_||_"
    right = e.args[1]
    assert isinstance(right, Call) and right.function == "_&&_"
    # a chain of one operator is one n-ary call: wide, not deep
    chain = parse(" && ".join(["true"] * 500))
    assert isinstance(chain, Call) and len(chain.args) == 500
    assert len(parse(" + ".join(["1"] * 300)).args) == 300  # type: ignore[union-attr]


def test_macros_become_comprehensions_with_their_variable() -> None:
    e = parse("node.status.images.exists(i, i.names.all(n, n != ''))")
    assert isinstance(e, Comprehension) and e.macro == "exists" and e.var == "i"
    assert e.range == Select(Select(Ident("node"), "status"), "images")
    assert isinstance(e.body, Comprehension) and e.body.var == "n"
    three = parse("[1, 2].map(x, x > 1, x * 2)")
    assert isinstance(three, Comprehension) and three.predicate is not None
    has = parse("has(pod.spec.nodeName)")
    assert has == Select(Select(Ident("pod"), "spec"), "nodeName", test_only=True)


@pytest.mark.parametrize(("source", "value"), [
    ("'a\\'b'", "a'b"),
    ('"it\'s"', "it's"),
    ("'''a ' '' b'''", "a ' '' b"),
    ('"""x " y"""', 'x " y'),
    ("r'\\d+'", "\\d+"),
    ("'\\x41\\u00e9\\101'", "A\u00e9A"),
    ("'(['", "(["),
])
def test_string_literals(source: str, value: str) -> None:
    assert parse(source) == Literal("string", value, len(value))


def test_bytes_and_numbers() -> None:
    assert parse("b'ab'") == Literal("bytes", "ab", 2)
    assert parse("0x1F") == Literal("int", 31)
    assert parse("3u") == Literal("uint", 3)
    assert parse("1.5e3") == Literal("double", 1500.0)
    assert parse("-2") == Literal("int", -2)


def test_comments_hide_quotes_and_brackets() -> None:
    source = ("// it's a comment: ' ( [ .all(\n"
              "[1, 2].all(x, x > 0) // and another ' one\n")
    e = parse(source)
    assert isinstance(e, Comprehension) and isinstance(e.range, ListLit)
    # a // inside a string is not a comment
    assert parse("'http://x' == 'a'").args[0] == Literal(  # type: ignore[union-attr]
        "string", "http://x", 8)


@pytest.mark.parametrize(("source", "words"), [
    ("1 +", "unexpected the end"),
    ("(1", "expected ')'"),
    ("'abc", "unterminated string"),
    ("a.all(1, true)", "variable name"),
    ("has(a)", "field selection"),
    ("if == 1", "reserved identifier 'if'"),
    ("a.all(var, true)", "reserved identifier 'var'"),
    ("namespace(1)", "reserved identifier 'namespace'"),
    ("a # b", "unexpected character '#'"),
    ("(" * 60 + "1" + ")" * 60, "nests deeper than"),
])
def test_errors_say_what_and_where(source: str, words: str) -> None:
    with pytest.raises(syntax.ParseError) as err:
        parse(source)
    assert words in str(err.value)
    assert "column" in str(err.value)


def test_free_variables_exclude_comprehension_variables() -> None:
    e = parse("pod.spec.containers.all(c, c.image != '' && node.metadata.name != x)")
    assert syntax.free_variables(e) == {"pod", "node", "x"}
    assert syntax.free_variables(parse("[1].all(pod, pod > 0)")) == set()


def test_parser_agrees_with_the_library_on_the_shipped_expressions() -> None:
    """Every Expression of the sample policies and docs compiles in both parsers."""
    import pathlib

    import cel
    import yaml

    root = pathlib.Path(__file__).resolve().parents[3]
    found = 0
    for path in [*root.glob("policies/*.yaml"), *root.glob("docs/examples/*.yaml")]:
        for doc in yaml.safe_load_all(path.read_text()):
            spec = (doc or {}).get("spec") or {}
            for entry in [*(spec.get("filters") or []), *(spec.get("scorers") or [])]:
                source = (entry.get("args") or {}).get("expression")
                if isinstance(source, str):
                    cel.compile(source)
                    parse(source)
                    found += 1
    assert found > 0


def test_parser_accepts_what_the_library_compiles_random_expressions() -> None:
    """Differential: random expressions over the grammar, with comments, quotes and
    brackets in strings; whatever the library compiles, the parser must read (or the
    expression would be refused as unreadable for its estimate). The one known
    difference: has() of something that is not a field selection, which the library
    compiles and we refuse."""
    import random

    import cel

    rnd = random.Random(26)
    atoms = ["1", "-2", "3u", "0x1F", "1.5", ".5", "1e3", "true", "null", "'a'",
             '"b\\"c"', "r'\\d'", "b'x'", "'''t'q'''", "pod", "node.metadata.name", "x",
             "[]", "[1, 2,]", "{}", "{'a': 1}", "'// (['"]
    ops = ["+", "-", "*", "/", "%", "==", "!=", "<", "<=", ">", ">=", "&&", "||", " in "]

    def gen(d: int) -> str:
        if d <= 0 or rnd.random() < 0.3:
            return rnd.choice(atoms)
        ws = rnd.choice(["", " ", "\n", " // c'o([\n", "\t"])
        forms = [
            lambda: f"{gen(d - 1)}{ws}{rnd.choice(ops)}{ws}{gen(d - 1)}",
            lambda: f"({gen(d - 1)})",
            lambda: f"!{gen(d - 1)}",
            lambda: f"{gen(d - 1)} ? {gen(d - 1)} : {gen(d - 1)}",
            lambda: f"{gen(d - 1)}.{rnd.choice(list(syntax.COMPREHENSIONS))}(x,{ws}{gen(d - 1)})",
            lambda: f"{gen(d - 1)}.f",
            lambda: f"{gen(d - 1)}[{gen(d - 1)}]",
            lambda: f"size({gen(d - 1)})",
            lambda: f"[{gen(d - 1)}, {gen(d - 1)}]",
            lambda: f"{{{gen(d - 1)}: {gen(d - 1)}}}",
            lambda: f"has(node.{rnd.choice(['a', 'b'])}.g)",
            lambda: f"{gen(d - 1)}.startsWith({gen(d - 1)})",
        ]
        return rnd.choice(forms)()

    compiled = 0
    for _ in range(600):
        source = gen(4)
        try:
            cel.compile(source)
        except Exception:  # noqa: BLE001 - the library refuses it: nothing to agree on
            continue
        compiled += 1
        parse(source)  # raises ParseError on a disagreement
    assert compiled > 100


def test_a_long_selection_chain_is_refused_not_a_recursion_error() -> None:
    with pytest.raises(syntax.ParseError) as err:
        parse("pod" + ".a" * 1000 + " == 1")
    assert f"the limit is {syntax.MAX_DEPTH}" in str(err.value)
    assert syntax.depth(parse("pod" + ".a" * 90 + " == 1")) == 92


def test_a_reserved_word_is_a_field_name_after_a_dot() -> None:
    """As cel-go, which refuses reserved words only as identifiers (VisitIdentOrGlobalCall):
    `pod.metadata.namespace` is a selection."""
    e = parse("pod.metadata.namespace == 'x'")
    assert isinstance(e, Call)
    assert e.args[0] == Select(Select(Ident("pod"), "metadata"), "namespace")
