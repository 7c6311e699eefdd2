"""The conformance suite's gang-composite family without a cluster: its gates, the shapes a
run cycles, the order every tree is made in (root first, then its PodGroups in name order,
then members one per step: kube-scheduler may pop a tree released at once with only some
of its members), and that members of a PodGroup under a CompositePodGroup report their
rack."""

from __future__ import annotations

from pathlib import Path

from conformance import runner
from conformance import scenarios as scn


def test_the_family_runs_with_the_three_gates_and_cycles_its_shapes() -> None:
    assert scn.FAMILY_GATES["gang-composite"] == (
        "GenericWorkload=true,TopologyAwareWorkloadScheduling=true,CompositePodGroup=true")
    a = scn.generate_all(1, len(scn.COMPOSITE_SHAPES), ["gang-composite"])
    assert [s.shape for s in a] == list(scn.COMPOSITE_SHAPES)
    assert all(s.topology_key == scn.RACK and s.steps and not s.pods for s in a)
    path, namespaced = runner._PATHS["CompositePodGroup"]
    assert path == "/apis/scheduling.k8s.io/v1alpha3/namespaces/{ns}/compositepodgroups"
    assert namespaced


def test_every_tree_is_made_root_first_and_members_one_per_step() -> None:
    for seed in (1, 2, 3):
        for sc in scn.generate_all(seed, 3 * len(scn.COMPOSITE_SHAPES), ["gang-composite"]):
            made: set[str] = set()
            pod_groups: list[str] = []
            for step in sc.steps:
                members = [a for a in step if a.obj and a.obj["kind"] == "Pod"]
                assert len(members) <= 1, (sc.index, sc.shape)
                for a in step:
                    assert a.obj is not None
                    spec = a.obj["spec"]
                    parent = spec.get("parentCompositePodGroupName")
                    if parent is not None:
                        # A child after its parent; the API wants a workloadRef.
                        assert parent in made and spec["workloadRef"], (sc.index, sc.shape)
                    if a.obj["kind"] == "PodGroup":
                        pod_groups.append(a.name)
                    if a.obj["kind"] != "Pod":
                        made.add(a.name)
                    else:
                        assert spec["schedulingGroup"]["podGroupName"] in made
            # Siblings in name order, so that creation order and name order agree.
            for parent in {a.obj["spec"].get("parentCompositePodGroupName")
                           for step in sc.steps for a in step if a.obj}:
                kids = [a.name for step in sc.steps for a in step if a.obj
                        and a.obj["kind"] == "PodGroup"
                        and a.obj["spec"].get("parentCompositePodGroupName") == parent]
                assert kids == sorted(kids), (sc.index, sc.shape)


def test_a_composite_pair_gets_a_directory_of_its_own(tmp_path: Path) -> None:
    dirs = {runner.side_dir(k, g) for k in ("kube", "polsched")
            for g in ("", scn.GANG_GATES, scn.TOPOLOGY_GATES, scn.COMPOSITE_GATES)}
    assert len(dirs) == 8
