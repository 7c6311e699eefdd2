"""polsched.framework.names: apimachinery's name validation."""

from __future__ import annotations

import pytest

from polsched.framework import names

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("value", ["a", "label-priority", "a.b-c", "x" * 253])
def test_dns1123_subdomain_valid(value: str) -> None:
    assert names.dns1123_subdomain(value) == []


@pytest.mark.parametrize("value", ["", "A", "a_b", "-a", "a.", "x" * 254])
def test_dns1123_subdomain_invalid(value: str) -> None:
    assert names.dns1123_subdomain(value)


@pytest.mark.parametrize(("value", "ok"), [
    ("polsched-system", True), ("a.b", False), ("x" * 64, False), ("Ns", False)])
def test_dns1123_label(value: str, ok: bool) -> None:
    assert (names.dns1123_label(value) == []) is ok


@pytest.mark.parametrize(("value", "problem"), [
    ("example.com/foo", ""), ("foo", ""), ("Foo_1.x", ""),
    ("/foo", "prefix part must be non-empty"), ("example.com/", "name part must be non-empty"),
    ("Example.com/foo", "prefix part a lowercase RFC 1123 subdomain"),
    ("a/b/c", "a qualified name must consist"), ("example.com/-x", "name part must consist"),
    ("x/" + "y" * 64, "name part must be no more than 63 characters"),
])
def test_qualified_name(value: str, problem: str) -> None:
    errs = names.qualified_name(value)
    if problem:
        assert any(e.startswith(problem) for e in errs), errs
    else:
        assert errs == []


@pytest.mark.parametrize(("value", "extended"), [
    ("example.com/foo", True), ("nvidia.com/gpu", True), ("cpu", False),
    ("kubernetes.io/foo", False), ("requests.example.com/foo", False),
    # A 245-character prefix is a valid subdomain; "requests." makes it 254, too long.
    (".".join(["a" * 63, "b" * 63, "c" * 63, "d" * 53]) + "/foo", False),
])
def test_is_extended_resource_name(value: str, extended: bool) -> None:
    assert names.is_extended_resource_name(value) is extended
