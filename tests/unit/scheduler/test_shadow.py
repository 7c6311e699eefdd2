"""Shadow policies (scheduler.shadow): a shadow's pipeline, built by the production
builder, decides beside the live one; agreement is counted against the live outcome, and
the shared time budget skips decisions once spent."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from polsched.api import load_policy
from polsched.cluster.cache import ClusterCache
from polsched.controller.policies.book import PolicyBook
from polsched.framework.types import PodInfo
from polsched.plugins import CATALOG
from polsched.scheduler import shadow as sh
from tests.builders import make_pod

pytestmark = pytest.mark.unit

KEY = "example.com/rank"


def policy(name: str, *, reverse: bool = False, require: str | None = None,
           shadow_of: str = "") -> dict[str, Any]:
    args: dict[str, Any] = {"key": KEY, "reverse": reverse}
    spec: dict[str, Any] = {"scorers": [{"name": "NodeLabelValue", "weight": 100,
                                         "args": args}]}
    if require:
        spec["filters"] = [{"name": "NodeLabel", "args": {
            "requirements": [{"key": require, "operator": "Exists"}]}}]
    if shadow_of:
        spec["shadowOf"] = shadow_of
    return {"apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
            "metadata": {"name": name, "uid": "uid-" + name, "generation": 1,
                         "creationTimestamp": "2026-01-01T00:00:00Z"}, "spec": spec}


def cache() -> ClusterCache:
    c = ClusterCache(None)
    for name, rank in (("n1", 1), ("n2", 5), ("n3", 9)):
        res = {"cpu": "4", "memory": "8Gi", "pods": "110"}
        labels = {KEY: str(rank)}
        if name == "n2":
            labels["special"] = "yes"
        c.on_node_event("ADDED", {"metadata": {"name": name, "labels": labels},
                                  "status": {"allocatable": res}})
    return c


def pod(name: str) -> PodInfo:
    return make_pod().name(name).namespace("ns").uid(name).container(image="x").info()


def test_agreement_is_counted_against_the_live_outcome() -> None:
    c = cache()
    shadows = sh.ShadowSet()
    same = sh.Shadow(load_policy(policy("same", shadow_of="live"), CATALOG), "live")
    rev = sh.Shadow(load_policy(policy("rev", reverse=True, shadow_of="live"), CATALOG), "live")
    special = sh.Shadow(
        load_policy(policy("special", require="special", shadow_of="live"), CATALOG), "live")
    shadows.shadows.update({"same": same, "rev": rev, "special": special})
    p = pod("a")
    verdicts = asyncio.run(shadows.decide(p, c.snapshot))
    assert verdicts == {same: "n3", rev: "n1", special: "n2"}
    shadows.assumed(p, verdicts)
    shadows.bind_ended(p, "n3", "2026-01-01T00:00:00Z")  # the live policy bound on n3
    assert (same.stats.decisions, same.stats.agreed) == (1, 1)
    assert (rev.stats.different_node, rev.stats.agreed) == (1, 0)
    assert rev.stats.to_status()["lastDisagreements"] == [
        {"pod": "ns/a", "live": "n3", "shadow": "n1", "time": "2026-01-01T00:00:00Z"}]

    # The live attempt found no node: a shadow that found one disagrees on schedulability.
    q = pod("b")
    verdicts = asyncio.run(shadows.decide(q, c.snapshot))
    shadows.unschedulable(q, verdicts, "t")
    assert special.stats.different_schedulability == 1
    assert special.stats.last[-1] == {"pod": "ns/b", "live": "unschedulable",
                                      "shadow": "n2", "time": "t"}

    # A failed bind is not compared; a detached shadow is not counted any more.
    r = pod("c")
    verdicts = asyncio.run(shadows.decide(r, c.snapshot))
    shadows.assumed(r, verdicts)
    shadows.bind_ended(r, None, "t")
    assert same.stats.decisions == 2
    del shadows.shadows["same"]
    verdicts = {same: "n3"}
    shadows.assumed(r, verdicts)
    shadows.bind_ended(r, "n3", "t")
    assert same.stats.decisions == 2


def test_only_the_last_few_disagreements_are_kept() -> None:
    s = sh.Shadow(load_policy(policy("rev", reverse=True, shadow_of="live"), CATALOG), "live")
    for i in range(sh.LAST_DISAGREEMENTS + 3):
        s.compare(pod(f"p{i}"), "n1", "n3", str(i))
    last = s.stats.to_status()["lastDisagreements"]
    assert [d["pod"] for d in last] == [f"ns/p{i}" for i in range(3, sh.LAST_DISAGREEMENTS + 3)]
    assert s.stats.different_node == sh.LAST_DISAGREEMENTS + 3


def test_the_budget_skips_decisions_once_spent_and_refills_with_time(
        monkeypatch: pytest.MonkeyPatch) -> None:
    now = [0.0]
    shadows = sh.ShadowSet(budget=0.2, clock=lambda: now[0])
    s = sh.Shadow(load_policy(policy("same", shadow_of="live"), CATALOG), "live")
    shadows.shadows["same"] = s
    c = cache()
    # The function the shadow module calls (it imports it; whichever module defines it).
    slow = vars(sh)["schedule_pod"]
    cost = 0.4 * sh.BUCKET_SECONDS

    async def schedule(pl: Any, p: PodInfo, snap: Any, explain: bool = False) -> Any:
        now[0] += cost  # each decision takes 40% of the bucket on the clock
        return await slow(pl, p, snap)

    monkeypatch.setattr(sh, "schedule_pod", schedule)
    decided = [bool(asyncio.run(shadows.decide(pod(f"p{i}"), c.snapshot))) for i in range(4)]
    # A full bucket B; each decision refills 0.2 x 0.4 B = 0.08 B first, then spends 0.4 B:
    # B -> 0.6 B -> 0.28 B -> -0.04 B -> (0.04 B left, so it runs) -0.36 B; the fifth finds
    # -0.28 B and is skipped.
    assert decided == [True, True, True, True]
    assert not asyncio.run(shadows.decide(pod("p4"), c.snapshot))
    assert s.stats.skipped == 1 and s.stats.decisions == 0  # decided, not yet compared
    now[0] += 2 * sh.BUCKET_SECONDS / 0.2  # long enough to refill the whole bucket
    assert asyncio.run(shadows.decide(pod("late"), c.snapshot))


def test_a_shadow_claims_no_scheduler_name() -> None:
    book = PolicyBook()
    live = policy("live")
    shadow = policy("candidate", shadow_of="live")
    shadow["spec"]["schedulerName"] = "live"
    shadow["metadata"]["creationTimestamp"] = "2025-01-01T00:00:00Z"  # older than live
    book.observe(shadow)
    book.observe(live)
    assert book.owners() == {"live": "live"}
    rec = book.get("candidate")
    assert rec is not None and rec.shadow_of == "live"


def test_loader_checks_shadow_of() -> None:
    from polsched.api import PolicyError

    with pytest.raises(PolicyError, match=r"spec\.shadowOf: a policy cannot shadow itself"):
        load_policy(policy("x", shadow_of="x"), CATALOG)
    with pytest.raises(PolicyError, match=r"spec\.shadowOf"):
        load_policy(policy("x", shadow_of="Not_A_Name"), CATALOG)
    assert load_policy(policy("x", shadow_of="live"), CATALOG).shadow_of == "live"


def test_a_shadow_status_has_its_agreement_and_no_bind_counts() -> None:
    from polsched.controller.policies import conditions as cond
    from polsched.controller.policies.status import StatusView, compose
    from polsched.scheduler.engine import SchedulerStats

    s = sh.ShadowStats("live", decisions=3, agreed=2, different_node=1)
    ready = cond.Condition(cond.READY, True, "Shadowing", "m", 1)
    out = compose(StatusView("", "shadow:cand", 1, None, (ready,)),
                  SchedulerStats("", 0, 0, 0, 0, None, 0, shadow=s.to_status()), {}, "now")
    assert out["shadow"]["agreed"] == 2 and out["shadow"]["of"] == "live"
    assert out["observedGeneration"] == 1
    assert "boundPods" not in out and "bindsTotal" not in out
