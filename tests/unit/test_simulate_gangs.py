"""`polsched simulate` with pod groups (scheduling.k8s.io/v1beta1 PodGroup), through the
command itself: the production cache, queue and pipeline builder, and the engine's
pod-group cycle (pod_group_algorithm) underneath.

The cluster: two nodes of 4 CPUs ranked by a label (n2 preferred), PodGroups and their
members in a snapshot file, the members of one scheduler pending."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from polsched.commands import cli, snapshot
from tests.builders import make_node, make_pod

pytestmark = pytest.mark.unit

KEY = "example.com/rank"
SCHED = "ranked"
NS = "train"


def policy(name: str = "ranked", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
            "metadata": {"name": name},
            "spec": {"schedulerName": SCHED,
                     "scorers": [{"name": "NodeLabelValue", "weight": 100,
                                  "args": {"key": KEY, "default": 0}}], **spec}}


def node(name: str, rank: int, cpu: str = "4") -> dict[str, Any]:
    return (make_node().typed().name(name)
            .labels({KEY: str(rank), "kubernetes.io/hostname": name})
            .capacity({"cpu": cpu, "memory": "8Gi", "pods": "110"}).obj())


def pod_group(name: str, min_count: int | None) -> dict[str, Any]:
    policy_: dict[str, Any] = {"gang": {"minCount": min_count}} if min_count is not None \
        else {"basic": {}}
    return {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"schedulingPolicy": policy_}}


def pod(name: str, cpu: str, *, group: str | None = None, created: int = 0,
        node_name: str = "") -> dict[str, Any]:
    p = (make_pod().typed().name(name).namespace(NS).uid(f"uid-{name}")
         .created(f"2026-01-01T00:00:{created:02d}Z").scheduler(SCHED)
         .container(image="x", requests={"cpu": cpu}))
    if group:
        p.pod_group(group)
    if node_name:
        p.node(node_name)
    return p.phase("Running" if node_name else "Pending").obj()


def base() -> list[dict[str, Any]]:
    return [node("n1", 1), node("n2", 9),
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}]


def simulate(tmp_path: Path, capsys: pytest.CaptureFixture[str], objects: list[dict[str, Any]],
             *extra: str, candidate: dict[str, Any] | None = None,
             output: str = "json") -> tuple[int, str, str]:
    snap = tmp_path / "cluster.json"
    snap.write_text(snapshot.dump(snapshot.as_list(objects), "json"))
    f = tmp_path / "candidate.yaml"
    f.write_text(yaml.safe_dump(candidate or policy()))
    code = cli.main(["simulate", "-f", str(f), "--snapshot", str(snap), "-o", output,
                     "--baseline", "none", *extra])
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def as_json(tmp_path: Path, capsys: pytest.CaptureFixture[str],
            objects: list[dict[str, Any]], *extra: str,
            candidate: dict[str, Any] | None = None) -> dict[str, Any]:
    code, out, err = simulate(tmp_path, capsys, objects, *extra, candidate=candidate)
    assert code == 0, err
    doc: dict[str, Any] = json.loads(out)
    return doc


def nodes_of(doc: dict[str, Any]) -> dict[str, str | None]:
    return {p["name"]: p["node"] for p in doc["pods"]}


def group(doc: dict[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(g for g in doc["podGroups"] if g["podGroup"] == f"{NS}/{name}")
    return found


def test_a_gang_that_fits_is_placed_whole_with_each_members_node(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Three members of 3 CPUs: one per node would not do for the third alone, but two
    # nodes of 4 CPUs hold two of them, so minCount 2 is met and the third fits nowhere.
    objs = [*base(), pod_group("g", 2),
            pod("a", "3", group="g", created=1), pod("b", "3", group="g", created=2)]
    doc = as_json(tmp_path, capsys, objs)
    assert nodes_of(doc) == {"a": "n2", "b": "n1"}
    g = group(doc, "g")
    assert (g["kind"], g["minCount"], g["outcome"], g["message"]) == ("gang", 2, "placed", "")
    assert [(m["pod"], m["node"]) for m in g["members"]] == [(f"{NS}/a", "n2"),
                                                            (f"{NS}/b", "n1")]
    assert all(p["podGroup"] == f"{NS}/g" for p in doc["pods"])
    assert doc["summary"]["gangs"] == {"total": 1, "placed": 1, "notPlaced": 0,
                                       "waiting": 0, "error": 0}
    # The members are assumed where they go: the utilisation after counts them.
    after = {n["node"]: n["after"]["cpuRequestedMilli"] for n in doc["utilisation"]["nodes"]}
    assert after == {"n1": 3000, "n2": 3000}


def test_a_gang_that_does_not_fit_places_none_and_leaves_room_for_a_later_pod(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """docs/gangs.md's oracle case: one node of 4 CPUs, minCount 2, two members of 3 CPUs.
    The first member fits alone, but the group does not: nothing is held, so a later
    3-CPU pod gets the node."""
    objs = [node("n1", 1), {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}},
            pod_group("g", 2), pod("a", "3", group="g", created=1),
            pod("b", "3", group="g", created=2), pod("later", "3", created=3)]
    doc = as_json(tmp_path, capsys, objs)
    assert nodes_of(doc) == {"a": None, "b": None, "later": "n1"}
    reasons = {p["name"]: p["reason"] for p in doc["pods"]}
    message = ("minCount (2) cannot be satisfied: 1 scheduled, 0 remaining, pod group "
               "preemption: No preemption victims found for incoming preemptor")
    # The member that fit in the simulation gets the group's text, the other its own
    # FitError: what kube-scheduler writes in their FailedScheduling events.
    assert reasons["a"] == f"pod group is unschedulable, {message}"
    assert reasons["b"] == "0/1 nodes are available: 1 Insufficient cpu."
    g = group(doc, "g")
    assert (g["outcome"], g["message"]) == ("not placed", message)
    assert doc["summary"]["gangs"]["notPlaced"] == 1
    assert doc["summary"]["scheduled"] == 1 and doc["summary"]["unschedulable"] == 2


def test_members_held_at_pre_enqueue_are_reported_waiting_with_upstreams_text(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    objs = [*base(), pod_group("short", 3), pod("s1", "1", group="short", created=1),
            pod("s2", "1", group="short", created=2), pod("plain", "1", created=3)]
    doc = as_json(tmp_path, capsys, objs)
    assert nodes_of(doc) == {"plain": "n2", "s1": None, "s2": None}
    held = [p for p in doc["pods"] if p["name"] != "plain"]
    assert {p["reason"] for p in held} == {
        "waiting for minCount pods from a gang to appear in scheduling queue"}
    assert {p["gatedBy"] for p in held} == {"GangScheduling"}
    g = group(doc, "short")
    assert (g["outcome"], g["minCount"]) == ("waiting", 3)
    assert sorted(m["pod"] for m in g["members"]) == [f"{NS}/s1", f"{NS}/s2"]
    assert doc["summary"]["gangs"]["waiting"] == 1


def test_a_basic_group_places_what_fits(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    objs = [node("n1", 1), {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}},
            pod_group("b", None), pod("x", "3", group="b", created=1),
            pod("y", "3", group="b", created=2)]
    doc = as_json(tmp_path, capsys, objs)
    assert nodes_of(doc) == {"x": "n1", "y": None}
    g = group(doc, "b")
    assert (g["kind"], g["minCount"], g["outcome"]) == ("basic", None, "placed")
    assert doc["summary"]["basicGroups"] == 1 and doc["summary"]["gangs"]["total"] == 0


def test_a_member_whose_pod_group_is_not_in_the_file_is_an_error_naming_both(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A file with no PodGroup at all, whose pod names one: the PodGroups were most
    likely left out of the snapshot."""
    objs = [*base(), pod("lost", "1", group="nowhere")]
    code, _, err = simulate(tmp_path, capsys, objs)
    assert code == 1
    assert f"pod {NS}/lost names PodGroup 'nowhere'" in err
    assert "spec.schedulingGroup.podGroupName" in err


def test_with_pod_groups_in_the_file_a_member_of_a_missing_one_waits_as_live(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A snapshot of a cluster that serves PodGroups may catch a pod before its group:
    it waits at PreEnqueue, as in the cluster, and the other pods are decided."""
    objs = [*base(), pod_group("g", 1), pod("a", "1", group="g", created=1),
            pod("early", "1", group="later", created=2), pod("plain", "1", created=3)]
    doc = as_json(tmp_path, capsys, objs)
    assert nodes_of(doc)["early"] is None
    assert nodes_of(doc)["a"] and nodes_of(doc)["plain"]
    early = next(p for p in doc["pods"] if p["name"] == "early")
    assert early["reason"] == ('waiting for pods\'s pod group "later" to appear in '
                               "scheduling queue")
    assert group(doc, "later")["outcome"] == "waiting"


def test_two_policies_compare_gangs(tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    """The baseline switches GangScheduling off: its pods go one by one, so the first
    member takes the node; the candidate (the default, gangs all or nothing) places none
    of the gang and the plain pod after it gets the node."""
    objs = [node("n1", 1), {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}},
            pod_group("g", 2), pod("a", "3", group="g", created=1),
            pod("b", "3", group="g", created=2), pod("later", "3", created=3)]
    base_file = tmp_path / "baseline.yaml"
    base_file.write_text(yaml.safe_dump(policy("no-gangs", disabledPlugins=["GangScheduling"])))
    snap = tmp_path / "cluster.json"
    snap.write_text(snapshot.dump(snapshot.as_list(objs), "json"))
    f = tmp_path / "candidate.yaml"
    f.write_text(yaml.safe_dump(policy()))
    code = cli.main(["simulate", "-f", str(f), "--snapshot", str(snap), "-o", "json",
                     "--baseline", str(base_file)])
    out = capsys.readouterr().out
    assert code == 0
    doc = json.loads(out)
    changes = {c["name"]: (c["baseline"]["node"], c["candidate"]["node"])
               for c in doc["changes"]}
    assert changes == {"a": ("n1", None), "later": (None, "n1")}
    assert doc["summary"]["baseline"]["gangs"]["total"] == 0  # no cycle under the baseline
    assert doc["groupChanges"] == [{"podGroup": f"{NS}/g", "change": "now a group",
                                    "baseline": None, "candidate": "not placed"}]
    # The same comparison in the text report.
    code = cli.main(["simulate", "-f", str(f), "--snapshot", str(snap),
                     "--baseline", str(base_file)])
    text = capsys.readouterr().out
    assert "1 gang(s): 0 placed whole, 1 not placed, 0 waiting at PreEnqueue." in text
    assert "Pod group changes against no-gangs from" in text
    rows = [line.split("  ") for line in text.splitlines()]
    assert [f"{NS}/g", "gang, minCount 2", "not placed", "a (-), b (-)"] in [
        [c.strip() for c in r if c.strip()][:4] for r in rows]
    assert [f"{NS}/g", "now a group", "no group cycle", "not placed"] in [
        [c.strip() for c in r if c.strip()] for r in rows]


def test_replayed_gang_members_are_decided_again_as_one_group(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Bound members decided again on the cluster emptied of them, in one cycle with the
    group's pending member: three members of 3 CPUs on two nodes of 4, minCount 2, so
    the group is placed with the third fitting nowhere."""
    objs = [*base(), pod_group("g", 2),
            pod("a", "3", group="g", created=1, node_name="n1"),
            pod("b", "3", group="g", created=2, node_name="n2"),
            pod("c", "3", group="g", created=3)]
    doc = as_json(tmp_path, capsys, objs, "--replay")
    assert nodes_of(doc) == {"a": "n2", "b": "n1", "c": None}
    assert [p.get("replayed", False) for p in doc["pods"]] == [True, True, False]
    [g] = doc["podGroups"]
    assert g["outcome"] == "placed" and g["alreadyScheduled"] == 0
    assert [m["pod"] for m in g["members"]] == [f"{NS}/a", f"{NS}/b", f"{NS}/c"]
    assert doc["pods"][2]["reason"] == "0/2 nodes are available: 2 Insufficient cpu."


def test_markdown_and_table_show_the_groups(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    objs = [*base(), pod_group("g", 2), pod("a", "3", group="g", created=1),
            pod("b", "3", group="g", created=2)]
    code, out, _ = simulate(tmp_path, capsys, objs, output="markdown")
    assert code == 0
    assert "#### Pod groups" in out
    assert f"| {NS}/g | gang, minCount 2 | placed whole | a (n2), b (n1) | - |" in out
    code, out, _ = simulate(tmp_path, capsys, objs, output="table")
    assert "1 gang(s): 1 placed whole, 0 not placed, 0 waiting at PreEnqueue." in out


def test_a_group_that_fails_validation_is_an_error_with_upstreams_text(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    high = pod("b", "1", group="g", created=2)
    high["spec"]["priority"] = 10
    objs = [*base(), pod_group("g", 2), pod("a", "1", group="g", created=1), high]
    doc = as_json(tmp_path, capsys, objs)
    g = group(doc, "g")
    assert g["outcome"] == "error"
    assert g["message"] == ("all pods in a single pod group should have the same priority "
                            "as the pod group's priority, got 10 and 0")
    assert nodes_of(doc) == {"a": None, "b": None}
    assert doc["summary"]["gangs"]["error"] == 1


def test_the_documented_example(capsys: pytest.CaptureFixture[str]) -> None:
    """docs/gitops.md shows this run of docs/examples/gang-*.yaml line for line."""
    root = Path(__file__).resolve().parents[2]
    code = cli.main(["simulate", "-f", str(root / "docs/examples/gang-policy.yaml"),
                     "--snapshot", str(root / "docs/examples/gang-snapshot.yaml")])
    out = capsys.readouterr().out
    assert code == 0
    doc = (root / "docs/gitops.md").read_text()
    shown = doc[doc.index("```text\nSummary:\n7 pod(s)") + 8:]
    shown = shown[:shown.index("```")]
    for line in shown.splitlines():
        if line != "...":
            assert line in out.splitlines(), line


def test_a_gang_waiting_on_its_preemption_gives_fitting_members_the_groups_status(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A gang that fits once a lower-priority pod is evicted: the PodGroupPostFilter
    (DefaultPreemption) nominates, so the engine leaves the group waiting on preemption
    and a member that fit in the cycle gets the group's status as it is, without the
    `pod group is unschedulable` prefix a plainly rejected group gives."""
    low = pod("low", "2", node_name="n1", created=0)
    members = [pod("a", "3", group="g", created=1), pod("b", "3", group="g", created=2)]
    for m in members:
        m["spec"]["priority"] = 10
    group_ = pod_group("g", 2)
    group_["spec"]["priority"] = 10
    doc = as_json(tmp_path, capsys, [*base(), low, group_, *members])
    assert nodes_of(doc) == {"a": None, "b": None}
    g = group(doc, "g")
    assert g["outcome"] == "not placed"
    reasons = {p["name"]: p["reason"] for p in doc["pods"]}
    # a fit on n2 in the cycle; b fit nowhere until `low` goes.
    assert reasons["a"] == g["message"]
    assert not reasons["a"].startswith("pod group is unschedulable")
    assert reasons["b"].startswith("0/2 nodes are available")


# -- CompositePodGroup (the gate on): a tree placed as the engine's composite cycle does --
COMPOSITE_GATES = ("GenericWorkload=true,TopologyAwareWorkloadScheduling=true,"
                   "CompositePodGroup=true")
RACK = "example.com/rack"


def rack_node(name: str, rack: str, cpu: str = "4") -> dict[str, Any]:
    n = node(name, 1, cpu)
    n["metadata"]["labels"][RACK] = rack
    return n


def composite(name: str, min_groups: int) -> dict[str, Any]:
    return {"apiVersion": "scheduling.k8s.io/v1alpha3", "kind": "CompositePodGroup",
            "metadata": {"name": name, "namespace": NS,
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"schedulingPolicy": {"gang": {"minGroupCount": min_groups}},
                     "schedulingConstraints": {"topology": [{"key": RACK}]}}}


def child(name: str, min_count: int, created: int) -> dict[str, Any]:
    g = pod_group(name, min_count)
    g["metadata"]["creationTimestamp"] = f"2026-01-01T00:00:{created:02d}Z"
    g["spec"]["parentCompositePodGroupName"] = "infer"
    return g


def test_prefill_and_decode_are_placed_together_in_one_rack(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POLSCHED_FEATURE_GATES", COMPOSITE_GATES)
    # Rack a (one node) holds prefill only; rack b holds both.
    objs = [rack_node("a1", "a"), rack_node("b1", "b"), rack_node("b2", "b"),
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}},
            composite("infer", 2), child("prefill", 2, 1), child("decode", 2, 2),
            *(pod(f"prefill-{i}", "2", group="prefill", created=3 + i) for i in range(2)),
            *(pod(f"decode-{i}", "2", group="decode", created=5 + i) for i in range(2))]
    doc = as_json(tmp_path, capsys, objs)
    assert set(nodes_of(doc).values()) <= {"b1", "b2"}
    assert all(n is not None for n in nodes_of(doc).values())
    assert group(doc, "prefill")["outcome"] == "placed"
    assert group(doc, "decode")["outcome"] == "placed"


def test_a_tree_no_rack_holds_places_nothing_with_upstreams_texts(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POLSCHED_FEATURE_GATES", COMPOSITE_GATES)
    objs = [rack_node("a1", "a"),
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}},
            composite("infer", 2), child("prefill", 1, 1), child("decode", 1, 2),
            pod("prefill-0", "3", group="prefill", created=3),
            pod("decode-0", "3", group="decode", created=4)]
    doc = as_json(tmp_path, capsys, objs)
    assert nodes_of(doc) == {"prefill-0": None, "decode-0": None}
    reasons = {p["name"]: p["reason"] for p in doc["pods"]}
    # prefill (first child) fit alone: it gets its parent's status; decode its own.
    assert reasons["prefill-0"] == (
        "pod group is unschedulable, 0/1 placements are available, first placement status: "
        "minCount (2) cannot be satisfied: 1 scheduled, 0 remaining")
    assert reasons["decode-0"] == "0/1 nodes are available: 1 Insufficient cpu."
    assert group(doc, "prefill")["outcome"] == "not placed"
    assert group(doc, "decode")["outcome"] == "not placed"
