"""The PodGroupInitiallyScheduled patch as upstream's PatchPodGroupStatus sends it
(strategicpatch.CreateTwoWayMergePatch of the status the cycle read and the new one:
conditions merge by type, so only changed fields go)."""

from __future__ import annotations

from polsched.objects import Json
from polsched.scheduler.schedule_one_podgroup import condition_patch

TYPE = "PodGroupInitiallyScheduled"


def cond(status: str, reason: str, message: str, generation: int = 0) -> Json:
    return {"type": TYPE, "status": status, "reason": reason, "message": message,
            "observedGeneration": generation, "lastTransitionTime": "2026-01-01T00:00:00Z"}


def test_a_first_condition_goes_whole() -> None:
    new = cond("False", "Unschedulable", "m")
    assert condition_patch(None, new) == new


def test_a_new_message_on_an_unchanged_status_sends_only_the_message() -> None:
    # The cycle read False/Unschedulable "a"; meanwhile the server may hold True (written
    # by the previous cycle, not seen yet): only the message is patched, as upstream.
    old = cond("False", "Unschedulable", "a")
    old.pop("observedGeneration")  # omitted when 0
    assert condition_patch(old, cond("False", "Unschedulable", "b")) == \
        {"type": TYPE, "message": "b"}


def test_a_status_change_sends_status_reason_message_and_transition() -> None:
    old = cond("False", "Unschedulable", "a")
    new = dict(cond("True", "Scheduled", ""), lastTransitionTime="2026-01-02T00:00:00Z")
    assert condition_patch(old, new) == {
        "type": TYPE, "status": "True", "reason": "Scheduled", "message": "",
        "lastTransitionTime": "2026-01-02T00:00:00Z"}
