"""controller.policies.names: the operator's record of schedulerName owners and holds
reads back what was written, and what cannot be read is skipped, not trusted."""

from __future__ import annotations

import json

import pytest

from polsched.controller.policies import names

pytestmark = pytest.mark.unit


def test_a_record_reads_back_what_was_written() -> None:
    held = {"team-b": ("b", 1_800_000_000.25), "batch": ("old-batch", 1_800_000_300.0)}
    assert names.parse_holds(names.render_holds(held)) == held
    owners = {"team-b": "b", "gpu": "gpu-pool"}
    assert names.parse_owners(names.render_owners(owners)) == owners


@pytest.mark.parametrize("annotation", [
    None, "", "not json", "[]", json.dumps({"s": "b"}),
    json.dumps({"s": {"policy": "b"}}),
    json.dumps({"s": {"policy": 3, "until": "2026-12-07T10:00:00Z"}}),
    json.dumps({"s": {"policy": "b", "until": "tomorrow"}}),
    json.dumps({"s": {"policy": "b", "until": "2026-12-07T10:00:00"}}),  # no zone
    json.dumps({"": {"policy": "b", "until": "2026-12-07T10:00:00Z"}}),
])
def test_a_hold_that_does_not_parse_holds_nothing(annotation: str | None) -> None:
    assert names.parse_holds(annotation) == {}


@pytest.mark.parametrize("annotation", [
    None, "not json", "[]", json.dumps({"s": 3}), json.dumps({"s": ""}),
    json.dumps({"": "b"}), json.dumps({"s": {"policy": "b"}}),
])
def test_an_owner_that_does_not_parse_owns_nothing(annotation: str | None) -> None:
    assert names.parse_owners(annotation) == {}


def test_a_record_keeps_at_most_max_entries() -> None:
    many = {f"s{i}": {"policy": "b", "until": "2026-12-07T10:00:00Z"}
            for i in range(names.MAX_ENTRIES + 5)}
    assert len(names.parse_holds(json.dumps(many))) == names.MAX_ENTRIES
    owners = {f"s{i}": "b" for i in range(names.MAX_ENTRIES + 5)}
    assert len(names.parse_owners(json.dumps(owners))) == names.MAX_ENTRIES
