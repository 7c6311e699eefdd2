"""The ground every other e2e test stands on: a real kube-apiserver, with kwok as the
nodes, where a pod can be bound with a v1 Binding exactly as kube-scheduler binds."""

from __future__ import annotations

import json
import time

import pytest
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
