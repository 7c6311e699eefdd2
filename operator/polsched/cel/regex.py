"""Regular expressions as Kubernetes' CEL runs them: RE2, compiled once, with a bounded
program.

cel-go's `matches` (and the Kubernetes regex library's `find`, `findAll`) compile with
Go's regexp, an RE2 engine: matching is linear in the subject, never backtracking. Python's
`re` backtracks (`'aaaa…a!'.find('(a+)+$')` doubles with each character, in one C call
that holds the GIL), and the CEL library in use compiles a `matches` pattern on every
evaluation (`\\w{200}` ~110 ms each time with its Unicode classes). So every pattern goes
through here: google-re2, which has Go's syntax and semantics (`\\w` is ASCII, as in Go),
compiled once and kept (constants at load by their owner, others in a bounded cache).

Compiling is bounded too. RE2's compile time grows with its program (`\\pL{200}` is 239,204
instructions and ~1 s), so compiling runs with MAX_MEMORY, which makes RE2 give up early
on such a pattern, and a program over MAX_PROGRAM_SIZE instructions is refused. Matching
costs at worst about 20 ns per subject character and program instruction (RE2's NFA, when
its DFA runs out of states: `(.*a){20}` measured 19 ns), which the cost model charges
(polsched.cel.cost, `regex_inst_factor`), so the caller needs the program's size.

No I/O.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache

import re2

# RE2's memory budget for one compiled pattern (program and DFA cache): under it RE2
# stops compiling a huge program after a few milliseconds (measured: \pL{1000} 2.4 ms).
MAX_MEMORY = 1 << 19
# The most instructions a pattern may compile to: \w{1000} is 3,004 and .{1000} 8,004;
# one Unicode class repeated (\pL{20}, 23,924) is refused.
MAX_PROGRAM_SIZE = 10_000
# Patterns not known until evaluation (read from a pod, a node or a device) are kept by
# their text, the most recently used ones.
CACHE_SIZE = 256

_OPTIONS = re2.Options()
_OPTIONS.max_mem = MAX_MEMORY
_OPTIONS.log_errors = False  # RE2 writes its errors to stderr; ours carry them


class RegexError(ValueError):
    """A pattern that is not RE2 syntax, or whose program is too large."""


@dataclass(frozen=True, slots=True)
class Regex:
    """One compiled pattern. Search semantics, as CEL's `matches` (not anchored)."""

    pattern: str
    program_size: int
    _compiled: object

    def matches(self, subject: str) -> bool:
        return self._compiled.search(subject) is not None  # type: ignore[attr-defined]

    def find(self, subject: str) -> str:
        """The leftmost match, or "" (the regex library's `find`)."""
        m = self._compiled.search(subject)  # type: ignore[attr-defined]
        return str(m.group(0)) if m is not None else ""

    def find_all(self, subject: str) -> Iterator[str]:
        """The successive non-overlapping matches (`findAll`), as Go's FindAllString
        (regexp.allMatches): an empty match right after a match is skipped ("abc" with
        `b*` gives "", "b", "", where Python's finditer gives a fourth "")."""
        pos, previous_end = 0, -1
        while pos <= len(subject):
            # the whole subject stays the context, so ^ and \b see what precedes pos
            m = self._compiled.search(subject, pos)  # type: ignore[attr-defined]
            if m is None:
                return
            start, end = m.span()
            accept = True
            if end == start:
                accept = start != previous_end
                pos = end + 1  # past one character (a code point, Go's rune)
            else:
                pos = end
            previous_end = end
            if accept:
                yield str(m.group(0))


def compile_regex(pattern: str) -> Regex:
    """The compiled pattern (cached by its text); RegexError when RE2 refuses it or its
    program is over MAX_PROGRAM_SIZE."""
    return _compile(pattern)


@lru_cache(maxsize=CACHE_SIZE)
def _compile(pattern: str) -> Regex:
    try:
        compiled = re2.compile(pattern, _OPTIONS)
    except (re2.error, UnicodeError) as err:
        raise RegexError(f"invalid regex {pattern!r}: {_reason(err)}") from err
    size = int(compiled.programsize)
    if size > MAX_PROGRAM_SIZE:
        raise RegexError(f"regex {pattern!r} compiles to {size} instructions; the limit is "
                         f"{MAX_PROGRAM_SIZE} (repeat a smaller group, or a narrower class "
                         f"than a Unicode one)")
    return Regex(pattern, size, compiled)


def _reason(err: BaseException) -> str:
    reason = err.args[0] if err.args else err
    if isinstance(reason, bytes):
        reason = reason.decode(errors="replace")
    if reason == "pattern too large - compile failed":
        return (f"pattern too large: it needs more than {MAX_MEMORY} bytes compiled (repeat "
                f"a smaller group, or a narrower class than a Unicode one)")
    return str(reason)
