"""The three schedulers under test, each a subprocess the bench starts and stops per run.

- kube: kube-scheduler from hack/build.sh, default profile, KubeSchedulerConfiguration v1
  with clientConnection qps/burst raised (KUBE_QPS/KUBE_BURST, reported in the results),
  leader election off, the admin kubeconfig, no serving port (--secure-port 0).
- noop: bench/noop_binder.py, the ceiling: polsched's writes (Binding + Scheduled event,
  same client settings) and no decision.
- polsched: the operator (`polsched run`, Shared mode) with a SchedulingPolicy applied;
  while `polsched run` is not there, bench/polsched_engine.py runs an Engine for the one
  policy (same scheduling code, no operator: no status, so no hot-reload measurement).

A runner only starts and stops its process; the bench's warm-up pod (run.py) proves that
it schedules before anything is measured.
"""

from __future__ import annotations

import asyncio
import compileall
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from bench import many
from bench import workloads as wl
from polsched.cluster import featuregates
from polsched.cluster.crdwait import wait_established

ROOT = Path(__file__).resolve().parent.parent
KUBE_QPS = 5000
KUBE_BURST = 5000
POLICY_NAME = "bench-polsched"
POLICY_COLLECTION = "/apis/polsched.io/v1alpha1/schedulingpolicies"


def precompile() -> None:
    """Write polsched's bytecode before a Python scheduler starts (not timed). An installed
    polsched has it: pip compiles a wheel's modules at install, and the image runs
    compileall. A checkout's editable install under PYTHONDONTWRITEBYTECODE=1 (this
    machine's environment) has none, so every start compiled ~90 modules from source:
    ~0.35 s of CPU counted against polsched and the no-op binder (bench/NOTES.md
    "Issue 15, fourth pass: start-up"). Up-to-date files are skipped."""
    import polsched

    for pkg in polsched.__path__:
        compileall.compile_dir(pkg, quiet=1)


class Runner:
    key = ""
    scheduler_name = ""

    def __init__(self, kubeconfig: str, bin_dir: Path, workdir: Path) -> None:
        self.kubeconfig = kubeconfig
        self.bin_dir = bin_dir
        self.workdir = workdir
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0
        self.log_path: Path | None = None
        self.notes: dict[str, Any] = {}

    def settings(self) -> dict[str, Any]:
        return {"scheduler_name": self.scheduler_name}

    def unavailable(self) -> str | None:
        """Why this scheduler cannot run here, or None."""
        return None

    def command(self, workload: wl.Workload, extender_url: str | None) -> list[str]:
        raise NotImplementedError

    def start(self, workload: wl.Workload, extender_url: str | None) -> None:
        self.log_path = self.workdir / f"{workload.name}-{self.key}.log"
        cmd = self.command(workload, extender_url)
        if cmd[0] == sys.executable:  # polsched or the no-op binder
            precompile()
        # When the process starts (after any setup, such as polsched's kubectl applies):
        # the backlog mode's clock starts here.
        self.started_at = time.monotonic()
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL,
                                         env={**os.environ, "KUBECONFIG": self.kubeconfig},
                                         start_new_session=True)

    def wait_started(self, timeout: float = 60) -> None:
        """Return once the process says it is up (schedulers that print a line)."""

    def _wait_line(self, text: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        assert self.proc is not None and self.log_path is not None
        while time.monotonic() < deadline:
            if text in self.log_path.read_text(errors="replace"):
                return
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.key} exited with {self.proc.returncode}: "
                                   f"{self.tail()}")
            time.sleep(0.05)
        raise RuntimeError(f"{self.key} did not print {text!r} in {timeout}s: {self.tail()}")

    def tail(self, lines: int = 15) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        # Its session's other processes too (a wrapper's child: bench/startup_probe.py runs
        # polsched under py-spy, which did not pass the SIGTERM on, and the scheduler left
        # behind bound the next run's pods).
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc = None

    def cleanup_cluster(self, kubectl: Any) -> None:
        """Remove what start() put into the cluster (besides pods and nodes)."""


class KubeScheduler(Runner):
    key = "kube"

    def __init__(self, *a: Any, scheduler_name: str = "default-scheduler") -> None:
        super().__init__(*a)
        self.scheduler_name = scheduler_name

    def settings(self) -> dict[str, Any]:
        return {"scheduler_name": self.scheduler_name, "client_qps": KUBE_QPS,
                "client_burst": KUBE_BURST, "profile": "default plugins",
                "leader_election": False, "binary": str(self.bin_dir / "kube-scheduler")}

    def unavailable(self) -> str | None:
        if not (self.bin_dir / "kube-scheduler").exists():
            return f"no kube-scheduler in {self.bin_dir}"
        return None

    def command(self, workload: wl.Workload, extender_url: str | None) -> list[str]:
        cfg: dict[str, Any] = {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"kubeconfig": self.kubeconfig, "qps": KUBE_QPS,
                                 "burst": KUBE_BURST},
            "leaderElection": {"leaderElect": False},
            "profiles": [{"schedulerName": n,
                          **({"pluginConfig": list(workload.plugin_config)}
                             if workload.plugin_config else {})}
                         for n in many.scheduler_names(workload, self.scheduler_name)],
        }
        if workload.extender and extender_url:
            cfg["extenders"] = [{"urlPrefix": extender_url, "enableHTTPS": False,
                                 **wl.EXTENDER_CONFIG}]
        path = self.workdir / f"{workload.name}-kube-scheduler.yaml"
        path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        return [str(self.bin_dir / "kube-scheduler"), "--config", str(path),
                "--secure-port", "0", "--v", "0",
                *featuregates.kube_scheduler_args(
                    {featuregates.ENV: workload.gates} if workload.gates else None)]


class NoopBinder(Runner):
    """The ceiling: bench/noop_binder.py, a Binding and a Scheduled event per pod with
    polsched's write settings, and no decision."""

    key = "noop"
    scheduler_name = "bench-noop"

    def settings(self) -> dict[str, Any]:
        from bench.noop_binder import polsched_defaults

        return {"scheduler_name": self.scheduler_name, **polsched_defaults(),
                "writes": "Binding + Scheduled event (events.k8s.io/v1) per pod"}

    def command(self, workload: wl.Workload, extender_url: str | None) -> list[str]:
        return [sys.executable, str(ROOT / "bench" / "noop_binder.py"),
                "--kubeconfig", self.kubeconfig, "--scheduler-name",
                ",".join(many.scheduler_names(workload, self.scheduler_name)),
                "--node-selector", f"{wl.NODE_LABEL}=true"]

    def wait_started(self, timeout: float = 60) -> None:
        self._wait_line("ready", timeout)


def polsched_policy(workload: wl.Workload, extender_url: str | None,
                    name: str = POLICY_NAME) -> dict[str, Any]:
    spec: dict[str, Any] = {"schedulerName": name, **workload.policy_spec()}
    if workload.shadow:  # the shadow needs the live policy's consent (spec.allowedShadows)
        spec["allowedShadows"] = [SHADOW_NAME]
    if workload.extender and extender_url:
        spec["extenders"] = [{"urlPrefix": extender_url, **wl.EXTENDER_CONFIG}]
    return {"apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
            "metadata": {"name": name}, "spec": spec}


SHADOW_NAME = "bench-polsched-shadow"


def shadow_policy() -> dict[str, Any]:
    return {"apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
            "metadata": {"name": SHADOW_NAME},
            "spec": {"shadowOf": POLICY_NAME, **wl.shadow_spec()}}


def operator_available() -> bool:
    """Whether this checkout has `polsched run` (the operator)."""
    try:
        p = subprocess.run([sys.executable, "-m", "polsched.commands.cli", "run", "--help"],
                           capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return p.returncode == 0


def engine_available() -> bool:
    try:
        from polsched.scheduler.engine import Engine  # noqa: F401
    except Exception:
        return False
    return True


class Polsched(Runner):
    key = "polsched"
    scheduler_name = POLICY_NAME

    def __init__(self, *a: Any, mode: str = "auto") -> None:
        super().__init__(*a)
        if mode == "auto":
            mode = "operator" if operator_available() else "engine"
        self.mode = mode  # operator: `polsched run`; engine: bench/polsched_engine.py

    def settings(self) -> dict[str, Any]:
        how = ("polsched run (the operator), policy runtime.mode Shared"
               if self.mode == "operator" else
               "bench/polsched_engine.py: one Engine for the policy, no operator")
        return {"scheduler_name": self.scheduler_name, "runner": how, "mode": self.mode,
                "default_plugins": True, "client_qps": KUBE_QPS, "client_burst": KUBE_BURST}

    def unavailable(self) -> str | None:
        if self.mode == "engine" and not engine_available():
            return "polsched.scheduler.engine.Engine is not importable yet"
        return None

    @property
    def reloads(self) -> bool:
        """Whether policy edits reach the scheduler (only the operator hot-reloads)."""
        return self.mode == "operator"

    def start(self, workload: wl.Workload, extender_url: str | None) -> None:
        # One policy per scheduler name (many: bench-polsched-00 .. -49).
        self._names = many.scheduler_names(workload, POLICY_NAME)
        self._policy_file = self.workdir / f"{workload.name}-policy.yaml"
        self._policy_file.write_text(yaml.safe_dump_all(
            [polsched_policy(workload, extender_url, n) for n in self._names],
            sort_keys=False))
        if self.mode == "operator":
            self._kubectl("apply", "--server-side", "--force-conflicts", "-f",
                          str(ROOT / "crds"))
            wait_established(["schedulingpolicies.polsched.io"],
                             env={**os.environ, "KUBECONFIG": self.kubeconfig})
            self._kubectl("apply", "-f", str(self._policy_file))
            self._shadow = workload.shadow
            if workload.shadow:
                shadow_file = self.workdir / f"{workload.name}-shadow.yaml"
                shadow_file.write_text(yaml.safe_dump(shadow_policy(), sort_keys=False))
                self._kubectl("apply", "-f", str(shadow_file))
        super().start(workload, extender_url)

    def command(self, workload: wl.Workload, extender_url: str | None) -> list[str]:
        python = [sys.executable]
        # BENCH_PROFILE_DIR=d: run polsched under cProfile, stats in d/<workload>.prof
        # (written when SIGTERM stops it; read with pstats). Profiling slows it down.
        prof_dir = os.environ.get("BENCH_PROFILE_DIR")
        if prof_dir:
            python += ["-m", "cProfile", "-o", str(Path(prof_dir) / f"{workload.name}.prof")]
        if self.mode == "operator":
            # The Lease lives in the bench namespace: the run needs no polsched-system.
            # /metrics on a free port (metrics_url): the reload signal's source.
            # The same client-side budget as kube-scheduler's clientConnection here.
            return [*python, "-m", "polsched.commands.cli", "run", "--kubeconfig",
                    self.kubeconfig, "--namespace", wl.NAMESPACE, "--identity", "bench",
                    "--metrics-listen", "127.0.0.1:0",
                    "--kube-api-qps", str(KUBE_QPS), "--kube-api-burst", str(KUBE_BURST)]
        return [*python, str(ROOT / "bench" / "polsched_engine.py"),
                "--kubeconfig", self.kubeconfig, "--policy", str(self._policy_file)]

    def wait_started(self, timeout: float = 120) -> None:
        if self.mode == "engine":
            self._wait_line("ready", timeout)
            return
        # One LIST over HTTPS every 0.1 s (polsched's own client, in this thread's loop):
        # a kubectl process per poll cost the machine ~0.1-0.2 s of CPU each, taken from
        # the scheduler's start-up that the backlog clock counts.
        asyncio.run(self._wait_ready(timeout))

    async def _wait_ready(self, timeout: float) -> None:
        from polsched.cluster.client import ApiClient, ApiError

        wanted = set(self._names)
        if getattr(self, "_shadow", False):
            wanted.add(SHADOW_NAME)
        client = ApiClient.from_kubeconfig(self.kubeconfig)
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                assert self.proc is not None
                if self.proc.poll() is not None:
                    raise RuntimeError(f"polsched run exited with {self.proc.returncode}: "
                                       f"{self.tail()}")
                try:
                    items = (await client.list(POLICY_COLLECTION))["items"]
                except ApiError:
                    items = []

                def ready(obj: dict[str, Any]) -> bool:
                    st = obj.get("status") or {}
                    ok = any(c.get("type") == "Ready" and c.get("status") == "True"
                             for c in st.get("conditions") or ())
                    # A shadow reports Ready; a policy also its observed generation.
                    return ok and (obj["metadata"]["name"] == SHADOW_NAME
                                   or st.get("observedGeneration")
                                   == obj["metadata"]["generation"])
                done = {o["metadata"]["name"] for o in items if ready(o)}
                if wanted <= done:
                    return
                await asyncio.sleep(0.1)
        finally:
            await client.close()
        raise RuntimeError(f"policy {POLICY_NAME} not Ready in {timeout}s: {self.tail()}")

    def metrics_url(self) -> str:
        """The operator's /metrics, from the line it logs when it serves it."""
        import re

        found = re.search(r"serving /metrics\S* .*? on (http://\S+)",
                          self.log_path.read_text(errors="replace") if self.log_path else "")
        if found is None:
            raise RuntimeError(f"polsched did not log its metrics address: {self.tail()}")
        return found.group(1) + "/metrics"

    def shadow_status(self) -> dict[str, Any] | None:
        """The shadow's status.shadow (agreement counts), if this run had one."""
        if not getattr(self, "_shadow", False):
            return None
        p = self._kubectl("get", "spol", SHADOW_NAME, "-o", "json", check=False)
        if p.returncode != 0:
            return None
        out: dict[str, Any] = (json.loads(p.stdout).get("status") or {}).get("shadow") or {}
        return out

    def cleanup_cluster(self, kubectl: Any) -> None:
        if self.mode == "operator":
            self._kubectl("delete", "spol", SHADOW_NAME, "--ignore-not-found", "--wait=true",
                          check=False)
            self._kubectl("delete", "spol", *getattr(self, "_names", [POLICY_NAME]),
                          "--ignore-not-found", "--wait=true", check=False)

    def _kubectl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        p = subprocess.run(["kubectl", *args], capture_output=True, text=True, timeout=120,
                           env={**os.environ, "KUBECONFIG": self.kubeconfig})
        if check and p.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {p.stderr.strip()}")
        return p


RUNNERS: dict[str, type[Runner]] = {"kube": KubeScheduler, "noop": NoopBinder,
                                    "polsched": Polsched}
