"""Go duration strings ("5s", "500ms", "1m30s"), as metav1.Duration carries them.

kube-scheduler's Extender.HTTPTimeout is a metav1.Duration, which (un)marshals with Go's
time.ParseDuration; users copy these values from their KubeSchedulerConfiguration.
"""

from __future__ import annotations

import re

# time.ParseDuration's units, in seconds; both micro signs are accepted, as Go does.
_UNITS: dict[str, float] = {
    "ns": 1e-9, "us": 1e-6, "\u00b5s": 1e-6, "\u03bcs": 1e-6, "ms": 1e-3,
    "s": 1.0, "m": 60.0, "h": 3600.0,
}
_TERM = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|\u00b5s|\u03bcs|ms|s|m|h)")


class DurationError(ValueError):
    pass


def parse_go_duration(value: str) -> float:
    """Seconds for a Go duration string; raises DurationError with Go's wording."""
    s = value
    sign = 1.0
    if s[:1] in ("-", "+"):
        sign = -1.0 if s[0] == "-" else 1.0
        s = s[1:]
    if s == "0":
        return 0.0
    if not s:
        raise DurationError(f'time: invalid duration "{value}"')
    total = 0.0
    pos = 0
    while pos < len(s):
        m = _TERM.match(s, pos)
        if m is None:
            # Go distinguishes a number with no unit from garbage; both are refused.
            if re.match(r"\d+\.?\d*$|\.\d+$", s[pos:]):
                raise DurationError(f'time: missing unit in duration "{value}"')
            raise DurationError(f'time: invalid duration "{value}"')
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    return sign * total
