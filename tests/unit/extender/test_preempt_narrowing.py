"""An extender's preempt answer only narrows what was offered (issue 36, finding 3): the
pipeline's DefaultPreemption with a real HTTP extender on 127.0.0.1 that lies, and the
preemption executor's last check before a delete."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from polsched.api import load_policy
from polsched.cluster.client import ApiClient
from polsched.extender import HTTPExtender, wire
from polsched.framework import NodeInfo, PodInfo, Snapshot
from polsched.framework import listers as ls
from polsched.framework.interfaces import Handle, Victims
from polsched.framework.nominator import Nominator
from polsched.framework.runtime import Pipeline
from polsched.plugins import CATALOG
from polsched.preemption.candidates import PreemptionReport
from polsched.preemption.executor import Executor
from polsched.scheduler.algorithm import schedule_pod
from polsched.scheduler.pipelines import build_pipeline
from tests.unit.extender.conftest import StartExtender
from tests.unit.extender.fake_extender import config, make_pod, run

pytestmark = pytest.mark.unit

POLICY = {"apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
          "metadata": {"name": "p"}, "spec": {"schedulerName": "p"}}


def pod(name: str, cpu: str, priority: int, node: str = "", namespace: str = "ns",
        labels: dict[str, str] | None = None) -> PodInfo:
    return PodInfo.from_json({
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}",
                     "labels": labels or {}},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}],
                 "priority": priority, "nodeName": node},
        "status": {}})


def node(name: str, *pods: PodInfo) -> NodeInfo:
    n = NodeInfo.from_json({"metadata": {"name": name, "labels": {}}, "spec": {},
                            "status": {"allocatable": {"cpu": "2", "pods": "110"}}})
    for p in pods:
        n.add_pod(p)
    return n


def pipeline(ext: HTTPExtender, objects: list[dict[str, Any]] = ()  # type: ignore[assignment]
             ) -> Pipeline:
    listers = ls.Listers()
    listers.load(objects)
    return build_pipeline(load_policy(POLICY, CATALOG),
                          Handle(listers=listers, nominator=Nominator()), [ext])


# The cluster: n1 holds a low-priority pod the preemptor may evict, and a system pod it
# may not; `sys` holds only a kube-system pod of priority 2e9.
def cluster() -> list[NodeInfo]:
    return [node("n1", pod("low", "1", 0, "n1", labels={"app": "db"}),
                 pod("critical-n1", "1", 2_000_000_000, "n1", "kube-system")),
            node("sys", pod("critical", "2", 2_000_000_000, "sys", "kube-system"))]


def preempt(pl: Pipeline, ext: HTTPExtender) -> Any:
    async def go() -> Any:
        try:
            return await schedule_pod(pl, pod("big", "1", 100), Snapshot(cluster()))
        finally:
            await ext.close()
    result = run(go())
    assert result.post_filter is not None
    return result.post_filter


def test_victims_and_nodes_outside_the_offer_are_dropped(
        start_extender: StartExtender, caplog: pytest.LogCaptureFixture) -> None:
    # The extender keeps the offered victim, and adds the system pod beside it, and the
    # system pod of a node that was no candidate.
    server = start_extender({"/preempt": lambda args: {"NodeNameToMetaVictims": {
        "n1": {"Pods": [{"UID": "uid-low"}, {"UID": "uid-critical-n1"}]},
        "sys": {"Pods": [{"UID": "uid-critical"}]}}}})
    ext = HTTPExtender(config(server.url, preempt_verb="preempt", node_cache_capable=True))
    with caplog.at_level(logging.WARNING, "polsched.extender.client"):
        post = preempt(pipeline(ext), ext)

    (sent,) = server.bodies("/preempt")
    assert sent["NodeNameToMetaVictims"] == {
        "n1": {"Pods": [{"UID": "uid-low"}], "NumPDBViolations": 0}}
    assert post.nominated_node == "n1"
    assert [v.key for v in post.victims] == ["ns/low"]
    assert 'node "sys" was not a candidate' in caplog.text
    assert 'pod (UID: "uid-critical-n1") on node "n1" was not offered' in caplog.text


def test_a_node_left_with_no_offered_victim_is_no_candidate(
        start_extender: StartExtender) -> None:
    server = start_extender({"/preempt": lambda args: {"NodeNameToMetaVictims": {
        "n1": {"Pods": [{"UID": "uid-critical-n1"}]}}}})
    ext = HTTPExtender(config(server.url, preempt_verb="preempt", node_cache_capable=True))
    post = preempt(pipeline(ext), ext)
    assert post.victims == () and not post.nominated_node
    assert isinstance(post.details, PreemptionReport)
    assert post.details.dropped_by_extenders == ["n1"]


def test_pdb_violations_are_counted_locally_not_taken_from_the_answer(
        start_extender: StartExtender) -> None:
    server = start_extender({"/preempt": lambda args: {"NodeNameToMetaVictims": {
        "n1": {"Pods": [{"UID": "uid-low"}], "NumPDBViolations": -7}}}})
    ext = HTTPExtender(config(server.url, preempt_verb="preempt", node_cache_capable=True))
    guard = {"kind": "PodDisruptionBudget", "metadata": {"name": "db", "namespace": "ns"},
             "spec": {"selector": {"matchLabels": {"app": "db"}}},
             "status": {"disruptionsAllowed": 0}}
    post = preempt(pipeline(ext, [guard]), ext)
    assert [v.key for v in post.victims] == ["ns/low"]
    assert post.num_pdb_violations == 1


def test_the_client_resolves_uids_only_against_the_victims_offered(
        start_extender: StartExtender) -> None:
    server = start_extender({"/preempt": lambda args: {"NodeNameToMetaVictims": {
        "n1": {"Pods": [{"UID": "uid-v1"}, {"UID": "uid-v1"}, {"UID": "uid-other"}],
               "NumPDBViolations": 0},
        "n9": {"Pods": [{"UID": "uid-v1"}]}}}})
    ext = HTTPExtender(config(server.url, preempt_verb="preempt"))

    async def go() -> dict[str, Victims]:
        try:
            return await ext.process_preemption(
                make_pod("big"), {"n1": wire.Victims((make_pod("v1").raw,), 1)})
        finally:
            await ext.close()

    # The offered count stands (the caller recounts): the answer's 0 is not taken.
    assert run(go()) == {"n1": wire.Victims((make_pod("v1").raw,), 1)}


def test_the_executor_refuses_a_victim_not_lower_than_the_preemptor() -> None:
    """The last line: whatever chose the victims, a victim of equal or higher priority,
    or one on another node than the one offered, gets no API call (the client points
    at a closed port: a call would fail with a connection error, not this refusal)."""
    critical = pod("critical", "1", 2_000_000_000, "n1", "kube-system")
    elsewhere = pod("elsewhere", "1", 0, "n2")
    preemptor = pod("big", "1", 100)
    executor = Executor(ApiClient("http://127.0.0.1:1"), Nominator(),
                        {p.key: p for p in (critical, elsewhere)})
    assert "priority 2000000000 is not lower than the preemptor's 100" in \
        executor.refuses(preemptor, "n1", critical)
    assert "on node 'n2', not on 'n1'" in executor.refuses(preemptor, "n1", elsewhere)
    assert executor.refuses(preemptor, "n2", elsewhere) == ""

    retried: list[PodInfo] = []

    async def go() -> None:
        executor.actuate("p", _NoEvents(), preemptor, "n1", [critical], retried.append)
        await executor.close()

    with pytest.raises(AssertionError, match="no event"):
        _NoEvents().event(critical, "", "", "", "")
    asyncio.run(go())
    assert retried == [preemptor]


class _NoEvents:
    def event(self, pod: PodInfo, type_: str, reason: str, action: str, note: str,
              related: PodInfo | None = None) -> None:
        raise AssertionError("no event: nothing was preempted")
