"""`kubectl polsched`, as a platform team runs it: kubectl finds the plugin on PATH and
hands it the words; it takes kubectl's --context (and the context's namespace when -n is
not given) and --as; and the read-only ClusterRole polsched-explain is all a user needs to
explain a pod."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import Cluster, NodeFactory, unique
from tests.e2e.scheduling import RUN, example, pod_manifest

pytestmark = pytest.mark.e2e

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[2]
CLUSTER_ROLE = ROOT / "manifests/explain-clusterrole.yaml"


def plugin_env(cluster: Cluster, kubeconfig: Path) -> dict[str, str]:
    return {**cluster.env, "KUBECONFIG": str(kubeconfig),
            "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}


def two_contexts(cluster: Cluster, path: Path, namespace: str) -> Path:
    """The cluster's kubeconfig with its current context broken (a server nobody serves)
    and a context `test` that reaches the cluster with `namespace` as its namespace: only
    --context test can work, and -n comes from it."""
    doc: dict[str, Any] = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    ctx = next(c for c in doc["contexts"] if c["name"] == doc["current-context"])["context"]
    doc["clusters"].append({"name": "nowhere",
                            "cluster": {"server": "https://127.0.0.1:1",
                                        "insecure-skip-tls-verify": True}})
    doc["contexts"] = [
        {"name": "broken", "context": {"cluster": "nowhere", "user": ctx["user"]}},
        {"name": "test", "context": {**ctx, "namespace": namespace}}]
    doc["current-context"] = "broken"
    path.write_text(yaml.safe_dump(doc))
    return path


def kubectl_polsched(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["kubectl", "polsched", *args], capture_output=True, text=True,
                          env=env, timeout=120)


def test_kubectl_finds_the_plugin_and_it_runs_with_context_and_as(
        cluster: Cluster, namespace: str, nodes: NodeFactory, tmp_path: Path) -> None:
    kubeconfig = two_contexts(cluster, tmp_path / "kubeconfig", namespace)
    env = plugin_env(cluster, kubeconfig)

    listed = subprocess.run(["kubectl", "plugin", "list"], capture_output=True, text=True,
                            env=env, timeout=60)
    assert str(BIN / "kubectl-polsched") in listed.stdout, listed.stdout + listed.stderr

    rid = unique("kp")
    high = nodes(f"{rid}-high", labels={RUN: rid, "priority.lixueduan.com": "10"})
    nodes(f"{rid}-low", labels={RUN: rid, "priority.lixueduan.com": "1"})
    policy = example("label-priority.yaml", f"{rid}-sched")
    cluster.apply(policy)
    # Pending: nothing schedules for this name in this test; explain decides it anyway.
    cluster.apply(pod_manifest(namespace, "web", f"{rid}-sched", rid, cpu="100m"))
    user = unique("jane")
    binding = f"{user}-polsched-explain"
    try:
        # No -n: the namespace is the `test` context's, as with kubectl.
        p = kubectl_polsched(env, "explain", "web", "--context", "test", "-o", "yaml")
        assert p.returncode == 0, p.stderr
        report = yaml.safe_load(p.stdout)
        assert report["pod"] == f"{namespace}/web"
        assert report["winner"] == high
        # The current context reaches no server: --context was what made it work.
        p = kubectl_polsched(env, "explain", "web", "-n", namespace)
        assert p.returncode != 0

        # --as: a user without RBAC is refused by the API server ...
        p = kubectl_polsched(env, "explain", "web", "--context", "test", "--as", user)
        assert p.returncode == 1 and "Forbidden" in p.stderr, p.stderr
        # ... and the shipped read-only ClusterRole is all it takes.
        cluster.kubectl("apply", "-f", str(CLUSTER_ROLE))
        cluster.kubectl("create", "clusterrolebinding", binding,
                        "--clusterrole=polsched-explain", f"--user={user}")
        p = kubectl_polsched(env, "explain", "web", "--context", "test", "--as", user,
                             "-o", "json")
        assert p.returncode == 0, p.stderr
        assert json.loads(p.stdout)["winner"] == high
        # snapshot, too, through the same flags.
        p = kubectl_polsched(env, "snapshot", "--context", "test", "--as", user)
        assert p.returncode == 0, p.stderr
        names = {o["metadata"]["name"] for o in json.loads(p.stdout)["items"]}
        assert {high, "web", policy["metadata"]["name"]} <= names
    finally:
        cluster.kubectl("delete", "clusterrolebinding", binding, "--ignore-not-found",
                        check=False)
        cluster.kubectl("delete", "schedulingpolicy", policy["metadata"]["name"],
                        "--wait=false", check=False)


def test_the_explain_cluster_role_only_reads() -> None:
    role = yaml.safe_load(CLUSTER_ROLE.read_text())
    assert role["kind"] == "ClusterRole" and role["metadata"]["name"] == "polsched-explain"
    for rule in role["rules"]:
        assert set(rule["verbs"]) <= {"get", "list"}, rule
        assert "secrets" not in rule["resources"] and "*" not in rule["resources"]
