"""Credentials for processes under test: a kubeconfig holding a ServiceAccount's token,
so the operator and Dedicated schedulers run with the permissions manifests/rbac grants
them, not as the admin."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from tests.conftest import ROOT, Cluster

RBAC_DIR = ROOT / "manifests" / "rbac"
OPERATOR_NAMESPACE = "polsched-system"
OPERATOR_SA = "polsched-operator"


def install_rbac(cluster: Cluster) -> None:
    """manifests/rbac/*.yaml (namespace polsched-system, the operator's ServiceAccount,
    ClusterRoles and bindings), idempotently."""
    for f in sorted(RBAC_DIR.glob("*.yaml")):
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(f))


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
