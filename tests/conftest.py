"""Test fixtures shared by every suite.

e2e tests run against a real kube-apiserver: the session fixture `cluster` starts one
with hack/cluster.sh in a private directory (or reuses the one from `make cluster` when
POLSCHED_KUBECONFIG is set), installs crds/ and tears it all down at the end. There is no
fallback and no skip: if the control plane cannot start, every e2e test errors.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from polsched.cluster.crdwait import wait_established
from tests.builders import make_node

ROOT = Path(__file__).resolve().parent.parent
HACK = ROOT / "hack"


class Cluster:
    """A running control plane: its kubeconfig, binaries and a kubectl wrapper."""

    def __init__(self, kubeconfig: str, bin_dir: Path) -> None:
        self.kubeconfig = kubeconfig
        self.bin_dir = bin_dir
        self.env = {**os.environ, "KUBECONFIG": kubeconfig}
        self._api: Any = None

    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                timeout: float = 60) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(["kubectl", *args], input=input, capture_output=True, text=True,
                              env=self.env, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({proc.returncode}):\n"
                                 f"{proc.stdout}\n{proc.stderr}")
        return proc

    def kubectl_json(self, *args: str) -> Any:
        return json.loads(self.kubectl(*args, "-o", "json").stdout)

    def apply(self, manifest: str | dict[str, Any] | list[dict[str, Any]]) -> None:
        if not isinstance(manifest, str):
            docs = manifest if isinstance(manifest, list) else [manifest]
            manifest = json.dumps({"apiVersion": "v1", "kind": "List", "items": docs})
        self.kubectl("apply", "-f", "-", input=manifest)

    @property
    def api(self) -> Any:
        """A kubernetes.client.ApiClient (sync) for test setup and assertions."""
        if self._api is None:
            from kubernetes import client, config

            cfg = client.Configuration()
            # The client's config loaders carry no type hints.
            config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=self.kubeconfig, client_configuration=cfg)
            self._api = client.ApiClient(cfg)
        return self._api


def _wait_ready(cluster: Cluster, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        p = cluster.kubectl("get", "--raw", "/readyz", check=False)
        if p.returncode == 0 and p.stdout.strip() == "ok":
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"kube-apiserver not ready: {p.stdout} {p.stderr}")
        time.sleep(0.2)


def install_crds(cluster: Cluster) -> None:
    crds = sorted((ROOT / "crds").glob("*.yaml"))
    if not crds:
        return
    for f in crds:
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(f))
    # Not `kubectl wait`: it fails on a CRD whose status.conditions is still null.
    wait_established(None, env=cluster.env)


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    bin_dir = Path(subprocess.run([str(HACK / "build.sh")], check=True, capture_output=True,
                                  text=True).stdout.strip())
    reuse = os.environ.get("POLSCHED_KUBECONFIG")
    if reuse:
        c = Cluster(reuse, bin_dir)
        _wait_ready(c)
        install_crds(c)
        yield c
        return
    with tempfile.TemporaryDirectory(prefix="polsched-e2e-") as d:
        up = subprocess.run([str(HACK / "cluster.sh"), "up", d], capture_output=True, text=True)
        if up.returncode != 0:
            subprocess.run([str(HACK / "cluster.sh"), "down", d], capture_output=True)
            raise RuntimeError(f"the control plane did not start:\n{up.stderr}")
        try:
            c = Cluster(str(Path(d) / "kubeconfig"), bin_dir)
            _wait_ready(c)
            install_crds(c)
            yield c
        finally:
            subprocess.run([str(HACK / "cluster.sh"), "down", d], capture_output=True)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def namespace(cluster: Cluster) -> Iterator[str]:
    """A fresh namespace; its pods are force-deleted afterwards so no kubelet is needed."""
    name = unique("t")
    cluster.kubectl("create", "namespace", name)
    yield name
    cluster.kubectl("delete", "pods", "--all", "-n", name, "--force", "--grace-period=0",
                    "--wait=false", check=False)
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


NodeFactory = Callable[..., str]


def node_manifest(name: str, cpu: str = "4", memory: str = "8Gi", pods: str = "110",
                  labels: dict[str, str] | None = None,
                  taints: list[dict[str, str]] | None = None,
                  extra: dict[str, str] | None = None) -> dict[str, Any]:
    """A fake node that kwok keeps Ready (annotation kwok.x-k8s.io/node=fake)."""
    return (make_node().typed().name(name)
            .labels({"kubernetes.io/hostname": name, **(labels or {})})
            .annotation("kwok.x-k8s.io/node", "fake").taints(taints or [])
            .capacity({"cpu": cpu, "memory": memory, "pods": pods, **(extra or {})}).obj())


@pytest.fixture
def nodes(cluster: Cluster) -> Iterator[NodeFactory]:
    """make(name, cpu=..., memory=..., labels=..., taints=...) creates a node; all are
    deleted after the test."""
    made: list[str] = []

    def make(name: str, **kw: Any) -> str:
        cluster.apply(node_manifest(name, **kw))
        made.append(name)
        return name

    yield make
    if made:
        cluster.kubectl("delete", "node", *made, "--wait=false", check=False)


_E2E_RAN: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" and ("e2e" in report.keywords or "install" in report.keywords) \
            and not report.skipped:
        _E2E_RAN.append(report.nodeid)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # .ci/run reads this to fail a run whose e2e tests were skipped or deselected.
    out = os.environ.get("POLSCHED_E2E_COUNT_FILE")
    if out:
        Path(out).write_text(f"{len(_E2E_RAN)}\n")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Tests under tests/e2e, tests/unit and tests/install carry their marker without
    # repeating it.
    for item in items:
        parts = Path(str(item.fspath)).relative_to(ROOT / "tests").parts
        # (get_closest_marker, not keywords: the directory's own name is a keyword.)
        if parts and parts[0] in ("e2e", "unit", "install") \
                and item.get_closest_marker(parts[0]) is None:
            item.add_marker(getattr(pytest.mark, parts[0]))
