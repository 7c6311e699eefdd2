"""The conformance suite's gang-topology family without a cluster: its gates, the shapes
a run cycles, the rule that keeps member bursts race-free, that every scenario's gang
names the rack label and its own control planes, and that a domain is compared."""

from __future__ import annotations

from pathlib import Path

from conformance import compare, runner
from conformance import scenarios as scn
from conformance.runner import PodResult


def test_the_family_runs_with_both_gates_and_cycles_its_shapes() -> None:
    assert scn.FAMILY_GATES["gang-topology"] == (
        "GenericWorkload=true,TopologyAwareWorkloadScheduling=true")
    a = scn.generate_all(1, len(scn.TOPOLOGY_SHAPES), ["gang-topology"])
    assert [s.shape for s in a] == list(scn.TOPOLOGY_SHAPES)
    assert all(s.topology_key == scn.RACK and s.steps and not s.pods for s in a)
    b = scn.generate_all(2, len(scn.TOPOLOGY_SHAPES), ["gang-topology"])
    assert [s.to_json() for s in a] != [s.to_json() for s in b]


def test_the_default_run_has_25_scenarios_of_every_family() -> None:
    from conformance.__main__ import DEFAULT_COUNT

    every = scn.generate_all(1, DEFAULT_COUNT)
    for family in scn.FAMILY_NAMES:
        assert sum(s.family == family for s in every) == 25, family


def test_members_arrive_together_only_while_their_group_is_held() -> None:
    for seed in (1, 2, 3):
        for sc in scn.generate_all(seed, 3 * len(scn.TOPOLOGY_SHAPES), ["gang-topology"]):
            groups: set[str] = set()
            for step in sc.steps:
                arriving: dict[str, int] = {}
                for a in step:
                    if a.op == "create" and a.obj and a.obj["kind"] == "PodGroup":
                        groups.add(a.name)
                    elif a.op == "create" and a.obj:
                        g = (a.obj["spec"].get("schedulingGroup") or {}).get("podGroupName")
                        if g:
                            arriving[g] = arriving.get(g, 0) + 1
                # Several members of one group in a step: only before its PodGroup.
                assert all(n == 1 or g not in groups for g, n in arriving.items()), (
                    sc.index, sc.shape)


def test_gated_pairs_get_directories_of_their_own(tmp_path: Path) -> None:
    dirs = {runner.side_dir(k, g) for k in ("kube", "polsched")
            for g in ("", scn.GANG_GATES, scn.TOPOLOGY_GATES)}
    assert len(dirs) == 6
    assert runner.side_dir("kube", scn.GANG_GATES) == "kube-gated"


def test_a_member_in_another_domain_is_a_difference() -> None:
    k = PodResult("1/a0", outcome="bound", domain="r0")
    p = PodResult("1/a0", outcome="bound", domain="r1")
    diff, _ = compare.compare_pod(k, p)
    assert diff == ["domain"]
    assert compare.compare_pod(k, PodResult("1/a0", outcome="bound", domain="r0")) == (
        [], False)
