"""polsched.controller.policies.conditions: lastTransitionTime moves only when a status flips;
kstatus Reconciling and Stalled follow Ready."""

from __future__ import annotations

import pytest

from polsched.controller.policies.conditions import Condition, kstatus, merge_conditions

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


def test_ready_true_clears_reconciling_and_stalled() -> None:
    ready, reconciling, stalled = kstatus(Condition("Ready", True, "Running", "runs", 4),
                                          stalled=False)
    assert (reconciling.type, reconciling.status_text) == ("Reconciling", "False")
    assert (stalled.type, stalled.status_text) == ("Stalled", "False")
    assert {c.observed_generation for c in (ready, reconciling, stalled)} == {4}


def test_a_generation_that_cannot_run_is_stalled_not_reconciling() -> None:
    _, reconciling, stalled = kstatus(Condition("Ready", False, "InvalidSpec", "bad", 2),
                                      stalled=True)
    assert reconciling.status_text == "False"
    assert (stalled.status_text, stalled.reason, stalled.message) == ("True", "InvalidSpec", "bad")


def test_a_generation_on_its_way_is_reconciling_and_ready_unknown() -> None:
    ready = Condition("Ready", "Unknown", "Progressing", "generation 3 is starting", 3)
    out = merge_conditions(None, list(kstatus(ready, stalled=False)), "T")
    assert {c["type"]: c["status"] for c in out} == \
        {"Ready": "Unknown", "Reconciling": "True", "Stalled": "False"}
    assert all(c["observedGeneration"] == 3 for c in out)


def test_unknown_to_true_is_a_transition() -> None:
    first = merge_conditions(None, [Condition("Ready", "Unknown", "Progressing", "", 2)], "T1")
    then = merge_conditions(first, [Condition("Ready", True, "Running", "", 2)], "T2")
    assert then[0]["lastTransitionTime"] == "T2"


def test_a_message_is_written_sanitised_and_capped() -> None:
    # The API server refuses a condition message over 32768 characters: the status write
    # would fail, and the policy's status never say why.
    huge = "\x1b[2Jbad " + "x" * 100_000
    (out,) = merge_conditions(None, [Condition("Valid", False, "InvalidSpec", huge, 1)], "T")
    assert len(out["message"]) <= 32768
    assert out["message"].startswith("bad xxx") and out["message"].isprintable()
