"""What `polsched explain` and `simulate` share (polsched.commands.dryrun): the policy a
schedulerName selects, as the operator picks it, and a bound pod turned pending."""

from __future__ import annotations

from typing import Any

import pytest

from polsched.api import claims
from polsched.commands import dryrun
from polsched.commands.explain import pick_policy
from polsched.commands.simulate import current_policy
from polsched.controller.policies.book import PolicyBook

pytestmark = pytest.mark.unit


def policy(name: str, created: str, scheduler: str = "", shadow_of: str = "",
           version: str = "polsched.io/v1alpha1") -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if scheduler:
        spec["schedulerName"] = scheduler
    if shadow_of:
        spec["shadowOf"] = shadow_of
    return {"apiVersion": version, "kind": "SchedulingPolicy",
            "metadata": {"name": name, "uid": name, "generation": 1,
                         "creationTimestamp": created}, "spec": spec}


POLICIES = [
    policy("newer", "2026-03-01T00:00:00Z", "shared"),
    policy("b-tie", "2026-02-01T00:00:00Z", "shared"),
    policy("a-tie", "2026-02-01T00:00:00Z", "shared"),
    # The oldest, but a shadow claims no name (it decides its target's pods).
    policy("shadow", "2026-01-01T00:00:00Z", "shared", shadow_of="a-tie"),
    policy("alone", "2026-01-01T00:00:00Z"),  # schedulerName defaults to its name
    policy("other-version", "2025-01-01T00:00:00Z", "shared", version="polsched.io/v1"),
]


def test_the_oldest_claimant_that_is_not_a_shadow_owns_a_scheduler_name() -> None:
    found = dryrun.policies_in(POLICIES)
    assert "other-version" not in [p["metadata"]["name"] for p in found]
    assert dryrun.owner_of(found, "shared") is POLICIES[2]  # same time: the name decides
    assert dryrun.owner_of(found, "alone") is POLICIES[4]
    assert dryrun.owner_of(found, "nobody") is None


def test_of_claimants_created_in_the_same_second_the_one_the_operator_ran_keeps_the_name(
        ) -> None:
    """creationTimestamp has a resolution of one second: a policy applied right after the
    owner, in the same second, must not take the name by sorting first. The operator
    recorded the owner when it ran it; the dry run, which cannot read that record, reads
    the operator's report in the owner's status (Ready=True) instead."""
    owner = policy("b-first", "2026-02-01T00:00:00Z", "shared")
    newcomer = policy("a-second", "2026-02-01T00:00:00Z", "shared")
    older = policy("c-older", "2026-01-01T00:00:00Z", "shared")
    book = PolicyBook()
    book.observe(owner)
    assert book.owner_of("shared") == "b-first"
    book.observe(newcomer)
    book.observe(older)  # even an older claimant, made later, does not take it
    assert book.owner_of("shared") == "b-first"
    owner["status"] = {"conditions": [{"type": "Ready", "status": "True",
                                       "reason": "Scheduling"}]}
    assert dryrun.owner_of([newcomer, owner, older], "shared") is owner
    # Without the report, the oldest, then the name order decides.
    del owner["status"]
    assert dryrun.owner_of([newcomer, owner], "shared") is newcomer
    assert dryrun.owner_of([newcomer, owner, older], "shared") is older


def test_the_dry_run_commands_pick_the_policy_the_operator_runs() -> None:
    book = PolicyBook()
    for p in dryrun.policies_in(POLICIES):
        book.observe(p)
    assert book.owners() == claims.owners(claims.ObjectClaim.of(p)
                                          for p in dryrun.policies_in(POLICIES))
    assert book.owner_of("shared") == "a-tie"
    pod = {"spec": {"schedulerName": "shared"}}
    assert pick_policy(POLICIES, pod, "f.yaml")["metadata"]["name"] == "a-tie"


def test_simulate_replaces_the_owner_of_the_candidates_scheduler_name() -> None:
    from polsched.api import load_policy
    from polsched.plugins import CATALOG

    candidate = load_policy(policy("candidate", "2026-04-01T00:00:00Z", "shared"), CATALOG)
    assert current_policy(POLICIES, candidate) is POLICIES[2]


def test_a_pending_copy_forgets_the_last_decision_and_leaves_the_pod_alone() -> None:
    pod: dict[str, Any] = {"metadata": {"name": "p", "namespace": "default", "labels": {"a": "b"}},
           "spec": {"nodeName": "n1", "containers": []},
           "status": {"phase": "Running", "nominatedNodeName": "n2", "podIP": "10.0.0.1",
                      "conditions": [{"type": "PodScheduled", "status": "True"}]}}
    copy = dryrun.pending_copy(pod)
    assert "nodeName" not in copy["spec"]
    assert copy["status"] == {"podIP": "10.0.0.1"}
    assert copy["metadata"] == pod["metadata"]
    assert copy["metadata"] is not pod["metadata"]
    assert pod["spec"]["nodeName"] == "n1"
    assert pod["status"]["nominatedNodeName"] == "n2"


def test_table_aligns_columns() -> None:
    assert dryrun.table([["NODE", "SCORE"], ["node-a", "10"], ["b", ""]]) == \
        "NODE    SCORE\nnode-a  10\nb"
