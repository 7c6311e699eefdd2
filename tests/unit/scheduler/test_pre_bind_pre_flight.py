"""NominatedNodeNameForExpectation's question, asked of the default pipeline as the engine
builds it: does PreBind have work for this pod on the chosen node (RunPreBindPreFlights)?
A plain pod: no (no nomination is written). A pod whose volume is provisioned for the
node: yes (VolumeBinding's PreBind writes it, so the pod is nominated first)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from polsched.framework import PodInfo, Snapshot
from polsched.framework.status import Code, Status
from polsched.scheduler.algorithm import schedule_pod
from tests import builders
from tests.unit.extender.fake_extender import make_node, make_pod
from tests.unit.pipelines import build

pytestmark = pytest.mark.unit


def pre_flight(pod: PodInfo, objects: list[dict[str, Any]]) -> Status:
    pl = build(objects=objects)
    result = asyncio.run(schedule_pod(pl, pod, Snapshot([make_node("n1")])))
    assert result.node == "n1" and result.state is not None
    plugins = pl.plugins_for(pod)
    assert pl.run_reserve_plugins_reserve(result.state, pod, "n1", plugins).ok
    return pl.run_pre_bind_pre_flights(result.state, pod, "n1", plugins)


def test_a_plain_pod_has_no_pre_bind_work() -> None:
    assert pre_flight(make_pod(), []).code is Code.SKIP


def test_a_pod_whose_volume_is_provisioned_for_the_node_has_pre_bind_work() -> None:
    sc = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
          "metadata": {"name": "wffc"}, "provisioner": "example.com/disk",
          "volumeBindingMode": "WaitForFirstConsumer"}
    pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
           "metadata": {"name": "data", "namespace": "default", "uid": "pvc-uid"},
           "spec": {"storageClassName": "wffc", "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "1Gi"}}},
           "status": {"phase": "Pending"}}
    pod = (builders.make_pod().typed().name("p").namespace("default").uid("uid-p")
           .container(image="pause").pvc("data", volume="d").info())
    assert pre_flight(pod, [sc, pvc]).ok
