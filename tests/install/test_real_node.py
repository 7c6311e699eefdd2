"""The install as a user meets it: polsched's image built here (make image), a control
plane with one real node (kubelet + containerd + runc + CNI bridge), `kubectl apply -k`
of manifests/ with the image set by kustomize `images:`, and then the operator as a Pod
on that node: Ready through its probes, leading through its Lease, serving its webhook
through its Service, scheduling pods whose containers really start, and deploying a
Dedicated scheduler from the same image.

Root only (containerd, the bridge); `make test-install` installs the Debian packages."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.builders import make_pod
from tests.conftest import HACK, ROOT, unique
from tests.e2e.argocd import health
from tests.e2e.operators import wait_for

# The image build and a real node's start are in the first test's fixtures (a cold
# image build downloads Debian packages): the default 300 s per test is too short.
pytestmark = [pytest.mark.install, pytest.mark.timeout(1800)]

NS = "polsched-system"
NODE = "real-node"
VERSION = "0.1.0"
IMAGE = f"local/polsched:{VERSION}"
TEST_IMAGE = "docker.io/local/busybox:1"


class RealCluster:
    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.kubeconfig = str(directory / "kubeconfig")

    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                timeout: float = 120) -> subprocess.CompletedProcess[str]:
        p = subprocess.run(["kubectl", "--kubeconfig", self.kubeconfig, *args], input=input,
                           capture_output=True, text=True, timeout=timeout)
        if check and p.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)}: {p.stderr}")
        return p

    def get(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def apply(self, obj: dict[str, Any], check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.kubectl("apply", "-f", "-", input=json.dumps(obj), check=check)

    def container_logs(self, pod: dict[str, Any]) -> str:
        """The pod's container logs, read from the node (no kubelet server to proxy)."""
        ns, name, uid = (pod["metadata"]["namespace"], pod["metadata"]["name"],
                         pod["metadata"]["uid"])
        out = []
        for f in sorted((self.dir / "node" / "pods").glob(f"{ns}_{name}_{uid}/*/*.log")):
            out.append(f"== {f.name}\n{f.read_text(errors='replace')[-8000:]}")
        return "\n".join(out)


@pytest.fixture(scope="module")
def real() -> Iterator[RealCluster]:
    if os.geteuid() != 0:
        pytest.fail("the install test needs root (containerd, runc, the bridge): "
                    "run `make test-install` as root, as CI does")
    with tempfile.TemporaryDirectory(prefix="polsched-install-") as d:
        env = {**os.environ, "POLSCHED_REAL_NODE": "1"}
        up = subprocess.run([str(HACK / "cluster.sh"), "up", d], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        print(up.stdout)
        try:
            assert up.returncode == 0, "the control plane with a real node did not start"
            yield RealCluster(Path(d))
        finally:
            subprocess.run([str(HACK / "cluster.sh"), "down", d], capture_output=True)


@pytest.fixture(scope="module")
def installed(real: RealCluster) -> Iterator[RealCluster]:
    """make image, loaded into the node; kubectl apply -k with kustomize `images:`."""
    t0 = time.monotonic()
    archive = subprocess.run([str(HACK / "image.sh"), "build", str(real.dir / "polsched.tar")],
                             capture_output=True, text=True)
    print(archive.stderr)
    assert archive.returncode == 0, "make image failed"
    subprocess.run([str(HACK / "node.sh"), "load", str(real.dir), archive.stdout.strip(), IMAGE],
                   check=True)
    print(f"image built and loaded in {time.monotonic() - t0:.0f}s")
    overlay = real.dir / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [os.path.relpath(ROOT / "manifests", overlay)],
        "images": [{"name": "ghcr.io/polsched/polsched", "newName": "local/polsched",
                    "newTag": VERSION}],
    }))
    p = real.kubectl("apply", "-k", str(overlay), check=False)
    print(p.stdout, p.stderr)
    assert p.returncode == 0
    rollout = real.kubectl("-n", NS, "rollout", "status", "deploy/polsched-operator",
                           "--timeout=240s", check=False, timeout=260)
    if rollout.returncode != 0:
        for pod in real.get("pods", "-n", NS)["items"]:
            print(json.dumps(pod.get("status"), indent=1), real.container_logs(pod))
        print(real.kubectl("get", "events", "-A", check=False).stdout)
    assert rollout.returncode == 0, rollout.stderr
    yield real


def operator_pod(c: RealCluster) -> dict[str, Any]:
    pods = c.get("pods", "-n", NS, "-l", "app.kubernetes.io/name=polsched-operator")["items"]
    assert len(pods) == 1, [p["metadata"]["name"] for p in pods]
    return pods[0]  # type: ignore[no-any-return]


def test_operator_pod_runs_ready_on_the_real_node(installed: RealCluster) -> None:
    c = installed
    pod = operator_pod(c)
    print(c.container_logs(pod)[-3000:])
    assert pod["spec"]["nodeName"] == NODE
    assert pod["spec"]["serviceAccountName"] == "polsched-operator"
    assert pod["status"]["phase"] == "Running"
    conds = {x["type"]: x["status"] for x in pod["status"]["conditions"]}
    assert conds["Ready"] == "True"  # the readiness probe (/readyz) passed
    (cs,) = pod["status"]["containerStatuses"]
    assert cs["ready"] and "running" in cs["state"]
    assert cs["image"] == f"docker.io/{IMAGE}"
    assert cs["restartCount"] == 0  # the liveness probe never failed
    deploy = c.get("deploy", "polsched-operator", "-n", NS)
    available = {x["type"]: x["status"] for x in deploy["status"]["conditions"]}
    assert available["Available"] == "True"
    # It runs as uid 10001 on a read-only root: what the image and the Deployment say.
    ctx = pod["spec"]["containers"][0]["securityContext"]
    assert ctx["readOnlyRootFilesystem"] is True
    assert pod["spec"]["securityContext"]["runAsUser"] == 10001
    # It leads through its Lease (identity: its pod's hostname, the pod name).
    holder = wait_for(lambda: c.kubectl("get", "lease", "polsched-operator", "-n", NS, "-o",
                                        "jsonpath={.spec.holderIdentity}",
                                        check=False).stdout, 30, "the Lease held")
    assert holder.startswith(pod["metadata"]["name"]), holder


def test_webhook_in_cluster_refuses_a_bad_policy(installed: RealCluster) -> None:
    c = installed

    def configured() -> dict[str, Any] | None:
        vwc = c.get("validatingwebhookconfiguration", "polsched.io")
        hook = vwc["webhooks"][0]
        return hook if hook["clientConfig"].get("caBundle") else None

    hook = wait_for(configured, 60, "the caBundle injected")
    assert hook["failurePolicy"] == "Fail"
    assert hook["clientConfig"]["service"]["name"] == "polsched-webhook"
    secret = c.get("secret", "polsched-webhook-tls", "-n", NS)
    assert secret["data"]["ca.crt"] == hook["clientConfig"]["caBundle"]
    bad = yaml.safe_load((ROOT / "policies" / "bin-packing.yaml").read_text())
    bad["metadata"]["name"] = unique("bad")
    bad["spec"]["scorers"][0]["args"]["scoringStrategy"]["type"] = "Packed"
    p = c.apply(bad, check=False)
    print("kubectl apply of a malformed policy:", p.stderr.strip())
    assert p.returncode != 0
    assert "denied the request" in p.stderr
    assert "spec.scorers[0].args.scoringStrategy.type" in p.stderr


def test_three_pods_run_on_the_real_node(installed: RealCluster) -> None:
    c = installed
    policy = yaml.safe_load((ROOT / "policies" / "bin-packing.yaml").read_text())
    name = policy["metadata"]["name"]
    c.apply(policy)
    wait_for(lambda: c.kubectl("wait", "--for=condition=Ready", f"spol/{name}",
                               "--timeout=30s", check=False).returncode == 0, 60,
             f"SchedulingPolicy {name} Ready")
    ns = unique("apps")
    c.kubectl("create", "namespace", ns)
    wait_for(lambda: c.kubectl("get", "sa", "default", "-n", ns, check=False).returncode == 0,
             30, "the namespace's default ServiceAccount")
    for i in range(3):
        c.apply(make_pod().typed().name(f"app-{i}").namespace(ns)
                .scheduler(policy["spec"]["schedulerName"]).zero_termination_grace_period()
                .spec(automountServiceAccountToken=False)
                .container("app", image=TEST_IMAGE, requests={"cpu": "10m", "memory": "8Mi"},
                           command=["sleep", "3600"]).obj())

    def running() -> list[dict[str, Any]] | None:
        pods = c.get("pods", "-n", ns)["items"]
        ok = [p for p in pods if p["status"].get("phase") == "Running"
              and all("running" in s["state"] for s in p["status"].get("containerStatuses", []))
              and p["status"].get("containerStatuses")]
        return pods if len(ok) == 3 else None

    pods = wait_for(running, 120, "3 pods Running with their containers started", interval=1)
    for p in pods:
        assert p["spec"]["nodeName"] == NODE
        assert p["status"]["podIP"].startswith("10.88.")
    events = c.get("events", "-n", ns)["items"]
    assert len([e for e in events if e["reason"] == "Scheduled"]) == 3
    # bindsTotal is persisted once its binds' second has settled (controller/policies/ledger.py),
    # a few seconds after boundPods, which is derived from the cluster.
    status = wait_for(lambda: (s := c.get("spol", name).get("status", {}))
                      .get("boundPods") == 3 and s.get("bindsTotal", 0) >= 3 and s, 60,
                      "status.boundPods == 3 and status.bindsTotal >= 3")
    print("status:", json.dumps(status, indent=1))
    assert health(c.get("spol", name))[0] == "Healthy"
    c.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def test_dedicated_scheduler_runs_the_same_image(installed: RealCluster) -> None:
    c = installed
    policy = yaml.safe_load((ROOT / "policies" / "bin-packing.yaml").read_text())
    name = unique("dedicated")
    policy["metadata"]["name"] = name
    policy["spec"]["schedulerName"] = name
    policy["spec"]["runtime"] = {"mode": "Dedicated", "replicas": 1}
    c.apply(policy)
    rollout = wait_for(lambda: c.kubectl("-n", NS, "rollout", "status",
                                         f"deploy/polsched-dedicated-{name}",
                                         "--timeout=10s", check=False).returncode == 0, 180,
                       f"the Dedicated Deployment polsched-dedicated-{name} Available", interval=1)
    assert rollout
    deploy = c.get("deploy", f"polsched-dedicated-{name}", "-n", NS)
    assert deploy["spec"]["template"]["spec"]["containers"][0]["image"] == \
        operator_pod(c)["spec"]["containers"][0]["image"]
    wait_for(lambda: c.kubectl("wait", "--for=condition=Ready", f"spol/{name}",
                               "--timeout=20s", check=False).returncode == 0, 60,
             f"Dedicated SchedulingPolicy {name} Ready")
