"""`polsched simulate` against a live cluster that serves PodGroups (the gated control
plane, GenericWorkload on): it lists the PodGroups, places a gang all or nothing and
reports the members GangScheduling's PreEnqueue holds, with upstream's texts, and binds
and writes nothing; the engine, started afterwards with the same policy, then does what
simulate said (the gang's PodGroup condition carries simulate's group message)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from polsched.api import load_policy
from polsched.cluster.client import ApiClient
from polsched.commands import cli
from polsched.plugins import CATALOG
from polsched.scheduler.engine import Engine
from tests.conftest import Cluster, node_manifest, unique
from tests.e2e.scheduling import RUN, eventually, pod_manifest

GROUPS = "/apis/scheduling.k8s.io/v1beta1"

pytestmark = pytest.mark.e2e


def pod_group(ns: str, name: str, min_count: int) -> dict[str, Any]:
    return {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}}}


def apply_when_admitted(c: Cluster, docs: list[dict[str, Any]]) -> None:
    """Pods of a new namespace are refused until its default ServiceAccount exists."""
    deadline = time.monotonic() + 60
    while True:
        try:
            c.apply(docs)
            return
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def initially_scheduled(pod_group: dict[str, Any]) -> dict[str, Any] | None:
    return next((x for x in (pod_group.get("status") or {}).get("conditions") or ()
                 if x.get("type") == "PodGroupInitiallyScheduled"), None)


async def engine_outcome(c: Cluster, ns: str, policy: dict[str, Any]
                         ) -> tuple[str, dict[str, str]]:
    """Run the engine with `policy` until the PodGroup `tight` has its first
    PodGroupInitiallyScheduled condition and z-later is bound: that first condition's
    message and every pod's node then.

    The first one, seen on a watch opened before the engine starts: the engine's first
    attempt at the group is the one simulate predicts. It is not the last: the members
    that fit in that attempt are rejected with the group's status and no rejecting plugin,
    so any event requeues the group (upstream's isPodWorthRequeuing; the condition's own
    status patch is one), and its next attempt, after z-later took the room, says "0
    scheduled, 1 remaining". Reading the condition whenever z-later shows bound raced
    that second attempt on a loaded machine."""
    client = ApiClient.from_kubeconfig(c.kubeconfig)
    engine = Engine(client)
    path = f"{GROUPS}/namespaces/{ns}/podgroups"
    start = await client.get(f"{path}/tight")
    assert initially_scheduled(start) is None, start  # simulate wrote nothing
    first: list[str] = []

    async def watch() -> None:
        rv = start["metadata"]["resourceVersion"]
        while True:  # a watch the server ends is resumed from the last version seen
            async for kind, obj in client.watch(path, resource_version=rv,
                                                field_selector="metadata.name=tight"):
                rv = obj["metadata"].get("resourceVersion") or rv
                cond = initially_scheduled(obj) if kind == "MODIFIED" else None
                if cond is not None:
                    first.append(str(cond["message"]))
                    return

    watching = asyncio.get_running_loop().create_task(watch())
    try:
        await engine.start()
        engine.apply(load_policy({**policy, "metadata": {
            **policy["metadata"], "generation": 1, "uid": unique("uid")}}, CATALOG))

        async def settled() -> bool:
            if watching.done():
                watching.result()  # a failed watch fails the test, not a timeout
            bound = await client.get(f"/api/v1/namespaces/{ns}/pods/z-later")
            return bool(first and bound["spec"].get("nodeName"))

        await eventually(settled, 60, what="the gang tried, z-later bound")
        pods = (await client.get(f"/api/v1/namespaces/{ns}/pods")).get("items") or ()
        return first[0], {p["metadata"]["name"]: p["spec"].get("nodeName") or ""
                          for p in pods}
    finally:
        watching.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watching
        await engine.stop()
        await client.close()


def test_live_simulate_places_a_gang_all_or_nothing_and_reports_held_members(
        gated: tuple[Cluster, Path], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    c, _ = gated
    rid = unique("gsim")
    ns, scheduler, node = rid, unique("polsched-gsim"), f"{rid}-n"
    c.kubectl("create", "namespace", ns)
    try:
        c.apply([node_manifest(node, cpu="4", labels={RUN: rid}),
                 pod_group(ns, "tight", 2), pod_group(ns, "short", 3)])

        def member(name: str, group: str, cpu: str) -> dict[str, Any]:
            return pod_manifest(ns, name, scheduler, rid, cpu,
                                schedulingGroup={"podGroupName": group})

        apply_when_admitted(c, [
            # minCount 2, 3 CPUs each, one node of 4 CPUs: the group does not fit.
            member("t1", "tight", "3"), member("t2", "tight", "3"),
            # minCount 3 with one member, and a member whose PodGroup does not exist.
            member("s1", "short", "1"), member("g1", "ghost", "1")])
        # Created last (and named last: creationTimestamp has seconds, and the queue
        # breaks ties by name), so queued after the gang: it gets the room the gang does
        # not hold.
        apply_when_admitted(c, [pod_manifest(ns, "z-later", scheduler, rid, "3")])
        policy = tmp_path / "policy.yaml"
        policy.write_text(yaml.safe_dump({
            "apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
            "metadata": {"name": scheduler}, "spec": {"schedulerName": scheduler}}))
        before = c.kubectl_json("get", "pods", "-n", ns)

        code = cli.main(["simulate", "-f", str(policy), "--kubeconfig", c.kubeconfig,
                         "--baseline", "none", "-o", "json"])
        out, err = capsys.readouterr()
        assert code == 0, err
        doc = json.loads(out)
        pods = {p["name"]: p for p in doc["pods"]}
        assert {k: p["node"] for k, p in pods.items()} == {
            "t1": None, "t2": None, "z-later": node, "s1": None, "g1": None}
        groups = {g["podGroup"]: g for g in doc["podGroups"]}
        assert groups[f"{ns}/tight"]["outcome"] == "not placed"
        assert groups[f"{ns}/tight"]["message"].startswith(
            "minCount (2) cannot be satisfied: 1 scheduled, 0 remaining")
        assert pods["s1"]["reason"] == \
            "waiting for minCount pods from a gang to appear in scheduling queue"
        assert pods["g1"]["reason"] == \
            'waiting for pods\'s pod group "ghost" to appear in scheduling queue'
        assert groups[f"{ns}/ghost"]["kind"] == "unknown"
        assert doc["summary"]["gangs"] == {"total": 2, "placed": 0, "notPlaced": 1,
                                           "waiting": 1, "error": 0}
        # Nothing was bound or written.
        after = c.kubectl_json("get", "pods", "-n", ns)
        assert [p["metadata"]["resourceVersion"] for p in after["items"]] == \
            [p["metadata"]["resourceVersion"] for p in before["items"]]
        assert all(not p["spec"].get("nodeName") for p in after["items"])

        # The engine, started now with the same policy, does what simulate said: the
        # gang's PodGroup gets simulate's message, z-later the node, the gang nothing.
        got = asyncio.run(engine_outcome(c, ns, yaml.safe_load(policy.read_text())))
        assert got == (groups[f"{ns}/tight"]["message"],
                       {"t1": "", "t2": "", "z-later": node, "s1": "", "g1": ""})
    finally:
        c.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        c.kubectl("delete", "node", node, "--wait=false", check=False)
