"""polsched.controller.deployments: the Dedicated templates render to owned objects
running `polsched scheduler --policy NAME`."""

from __future__ import annotations

import pytest

from polsched.controller.deployments import api_path, render
from polsched.controller.policies import PolicyBook

pytestmark = pytest.mark.unit


def test_render_dedicated_objects() -> None:
    rec, _ = PolicyBook().observe({
        "apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
        "metadata": {"name": "fast", "uid": "u-1", "generation": 1},
        "spec": {"runtime": {"mode": "Dedicated", "replicas": 3,
                             "resources": {"limits": {"cpu": "1"}}}}})
    objs = render(rec, namespace="polsched-system", image="img:1")
    assert [o["kind"] for o in objs] == ["ServiceAccount", "ClusterRoleBinding",
                                         "RoleBinding", "Deployment"]
    for o in objs:
        assert o["metadata"]["name"] == "polsched-fast"
        assert o["metadata"]["ownerReferences"] == [{
            "apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy", "name": "fast",
            "uid": "u-1", "controller": True, "blockOwnerDeletion": False}]
    deploy = objs[-1]
    assert deploy["spec"]["replicas"] == 3
    pod = deploy["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "polsched-fast"
    # Always elected, whatever the replicas: a rollout never runs two active schedulers.
    assert pod["containers"][0]["args"] == ["scheduler", "--policy", "fast",
                                            "--leader-elect=true"]
    assert pod["containers"][0]["image"] == "img:1"
    assert pod["containers"][0]["resources"] == {"limits": {"cpu": "1"}}
    assert objs[1]["subjects"][0] == {"kind": "ServiceAccount", "name": "polsched-fast",
                                      "namespace": "polsched-system"}
    assert [api_path(o) for o in objs] == [
        "/api/v1/namespaces/polsched-system/serviceaccounts/polsched-fast",
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/polsched-fast",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/polsched-system/rolebindings/polsched-fast",
        "/apis/apps/v1/namespaces/polsched-system/deployments/polsched-fast",
    ]


def test_dedicated_schedulers_get_the_operators_admission_flags() -> None:
    import argparse

    from polsched.controller.operator import admission_flags
    from polsched.controller.options import add_run_arguments

    parser = argparse.ArgumentParser()
    add_run_arguments(parser)
    assert admission_flags(parser.parse_args([])) == []
    flags = admission_flags(parser.parse_args([
        "--reserved-scheduler-names", "volcano", "--extender-deny", "10.0.0.0/8",
        "--extender-allow", "10.1.0.0/16"]))
    assert flags == ["--reserved-scheduler-names=volcano", "--extender-deny=10.0.0.0/8",
                     "--extender-allow=10.1.0.0/16"]
    rec, _ = PolicyBook().observe({
        "apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
        "metadata": {"name": "fast", "uid": "u-1", "generation": 1},
        "spec": {"runtime": {"mode": "Dedicated"}}})
    deploy = render(rec, namespace="polsched-system", image="img:1", args=flags)[-1]
    args = deploy["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args == ["scheduler", "--policy", "fast", "--leader-elect=true", *flags]
    # The scheduler's own parser takes them.
    from polsched.controller.options import add_scheduler_arguments

    sched = argparse.ArgumentParser()
    add_scheduler_arguments(sched)
    parsed = sched.parse_args(args[1:])
    assert parsed.reserved_scheduler_names == "volcano"
