"""polsched.cel.regex: RE2 as Kubernetes' CEL runs it (Go's regexp), compiled once and
bounded."""

from __future__ import annotations

import pytest

from polsched.cel import regex

pytestmark = pytest.mark.unit


def test_a_pattern_compiles_once_while_it_stays_in_the_cache() -> None:
    first = regex.compile_regex("^gpu-[0-9]+$")
    assert regex.compile_regex("^gpu-[0-9]+$") is first
    assert first.matches("gpu-12") and not first.matches("gpu-")


def test_program_size_is_reported_and_bounded() -> None:
    assert regex.compile_regex("\\w{200}").program_size > 50 * regex.compile_regex(
        "abc").program_size
    with pytest.raises(regex.RegexError, match="instructions; the limit is"):
        regex.compile_regex(".{1000}[a-z]{1000}[0-9]{1000}")


@pytest.mark.parametrize("pattern", ["\\pL{200}", "(?i)\\pL{60}", "(\\pL{100}){10}"])
def test_a_program_over_the_memory_bound_is_refused_early(pattern: str) -> None:
    with pytest.raises(regex.RegexError, match="pattern too large"):
        regex.compile_regex(pattern)


def test_semantics_are_go_regexps() -> None:
    assert not regex.compile_regex("^\\w+$").matches("naïve")  # \w is ASCII
    assert regex.compile_regex("b").matches("abc")  # a search, not a full match
    assert list(regex.compile_regex("b*").find_all("abc")) == ["", "b", ""]
    assert regex.compile_regex("[0-9]+").find("a1b22") == "1"
    assert regex.compile_regex("x").find("abc") == ""
    with pytest.raises(regex.RegexError, match="invalid regex"):
        regex.compile_regex("(a)\\1")  # a backreference: not RE2, nor Go
