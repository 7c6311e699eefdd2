"""`kubectl apply -k manifests/`: the install renders with kustomize and every object is
accepted by the API server (server-side dry run: schema, admission, RBAC references)."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from tests.conftest import ROOT, Cluster

pytestmark = pytest.mark.e2e


def test_kustomize_renders_and_applies_with_server_dry_run(cluster: Cluster) -> None:
    out = subprocess.run(["kubectl", "kustomize", str(ROOT / "manifests")], check=True,
                         capture_output=True, text=True).stdout
    kinds = {d["kind"] for d in yaml.safe_load_all(out) if d}
    assert {"Namespace", "CustomResourceDefinition", "ClusterRole", "Deployment",
            "ValidatingWebhookConfiguration", "Service"} <= kinds
    # The namespace must exist for the dry run of namespaced objects: create it for real
    # (idempotent), then dry-run everything.
    cluster.kubectl("create", "namespace", "polsched-system", check=False)
    p = cluster.kubectl("apply", "--dry-run=server", "--server-side", "--force-conflicts",
                        "-k", str(ROOT / "manifests"))
    for kind in ("deployment.apps/polsched-operator", "service/polsched-webhook",
                 "validatingwebhookconfiguration.admissionregistration.k8s.io/polsched.io"):
        assert kind in p.stdout
