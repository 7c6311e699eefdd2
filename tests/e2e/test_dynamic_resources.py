"""Pods with ResourceClaims, scheduled by polsched's default profile against the real API
server, the resourceclaim controller (claims from templates) and kwok's nodes; the
scheduler runs as the operator's ServiceAccount (manifests/rbac), so its DRA grants are
the ones under test.

- A pod that needs two GPUs lands on the node whose ResourceSlice has two; its claim, made
  by the controller from the pod's ResourceClaimTemplate, gets status.allocation (the two
  devices, the node's selector) and the pod in reservedFor before the pod binds.
- The next pod gets the one GPU left, on the other node; a pod for which no GPU is left
  stays Pending with "cannot allocate all claims", and no device is handed out twice.
- PreEnqueue keeps pods untried until the controller has made their claims.
- A device with binding conditions: the claim is allocated, but the pod binds only once
  the driver (here the test) reports the condition True in the claim's status.devices.
- DRAExtendedResource: a pod asking for an extended resource that a DeviceClass serves
  gets devices; the scheduler creates the claim, owned by the pod, and records it in the
  pod's status.extendedResourceClaimStatus.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from polsched.api import load_policy
from polsched.cluster.client import ApiClient
from polsched.plugins import CATALOG
from polsched.scheduler.engine import Engine
from tests.conftest import Cluster, NodeFactory, unique
from tests.e2e.rbac import (
    OPERATOR_NAMESPACE,
    OPERATOR_SA,
    install_rbac,
    service_account_kubeconfig,
)
from tests.e2e.scheduling import RUN, eventually, nodes_ready, pod_manifest

pytestmark = pytest.mark.e2e
Json = dict[str, Any]
RESOURCE = "/apis/resource.k8s.io/v1"


def policy(name: str) -> Json:
    return {"apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
            "metadata": {"name": name, "generation": 1, "uid": unique("uid")}, "spec": {}}


def device_class(name: str, driver: str) -> Json:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]}}


def resource_slice(driver: str, node: str, gpus: int, **device: Any) -> Json:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-{driver}"},
            "spec": {"driver": driver, "nodeName": node,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": f"gpu-{i}",
                                  "attributes": {"model": {"string": "a100"}},
                                  "capacity": {"memory": {"value": "40Gi"}}, **device}
                                 for i in range(gpus)]}}


def claim_template(ns: str, name: str, device_class_name: str, count: int) -> Json:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": device_class_name, "allocationMode": "ExactCount",
                "count": count,
                "selectors": [{"cel": {"expression":
                               'device.attributes["' + device_class_name.split(".", 1)[1]
                               + '"].model == "a100"'}}]}}]}}}}


def gpu_pod(ns: str, name: str, scheduler: str, rid: str, template: str) -> Json:
    return pod_manifest(ns, name, scheduler, rid,
                        resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": template}])


async def claim_of(client: ApiClient, ns: str, pod: str) -> Json | None:
    p = await client.get(f"/api/v1/namespaces/{ns}/pods/{pod}")
    for s in (p.get("status") or {}).get("resourceClaimStatuses") or []:
        if s.get("resourceClaimName"):
            return await client.get(
                f"{RESOURCE}/namespaces/{ns}/resourceclaims/{s['resourceClaimName']}")
    return None


async def run_engine_as_operator(cluster: Cluster, operator_kubeconfig: Path, scheduler: str,
                                 body: Callable[[ApiClient], Awaitable[None]]) -> None:
    """An engine running the default policy `scheduler` with the operator's
    ServiceAccount credentials, while `body` acts on the cluster as the admin."""
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


def test_gpu_pods_get_their_devices_on_the_node_that_has_them(
        cluster: Cluster, nodes: NodeFactory, namespace: str, tmp_path: Path) -> None:
    install_rbac(cluster)
    operator_kubeconfig = service_account_kubeconfig(
        cluster, OPERATOR_NAMESPACE, OPERATOR_SA, tmp_path / "operator.kubeconfig")
    rid = unique("dra")
    driver = f"{rid}.example.com"
    klass = f"gpu.{driver}"
    one, two = nodes(f"{rid}-one", labels={RUN: rid}), nodes(f"{rid}-two", labels={RUN: rid})
    scheduler = unique("polsched-dra")
    cluster.apply([device_class(klass, driver), resource_slice(driver, one, 1),
                   resource_slice(driver, two, 2)])
    try:
        async def body(client: ApiClient) -> None:
            await nodes_ready(client, [one, two])
            for name, count in (("pair", 2), ("single", 1)):
                await client.post(f"{RESOURCE}/namespaces/{namespace}/resourceclaimtemplates",
                                  claim_template(namespace, name, klass, count))
            await client.post(f"/api/v1/namespaces/{namespace}/pods",
                              gpu_pod(namespace, "trainer", scheduler, rid, "pair"))

            async def bound(pod: str) -> str:
                p = await client.get(f"/api/v1/namespaces/{namespace}/pods/{pod}")
                return str(p["spec"].get("nodeName") or "")

            try:
                node = await eventually(lambda: bound("trainer"), 60, what="trainer bound")
            except AssertionError as e:
                raise AssertionError(f"{e}; events: {await _events(client, namespace)}") from e
            assert node == two
            claim = await claim_of(client, namespace, "trainer")
            assert claim is not None
            alloc = claim["status"]["allocation"]
            assert sorted((r["request"], r["driver"], r["pool"], r["device"])
                          for r in alloc["devices"]["results"]) == [
                ("gpu", driver, two, "gpu-0"), ("gpu", driver, two, "gpu-1")]
            assert alloc["nodeSelector"] == {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [two]}]}]}
            assert alloc.get("allocationTimestamp")
            trainer = await client.get(f"/api/v1/namespaces/{namespace}/pods/trainer")
            assert [(r["resource"], r["name"], r["uid"]) for r in
                    claim["status"]["reservedFor"]] == [
                ("pods", "trainer", trainer["metadata"]["uid"])]
            assert "resource.kubernetes.io/delete-protection" in claim["metadata"]["finalizers"]

            for pod in ("small", "late"):
                await client.post(f"/api/v1/namespaces/{namespace}/pods",
                                  gpu_pod(namespace, pod, scheduler, rid, "single"))
            placed = await eventually(
                lambda: _first_bound(client, namespace, ["small", "late"]), 60,
                what="one of small/late bound")
            assert placed[1] == one
            other = "late" if placed[0] == "small" else "small"

            # PreEnqueue kept every pod untried until the controller had made its claim:
            # the only FailedScheduling is the one about devices.
            async def failed() -> list[str]:
                return [message for name, reason, message in await _events(client, namespace)
                        if name == other and reason == "FailedScheduling"]

            messages = await eventually(failed, 60, what=f"FailedScheduling for {other}")
            assert len(messages) == 1
            assert messages[0].startswith(
                "0/2 nodes are available: 2 cannot allocate all claims.")
            assert not any("not created yet" in m for _, _, m in
                           await _events(client, namespace))
            assert await bound(other) == ""
            claim = await claim_of(client, namespace, placed[0])
            assert claim is not None
            assert [(r["pool"], r["device"]) for r in
                    claim["status"]["allocation"]["devices"]["results"]] == [(one, "gpu-0")]

        asyncio.run(run_engine_as_operator(cluster, operator_kubeconfig, scheduler, body))
    finally:
        cluster.kubectl("delete", "pods", "--all", "-n", namespace, "--wait=false",
                        check=False)
        cluster.kubectl("delete", "resourceslice", f"{one}-{driver}", f"{two}-{driver}",
                        "--wait=false", check=False)
        cluster.kubectl("delete", "deviceclass", klass, "--wait=false", check=False)


async def _events(client: ApiClient, ns: str) -> list[tuple[str, str, str]]:
    evs = (await client.get(f"/api/v1/namespaces/{ns}/events"))["items"]
    return [(e["involvedObject"]["name"], e["reason"], e["message"]) for e in evs]


async def _first_bound(client: ApiClient, ns: str, pods: list[str]) -> tuple[str, str] | None:
    for pod in pods:
        p = await client.get(f"/api/v1/namespaces/{ns}/pods/{pod}")
        if p["spec"].get("nodeName"):
            return pod, str(p["spec"]["nodeName"])
    return None


def test_a_pod_binds_once_its_device_reports_its_binding_condition(
        cluster: Cluster, nodes: NodeFactory, namespace: str, tmp_path: Path) -> None:
    install_rbac(cluster)
    operator_kubeconfig = service_account_kubeconfig(
        cluster, OPERATOR_NAMESPACE, OPERATOR_SA, tmp_path / "operator.kubeconfig")
    rid = unique("drabc")
    driver = f"{rid}.example.com"
    klass = f"gpu.{driver}"
    node = nodes(f"{rid}-n", labels={RUN: rid})
    scheduler = unique("polsched-drabc")
    cluster.apply([device_class(klass, driver),
                   resource_slice(driver, node, 1, bindingConditions=["attached"],
                                  bindingFailureConditions=["failed"], bindsToNode=True)])
    try:
        async def body(client: ApiClient) -> None:
            await nodes_ready(client, [node])
            await client.post(f"{RESOURCE}/namespaces/{namespace}/resourceclaimtemplates",
                              claim_template(namespace, "one", klass, 1))
            await client.post(f"/api/v1/namespaces/{namespace}/pods",
                              gpu_pod(namespace, "attach", scheduler, rid, "one"))

            async def allocated() -> Json | None:
                claim = await claim_of(client, namespace, "attach")
                if claim and (claim.get("status") or {}).get("allocation"):
                    return claim
                return None

            claim = await eventually(allocated, 60, what="the claim allocated")
            [result] = claim["status"]["allocation"]["devices"]["results"]
            assert result["bindingConditions"] == ["attached"]
            assert result["bindingFailureConditions"] == ["failed"]
            # PreBind waits, and says so (a Normal event, as upstream): the pod is not
            # bound while the condition is not True.
            async def pending() -> list[str]:
                return [m for n, r, m in await _events(client, namespace)
                        if n == "attach" and r == "BindingConditionsPending"]

            notes = await eventually(pending, 30, what="BindingConditionsPending")
            assert notes == [f"waiting for binding conditions for device on node {node}"]
            pod = await client.get(f"/api/v1/namespaces/{namespace}/pods/attach")
            assert not pod["spec"].get("nodeName")
            # NominatedNodeNameForExpectation: PreBind has work, so the pod was nominated
            # to its node before PreBind began.
            assert pod["status"].get("nominatedNodeName") == node
            # The driver reports the device attached.
            claim["status"]["devices"] = [{
                "driver": driver, "pool": node, "device": result["device"],
                "conditions": [{"type": "attached", "status": "True", "reason": "Attached",
                                "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}]
            name = claim["metadata"]["name"]
            await client.request("PUT", f"{RESOURCE}/namespaces/{namespace}/resourceclaims/"
                                        f"{name}/status", body=claim)

            async def bound() -> str:
                p = await client.get(f"/api/v1/namespaces/{namespace}/pods/attach")
                return str(p["spec"].get("nodeName") or "")

            assert await eventually(bound, 30, what="attach bound") == node
            # The API server clears the nomination with the binding
            # (ClearingNominatedNodeNameAfterBinding): the scheduler wrote it before.
            pod = await client.get(f"/api/v1/namespaces/{namespace}/pods/attach")
            assert not pod["status"].get("nominatedNodeName")

        asyncio.run(run_engine_as_operator(cluster, operator_kubeconfig, scheduler, body))
    finally:
        cluster.kubectl("delete", "pods", "--all", "-n", namespace, "--wait=false",
                        check=False)
        cluster.kubectl("delete", "resourceslice", f"{node}-{driver}", "--wait=false",
                        check=False)
        cluster.kubectl("delete", "deviceclass", klass, "--wait=false", check=False)


def test_a_pod_waits_untried_until_its_named_claim_exists(
        cluster: Cluster, nodes: NodeFactory, namespace: str, tmp_path: Path) -> None:
    """PreEnqueue: no attempt, no FailedScheduling, while the claim is missing; its
    creation (a ResourceClaim Add, through the queueing hint) lets the pod in."""
    install_rbac(cluster)
    operator_kubeconfig = service_account_kubeconfig(
        cluster, OPERATOR_NAMESPACE, OPERATOR_SA, tmp_path / "operator.kubeconfig")
    rid = unique("drawait")
    driver = f"{rid}.example.com"
    klass = f"gpu.{driver}"
    node = nodes(f"{rid}-n", labels={RUN: rid})
    scheduler = unique("polsched-drawait")
    cluster.apply([device_class(klass, driver), resource_slice(driver, node, 1)])
    try:
        async def body(client: ApiClient) -> None:
            await nodes_ready(client, [node])
            manifest = pod_manifest(namespace, "waiter", scheduler, rid, resourceClaims=[
                {"name": "gpu", "resourceClaimName": "later"}])
            await client.post(f"/api/v1/namespaces/{namespace}/pods", manifest)
            # A probe through the same queue, created after the waiter, that fits nowhere
            # (a node selector no node has): once its FailedScheduling is out, the waiter
            # would have been tried before it, had PreEnqueue let it in.
            probe = pod_manifest(namespace, "probe", scheduler, rid,
                                 nodeSelector={"absent": rid})
            await client.post(f"/api/v1/namespaces/{namespace}/pods", probe)

            async def probe_tried() -> bool:
                return any(name == "probe" and reason == "FailedScheduling"
                           for name, reason, _ in await _events(client, namespace))

            await eventually(probe_tried, 30, what="the probe pod tried")
            assert [e for e in await _events(client, namespace) if e[0] == "waiter"] == []
            waiter = await client.get(f"/api/v1/namespaces/{namespace}/pods/waiter")
            assert not [c for c in (waiter.get("status") or {}).get("conditions") or []
                        if c.get("type") == "PodScheduled"]
            template = claim_template(namespace, "later", klass, 1)
            claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                     "metadata": {"name": "later", "namespace": namespace},
                     "spec": template["spec"]["spec"]}
            await client.post(f"{RESOURCE}/namespaces/{namespace}/resourceclaims", claim)

            async def bound() -> str:
                p = await client.get(f"/api/v1/namespaces/{namespace}/pods/waiter")
                return str(p["spec"].get("nodeName") or "")

            assert await eventually(bound, 30, what="waiter bound") == node

        asyncio.run(run_engine_as_operator(cluster, operator_kubeconfig, scheduler, body))
    finally:
        cluster.kubectl("delete", "pods", "--all", "-n", namespace, "--wait=false",
                        check=False)
        cluster.kubectl("delete", "resourceslice", f"{node}-{driver}", "--wait=false",
                        check=False)
        cluster.kubectl("delete", "deviceclass", klass, "--wait=false", check=False)


def test_a_claim_allocated_where_the_pod_cannot_go_is_deallocated_then_allocated_again(
        cluster: Cluster, nodes: NodeFactory, namespace: str, tmp_path: Path) -> None:
    """PostFilter: the pod's claim is allocated on node a, reserved for no pod, and the pod
    may only run on b. Filter finds the claim unusable on b; PostFilter deallocates it
    (FailedScheduling says so); the claim's update brings the pod back, and this time the
    claim gets b's GPU."""
    install_rbac(cluster)
    operator_kubeconfig = service_account_kubeconfig(
        cluster, OPERATOR_NAMESPACE, OPERATOR_SA, tmp_path / "operator.kubeconfig")
    rid = unique("drapf")
    driver = f"{rid}.example.com"
    klass = f"gpu.{driver}"
    a = nodes(f"{rid}-a", labels={RUN: rid, "which": "a"})
    b = nodes(f"{rid}-b", labels={RUN: rid, "which": "b"})
    scheduler = unique("polsched-drapf")
    cluster.apply([device_class(klass, driver), resource_slice(driver, a, 1),
                   resource_slice(driver, b, 1)])
    try:
        async def body(client: ApiClient) -> None:
            await nodes_ready(client, [a, b])
            template = claim_template(namespace, "stale", klass, 1)
            path = f"{RESOURCE}/namespaces/{namespace}/resourceclaims"
            claim = await client.post(path, {
                "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                "metadata": {"name": "stale", "namespace": namespace,
                             "finalizers": ["resource.kubernetes.io/delete-protection"]},
                "spec": template["spec"]["spec"]})
            claim["status"] = {"allocation": {
                "devices": {"results": [{"request": "gpu", "driver": driver, "pool": a,
                                         "device": "gpu-0"}]},
                "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": [a]}]}]}}}
            await client.request("PUT", f"{path}/stale/status", body=claim)
            manifest = pod_manifest(namespace, "mover", scheduler, rid,
                                    nodeSelector={"which": "b"},
                                    resourceClaims=[{"name": "gpu",
                                                     "resourceClaimName": "stale"}])
            await client.post(f"/api/v1/namespaces/{namespace}/pods", manifest)

            async def bound() -> str:
                p = await client.get(f"/api/v1/namespaces/{namespace}/pods/mover")
                return str(p["spec"].get("nodeName") or "")

            try:
                node = await eventually(bound, 60, what="mover bound")
            except AssertionError as e:
                raise AssertionError(f"{e}; events: {await _events(client, namespace)}") from e
            assert node == b
            notes = [m for n, r, m in await _events(client, namespace)
                     if n == "mover" and r == "FailedScheduling"]
            assert notes and "deallocation of ResourceClaim completed" in notes[0], notes
            assert "resourceclaim not available on the node" in notes[0]
            after = await client.get(f"{path}/stale")
            assert [(r["pool"], r["device"]) for r in
                    after["status"]["allocation"]["devices"]["results"]] == [(b, "gpu-0")]

        asyncio.run(run_engine_as_operator(cluster, operator_kubeconfig, scheduler, body))
    finally:
        cluster.kubectl("delete", "pods", "--all", "-n", namespace, "--wait=false",
                        check=False)
        cluster.kubectl("delete", "resourceslice", f"{a}-{driver}", f"{b}-{driver}",
                        "--wait=false", check=False)
        cluster.kubectl("delete", "deviceclass", klass, "--wait=false", check=False)


def test_a_device_that_fails_to_bind_is_released_and_allocated_again(
        cluster: Cluster, nodes: NodeFactory, namespace: str, tmp_path: Path) -> None:
    """The driver reports the device failed: PreBind fails, Unreserve takes the pod out of
    the claim's reservedFor, the next attempt finds the claim unusable (failed binding)
    and PostFilter deallocates it; then the claim is allocated again, and once the device
    reports attached the pod binds."""
    install_rbac(cluster)
    operator_kubeconfig = service_account_kubeconfig(
        cluster, OPERATOR_NAMESPACE, OPERATOR_SA, tmp_path / "operator.kubeconfig")
    rid = unique("drafail")
    driver = f"{rid}.example.com"
    klass = f"gpu.{driver}"
    node = nodes(f"{rid}-n", labels={RUN: rid})
    scheduler = unique("polsched-drafail")
    cluster.apply([device_class(klass, driver),
                   resource_slice(driver, node, 1, bindingConditions=["attached"],
                                  bindingFailureConditions=["failed"])])
    try:
        async def body(client: ApiClient) -> None:
            await nodes_ready(client, [node])
            await client.post(f"{RESOURCE}/namespaces/{namespace}/resourceclaimtemplates",
                              claim_template(namespace, "one", klass, 1))
            await client.post(f"/api/v1/namespaces/{namespace}/pods",
                              gpu_pod(namespace, "flaky", scheduler, rid, "one"))

            async def allocation(reserved: bool) -> Json | None:
                claim = await claim_of(client, namespace, "flaky")
                status = (claim or {}).get("status") or {}
                if status.get("allocation") and bool(status.get("reservedFor")) == reserved \
                        and not status.get("devices"):
                    return claim
                return None

            async def report(claim: Json, condition: str) -> None:
                [result] = claim["status"]["allocation"]["devices"]["results"]
                claim["status"]["devices"] = [{
                    "driver": driver, "pool": node, "device": result["device"],
                    "conditions": [{"type": condition, "status": "True", "reason": "Driver",
                                    "message": condition,
                                    "lastTransitionTime": "2026-01-01T00:00:00Z"}]}]
                await client.request(
                    "PUT", f"{RESOURCE}/namespaces/{namespace}/resourceclaims/"
                           f"{claim['metadata']['name']}/status", body=claim)

            claim = await eventually(lambda: allocation(True), 60, what="claim reserved")
            await report(claim, "failed")

            async def released() -> bool:
                c = await claim_of(client, namespace, "flaky")
                return c is not None and bool(c) and not (c.get("status") or {}).get("reservedFor")

            # Unreserve (or PostFilter's deallocation) leaves no reservation...
            await eventually(released, 60, what="the pod out of reservedFor")
            # ... and the claim comes back allocated and reserved, its failure forgotten.
            claim = await eventually(lambda: allocation(True), 90,
                                     what="the claim allocated again")
            notes = [m for n, r, m in await _events(client, namespace)
                     if n == "flaky" and r == "FailedScheduling"]
            assert any("device binding failed" in m for m in notes), notes
            await report(claim, "attached")

            async def bound() -> str:
                p = await client.get(f"/api/v1/namespaces/{namespace}/pods/flaky")
                return str(p["spec"].get("nodeName") or "")

            assert await eventually(bound, 60, what="flaky bound") == node

        asyncio.run(run_engine_as_operator(cluster, operator_kubeconfig, scheduler, body))
    finally:
        cluster.kubectl("delete", "pods", "--all", "-n", namespace, "--wait=false",
                        check=False)
        cluster.kubectl("delete", "resourceslice", f"{node}-{driver}", "--wait=false",
                        check=False)
        cluster.kubectl("delete", "deviceclass", klass, "--wait=false", check=False)


def extended_class(name: str, driver: str, resource: str) -> Json:
    klass = device_class(name, driver)
    klass["spec"]["extendedResourceName"] = resource
    return klass


def test_an_extended_resource_served_by_a_device_class_gets_devices(
        cluster: Cluster, nodes: NodeFactory, namespace: str, tmp_path: Path) -> None:
    """DRAExtendedResource: `<driver>/gpu: 2` in a container's limits, on nodes that do
    not advertise it. The pod lands where two devices are free; PreBind creates the claim
    (`<pod>-extended-resources-*`, annotated, controlled by the pod) with one request for
    the container, allocated and reserved for the pod, and the pod's status maps the
    container's resource to that request. A pod asking for three gets the allocator's
    message and no claim."""
    install_rbac(cluster)
    operator_kubeconfig = service_account_kubeconfig(
        cluster, OPERATOR_NAMESPACE, OPERATOR_SA, tmp_path / "operator.kubeconfig")
    rid = unique("draext")
    driver = f"{rid}.example.com"
    klass = f"gpu.{driver}"
    resource = f"{driver}/gpu"
    one, two = nodes(f"{rid}-one", labels={RUN: rid}), nodes(f"{rid}-two", labels={RUN: rid})
    scheduler = unique("polsched-draext")
    cluster.apply([extended_class(klass, driver, resource), resource_slice(driver, one, 1),
                   resource_slice(driver, two, 2)])

    def ext_pod(name: str, count: int) -> Json:
        manifest = pod_manifest(namespace, name, scheduler, rid)
        manifest["spec"]["containers"][0]["resources"] = {"limits": {resource: str(count)}}
        return manifest

    try:
        async def body(client: ApiClient) -> None:
            await nodes_ready(client, [one, two])
            await client.post(f"/api/v1/namespaces/{namespace}/pods", ext_pod("wide", 2))

            async def bound(pod: str) -> str:
                p = await client.get(f"/api/v1/namespaces/{namespace}/pods/{pod}")
                return str(p["spec"].get("nodeName") or "")

            try:
                node = await eventually(lambda: bound("wide"), 60, what="wide bound")
            except AssertionError as e:
                raise AssertionError(f"{e}; events: {await _events(client, namespace)}") from e
            assert node == two
            pod = await client.get(f"/api/v1/namespaces/{namespace}/pods/wide")
            status = pod["status"]["extendedResourceClaimStatus"]
            assert status["requestMappings"] == [{"containerName": "c",
                                                  "resourceName": resource,
                                                  "requestName": "container-0-request-0"}]
            name = status["resourceClaimName"]
            assert name.startswith("wide-extended-resources-")
            claim = await client.get(f"{RESOURCE}/namespaces/{namespace}/resourceclaims/{name}")
            meta = claim["metadata"]
            assert meta["annotations"]["resource.kubernetes.io/extended-resource-claim"] == \
                "true"
            assert [(r["kind"], r["name"], r["uid"], r.get("controller"))
                    for r in meta["ownerReferences"]] == [
                ("Pod", "wide", pod["metadata"]["uid"], True)]
            assert claim["spec"]["devices"]["requests"] == [
                {"name": "container-0-request-0", "exactly": {
                    "deviceClassName": klass, "allocationMode": "ExactCount", "count": 2}}]
            alloc = claim["status"]["allocation"]
            assert sorted((r["request"], r["pool"], r["device"])
                          for r in alloc["devices"]["results"]) == [
                ("container-0-request-0", two, "gpu-0"), ("container-0-request-0", two, "gpu-1")]
            assert [r["uid"] for r in claim["status"]["reservedFor"]] == [
                pod["metadata"]["uid"]]

            await client.post(f"/api/v1/namespaces/{namespace}/pods", ext_pod("wider", 3))

            async def failed() -> list[str]:
                return [m for n, r, m in await _events(client, namespace)
                        if n == "wider" and r == "FailedScheduling"]

            [message, *_] = await eventually(failed, 60, what="FailedScheduling for wider")
            assert message.startswith("0/2 nodes are available: 2 cannot allocate all claims.")
            claims = (await client.get(f"{RESOURCE}/namespaces/{namespace}/resourceclaims"))
            assert [c["metadata"]["name"] for c in claims["items"]] == [name]

        asyncio.run(run_engine_as_operator(cluster, operator_kubeconfig, scheduler, body))
    finally:
        cluster.kubectl("delete", "pods", "--all", "-n", namespace, "--wait=false",
                        check=False)
        cluster.kubectl("delete", "resourceslice", f"{one}-{driver}", f"{two}-{driver}",
                        "--wait=false", check=False)
        cluster.kubectl("delete", "deviceclass", klass, "--wait=false", check=False)


def test_an_extended_resource_claim_left_by_an_earlier_attempt_is_deleted(
        cluster: Cluster, nodes: NodeFactory, namespace: str, tmp_path: Path) -> None:
    """A claim for the pod's extended resources that an earlier attempt created (and never
    cleaned up): Filter refuses it on every node, PostFilter deletes it (taking the
    finalizer off first), and FailedScheduling says both, word for word as upstream."""
    install_rbac(cluster)
    operator_kubeconfig = service_account_kubeconfig(
        cluster, OPERATOR_NAMESPACE, OPERATOR_SA, tmp_path / "operator.kubeconfig")
    rid = unique("drastale")
    driver = f"{rid}.example.com"
    klass = f"gpu.{driver}"
    resource = f"{driver}/gpu"
    node = nodes(f"{rid}-n", labels={RUN: rid})
    scheduler = unique("polsched-drastale")
    cluster.apply([extended_class(klass, driver, resource), resource_slice(driver, node, 1)])
    try:
        async def body(client: ApiClient) -> None:
            await nodes_ready(client, [node])
            manifest = pod_manifest(namespace, "again", scheduler, rid,
                                    schedulingGates=[{"name": "example.com/hold"}])
            manifest["spec"]["containers"][0]["resources"] = {"limits": {resource: "1"}}
            pod = await client.post(f"/api/v1/namespaces/{namespace}/pods", manifest)
            path = f"{RESOURCE}/namespaces/{namespace}/resourceclaims"
            await client.post(path, {
                "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                "metadata": {
                    "name": "again-extended-resources-old", "namespace": namespace,
                    "annotations": {"resource.kubernetes.io/extended-resource-claim": "true"},
                    "finalizers": ["resource.kubernetes.io/delete-protection"],
                    "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "again",
                                         "uid": pod["metadata"]["uid"], "controller": True}]},
                "spec": {"devices": {"requests": [{"name": "container-0-request-0",
                                                   "exactly": {"deviceClassName": klass,
                                                               "allocationMode": "ExactCount",
                                                               "count": 1}}]}}})
            await client.patch(f"/api/v1/namespaces/{namespace}/pods/again",
                               [{"op": "remove", "path": "/spec/schedulingGates"}], "json")

            async def failed() -> list[str]:
                return [m for n, r, m in await _events(client, namespace)
                        if n == "again" and r == "FailedScheduling"]

            try:
                [message, *_] = await eventually(failed, 60, what="FailedScheduling")
            except AssertionError as e:
                raise AssertionError(f"{e}; events: {await _events(client, namespace)}") from e
            assert message.startswith(
                "0/1 nodes are available: 1 cannot schedule extended resource claim. "
                "deletion of ResourceClaim completed"), message

            async def gone() -> bool:
                claims = (await client.get(path))["items"]
                return not any(c["metadata"]["name"] == "again-extended-resources-old"
                               for c in claims)

            await eventually(gone, 30, what="the old claim deleted")

        asyncio.run(run_engine_as_operator(cluster, operator_kubeconfig, scheduler, body))
    finally:
        cluster.kubectl("delete", "pods", "--all", "-n", namespace, "--wait=false",
                        check=False)
        cluster.kubectl("delete", "resourceslice", f"{node}-{driver}", "--wait=false",
                        check=False)
        cluster.kubectl("delete", "deviceclass", klass, "--wait=false", check=False)


def test_a_failed_device_for_an_extended_resource_gets_a_new_claim(
        cluster: Cluster, nodes: NodeFactory, namespace: str, tmp_path: Path) -> None:
    """The scheduler's claim for an extended resource, on a device with binding
    conditions: the driver reports the device failed, PreBind fails and Unreserve
    deletes the claim it created; the next attempt creates another, and once its device
    reports attached the pod binds, its status naming the new claim."""
    install_rbac(cluster)
    operator_kubeconfig = service_account_kubeconfig(
        cluster, OPERATOR_NAMESPACE, OPERATOR_SA, tmp_path / "operator.kubeconfig")
    rid = unique("draextbc")
    driver = f"{rid}.example.com"
    klass = f"gpu.{driver}"
    resource = f"{driver}/gpu"
    node = nodes(f"{rid}-n", labels={RUN: rid})
    scheduler = unique("polsched-draextbc")
    cluster.apply([extended_class(klass, driver, resource),
                   resource_slice(driver, node, 1, bindingConditions=["attached"],
                                  bindingFailureConditions=["failed"])])
    path = f"{RESOURCE}/namespaces/{namespace}/resourceclaims"
    try:
        async def body(client: ApiClient) -> None:
            await nodes_ready(client, [node])
            manifest = pod_manifest(namespace, "flaky", scheduler, rid)
            manifest["spec"]["containers"][0]["resources"] = {"limits": {resource: "1"}}
            await client.post(f"/api/v1/namespaces/{namespace}/pods", manifest)

            async def reserved(but_not: str = "") -> Json | None:
                for c in (await client.get(path))["items"]:
                    status = c.get("status") or {}
                    if c["metadata"]["name"] != but_not and status.get("reservedFor") \
                            and not status.get("devices"):
                        claim: Json = c
                        return claim
                return None

            async def report(claim: Json, condition: str) -> None:
                [result] = claim["status"]["allocation"]["devices"]["results"]
                claim["status"]["devices"] = [{
                    "driver": driver, "pool": node, "device": result["device"],
                    "conditions": [{"type": condition, "status": "True", "reason": "Driver",
                                    "message": condition,
                                    "lastTransitionTime": "2026-01-01T00:00:00Z"}]}]
                await client.request("PUT", f"{path}/{claim['metadata']['name']}/status",
                                     body=claim)

            try:
                first = await eventually(reserved, 60, what="the scheduler's claim reserved")
            except AssertionError as e:
                raise AssertionError(f"{e}; events: {await _events(client, namespace)}") from e
            old = first["metadata"]["name"]
            assert old.startswith("flaky-extended-resources-")
            await report(first, "failed")

            async def gone() -> bool:
                return all(c["metadata"]["name"] != old
                           for c in (await client.get(path))["items"])

            await eventually(gone, 60, what="the failed claim deleted")
            second = await eventually(lambda: reserved(old), 90, what="a new claim reserved")
            await report(second, "attached")

            async def bound() -> str:
                p = await client.get(f"/api/v1/namespaces/{namespace}/pods/flaky")
                return str(p["spec"].get("nodeName") or "")

            assert await eventually(bound, 60, what="flaky bound") == node
            pod = await client.get(f"/api/v1/namespaces/{namespace}/pods/flaky")
            assert pod["status"]["extendedResourceClaimStatus"]["resourceClaimName"] == \
                second["metadata"]["name"]
            notes = [m for n, r, m in await _events(client, namespace)
                     if n == "flaky" and r == "FailedScheduling"]
            assert any("device binding failed" in m for m in notes), notes

        asyncio.run(run_engine_as_operator(cluster, operator_kubeconfig, scheduler, body))
    finally:
        cluster.kubectl("delete", "pods", "--all", "-n", namespace, "--wait=false",
                        check=False)
        cluster.kubectl("delete", "resourceslice", f"{node}-{driver}", "--wait=false",
                        check=False)
        cluster.kubectl("delete", "deviceclass", klass, "--wait=false", check=False)
