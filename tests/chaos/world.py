"""The pieces a chaos scenario is made of: a control plane whose kube-apiserver can be
killed and restarted, operator processes (as their ServiceAccount), kwok nodes, pods,
policies, and the invariant checks at the end of each scenario."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from polsched.objects import Json
from tests.builders import make_pod
from tests.chaos.invariants import Findings, Recorder, check_logs, wait_until
from tests.conftest import Cluster, node_manifest
from tests.e2e.operators import GROUP, PLURAL, VERSION, Harness, PolschedProcess, response_json

LABEL = "chaos.polsched.io/run"
# Faster than the defaults so that takeovers fit the suite's budget; the same code paths.
LEASE = ("--lease-duration", "10", "--renew-period", "1")


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:5]}"


def pod(name: str, scheduler: str, cpu: str = "100m", memory: str = "64Mi") -> Json:
    return (make_pod().typed().name(name).scheduler(scheduler).zero_termination_grace_period()
            .container(image="registry.k8s.io/pause:3.10",
                       requests={"cpu": cpu, "memory": memory}).obj())


def policy(name: str, run: str, **spec: Any) -> Json:
    """A policy whose only own filter keeps this scenario's nodes."""
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "SchedulingPolicy",
            "metadata": {"name": name},
            "spec": {"schedulerName": name,
                     "filters": [{"name": "NodeLabel", "args": {"requirements": [
                         {"key": LABEL, "operator": "In", "values": [run]}]}}],
                     **spec}}


def log_time(line: str) -> float | None:
    """The time of a log line ("2026-11-23 03:10:01,234 ...") as a Unix time."""
    m = re.match(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3})", line)
    if not m:
        return None
    return datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S").timestamp() + \
        int(m.group(2)) / 1000


def first_line_time(text: str, needle: str) -> float | None:
    for line in text.splitlines():
        if needle in line:
            return log_time(line)
    return None


class ControlPlane:
    """The cluster, plus killing and restarting its kube-apiserver."""

    def __init__(self, cluster: Cluster, directory: Path) -> None:
        self.cluster = cluster
        self.dir = directory

    def _pid(self) -> int:
        return int((self.dir / "kube-apiserver.pid").read_text().strip())

    def kill_apiserver(self) -> list[str]:
        """SIGKILL kube-apiserver; returns its command line to start it again."""
        pid = self._pid()
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not Path(f"/proc/{pid}").exists(), 10, 0.05)
        return [c.decode() for c in cmd]

    def start_apiserver(self, cmd: list[str]) -> None:
        log = (self.dir / "kube-apiserver.log").open("ab")
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, start_new_session=True)
        (self.dir / "kube-apiserver.pid").write_text(f"{p.pid}\n")
        def ready() -> bool:
            try:
                return self.cluster.kubectl("get", "--raw", "/readyz", check=False,
                                            timeout=5).returncode == 0
            except subprocess.TimeoutExpired:  # starting, on a loaded machine
                return False

        ok = wait_until(ready, 120, 0.2)
        if not ok:
            raise RuntimeError("kube-apiserver did not come back")


@dataclass
class Scenario:
    """One scenario's namespace, nodes, policies, processes and recorder."""

    world: World
    name: str
    run: str = ""
    namespace: str = ""
    nodes: list[str] = field(default_factory=list)
    policies: list[str] = field(default_factory=list)
    procs: dict[str, PolschedProcess] = field(default_factory=dict)
    killed: set[str] = field(default_factory=set)
    recorder: Recorder | None = None
    figures: dict[str, Any] = field(default_factory=dict)
    expected_binds: dict[str, int] = field(default_factory=dict)
    stop_errors: list[str] = field(default_factory=list)
    logs: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.run = unique(self.name)
        self.namespace = self.run
        self.world.cluster.kubectl("create", "namespace", self.namespace)

    @property
    def h(self) -> Harness:
        return self.world.harness

    # -- setup ------------------------------------------------------------------------------
    def make_nodes(self, count: int, cpu: str = "4", memory: str = "8Gi",
                   pods: str = "110", prefix: str = "n") -> list[str]:
        made = []
        docs = []
        for i in range(count):
            name = f"{self.run}-{prefix}{i}"
            docs.append(node_manifest(name, cpu=cpu, memory=memory, pods=pods,
                                      labels={LABEL: self.run}))
            made.append(name)
        self.world.cluster.apply(docs)
        self.nodes.extend(made)
        return made

    def apply_policy(self, body: Json) -> str:
        name = str(body["metadata"]["name"])
        if name not in self.policies:
            self.policies.append(name)
        self.world.cluster.apply(body)
        if self.recorder is not None:
            self.recorder.watch_policy(name)
        return name

    def operator(self, who: str, *args: str, identity: str | None = None) -> PolschedProcess:
        p = self.h.operator(f"{self.run}-{identity or who}", *LEASE, "--metrics-listen", "",
                            *args)
        self.procs[who] = p
        return p

    def process(self, who: str, kubeconfig: Path, *args: str) -> PolschedProcess:
        p = self.h.process(kubeconfig, *args)
        self.procs[who] = p
        return p

    def kill(self, who: str) -> None:
        """SIGKILL (no lease release, no last status write)."""
        self.procs[who].kill()
        self.killed.add(who)

    def stop(self, who: str) -> None:
        """SIGTERM, and wait for the process to end."""
        self.procs[who].stop()
        self.killed.add(who)
        proc = self.procs[who].proc
        code = proc.returncode if proc else None
        if code not in (0, None):
            self.stop_errors.append(f"{who} exited with {code} on SIGTERM")

    def start_recording(self) -> None:
        self.recorder = Recorder(self.world.cluster.kubeconfig, self.namespace,
                                 self.policies).start()

    # -- pods ---------------------------------------------------------------------------------
    def create_pods(self, names: Iterable[str], scheduler: str, cpu: str = "100m",
                    threads: int = 8) -> None:
        core = self.h.core

        def one(name: str) -> None:
            for _ in range(60):  # the API server may be down for a while
                try:
                    # The client takes a dict body too; its type hints name only V1Pod.
                    core.create_namespaced_pod(self.namespace, pod(name, scheduler, cpu),  # type: ignore[arg-type]
                                               _preload_content=False)
                    return
                except Exception as e:
                    if getattr(e, "status", None) == 409:
                        return
                    time.sleep(1)

        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(one, names))

    def stream(self, names: list[str], scheduler: str, per_second: float,
               cpu: str = "100m") -> threading.Thread:
        """Create pods at about `per_second` in the background."""
        def go() -> None:
            batch = max(int(per_second / 5), 1)
            for i in range(0, len(names), batch):
                t0 = time.monotonic()
                self.create_pods(names[i:i + batch], scheduler, cpu, threads=4)
                time.sleep(max(0.2 - (time.monotonic() - t0), 0))

        t = threading.Thread(target=go, daemon=True)
        t.start()
        return t

    def pods(self) -> list[Json]:
        for _ in range(30):
            try:
                resp = self.h.core.list_namespaced_pod(self.namespace, _preload_content=False)
                pods: list[Json] = response_json(resp)["items"]
                return pods
            except Exception:
                time.sleep(1)
        raise RuntimeError("listing pods failed")

    def bound(self, scheduler: str | None = None) -> dict[str, str]:
        return {p["metadata"]["name"]: p["spec"]["nodeName"] for p in self.pods()
                if p["spec"].get("nodeName")
                and (scheduler is None or p["spec"].get("schedulerName") == scheduler)}

    def wait_bound(self, count: int, timeout: float, scheduler: str | None = None) -> bool:
        return bool(wait_until(lambda: len(self.bound(scheduler)) >= count, timeout, 0.2))

    def status(self, name: str) -> Json:
        try:
            return self.h.status(name)
        except Exception:
            return {}

    # -- the end --------------------------------------------------------------------------------
    def finish(self, grace: float = 60) -> Findings:
        """Wait for the pods to be bound (grace), then check every invariant; stop the
        processes and remove what the scenario made."""
        f = Findings()
        wait_until(lambda: all(p["spec"].get("nodeName") for p in self.pods()), grace, 0.3)
        pods = self.pods()
        f.pods = len(pods)
        f.lost = [p["metadata"]["name"] for p in pods if not p["spec"].get("nodeName")]
        # Status exact: boundPods is what exists; bindsTotal every bind of this scenario
        # (pods are never deleted here, so each bound pod is one bind of its policy).
        for name in self.policies:
            sched = self.policy_scheduler(name)
            want_bound = len([p for p in pods if p["spec"].get("schedulerName") == sched
                              and p["spec"].get("nodeName")])
            want_binds = self.expected_binds.get(name, want_bound)

            def exact(name: str = name, b: int = want_bound, t: int = want_binds) -> bool:
                s = self.status(name)
                return s.get("boundPods") == b and s.get("bindsTotal") == t

            if not wait_until(exact, 20, 0.3):
                s = self.status(name)
                f.status_errors.append(
                    f"{name}: boundPods={s.get('boundPods')} (want {want_bound}) "
                    f"bindsTotal={s.get('bindsTotal')} (want {want_binds})")
        scheduled = self.h.scheduled_events(self.namespace)
        if self.recorder is not None:
            self.recorder.check(f, scheduled)
            self.recorder.stop()
        alive = {who: p.alive() for who, p in self.procs.items()}
        for p in self.procs.values():
            p.stop()
        logs = {who: p.log() for who, p in self.procs.items()}
        check_logs(f, logs, lambda who: alive[who] or who in self.killed)
        f.crashes.extend(self.stop_errors)
        self.logs = logs
        self.cleanup()
        return f

    def policy_scheduler(self, name: str) -> str:
        try:
            return str(self.h.policy(name)["spec"]["schedulerName"])
        except Exception:
            return name

    def cleanup(self) -> None:
        c = self.world.cluster
        for name in self.policies:
            c.kubectl("delete", "spol", name, "--ignore-not-found", "--wait=false",
                      check=False)
        c.kubectl("delete", "pods", "--all", "-n", self.namespace, "--force",
                  "--grace-period=0", "--wait=false", check=False)
        c.kubectl("delete", "namespace", self.namespace, "--wait=false", check=False)
        if self.nodes:
            c.kubectl("delete", "node", *self.nodes, "--ignore-not-found", "--wait=false",
                      check=False)


@dataclass
class World:
    cluster: Cluster
    harness: Harness
    plane: ControlPlane
    short: bool
    workdir: Path
    # The scenarios made so far, in order: a failed one's logs are shown from here.
    made: list[Scenario] = field(default_factory=list)

    def scenario(self, name: str) -> Scenario:
        s = Scenario(self, name)
        self.made.append(s)
        return s

    def policy_object(self, name: str) -> Json:
        return self.harness.policy(name)

    def plural(self) -> str:
        return PLURAL
