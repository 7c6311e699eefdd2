"""Text fit for a message a person reads: an event's note, a pod's condition, a log line.

Parts of messages come from outside the scheduler (an extender's FailedNodes reasons and
Error, names it answers with) and end up in pods' conditions, events and terminals.
Control characters and terminal escape sequences are taken out (a message must not move
a terminal's cursor or recolour it) and the length is capped (a 631 KB reason once reached
a pod's PodScheduled condition).

Purely data: no I/O. Linear time in the text's length, whatever it holds.
"""

from __future__ import annotations

import re

# A pod condition's message: upstream writes FitError messages whole; they are short
# (a count per distinct reason) unless a reason is not ours. Well above any of ours.
MAX_CONDITION_MESSAGE_CHARS = 16 * 1024
ELLIPSIS = "..."

# ECMA-48 sequences a terminal acts on: CSI (ESC [ params intermediates final), OSC and the
# other string commands up to BEL or ST, and the two-character escapes. The classes of
# each part are disjoint, so a match is found or refused in one pass (no backtracking).
_ESCAPES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]?"          # CSI
    r"|\x1b[\]PX^_][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC, DCS, SOS, PM, APC
    r"|\x9b[0-?]*[ -/]*[@-~]?"           # 8-bit CSI
    r"|\x1b[ -~]?")                      # any other escape


def sanitized(text: str, limit: int) -> str:
    """`text` cut to `limit` characters (ELLIPSIS appended when cut), terminal escape
    sequences removed and every other non-printable character (newlines, tabs, the C1
    controls, format characters) replaced by a space."""
    if len(text) > limit:
        text = text[:limit] + ELLIPSIS
    if text.isprintable():
        return text
    text = _ESCAPES.sub("", text)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else " " for c in text)


def condition_message(text: str) -> str:
    """A pod condition's message as polsched writes it: sanitized, at most
    MAX_CONDITION_MESSAGE_CHARS (plus the ellipsis)."""
    return sanitized(text, MAX_CONDITION_MESSAGE_CHARS)
