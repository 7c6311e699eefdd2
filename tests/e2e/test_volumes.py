"""Pods with volumes, scheduled by polsched's default plugins against the real API server
and kube-controller-manager's PV binder (hack/cluster.sh), kwok playing the kubelets.

- A StatefulSet with volumeClaimTemplates on a WaitForFirstConsumer class of local PVs
  pinned to nodes: VolumeBinding picks a PV per pod, Reserve keeps the next pod off it,
  PreBind writes the PV's claimRef, the PV controller binds the claim, then the pod binds,
  on the node its PV allows.
- Pods that cannot get their volumes wait with kube-scheduler's own FailedScheduling text:
  the kube-scheduler built by hack/ runs on the same objects and the notes must be equal.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from polsched.api import load_policy
from polsched.cluster.client import ApiClient
from polsched.objects import Json
from polsched.plugins import CATALOG
from polsched.scheduler.engine import Engine
from tests.conftest import Cluster, NodeFactory, unique
from tests.e2e.rbac import (
    OPERATOR_NAMESPACE,
    OPERATOR_SA,
    install_rbac,
    service_account_kubeconfig,
)
from tests.e2e.scheduling import RUN, eventually, nodes_ready, pod_manifest, run_engine
from tests.e2e.test_failed_scheduling_parity import KubeScheduler, notes_of_unbound

pytestmark = pytest.mark.e2e
HOSTNAME = "kubernetes.io/hostname"


def policy(name: str) -> Json:
    """The default profile, nothing else."""
    return {"apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
            "metadata": {"name": name, "generation": 1, "uid": unique("uid")}, "spec": {}}


def storage_class(name: str, mode: str) -> Json:
    return {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": name}, "provisioner": "kubernetes.io/no-provisioner",
            "volumeBindingMode": mode}


def local_pv(name: str, sc: str, node: str, size: str = "1Gi",
             modes: tuple[str, ...] = ("ReadWriteOnce",)) -> Json:
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
            "spec": {"capacity": {"storage": size}, "accessModes": list(modes),
                     "persistentVolumeReclaimPolicy": "Retain", "storageClassName": sc,
                     "local": {"path": f"/mnt/{name}"},
                     "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                         {"key": HOSTNAME, "operator": "In", "values": [node]}]}]}}}}


def claim(ns: str, name: str, sc: str, size: str = "1Gi",
          modes: tuple[str, ...] = ("ReadWriteOnce",)) -> Json:
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"accessModes": list(modes), "storageClassName": sc,
                     "resources": {"requests": {"storage": size}}}}


def with_claims(pod: Json, *claims: str) -> Json:
    pod["spec"]["volumes"] = [{"name": f"v{i}", "persistentVolumeClaim": {"claimName": c}}
                              for i, c in enumerate(claims)]
    return pod


async def claim_phases(client: ApiClient, ns: str) -> dict[str, str]:
    items = (await client.get(f"/api/v1/namespaces/{ns}/persistentvolumeclaims"))["items"]
    return {c["metadata"]["name"]: (c.get("status") or {}).get("phase", "") for c in items}


def test_statefulset_on_wait_for_first_consumer_local_pvs_binds_each_pod_to_its_pv_node(
        cluster: Cluster, nodes: NodeFactory, namespace: str, tmp_path: Path) -> None:
    """The scheduler runs as the operator's ServiceAccount (manifests/rbac): its PreBind
    writes the PVs' claimRef with those permissions only."""
    install_rbac(cluster)
    operator_kubeconfig = service_account_kubeconfig(
        cluster, OPERATOR_NAMESPACE, OPERATOR_SA, tmp_path / "operator.kubeconfig")
    rid = unique("sts")
    names = [nodes(f"{rid}-{i}", labels={RUN: rid}) for i in range(3)]
    sc = unique("local-wffc")
    pvs = [local_pv(f"{rid}-pv-{i}", sc, n) for i, n in enumerate(names)]
    scheduler = unique("polsched-sts")
    sts = {"apiVersion": "apps/v1", "kind": "StatefulSet",
           "metadata": {"name": "web", "namespace": namespace},
           "spec": {"replicas": 3, "serviceName": "web",
                    "selector": {"matchLabels": {"app": rid}},
                    "template": {"metadata": {"labels": {"app": rid}},
                                 "spec": {"schedulerName": scheduler,
                                          "nodeSelector": {RUN: rid},
                                          "terminationGracePeriodSeconds": 0,
                                          "containers": [{"name": "c", "image": "busybox"}]}},
                    "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {
                        "accessModes": ["ReadWriteOnce"], "storageClassName": sc,
                        "resources": {"requests": {"storage": "1Gi"}}}}]}}
    cluster.apply([storage_class(sc, "WaitForFirstConsumer"), *pvs])
    try:
        async def body(client: ApiClient) -> None:
            await nodes_ready(client, names)
            await client.post(f"/apis/apps/v1/namespaces/{namespace}/statefulsets", sts)

            async def settled() -> dict[str, tuple[str, str]] | None:
                pods = (await client.get(f"/api/v1/namespaces/{namespace}/pods"))["items"]
                claims = {c["metadata"]["name"]: c for c in (await client.get(
                    f"/api/v1/namespaces/{namespace}/persistentvolumeclaims"))["items"]}
                out: dict[str, tuple[str, str]] = {}
                for p in pods:
                    c = claims.get(f"data-{p['metadata']['name']}")
                    if not p["spec"].get("nodeName") or c is None \
                            or c["status"].get("phase") != "Bound" \
                            or p["status"].get("phase") != "Running":
                        return None
                    out[p["metadata"]["name"]] = (p["spec"]["nodeName"], c["spec"]["volumeName"])
                return out if len(out) == 3 else None

            placed = await eventually(settled, timeout=120,
                                      what="3 StatefulSet pods Running with Bound claims")
            pv_node = {pv["metadata"]["name"]: n for pv, n in zip(pvs, names, strict=True)}
            for pod, (node, volume) in placed.items():
                assert pv_node[volume] == node, (pod, node, volume)
            assert sorted(n for n, _ in placed.values()) == sorted(names)

        async def main() -> None:
            admin = ApiClient.from_kubeconfig(cluster.kubeconfig)
            operator = ApiClient.from_kubeconfig(str(operator_kubeconfig))
            engine = Engine(operator)
            try:
                await engine.start()
                engine.apply(load_policy(policy(scheduler), CATALOG))
                await body(admin)
            finally:
                await engine.stop()
                await operator.close()
                await admin.close()

        asyncio.run(main())
    finally:
        cluster.kubectl("delete", "statefulset", "web", "-n", namespace, "--wait=false",
                        check=False)
        cluster.kubectl("delete", "pv", *(p["metadata"]["name"] for p in pvs), "--wait=false",
                        check=False)
        cluster.kubectl("delete", "storageclass", sc, "--wait=false", check=False)


# -- the same unschedulable pods under kube-scheduler and polsched ---------------------------


async def volume_scenarios(client: ApiClient, ns: str, scheduler: str, tag: str,
                           rid: str, node_a: str, node_b: str) -> list[str]:
    """Create, in `ns`, the objects and pods of the scenarios, scheduled by `scheduler`;
    `tag` keeps this side's cluster-scoped objects (PVs, classes) apart. Returns the pods
    that must stay unbound."""
    imm, imm_empty = f"{tag}-imm", f"{tag}-imm-empty"
    for sc in (storage_class(imm, "Immediate"), storage_class(imm_empty, "Immediate")):
        await client.post("/apis/storage.k8s.io/v1/storageclasses", sc)
    # A PV on node a, its claim bound at once by the PV controller (Immediate).
    await client.post("/api/v1/persistentvolumes", local_pv(f"{tag}-on-a", imm, node_a))
    # A ReadWriteOncePod volume, on node b.
    await client.post("/api/v1/persistentvolumes",
                      local_pv(f"{tag}-rwop", imm, node_b, modes=("ReadWriteOncePod",)))
    base = f"/api/v1/namespaces/{ns}/persistentvolumeclaims"
    await client.post(base, claim(ns, "on-a", imm))
    await client.post(base, claim(ns, "rwop", imm, modes=("ReadWriteOncePod",)))
    # An Immediate claim no PV can satisfy: it stays Pending.
    await client.post(base, claim(ns, "never", imm_empty))

    async def bound() -> bool:
        phases = await claim_phases(client, ns)
        return phases.get("on-a") == "Bound" and phases.get("rwop") == "Bound"

    await eventually(bound, timeout=60, what="the PV controller binds the Immediate claims")

    pods = f"/api/v1/namespaces/{ns}/pods"
    # The first user of the ReadWriteOncePod claim runs on node b.
    await client.post(pods, with_claims(pod_manifest(ns, "rwop-first", scheduler, rid), "rwop"))

    async def first_bound() -> bool:
        p = await client.get(f"{pods}/rwop-first")
        return bool(p["spec"].get("nodeName"))

    await eventually(first_bound, timeout=60, what="the first ReadWriteOncePod user bound")
    waiting = {
        "missing-claim": ("nope",),
        "unbound-immediate": ("never",),
        "rwop-second": ("rwop",),
    }
    for name, claims in waiting.items():
        await client.post(pods, with_claims(pod_manifest(ns, name, scheduler, rid), *claims))
    # Its PV lives on node a, the pod may only use node b.
    await client.post(pods, with_claims(pod_manifest(
        ns, "pv-elsewhere", scheduler, rid, nodeSelector={HOSTNAME: node_b}), "on-a"))
    return [*waiting, "pv-elsewhere"]


async def wait_notes(client: ApiClient, ns: str, unbound: list[str]) -> set[str]:
    async def notes() -> set[str] | None:
        events = (await client.get(f"/apis/events.k8s.io/v1/namespaces/{ns}/events"))["items"]
        failed = {e["regarding"]["name"] for e in events if e.get("reason") == "FailedScheduling"}
        if not set(unbound) <= failed:
            return None
        return await notes_of_unbound(client, ns)

    got: set[str] = await eventually(notes, timeout=60, what=f"FailedScheduling in {ns}")
    return got


def test_pods_that_cannot_get_their_volumes_wait_with_kube_schedulers_messages(
        cluster: Cluster, nodes: NodeFactory, tmp_path: Path) -> None:
    rid = unique("vols")
    node_a = nodes(f"{rid}-a", labels={RUN: rid})
    node_b = nodes(f"{rid}-b", labels={RUN: rid})
    namespaces = {"kube": unique("kube-vol"), "ours": unique("ours-vol")}
    for ns in namespaces.values():
        cluster.kubectl("create", "namespace", ns)
    notes: dict[str, set[str]] = {}
    tags = {side: unique(f"{rid}-{side}") for side in namespaces}
    try:
        kube_name = unique("kube-vol")
        ks = KubeScheduler(cluster, kube_name, tmp_path)
        try:
            async def kube_side() -> None:
                client = ApiClient.from_kubeconfig(cluster.kubeconfig)
                try:
                    await nodes_ready(client, [node_a, node_b])
                    ns = namespaces["kube"]
                    unbound = await volume_scenarios(client, ns, kube_name, tags["kube"], rid,
                                                     node_a, node_b)
                    notes["kube"] = await wait_notes(client, ns, unbound)
                finally:
                    await client.close()

            asyncio.run(kube_side())
        finally:
            ks.stop()
        # Free node b of the kube side's ReadWriteOncePod user: both sides start alike.
        cluster.kubectl("delete", "pods", "--all", "-n", namespaces["kube"], "--force",
                        "--grace-period=0")

        ours_name = unique("polsched-vol")

        async def ours(client: ApiClient) -> None:
            ns = namespaces["ours"]
            unbound = await volume_scenarios(client, ns, ours_name, tags["ours"], rid,
                                             node_a, node_b)
            notes["ours"] = await wait_notes(client, ns, unbound)
            # They keep waiting: nothing was bound that should not be.
            pods = (await client.get(f"/api/v1/namespaces/{ns}/pods"))["items"]
            assert {p["metadata"]["name"] for p in pods if p["spec"].get("nodeName")} \
                == {"rwop-first"}

        run_engine(cluster, [policy(ours_name)], ours)
    finally:
        for ns in namespaces.values():
            cluster.kubectl("delete", "pods", "--all", "-n", ns, "--force", "--grace-period=0",
                            "--wait=false", check=False)
            cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        for tag in tags.values():
            cluster.kubectl("delete", "pv", f"{tag}-on-a", f"{tag}-rwop", "--wait=false",
                            check=False)
            cluster.kubectl("delete", "storageclass", f"{tag}-imm", f"{tag}-imm-empty",
                            "--wait=false", check=False)
    kube = notes["kube"]
    texts = "\n".join(sorted(kube))
    for expected in ('persistentvolumeclaim "nope" not found',
                     "pod has unbound immediate PersistentVolumeClaims",
                     "node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod "
                     "access mode already in-use by another pod",
                     "node(s) didn't match PersistentVolume's node affinity"):
        assert expected in texts, texts
    assert notes["ours"] == kube


def test_provisioned_claim_gets_the_selected_node_and_the_pod_binds_once_provisioned(
        cluster: Cluster, nodes: NodeFactory, namespace: str) -> None:
    """WaitForFirstConsumer with a provisioner: PreBind annotates the claim with
    volume.kubernetes.io/selected-node, kcm's PV binder hands it to the provisioner
    (volume.kubernetes.io/storage-provisioner), and the pod waits in PreBind until the
    claim is bound. The test plays the external provisioner: it creates the PV on the
    selected node, pre-bound to the claim."""
    rid = unique("prov")
    names = [nodes(f"{rid}-{i}", labels={RUN: rid}) for i in range(2)]
    sc, provisioner = unique("csi-wffc"), "example.com/fake-provisioner"
    scheduler = unique("polsched-prov")
    pv_name = f"{rid}-provisioned"
    cluster.apply({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                   "metadata": {"name": sc}, "provisioner": provisioner,
                   "volumeBindingMode": "WaitForFirstConsumer"})
    try:
        async def body(client: ApiClient) -> None:
            await nodes_ready(client, names)
            claims = f"/api/v1/namespaces/{namespace}/persistentvolumeclaims"
            await client.post(claims, claim(namespace, "data", sc))
            await client.post(f"/api/v1/namespaces/{namespace}/pods",
                              with_claims(pod_manifest(namespace, "p", scheduler, rid), "data"))

            async def handed_to_provisioner() -> dict[str, str] | None:
                anns = (await client.get(f"{claims}/data"))["metadata"].get("annotations") or {}
                if anns.get("volume.kubernetes.io/storage-provisioner") == provisioner \
                        and anns.get("volume.kubernetes.io/selected-node") in names:
                    return dict(anns)
                return None

            anns = await eventually(handed_to_provisioner, timeout=60,
                                    what="the claim annotated for the provisioner")
            selected = anns["volume.kubernetes.io/selected-node"]
            pod = await client.get(f"/api/v1/namespaces/{namespace}/pods/p")
            assert not pod["spec"].get("nodeName")  # waiting in PreBind

            uid = (await client.get(f"{claims}/data"))["metadata"]["uid"]
            pv = local_pv(pv_name, sc, selected)
            pv["spec"]["claimRef"] = {"kind": "PersistentVolumeClaim", "namespace": namespace,
                                      "name": "data", "uid": uid}
            await client.post("/api/v1/persistentvolumes", pv)

            async def bound() -> str:
                p = await client.get(f"/api/v1/namespaces/{namespace}/pods/p")
                c = await client.get(f"{claims}/data")
                ok = c["status"].get("phase") == "Bound"
                return str(p["spec"].get("nodeName") or "") if ok else ""

            assert await eventually(bound, timeout=60, what="pod bound") == selected

        run_engine(cluster, [policy(scheduler)], body)
    finally:
        cluster.kubectl("delete", "pods", "--all", "-n", namespace, "--force",
                        "--grace-period=0", check=False)
        cluster.kubectl("delete", "pv", pv_name, "--wait=false", check=False)
        cluster.kubectl("delete", "storageclass", sc, "--wait=false", check=False)
