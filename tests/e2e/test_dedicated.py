"""Dedicated mode on a real API server, the operator running as its ServiceAccount: it
renders and applies the policy's Deployment with an ownerReference, in its namespace and
under a name of its own; `polsched scheduler --policy P`, run as the install's
ServiceAccount for Dedicated schedulers, schedules P's pods; with two such processes only
the holder of the policy's Lease binds. A policy named like the operator's objects leaves
them alone, and an object polsched did not make is never taken over."""

from __future__ import annotations

import json
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from polsched.controller.process.options import DEDICATED_LEASE_NAMESPACE
from tests.conftest import Cluster, NodeFactory, unique
from tests.e2e.operators import Harness, wait_for, zone_policy
from tests.e2e.rbac import (
    DEDICATED_SA,
    OPERATOR_NAMESPACE,
    OPERATOR_SA,
    service_account_kubeconfig,
)

NS = OPERATOR_NAMESPACE


def deployment(h: Harness, name: str) -> dict[str, Any] | None:
    p = h.cluster.kubectl("get", "deployment", name, "-n", NS, "-o", "json", check=False)
    return json.loads(p.stdout) if p.returncode == 0 else None


def lease_holder(h: Harness, name: str) -> str:
    p = h.cluster.kubectl("get", "lease", name, "-n", DEDICATED_LEASE_NAMESPACE, "-o",
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
        obj = f"polsched-dedicated-{rid}"
        deploy = wait_for(lambda: deployment(h, obj), 30, f"deployment {obj}", interval=0.2)
        owners = deploy["metadata"].get("ownerReferences") or []
        assert [(o["kind"], o["name"], o["uid"]) for o in owners] == \
            [("SchedulingPolicy", rid, uid)], owners
        assert deploy["spec"]["replicas"] == 2
        container = deploy["spec"]["template"]["spec"]["containers"][0]
        assert container["args"] == ["scheduler", "--policy", rid, "--leader-elect=true",
                                     "--health-listen", "0.0.0.0:8081"]
        # kubelet restarts a stuck leader and waits for the cache to sync.
        assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
        assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
        assert container["resources"] == {"requests": {"cpu": "100m"}}
        # The install's identity: the operator made no ServiceAccount and no binding.
        assert deploy["spec"]["template"]["spec"]["serviceAccountName"] == DEDICATED_SA
        for kind in ("serviceaccount", "rolebinding"):
            assert h.cluster.kubectl("get", kind, f"polsched-{rid}", "-n", NS,
                                     check=False).returncode != 0
        assert h.cluster.kubectl("get", "clusterrolebinding", f"polsched-{rid}",
                                 check=False).returncode != 0

        kubeconfig = service_account_kubeconfig(h.cluster, NS, DEDICATED_SA,
                                                h.workdir / f"{DEDICATED_SA}.kubeconfig")
        lease = f"polsched-scheduler-{rid}"
        common = ("scheduler", "--policy", rid, "--namespace", NS, "--lease-duration", "4",
                  "--renew-period", "0.5")
        first = h.process(kubeconfig, *common, "--identity", f"{rid}-first")
        wait_for(lambda: lease_holder(h, lease) == f"{rid}-first", 30, "first holds the lease",
                 interval=0.1)
        second = h.process(kubeconfig, *common, "--identity", f"{rid}-second")
        wait_for(lambda: h.condition(rid, "Ready").get("status") == "True", 10,
                 "Ready=True written by the Dedicated scheduler")
        # It logs "started as" once its cache has synced.
        wait_for(lambda: "started as" in second.log(), 20, "the second one started")

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
    wait_for(lambda: deployment(h, f"polsched-dedicated-{rid}") is None, 75,
             "the Deployment garbage-collected", interval=0.3)


def probes_apart(args: tuple[str, ...]) -> list[str]:
    """`args` with --health-listen on a free loopback port of its own."""
    out = list(args)
    i = out.index("--health-listen")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        out[i + 1] = f"127.0.0.1:{s.getsockname()[1]}"
    return out


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
        obj = f"polsched-dedicated-{rid}"
        deploy = wait_for(lambda: deployment(h, obj), 30, f"deployment {obj}", interval=0.2)
        assert deploy["spec"]["replicas"] == 1
        args = deploy["spec"]["template"]["spec"]["containers"][0]["args"]
        kubeconfig = service_account_kubeconfig(h.cluster, NS, DEDICATED_SA,
                                                h.workdir / f"{DEDICATED_SA}.kubeconfig")
        # Pods have an IP each; processes side by side on one host need a probe port each.
        common = (*args, "--namespace", NS, "--lease-duration", "4", "--renew-period", "0.5")
        old = h.process(kubeconfig, *probes_apart(common), "--identity", f"{rid}-old")
        lease = f"polsched-scheduler-{rid}"
        wait_for(lambda: lease_holder(h, lease) == f"{rid}-old", 30, "old holds the lease",
                 interval=0.1)
        h.create_pods(namespace, ["p0"], rid)
        wait_for(lambda: len(h.bound(namespace)) == 1, 10, "the old pod binds")
        new = h.process(kubeconfig, *probes_apart(common), "--identity", f"{rid}-new")
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


def owners_and_managers(h: Harness, kind: str, name: str, namespaced: bool = True
                        ) -> tuple[list[str], set[str]]:
    obj = h.cluster.kubectl_json("get", kind, name, *(["-n", NS] if namespaced else []))
    meta = obj["metadata"]
    return ([f"{o['kind']}/{o['name']}" for o in meta.get("ownerReferences") or ()],
            {m.get("manager", "") for m in meta.get("managedFields") or ()})


def test_a_dedicated_policy_named_operator_leaves_the_operators_objects_alone(
        harness: Harness) -> None:
    """Issue 26, finding 6: Dedicated objects were named polsched-<policy> and applied
    with force, so a policy named `operator` put its ownerReference on the operator's own
    ServiceAccount, and deleting the policy garbage-collected it."""
    from polsched.commands import render

    h = harness
    rid = unique("opname")
    (operator_deploy,) = [o for o in render.operator_templated()
                          if o["kind"] == "Deployment"]
    operator_deploy["spec"]["replicas"] = 0  # the install's Deployment; no pod needed
    h.cluster.apply(operator_deploy)
    theirs = [("serviceaccount", OPERATOR_SA, True), ("deployment", "polsched-operator", True),
              ("role", "polsched-operator", True), ("rolebinding", "polsched-operator", True),
              ("clusterrolebinding", "polsched-operator", False),
              ("serviceaccount", DEDICATED_SA, True)]
    op = h.operator(f"{rid}-op")
    h.apply_policy(zone_policy("operator", "a", scheduler=rid,
                               runtime={"mode": "Dedicated"}))
    try:
        uid = h.policy("operator")["metadata"]["uid"]
        deploy = wait_for(lambda: deployment(h, "polsched-dedicated-operator"), 30,
                          "the policy's Deployment", interval=0.2)
        assert [(o["kind"], o["uid"]) for o in deploy["metadata"]["ownerReferences"]] == \
            [("SchedulingPolicy", uid)]
        for kind, name, namespaced in theirs:
            owners, managers = owners_and_managers(h, kind, name, namespaced)
            assert owners == [] and "polsched" not in managers, (kind, name, owners, managers)
    finally:
        h.cluster.kubectl("delete", "spol", "operator", "--ignore-not-found", check=False)
    wait_for(lambda: deployment(h, "polsched-dedicated-operator") is None, 75,
             "the policy's Deployment garbage-collected", interval=0.3)
    for kind, name, namespaced in theirs:  # the garbage collector came by: all still here
        owners_and_managers(h, kind, name, namespaced)
    assert deployment(h, "polsched-operator")["spec"]["replicas"] == 0  # type: ignore[index]
    assert op.alive()
    h.cluster.kubectl("delete", "deployment", "polsched-operator", "-n", NS, check=False)


def test_an_object_polsched_did_not_make_is_reported_and_left_alone(
        harness: Harness) -> None:
    h = harness
    rid = unique("foreign")
    name = f"polsched-dedicated-{rid}"
    labels = {"app": rid}
    h.cluster.apply({  # someone else's Deployment under the policy's Deployment name
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": NS, "labels": labels},
        "spec": {"replicas": 0, "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels}, "spec": {
                     "securityContext": {"runAsNonRoot": True, "runAsUser": 1000,
                                         "seccompProfile": {"type": "RuntimeDefault"}},
                     "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                                     "securityContext": {
                                         "allowPrivilegeEscalation": False,
                                         "capabilities": {"drop": ["ALL"]}}}]}}}})
    h.operator(f"{rid}-op")
    h.apply_policy(zone_policy(rid, "a", runtime={"mode": "Dedicated"}))
    try:
        ready = wait_for(lambda: (c := h.condition(rid, "Ready")).get("reason")
                         == "DedicatedObjectConflict" and c, 30,
                         "Ready=False DedicatedObjectConflict")
        print("Ready:", ready)
        assert ready["status"] == "False"
        assert f"Deployment {NS}/{name} already exists and was not made by polsched" \
            in ready["message"]
        assert h.condition(rid, "Stalled").get("status") == "True"
        owners, managers = owners_and_managers(h, "deployment", name)
        assert owners == [] and "polsched" not in managers, (owners, managers)
        assert deployment(h, name)["spec"]["replicas"] == 0  # type: ignore[index]
        # Once the object is gone, the operator makes its own without being asked again.
        h.cluster.kubectl("delete", "deployment", name, "-n", NS)
        uid = h.policy(rid)["metadata"]["uid"]
        wait_for(lambda: (d := deployment(h, name)) is not None
                 and [o["uid"] for o in d["metadata"].get("ownerReferences") or ()] == [uid],
                 30, "the policy's own Deployment", interval=0.2)
        wait_for(lambda: h.condition(rid, "Ready").get("reason") == "Starting", 15,
                 "the conflict verdict replaced")
        assert h.condition(rid, "Stalled").get("status") == "False"
    finally:
        h.cluster.kubectl("delete", "spol", rid, "--ignore-not-found", check=False)
        h.cluster.kubectl("delete", "deployment", name, "-n", NS, "--ignore-not-found",
                          check=False)


@pytest.fixture
def https_extender(tmp_path: Path) -> Iterator[tuple[str, str, list[int]]]:
    """An HTTPS filter extender that keeps every node: (its URL, its CA's PEM, a list
    that grows by one per request)."""
    import ssl
    import subprocess
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1", "-addext",
         "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True)
    calls: list[int] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            calls.append(1)
            data = json.dumps({"NodeNames": body.get("NodeNames") or []}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(cert), str(key))
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    yield f"https://127.0.0.1:{server.server_address[1]}/", cert.read_text(), calls
    server.shutdown()
    server.server_close()


def test_a_dedicated_scheduler_reads_its_extenders_ca_from_the_mount_not_the_api(
        harness: Harness, namespace: str, nodes: NodeFactory,
        https_extender: tuple[str, str, list[int]]) -> None:
    """The install's role for Dedicated schedulers has no Secret at all (the webhook's
    keys live in the same namespace): the Deployment mounts the caSecretRef's ca.crt, and
    the scheduler reads it there. Through the API it is refused, and the policy says so,
    naming the field."""
    import base64

    h = harness
    url, ca, calls = https_extender
    rid = unique("dedca")
    secret = f"{rid}-ca"
    h.cluster.apply({"apiVersion": "v1", "kind": "Secret",
                     "metadata": {"name": secret, "namespace": NS},
                     "data": {"ca.crt": base64.b64encode(ca.encode()).decode()}})
    nodes(f"{rid}-a0", labels={"zone": "a"})
    h.operator(f"{rid}-op")
    h.apply_policy(zone_policy(rid, "a", runtime={"mode": "Dedicated"}, extenders=[
        {"urlPrefix": url, "filterVerb": "filter", "nodeCacheCapable": True,
         "tlsConfig": {"caSecretRef": {"name": secret, "namespace": NS}}}]))
    try:
        deploy = wait_for(lambda: deployment(h, f"polsched-dedicated-{rid}"), 30,
                          "the Deployment", interval=0.2)
        pod = deploy["spec"]["template"]["spec"]
        args = pod["containers"][0]["args"]
        ca_dir = "/etc/polsched/extender-ca"
        assert f"--extender-ca-dir={ca_dir}" in args
        others = [a for a in args if not a.startswith("--extender-ca-dir=")]
        assert {"name": "extender-ca-0", "mountPath": f"{ca_dir}/{secret}",
                "readOnly": True} in pod["containers"][0]["volumeMounts"]
        kubeconfig = service_account_kubeconfig(h.cluster, NS, DEDICATED_SA,
                                                h.workdir / f"{DEDICATED_SA}.kubeconfig")
        common = ("--namespace", NS, "--lease-duration", "4", "--renew-period", "0.5",
                  "--metrics-listen", "")

        # Without the mount: the API refuses the Secret to this identity.
        no_mount = h.process(kubeconfig, *others, *common, "--identity", f"{rid}-api")
        valid = wait_for(lambda: (c := h.condition(rid, "Valid")).get("status") == "False"
                         and c, 30, "Valid=False")
        print("Valid:", valid)
        assert "spec.extenders[0].tlsConfig.caSecretRef" in valid["message"]
        assert f"cannot read Secret {NS}/{secret}" in valid["message"]
        assert "403" in valid["message"] or "Forbidden" in valid["message"]
        no_mount.stop()

        # With the Secret's ca.crt where the kubelet mounts it: the extender is trusted.
        mounted = h.workdir / rid
        (mounted / secret).mkdir(parents=True)
        (mounted / secret / "ca.crt").write_text(ca)
        h.process(kubeconfig, *others, f"--extender-ca-dir={mounted}", *common,
                  "--identity", f"{rid}-mounted")
        wait_for(lambda: h.condition(rid, "Valid").get("status") == "True"
                 and h.condition(rid, "Ready").get("status") == "True", 30,
                 "Valid=True and Ready=True")
        h.create_pods(namespace, ["p0"], rid)
        wait_for(lambda: h.bound(namespace).get("p0") == f"{rid}-a0", 20, "p0 bound")
        assert calls, "the extender was not asked"
    finally:
        h.cluster.kubectl("delete", "spol", rid, "--ignore-not-found", check=False)
        h.cluster.kubectl("delete", "secret", secret, "-n", NS, "--ignore-not-found",
                          check=False)


def test_the_api_server_refuses_more_than_five_replicas(cluster: Cluster) -> None:
    """A Dedicated policy's replicas run in the operator's namespace: the CRD's schema
    caps them (as the loader does for the webhook and `polsched validate`)."""
    rid = unique("many")
    body = zone_policy(rid, "a", runtime={"mode": "Dedicated", "replicas": 6})
    p = cluster.kubectl("apply", "-f", "-", input=json.dumps(body), check=False)
    print(p.stderr)
    assert p.returncode != 0
    assert "spec.runtime.replicas" in p.stderr and "less than or equal to 5" in p.stderr
    cluster.kubectl("delete", "spol", rid, "--ignore-not-found", check=False)
