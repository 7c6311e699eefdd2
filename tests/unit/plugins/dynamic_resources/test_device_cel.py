"""The DRA CEL environment: upstream's selector cases (k8s.io/dynamic-resource-allocation
cel/compile_test.go, as data in testdata/cel_cases.json) and the pieces we added to the
CEL package: cel.bind, quantity, semver, the list library."""

from __future__ import annotations

import json
from typing import Any

import pytest

from polsched.dra import CELError
from polsched.dra.device_cel import (
    DeviceInput,
    compare_semver,
    compile_selector,
    parse_semver,
)
from polsched.dra.selector_syntax import expand_binds
from tests.unit.plugins.dynamic_resources.upstream import TESTDATA

pytestmark = pytest.mark.unit

CASES = sorted(json.loads((TESTDATA / "cel_cases.json").read_text(encoding="utf-8")),
               key=lambda c: str(c["name"]))


def evaluate(expression: str, device: DeviceInput) -> bool:
    return compile_selector(expression).matches(device)


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_upstream_case(case: dict[str, Any]) -> None:
    if case.get("envType") == "NewExpressions":
        pytest.skip("the scheduler evaluates stored expressions; new-expression checks are "
                    "the API server's")
    device = DeviceInput(case["driver"], case["attributes"] or {}, case["capacity"] or {},
                         bool(case["allowMultipleAllocations"]))
    want_error = case["expectCompileError"] or case["expectMatchError"]
    if want_error:
        with pytest.raises(CELError):
            evaluate(case["expression"], device)
    else:
        assert evaluate(case["expression"], device) is case["expectMatch"]


GPU = DeviceInput("gpu.example.com",
                  {"model": {"string": "a100"}, "memoryGiB": {"int": 40},
                   "driverVersion": {"version": "1.2.3-rc.1+build5"},
                   "other.example.com/numa": {"int": 1}},
                  {"memory": {"value": "40Gi"}})


@pytest.mark.parametrize("expression, want", [
    ('device.driver == "gpu.example.com"', True),
    ('device.attributes["gpu.example.com"].model == "a100"', True),
    ('device.attributes["other.example.com"].numa == 1', True),
    ('device.capacity["gpu.example.com"].memory.compareTo(quantity("40960Mi")) == 0', True),
    ('device.capacity["gpu.example.com"].memory == quantity("40Gi")', True),
    ('device.capacity["gpu.example.com"].memory.isLessThan(quantity("41Gi"))', True),
    ('device.capacity["gpu.example.com"].memory.add(quantity("1Gi"))'
     '.isGreaterThan(quantity("40Gi"))', True),
    ('device.capacity["gpu.example.com"].memory.sub(1).isLessThan(quantity("40Gi"))', True),
    ('device.capacity["gpu.example.com"].memory.asInteger() == 42949672960', True),
    ('quantity("1.5").isInteger()', False),
    ('isQuantity("1Gi") && !isQuantity("1 Gi")', True),
    ('device.attributes["gpu.example.com"].driverVersion == semver("1.2.3-rc.1")', True),
    ('device.attributes["gpu.example.com"].driverVersion.isLessThan(semver("1.2.3"))', True),
    ('device.attributes["gpu.example.com"].driverVersion.major() == 1', True),
    ('semver("v1.02", true) == semver("1.2.0")', True),
    ('isSemver("1.2") || isSemver("01.2.3")', False),
    ('[1, 2, 2, 3].isSorted() && ![2, 1].isSorted()', True),
    ('[semver("1.0.0"), semver("1.0.0-alpha")].isSorted()', False),
    ('[1, 2, 3].sum() == 6 && [3, 1, 2].min() == 1 && [3, 1, 2].max() == 3', True),
    ('[quantity("1Gi"), quantity("1Gi")].sum() == quantity("2Gi")', True),
    ('[1, 2, 1].indexOf(1) == 0 && [1, 2, 1].lastIndexOf(1) == 2', True),
    ('"abcab".indexOf("b") == 1 && "abcab".lastIndexOf("b") == 4', True),
    ('"a100-80gb".find("[0-9]+") == "100"', True),
    ('"a1b22c333".findAll("[0-9]+") == ["1", "22", "333"]', True),
    ('cel.bind(gpu, device.attributes["gpu.example.com"], gpu.model == "a100" && '
     'gpu.memoryGiB >= 40)', True),
    ('cel.bind(a, 1, cel.bind(b, a + 1, b == 2))', True),
    ('device.attributes["missing.example.com"].size() == 0', True),
    ('"missing.example.com" in device.attributes', False),
    ('device.attributes["gpu.example.com"].exists(k, k == "model")', True),
])
def test_kubernetes_library(expression: str, want: bool) -> None:
    assert evaluate(expression, GPU) is want


@pytest.mark.parametrize("expression, message", [
    ('device.attributes["gpu.example.com"].nosuch == 1', "no such key"),
    ('device.attributes["gpu.example.com"].model.isGreaterThan(quantity("1"))',
     "no such overload"),
    ("noSuchVariable", "undeclared reference"),
    ('device.driver == "x" &&', "compilation failed"),
    ('cel.bind(1, 2, 3)', "first argument must be a variable name"),
    ('cel.bind(x, [1], x.all(x, x > 0))', "bound again"),
    ('"x".size()', "could not be converted to bool"),
    ("x" * 11000, "characters long"),
])
def test_errors_name_the_problem(expression: str, message: str) -> None:
    with pytest.raises(CELError, match=message):
        evaluate(expression, GPU)


def test_bind_substitutes_only_the_variable_not_fields_or_strings() -> None:
    assert expand_binds('cel.bind(x, a.b, x.x + "x" + x)') == '((a.b).x + "x" + (a.b))'


def test_semver_ordering_follows_semver_2() -> None:
    ordered = ["1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta",
               "1.0.0-beta.2", "1.0.0-beta.11", "1.0.0-rc.1", "1.0.0", "2.0.0"]
    vs = [parse_semver(v) for v in ordered]
    for a, b in zip(vs, vs[1:], strict=False):
        assert compare_semver(a, b) == -1
        assert compare_semver(b, a) == 1
    assert compare_semver(parse_semver("1.0.0+a"), parse_semver("1.0.0+b")) == 0


# The Kubernetes IP and CIDR libraries: upstream's cases (apiserver pkg/cel/library
# ip_test.go, cidr_test.go), as boolean expressions; string() and type() of them are not
# supported (docs/differences.md).
@pytest.mark.parametrize("expression, want", [
    ('ip("192.168.0.1") == ip("192.168.0.1")', True),
    ('isIP("192.168.0.1")', True), ('isIP("192.168.0.1.0")', False),
    ('ip.isCanonical("127.0.0.1")', True),
    ('ip("192.168.0.1").family() == 4', True),
    ('ip("0.0.0.0").isUnspecified()', True), ('ip("127.0.0.1").isUnspecified()', False),
    ('ip("127.0.0.1").isLoopback()', True), ('ip("1.2.3.4").isLoopback()', False),
    ('ip("224.0.0.1").isLinkLocalMulticast()', True),
    ('ip("224.0.1.1").isLinkLocalMulticast()', False),
    ('ip("169.254.169.254").isLinkLocalUnicast()', True),
    ('ip("192.168.0.1").isLinkLocalUnicast()', False),
    ('ip("192.168.0.1").isGlobalUnicast()', True),
    ('ip("255.255.255.255").isGlobalUnicast()', False),
    ('ip("2001:db8::68") == ip("2001:0db8::68")', True),
    ('isIP("2001:db8::68")', True), ('isIP("2001:db8:::68")', False),
    ('ip.isCanonical("2001:db8::68")', True), ('ip.isCanonical("2001:DB8::68")', False),
    ('ip("2001:db8::68").family() == 6', True),
    ('ip("::").isUnspecified()', True), ('ip("::1").isUnspecified()', False),
    ('ip("::1").isLoopback()', True), ('ip("2001:db8::abcd").isLoopback()', False),
    ('ip("ff02::1").isLinkLocalMulticast()', True),
    ('ip("fd00::1").isLinkLocalMulticast()', False),
    ('ip("fe80::1").isLinkLocalUnicast()', True), ('ip("fd80::1").isLinkLocalUnicast()', False),
    ('ip("2001:db8::abcd").isGlobalUnicast()', True),
    ('ip("ff00::1").isGlobalUnicast()', False),
    ('cidr("192.168.0.0/24") == cidr("192.168.0.0/24")', True),
    ('cidr("192.168.0.0/24").containsIP(ip("192.168.0.1"))', True),
    ('cidr("192.168.0.0/24").containsIP(ip("192.168.1.1"))', False),
    ('cidr("192.168.0.0/24").containsIP("192.168.0.1")', True),
    ('cidr("192.168.0.0/24").containsIP("192.168.1.1")', False),
    ('cidr("192.168.0.0/24").containsCIDR(cidr("192.168.0.0/25"))', True),
    ('cidr("192.168.0.0/24").containsCIDR(cidr("192.168.0.1/32"))', True),
    ('cidr("192.168.0.0/24").containsCIDR(cidr("192.168.0.0/23"))', False),
    ('cidr("192.168.0.0/24").containsCIDR(cidr("192.169.0.1/32"))', False),
    ('cidr("192.168.0.0/24").containsCIDR("192.168.0.0/25")', True),
    ('cidr("192.168.0.0/24").containsCIDR("192.168.0.0/23")', False),
    ('cidr("192.168.0.0/24").ip() == ip("192.168.0.0")', True),
    ('cidr("192.168.0.1/24").masked() == cidr("192.168.0.0/24")', True),
    ('cidr("192.168.0.0/24").prefixLength() == 24', True),
    ('cidr("2001:db8::/32").containsIP(ip("2001:db8::1"))', True),
    ('cidr("2001:db8::/32").containsIP(ip("2001:dc8::1"))', False),
    ('cidr("2001:db8::/32").containsIP("2001:db8::1")', True),
    ('cidr("2001:db8::/32").containsCIDR(cidr("2001:db8::/33"))', True),
    ('cidr("2001:db8::/32").containsCIDR(cidr("2001:db8::/31"))', False),
    ('cidr("2001:db8::/32").containsCIDR("2001:db8::/33")', True),
    ('cidr("2001:db8::/32").containsCIDR("2001:db8::/31")', False),
    ('cidr("2001:db8:1::/32").masked() == cidr("2001:db8::/32")', True),
    ('cidr("2001:db8::/32").prefixLength() == 32', True),
])
def test_ip_and_cidr_library(expression: str, want: bool) -> None:
    assert evaluate(expression, GPU) is want


@pytest.mark.parametrize("expression", [
    'ip("192.168.0.1.0") == ip("1.1.1.1")', 'ip.isCanonical("127.0.0.1.0")',
    'ip("2001:db8:::68").family() == 6', 'cidr("192.168.0.0/") == cidr("1.0.0.0/8")',
    'cidr("2001:db8::/").prefixLength() == 1', 'ip("::ffff:1.2.3.4").family() == 6',
    'ip("fe80::1%eth0").family() == 6', 'isIP(cidr("192.168.0.0/24"))',
])
def test_ip_and_cidr_errors(expression: str) -> None:
    with pytest.raises(CELError):
        evaluate(expression, GPU)


# Optional syntax (cel-go's OptionalTypes, in Kubernetes' base environment), two-variable
# comprehensions (ext.TwoVarComprehensions) and string() of IPs and CIDRs
# (library/ip.go, cidr.go): the Rust core lacks them, selector_syntax.rewrite_syntax adds them.
# Cases after cel-go's optional and comprehension tests and apiserver's ip/cidr tests.
@pytest.mark.parametrize("expression, want", [
    ('device.attributes["gpu.example.com"].?model.orValue("none") == "a100"', True),
    ('device.attributes["gpu.example.com"].?vendor.orValue("none") == "none"', True),
    ('!device.attributes["gpu.example.com"].?vendor.hasValue()', True),
    ('device.attributes.?missing.?model.orValue("x") == "x"', True),
    ('device.attributes.?"gpu.example.com"', None),  # a field name must be an identifier
    ('device.attributes[?"gpu.example.com"].?model.value() == "a100"', True),
    ('device.attributes[?"nope.example.com"].?model.orValue(1) == 1', True),
    ('[1, 2, 3][?1].orValue(0) == 2 && [1, 2, 3][?5].orValue(0) == 0', True),
    ('[1, 2, 3][?-1].hasValue()', False),
    ('{"a": {"b": 1}}.?a.?b.value() == 1', True),
    ('optional.of(1).or(optional.none()).value() == 1', True),
    ('[1, 2, 3].all(i, v, i < v)', True),
    ('[1, 2, 3].exists(i, v, i == 1 && v == 2)', True),
    ('[1, 2, 3].existsOne(i, v, i == v)', False),
    ('{"hello": "world"}.all(k, v, k.startsWith("hello") && v == "world")', True),
    ('device.attributes["gpu.example.com"].exists(k, v, k == "model" && v == "a100")',
     True),
    ('[1, 2, 3].transformList(i, v, i * v) == [0, 2, 6]', True),
    ('[1, 2, 3].transformList(i, v, i > 0, v) == [2, 3]', True),
    ('{"a": 1, "b": 2}.transformMap(k, v, v + 1) == {"a": 2, "b": 3}', True),
    ('{"a": 1, "b": 2}.transformMap(k, v, v > 1, v * 10) == {"b": 20}', True),
    ('[[1, 2], [3]].all(i, l, l.all(j, v, v > i))', True),
    ('[1].all(x, x, true)', None),  # the two variables must differ
    ('string(ip("192.168.0.1")) == "192.168.0.1"', True),
    ('string(ip("2001:DB8::1")) == "2001:db8::1"', True),
    ('string(cidr("192.168.0.1/24")) == "192.168.0.1/24"', True),
    ('string(cidr("192.168.0.0/24").ip()) == "192.168.0.0"', True),
    ('string(1) == "1" && string(true) == "true" && string("x") == "x"', True),
])
def test_syntax_the_core_lacks(expression: str, want: bool | None) -> None:
    if want is None:
        with pytest.raises(CELError):
            evaluate(expression, GPU)
    else:
        assert evaluate(expression, GPU) is want


def test_rewritten_comprehensions_count_against_the_nesting_limit() -> None:
    nested = "[[[[1]]]].all(a, b, b.all(c, d, d.all(e, f, f.all(g, h, h > 0))))"
    with pytest.raises(CELError, match="comprehensions nest 4 deep"):
        compile_selector(nested)


def test_a_selector_with_too_many_rewrites_is_refused_quickly() -> None:
    hostile = " && ".join(["[1].all(i, v, true)"] * 400)
    with pytest.raises(CELError, match="more than 32 uses"):
        compile_selector(hostile)


# -- regex on RE2 (issue 36, finding 2) --------------------------------------------------

# A driver publishes a string attribute (the API allows 64 characters); a claim's selector
# searches it with a pattern that backtracks exponentially on Python's re: 2**40 steps
# in one C call that holds the GIL. RE2 is linear in the subject.
_REDOS = r"""
from polsched.dra.device_cel import DeviceInput, compile_selector
device = DeviceInput("gpu.example.com", {"serial": {"string": "a" * 40 + "!"}}, {})
s = compile_selector('device.attributes["gpu.example.com"].serial.find("(a+)+$") == "" && '
                     'size(device.attributes["gpu.example.com"].serial.findAll("(a|aa)+$")) == 0')
print(s.matches(device))
"""


def test_a_backtracking_pattern_runs_in_linear_time() -> None:
    """Under a watchdog in a subprocess: a GIL-holding call cannot be timed in-process."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[4]
    out = subprocess.run([sys.executable, "-c", _REDOS], capture_output=True, text=True,
                         timeout=20, cwd=root, check=True)
    assert out.stdout.strip() == "True"


@pytest.mark.parametrize("expression, want", [
    ('"abc".findAll("b*") == ["", "b", ""]', True),  # Go skips an empty match after one
    ('"ébéb".findAll("b|") == ["", "b", "b"]', True),
    ('"aaa".findAll("^a") == ["a"]', True),  # ^ is the subject's start, not the last end
    ('"a1b22c333".findAll("[0-9]+", 2) == ["1", "22"]', True),
    ('"naïve".find("\\\\w+$") == "ve"', True),  # \w is ASCII, as Go's
])
def test_find_and_find_all_have_go_semantics(expression: str, want: bool) -> None:
    assert evaluate(expression, GPU) is want


@pytest.mark.parametrize("pattern", ["(", "\\\\pL{200}", "a{1001}"])
def test_a_constant_pattern_re2_refuses_fails_the_compilation(pattern: str) -> None:
    """As upstream, whose regex library compiles constant patterns with the program: even
    where evaluation would never reach the call."""
    with pytest.raises(CELError, match="compilation failed: .*regex"):
        compile_selector(f'false && "abc".find("{pattern}") == ""')
    with pytest.raises(CELError, match="compilation failed: .*regex"):
        compile_selector(f'size("abc".findAll("{pattern}", 2)) == 0')


def test_a_computed_pattern_re2_refuses_is_a_runtime_error() -> None:
    sel = compile_selector('"abc".find(device.attributes["gpu.example.com"].model + "(") == ""')
    with pytest.raises(CELError, match="invalid regex"):
        sel.matches(GPU)


def test_a_capacity_past_what_a_decimal_holds_is_a_match_error_naming_it() -> None:
    # A fuzz finding: "1e999999999" raised QuantityError out of Selector.matches.
    device = DeviceInput("dra.example.com", {}, {"memory": {"value": "1e999999999"}})
    with pytest.raises(CELError, match="capacity memory: invalid quantity '1e999999999'"):
        evaluate("device.driver == 'dra.example.com'", device)


def test_an_attribute_the_cel_core_cannot_hold_is_a_match_error() -> None:
    # A fuzz finding: a string with a lone surrogate failed conversion in add_variable,
    # before the try around execute, and a ValueError escaped Selector.matches.
    device = DeviceInput("dra.example.com", {"model": {"string": "\ud800"}}, {})
    with pytest.raises(CELError, match="Failed to convert"):
        evaluate("device.attributes['dra.example.com'].model == 'a'", device)
