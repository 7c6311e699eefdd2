"""cel-go features the Rust CEL core lacks, rewritten by selector_syntax.rewrite_syntax:
optional elements in list and map literals, optional chaining after `.?` / `[?]`,
`transformMapEntry`, and the bounds that keep an untrusted selector from costing more
than the length and nesting limits allow. Expected values are cel-go's (v0.29.2, the
version Kubernetes v1.37 builds with); cases taken from its tests cite the file."""

from __future__ import annotations

import copy

import pytest

from polsched.dra import CELError
from polsched.dra.device_cel import (
    MAX_EXPRESSION_LENGTH,
    DeviceInput,
    compile_selector,
)
from tests.unit.plugins.dynamic_resources import upstream
from tests.unit.plugins.dynamic_resources.test_allocator_upstream import run

pytestmark = pytest.mark.unit

GPU = DeviceInput("gpu.example.com",
                  {"model": {"string": "a100"}, "memoryGiB": {"int": 40},
                   "other.example.com/numa": {"int": 1}},
                  {"memory": {"value": "40Gi"}})


def evaluate(expression: str) -> bool:
    return compile_selector(expression).matches(GPU)


# cel-go cel/cel_test.go (TestOptionalValues) and interpreter/interpreter_test.go
# (the "optional_*" cases): an absent optional element is left out; an absent optional
# map entry removes the key (evalMap deletes it).
@pytest.mark.parametrize("expression", [
    "[?optional.of(1)] == [1]",
    "[?optional.none()] == []",
    "[1, ?optional.none(), 3] == [1, 3]",
    "[?optional.of(1), ?optional.none(), ?optional.of(3)] == [1, 3]",
    "[0, ?{'a': 2}.?a, ?{'a': 2}.?b] == [0, 2]",
    "[1, 2, ?optional.none(),] == [1, 2]",  # a trailing comma
    "[?[?optional.of(1)].first()] == [1]",
    "{?'a': optional.of(1)} == {'a': 1}",
    "{?'a': optional.none()} == {}",
    "{'a': 1, ?'b': optional.none(), 'c': 3} == {'a': 1, 'c': 3}",
    "{'a': 1, ?'a': optional.none()} == {}",  # evalMap: delete(entries, keyVal)
    "{?'k': {'x': 5}.?x, ?'m': {'x': 5}.?y} == {'k': 5}",
    "{true ? 'a' : 'b': 1, ?false ? 'c' : 'd': optional.of(2)} == {'a': 1, 'd': 2}",
    "{?1: optional.of('one')}[1] == 'one'",
    'device.attributes["gpu.example.com"].exists(k, k == "model") && '
    '[?device.attributes["gpu.example.com"].?model] == ["a100"]',
    '{?"vendor": device.attributes["gpu.example.com"].?vendor}.size() == 0',
    "[?optional.of(1)].size() == 1 ? true : false",
])
def test_optional_elements_in_list_and_map_literals(expression: str) -> None:
    assert evaluate(expression) is True


@pytest.mark.parametrize("expression, error", [
    # interpreter/interpreter_test.go: "cannot initialize optional list element from
    # non-optional value 123" and "cannot initialize optional entry 'hi' from
    # non-optional"
    ("[?123] == []", "cannot initialize optional list element from non-optional value 123"),
    ("{?'hi': 'world'} == {}", "cannot initialize optional entry 'hi' from non-optional"),
    ("[?] == []", "expected an expression after '?'"),
])
def test_optional_element_errors(expression: str, error: str) -> None:
    with pytest.raises(CELError, match=error):
        evaluate(expression)


# applyQualifiers (interpreter/attributes.go): once a qualifier is optional, the plain
# ones after it are too, so `m.?a.b` is an optional of the field and `m.?a[0]` of the
# element; a method call ends the chain.
@pytest.mark.parametrize("expression", [
    "{'a': {'b': 1}}.?a.b == optional.of(1)",
    "{'a': {'b': 1}}.?a.c == optional.none()",
    "{'a': {'b': 1}}.?x.b == optional.none()",
    "{'a': {'b': {'c': 2}}}.?a.b.c.value() == 2",
    "{'a': {'b': {'c': 2}}}.?a.b.d.orValue(7) == 7",
    "{'a': [5]}.?a[0] == optional.of(5)",
    "{'a': [5]}.?a[1] == optional.none()",
    "{'a': {'b': [5]}}[?'a'].b[0].orValue(0) == 5",
    "{'a': {'b': 1}}.?a.b.hasValue()",
    "{'a': {'b': 1}}.?a.orValue({}).size() == 1",
    'device.attributes[?"gpu.example.com"].model == optional.of("a100")',
    'device.attributes[?"gpu.example.com"].vendor.orValue("none") == "none"',
    'device.attributes[?"nope.example.com"].model.orValue("none") == "none"',
    'device.capacity[?"gpu.example.com"].memory.value().isGreaterThan(quantity("1Gi"))',
])
def test_selection_after_an_optional_is_optional(expression: str) -> None:
    assert evaluate(expression) is True


# The same when no `.?` chain leads to the selection: cel-go decides by the value
# (applyQualifiers unwraps an optional operand), so a parenthesized optional, a function
# returning one and a cel.bind variable holding one select optionally too.
@pytest.mark.parametrize("expression", [
    "({'a': {'b': 1}}.?a).b == optional.of(1)",
    "optional.of({'b': 1}).b == optional.of(1)",
    "optional.of({'b': 1}).c == optional.none()",
    "optional.none().b == optional.none()",
    "(optional.of([1, 2]))[1] == optional.of(2)",
    "[{'x': 3}].first().x == optional.of(3)",
    "cel.bind(o, {'a': {'b': [4]}}.?a, o.b[0].value() == 4)",
    'cel.bind(gpu, device.attributes[?"gpu.example.com"], gpu.model.orValue("") == "a100")',
    "({'a': 1}).a == 1",  # no optional: a plain selection
    "cel.bind(m, {'a': 1}, m.a == 1)",
])
def test_selection_on_an_optional_value_is_optional(expression: str) -> None:
    assert evaluate(expression) is True


@pytest.mark.parametrize("expression, error", [
    ("({'a': 1}).b == 1", "no such key"),  # not optional: the plain selection's error
    ("optional.of('s').b == optional.none()", "no such overload"),
])
def test_selection_on_a_possible_optional_keeps_the_plain_errors(expression: str,
                                                                 error: str) -> None:
    with pytest.raises(CELError, match=error):
        evaluate(expression)


def test_a_plain_bind_is_not_routed_through_the_optional_helper() -> None:
    # cel.bind is DRA's documented idiom: its selections stay the core's own.
    from polsched.dra.selector_syntax import (
        expand_binds,
        rewrite_optional_operands,
        rewrite_syntax,
    )
    source = 'cel.bind(d, device.attributes["gpu.example.com"], d.model == "a100")'
    assert "__select" not in rewrite_optional_operands(expand_binds(rewrite_syntax(source)))


# ext/comprehensions_test.go (TestTwoVarComprehensions, ...RuntimeErrors): each entry is
# a map inserted into the result; a key already there is an error.
@pytest.mark.parametrize("expression", [
    # ext/comprehensions_test.go, list.transformMapEntry()
    """"key1:value1 key2:value2 key3:value3".split(" ")
       .transformMapEntry(i, v, cel.bind(entry, v.split(":"),
         entry.size() == 2 ? {entry[0]: entry[1]} : {}))
       == {'key1': 'value1', 'key2': 'value2', 'key3': 'value3'}""",
    """"key1:value1:extra key2:value2 key3".split(" ")
       .transformMapEntry(i, v, cel.bind(entry, v.split(":"), {?entry[0]: entry[?1]}))
       == {'key1': 'value1', 'key2': 'value2'}""",
    # map.transformMapEntry()
    """{'hello': 'world', 'greetings': 'tacocat'}.transformMapEntry(k, v,
       {k.reverse(): v.reverse()}) == {'olleh': 'dlrow', 'sgniteerg': 'tacocat'}""",
    """{'hello': 'world', 'greetings': 'tacocat'}.transformMapEntry(k, v,
       v.reverse() == v, {k.reverse(): v.reverse()}) == {'sgniteerg': 'tacocat'}""",
    "{'hello': 'world', 'greetings': 'tacocat'}.transformMapEntry(k, v, {}) == {}",
    "{1: 2}.transformMapEntry(k, v, {v: k}) == {2: 1}",
    # the doc comment's examples (ext/comprehensions.go)
    "{'greeting': 'hello'}.transformMapEntry(keyVar, valueVar, {valueVar: keyVar}) "
    "== {'hello': 'greeting'}",
    "[1, 2, 3].transformMapEntry(indexVar, valueVar, {valueVar: indexVar}) "
    "== {1: 0, 2: 1, 3: 2}",
    # an entry may hold several keys (@mapInsert_map_map)
    "[1, 2].transformMapEntry(i, v, {v: i, v * 10: i}) == {1: 0, 10: 0, 2: 1, 20: 1}",
    'device.attributes["gpu.example.com"].transformMapEntry(k, v, k != "memoryGiB", '
    '{"gpu/" + k: v}) == {"gpu/model": "a100"}',
])
def test_transform_map_entry(expression: str) -> None:
    assert evaluate(expression) is True


@pytest.mark.parametrize("expression, error", [
    # ext/comprehensions_test.go, TestTwoVarComprehensionsRuntimeErrors
    ("[1, 1].transformMapEntry(i, v, {v: i}) == {}", "insert failed: key 1 already exists"),
    ("[0, 0u].transformMapEntry(i, v, {v: i}) == {}", "insert failed: key 0 already exists"),
    ("{'greeting': 'aloha', 'farewell': 'aloha'}.transformMapEntry(k, v, {v: k}) == {}",
     "insert failed: key aloha already exists"),
    # ...StaticErrors: a compile error in cel-go (no matching overload), ours at run time
    ("{'hello': 'world'}.transformMapEntry(k, v, []) == {}", "no matching overload"),
    ("{}.transformMapEntry(j, i.k, {j: i.k}) == {}", "must be variable names"),
    ("[1].transformMapEntry(x, x, {x: x}) == {}", "the two variables must differ"),
])
def test_transform_map_entry_errors(expression: str, error: str) -> None:
    with pytest.raises(CELError, match=error):
        evaluate(expression)


@pytest.mark.parametrize("expression", [
    'device.attributes[?"nope.example.com"].hasValue()',
    'device.attributes[?"nope.example.com"].value() == {}',
    'device.capacity[?"nope.example.com"].hasValue()',
    'device.attributes.?nope.hasValue()',
])
def test_an_optional_domain_the_device_lacks_is_an_empty_map(expression: str) -> None:
    # compile.go's mapper.Find finds every domain (the default, an empty map), so an
    # optional index of one holds a value upstream.
    assert evaluate(expression) is True


def test_true_is_no_key_one() -> None:
    assert evaluate("{true: 'x'}[?1] == optional.none()")
    assert evaluate("{1: 'x'}[?true] == optional.none()")
    assert evaluate("{1: 'x'}[?1u] == optional.of('x')")  # 1 == 1u: one key


# The other macros of the libraries Kubernetes' base environment has that the core
# lacks: ext.Lists' sortBy (ext/lists_test.go) and the optional library's optMap,
# optFlatMap (cel/cel_test.go, TestOptionalValues) and optional.unwrap / unwrapOpt
# (cel/cel_test.go).
@pytest.mark.parametrize("expression", [
    "[].sortBy(e, e) == []",
    "['a'].sortBy(e, e) == ['a']",
    "[-3, 1, -5, -2, 4].sortBy(e, -(e * e)) == [-5, 4, -3, -2, 1]",
    "[-3, 1, -5, -2, 4].map(e, e * 2).sortBy(e, -(e * e)) == [-10, 8, -6, -4, 2]",
    "lists.range(3).sortBy(e, -e) == [2, 1, 0]",
    "['a', 'c', 'b', 'first'].sortBy(e, e == 'first' ? '' : e) == ['first', 'a', 'b', 'c']",
    "[{'field': 'lo'}, {'field': 'hi'}].sortBy(m, m.field) == [{'field': 'hi'}, "
    "{'field': 'lo'}]",
    "[{'x':4}, {'x':3}].sortBy(m, m['x']) == [{'x':3}, {'x':4}]",
    "optional.none().optMap(y, y + 1) == optional.none()",
    "optional.of(42).optMap(y, y + 1) == optional.of(43)",
    "{}.?key.optFlatMap(k, k.?subkey) == optional.none()",
    "{'key': {}}.?key.optFlatMap(k, k.?subkey) == optional.none()",
    "{'key': {'subkey': 'subvalue'}}.?key.optFlatMap(k, k.?subkey) "
    "== optional.of('subvalue')",
    "{'key': {'subkey': ''}}.?key.optFlatMap(k, k.?subkey) == optional.of('')",
    "{'key': {'subkey': ''}}.?key.optFlatMap(k, optional.ofNonZeroValue(k.subkey)) "
    "== optional.none()",
    'device.attributes["gpu.example.com"].?model.optMap(m, m.upperAscii()).orValue("") '
    '== "A100"',
    "optional.unwrap([]) == []",
    "optional.unwrap([optional.none(), optional.none()]) == []",
    "optional.unwrap([optional.of(42), optional.none(), optional.of('a')]) == [42, 'a']",
    "[optional.of(42), optional.none(), optional.of('a')].unwrapOpt() == [42, 'a']",
    # a cel.bind variable named like a field after .? is not substituted into it
    'cel.bind(model, 1, device.attributes["gpu.example.com"].?model.value() == "a100")',
    # a two-variable comprehension's variable shadows a cel.bind one, as in cel-go
    "cel.bind(v, 1, [2].all(k, v, v > 1))",
])
def test_other_macros_the_core_lacks(expression: str) -> None:
    assert evaluate(expression) is True


@pytest.mark.parametrize("expression, error", [
    ("[1, 2].sortBy(x, x == 1 ? 'a' : 1) == []", "list elements must have the same type"),
    ("[1].sortBy(x, [x]) == []", "list elements must be comparable"),
    ("[1].sortBy(x.y, x) == []", "must be a simple identifier"),
    ("optional.of(1).optFlatMap(x, x) == optional.none()", "want an optional"),
    ("1.optMap(x, x) == optional.none()", "no such overload"),
    ("[1].unwrapOpt() == [1]", "value 1 is not optional"),
])
def test_other_macro_errors(expression: str, error: str) -> None:
    with pytest.raises(CELError, match=error):
        evaluate(expression)


# --- bounds: a selector is untrusted input -------------------------------------------

HOSTILE = {
    # optional chaining turns each of these fields into a rewrite
    "40 selections on optional values":
        ("optional.of({})" + ".a" * 40 + " == optional.none()", "more than 32 selections"),
    "a chain of 2000 fields after .?":
        ("device.attributes.?a" + ".b" * 2000 + " == optional.none()", "more than 32 uses"),
    "4 nested transformMapEntry":
        ("[1].transformMapEntry(a, b, [1].transformMapEntry(c, d, [1].transformMapEntry("
         "e, f, [1].transformMapEntry(g, h, {h: g})))) == {}", "comprehensions nest 4 deep"),
    "200 optional list elements":
        ("[" + ", ".join(["?optional.of(1)"] * 200) + "] == []", "more than 32 uses"),
    # each finds its rewrites in one pass over the text (these took seconds when every
    # bracket was matched again)
    "3000 nested brackets": ("[" * 3000 + "1" + "]" * 3000 + " == []", "compilation failed"),
    "2400 parenthesized selections on an optional":
        ("(" * 2400 + "optional.of(1)" + ").a" * 2400 + " == 1", "more than 32 selections"),
    "too long":
        ("[" + ", ".join(["?optional.of(1)"] * 2000) + "] == []",
         f"the limit is {MAX_EXPRESSION_LENGTH}"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_pathological_selector_is_refused_with_a_clear_error(name: str) -> None:
    expression, error = HOSTILE[name]
    # Refused while compiling, before any device is tried.
    with pytest.raises(CELError, match=error):
        compile_selector(expression)


def test_nested_optional_literals_do_not_grow_the_expression() -> None:
    # Each rewrite is one helper call: nesting does not duplicate the inner text.
    nested = "[?" * 30 + "optional.of(1)" + "].first()" * 30 + ".value() == 1"
    assert len(nested) < 400
    assert evaluate(nested) is True
    # the inner list is no optional: cel-go's error
    with pytest.raises(CELError, match="non-optional value"):
        evaluate("[?" * 30 + "optional.of(1)" + "]" * 30 + " == [1]")


@pytest.mark.parametrize("owner, where", [("class", "classes"), ("claim", "claims")])
def test_the_allocator_names_the_class_or_claim_of_a_pathological_selector(
        owner: str, where: str) -> None:
    case = copy.deepcopy(next(c for c in upstream.load_cases()
                              if c["name"] == "invalid-CEL-one-device-class"))
    hostile = HOSTILE["a chain of 2000 fields after .?"][0]
    if where == "classes":
        case["classes"][0]["spec"]["selectors"][0]["cel"]["expression"] = hostile
    else:
        case["classes"][0]["spec"]["selectors"][0]["cel"]["expression"] = "true"
        case["claims"][0]["spec"]["devices"]["requests"][0]["exactly"]["selectors"] = [
            {"cel": {"expression": hostile}}]
    _, results, error = run(case)
    assert results is None
    name = "class-a" if owner == "class" else "claim-0"
    assert error is not None and error.startswith(f"{owner} {name}: selector #0: CEL "
                                                  "compile error: more than 32 uses")
