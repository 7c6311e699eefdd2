"""Minimise a failing case: drop what the failure does not need, greedily.

A case is a JSON document; a smaller one is tried by removing a list's items (halves
first, then one at a time), a map's keys, and by cutting long strings in half. A
candidate is kept when it still breaks an invariant the same way: one of its violations
starts with the signature of the original (its class and stage, "escape:loader",
"message:policy-error"). The case's "kind" is never removed. Each try runs through
`judge` (the watchdog's worker, in a campaign), so a minimisation costs at most
`max_runs` cases.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterator
from typing import Any

Json = dict[str, Any]
Judge = Callable[[Json], list[str]]

_KEEP = frozenset({"kind"})


def signature(violation: str) -> str:
    """What a smaller case must still show: the violation's class, its stage when it
    names one, and for an escape the exception's type ("escape:loader: ValueError",
    "victim:cycle", "hang", "disagree"): a cut that breaks the case itself (a KeyError
    in the worker) is not the same failure."""
    parts = violation.split(":", 2)
    if len(parts) == 3 and parts[1] and " " not in parts[1]:
        if parts[0] == "escape":
            return f"escape:{parts[1]}: {(parts[2].split() or [''])[0]}"
        return f"{parts[0]}:{parts[1]}"
    return parts[0]


def _paths(doc: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every container and long string in `doc`, outermost first."""
    if isinstance(doc, dict | list) or (isinstance(doc, str) and len(doc) > 8):
        yield path
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, (*path, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _paths(v, (*path, i))


def _get(doc: Any, path: tuple[Any, ...]) -> Any:
    for p in path:
        doc = doc[p]
    return doc


def _with(doc: Json, path: tuple[Any, ...], value: Any) -> Json:
    out = copy.deepcopy(doc)
    parent = _get(out, path[:-1])
    parent[path[-1]] = value
    return out


def _smaller(doc: Json, path: tuple[Any, ...]) -> Iterator[Json]:
    """Candidates one step smaller than `doc` at `path`."""
    value = _get(doc, path)
    if isinstance(value, list):
        n = len(value)
        chunk = n // 2
        while chunk >= 1:
            for start in range(0, n, chunk):
                rest = value[:start] + value[start + chunk:]
                if path:
                    yield _with(doc, path, rest)
            chunk //= 2
    elif isinstance(value, dict):
        for key in list(value):
            if not path and key in _KEEP:
                continue
            without = {k: v for k, v in value.items() if k != key}
            yield _with(doc, path, without) if path else without
    elif isinstance(value, str) and path:
        yield _with(doc, path, value[:len(value) // 2])


def _size(doc: Any) -> int:
    if isinstance(doc, dict):
        return 1 + sum(_size(v) for v in doc.values())
    if isinstance(doc, list):
        return 1 + sum(_size(v) for v in doc)
    if isinstance(doc, str):
        return 1 + len(doc) // 64
    return 1


def minimise(case: Json, violations: list[str], judge: Judge, max_runs: int = 300,
             max_seconds: float = 120.0) -> tuple[Json, int]:
    """The smallest case found within `max_runs` runs and `max_seconds` that still shows
    one of `violations`' signatures, and how many runs it took."""
    wanted = {signature(v) for v in violations}
    deadline = time.monotonic() + max_seconds

    def fails(candidate: Json) -> bool:
        return any(signature(v) in wanted for v in judge(candidate))

    best = case
    runs = 0
    improved = True
    while improved and runs < max_runs:
        improved = False
        # the largest parts first: a case that fails slowly (a hang costs the whole
        # timeout per try) gets its big cuts within the budget
        for path in sorted(_paths(best), key=lambda p: -_size(_get(best, p))):
            try:
                _get(best, path)
            except (KeyError, IndexError, TypeError):
                continue  # gone with an earlier cut
            for candidate in _smaller(best, path):
                if runs >= max_runs or time.monotonic() > deadline:
                    return best, runs
                if _size(candidate) >= _size(best):
                    continue
                runs += 1
                if fails(candidate):
                    best = candidate
                    improved = True
                    break
    return best, runs
