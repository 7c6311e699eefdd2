"""The Helm chart as a platform team uses it, on a control plane with one real node:
`helm install` of charts/polsched with polsched's image built here, policies applied
through the webhook and bound by the operator, `helm upgrade` to a chart whose CRD gains a
field (the API server serves the field afterwards: the CRD is a template, not in Helm's
never-upgraded crds/), and `helm uninstall`, after which the CRD and the policies are
still there (helm.sh/resource-policy: keep).

Root only, like test_real_node.py; `make test-install` builds helm (hack/helm.sh) first."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.conftest import HACK, ROOT
from tests.e2e.operators import wait_for
from tests.install.test_real_node import IMAGE, NS, VERSION, RealCluster

pytestmark = [pytest.mark.install, pytest.mark.timeout(1800)]

CRD = "schedulingpolicies.polsched.io"
# The field the upgraded chart's CRD adds to spec.
NEW_FIELD = "upgradeProbe"


class HelmCluster(RealCluster):
    def __init__(self, directory: Path, helm_binary: str) -> None:
        super().__init__(directory)
        self.helm_binary = helm_binary

    def helm(self, *args: str, timeout: float = 360) -> subprocess.CompletedProcess[str]:
        p = subprocess.run([self.helm_binary, "--kubeconfig", self.kubeconfig, "-n", NS,
                            *args], capture_output=True, text=True, timeout=timeout)
        print(f"helm {' '.join(args)}:", p.stdout[-3000:], p.stderr[-3000:])
        return p


@pytest.fixture(scope="module")
def cluster() -> Iterator[HelmCluster]:
    if os.geteuid() != 0:
        pytest.fail("the install test needs root (containerd, runc, the bridge): "
                    "run `make test-install` as root, as CI does")
    helm = subprocess.run([str(HACK / "helm.sh")], capture_output=True, text=True)
    assert helm.returncode == 0, f"hack/helm.sh (make helm): {helm.stderr}"
    with tempfile.TemporaryDirectory(prefix="polsched-helm-") as d:
        env = {**os.environ, "POLSCHED_REAL_NODE": "1"}
        up = subprocess.run([str(HACK / "cluster.sh"), "up", d], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        print(up.stdout)
        try:
            assert up.returncode == 0, "the control plane with a real node did not start"
            c = HelmCluster(Path(d), helm.stdout.strip())
            archive = subprocess.run([str(HACK / "image.sh"), "build",
                                      str(c.dir / "polsched.tar")], capture_output=True,
                                     text=True)
            print(archive.stderr)
            assert archive.returncode == 0, "make image failed"
            subprocess.run([str(HACK / "node.sh"), "load", d, archive.stdout.strip(), IMAGE],
                           check=True)
            yield c
        finally:
            subprocess.run([str(HACK / "cluster.sh"), "down", d], capture_output=True)


def image_values() -> list[str]:
    return ["--set", "image.repository=local/polsched", "--set", f"image.tag={VERSION}"]


def dump_on_failure(c: HelmCluster) -> None:
    for pod in c.get("pods", "-n", NS)["items"]:
        print(json.dumps(pod.get("status"), indent=1), c.container_logs(pod))
    print(c.kubectl("get", "events", "-A", check=False).stdout)


@pytest.fixture(scope="module")
def installed(cluster: HelmCluster) -> HelmCluster:
    c = cluster
    # Helm keeps its release in the namespace: made first, with the Pod Security label
    # that `polsched render operator`'s Namespace carries (charts/polsched/README.md).
    c.kubectl("create", "namespace", NS)
    c.kubectl("label", "namespace", NS, "pod-security.kubernetes.io/enforce=restricted")
    p = c.helm("install", "polsched", str(ROOT / "charts" / "polsched"), *image_values(),
               "--wait", "--timeout", "5m")
    if p.returncode != 0:
        dump_on_failure(c)
    assert p.returncode == 0
    return c


def policy_ready(c: HelmCluster, name: str) -> None:
    wait_for(lambda: c.kubectl("wait", "--for=condition=Ready", f"spol/{name}",
                               "--timeout=20s", check=False).returncode == 0, 90,
             f"SchedulingPolicy {name} Ready")


def test_helm_install_runs_the_operator_and_its_webhook(installed: HelmCluster) -> None:
    c = installed
    deploy = c.get("deploy", "polsched-operator", "-n", NS)
    assert deploy["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
    available = {x["type"]: x["status"] for x in deploy["status"]["conditions"]}
    assert available["Available"] == "True"
    crd = c.get("crd", CRD)
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    policy = yaml.safe_load((ROOT / "policies" / "bin-packing.yaml").read_text())
    # Applied through the webhook (failurePolicy Fail): the operator serves it.
    p = wait_for(lambda: (r := c.apply(policy, check=False)).returncode == 0 and r, 90,
                 "the policy admitted by the webhook", interval=1)
    assert p
    policy_ready(c, policy["metadata"]["name"])


def upgraded_chart(directory: Path) -> Path:
    """charts/polsched with its links resolved, and a CRD whose spec has one more field."""
    chart = directory / "polsched-next"
    shutil.copytree(ROOT / "charts" / "polsched", chart, symlinks=False)
    crd_file = chart / "files" / "schedulingpolicy.yaml"
    crd = yaml.safe_load(crd_file.read_text())
    (version,) = crd["spec"]["versions"]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert NEW_FIELD not in spec["properties"]
    spec["properties"][NEW_FIELD] = {"type": "string",
                                     "description": "added by the upgraded chart"}
    crd_file.write_text(yaml.safe_dump(crd, sort_keys=False))
    meta = yaml.safe_load((chart / "Chart.yaml").read_text())
    meta["version"] = meta["version"] + "-next"
    (chart / "Chart.yaml").write_text(yaml.safe_dump(meta, sort_keys=False))
    return chart


def test_helm_upgrade_serves_the_field_the_new_crd_adds(installed: HelmCluster) -> None:
    c = installed
    chart = upgraded_chart(c.dir)
    p = c.helm("upgrade", "polsched", str(chart), *image_values(), "--wait", "--timeout", "5m")
    assert p.returncode == 0
    crd = c.get("crd", CRD)
    (version,) = crd["spec"]["versions"]
    assert NEW_FIELD in version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]

    # Served: the API server publishes it in its OpenAPI (what kubectl explain reads) once
    # the CRD is Established again.
    def explained() -> str | None:
        r = c.kubectl("explain", f"schedulingpolicies.spec.{NEW_FIELD}",
                      "--api-version=polsched.io/v1alpha1", check=False)
        return r.stdout if r.returncode == 0 else None

    assert "added by the upgraded chart" in wait_for(explained, 60,
                                                     f"spec.{NEW_FIELD} in the OpenAPI",
                                                     interval=1)
    # The policy applied before the upgrade is still served and Ready.
    policy_ready(c, "bin-packing")


def test_helm_uninstall_keeps_the_crd_and_the_policies(installed: HelmCluster) -> None:
    c = installed
    p = c.helm("uninstall", "polsched", "--wait", "--timeout", "3m")
    assert p.returncode == 0
    wait_for(lambda: c.kubectl("get", "deploy", "polsched-operator", "-n", NS,
                               check=False).returncode != 0, 120,
             "the operator's Deployment deleted", interval=1)
    gone = c.kubectl("get", "validatingwebhookconfiguration", "polsched.io", check=False)
    assert gone.returncode != 0
    # Kept: the CRD (resource-policy keep) and so every SchedulingPolicy in it.
    assert c.get("crd", CRD)["metadata"]["name"] == CRD
    names = [p["metadata"]["name"] for p in c.get("spol")["items"]]
    assert "bin-packing" in names
    # Nothing of the release is left in Helm's record.
    assert c.helm("status", "polsched").returncode != 0
