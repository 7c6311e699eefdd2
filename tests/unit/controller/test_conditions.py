"""polsched.controller.conditions: lastTransitionTime moves only when a status flips."""

from __future__ import annotations

import pytest

from polsched.controller.conditions import Condition, merge_conditions

pytestmark = pytest.mark.unit


def test_transition_time_kept_while_status_unchanged() -> None:
    first = merge_conditions(None, [Condition("Ready", True, "Running", "gen 1", 1)], "T1")
    assert first[0]["lastTransitionTime"] == "T1"
    again = merge_conditions(first, [Condition("Ready", True, "Running", "gen 2", 2)], "T2")
    assert again[0]["lastTransitionTime"] == "T1"
    assert again[0]["message"] == "gen 2" and again[0]["observedGeneration"] == 2


def test_transition_time_moves_when_status_flips() -> None:
    first = merge_conditions(None, [Condition("Valid", True, "Loaded", "", 1)], "T1")
    flipped = merge_conditions(first, [Condition("Valid", False, "InvalidSpec", "x", 2)], "T2")
    assert flipped[0]["status"] == "False" and flipped[0]["lastTransitionTime"] == "T2"


def test_conditions_of_other_types_are_kept() -> None:
    prev = [{"type": "Other", "status": "True"}]
    out = merge_conditions(prev, [Condition("Ready", True, "Running", "", 1)], "T")
    assert [c["type"] for c in out] == ["Ready", "Other"]
