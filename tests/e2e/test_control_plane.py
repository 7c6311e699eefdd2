"""The ground every other e2e test stands on: a real kube-apiserver, with kwok as the
nodes, where a pod can be bound with a v1 Binding exactly as kube-scheduler binds."""

from __future__ import annotations

import json
import time

import pytest
import yaml
from kubernetes import client

from tests.builders import make_pod
from tests.conftest import ROOT, Cluster, NodeFactory, unique

pytestmark = pytest.mark.e2e


def test_server_reports_pinned_version(cluster: Cluster) -> None:
    pinned = (ROOT / "hack" / "versions.env").read_text()
    want = next(line.split("=", 1)[1] for line in pinned.splitlines()
                if line.startswith("KUBE_VERSION="))
    out = cluster.kubectl_json("version")
    assert out["serverVersion"]["gitVersion"] == want


def test_bind_pod_with_v1_binding(cluster: Cluster, namespace: str, nodes: NodeFactory) -> None:
    node = nodes(unique("node"), cpu="2", memory="4Gi")
    pod_name = "bind-me"
    cluster.apply(make_pod().typed().name(pod_name).namespace(namespace).scheduler("nobody")
                  .container(image="busybox").obj())
    core = client.CoreV1Api(cluster.api)
    body = client.V1Binding(metadata=client.V1ObjectMeta(name=pod_name),
                            target=client.V1ObjectReference(api_version="v1", kind="Node",
                                                            name=node))
    core.create_namespaced_binding(namespace, body, _preload_content=False)

    pod = cluster.kubectl_json("get", "pod", pod_name, "-n", namespace)
    assert pod["spec"]["nodeName"] == node
    got = cluster.kubectl_json("get", "node", node)
    assert got["status"]["allocatable"]["cpu"] == "2"

    # kwok plays the kubelet: the node turns Ready and the bound pod Running.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        pod = cluster.kubectl_json("get", "pod", pod_name, "-n", namespace)
        ready = {c["type"]: c["status"] for c in
                 cluster.kubectl_json("get", "node", node)["status"].get("conditions", [])}
        if pod["status"].get("phase") == "Running" and ready.get("Ready") == "True":
            break
        time.sleep(0.2)
    assert pod["status"]["phase"] == "Running"
    assert ready.get("Ready") == "True"

    # A second binding of the same pod is refused: a pod is never bound twice.
    second = cluster.kubectl("create", "--raw",
                             f"/api/v1/namespaces/{namespace}/pods/{pod_name}/binding",
                             "-f", "-", check=False,
                             input=json.dumps({"apiVersion": "v1", "kind": "Binding",
                                               "metadata": {"name": pod_name},
                                               "target": {"apiVersion": "v1", "kind": "Node",
                                                          "name": node}}))
    assert second.returncode != 0
    assert "already" in (second.stderr + second.stdout)


def test_a_status_patch_carrying_another_pods_uid_is_refused(cluster: Cluster,
                                                             namespace: str) -> None:
    """hack/e2e/kwok-stages.yaml's pod-stop stages put the stopped pod's uid in their
    status patch, because kwok patches by name: when an e2e spec deletes a pod and at once
    creates another of the same name, the old pod's stop must not make the new one Failed.
    The guard is the API server's: metadata.uid is immutable."""
    name = unique("same-name")
    cluster.apply(make_pod().typed().name(name).namespace(namespace).scheduler("nobody")
                  .container(image="busybox").obj())
    pod = cluster.kubectl_json("get", "pod", name, "-n", namespace)
    stale = {"metadata": {"uid": "00000000-0000-0000-0000-000000000000"},
             "status": {"phase": "Failed"}}
    p = cluster.kubectl("patch", "pod", name, "-n", namespace, "--subresource", "status",
                        "--type", "strategic", "-p", json.dumps(stale), check=False)
    assert p.returncode != 0 and "uid" in p.stderr, p.stderr
    assert cluster.kubectl_json("get", "pod", name, "-n", namespace)["status"]["phase"] \
        == "Pending"
    same = {"metadata": {"uid": pod["metadata"]["uid"]}, "status": {"phase": "Failed"}}
    cluster.kubectl("patch", "pod", name, "-n", namespace, "--subresource", "status",
                    "--type", "strategic", "-p", json.dumps(same))
    assert cluster.kubectl_json("get", "pod", name, "-n", namespace)["status"]["phase"] \
        == "Failed"


def test_kwoks_pod_stop_stages_carry_the_pods_uid() -> None:
    stages = [d for d in yaml.safe_load_all(
        (ROOT / "hack" / "e2e" / "kwok-stages.yaml").read_text()) if d]
    stops = [s for s in stages if s["metadata"]["name"].startswith("pod-stop")]
    assert len(stops) == 2
    for s in stops:
        patches = s["spec"]["next"]["patches"]
        assert "statusTemplate" not in s["spec"]["next"]
        assert [p["subresource"] for p in patches] == ["status"]
        assert "uid: {{ .metadata.uid | Quote }}" in patches[0]["template"]
