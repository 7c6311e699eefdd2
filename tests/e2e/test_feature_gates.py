"""`make cluster FEATURE_GATES=GenericWorkload=true` (issue 29): the control plane serves
Workload and PodGroup (scheduling.k8s.io/v1beta1) with the knob and keeps upstream's
defaults without it; kube-scheduler given the same gates (the conformance oracle's and the
bench's, through polsched.cluster.featuregates) schedules a PodGroup as a gang.

One extra control plane, shared with the gang tests (tests/e2e/conftest.py `gated`; kwok
off: binding needs no kubelet)."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from polsched.cluster import featuregates
from tests.builders import make_pod
from tests.conftest import Cluster, node_manifest, unique
from tests.e2e.conftest import GATES

pytestmark = pytest.mark.e2e


def _cmdline(pid_file: Path) -> list[str]:
    pid = int(pid_file.read_text().strip())
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")


def _flag(args: list[str], name: str) -> str | None:
    """The value of `--name value` (or `--name=value`) in a command line."""
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


def _resources(cluster: Cluster) -> set[str]:
    out = cluster.kubectl("api-resources", "--api-group=scheduling.k8s.io", "-o", "name")
    return set(out.stdout.split())


def _wait(what: str, cond: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def test_knob_serves_workload_and_podgroup(gated: tuple[Cluster, Path]) -> None:
    c, d = gated
    assert {"workloads.scheduling.k8s.io", "podgroups.scheduling.k8s.io"} <= _resources(c)
    api = _cmdline(d / "kube-apiserver.pid")
    assert _flag(api, "--feature-gates") == GATES
    assert _flag(api, "--runtime-config") == "scheduling.k8s.io/v1beta1=true"
    kcm = _cmdline(d / "kube-controller-manager.pid")
    assert _flag(kcm, "--feature-gates") == GATES
    assert "podgroup-protection-controller" in (_flag(kcm, "--controllers") or "").split(",")
    assert (d / "feature-gates").read_text() == GATES


def test_without_knob_upstream_defaults(cluster: Cluster) -> None:
    if os.environ.get("POLSCHED_KUBECONFIG") or featuregates.from_env():
        pytest.skip("the session control plane was not started without gates by this run")
    got = _resources(cluster)
    assert "workloads.scheduling.k8s.io" not in got
    assert "podgroups.scheduling.k8s.io" not in got
    assert "priorityclasses.scheduling.k8s.io" in got
    d = Path(cluster.kubeconfig).parent
    for name in ("kube-apiserver", "kube-controller-manager"):
        args = _cmdline(d / f"{name}.pid")
        assert _flag(args, "--feature-gates") is None, name
        assert _flag(args, "--runtime-config") is None, name
    assert "podgroup-protection-controller" not in (
        _flag(_cmdline(d / "kube-controller-manager.pid"), "--controllers") or "")


def _podgroup(name: str, ns: str, min_count: int, workload: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": min_count}}}
    if workload:
        spec["workloadRef"] = {"workloadName": workload, "templateName": "workers"}
    return {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": ns}, "spec": spec}


def test_podgroup_create_and_delete(gated: tuple[Cluster, Path]) -> None:
    c, _ = gated
    ns = "default"
    w, pg = unique("wl"), unique("pg")
    c.apply({"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "Workload",
             "metadata": {"name": w, "namespace": ns},
             "spec": {"podGroupTemplates": [
                 {"name": "workers", "schedulingPolicy": {"gang": {"minCount": 3}}}]}})
    c.apply(_podgroup(pg, ns, 3, workload=w))
    got = c.kubectl_json("get", "podgroups.v1beta1.scheduling.k8s.io", pg, "-n", ns)
    assert got["spec"]["schedulingPolicy"]["gang"]["minCount"] == 3
    assert got["spec"]["workloadRef"] == {"workloadName": w, "templateName": "workers"}
    # The apiserver's PodGroupProtection admission adds a finalizer that only the
    # controller manager's podgroup-protection-controller lifts: deletion completes.
    assert "scheduling.k8s.io/podgroup-protection" in got["metadata"]["finalizers"]
    c.kubectl("delete", "podgroups.v1beta1.scheduling.k8s.io", pg, "-n", ns, "--wait=false")

    def gone() -> bool:
        r = c.kubectl("get", "podgroups.v1beta1.scheduling.k8s.io", pg, "-n", ns,
                      "--ignore-not-found", "-o", "name")
        return not r.stdout.strip()
    _wait(f"PodGroup {pg} to be deleted", gone)
    c.kubectl("delete", "workloads.v1beta1.scheduling.k8s.io", w, "-n", ns)


def test_oracle_with_gate_schedules_a_gang(gated: tuple[Cluster, Path]) -> None:
    """kube-scheduler with the gates (featuregates.kube_scheduler_args, as the conformance
    runner and the bench start it) binds a PodGroup's members only once minCount exist."""
    c, d = gated
    args = featuregates.kube_scheduler_args({featuregates.ENV: GATES})
    assert args == ["--feature-gates", GATES]
    log = d / "oracle.log"
    proc = subprocess.Popen(
        [str(c.bin_dir / "kube-scheduler"), "--kubeconfig", c.kubeconfig,
         "--leader-elect=false", "--bind-address", "127.0.0.1", "--secure-port", "0",
         "--v", "2", *args],
        stdout=log.open("wb"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        start_new_session=True)
    ns = unique("gang")
    node = unique("node")
    try:
        c.kubectl("create", "namespace", ns)
        c.apply(node_manifest(node))
        pg = unique("pg")
        c.apply(_podgroup(pg, ns, 2))

        def member(name: str) -> dict[str, Any]:
            return (make_pod().typed().name(name).namespace(ns).pod_group(pg)
                    .container(image="busybox").obj())

        c.apply(member("m1"))
        # A plain pod created after m1 gets bound: the scheduler's pod watch delivered m1
        # first (one watch, resourceVersion order), so m1 has been through PreEnqueue and
        # was held there, alone in a group of minCount 2.
        probe = make_pod().typed().name("probe").namespace(ns).container(image="busybox").obj()
        c.apply(probe)
        _wait("the probe pod bound", lambda: bool(
            c.kubectl_json("get", "pod", "probe", "-n", ns)["spec"].get("nodeName")))
        assert b'"GangScheduling"' in log.read_bytes()
        assert not c.kubectl_json("get", "pod", "m1", "-n", ns)["spec"].get("nodeName")
        c.apply(member("m2"))

        def bound() -> bool:
            pods = [c.kubectl_json("get", "pod", m, "-n", ns) for m in ("m1", "m2")]
            return all(p["spec"].get("nodeName") == node for p in pods)
        _wait("both members bound", bound)

        def condition() -> bool:
            got = c.kubectl_json("get", "podgroups.v1beta1.scheduling.k8s.io", pg, "-n", ns)
            conds = {x["type"]: x for x in got.get("status", {}).get("conditions", [])}
            return bool(conds.get("PodGroupInitiallyScheduled", {}).get("status") == "True")
        _wait("PodGroupInitiallyScheduled=True", condition)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        c.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        c.kubectl("delete", "node", node, "--wait=false", check=False)
