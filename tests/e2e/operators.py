"""Helpers for the operator's e2e tests: polsched processes run as their ServiceAccount,
fast pod creation, and status polling on the real API server."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar, cast

import urllib3

from tests.builders import make_pod
from tests.conftest import ROOT, Cluster
from tests.e2e.rbac import (
    OPERATOR_NAMESPACE,
    OPERATOR_SA,
    install_rbac,
    install_webhook_configuration,
    service_account_kubeconfig,
)

POLSCHED = str(ROOT / ".venv" / "bin" / "polsched")
GROUP, VERSION, PLURAL = "polsched.io", "v1alpha1", "schedulingpolicies"
T = TypeVar("T")


def free_port() -> int:
    """A TCP port free on 127.0.0.1 at the time of asking (servers here bind loopback only)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def response_json(resp: object) -> Any:
    """The JSON body of a call made with _preload_content=False: the client then returns the
    urllib3 response, where its type hints name the decoded model."""
    return json.loads(cast(urllib3.BaseHTTPResponse, resp).data)


def wait_for(fn: Callable[[], T | None], timeout: float, what: str,
             interval: float = 0.05) -> T:
    deadline = time.monotonic() + timeout
    last: T | None = None
    while True:
        last = fn()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


class PolschedProcess:
    """`polsched ARGS` as a subprocess with its own kubeconfig; output in a log file."""

    def __init__(self, kubeconfig: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.args = [POLSCHED, *args]
        self.kubeconfig = kubeconfig
        self.env = env or {}  # added to the process's environment
        fd, name = tempfile.mkstemp(prefix="polsched-proc-", suffix=".log")
        os.close(fd)
        self.log_path = Path(name)
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> PolschedProcess:
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig), **self.env}
        env.pop("POD_NAMESPACE", None)
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(self.args, env=env, stdout=log, stderr=subprocess.STDOUT)
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def kill(self) -> None:
        """SIGKILL: no lease release, no last status write."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self, timeout: float = 15) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


class Harness:
    """What a test needs around the operator, bound to one cluster."""

    def __init__(self, cluster: Cluster, workdir: Path) -> None:
        from kubernetes import client

        self.cluster = cluster
        self.workdir = workdir
        self.core = client.CoreV1Api(cluster.api)
        self.custom = client.CustomObjectsApi(cluster.api)
        self.procs: list[PolschedProcess] = []
        self.policies: list[str] = []  # deleted by reset()
        install_rbac(cluster)
        self.operator_kubeconfig = service_account_kubeconfig(
            cluster, OPERATOR_NAMESPACE, OPERATOR_SA, workdir / "operator.kubeconfig")

    # -- processes --------------------------------------------------------------------------
    def operator(self, identity: str, *args: str,
                 env: dict[str, str] | None = None) -> PolschedProcess:
        if "--webhook-listen" in args:
            # As the install ships it: the operator may patch it, not create it. (Tests
            # delete it afterwards.)
            install_webhook_configuration(self.cluster)
        p = PolschedProcess(self.operator_kubeconfig, "run", "--identity", identity,
                            "--namespace", OPERATOR_NAMESPACE, *args, env=env).start()
        self.procs.append(p)
        return p

    def process(self, kubeconfig: Path, *args: str) -> PolschedProcess:
        p = PolschedProcess(kubeconfig, *args).start()
        self.procs.append(p)
        return p

    def reset(self) -> None:
        """Between tests: delete the policies made, stop the processes started (and print
        their logs, which pytest shows only when the test failed)."""
        for name in self.policies:
            self.delete_policy(name)
        self.policies = []
        for p in self.procs:
            p.stop()
            print(f"---- log of {' '.join(p.args[1:])} ----\n{p.log()[-6000:]}")
        self.procs = []

    # -- policies -----------------------------------------------------------------------------
    def policy(self, name: str) -> dict[str, Any]:
        resp = self.custom.get_cluster_custom_object(GROUP, VERSION, PLURAL, name,
                                                     _preload_content=False)
        policy: dict[str, Any] = response_json(resp)
        return policy

    def status(self, name: str) -> dict[str, Any]:
        return self.policy(name).get("status") or {}

    def condition(self, name: str, type_: str) -> dict[str, Any]:
        for c in self.status(name).get("conditions") or ():
            if c.get("type") == type_:
                return c  # type: ignore[no-any-return]
        return {}

    def wait_ready(self, name: str, timeout: float = 30) -> float:
        """Seconds until Ready=True (asserts within `timeout`)."""
        t0 = time.monotonic()
        wait_for(lambda: self.condition(name, "Ready").get("status") == "True", timeout,
                 f"SchedulingPolicy {name} Ready=True")
        return time.monotonic() - t0

    def apply_policy(self, body: dict[str, Any]) -> str:
        name = str(body["metadata"]["name"])
        self.policies.append(name)
        self.cluster.apply(body)
        return name

    def delete_policy(self, name: str) -> None:
        self.cluster.kubectl("delete", "schedulingpolicy", name, "--ignore-not-found",
                             "--wait=false", check=False)

    # -- nodes and pods -------------------------------------------------------------------------
    def create_pods(self, namespace: str, names: Iterable[str], scheduler: str,
                    labels: dict[str, str] | None = None, threads: int = 16) -> None:
        def one(name: str) -> None:
            # The client takes a dict body too; its type hints name only V1Pod.
            self.core.create_namespaced_pod(namespace, pod_manifest(name, scheduler, labels),  # type: ignore[arg-type]
                                            _preload_content=False)

        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(one, names))

    def create_pod(self, namespace: str, name: str, scheduler: str,
                   labels: dict[str, str] | None = None) -> None:
        # The client takes a dict body too; its type hints name only V1Pod.
        self.core.create_namespaced_pod(namespace, pod_manifest(name, scheduler, labels),  # type: ignore[arg-type]
                                        _preload_content=False)

    def pods(self, namespace: str) -> list[dict[str, Any]]:
        resp = self.core.list_namespaced_pod(namespace, _preload_content=False)
        pods: list[dict[str, Any]] = response_json(resp)["items"]
        return pods

    def bound(self, namespace: str) -> dict[str, str]:
        """pod name -> node name, for bound pods."""
        return {p["metadata"]["name"]: p["spec"]["nodeName"] for p in self.pods(namespace)
                if p["spec"].get("nodeName")}

    def scheduled_events(self, namespace: str) -> dict[str, int]:
        """pod name -> how many Scheduled events (counting repeats) name it."""
        resp = self.core.list_namespaced_event(namespace, _preload_content=False)
        out: dict[str, int] = {}
        for e in response_json(resp)["items"]:
            if e.get("reason") == "Scheduled":
                pod = e["involvedObject"]["name"]
                out[pod] = out.get(pod, 0) + int(e.get("count") or 1)
        return out


def pod_manifest(name: str, scheduler: str, labels: dict[str, str] | None = None
                 ) -> dict[str, Any]:
    return (make_pod().typed().name(name).labels(labels or {}).scheduler(scheduler)
            .zero_termination_grace_period()
            .container(image="registry.k8s.io/pause:3.10",
                       requests={"cpu": "10m", "memory": "16Mi"}).obj())


def zone_policy(name: str, zone: str, scheduler: str | None = None,
                **spec: Any) -> dict[str, Any]:
    """A policy whose only own filter keeps nodes labelled zone=<zone>."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "SchedulingPolicy",
        "metadata": {"name": name},
        "spec": {"schedulerName": scheduler or name,
                 "filters": [{"name": "NodeLabel", "args": {"requirements": [
                     {"key": "zone", "operator": "In", "values": [zone]}]}}],
                 **spec},
    }
