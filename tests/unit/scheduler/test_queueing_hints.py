"""Queueing hints of the default plugins (each plugin's EventsToRegister and
isSchedulableAfter* of kube-scheduler v1.37), through the queue of a pipeline built by the
production builder from the default policy."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from polsched.api import load_policy
from polsched.framework import events as ev
from polsched.framework.types import PodInfo
from polsched.objects import Json
from polsched.plugins import CATALOG
from polsched.scheduler.pipelines import build_pipeline
from polsched.scheduler.queue.journal import EventJournal
from polsched.scheduler.queue.scheduling_queue import SchedulingQueue
from tests.builders import make_node, make_pod

pytestmark = pytest.mark.unit

R, A = ev.Resource, ev.ActionType


class Clock:
    now = 1000.0

    def __call__(self) -> float:
        return self.now


def node(name: str = "n1", cpu: str = "2", labels: dict[str, str] | None = None,
         taints: list[Json] | None = None, unschedulable: bool = False) -> Json:
    return (make_node().name(name).labels({"kubernetes.io/hostname": name, **(labels or {})})
            .taints(taints or []).unschedulable(unschedulable)
            .allocatable({"cpu": cpu, "memory": "8Gi", "pods": "110"}).obj())


def pod(name: str = "p", cpu: str = "1", labels: dict[str, str] | None = None,
        node_name: str = "", **spec: Any) -> PodInfo:
    ports = {"ports": spec.pop("ports")} if "ports" in spec else {}
    return (make_pod().name(name).namespace("ns").uid(f"uid-{name}").labels(labels or {})
            .container(image="x", requests={"cpu": cpu}, **ports).node(node_name).spec(**spec)
            .info())


def rejected_queue(p: PodInfo, *plugins: str) -> SchedulingQueue:
    """A queue configured with the default pipeline's hints, `p` rejected by `plugins`."""
    pipeline = build_pipeline(load_policy({
        "apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
        "metadata": {"name": "s"}, "spec": {}}, CATALOG))
    clock = Clock()
    queue = SchedulingQueue(clock=clock)
    queue.configure(pipeline.pre_enqueue_plugins, pipeline.queueing_hints())
    queue.add(p)
    qp = queue.pop_nowait()
    assert qp is not None
    queue.add_unschedulable(qp, plugins)
    assert queue.where(qp.key) == "unschedulable"
    clock.now += 60  # backoff over: a move goes to activeQ
    return queue


def moved(queue: SchedulingQueue, event: ev.ClusterEvent, old: Any, new: Any) -> bool:
    return queue.move(event, old, new) == 1


def updated(old: Json, **changes: Any) -> tuple[ev.ClusterEvent, Json, Json]:
    new = copy.deepcopy(old)
    for path, value in changes.items():
        section, key = path.split("__")
        new[section][key] = value
    events = ev.node_update_events(new, old)
    assert len(events) == 1, events
    return events[0], old, new


def test_cluster_event_matching_as_upstream() -> None:
    registered = ev.ClusterEvent(R.NODE, A.ADD | A.UPDATE_NODE_ALLOCATABLE)
    assert registered.matches(ev.ClusterEvent(R.NODE, A.UPDATE_NODE_ALLOCATABLE))
    assert registered.matches(ev.NODE_ADD)
    assert not registered.matches(ev.ClusterEvent(R.NODE, A.UPDATE_NODE_LABEL))
    assert not registered.matches(ev.ClusterEvent(R.NODE, A.UPDATE))  # less specific
    assert ev.ClusterEvent(R.POD, A.DELETE).matches(ev.ASSIGNED_POD_DELETE)
    assert ev.ClusterEvent(R.WILDCARD, A.ALL).matches(ev.ASSIGNED_POD_DELETE)
    assert ev.ClusterEvent(R.NODE, A.ADD).label == "NodeAdd"
    assert ev.ClusterEvent(R.NODE, A.UPDATE_NODE_LABEL).label == "NodeUpdateNodeLabel"
    assert ev.EVENT_UNSCHEDULABLE_TIMEOUT.label == "UnschedulableTimeout"


def test_node_update_events_name_what_changed() -> None:
    n = node()
    assert ev.node_update_events(n, n) == []
    e, _, _ = updated(n, metadata__labels={"a": "b"})
    assert e.action is A.UPDATE_NODE_LABEL
    e, _, _ = updated(n, spec__unschedulable=True)
    assert e.action is A.UPDATE_NODE_TAINT
    e, _, _ = updated(n, status__allocatable={"cpu": "4"})
    assert e.action is A.UPDATE_NODE_ALLOCATABLE


def test_fit_insufficient_cpu_waits_for_room() -> None:
    p = pod(cpu="3")
    queue = rejected_queue(p, "NodeResourcesFit")
    n = node(cpu="2")
    assert not moved(queue, *updated(n, metadata__labels={"other": "x"}))
    assert not moved(queue, ev.NODE_ADD, None, node("small", cpu="2"))
    assert not moved(queue, *updated(n, status__allocatable={"cpu": "2500m", "pods": "110",
                                                             "memory": "8Gi"}))
    # a deleted pod that ran nowhere frees nothing
    assert not moved(queue, ev.ASSIGNED_POD_DELETE, pod("pending"), None)
    assert moved(queue, *updated(n, status__allocatable={"cpu": "4", "pods": "110",
                                                         "memory": "8Gi"}))
    assert queue.where(p.key) == "active"


def test_fit_moves_on_a_big_enough_node_or_a_deleted_bound_pod() -> None:
    queue = rejected_queue(pod(cpu="3"), "NodeResourcesFit")
    assert moved(queue, ev.NODE_ADD, None, node("big", cpu="4"))
    queue = rejected_queue(pod(cpu="3"), "NodeResourcesFit")
    assert moved(queue, ev.ASSIGNED_POD_DELETE, pod("gone", node_name="n1"), None)


def test_node_affinity_waits_for_a_matching_label() -> None:
    p = pod(nodeSelector={"disk": "ssd"})
    queue = rejected_queue(p, "NodeAffinity")
    n = node()
    assert not moved(queue, *updated(n, metadata__labels={"disk": "hdd"}))
    assert not moved(queue, ev.NODE_ADD, None, node("x"))
    assert moved(queue, *updated(n, metadata__labels={"disk": "ssd"}))


def test_taint_toleration_waits_for_the_taint_to_go() -> None:
    taint = {"key": "k", "value": "v", "effect": "NoSchedule"}
    queue = rejected_queue(pod(), "TaintToleration")
    n = node(taints=[taint])
    assert not moved(queue, *updated(n, spec__taints=[taint, {"key": "o",
                                                              "effect": "NoSchedule"}]))
    assert not moved(queue, *updated(n, metadata__labels={"a": "b"}))
    assert moved(queue, *updated(n, spec__taints=[]))


def test_node_unschedulable_waits_for_uncordon() -> None:
    queue = rejected_queue(pod(), "NodeUnschedulable")
    assert not moved(queue, ev.NODE_ADD, None, node(unschedulable=True))
    assert moved(queue, *updated(node(unschedulable=True), spec__unschedulable=False))


def test_node_ports_waits_for_the_port_to_be_freed() -> None:
    port = [{"containerPort": 80, "hostPort": 8080}]
    queue = rejected_queue(pod(ports=port), "NodePorts")
    assert not moved(queue, ev.ASSIGNED_POD_DELETE, pod("other", node_name="n1"), None)
    assert moved(queue, ev.ASSIGNED_POD_DELETE, pod("holder", node_name="n1", ports=port),
                 None)


def test_inter_pod_affinity_waits_for_a_matching_pod() -> None:
    affinity = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "db"}},
         "topologyKey": "kubernetes.io/hostname"}]}}
    queue = rejected_queue(pod(affinity=affinity), "InterPodAffinity")
    assert not moved(queue, ev.ASSIGNED_POD_ADD, None,
                     pod("web", labels={"app": "web"}, node_name="n1"))
    assert moved(queue, ev.ASSIGNED_POD_ADD, None,
                 pod("db", labels={"app": "db"}, node_name="n1"))


def test_pod_topology_spread_waits_for_a_node_with_its_keys() -> None:
    spread = [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule",
               "labelSelector": {"matchLabels": {"app": "a"}}}]
    queue = rejected_queue(pod(labels={"app": "a"}, topologySpreadConstraints=spread),
                           "PodTopologySpread")
    assert not moved(queue, ev.NODE_ADD, None, node("nozone"))
    assert moved(queue, ev.NODE_ADD, None, node("z", labels={"zone": "b"}))


def test_a_pod_rejected_by_an_extender_or_by_nothing_moves_on_any_event() -> None:
    queue = rejected_queue(pod(), "my-extender")
    assert moved(queue, *updated(node(), metadata__labels={"a": "b"}))
    queue = rejected_queue(pod(), "NodeResourcesFit")
    assert moved(queue, ev.EVENT_POLICY_CHANGE, None, None)  # wildcard


def test_a_gated_pod_moves_only_when_its_gates_go() -> None:
    p = pod(schedulingGates=[{"name": "g"}])
    pipeline = build_pipeline(load_policy({
        "apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
        "metadata": {"name": "s"}, "spec": {}}, CATALOG))
    queue = SchedulingQueue(clock=Clock())
    queue.configure(pipeline.pre_enqueue_plugins, pipeline.queueing_hints())
    queue.add(p)
    assert queue.where(p.key) == "gated"
    assert queue.move(ev.NODE_ADD, None, node()) == 0
    queue.add(pod(labels={"x": "y"}, schedulingGates=[{"name": "g"}]))
    assert queue.where(p.key) == "gated"
    queue.add(pod(labels={"x": "y"}))
    assert queue.where(p.key) == "active"


def default_queue(clock: Clock, journal: EventJournal | None = None) -> SchedulingQueue:
    pipeline = build_pipeline(load_policy({
        "apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
        "metadata": {"name": "s"}, "spec": {}}, CATALOG))
    queue = SchedulingQueue(clock=clock, pop_from_backoff=False, journal=journal)
    queue.configure(pipeline.pre_enqueue_plugins, pipeline.queueing_hints())
    return queue


def test_queues_sharing_a_journal_see_the_events_of_their_pods_flight_as_their_own() -> None:
    """The engine keeps each cluster event once (EventJournal) for every policy's queue:
    a pod that fails goes where it went when each queue kept the events itself, for
    events during its flight, before it, and events no plugin of its queue cares about."""
    big, pvc = node("big", cpu="8"), ev.ClusterEvent(R.PERSISTENT_VOLUME_CLAIM, A.ADD)

    def run(journal: EventJournal | None) -> dict[str, str | None]:
        clock = Clock()
        a, b = default_queue(clock, journal), default_queue(clock, journal)
        # Its only plugin cares about nodes added, not about PVCs.
        c = SchedulingQueue(clock=clock, pop_from_backoff=False, journal=journal)
        c.configure(hints={"NodeLabel": (ev.ClusterEventWithHint(ev.NODE_ADD, None),)})
        a.add(pod("early", cpu="3"))
        a.add(pod("other", cpu="3"))
        b.add(pod("late", cpu="3"))
        c.add(pod("quiet"))
        early, other, quiet = a.pop_nowait(), a.pop_nowait(), c.pop_nowait()
        assert early is not None and other is not None and quiet is not None

        def event(e: ev.ClusterEvent, old: Any, new: Any) -> None:
            if journal is not None:
                journal.append(e, old, new)
            for queue in (a, b, c):
                queue.move(e, old, new, journaled=journal is not None)

        event(pvc, None, {})
        c.add_unschedulable(quiet, ["NoSuchPlugin"])  # moves on any event c keeps: none
        where_quiet = c.where("ns/quiet")
        event(ev.NODE_ADD, None, big)
        late = b.pop_nowait()  # popped after the events: they are not its own
        assert late is not None
        a.add_unschedulable(early, ["NodeResourcesFit"])  # a node with room came
        a.add_unschedulable(other, ["NoSuchPlugin"])
        b.add_unschedulable(late, ["NodeResourcesFit"])
        return {"early": a.where("ns/early"), "other": a.where("ns/other"),
                "late": b.where("ns/late"), "quiet": where_quiet}

    journal = EventJournal()
    assert run(journal) == run(None) == {"early": "backoff", "other": "backoff",
                                         "late": "unschedulable", "quiet": "unschedulable"}
    # Nothing in flight: the journal forgets its events as it grows.
    for _ in range(3 * EventJournal.TRIM_AT):
        journal.append(ev.NODE_ADD, None, node())
    assert len(journal) < EventJournal.TRIM_AT


def test_inter_pod_affinity_hint_parses_a_parked_pod_once_per_version(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The hint reads the parked pod's terms parsed once for this version of the pod, not
    on every pod event in the cluster (70 ms per event per parked pod at 3000 terms)."""
    from polsched.plugins import inter_pod_affinity as ipa

    affinity = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "db"}},
         "topologyKey": "kubernetes.io/hostname"}]}}
    parked = pod(affinity=affinity)
    queue = rejected_queue(parked, "InterPodAffinity")
    parsed: list[str] = []
    parse = ipa.PodTerms.parse

    def counting(p: PodInfo, strict: bool) -> ipa.PodTerms:
        parsed.append(p.name)
        return parse(p, strict)

    monkeypatch.setattr(ipa.PodTerms, "parse", staticmethod(counting))
    for i in range(5):
        assert not moved(queue, ev.ASSIGNED_POD_ADD, None,
                         pod(f"web{i}", labels={"app": "web"}, node_name="n1"))
    assert parsed.count(parked.name) == 1
