"""The conformance suite's gang family without a cluster: the generator's coverage and
determinism, the rule that keeps its bursts of members race-free, and the settling rule's
reading of scheduler_pending_pods."""

from __future__ import annotations

from conformance import runner
from conformance import scenarios as scn

from polsched.objects import Json


def test_a_run_of_the_family_cycles_every_shape_and_a_seed_changes_it() -> None:
    a = scn.generate_all(1, len(scn.GANG_SHAPES), ["gang"])
    assert [s.shape for s in a] == list(scn.GANG_SHAPES)
    assert [s.to_json() for s in a] == [s.to_json() for s in
                                       scn.generate_all(1, len(scn.GANG_SHAPES), ["gang"])]
    b = scn.generate_all(2, len(scn.GANG_SHAPES), ["gang"])
    assert [s.to_json() for s in a] != [s.to_json() for s in b]
    # In a run of every family, the gang family still cycles its shapes.
    every = [s for s in scn.generate_all(1, len(scn.GANG_SHAPES) * len(scn.FAMILY_NAMES))
             if s.family == "gang"]
    assert sorted(s.shape for s in every) == sorted(scn.GANG_SHAPES)


def test_the_default_run_has_at_least_25_gang_scenarios_on_gated_planes() -> None:
    from conformance.__main__ import DEFAULT_COUNT

    gang = [s for s in scn.generate_all(1, DEFAULT_COUNT) if s.family == "gang"]
    assert len(gang) >= 25
    assert scn.FAMILY_GATES["gang"] == "GenericWorkload=true"
    assert all(s.steps and not s.pods for s in gang)


def _min_count(obj: Json) -> int | None:
    gang = obj["spec"]["schedulingPolicy"].get("gang")
    return None if gang is None else int(gang["minCount"])


def test_members_arrive_together_only_while_their_group_is_held() -> None:
    """A step creating several members of one group is a race inside kube-scheduler
    unless the group cannot go yet: no PodGroup, or fewer members than minCount."""
    for seed in (1, 2, 3):
        for sc in scn.generate_all(seed, 3 * len(scn.GANG_SHAPES), ["gang"]):
            groups: dict[str, int | None] = {}
            members: dict[str, int] = {}
            for step in sc.steps:
                arriving: dict[str, int] = {}
                for a in step:
                    if a.op == "create" and a.obj and a.obj["kind"] == "PodGroup":
                        groups[a.name] = _min_count(a.obj)
                    elif a.op == "create" and a.obj:
                        g = (a.obj["spec"].get("schedulingGroup") or {}).get("podGroupName")
                        if g:
                            arriving[g] = arriving.get(g, 0) + 1
                    elif a.op == "min-count":
                        groups[a.name] = a.value
                for g, n in arriving.items():
                    members[g] = members.get(g, 0) + n
                    if n > 1 and g in groups:
                        mc = groups[g]
                        assert mc is not None and members[g] < mc, (sc.index, sc.shape, g)


def test_pending_in_sums_the_queues_asked_for() -> None:
    page = "\n".join([
        "# TYPE scheduler_pending_pods gauge",
        'scheduler_pending_pods{queue="active"} 1',
        'scheduler_pending_pods{queue="backoff"} 2',
        'scheduler_pending_pods{queue="unschedulable"} 7',
        'scheduler_pending_pods{profile="p",queue="backoff"} 3',
        'scheduler_pending_pods_other{queue="active"} 100',
    ])
    assert runner.pending_in(page, ("active", "backoff")) == 6
    assert runner.pending_in(page, ("pending",)) == 0


def test_metric_sum_adds_every_series_of_one_counter() -> None:
    page = "\n".join([
        "# TYPE scheduler_podgroup_schedule_attempts_total counter",
        'scheduler_podgroup_schedule_attempts_total{profile="p",result="scheduled"} 2',
        'scheduler_podgroup_schedule_attempts_total{profile="p",result="error"} 3',
        'scheduler_podgroup_schedule_attempts_total_other{result="error"} 100',
        "scheduler_podgroup_schedule_attempts_totalx 7",
    ])
    assert runner.metric_sum(page, "scheduler_podgroup_schedule_attempts_total") == 5
    assert runner.metric_sum(page, "absent") == 0
    assert runner.metric_sum(page, "scheduler_podgroup_schedule_attempts_total",
                             result="error") == 3
