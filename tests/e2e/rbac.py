"""Credentials for processes under test: a kubeconfig holding a ServiceAccount's token,
so the operator and Dedicated schedulers run with the permissions manifests/rbac grants
them, not as the admin."""

from __future__ import annotations

import atexit
import base64
import json
import shutil
import tempfile
from pathlib import Path

from tests.conftest import ROOT, Cluster

RBAC_DIR = ROOT / "manifests" / "rbac"
OPERATOR_NAMESPACE = "polsched-system"
OPERATOR_SA = "polsched-operator"
# Every Dedicated scheduler's identity, made at install time (manifests/rbac/dedicated.yaml).
DEDICATED_SA = "polsched-scheduler"
WEBHOOK_CONFIGURATION = "polsched.io"


def install_rbac(cluster: Cluster) -> None:
    """manifests/rbac/*.yaml (namespace polsched-system, the operator's ServiceAccount,
    ClusterRoles and bindings), idempotently."""
    from polsched.commands.render import RBAC_FILES

    assert set(RBAC_FILES) == {f.name for f in RBAC_DIR.glob("*.yaml")}
    for name in RBAC_FILES:  # in order: operator.yaml makes the namespace
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f",
                        str(RBAC_DIR / name))


def install_webhook_configuration(cluster: Cluster) -> None:
    """The ValidatingWebhookConfiguration polsched.io, as the install ships it
    (manifests/operator.yaml): the operator's role may patch it but not create it. Made
    empty if missing; an existing one is left as it is."""
    p = cluster.kubectl("get", "validatingwebhookconfiguration", WEBHOOK_CONFIGURATION,
                        check=False)
    if p.returncode != 0:
        cluster.kubectl("create", "-f", "-", check=False, input=json.dumps({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": WEBHOOK_CONFIGURATION}, "webhooks": []}))


def service_account_kubeconfig(cluster: Cluster, namespace: str, name: str, path: Path,
                               duration: str = "2h") -> Path:
    """Write a kubeconfig at `path` that authenticates as ServiceAccount namespace/name
    with a bound token (kubectl create token) against the cluster's API server."""
    token = cluster.kubectl("create", "token", name, "-n", namespace,
                            f"--duration={duration}").stdout.strip()
    admin = cluster.kubectl_json("config", "view", "--raw", "--minify")
    server = admin["clusters"][0]["cluster"]["server"]
    ca = admin["clusters"][0]["cluster"].get("certificate-authority-data")
    if ca is None:
        ca = base64.b64encode(
            Path(admin["clusters"][0]["cluster"]["certificate-authority"]).read_bytes()).decode()
    config = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server,
                                               "certificate-authority-data": ca}}],
        "users": [{"name": f"{namespace}-{name}", "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "c", "user": f"{namespace}-{name}"}}],
        "current-context": "sa",
    }
    path.write_text(json.dumps(config))
    return path


_OPERATOR_KUBECONFIGS: dict[str, Path] = {}


def operator_kubeconfig(cluster: Cluster) -> Path:
    """A kubeconfig of the operator's ServiceAccount under the shipped RBAC (installed
    on first use), one per cluster: what an engine under test runs as, so that a grant
    the operator lacks fails the test as it would fail in a cluster (issue 26, finding 3:
    preemption's pod delete went unnoticed under the admin kubeconfig)."""
    path = _OPERATOR_KUBECONFIGS.get(cluster.kubeconfig)
    if path is None:
        install_rbac(cluster)
        directory = tempfile.mkdtemp(prefix="polsched-sa-")
        atexit.register(shutil.rmtree, directory, ignore_errors=True)  # a token
        path = Path(directory) / "operator.kubeconfig"
        service_account_kubeconfig(cluster, OPERATOR_NAMESPACE, OPERATOR_SA, path)
        _OPERATOR_KUBECONFIGS[cluster.kubeconfig] = path
    return path
