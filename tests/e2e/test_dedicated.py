"""Dedicated mode on a real API server: the operator renders and applies the policy's
Deployment, ServiceAccount and RBAC bindings with ownerReferences; `polsched scheduler
--policy P`, run as that ServiceAccount, schedules P's pods; with two such processes only
the holder of the policy's Lease binds."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Cluster, NodeFactory, unique
from tests.e2e.operators import Harness, wait_for, zone_policy
from tests.e2e.rbac import OPERATOR_NAMESPACE, service_account_kubeconfig

NS = OPERATOR_NAMESPACE


@pytest.fixture(scope="session")
def harness_session(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Harness:
    return Harness(cluster, Path(tmp_path_factory.mktemp("polsched-dedicated")))


@pytest.fixture
def harness(harness_session: Harness) -> Iterator[Harness]:
    yield harness_session
    harness_session.reset()


def lease_holder(h: Harness, name: str) -> str:
    p = h.cluster.kubectl("get", "lease", name, "-n", NS, "-o",
                          "jsonpath={.spec.holderIdentity}", check=False)
    return p.stdout.strip() if p.returncode == 0 else ""


def test_dedicated_scheduler_deployed_and_lease_elected(harness: Harness, namespace: str,
                                                        nodes: NodeFactory) -> None:
    h = harness
    rid = unique("ded")
    for i in range(2):
        nodes(f"{rid}-a{i}", labels={"zone": "a"})
    h.operator(f"{rid}-op")
    policy = zone_policy(rid, "a", runtime={"mode": "Dedicated", "replicas": 2,
                                            "resources": {"requests": {"cpu": "100m"}}})
    h.apply_policy(policy)
    try:
        uid = h.policy(rid)["metadata"]["uid"]
        obj = f"polsched-{rid}"
        for kind, ns in (("deployment", NS), ("serviceaccount", NS), ("rolebinding", NS),
                         ("clusterrolebinding", None)):
            args = ["get", kind, obj, "-o", "json"] + (["-n", ns] if ns else [])
            got = wait_for(lambda a=args: (p := h.cluster.kubectl(*a, check=False))  # type: ignore[misc]
                           .returncode == 0 and p, 30, f"{kind} {obj}", interval=0.2)
            owners = json.loads(got.stdout)["metadata"].get("ownerReferences") or []
            assert [(o["kind"], o["name"], o["uid"]) for o in owners] == \
                [("SchedulingPolicy", rid, uid)], (kind, owners)
        deploy = h.cluster.kubectl_json("get", "deployment", obj, "-n", NS)
        assert deploy["spec"]["replicas"] == 2
        container = deploy["spec"]["template"]["spec"]["containers"][0]
        assert container["args"] == ["scheduler", "--policy", rid, "--leader-elect=true"]
        assert container["resources"] == {"requests": {"cpu": "100m"}}
        assert deploy["spec"]["template"]["spec"]["serviceAccountName"] == obj

        kubeconfig = service_account_kubeconfig(h.cluster, NS, obj,
                                                h.workdir / f"{obj}.kubeconfig")
        lease = f"polsched-scheduler-{rid}"
        common = ("scheduler", "--policy", rid, "--namespace", NS, "--lease-duration", "4",
                  "--renew-period", "0.5")
        first = h.process(kubeconfig, *common, "--identity", f"{rid}-first")
        wait_for(lambda: lease_holder(h, lease) == f"{rid}-first", 30, "first holds the lease",
                 interval=0.1)
        second = h.process(kubeconfig, *common, "--identity", f"{rid}-second")
        wait_for(lambda: h.condition(rid, "Ready").get("status") == "True", 10,
                 "Ready=True written by the Dedicated scheduler")
        time.sleep(1.0)  # the second one's cache has synced

        h.create_pods(namespace, [f"p{i}" for i in range(10)], rid)
        wait_for(lambda: len(h.bound(namespace)) == 10, 10, "10 pods bound")
        wait_for(lambda: (s := h.status(rid)).get("boundPods") == 10
                 and s.get("bindsTotal") == 10, 15, "boundPods == bindsTotal == 10")
        assert lease_holder(h, lease) == f"{rid}-first"

        # Freeze the holder: the standby (and the operator) must leave new pods Pending
        # until the lease expires, then the standby takes over and binds them.
        first.signal(signal.SIGSTOP)
        t_stop = time.monotonic()
        h.create_pods(namespace, [f"q{i}" for i in range(5)], rid)
        time.sleep(1.5)
        assert len(h.bound(namespace)) == 10, "a non-holder bound a pod"
        wait_for(lambda: lease_holder(h, lease) == f"{rid}-second", 10,
                 "second takes the lease", interval=0.1)
        wait_for(lambda: len(h.bound(namespace)) == 15, 10, "the new holder binds")
        print(f"takeover after {time.monotonic() - t_stop:.1f}s (leaseDurationSeconds 4)")
        first.kill()
        assert second.alive()
        # Counted on from what the first one persisted.
        wait_for(lambda: (s := h.status(rid)).get("boundPods") == 15
                 and s.get("bindsTotal") == 15, 15, "boundPods == bindsTotal == 15")
        assert all(n == 1 for n in h.scheduled_events(namespace).values())
    finally:
        h.cluster.kubectl("delete", "spol", rid, "--ignore-not-found", check=False)
    # The garbage collector follows the ownerReferences. It learns of a new CRD's kind on
    # its discovery resync, every 30 s (kube-controller-manager's garbagecollector Sync),
    # so on a control plane that installed the CRD moments ago this can take that long.
    wait_for(lambda: h.cluster.kubectl("get", "deployment", f"polsched-{rid}", "-n", NS,
                                       check=False).returncode != 0, 75,
             "the Deployment garbage-collected", interval=0.3)


def test_rollout_of_a_one_replica_policy_never_runs_two_schedulers(
        harness: Harness, namespace: str, nodes: NodeFactory) -> None:
    """A rollout of a 1-replica Dedicated policy runs the old and the new pod side by side,
    each with the Deployment's arguments. Both elect (issue 11, defect 4): while the old one
    holds the Lease (here frozen, as a pod that has not yet stopped), the new one binds
    nothing; once the old one stops and releases the Lease, the new one binds."""
    h = harness
    rid = unique("roll")
    nodes(f"{rid}-a0", labels={"zone": "a"})
    h.operator(f"{rid}-op")
    h.apply_policy(zone_policy(rid, "a", runtime={"mode": "Dedicated", "replicas": 1}))
    try:
        obj = f"polsched-{rid}"
        deploy = wait_for(lambda: (p := h.cluster.kubectl(
            "get", "deployment", obj, "-n", NS, "-o", "json", check=False)).returncode == 0
            and json.loads(p.stdout), 30, f"deployment {obj}", interval=0.2)
        assert deploy["spec"]["replicas"] == 1
        args = deploy["spec"]["template"]["spec"]["containers"][0]["args"]
        kubeconfig = service_account_kubeconfig(h.cluster, NS, obj,
                                                h.workdir / f"{obj}.kubeconfig")
        common = (*args, "--namespace", NS, "--lease-duration", "4", "--renew-period", "0.5")
        old = h.process(kubeconfig, *common, "--identity", f"{rid}-old")
        lease = f"polsched-scheduler-{rid}"
        wait_for(lambda: lease_holder(h, lease) == f"{rid}-old", 30, "old holds the lease",
                 interval=0.1)
        h.create_pods(namespace, ["p0"], rid)
        wait_for(lambda: len(h.bound(namespace)) == 1, 10, "the old pod binds")
        new = h.process(kubeconfig, *common, "--identity", f"{rid}-new")
        wait_for(lambda: "started as" in new.log(), 20, "the new pod started")
        old.signal(signal.SIGSTOP)  # the old pod, not yet stopped, holds the lease
        h.create_pods(namespace, [f"q{i}" for i in range(3)], rid)
        time.sleep(1.5)
        assert len(h.bound(namespace)) == 1, "the new pod bound while the old one led"
        old.signal(signal.SIGCONT)
        old.stop()  # SIGTERM: releases the lease
        wait_for(lambda: lease_holder(h, lease) == f"{rid}-new", 10, "new takes the lease",
                 interval=0.1)
        wait_for(lambda: len(h.bound(namespace)) == 4, 10, "the new pod binds")
        assert all(n == 1 for n in h.scheduled_events(namespace).values())
    finally:
        h.cluster.kubectl("delete", "spol", rid, "--ignore-not-found", check=False)
