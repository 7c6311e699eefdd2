"""polsched.controller.dedicated.deployments: the Dedicated template renders one owned Deployment
running `polsched scheduler --policy NAME` as the install's ServiceAccount, under a name
that cannot be the operator's, and only objects polsched made for the policy count as
its own."""

from __future__ import annotations

from typing import Any

import pytest

from polsched.api.admission import AdmissionRules
from polsched.controller.dedicated.deployments import (
    EXTENDER_CA_DIR,
    SERVICE_ACCOUNT,
    Inherited,
    api_path,
    foreign_message,
    object_name,
    ours,
    render,
)
from polsched.controller.policies.book import PolicyBook, PolicyRecord

pytestmark = pytest.mark.unit


def record(name: str, spec: dict[str, Any]) -> PolicyRecord:
    rec, _ = PolicyBook().observe({
        "apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
        "metadata": {"name": name, "uid": "u-1", "generation": 1}, "spec": spec})
    assert rec.error is None, rec.error
    return rec


def test_render_dedicated_objects() -> None:
    rec = record("fast", {"runtime": {"mode": "Dedicated", "replicas": 3,
                                      "resources": {"limits": {"cpu": "1"}}}})
    objs = render(rec, namespace="polsched-system", image="img:1")
    assert [o["kind"] for o in objs] == ["Deployment"]
    (deploy,) = objs
    assert deploy["metadata"]["name"] == "polsched-dedicated-fast"
    assert deploy["metadata"]["ownerReferences"] == [{
        "apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy", "name": "fast",
        "uid": "u-1", "controller": True, "blockOwnerDeletion": False}]
    assert deploy["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "polsched"
    assert deploy["spec"]["replicas"] == 3
    pod = deploy["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == SERVICE_ACCOUNT == "polsched-scheduler"
    # Always elected, whatever the replicas: a rollout never runs two active schedulers.
    c = pod["containers"][0]
    assert c["args"] == ["scheduler", "--policy", "fast", "--leader-elect=true",
                         "--health-listen", "0.0.0.0:8081"]
    assert c["image"] == "img:1"
    assert c["resources"] == {"limits": {"cpu": "1"}}
    assert [api_path(o) for o in objs] == [
        "/apis/apps/v1/namespaces/polsched-system/deployments/polsched-dedicated-fast"]


def test_the_pod_meets_the_restricted_pod_security_profile() -> None:
    """The checks of the `restricted` profile (pod-security-admission policy/
    check_*.go) that a Deployment's template can fail."""
    (deploy,) = render(record("p", {"runtime": {"mode": "Dedicated"}}),
                       namespace="ns", image="img")
    pod = deploy["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    for c in pod["containers"]:
        sc = c["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"] == {"drop": ["ALL"]}
        # check_hostPorts: container ports are fine, host ports are not.
        assert "privileged" not in sc
        assert not any(port.get("hostPort") for port in c.get("ports", ()))
    assert all(set(v) <= {"name", "emptyDir", "secret"} for v in pod["volumes"])
    assert "hostNetwork" not in pod and "hostPID" not in pod


def test_extender_ca_secrets_of_the_namespace_are_mounted_not_read() -> None:
    ext = {"urlPrefix": "https://ext.example:8443/", "filterVerb": "filter"}
    rec = record("tls", {"runtime": {"mode": "Dedicated"}, "extenders": [
        {**ext, "tlsConfig": {"caSecretRef": {"name": "ext-ca",
                                              "namespace": "polsched-system"}}},
        {**ext, "tlsConfig": {"caSecretRef": {"name": "other",
                                              "namespace": "elsewhere"}}}]})
    (deploy,) = render(rec, namespace="polsched-system", image="img")
    pod = deploy["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert c["args"][-1] == f"--extender-ca-dir={EXTENDER_CA_DIR}"
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    assert mounts["extender-ca-0"] == {"name": "extender-ca-0", "readOnly": True,
                                       "mountPath": f"{EXTENDER_CA_DIR}/ext-ca"}
    secrets = [v["secret"] for v in pod["volumes"] if "secret" in v]
    # Only ca.crt of the Secret in the pod's own namespace; optional, so a missing one is
    # a status message rather than a pod that never starts.
    assert secrets == [{"secretName": "ext-ca", "optional": True,
                        "items": [{"key": "ca.crt", "path": "ca.crt"}]}]


def test_a_policy_named_like_the_operators_objects_gets_another_name() -> None:
    for name in ("operator", "webhook", "metrics", "scheduler"):
        assert object_name(name) not in {"polsched-operator", "polsched-webhook",
                                         "polsched-metrics", "polsched-scheduler"}


def deployment(labels: dict[str, str], owners: list[dict[str, Any]]) -> dict[str, Any]:
    return {"kind": "Deployment", "metadata": {
        "name": "polsched-dedicated-p", "namespace": "polsched-system", "labels": labels,
        "ownerReferences": owners}}


OWNER = {"apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy", "name": "p",
         "uid": "u-1", "controller": True}


def test_only_what_polsched_made_for_the_policy_is_its_own() -> None:
    managed = {"app.kubernetes.io/managed-by": "polsched"}
    assert ours(deployment(managed, [OWNER]), "p")
    assert ours(deployment(managed, [{**OWNER, "uid": "an-earlier-p"}]), "p")
    assert not ours(deployment({}, [OWNER]), "p")  # no label: someone else's
    assert not ours(deployment(managed, []), "p")  # no owner
    assert not ours(deployment(managed, [{**OWNER, "name": "q"}]), "p")
    assert not ours(deployment(managed, [{**OWNER, "controller": False}]), "p")
    assert not ours(deployment(managed, [{**OWNER, "apiVersion": "apps/v1",
                                          "kind": "ReplicaSet"}]), "p")
    msg = foreign_message(deployment({"app": "x"}, []), "p")
    assert msg.startswith("Deployment polsched-system/polsched-dedicated-p already exists "
                          "and was not made by polsched for SchedulingPolicy 'p'")
    assert "leaves it alone" in msg


def test_dedicated_schedulers_get_the_operators_admission_flags() -> None:
    import argparse

    from polsched.controller.operator import admission_flags
    from polsched.controller.process.options import add_run_arguments

    parser = argparse.ArgumentParser()
    add_run_arguments(parser)
    assert admission_flags(parser.parse_args([])) == []
    flags = admission_flags(parser.parse_args([
        "--reserved-scheduler-names", "volcano", "--extender-deny", "10.0.0.0/8",
        "--extender-allow", "10.1.0.0/16"]))
    assert flags == ["--reserved-scheduler-names=volcano", "--extender-deny=10.0.0.0/8",
                     "--extender-allow=10.1.0.0/16"]
    rec = record("fast", {"runtime": {"mode": "Dedicated"}})
    deploy = render(rec, namespace="polsched-system", image="img:1",
                    inherited=Inherited(tuple(flags)))[-1]
    args = deploy["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args == ["scheduler", "--policy", "fast", "--leader-elect=true",
                    "--health-listen", "0.0.0.0:8081", *flags]
    # The scheduler's own parser takes them.
    from polsched.controller.process.options import add_scheduler_arguments

    sched = argparse.ArgumentParser()
    add_scheduler_arguments(sched)
    parsed = sched.parse_args(args[1:])
    assert parsed.reserved_scheduler_names == "volcano"


def test_dedicated_schedulers_get_the_operators_feature_gates() -> None:
    rec = record("p", {"runtime": {"mode": "Dedicated"}})
    gates = "GenericWorkload=true,TopologyAwareWorkloadScheduling=true"
    deploy = render(rec, namespace="polsched-system", image="img:1",
                    inherited=Inherited(feature_gates=gates))[-1]
    env = deploy["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "POLSCHED_FEATURE_GATES", "value": gates} in env
    # Without gates the container's environment is as before.
    plain = render(rec, namespace="polsched-system", image="img:1")[-1]
    names = [e["name"] for e in plain["spec"]["template"]["spec"]["containers"][0]["env"]]
    assert names == ["POD_NAMESPACE", "POD_NAME"]
def test_dedicated_pods_have_probes_and_expose_metrics_where_the_operator_does() -> None:
    """kubelet restarts a Dedicated scheduler stuck as leader (/healthz) and routes nothing
    to it before its cache has synced (/readyz), on the probes' port on the pod's IP;
    /metrics stays on loopback unless the operator's own listens on the pod's IP, and
    only then is the port declared for a PodMonitor."""
    rec = record("fast", {"runtime": {"mode": "Dedicated"}})
    (deploy,) = render(rec, namespace="polsched-system", image="img:1")
    c = deploy["spec"]["template"]["spec"]["containers"][0]
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    assert c["ports"] == [{"name": "health", "containerPort": 8081, "protocol": "TCP"}]

    (deploy,) = render(rec, namespace="polsched-system", image="img:1",
                       inherited=Inherited(metrics_listen="0.0.0.0:9090"))
    c = deploy["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "metrics", "containerPort": 9090, "protocol": "TCP"} in c["ports"]
    assert c["args"][c["args"].index("--metrics-listen") + 1] == "0.0.0.0:9090"

    (deploy,) = render(rec, namespace="polsched-system", image="img:1",
                       inherited=Inherited(metrics_listen=""))
    c = deploy["spec"]["template"]["spec"]["containers"][0]
    assert [p["name"] for p in c["ports"]] == ["health"]


def test_dedicated_pods_serve_authenticated_metrics_when_the_operator_does() -> None:
    rec = record("fast", {"runtime": {"mode": "Dedicated"}})
    (deploy,) = render(rec, namespace="polsched-system", image="img:1",
                       inherited=Inherited(metrics_secure_listen="0.0.0.0:8443"))
    c = deploy["spec"]["template"]["spec"]["containers"][0]
    assert c["args"][c["args"].index("--metrics-secure-listen") + 1] == "0.0.0.0:8443"
    assert {"name": "https-metrics", "containerPort": 8443, "protocol": "TCP"} in c["ports"]


def test_dedicated_schedulers_may_switch_off_what_the_admin_allows() -> None:
    """The admin's allowDisabling reaches the Dedicated schedulers (the tenancy file is
    the operator's): a policy the operator runs, its Dedicated scheduler loads too."""
    import argparse

    from polsched.api import PolicyError, load_policy
    from polsched.api.tenancy import parse_tenancy
    from polsched.controller.operator import admission_flags
    from polsched.controller.process.options import add_run_arguments, add_scheduler_arguments
    from polsched.controller.process.server import admission_rules
    from polsched.plugins import CATALOG

    run = argparse.ArgumentParser()
    add_run_arguments(run)
    operator_rules = AdmissionRules.make(tenancy=parse_tenancy(
        {"allowDisabling": ["TaintToleration", "NodeUnschedulable"]}))
    flags = admission_flags(run.parse_args([]), operator_rules)
    assert flags == ["--allow-disabling=NodeUnschedulable,TaintToleration"]
    sched = argparse.ArgumentParser()
    add_scheduler_arguments(sched)
    body = {"apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
            "metadata": {"name": "p"},
            "spec": {"runtime": {"mode": "Dedicated"}, "disabledPlugins": ["TaintToleration"]}}
    rules = admission_rules(sched.parse_args(["--policy", "p", *flags]), "https://10.0.0.1")
    assert load_policy(body, CATALOG, rules=rules).name == "p"
    # Without it, the scheduler's defaults protect the plugin; a name not protected is
    # refused as a flag.
    with pytest.raises(PolicyError, match="spec.disabledPlugins"):
        load_policy(body, CATALOG, rules=admission_rules(sched.parse_args(["--policy", "p"]),
                                                         "https://10.0.0.1"))
    with pytest.raises(SystemExit, match="--allow-disabling"):
        admission_rules(sched.parse_args(["--policy", "p", "--allow-disabling=Foo"]),
                        "https://10.0.0.1")
