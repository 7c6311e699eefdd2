"""polsched.api.durations: Go's time.ParseDuration, as metav1.Duration fields use it."""

from __future__ import annotations

import pytest

from polsched.api.durations import DurationError, parse_go_duration

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("text", "seconds"), [
    ("5s", 5.0), ("500ms", 0.5), ("1m30s", 90.0), ("1h", 3600.0), ("2h45m", 9900.0),
    ("1.5s", 1.5), (".5s", 0.5), ("100us", 1e-4), ("100\u00b5s", 1e-4), ("10ns", 1e-8),
    ("0", 0.0), ("-2s", -2.0), ("+3s", 3.0), ("1h1m1s1ms", 3661.001),
])
def test_valid(text: str, seconds: float) -> None:
    assert parse_go_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(("text", "message"), [
    ("", "invalid duration"), ("5", "missing unit"), ("1h5", "missing unit"),
    ("5x", "invalid duration"), ("s", "invalid duration"), ("1 s", "invalid duration"),
    ("-", "invalid duration"), ("5S", "invalid duration"),
])
def test_invalid(text: str, message: str) -> None:
    with pytest.raises(DurationError, match=message):
        parse_go_duration(text)
