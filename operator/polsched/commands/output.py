"""How the commands print what they report: `-o json|yaml`, the way kubectl does.

For: one JSON and one YAML rendering of a report's JSON form, shared by every command
that reports (validate, explain, simulate, snapshot), and writing the text to a file or
standard output. YAML goes through PyYAML's C emitter (libyaml) where it is built in: in
less than half the time, which matters for a snapshot of thousands of pods, and with
the snapshot's settings (non-ASCII escaped) the same bytes as the pure-Python SafeDumper
(tests/unit/commands/test_snapshot_redaction.py checks). With unicode allowed, as in
reports, libyaml writes a character beyond the BMP as it is where Python escapes it.

What it must not do: decide what a report holds; the commands build the JSON form.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any, TextIO

import yaml

JSON = "json"
YAML = "yaml"
STRUCTURED = (JSON, YAML)


def dumper() -> type[Any]:
    """libyaml's safe dumper where PyYAML was built with it, else the Python one."""
    d: type[Any] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    return d


def to_yaml(doc: Any, *, sort_keys: bool = False, allow_unicode: bool = True,
            dumper_cls: type[Any] | None = None) -> str:
    """Block-style YAML, no line folding (a long CEL expression or message stays one line,
    so a diff of two reports shows the line that changed)."""
    text: str = yaml.dump(doc, Dumper=dumper_cls or dumper(), sort_keys=sort_keys,
                          default_flow_style=False, allow_unicode=allow_unicode,
                          width=1 << 16)
    return text


def to_json(doc: Any, *, indent: int = 2, sort_keys: bool = False) -> str:
    return json.dumps(doc, indent=indent, sort_keys=sort_keys, ensure_ascii=False) + "\n"


def render(doc: Any, fmt: str, *, indent: int = 2, sort_keys: bool = False) -> str:
    """`doc` as `fmt` (json or yaml)."""
    if fmt == YAML:
        return to_yaml(doc, sort_keys=sort_keys)
    if fmt == JSON:
        return to_json(doc, indent=indent, sort_keys=sort_keys)
    raise ValueError(f"no structured output {fmt!r}: one of {', '.join(STRUCTURED)}")


def write(text: str, path: str | None, stdout: TextIO | None = None) -> None:
    """To `path`, or standard output when it is None or `-`."""
    if path and path != "-":
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        (stdout or sys.stdout).write(text)


class ProgressBar:
    """A one-line bar on a terminal, shown once a run has taken `after` seconds."""

    def __init__(self, stream: TextIO, after: float = 2.0) -> None:
        self.stream = stream
        self.after = after
        self.start = time.monotonic()
        self.shown = False

    def __call__(self, done: int, total: int) -> None:
        elapsed = time.monotonic() - self.start
        if elapsed < self.after or not total:
            return
        self.shown = True
        width = 30
        filled = width * done // total
        self.stream.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} "
                          f"decisions, {elapsed:.0f} s")
        self.stream.flush()

    def close(self) -> None:
        if self.shown:
            self.stream.write("\n")
            self.stream.flush()
