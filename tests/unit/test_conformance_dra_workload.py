"""The conformance suite's dra-workload family without a cluster: its gates, the shapes a
run cycles, exact placement, members that name their PodGroup's claims as the group lists
them (but in the shape that tests the opposite), and race-free member arrivals."""

from __future__ import annotations

from conformance import scenarios as scn


def test_the_family_runs_with_the_three_gates_and_cycles_its_shapes() -> None:
    assert scn.FAMILY_GATES["dra-workload"] == (
        "DynamicResourceAllocation=true,GenericWorkload=true,DRAWorkloadResourceClaims=true")
    a = scn.generate_all(1, len(scn.WORKLOAD_CLAIM_SHAPES), ["dra-workload"])
    assert [s.shape for s in a] == list(scn.WORKLOAD_CLAIM_SHAPES)
    assert all(s.claims and s.exact_nodes and s.steps and not s.pods for s in a)
    assert all(s.to_json()["claims"] for s in a)


def test_members_name_their_groups_claims_as_the_group_lists_them() -> None:
    for seed in (1, 2, 3):
        for sc in scn.generate_all(seed, 2 * len(scn.WORKLOAD_CLAIM_SHAPES),
                                   ["dra-workload"]):
            groups: dict[str, list[dict[str, str]]] = {}
            for step in sc.steps:
                for act in step:
                    if act.obj is None:
                        continue
                    if act.obj["kind"] == "PodGroup":
                        groups[act.name] = act.obj["spec"]["resourceClaims"]
                        continue
                    group = act.obj["spec"]["schedulingGroup"]["podGroupName"]
                    mine = act.obj["spec"]["resourceClaims"]
                    shared = [c for c in mine if c in groups[group]]
                    if sc.shape == "not_a_group_claim":
                        assert not shared, sc.index
                    else:
                        assert shared == groups[group], (sc.index, sc.shape)
                        # The pod's own claim first (see _wc_shared_and_own).
                        assert mine[-1] in groups[group], (sc.index, sc.shape)
                    # One member per step once its group exists (no arrival race).
                    assert len(step) == 1, (sc.index, sc.shape)
