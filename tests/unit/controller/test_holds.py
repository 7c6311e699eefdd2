"""controller.policies.holds: the record of the schedulerNames held for deleted owners
reads back what was written, and what cannot be read is skipped, not trusted."""

from __future__ import annotations

import json

import pytest

from polsched.controller.policies import holds

pytestmark = pytest.mark.unit


def test_a_record_reads_back_what_was_written() -> None:
    written = {"team-b": ("b", 1_800_000_000.25), "batch": ("old-batch", 1_800_000_300.0)}
    assert holds.parse(holds.render(written)) == written


@pytest.mark.parametrize("annotation", [
    None, "", "not json", "[]", json.dumps({"s": "b"}),
    json.dumps({"s": {"policy": "b"}}),
    json.dumps({"s": {"policy": 3, "until": "2026-12-07T10:00:00Z"}}),
    json.dumps({"s": {"policy": "b", "until": "tomorrow"}}),
    json.dumps({"s": {"policy": "b", "until": "2026-12-07T10:00:00"}}),  # no zone
    json.dumps({"": {"policy": "b", "until": "2026-12-07T10:00:00Z"}}),
])
def test_what_does_not_parse_holds_nothing(annotation: str | None) -> None:
    assert holds.parse(annotation) == {}


def test_a_record_keeps_at_most_max_holds() -> None:
    many = {f"s{i}": {"policy": "b", "until": "2026-12-07T10:00:00Z"}
            for i in range(holds.MAX_HOLDS + 5)}
    assert len(holds.parse(json.dumps(many))) == holds.MAX_HOLDS
