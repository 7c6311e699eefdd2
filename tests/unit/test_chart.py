"""The Helm chart (charts/polsched) against `polsched render operator`: one install, two
front ends. `helm template` is run with the real helm that hack/helm.sh builds from Go
modules (the Makefile builds it before the tests, with its progress shown), and its
objects are compared one by one with render's, for the defaults and for non-default
settings: a drift in either front end fails here."""

from __future__ import annotations

import argparse
import copy
import json
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

import polsched
from polsched.commands import cli
from polsched.controller.webhook import rotator
from polsched.controller.webhook import server as webhook_server

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "polsched"
# Labels and annotations the chart adds on top of render's objects, and nothing else.
HELM_LABELS = {"helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance",
               "app.kubernetes.io/version"}
KEEP = "helm.sh/resource-policy"

Obj = dict[str, Any]


@pytest.fixture(scope="module")
def helm() -> str:
    p = subprocess.run([str(ROOT / "hack" / "helm.sh")], capture_output=True, text=True)
    assert p.returncode == 0, f"hack/helm.sh failed (run `make helm` first):\n{p.stderr}"
    return p.stdout.strip()


def helm_template(helm: str, *args: str, namespace: str = "polsched-system") -> list[Obj]:
    p = subprocess.run([helm, "template", "polsched", str(CHART), "--namespace", namespace,
                        *args], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return [d for d in yaml.safe_load_all(p.stdout) if d]


def render_operator(*args: str) -> list[Obj]:
    # The installed command, wherever its module lives.
    p = subprocess.run([str(Path(sys.executable).parent / "polsched"), "render", "operator", *args],
                       capture_output=True, text=True, check=True)
    return [d for d in yaml.safe_load_all(p.stdout) if d]


def key(o: Obj) -> tuple[str, str, str, str]:
    m = o["metadata"]
    return (o["apiVersion"], o["kind"], m.get("namespace", ""), m["name"])


def without_helm(o: Obj) -> Obj:
    """The object less what Helm adds: its labels (on the object and the pod template)
    and the CRD's resource-policy annotation, which the test checks apart."""
    o = copy.deepcopy(o)
    metas = [o["metadata"]]
    if o["kind"] == "Deployment":
        metas.append(o["spec"]["template"]["metadata"])
    for m in metas:
        for field, drop in (("labels", HELM_LABELS), ("annotations", {KEEP})):
            kept = {k: v for k, v in (m.get(field) or {}).items() if k not in drop}
            if kept:
                m[field] = kept
            else:
                m.pop(field, None)
    return o


def by_key(objs: list[Obj]) -> dict[tuple[str, str, str, str], Obj]:
    out = {key(o): o for o in objs}
    assert len(out) == len(objs), "two objects with one name"
    return out


def assert_same_install(chart: list[Obj], rendered: list[Obj],
                        namespace: str = "polsched-system") -> None:
    """Object by object: the chart's are render's, except render's Namespace of the
    operator (Helm's release lives in the namespace, so it exists before the chart
    installs; polsched-leases, the Dedicated schedulers', is the chart's too)."""
    want = by_key([o for o in rendered
                   if o["kind"] != "Namespace" or o["metadata"]["name"] != namespace])
    got = by_key([without_helm(o) for o in chart])
    assert sorted(got) == sorted(want), "the chart and render install different objects"
    for k, o in want.items():
        assert got[k] == o, f"{k}: the chart's object differs from render's"


def test_default_values_install_what_render_operator_prints(helm: str) -> None:
    assert_same_install(helm_template(helm), render_operator())


def test_namespace_and_image_move_in_both_front_ends_alike(helm: str) -> None:
    chart = helm_template(helm, "--set", "image.repository=registry.example/team/polsched",
                          "--set", "image.tag=9.8.7", namespace="sched")
    assert_same_install(chart, render_operator("--namespace", "sched", "--image",
                                               "registry.example/team/polsched:9.8.7"),
                        namespace="sched")


def test_every_object_carries_helms_labels(helm: str) -> None:
    for o in helm_template(helm):
        labels = o["metadata"].get("labels") or {}
        assert HELM_LABELS <= set(labels), key(o)
        assert labels["app.kubernetes.io/managed-by"] == "Helm"


def test_the_crd_is_a_template_kept_on_uninstall(helm: str) -> None:
    """crds/ is installed once and never upgraded by Helm: the CRD is a template, so a new
    field is served after `helm upgrade`, and `keep` leaves it (and every policy) on
    uninstall."""
    assert not (CHART / "crds").exists()
    (crd,) = [o for o in helm_template(helm) if o["kind"] == "CustomResourceDefinition"]
    assert crd["metadata"]["annotations"][KEEP] == "keep"
    assert not [o for o in helm_template(helm, "--set", "crd.install=false")
                if o["kind"] == "CustomResourceDefinition"]


def deployment(objs: list[Obj]) -> Obj:
    (dep,) = [o for o in objs if o["kind"] == "Deployment"]
    return dep


def test_scheduling_constraints_replicas_and_resources_change_only_themselves(
        helm: str, tmp_path: Path) -> None:
    values = {
        "replicas": 2,
        "nodeSelector": {"node-role.kubernetes.io/control-plane": ""},
        "tolerations": [{"key": "node-role.kubernetes.io/control-plane",
                         "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "podAffinityTerm": {
                "topologyKey": "kubernetes.io/hostname",
                "labelSelector": {"matchLabels": {
                    "app.kubernetes.io/name": "polsched-operator"}}}}]}},
        "priorityClassName": "system-cluster-critical",
        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "2Gi"}},
        "image": {"pullPolicy": "Always"},
        "imagePullSecrets": [{"name": "regcred"}],
    }
    f = tmp_path / "values.yaml"
    f.write_text(yaml.safe_dump(values))
    default, changed = deployment(helm_template(helm)), deployment(helm_template(helm, "-f",
                                                                                 str(f)))
    assert changed["spec"]["replicas"] == 2
    pod = changed["spec"]["template"]["spec"]
    for field in ("nodeSelector", "tolerations", "affinity", "priorityClassName",
                  "imagePullSecrets"):
        assert pod[field] == values[field], field
    assert pod["containers"][0]["resources"] == values["resources"]
    assert pod["containers"][0]["imagePullPolicy"] == "Always"
    # Nothing else moved.
    expect = copy.deepcopy(default)
    expect["spec"]["replicas"] = 2
    epod = expect["spec"]["template"]["spec"]
    for field in ("nodeSelector", "tolerations", "affinity", "priorityClassName",
                  "imagePullSecrets"):
        epod[field] = values[field]
    epod["containers"][0]["resources"] = values["resources"]
    epod["containers"][0]["imagePullPolicy"] = "Always"
    assert changed == expect


def test_pod_disruption_budget_is_opt_in(helm: str) -> None:
    assert not [o for o in helm_template(helm) if o["kind"] == "PodDisruptionBudget"]
    (pdb,) = [o for o in helm_template(helm, "--set", "podDisruptionBudget.enabled=true")
              if o["kind"] == "PodDisruptionBudget"]
    assert pdb["spec"] == {"selector": {"matchLabels": {
        "app.kubernetes.io/name": "polsched-operator"}}, "maxUnavailable": 1}
    p = subprocess.run([helm, "template", str(CHART), "--set",
                        "podDisruptionBudget.enabled=true,podDisruptionBudget.minAvailable=1"],
                       capture_output=True, text=True)
    assert p.returncode != 0 and "exactly one of minAvailable and maxUnavailable" in p.stderr


def test_metrics_stay_on_loopback_unless_exposed_and_the_service_monitor_scrapes_them(
        helm: str) -> None:
    objs = helm_template(helm)
    args = deployment(objs)["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--metrics-listen") + 1] == "127.0.0.1:8080"
    assert not [o for o in objs if o["kind"] == "ServiceMonitor"
                or o["metadata"]["name"] == "polsched-metrics"]

    objs = helm_template(helm, "--set", "metrics.service.enabled=true",
                         "--set", "metrics.serviceMonitor.enabled=true",
                         "--set", "metrics.serviceMonitor.labels.release=prom")
    c = deployment(objs)["spec"]["template"]["spec"]["containers"][0]
    assert c["args"][c["args"].index("--metrics-listen") + 1] == "0.0.0.0:8080"
    assert {"name": "metrics", "containerPort": 8080, "protocol": "TCP"} in c["ports"]
    (svc,) = [o for o in objs if o["metadata"]["name"] == "polsched-metrics"]
    (sm,) = [o for o in objs if o["kind"] == "ServiceMonitor"]
    assert svc["spec"]["ports"][0]["targetPort"] == "metrics"
    # The monitor selects the metrics Service alone (the webhook's has the pod labels too).
    webhook = next(o for o in objs if o["metadata"]["name"] == "polsched-webhook")
    selector = sm["spec"]["selector"]["matchLabels"]
    assert selector.items() <= svc["metadata"]["labels"].items()
    assert not selector.items() <= webhook["metadata"]["labels"].items()
    assert sm["spec"]["endpoints"][0]["port"] == "metrics"
    assert sm["metadata"]["labels"]["release"] == "prom"

    p = subprocess.run([helm, "template", str(CHART), "--set",
                        "metrics.serviceMonitor.enabled=true"], capture_output=True, text=True)
    assert p.returncode != 0 and "needs metrics.service.enabled" in p.stderr


def test_tenancy_reserves_scheduler_names(helm: str) -> None:
    objs = helm_template(helm, "--set", "tenancy.reservedSchedulerNames={volcano,kai}")
    args = deployment(objs)["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--reserved-scheduler-names") + 1] == "volcano,kai"


TEAMS = [{"name": "team-a", "groups": ["team-a"], "schedulerNames": ["team-a-*"]},
         {"name": "gitops", "users": ["system:serviceaccount:argocd:app"],
          "schedulerNames": ["*"]}]


def test_tenancy_teams_grant_their_names_and_may_write_policies(
        helm: str, tmp_path: Path) -> None:
    """Each of tenancy.teams is a grant of its schedulerNames to its groups and users in
    the tenancy configuration (after tenancy.config's, as render installs the same
    configuration written out) and a binding of the ClusterRole that writes policies."""
    from polsched.api.tenancy import parse_tenancy

    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"tenancy": {"config": TENANCY, "teams": TEAMS}}))
    chart = helm_template(helm, "-f", str(values))
    expanded = {**TENANCY, "schedulerNames": TENANCY["schedulerNames"] + [
        {"names": ["team-a-*"], "groups": ["team-a"]},
        {"names": ["*"], "users": ["system:serviceaccount:argocd:app"]}]}
    config = tmp_path / "tenancy.yaml"
    config.write_text(yaml.safe_dump({"apiVersion": "polsched.io/v1alpha1",
                                      "kind": "SchedulingTenancy", **expanded}))
    rendered = by_key(render_operator("--tenancy-config", str(config)))
    got = by_key([without_helm(o) for o in chart])
    for kind, name in (("ConfigMap", "polsched-tenancy"), ("Deployment", "polsched-operator")):
        (k,) = [k for k in rendered if k[1] == kind and k[3] == name]
        assert got[k] == rendered[k], k
    (cm,) = [o for o in chart if o["metadata"]["name"] == "polsched-tenancy"]
    tenancy = parse_tenancy(json.loads(cm["data"]["tenancy.json"]))
    assert not tenancy.claim_refusal("team-a-batch", "alice", ["team-a"])
    assert tenancy.claim_refusal("team-b-batch", "alice", ["team-a"])
    assert not tenancy.claim_refusal("anything", "system:serviceaccount:argocd:app", [])
    assert not tenancy.claim_refusal("team-a-x", "bob", ["team-a"])
    role = [o for o in chart if o["kind"] == "ClusterRole"
            and o["metadata"]["name"] == "polsched-policy-author"]
    assert role and role[0]["rules"] == [{
        "apiGroups": ["polsched.io"], "resources": ["schedulingpolicies"],
        "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]}]
    bindings = {o["metadata"]["name"]: o["subjects"] for o in chart
                if o["kind"] == "ClusterRoleBinding"
                and o["roleRef"]["name"] == "polsched-policy-author"}
    assert bindings == {
        "polsched-policy-author-team-a": [{"apiGroup": "rbac.authorization.k8s.io",
                                           "kind": "Group", "name": "team-a"}],
        "polsched-policy-author-gitops": [{"apiGroup": "rbac.authorization.k8s.io",
                                           "kind": "User",
                                           "name": "system:serviceaccount:argocd:app"}]}
    # Teams alone make a configuration too; no teams, no role.
    only = helm_template(helm, "--set", "tenancy.teams[0].name=a",
                         "--set", "tenancy.teams[0].groups={a}",
                         "--set", "tenancy.teams[0].schedulerNames={a-*}")
    (cm,) = [o for o in only if o["metadata"]["name"] == "polsched-tenancy"]
    assert json.loads(cm["data"]["tenancy.json"])["schedulerNames"] == [
        {"names": ["a-*"], "groups": ["a"]}]
    assert run_args(only).tenancy_config == "/etc/polsched/tenancy/tenancy.json"
    assert not [o for o in helm_template(helm) if "polsched-policy-author" in
                o["metadata"]["name"] or o["metadata"]["name"] == "polsched-tenancy"]


@pytest.mark.parametrize("team, words", [
    ({"groups": ["a"], "schedulerNames": ["a"]}, "tenancy.teams[0].name: required"),
    ({"name": "Team_A", "groups": ["a"], "schedulerNames": ["a"]},
     "tenancy.teams[0].name: \"Team_A\": lowercase"),
    ({"name": "a", "groups": ["a"]}, "tenancy.teams[0].schedulerNames: required"),
    ({"name": "a", "schedulerNames": ["a"]}, "tenancy.teams[0]: groups or users: required"),
])
def test_a_team_the_chart_cannot_install_names_the_field(
        helm: str, tmp_path: Path, team: dict[str, Any], words: str) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"tenancy": {"teams": [team]}}))
    p = subprocess.run([helm, "template", str(CHART), "-f", str(values)],
                       capture_output=True, text=True)
    assert p.returncode != 0 and words in p.stderr, p.stderr
    twice = {"name": "a", "groups": ["a"], "schedulerNames": ["a"]}
    values.write_text(yaml.safe_dump({"tenancy": {"teams": [twice, twice]}}))
    p = subprocess.run([helm, "template", str(CHART), "-f", str(values)],
                       capture_output=True, text=True)
    assert p.returncode != 0 and 'tenancy.teams[1].name: "a" appears twice' in p.stderr


TENANCY: dict[str, Any] = {"schedulerNames": [{"names": ["team-a-*", "batch"], "groups": ["team-a"],
                               "users": ["system:serviceaccount:argocd:app<&>"]}],
           "allowDisabling": ["NodeUnschedulable"], "nameGraceSeconds": 60,
           "dedicated": {"maxPolicies": 3, "maxReplicas": 2,
                         "maxResources": {"cpu": "1500m", "memory": "4Gi"}}}


def test_tenancy_config_and_webhook_network_policy_install_as_render_does(
        helm: str, tmp_path: Path) -> None:
    """tenancy.config and webhook.networkPolicy.apiServerCIDRs are render's
    --tenancy-config and --webhook-allow-from: the same ConfigMap (byte for byte), mount,
    flag and NetworkPolicy."""
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"tenancy": {"config": TENANCY}, "webhook": {
        "networkPolicy": {"apiServerCIDRs": ["10.0.0.0/24", "fd00::/64"]}}}))
    config = tmp_path / "tenancy.yaml"
    config.write_text(yaml.safe_dump({"apiVersion": "polsched.io/v1alpha1",
                                      "kind": "SchedulingTenancy", **TENANCY}))
    chart = helm_template(helm, "-f", str(values))
    assert {o["kind"] for o in chart} >= {"ConfigMap", "NetworkPolicy"}
    assert_same_install(chart, render_operator("--tenancy-config", str(config),
                                               "--webhook-allow-from",
                                               "10.0.0.0/24,fd00::/64"))


def test_webhook_client_auth_installs_as_render_does_and_the_operator_takes_it(
        helm: str, tmp_path: Path) -> None:
    """webhook.clientAuth.caBundle is render's --webhook-client-ca: the same ConfigMap,
    mount and flag, which `polsched run` parses; without it, neither front end adds any."""
    from polsched.controller.webhook.certificates import new_ca

    ca, _ = new_ca()
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"webhook": {"clientAuth": {"caBundle": ca}}}))
    ca_file = tmp_path / "ca.crt"
    ca_file.write_text(ca)
    chart = helm_template(helm, "-f", str(values))
    assert_same_install(chart, render_operator("--webhook-client-ca", str(ca_file)))
    (cm,) = [o for o in chart if o["metadata"]["name"] == "polsched-webhook-client-ca"]
    assert cm["data"]["ca.crt"] == ca
    args = run_args(chart)
    assert args.webhook_client_ca == "/etc/polsched/webhook-client-ca/ca.crt"
    mounts = deployment(chart)["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
    assert {"name": "webhook-client-ca", "mountPath": "/etc/polsched/webhook-client-ca",
            "readOnly": True} in mounts
    assert run_args(helm_template(helm)).webhook_client_ca is None
    garbage = tmp_path / "garbage.crt"
    garbage.write_text("not a certificate")
    p = subprocess.run([str(Path(sys.executable).parent / "polsched"), "render", "operator",
                        "--webhook-client-ca", str(garbage)], capture_output=True, text=True)
    assert p.returncode == 1 and f"--webhook-client-ca {garbage}" in p.stderr, p.stderr


def test_the_network_policy_lets_in_the_metrics_port_only_when_it_is_exposed(
        helm: str) -> None:
    def ports(*args: str) -> list[str]:
        (np,) = [o for o in helm_template(
            helm, "--set", "webhook.networkPolicy.apiServerCIDRs={10.0.0.0/24}", *args)
            if o["kind"] == "NetworkPolicy"]
        return [r["ports"][0]["port"] for r in np["spec"]["ingress"]]

    assert ports() == ["webhook", "health"]
    assert ports("--set", "metrics.service.enabled=true") == ["webhook", "health", "metrics"]
    assert ports("--set", "metrics.secure.enabled=true") == ["webhook", "health",
                                                             "https-metrics"]


def run_args(objs: list[Obj]) -> argparse.Namespace:
    """The Deployment's arguments as `polsched run` parses them: a flag the chart passes
    that the operator does not know fails here."""
    args = deployment(objs)["spec"]["template"]["spec"]["containers"][0]["args"]
    return cli.build_parser().parse_args(args)


def from_manifests(path: str, namespace: str) -> list[Obj]:
    """The objects of a manifests/ file, moved to `namespace` as the chart moves them."""
    text = (ROOT / path).read_text().replace("namespace: polsched-system",
                                             f"namespace: {namespace}")
    return [d for d in yaml.safe_load_all(text) if d]


def test_cert_manager_issues_the_certificate_the_operator_serves_and_injects_its_ca(
        helm: str, tmp_path: Path) -> None:
    self_managed = helm_template(helm, namespace="sched")
    objs = helm_template(helm, "--set", "webhook.certificates.mode=cert-manager",
                         namespace="sched")
    (issuer,) = [o for o in objs if o["kind"] == "Issuer"]
    (cert,) = [o for o in objs if o["kind"] == "Certificate"]
    (conf,) = [o for o in objs if o["kind"] == "ValidatingWebhookConfiguration"]
    assert issuer["spec"] == {"selfSigned": {}}
    assert cert["spec"]["issuerRef"] == {"name": issuer["metadata"]["name"], "kind": "Issuer",
                                         "group": "cert-manager.io"}
    # The Secret the operator reads (its default --webhook-secret, which its Role names),
    # for the names the apiserver checks when it calls the Service.
    args = run_args(objs)
    assert args.webhook_certificates == "external" and args.webhook_secret is None
    assert cert["spec"]["secretName"] == rotator.DEFAULT_SECRET
    ns, name, _ = webhook_server.parse_service(args.webhook_service)
    assert set(webhook_server.service_names(ns, name)) <= set(cert["spec"]["dnsNames"])
    role = next(o for o in objs if o["kind"] == "Role"
                and o["metadata"]["name"] == "polsched-operator")
    assert any(rotator.DEFAULT_SECRET in r.get("resourceNames", []) and "watch" in r["verbs"]
               for r in role["rules"])
    # cert-manager's CA injector fills the caBundle from that Certificate.
    assert conf["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == \
        f"sched/{cert['metadata']['name']}"
    assert cert["metadata"]["namespace"] == "sched"
    # Nothing else changes: the same objects as self-managed, less the flag and the
    # annotation.
    dep = deployment(objs)
    c = dep["spec"]["template"]["spec"]["containers"][0]
    i = c["args"].index("--webhook-certificates")
    del c["args"][i:i + 2]
    del conf["metadata"]["annotations"]
    assert by_key([o for o in objs if o["kind"] not in ("Issuer", "Certificate")]) == \
        by_key(self_managed)
    assert run_args(self_managed).webhook_certificates == "self-managed"

    # An issuer of the cluster's instead of the self-signed one.
    objs = helm_template(helm, "--set", "webhook.certificates.mode=cert-manager",
                         "--set", "webhook.certificates.certManager.issuerRef.name=corp-ca",
                         "--set", "webhook.certificates.certManager.issuerRef.kind=ClusterIssuer")
    assert not [o for o in objs if o["kind"] == "Issuer"]
    (cert,) = [o for o in objs if o["kind"] == "Certificate"]
    assert cert["spec"]["issuerRef"] == {"name": "corp-ca", "kind": "ClusterIssuer",
                                         "group": "cert-manager.io"}

    p = subprocess.run([helm, "template", str(CHART), "--set",
                        "webhook.certificates.mode=vault"], capture_output=True, text=True)
    assert p.returncode != 0 and "self-managed or cert-manager" in p.stderr


def test_secure_metrics_listener_with_its_reviews_rbac_and_an_https_service_monitor(
        helm: str) -> None:
    default = helm_template(helm)
    assert run_args(default).metrics_secure_listen is None
    assert not [o for o in default if o["metadata"]["name"].startswith("polsched-metrics")]

    objs = helm_template(helm, "--set", "metrics.secure.enabled=true",
                         "--set", "metrics.service.enabled=true",
                         "--set", "metrics.serviceMonitor.enabled=true",
                         "--set", "metrics.secure.readerServiceAccounts[0].name=prom",
                         "--set", "metrics.secure.readerServiceAccounts[0].namespace=mon",
                         namespace="sched")
    args = run_args(objs)
    assert args.metrics_secure_listen == "0.0.0.0:8443"
    # The plain, unauthenticated listener stays on the loopback, without a port.
    assert args.metrics_listen == "127.0.0.1:8080"
    c = deployment(objs)["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "https-metrics", "containerPort": 8443, "protocol": "TCP"} in c["ports"]
    assert not [p for p in c["ports"] if p["name"] == "metrics"]
    (svc,) = [o for o in objs if o["kind"] == "Service"
              and o["metadata"]["name"] == "polsched-metrics"]
    assert svc["spec"]["ports"] == [{"name": "https-metrics", "port": 8443,
                                     "targetPort": "https-metrics", "protocol": "TCP"}]
    (sm,) = [o for o in objs if o["kind"] == "ServiceMonitor"]
    (endpoint,) = sm["spec"]["endpoints"]
    assert endpoint["port"] == "https-metrics" and endpoint["scheme"] == "https"
    assert endpoint["bearerTokenFile"] == "/var/run/secrets/kubernetes.io/serviceaccount/token"
    # The reviews and the reader role: manifests/monitoring/metrics-auth-rbac.yaml's, one
    # source, bound to the release's ServiceAccounts.
    got = by_key([without_helm(o) for o in objs])
    for o in from_manifests("manifests/monitoring/metrics-auth-rbac.yaml", "sched"):
        assert got[key(o)] == o, key(o)
    binding = got[("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", "",
                   "polsched-metrics-auth")]
    assert {s["namespace"] for s in binding["subjects"]} == {"sched"}
    reader = got[("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", "",
                  "polsched-metrics-reader")]
    assert reader["roleRef"]["name"] == "polsched-metrics-reader"
    assert reader["subjects"] == [{"kind": "ServiceAccount", "name": "prom",
                                   "namespace": "mon"}]


def test_alerts_and_dashboard_are_opt_in_and_manifests_monitorings_own(helm: str) -> None:
    assert not [o for o in helm_template(helm)
                if o["kind"] in ("PrometheusRule", "ConfigMap")]
    objs = helm_template(helm, "--set", "metrics.prometheusRule.enabled=true",
                         "--set", "metrics.prometheusRule.labels.release=prom",
                         "--set", "metrics.dashboard.enabled=true",
                         "--set", "metrics.dashboard.namespace=grafana", namespace="sched")
    (rule,) = [o for o in objs if o["kind"] == "PrometheusRule"]
    (source,) = from_manifests("manifests/monitoring/prometheusrule.yaml", "sched")
    assert rule["spec"] == source["spec"]
    assert rule["metadata"]["namespace"] == "sched"
    assert rule["metadata"]["labels"]["release"] == "prom"
    assert source["metadata"]["labels"].items() <= rule["metadata"]["labels"].items()
    (dashboard,) = [o for o in objs if o["kind"] == "ConfigMap"]
    # What kube-prometheus-stack's Grafana sidecar looks for.
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert dashboard["metadata"]["namespace"] == "grafana"
    (text,) = dashboard["data"].values()
    assert json.loads(text) == json.loads(
        (ROOT / "manifests" / "monitoring" / "dashboard.json").read_text())


def test_monitoring_files_are_links_to_manifests() -> None:
    """One source: the chart's files/ link to manifests/, never copy them."""
    for f in ("metrics-auth-rbac.yaml", "prometheusrule.yaml", "dashboard.json"):
        link = CHART / "files" / "monitoring" / f
        assert link.is_symlink()
        assert link.resolve() == ROOT / "manifests" / "monitoring" / f


def test_helm_lint_passes(helm: str) -> None:
    p = subprocess.run([helm, "lint", "--strict", str(CHART)], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr


def test_chart_version_is_the_package_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert chart["version"] == chart["appVersion"] == project["version"] \
        == polsched.__version__


def test_feature_gates_set_the_operators_variable_as_render_does(helm: str,
                                                                  tmp_path: Path) -> None:
    """featureGates is render's --feature-gates: the operator's POLSCHED_FEATURE_GATES,
    sorted by name; a value that is not a boolean is refused naming the gate."""
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"featureGates": {
        "TopologyAwareWorkloadScheduling": True, "GenericWorkload": True,
        "CompositePodGroup": False}}))
    chart = helm_template(helm, "-f", str(values))
    rendered = render_operator(
        "--feature-gates",
        "GenericWorkload=true,TopologyAwareWorkloadScheduling=true,CompositePodGroup=false")
    assert_same_install(chart, rendered)
    deployment = next(o for o in chart if o["kind"] == "Deployment")
    env = {e["name"]: e.get("value") for e in
           deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["POLSCHED_FEATURE_GATES"] == (
        "CompositePodGroup=false,GenericWorkload=true,TopologyAwareWorkloadScheduling=true")
    default = next(o for o in helm_template(helm) if o["kind"] == "Deployment")
    assert "POLSCHED_FEATURE_GATES" not in {
        e["name"] for e in default["spec"]["template"]["spec"]["containers"][0]["env"]}
    p = subprocess.run([helm, "template", "polsched", str(CHART), "--set",
                        "featureGates.GenericWorkload=yes"], capture_output=True, text=True)
    assert p.returncode != 0 and "featureGates.GenericWorkload" in p.stderr
