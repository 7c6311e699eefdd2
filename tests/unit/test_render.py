"""`polsched render`: the install from the templates, equal to what `kubectl apply -k
manifests/` installs, and a Dedicated policy's objects from the operator's renderer."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from polsched.api.tenancy import parse_tenancy
from polsched.commands import render
from polsched.controller.process.options import DEDICATED_LEASE_NAMESPACE
from polsched.controller.process.server import read_tenancy

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def test_committed_operator_yaml_is_the_rendered_template() -> None:
    committed = [d for d in yaml.safe_load_all((ROOT / "manifests/operator.yaml").read_text())
                 if d]
    assert committed == render.operator_templated(), (
        "manifests/operator.yaml is stale: regenerate it with "
        "`polsched render operator --no-crd --no-rbac` (see its header)")


def test_operator_install_has_every_piece_and_the_deployment_is_hardened() -> None:
    objs = render.operator_install()
    kinds = {(o["kind"], o["metadata"]["name"]) for o in objs}
    for want in [("Namespace", "polsched-system"),
                 ("CustomResourceDefinition", "schedulingpolicies.polsched.io"),
                 ("ServiceAccount", "polsched-operator"), ("ClusterRole", "polsched-operator"),
                 ("Deployment", "polsched-operator"),
                 ("ValidatingWebhookConfiguration", "polsched.io"),
                 ("Service", "polsched-webhook")]:
        assert want in kinds
    # /metrics is unauthenticated: on the pod's loopback only, so no Service for it.
    assert ("Service", "polsched-metrics") not in kinds
    dep = next(o for o in objs if o["kind"] == "Deployment")
    pod = dep["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    c = pod["containers"][0]
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    # Probes reach a port of their own on the pod's IP; metrics stay on loopback.
    args = c["args"]
    assert args[args.index("--metrics-listen") + 1] == f"127.0.0.1:{render.METRICS_PORT}"
    assert args[args.index("--health-listen") + 1] == f"0.0.0.0:{render.HEALTH_PORT}"
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"health": render.HEALTH_PORT, "webhook": render.WEBHOOK_PORT}
    assert c["livenessProbe"]["httpGet"]["port"] == "health"
    assert c["readinessProbe"]["httpGet"]["port"] == "health"
    assert c["resources"]["requests"]


def test_namespace_is_moved_everywhere() -> None:
    objs = render.operator_install(namespace="sched")
    # Dedicated schedulers' Leases stay in their own namespace (--lease-namespace).
    assert all(o["metadata"].get("namespace") in (None, "sched", DEDICATED_LEASE_NAMESPACE)
               for o in objs)
    assert ("Namespace", "sched") in {(o["kind"], o["metadata"]["name"]) for o in objs}
    for o in objs:
        for s in o.get("subjects") or ():
            assert s["namespace"] == "sched"


def test_kustomize_renders_the_same_objects() -> None:
    out = subprocess.run(["kubectl", "kustomize", str(ROOT / "manifests")], check=True,
                         capture_output=True, text=True).stdout
    kustomized = {(d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all(out) if d}
    rendered = {(o["kind"], o["metadata"]["name"]) for o in render.operator_install()}
    assert kustomized == rendered


def test_dedicated_uses_the_operators_templates() -> None:
    policy = {"apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
              "metadata": {"name": "big"},
              "spec": {"runtime": {"mode": "Dedicated", "replicas": 2}}}
    objs = render.dedicated(policy, image="example/polsched:1")
    dep = next(o for o in objs if o["kind"] == "Deployment")
    assert dep["metadata"]["name"] == "polsched-dedicated-big"
    assert dep["spec"]["replicas"] == 2
    assert dep["spec"]["template"]["spec"]["containers"][0]["args"] == [
        "scheduler", "--policy", "big", "--leader-elect=true",
        "--health-listen", "0.0.0.0:8081"]
    # never applied: no uid, so no ownerReference the API server would refuse
    assert all("ownerReferences" not in o["metadata"] for o in objs)


def test_the_namespace_enforces_the_restricted_pod_security_profile() -> None:
    for ns in (o for o in render.operator_install(namespace="sched") if o["kind"] == "Namespace"):
        assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def test_no_cluster_role_writes_identities_workloads_bindings_or_reads_secrets() -> None:
    """Cluster-wide, the roles stay within what system:kube-scheduler and
    system:volume-scheduler may do (the e2e test_rbac asks the API server the same)."""
    cluster_wide_writes = {"create", "update", "patch", "delete", "deletecollection", "*",
                           "escalate", "bind", "impersonate"}
    for role in (o for o in render.rbac() if o["kind"] == "ClusterRole"):
        for rule in role["rules"]:
            verbs = set(rule["verbs"])
            resources = set(rule["resources"])
            assert "*" not in resources and "*" not in rule.get("apiGroups", ())
            assert not resources & {"secrets", "serviceaccounts", "serviceaccounts/token",
                                    "deployments", "roles", "rolebindings", "clusterroles",
                                    "clusterrolebindings"}, (role["metadata"]["name"], rule)
            if resources & {"validatingwebhookconfigurations",
                            "mutatingwebhookconfigurations"}:
                assert rule["resourceNames"] == ["polsched.io"]
                # watch by name: a re-created configuration gets its caBundle back.
                assert verbs <= {"get", "patch", "watch"}
                continue
            writes = verbs & cluster_wide_writes
            # Pod deletion is preemption, as kube-scheduler's role; ResourceClaims and their
            # status and binding are written by DynamicResources' PreBind, as kube-scheduler's;
            # a PodGroup's status gets PodGroupInitiallyScheduled, as kube-scheduler's.
            assert resources <= {"pods", "pods/status", "pods/binding", "pods/finalizers",
                                 "events",
                                 "persistentvolumes", "persistentvolumeclaims",
                                 "schedulingpolicies", "schedulingpolicies/status",
                                 "resourceclaims", "resourceclaims/status",
                                 "resourceclaims/binding", "podgroups/status",
                                 "subjectaccessreviews"} \
                or not writes, (role["metadata"]["name"], rule)


TENANCY = {"schedulerNames": [{"names": ["team-a-*"], "groups": ["team-a"],
                               "users": ["system:serviceaccount:argocd:app<&>"]}],
           "allowDisabling": ["NodeUnschedulable"], "nameGraceSeconds": 60,
           "dedicated": {"maxPolicies": 3, "maxReplicas": 2,
                         "maxResources": {"cpu": "2", "memory": "4Gi"}}}


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(Path(sys.executable).parent / "polsched"), "render",
                           "operator", *args], capture_output=True, text=True)


def test_the_tenancy_config_is_a_configmap_the_operator_reads(tmp_path: Path) -> None:
    """--tenancy-config: the file as a ConfigMap mounted where --tenancy-config points, and
    what the operator reads there is the admin's configuration."""
    f = tmp_path / "tenancy.yaml"
    f.write_text(yaml.safe_dump({"apiVersion": "polsched.io/v1alpha1",
                                 "kind": "SchedulingTenancy", **TENANCY}))
    p = _cli("--tenancy-config", str(f), "--no-crd", "--no-rbac")
    assert p.returncode == 0, p.stderr
    objs = [d for d in yaml.safe_load_all(p.stdout) if d]
    (cm,) = [o for o in objs if o["kind"] == "ConfigMap"]
    assert cm["metadata"] == {"name": "polsched-tenancy", "namespace": "polsched-system",
                              "labels": cm["metadata"]["labels"]}
    pod = next(o for o in objs if o["kind"] == "Deployment")["spec"]["template"]["spec"]
    c = pod["containers"][0]
    path = Path(c["args"][c["args"].index("--tenancy-config") + 1])
    (mount,) = [m for m in c["volumeMounts"] if m["mountPath"] == str(path.parent)]
    assert mount["readOnly"] is True
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["configMap"]["name"] == "polsched-tenancy"
    read = read_tenancy(str(write(tmp_path / path.name, cm["data"][path.name])))
    assert read == parse_tenancy(TENANCY)
    assert read.name_grants[0].users == {"system:serviceaccount:argocd:app<&>"}
    # Without the flag, nothing of it.
    plain = render.operator_templated()
    assert not [o for o in plain if o["kind"] == "ConfigMap"]
    assert "--tenancy-config" not in plain[0]["spec"]["template"]["spec"]["containers"][0][
        "args"]


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_a_bad_tenancy_config_is_refused_naming_the_field(tmp_path: Path) -> None:
    f = write(tmp_path / "t.yaml", yaml.safe_dump({"dedicated": {"maxPolicies": -1}}))
    p = _cli("--tenancy-config", str(f))
    assert p.returncode == 1 and "tenancy.dedicated.maxPolicies" in p.stderr, p.stderr
    assert not p.stdout


def test_the_network_policy_lets_only_the_api_server_reach_the_webhook() -> None:
    objs = render.operator_templated(options=render.InstallOptions(
        allow_from=("10.0.0.0/24", "fd00::/64")))
    (np,) = [o for o in objs if o["kind"] == "NetworkPolicy"]
    dep = next(o for o in objs if o["kind"] == "Deployment")
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    assert np["metadata"]["namespace"] == dep["metadata"]["namespace"]
    assert np["spec"]["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert np["spec"]["policyTypes"] == ["Ingress"]
    ports = {p["name"]: p["containerPort"]
             for p in dep["spec"]["template"]["spec"]["containers"][0]["ports"]}
    rules = {r["ports"][0]["port"]: r.get("from") for r in np["spec"]["ingress"]}
    assert set(rules) <= set(ports)
    # The webhook from the API server's networks only; the health port (kubelet) open.
    assert rules == {"webhook": [{"ipBlock": {"cidr": "10.0.0.0/24"}},
                                 {"ipBlock": {"cidr": "fd00::/64"}}],
                     "health": None}
    assert not [o for o in render.operator_templated() if o["kind"] == "NetworkPolicy"]


def test_a_bad_webhook_network_is_refused() -> None:
    p = _cli("--webhook-allow-from", "10.0.0.1/8")
    assert p.returncode == 1 and "--webhook-allow-from" in p.stderr and "10.0.0.1/8" in p.stderr
