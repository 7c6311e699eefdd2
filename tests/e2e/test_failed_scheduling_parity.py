"""polsched's FailedScheduling text is kube-scheduler's, word for word.

The kube-scheduler that hack/ builds runs on the same objects in the same test: first it
schedules a set of pods, then polsched (default plugins) schedules an identical set on
the same nodes, and the notes of their FailedScheduling events must be the same set.
"""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from polsched.cluster.client import ApiClient
from polsched.objects import Json
from tests.conftest import Cluster, NodeFactory, unique
from tests.e2e.operators import free_port
from tests.e2e.scheduling import RUN, eventually, pod_manifest, run_engine

pytestmark = pytest.mark.e2e


class KubeScheduler:
    """kube-scheduler from hack/, one profile named `scheduler_name`, no leader election."""

    def __init__(self, cluster: Cluster, scheduler_name: str, workdir: Path,
                 args: tuple[str, ...] = ()) -> None:
        cfg = {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"kubeconfig": cluster.kubeconfig, "qps": 500, "burst": 500},
            "leaderElection": {"leaderElect": False},
            "profiles": [{"schedulerName": scheduler_name}],
        }
        path = workdir / "kube-scheduler.yaml"
        path.write_text(yaml.safe_dump(cfg))
        self.log = workdir / "kube-scheduler.log"
        self.proc = subprocess.Popen(
            [str(cluster.bin_dir / "kube-scheduler"), "--config", str(path),
             "--bind-address", "127.0.0.1", "--secure-port", str(free_port()), "--v", "2", *args],
            stdout=self.log.open("w"), stderr=subprocess.STDOUT)

    def stop(self) -> None:
        # Printed at teardown, shown by pytest only when the test failed: whether the
        # oracle was still running and what it last logged (--v 2 logs informer syncs,
        # failed attempts and binds), so that a failure of the oracle can be diagnosed.
        rc = self.proc.poll()
        state = "still running" if rc is None else f"exited with {rc}"
        tail = self.log.read_text(errors="replace").splitlines()[-60:]
        print(f"kube-scheduler {state}; last lines of {self.log}:", *tail, sep="\n")
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def kube_scheduler(cluster: Cluster, tmp_path: Path) -> Iterator[Any]:
    started: list[KubeScheduler] = []

    def start(name: str, *args: str) -> KubeScheduler:
        ks = KubeScheduler(cluster, name, tmp_path, args)
        started.append(ks)
        return ks

    yield start
    for ks in started:
        ks.stop()


async def notes_of_unbound(client: ApiClient, ns: str) -> set[str]:
    pods = (await client.get(f"/api/v1/namespaces/{ns}/pods"))["items"]
    unbound = {p["metadata"]["name"] for p in pods if not p["spec"].get("nodeName")}
    events = (await client.get(f"/apis/events.k8s.io/v1/namespaces/{ns}/events"))["items"]
    return {e["note"] for e in events if e.get("reason") == "FailedScheduling"
            and e["regarding"]["name"] in unbound}


async def schedule_and_collect(client: ApiClient, ns: str, pods: list[Json],
                               bound: int) -> set[str]:
    """Create `pods`, wait until `bound` are bound and every other one has a
    FailedScheduling event, and return the distinct notes of the unbound ones."""
    for p in pods:
        await client.post(f"/api/v1/namespaces/{ns}/pods", p)

    async def settled() -> set[str] | None:
        items = (await client.get(f"/api/v1/namespaces/{ns}/pods"))["items"]
        n_bound = sum(1 for p in items if p["spec"].get("nodeName"))
        events = (await client.get(f"/apis/events.k8s.io/v1/namespaces/{ns}/events"))["items"]
        failed = {e["regarding"]["name"] for e in events if e.get("reason") == "FailedScheduling"}
        unbound = {p["metadata"]["name"] for p in items if not p["spec"].get("nodeName")}
        if n_bound == bound and unbound <= failed:
            return await notes_of_unbound(client, ns)
        return None

    got: set[str] = await eventually(settled, timeout=90, what=f"{bound} bound in {ns}")
    return got


def both_schedulers(cluster: Cluster, kube_scheduler: Any, make_pods: Any, bound: int
                    ) -> tuple[set[str], set[str]]:
    kube_ns, ours_ns = unique("kube"), unique("ours")
    for ns in (kube_ns, ours_ns):
        cluster.kubectl("create", "namespace", ns)
    kube_name, ours_name = unique("kube-parity"), unique("polsched-parity")
    try:
        ks = kube_scheduler(kube_name)
        client_box: dict[str, set[str]] = {}

        async def kube_side() -> None:
            client = ApiClient.from_kubeconfig(cluster.kubeconfig)
            try:
                client_box["kube"] = await schedule_and_collect(
                    client, kube_ns, make_pods(kube_ns, kube_name), bound)
            finally:
                await client.close()

        asyncio.run(kube_side())
        ks.stop()
        # Free the nodes again before polsched schedules the same set.
        # kubectl deletes one pod at a time: 300 of them take over a minute on a shared
        # machine.
        cluster.kubectl("delete", "pods", "--all", "-n", kube_ns, "--force",
                        "--grace-period=0", timeout=300)

        async def ours(client: ApiClient) -> None:
            client_box["ours"] = await schedule_and_collect(
                client, ours_ns, make_pods(ours_ns, ours_name), bound)

        policy = {"apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
                  "metadata": {"name": ours_name, "generation": 1, "uid": unique("uid")},
                  "spec": {}}
        run_engine(cluster, [policy], ours)
        return client_box["kube"], client_box["ours"]
    finally:
        for ns in (kube_ns, ours_ns):
            cluster.kubectl("delete", "pods", "--all", "-n", ns, "--force", "--grace-period=0",
                            "--wait=false", check=False)
            cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def test_insufficient_cpu_text_matches_kube_scheduler(
        cluster: Cluster, nodes: NodeFactory, kube_scheduler: Any) -> None:
    """Scenario (b): 300 pods of 500m on 10 nodes of 4 CPU."""
    rid = unique("cpu")
    for i in range(10):
        nodes(f"{rid}-{i}", cpu="4", memory="32Gi", labels={RUN: rid})

    def make(ns: str, scheduler: str) -> list[Json]:
        return [pod_manifest(ns, f"p{i:03}", scheduler, rid, cpu="500m") for i in range(300)]

    kube, ours = both_schedulers(cluster, kube_scheduler, make, bound=80)
    assert any("Insufficient cpu" in n for n in kube), kube
    assert ours == kube


def test_untolerated_taint_text_matches_kube_scheduler(
        cluster: Cluster, nodes: NodeFactory, kube_scheduler: Any) -> None:
    rid = unique("taint")
    for i in range(2):
        nodes(f"{rid}-{i}", labels={RUN: rid},
              taints=[{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}])

    def make(ns: str, scheduler: str) -> list[Json]:
        return [pod_manifest(ns, "p", scheduler, rid)]

    kube, ours = both_schedulers(cluster, kube_scheduler, make, bound=0)
    assert any("untolerated taint" in n for n in kube), kube
    assert ours == kube
