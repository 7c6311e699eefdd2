"""`polsched snapshot -f` and `polsched simulate` over files: queue order, replay, the
baseline comparison, every output format and every --fail-on exit code, run through the
command itself (the production cache and pipeline builder underneath)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from polsched.commands import cli, simulate, simulate_groups, snapshot
from polsched.scheduler import metrics
from tests.builders import make_node, make_pod

pytestmark = pytest.mark.unit

KEY = "example.com/rank"
SCHED = "ranked"


def policy(name: str = "ranked", weight: int = 100, *, require: str | None = None,
           reverse: bool = False) -> dict[str, Any]:
    """Nodes ranked by the label KEY (weight 100 outweighs every default scorer, so each
    decision's top score is unique); `reverse` prefers low ranks; `require` keeps only
    nodes with that label."""
    args: dict[str, Any] = {"key": KEY, "default": 0}
    if reverse:
        args["reverse"] = True
    spec: dict[str, Any] = {"schedulerName": SCHED,
                            "scorers": [{"name": "NodeLabelValue", "weight": weight,
                                         "args": args}]}
    if require:
        spec["filters"] = [{"name": "NodeLabel", "args": {
            "requirements": [{"key": require, "operator": "Exists"}]}}]
    return {"apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
            "metadata": {"name": name}, "spec": spec}


def node(name: str, rank: int, zone: str, cpu: str = "2", extra: dict[str, str] | None = None
         ) -> dict[str, Any]:
    return (make_node().typed().name(name).resource_version("17")
            .metadata(managedFields=[{"x": 1}])
            .labels({KEY: str(rank), "topology.kubernetes.io/zone": zone, **(extra or {})})
            .capacity({"cpu": cpu, "memory": "8Gi", "pods": "110"})
            .status(conditions=[{"type": "Ready", "status": "True",
                                 "lastHeartbeatTime": "2026-01-01T00:00:00Z"}]).obj())


def pod(name: str, *, created: str, cpu: str = "1", node_name: str = "", priority: int = 0,
        scheduler: str = SCHED) -> dict[str, Any]:
    p = (make_pod().typed().name(name).namespace("default").uid("uid-" + name)
         .created(created).scheduler(scheduler).priority(priority)
         .container(image="x", requests={"cpu": cpu}))
    if node_name:
        p.node(node_name)
    return p.phase("Running" if node_name else "Pending").obj()


def cluster() -> list[dict[str, Any]]:
    """n3 ranks highest but holds one 1-CPU pod; n1 lowest and only it is `special`."""
    return [
        node("n1", 1, "a", extra={"special": "yes"}), node("n2", 5, "a"), node("n3", 9, "b"),
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}},
        policy(),  # the applied policy: the baseline `current`
        pod("running", created="2026-01-01T00:00:00Z", node_name="n3"),
        pod("other-scheduler", created="2026-01-01T00:00:01Z", scheduler="default-scheduler"),
        # Pending, in queue order: high priority first, then oldest.
        pod("late-high", created="2026-01-01T00:00:09Z", priority=10),
        pod("early", created="2026-01-01T00:00:02Z"),
        pod("middle", created="2026-01-01T00:00:05Z"),
    ]


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    snap = tmp_path / "cluster.json"
    snap.write_text(snapshot.dump(snapshot.as_list(cluster()), "json"))
    out = {"snap": snap}
    for name, p in {"same": policy(), "reverse": policy(reverse=True),
                    "special": policy(require="special")}.items():
        f = tmp_path / f"{name}.yaml"
        f.write_text(yaml.safe_dump(p))
        out[name] = f
    return out


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(["simulate", *argv])
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def as_json(capsys: pytest.CaptureFixture[str], files: dict[str, Path], candidate: str,
            *extra: str) -> dict[str, Any]:
    code, out, err = run(capsys, "-f", str(files[candidate]), "--snapshot",
                         str(files["snap"]), "-o", "json", *extra)
    assert code == 0, err
    doc: dict[str, Any] = json.loads(out)
    return doc


# -- snapshot -------------------------------------------------------------------------------
def test_snapshot_is_sorted_and_drops_what_churns() -> None:
    doc = snapshot.as_list(cluster())
    kinds = [o["kind"] for o in doc["items"]]
    assert kinds == ["Node"] * 3 + ["Namespace", "SchedulingPolicy"] + ["Pod"] * 5
    pods = [o["metadata"]["name"] for o in doc["items"] if o["kind"] == "Pod"]
    assert pods == sorted(pods)
    n1 = doc["items"][0]["metadata"]
    assert "managedFields" not in n1 and "resourceVersion" not in n1
    assert "lastHeartbeatTime" not in doc["items"][0]["status"]["conditions"][0]
    # Stable: the same objects in another order give the same bytes.
    assert snapshot.dump(doc, "json") == snapshot.dump(
        snapshot.as_list(list(reversed(cluster()))), "json")


def test_snapshot_reads_kwokctl_export(tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    """kwokctl snapshot export writes one YAML document per object."""
    f = tmp_path / "kwok.yaml"
    f.write_text("\n---\n".join(yaml.safe_dump(o) for o in cluster()))
    assert cli.main(["snapshot", "-f", str(f), "-o", "yaml"]) == 0
    doc = yaml.safe_load(capsys.readouterr().out)
    assert doc["kind"] == "List" and len(doc["items"]) == len(cluster())


def test_snapshot_file_error_names_the_file(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text("- just\n- a list\n")
    assert cli.main(["snapshot", "-f", str(f)]) == 1
    assert str(f) in capsys.readouterr().err


# -- decisions ------------------------------------------------------------------------------
def test_pending_pods_in_queue_order_each_seeing_the_last(
        capsys: pytest.CaptureFixture[str], files: dict[str, Path]) -> None:
    doc = as_json(capsys, files, "same")
    pods = [(p["name"], p["node"]) for p in doc["pods"]]
    # n3 (rank 9) has room for one more 1-CPU pod: the first in queue order gets it.
    assert pods == [("late-high", "n3"), ("early", "n2"), ("middle", "n2")]
    assert all(p["reason"] is None for p in doc["pods"])
    assert doc["summary"]["scheduled"] == 3 and doc["summary"]["unschedulable"] == 0
    # Compared with itself (the applied policy), nothing changes.
    assert doc["baseline"] == "the current ranked"
    assert doc["summary"]["changed"] == 0 and doc["changes"] == []


def test_replay_redecides_bound_pods_first_on_a_cluster_emptied_of_them(
        capsys: pytest.CaptureFixture[str], files: dict[str, Path]) -> None:
    doc = as_json(capsys, files, "reverse", "--replay")
    pods = [(p["name"], p["node"], p.get("replayed", False)) for p in doc["pods"]]
    assert pods == [("running", "n1", True), ("late-high", "n1", False),
                    ("early", "n2", False), ("middle", "n2", False)]
    assert doc["pods"][0]["currentNode"] == "n3"
    nodes = {n["node"]: n for n in doc["utilisation"]["nodes"]}
    assert nodes["n3"]["before"]["pods"] == 1 and nodes["n3"]["after"]["pods"] == 0
    assert nodes["n1"]["after"]["cpuPercent"] == 100.0


def test_changes_against_the_baseline_with_the_deciding_scorer(
        capsys: pytest.CaptureFixture[str], files: dict[str, Path]) -> None:
    doc = as_json(capsys, files, "special")
    assert [(p["name"], p["node"]) for p in doc["pods"]] == [
        ("late-high", "n1"), ("early", "n1"), ("middle", None)]
    middle = doc["pods"][2]
    assert middle["reason"].startswith("0/3 nodes are available")
    assert doc["reasons"] == [
        {"reason": "Insufficient cpu", "pods": 1},
        {"reason": "node(s) didn't match NodeLabel requirement special Exists", "pods": 1}]
    s = doc["summary"]
    assert (s["changed"], s["moved"], s["newUnschedulable"]) == (3, 2, 1)
    first = doc["changes"][0]
    assert first["name"] == "late-high" and first["change"] == "moved"
    assert first["baseline"] == {"node": "n3", "reason": None,
                                 "decidingScorer": "NodeLabelValue"}
    assert first["candidate"]["node"] == "n1"
    zones = {z["zone"]: z for z in doc["utilisation"]["zones"]}
    assert zones["a"]["before"]["cpuRequestedMilli"] == 0
    assert zones["a"]["after"]["cpuRequestedMilli"] == 2000


def test_baseline_from_a_file_and_none(capsys: pytest.CaptureFixture[str],
                                       files: dict[str, Path]) -> None:
    doc = as_json(capsys, files, "special", "--baseline", str(files["reverse"]))
    assert doc["baseline"].endswith(str(files["reverse"]))
    assert doc["summary"]["changed"] == 1  # only `middle`: n2 under reverse
    doc = as_json(capsys, files, "special", "--baseline", "none")
    assert doc["baseline"] is None and "changes" not in doc


# -- formats --------------------------------------------------------------------------------
def test_table_report(capsys: pytest.CaptureFixture[str], files: dict[str, Path]) -> None:
    code, out, _ = run(capsys, "-f", str(files["special"]), "--snapshot", str(files["snap"]))
    assert code == 0
    assert "3 pod(s) simulated (0 replayed) on 3 node(s): 2 would schedule, 1 would not." in out
    assert "Why pods would not schedule:" in out and "Insufficient cpu" in out
    assert "Changes against the current ranked:" in out
    change = next(line for line in out.splitlines() if line.startswith("default/middle "))
    assert "now unschedulable" in change and "n2" in change
    assert "Utilisation per zone (topology.kubernetes.io/zone)" in out
    assert any(line.split()[:1] == ["n1"] and "100.0%" in line for line in out.splitlines())


def test_markdown_report(capsys: pytest.CaptureFixture[str], files: dict[str, Path]) -> None:
    code, out, _ = run(capsys, "-f", str(files["special"]), "--snapshot", str(files["snap"]),
                       "-o", "markdown")
    assert code == 0
    assert out.startswith("### polsched simulate: `ranked` against ")
    assert "#### Changes against the current ranked" in out
    assert "| POD | CHANGE | BASELINE | DECIDED BY | CANDIDATE | DECIDED BY |" in out
    assert "| default/late-high | moved | n3 | NodeLabelValue | n1 |" in out
    assert "#### Utilisation per zone" in out and "| a | 0.0% | 50.0% |" in out


def test_markdown_folds_long_sections() -> None:
    decisions = [simulate_groups.Decision("ns", f"p{i}", "n") for i in range(30)]
    r = simulate.Report("p", "s", "f", 1, decisions)
    out = simulate.format_markdown(r)
    assert "<details><summary>Pods (30)</summary>" in out


# -- --fail-on --------------------------------------------------------------------------------
@pytest.mark.parametrize(("candidate", "conditions", "code"), [
    ("same", ["unschedulable", "new-unschedulable", "changed"], 0),
    ("special", ["unschedulable"], simulate.EXIT_UNSCHEDULABLE),
    ("special", ["new-unschedulable"], simulate.EXIT_NEW_UNSCHEDULABLE),
    ("special", ["changed>50%"], simulate.EXIT_CHANGED),
    ("special", ["changed>3"], 0),
    ("special", ["changed>2"], simulate.EXIT_CHANGED),
    ("reverse", ["changed>99%"], 0),
    # Several trip: the smallest code.
    ("special", ["changed>0,new-unschedulable", "unschedulable"], simulate.EXIT_UNSCHEDULABLE),
])
def test_fail_on_exit_codes(capsys: pytest.CaptureFixture[str], files: dict[str, Path],
                            candidate: str, conditions: list[str], code: int) -> None:
    args = [a for c in conditions for a in ("--fail-on", c)]
    got, out, err = run(capsys, "-f", str(files[candidate]), "--snapshot", str(files["snap"]),
                        "-o", "json", *args)
    assert got == code, err
    assert json.loads(out)["pods"]  # the report is written whatever the verdict
    assert ("--fail-on:" in err) == (code != 0)


def test_fail_on_errors(capsys: pytest.CaptureFixture[str], files: dict[str, Path]) -> None:
    code, _, err = run(capsys, "-f", str(files["same"]), "--snapshot", str(files["snap"]),
                       "--fail-on", "moved>3")
    assert code == 2 and "unknown --fail-on condition 'moved>3'" in err
    code, _, err = run(capsys, "-f", str(files["same"]), "--snapshot", str(files["snap"]),
                       "--baseline", "none", "--fail-on", "changed>1%")
    assert code == simulate.EXIT_ERROR and "needs a baseline" in err


def test_bad_candidate_names_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                       files: dict[str, Path]) -> None:
    bad = policy()
    bad["spec"]["scorers"][0]["weight"] = 1000
    f = tmp_path / "bad.yaml"
    f.write_text(yaml.safe_dump(bad))
    code, _, err = run(capsys, "-f", str(f), "--snapshot", str(files["snap"]))
    assert code == 1 and "spec.scorers[0].weight" in err


def test_snapshot_objects_reach_the_cache_listers_plugins_read() -> None:
    """Every kind the cache keeps for plugins is fed through its ingest method."""
    pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
           "metadata": {"name": "data", "namespace": "default"}, "spec": {}}
    pc = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
          "metadata": {"name": "high"}, "value": 1000}
    doc = snapshot.as_list([*cluster(), pvc, pc])
    cache = simulate.build_cache(doc["items"])
    assert cache.listers.pvc("default", "data") is not None
    assert cache.listers.priority_class("high") is not None
    assert cache.namespaces == {"default": {}}
    assert sorted(cache.pods) == ["default/early", "default/late-high", "default/middle",
                                  "default/other-scheduler", "default/running"]
    n3 = cache.node_info("n3")
    assert n3 is not None and len(n3.pods) == 1


def test_gated_pods_are_reported_not_decided(tmp_path: Path, files: dict[str, Path],
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """A pod with scheduling gates never enters the queue (SchedulingGates, PreEnqueue)."""
    objs = cluster()
    gated = pod("gated", created="2026-01-01T00:00:00Z")
    gated["spec"]["schedulingGates"] = [{"name": "example.com/wait"}]
    objs.append(gated)
    snap = tmp_path / "gated.json"
    snap.write_text(snapshot.dump(snapshot.as_list(objs), "json"))
    code, out, err = run(capsys, "-f", str(files["same"]), "--snapshot", str(snap),
                         "-o", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert [p["name"] for p in doc["pods"]] == ["late-high", "early", "middle", "gated"]
    last = doc["pods"][-1]
    assert last["node"] is None and last["reason"].startswith("gated")


def test_progress_bar_shows_only_after_a_while() -> None:
    import io

    out = io.StringIO()
    bar = simulate.ProgressBar(out, after=3600.0)
    bar(5, 10)
    bar.close()
    assert out.getvalue() == ""  # a quick run shows nothing
    bar = simulate.ProgressBar(out, after=0.0)
    bar(5, 10)
    bar(10, 10)
    bar.close()
    text = out.getvalue()
    assert "\r[" + "#" * 15 + "." * 15 + "] 5/10 decisions" in text
    assert "] 10/10 decisions" in text and text.endswith("\n")


def test_a_shadow_candidate_is_compared_with_the_policy_it_shadows(
        tmp_path: Path, files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    """The shadow overlay of the GitOps page: another name, spec.shadowOf the live one."""
    shadow = policy("ranked-candidate", require="special")
    shadow["spec"]["shadowOf"] = "ranked"
    del shadow["spec"]["schedulerName"]  # its own name: a shadow claims none
    f = tmp_path / "shadow.yaml"
    f.write_text(yaml.safe_dump(shadow))
    code, out, err = run(capsys, "-f", str(f), "--snapshot", str(files["snap"]), "-o", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["baseline"] == "the current ranked"
    assert [(p["name"], p["node"]) for p in doc["pods"]] == [
        ("late-high", "n1"), ("early", "n1"), ("middle", None)]


# -- DRA ------------------------------------------------------------------------------------
def dra_cluster() -> list[dict[str, Any]]:
    """Two nodes with one GPU each (ResourceSlices) and three pending pods, each with its
    own claim for one GPU."""
    driver = "gpu.example.com"
    objs: list[dict[str, Any]] = [
        node("n1", 1, "a"), node("n2", 5, "a"),
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}},
        {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu"},
         "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]}}]
    for n in ("n1", "n2"):
        objs.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                     "metadata": {"name": f"{n}-gpu"},
                     "spec": {"driver": driver, "nodeName": n,
                              "pool": {"name": n, "generation": 1, "resourceSliceCount": 1},
                              "devices": [{"name": "gpu-0"}]}})
    for i in range(3):
        objs.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                     "metadata": {"name": f"c{i}", "namespace": "default", "uid": f"u{i}"},
                     "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                         "deviceClassName": "gpu", "allocationMode": "ExactCount",
                         "count": 1}}]}}})
        p = pod(f"p{i}", created=f"2026-01-01T00:00:0{i}Z", cpu="100m")
        p["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": f"c{i}"}]
        objs.append(p)
    return objs


def test_dra_pods_each_get_a_device_of_their_own(capsys: pytest.CaptureFixture[str],
                                                  tmp_path: Path) -> None:
    """The snapshot carries slices, classes and claims; Reserve holds a pod's device from
    the pods after it, so the third pod finds none left."""
    snap = tmp_path / "dra.json"
    snap.write_text(snapshot.dump(snapshot.as_list(dra_cluster()), "json"))
    f = tmp_path / "p.yaml"
    f.write_text(yaml.safe_dump(policy()))
    code, out, err = run(capsys, "-f", str(f), "--snapshot", str(snap), "-o", "json")
    assert code == 0, err
    doc = json.loads(out)
    nodes = {p["name"]: p["node"] for p in doc["pods"]}
    assert sorted(n for n in nodes.values() if n) == ["n1", "n2"]
    assert [p["name"] for p in doc["pods"] if p["node"] is None] == ["p2"]
    [late] = [p for p in doc["pods"] if p["name"] == "p2"]
    assert "cannot allocate all claims" in late["reason"]


def test_extended_resources_served_by_devices_take_devices_in_turn(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """DRAExtendedResource offline: pods asking for `example.com/gpu`, which a DeviceClass
    serves and no node advertises, get a device each; the third finds none left."""
    objs = [o for o in dra_cluster() if o["kind"] not in ("ResourceClaim", "Pod")]
    for o in objs:
        if o["kind"] == "DeviceClass":
            o["spec"]["extendedResourceName"] = "example.com/gpu"
    for i in range(3):
        p = pod(f"p{i}", created=f"2026-01-01T00:00:0{i}Z", cpu="100m")
        p["spec"]["containers"][0]["resources"]["limits"] = {"example.com/gpu": "1"}
        p["spec"]["containers"][0]["resources"]["requests"]["example.com/gpu"] = "1"
        objs.append(p)
    snap = tmp_path / "dra.json"
    snap.write_text(snapshot.dump(snapshot.as_list(objs), "json"))
    f = tmp_path / "p.yaml"
    f.write_text(yaml.safe_dump(policy()))
    code, out, err = run(capsys, "-f", str(f), "--snapshot", str(snap), "-o", "json")
    assert code == 0, err
    doc = json.loads(out)
    nodes = {p["name"]: p["node"] for p in doc["pods"]}
    assert sorted(n for n in nodes.values() if n) == ["n1", "n2"]
    [late] = [p for p in doc["pods"] if p["node"] is None]
    assert "cannot allocate all claims" in late["reason"]


# -- the order pods reach the scheduler ---------------------------------------------------
def created_at(p: dict[str, Any], revision: int, *, written: bool = False) -> dict[str, Any]:
    """`p` as the API server returns it: its creation revision, and one managedFields entry
    at its creation; `written`: a status written since (a later revision, an entry for the
    status subresource)."""
    meta = p["metadata"]
    meta["resourceVersion"] = str(revision + (1000 if written else 0))
    meta["managedFields"] = [{"manager": "e2e", "operation": "Update",
                              "time": meta["creationTimestamp"]}]
    if written:
        meta["managedFields"].append({"manager": "polsched", "operation": "Update",
                                      "subresource": "status",
                                      "time": meta["creationTimestamp"]})
    return p


def twelve_in_one_second(*, written: str = "") -> list[dict[str, Any]]:
    """sim-p1..sim-p12 created in one second, in that order (revisions 101..112); six
    1-CPU nodes ranked 1..6 take two 500m pods each, the highest rank first."""
    objs: list[dict[str, Any]] = [node(f"r{r}", r, "a", cpu="1") for r in range(1, 7)]
    objs.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}})
    for i in range(1, 13):
        name = f"sim-p{i}"
        objs.append(created_at(pod(name, created="2026-01-01T00:00:07Z", cpu="500m"), 100 + i,
                               written=name == written))
    return objs


def simulate_objects(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                     objs: list[dict[str, Any]]) -> dict[str, Any]:
    snap = tmp_path / "snap.json"
    snap.write_text(snapshot.dump(snapshot.as_list(objs), "json"))
    cand = tmp_path / "p.yaml"
    cand.write_text(yaml.safe_dump(policy()))
    code, out, err = run(capsys, "-f", str(cand), "--snapshot", str(snap), "-o", "json",
                         "--baseline", "none")
    assert code == 0, err
    doc: dict[str, Any] = json.loads(out)
    return doc


def test_pods_of_one_second_are_decided_in_creation_order_not_by_name(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = simulate_objects(tmp_path, capsys, twelve_in_one_second())
    # The snapshot kept each pending pod's creation revision, and the engine's order is
    # theirs: sim-p1 and sim-p2 on the top rank, not sim-p1 and sim-p10.
    placed = {d["name"]: d["node"] for d in doc["pods"]}
    assert placed == {f"sim-p{i}": f"r{6 - (i - 1) // 2}" for i in range(1, 13)}
    assert "orderUnknown" not in doc["summary"]
    assert not any(d.get("orderUnknown") for d in doc["pods"])


def test_a_pod_written_since_its_creation_is_reported_as_an_order_guess(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    objs = twelve_in_one_second(written="sim-p3")
    kept = snapshot.as_list(objs)["items"]
    revisions = {o["metadata"]["name"]: o["metadata"].get("resourceVersion")
                 for o in kept if o["kind"] == "Pod"}
    assert revisions["sim-p3"] is None and revisions["sim-p4"] == "104"
    doc = simulate_objects(tmp_path, capsys, objs)
    # Every pod of that second depends on where sim-p3 stands among them.
    assert doc["summary"]["orderUnknown"] == 12
    assert all(d["orderUnknown"] for d in doc["pods"])


def test_creation_revision_is_known_only_while_nothing_wrote_the_pod() -> None:
    p = created_at(pod("a", created="2026-01-01T00:00:07Z"), 5)
    assert snapshot.creation_revision(p) == 5
    later = json.loads(json.dumps(p))
    later["metadata"]["managedFields"][0]["time"] = "2026-01-01T00:00:09Z"
    assert snapshot.creation_revision(later) is None
    conditioned = json.loads(json.dumps(p))
    conditioned["status"]["conditions"] = [{"type": "PodScheduled", "status": "False"}]
    assert snapshot.creation_revision(conditioned) is None
    gated = json.loads(json.dumps(p))  # the API server's own condition at creation
    gated["status"]["conditions"] = [{"type": "PodScheduled", "status": "False",
                                      "reason": "SchedulingGated"}]
    assert snapshot.creation_revision(gated) == 5
    bound = pod("b", created="2026-01-01T00:00:07Z", node_name="n1")
    bound["metadata"]["resourceVersion"] = "9"
    assert "resourceVersion" not in snapshot.clean(bound)["metadata"]


def test_a_nominated_pod_counts_in_simulate_as_in_explain(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import asyncio

    from polsched.api import load_policy
    from polsched.commands import explain
    from polsched.plugins import CATALOG

    # A pending pod of higher priority nominated to n3 (its victims are going) holds n3's
    # 2 CPUs: the next pod, which ranks n3 first, goes to n2 in both tools.
    nominated = pod("preemptor", created="2026-01-01T00:00:01Z", cpu="2", priority=100,
                    scheduler="other")
    nominated["status"]["nominatedNodeName"] = "n3"
    nodes = [node("n1", 1, "a"), node("n2", 5, "a"), node("n3", 9, "b")]
    new = pod("new", created="2026-01-01T00:00:02Z")
    objs = [*nodes, {"apiVersion": "v1", "kind": "Namespace",
                     "metadata": {"name": "default"}}, nominated, new]
    doc = simulate_objects(tmp_path, capsys, objs)
    assert {d["name"]: d["node"] for d in doc["pods"]} == {"new": "n2"}
    report = asyncio.run(explain.explain(load_policy(policy(), CATALOG), new, nodes,
                                         [nominated]))
    assert report.winner == "n2"


def test_alike_pods_are_batched_as_the_engine_batches_them(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A policy whose PodTopologySpread has no default constraints signs pods, so the
    # simulation places the second alike pod on the first one's kept ranking, as the
    # engine would (OpportunisticBatching, on by default).
    spread = {"name": "PodTopologySpread",
              "args": {"defaultingType": "List", "defaultConstraints": []}}
    p = {"apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
         "metadata": {"name": SCHED}, "spec": {"schedulerName": SCHED, "filters": [spread],
                                               "scorers": [{**spread, "weight": 2}]}}
    objects = [node("n1", 1, "a"), node("n2", 5, "a"), node("n3", 9, "b"),
               {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}},
               pod("first", created="2026-01-01T00:00:01Z"),
               pod("second", created="2026-01-01T00:00:02Z")]
    snap = tmp_path / "cluster.json"
    snap.write_text(snapshot.dump(snapshot.as_list(objects), "json"))
    f = tmp_path / "batching.yaml"
    f.write_text(yaml.safe_dump(p))
    key = (("profile", SCHED), ("result", "hint_used"))
    before = metrics.BATCH_ATTEMPTS.values.get(key, 0.0)
    code, out, err = run(capsys, "-f", str(f), "--snapshot", str(snap), "-o", "json")
    assert code == 0, err
    placed = {d["name"]: d["node"] for d in json.loads(out)["pods"]}
    assert placed["first"] and placed["second"] and placed["first"] != placed["second"]
    assert metrics.BATCH_ATTEMPTS.values.get(key, 0.0) == before + 1
