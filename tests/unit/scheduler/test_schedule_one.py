"""ScheduleOne's stateful cycle (scheduler.schedule_one and schedule_one_podgroup) through
production wiring: the pipeline the engine's builder makes from a loaded policy, a
Profile with its real queue, a real ClusterCache fed watch events, and at the two edges
where an attempt writes to the API server a binder that records each bind (the test
answers it) and a recorder that keeps each event and status patch instead of sending it.

What is checked is what an attempt leaves behind: where the pod waits in the queue, the
cache's assumed pods, the policy's counters, the events and status patches, the binds,
and the scheduler_pending_pods gauges the queue reports itself."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import pytest

from polsched.api import load_policy
from polsched.cluster.cache import ClusterCache
from polsched.cluster.client import ApiClient
from polsched.framework import events as ev
from polsched.framework import pod_bounds, signers
from polsched.framework.interfaces import Handle
from polsched.framework.nominator import Nominator
from polsched.framework.types import PodInfo
from polsched.framework.waiting_pods import WaitingPod
from polsched.objects import Json
from polsched.plugins import CATALOG
from polsched.preemption.executor import Executor
from polsched.scheduler import metrics
from polsched.scheduler.binder import BindCallback, Binder, BindOutcome
from polsched.scheduler.pipelines import build_pipeline
from polsched.scheduler.profile import Counters, Profile
from polsched.scheduler.queue.types import Location
from polsched.scheduler.recorder import EventRecorder
from polsched.scheduler.schedule_one import AttemptSettings
from polsched.scheduler.schedule_one_podgroup import ScheduleOnePodGroup

pytestmark = pytest.mark.unit

SCHEDULER = "polsched-test"


# -- the two edges: binds and writes, recorded ----------------------------------------------
@dataclass
class Bind:
    pod: PodInfo
    node: str
    done: BindCallback
    # The binding cycle's task that asked (None: the scheduling cycle itself).
    task: asyncio.Task[Any] | None


class RecordingBinder(Binder):
    """Records each bind; the test answers it (`done`) as the API server would have."""

    def __init__(self) -> None:
        self.binds: list[Bind] = []

    def bind(self, pod: PodInfo, node_name: str, done: BindCallback,
             extenders: Sequence[object] = (),
             annotations: Mapping[str, str] | None = None, *, lane: str = "") -> None:
        self.binds.append(Bind(pod, node_name, done, asyncio.current_task()))


class RecordingRecorder(EventRecorder):
    """The production recorder deciding every event and status patch; the writes are
    kept here instead of sent."""

    def __init__(self) -> None:
        super().__init__(cast(ApiClient, None), "polsched")
        self.events: list[tuple[str, str, str]] = []  # (pod key, reason, note)
        self.patches: list[tuple[str, Json]] = []  # (path, patch)
        self.nominations: list[tuple[str, str]] = []

    def event(self, pod: PodInfo, type_: str, reason: str, action: str, note: str,
              related: PodInfo | None = None) -> None:
        self.events.append((pod.key, reason, note))

    def _spawn_status(self, path: str, patch: Json) -> None:
        self.patches.append((path, patch))

    async def nominate_for_binding(self, pod: PodInfo, node_name: str) -> None:
        self.nominations.append((pod.key, node_name))


@dataclass
class Hooks:
    """The engine's side of EngineHooks for one profile, as the engine does it."""

    cache: ClusterCache
    changed_names: list[str] = field(default_factory=list)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    profile: Profile | None = None

    def enqueue(self, profile: Profile, pod: PodInfo) -> None:
        profile.enqueue(pod, self.cache.namespaces)

    def move(self, event: ev.ClusterEvent, old: Any = None, new: Any = None,
             pre_check: Callable[[PodInfo], bool] | None = None) -> None:
        if self.profile is not None:
            self.profile.queue.move(event, old, new, pre_check)

    def changed(self, scheduler_name: str) -> None:
        self.changed_names.append(scheduler_name)

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        self.tasks.append(asyncio.get_running_loop().create_task(coro))

    def is_live(self, profile: Profile) -> bool:
        return True

    def activate_preemptors(self) -> None:
        pass


# -- the cluster ---------------------------------------------------------------------------
def node(name: str, cpu: str) -> Json:
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name},
                         "resourceVersion": "1"},
            "spec": {}, "status": {"allocatable": {"cpu": cpu, "memory": "8Gi",
                                                    "pods": "110"}}}


def pod(name: str, cpu: str, group: str = "") -> Json:
    spec: Json = {"schedulerName": SCHEDULER,
                  "containers": [{"name": "c", "image": "x",
                                  "resources": {"requests": {"cpu": cpu}}}]}
    if group:
        spec["schedulingGroup"] = {"podGroupName": group}
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}",
                         "resourceVersion": "1"},
            "spec": spec, "status": {}}


def pod_group(name: str, min_count: int) -> Json:
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}",
                         "generation": 1},
            "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}}}


@dataclass
class World:
    cache: ClusterCache
    profile: Profile
    attempts: ScheduleOnePodGroup
    binder: RecordingBinder
    recorder: RecordingRecorder
    hooks: Hooks

    def add_pods(self, *objs: Json) -> None:
        """The watch's ADDED events (a list's: all in the cache first), then each pod
        queued as the engine queues it."""
        for obj in objs:
            self.cache.on_pod_event("ADDED", obj)
        for obj in objs:
            key = f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"
            self.hooks.enqueue(self.profile, self.cache.pods[key])

    async def cycle(self) -> None:
        """The engine's dispatch: pop the next pod (or its pod group), run its cycle."""
        qp = self.profile.queue.pop_nowait()
        assert qp is not None, "nothing to pop"
        group = self.profile.queue.pop_group(qp)
        if group is not None:
            await self.attempts.schedule_pod_group(self.profile, group)
        else:
            await self.attempts.schedule_one(self.profile, qp)
        # Binding cycles (a pipeline with PreBind work, a pod held at Permit) run in the
        # background: wait until each has ended or asks for its bind.
        tasks = self.hooks.tasks

        def settled() -> bool:
            asking = {b.task for b in self.binder.binds}
            return all(t.done() or t in asking for t in tasks)

        while not settled():
            await asyncio.sleep(0)
        self.hooks.tasks = [t for t in tasks if not t.done()]

    async def answer(self, b: Bind, outcome: BindOutcome, message: str = "") -> None:
        """The API server's answer to a bind; its binding cycle (if any) then ends."""
        b.done(outcome, message)
        if b.task is not None:
            await b.task

    def where(self, name: str) -> Location | None:
        return self.profile.queue.where(f"ns/{name}")

    def pending(self, queue: str) -> float:
        return metrics.PENDING_PODS.values.get(
            (("profile", SCHEDULER), ("queue", queue)), 0)


def world(*nodes: Json, groups: Sequence[Json] = (), attempt_budget: float | None = None,
          spec: Json | None = None, features: frozenset[str] = frozenset()) -> World:
    cache = ClusterCache(None)
    cache.pod_groups.served = True
    for n in nodes:
        cache.on_node_event("ADDED", n)
    for g in groups:
        cache.on_pod_group_event("ADDED", g)
    nominator = Nominator()
    waiting: dict[str, WaitingPod] = {}  # the Permit plugins' and the attempts' alike
    policy = load_policy({"apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
                          "metadata": {"name": "p", "generation": 1},
                          "spec": {"schedulerName": SCHEDULER, **(spec or {})}}, CATALOG)
    pipeline = build_pipeline(policy, Handle(listers=cache.listers, nominator=nominator,
                                             pod_groups=cache.pod_groups,
                                             waiting_pods=waiting, features=features))
    recorder = RecordingRecorder()
    profile = Profile(policy, pipeline, recorder, Counters())
    profile.runnable.set()
    profile.started = True
    hooks = Hooks(cache, profile=profile)
    binder = RecordingBinder()
    executor = Executor(cast(ApiClient, None), nominator, cache.pods, waiting)
    attempts = ScheduleOnePodGroup(hooks, cache, binder, nominator, executor, waiting,
                                   AttemptSettings(attempt_budget=attempt_budget))
    return World(cache, profile, attempts, binder, recorder, hooks)


@pytest.fixture(autouse=True)
def _metrics() -> Any:
    metrics.reset()
    yield
    metrics.reset()


# -- the pod's cycle -----------------------------------------------------------------------
def test_a_pod_that_fits_is_assumed_bound_and_counted_when_the_bind_succeeds() -> None:
    async def run() -> None:
        w = world(node("n1", "2"))
        w.add_pods(pod("a", "1"))
        assert w.pending(metrics.ACTIVE) == 1
        await w.cycle()
        [b] = w.binder.binds
        assert (b.pod.key, b.node) == ("ns/a", "n1")
        assert w.cache.is_assumed("ns/a")
        assert w.where("a") is Location.IN_FLIGHT
        assert w.pending(metrics.ACTIVE) == 0
        await w.answer(b, BindOutcome.BOUND, "")
        assert w.where("a") is None
        assert w.profile.counters.binds_total == 1
        assert w.profile.counters.last_bind_time
        assert ("ns/a", "Scheduled", "Successfully assigned ns/a to n1") in w.recorder.events
        assert w.hooks.changed_names == [SCHEDULER]

    asyncio.run(run())


def test_a_pod_that_fits_nowhere_is_parked_unschedulable_with_the_fit_error() -> None:
    async def run() -> None:
        w = world(node("n1", "1"))
        w.add_pods(pod("big", "2"))
        await w.cycle()
        assert not w.binder.binds
        assert w.where("big") is Location.UNSCHEDULABLE
        queued = w.profile.queue.get("ns/big")
        assert queued is not None and queued.rejected_by == {"NodeResourcesFit"}
        assert w.profile.counters.unschedulable_attempts == 1
        message = "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes " \
                  "are available: 1 Preemption is not helpful for scheduling."
        assert ("ns/big", "FailedScheduling", message) in w.recorder.events
        [(path, patch)] = w.recorder.patches
        assert path == "/api/v1/namespaces/ns/pods/big/status"
        [condition] = patch["status"]["conditions"]
        assert (condition["reason"], condition["message"]) == ("Unschedulable", message)
        assert w.pending(metrics.UNSCHEDULABLE_QUEUE) == 1
        assert w.pending(metrics.ACTIVE) == 0

    asyncio.run(run())


def test_a_failed_bind_forgets_the_pod_and_backs_it_off_as_an_error() -> None:
    async def run() -> None:
        w = world(node("n1", "2"))
        w.add_pods(pod("a", "1"))
        await w.cycle()
        await w.answer(w.binder.binds[0], BindOutcome.FAILED, "the API server said no")
        assert not w.cache.is_assumed("ns/a")
        assert w.where("a") is Location.BACKOFF
        assert w.pending(metrics.BACKOFF) == 1
        assert ("ns/a", "FailedScheduling", "the API server said no") in w.recorder.events
        [(_, patch)] = w.recorder.patches
        assert patch["status"]["conditions"][0]["reason"] == "SchedulerError"
        assert w.profile.counters.binds_total == 0

    asyncio.run(run())


def test_a_bind_that_conflicts_leaves_the_pod_alone() -> None:
    async def run() -> None:
        w = world(node("n1", "2"))
        w.add_pods(pod("a", "1"))
        await w.cycle()
        await w.answer(w.binder.binds[0], BindOutcome.CONFLICT, "already bound")
        assert not w.cache.is_assumed("ns/a")
        assert w.where("a") is None
        assert not w.recorder.events
        assert w.profile.counters.binds_total == 0

    asyncio.run(run())


def test_a_bind_never_sent_puts_the_pod_back_untouched() -> None:
    async def run() -> None:
        w = world(node("n1", "2"))
        w.add_pods(pod("a", "1"))
        await w.cycle()
        await w.answer(w.binder.binds[0], BindOutcome.DROPPED, "")
        assert not w.cache.is_assumed("ns/a")
        assert w.where("a") is Location.ACTIVE
        assert w.pending(metrics.ACTIVE) == 1
        assert not w.recorder.events

    asyncio.run(run())


def test_a_pod_deleted_before_its_cycle_leaves_the_queue() -> None:
    async def run() -> None:
        w = world(node("n1", "2"))
        w.add_pods(pod("a", "1"))
        w.cache.on_pod_event("DELETED", pod("a", "1"))
        await w.cycle()
        assert not w.binder.binds
        assert w.where("a") is None
        assert w.pending(metrics.ACTIVE) == 0

    asyncio.run(run())


# -- the pod-group cycle -------------------------------------------------------------------
def test_a_gang_that_fits_is_submitted_whole_each_member_to_its_binding() -> None:
    async def run() -> None:
        w = world(node("n1", "4"), groups=[pod_group("g", 2)])
        w.add_pods(pod("m0", "2", "g"), pod("m1", "2", "g"))
        await w.cycle()
        assert sorted((b.pod.key, b.node) for b in w.binder.binds) == [
            ("ns/m0", "n1"), ("ns/m1", "n1")]
        assert w.cache.is_assumed("ns/m0") and w.cache.is_assumed("ns/m1")
        [(path, patch)] = [(p, b) for p, b in w.recorder.patches if "podgroups" in p]
        assert path == "/apis/scheduling.k8s.io/v1beta1/namespaces/ns/podgroups/g/status"
        [condition] = patch["status"]["conditions"]
        assert (condition["type"], condition["status"], condition["reason"]) == (
            "PodGroupInitiallyScheduled", "True", "Scheduled")
        for b in w.binder.binds:
            await w.answer(b, BindOutcome.BOUND, "")
        assert w.profile.counters.binds_total == 2
        assert w.where("m0") is None and w.where("m1") is None

    asyncio.run(run())


def test_a_gang_that_cannot_fit_rejects_every_member_and_assumes_nothing() -> None:
    async def run() -> None:
        w = world(node("n1", "4"), groups=[pod_group("g", 2)])
        w.add_pods(pod("m0", "3", "g"), pod("m1", "3", "g"))
        await w.cycle()
        assert not w.binder.binds
        assert not w.cache.assumed_keys_by_scheduler()
        # Requeued as one group (the queue decides where: backoff for a rejected group).
        assert w.where("m0") is w.where("m1")
        assert w.where("m0") in (Location.BACKOFF, Location.UNSCHEDULABLE)
        assert w.profile.counters.unschedulable_attempts == 2
        failed = [(k, note) for k, reason, note in w.recorder.events
                  if reason == "FailedScheduling"]
        # m0 fitted alone: the group's rejection; m1 fitted nowhere: its own FitError.
        group_message = "minCount (2) cannot be satisfied: 1 scheduled, 0 remaining, " \
            "pod group preemption: No preemption victims found for incoming preemptor"
        assert failed == [("ns/m0", f"pod group is unschedulable, {group_message}"),
                          ("ns/m1", "0/1 nodes are available: 1 Insufficient cpu.")]
        [(_, patch)] = [(p, b) for p, b in w.recorder.patches if "podgroups" in p]
        [condition] = patch["status"]["conditions"]
        assert (condition["status"], condition["reason"], condition["message"]) == (
            "False", "Unschedulable", group_message)
        assert w.pending(metrics.BACKOFF) + w.pending(metrics.UNSCHEDULABLE_QUEUE) == 2
        assert w.pending(metrics.ACTIVE) == 0

    asyncio.run(run())


def test_a_gang_waiting_on_preemption_gives_its_members_the_groups_own_status() -> None:
    # submitPodGroupAlgorithmResult: a member that fit, of a group waiting on preemption,
    # gets the group's status as it is (no errPodGroupUnschedulable in front of it, as a
    # member of a plainly rejected group gets); seen on kube-scheduler v1.37.1 by the
    # conformance family gang-topology (preempt_rack).
    async def run() -> None:
        group = pod_group("g", 2)
        group["spec"]["priority"] = 10
        w = world(node("n1", "4"), groups=[group])
        low = pod("low", "2")
        low["spec"]["nodeName"] = "n1"
        w.cache.on_pod_event("ADDED", low)
        members = [pod("m0", "1500m", "g"), pod("m1", "1500m", "g")]
        for m in members:
            m["spec"]["priority"] = 10
        w.add_pods(*members)
        await w.cycle()
        failed = [(k, note) for k, reason, note in w.recorder.events
                  if reason == "FailedScheduling"]
        assert failed == [
            ("ns/m0", "minCount (2) cannot be satisfied: 1 scheduled, 0 remaining, pod group "
                      "preemption: found a placement for podgroup, preempting 1 victims"),
            ("ns/m1", "0/1 nodes are available: 1 Insufficient cpu.")]

    asyncio.run(run())


def test_a_pod_group_deleted_after_the_pop_sends_its_members_back_as_errors() -> None:
    async def run() -> None:
        w = world(node("n1", "4"), groups=[pod_group("g", 2)])
        w.add_pods(pod("m0", "1", "g"), pod("m1", "1", "g"))
        qp = w.profile.queue.pop_nowait()
        assert qp is not None
        group = w.profile.queue.pop_group(qp)
        assert group is not None
        w.cache.on_pod_group_event("DELETED", pod_group("g", 2))
        await w.attempts.schedule_pod_group(w.profile, group)
        assert not w.binder.binds
        notes = {note for _, reason, note in w.recorder.events if reason == "FailedScheduling"}
        assert notes == {'podgroup.scheduling.k8s.io "g" not found'}
        assert not [p for p, _ in w.recorder.patches if "podgroups" in p]

    asyncio.run(run())


# -- bounded pods (framework.pod_bounds) ---------------------------------------------------
def test_a_pod_over_the_bounds_is_refused_naming_the_field_and_queued_once_within() -> None:
    w = world(node("n1", "2"))
    over = pod("wide", "100m")
    over["spec"]["tolerations"] = [{"key": f"t{i}", "operator": "Exists"}
                                   for i in range(pod_bounds.MAX_TOLERATIONS + 1)]
    w.add_pods(over)
    assert w.where("wide") is None  # never queued, never attempted
    assert w.pending(metrics.GATED) == 1
    assert metrics.PODS_REFUSED.values == {(("profile", SCHEDULER),): 1}
    [(key, reason, note)] = w.recorder.events
    assert (key, reason) == ("ns/wide", "FailedScheduling")
    assert note.startswith(f"spec.tolerations has {pod_bounds.MAX_TOLERATIONS + 1} "
                           f"tolerations, over the bound of {pod_bounds.MAX_TOLERATIONS}")
    [(_, patch)] = w.recorder.patches
    [condition] = patch["status"]["conditions"]
    assert (condition["type"], condition["status"], condition["reason"]) == \
        ("PodScheduled", "False", "Unschedulable")
    assert condition["message"] == note
    # The same version seen again (a resync) writes nothing more.
    w.hooks.enqueue(w.profile, w.cache.pods["ns/wide"])
    assert len(w.recorder.events) == 1 and len(w.recorder.patches) == 1
    assert metrics.PODS_REFUSED.values == {(("profile", SCHEDULER),): 1}
    # Within bounds after an update: queued as any pod.
    within = pod("wide", "100m")
    within["metadata"]["resourceVersion"] = "2"
    w.cache.on_pod_event("MODIFIED", within)
    w.hooks.enqueue(w.profile, w.cache.pods["ns/wide"])
    assert w.where("wide") is Location.ACTIVE
    assert w.pending(metrics.GATED) == 0


# -- the time budget (framework.budget) ----------------------------------------------------
def test_an_attempt_over_its_budget_fails_as_an_error_naming_it_and_backs_off() -> None:
    async def run() -> None:
        # A budget of a nanosecond: the first check after the attempt began is past it.
        w = world(node("n1", "2"), attempt_budget=1e-9)
        w.add_pods(pod("a", "100m"))
        await w.cycle()
        assert not w.binder.binds
        assert w.where("a") is Location.BACKOFF
        [(key, reason, note)] = w.recorder.events
        assert (key, reason) == ("ns/a", "FailedScheduling")
        assert note.startswith("the scheduling attempt used its time budget of 1e-09s "
                               "(--attempt-budget) in PreFilter before ")
        [(_, patch)] = w.recorder.patches
        [condition] = patch["status"]["conditions"]
        assert (condition["reason"], condition["message"]) == ("SchedulerError", note)
        assert metrics.BUDGET_EXCEEDED.values == {(("profile", SCHEDULER),): 1}

    asyncio.run(run())


def test_without_a_budget_the_same_attempt_binds() -> None:
    async def run() -> None:
        w = world(node("n1", "2"), attempt_budget=None)
        w.add_pods(pod("a", "100m"))
        await w.cycle()
        [b] = w.binder.binds
        assert b.node == "n1"
        assert not metrics.BUDGET_EXCEEDED.values

    asyncio.run(run())


# -- OpportunisticBatching -----------------------------------------------------------------
NO_DEFAULT_SPREAD: Json = {"name": "PodTopologySpread",
                           "args": {"defaultingType": "List", "defaultConstraints": []}}


def test_alike_pods_in_a_row_are_batched_and_another_profiles_cycle_between_ends_it() -> None:
    # The cycle count is the engine's, over every profile (upstream's one queue): a pod of
    # another policy decided between two alike pods may have changed any node.
    async def run() -> None:
        w = world(node("n1", "4"), node("n2", "4"), node("n3", "4"),
                  spec={"filters": [NO_DEFAULT_SPREAD],
                        "scorers": [{**NO_DEFAULT_SPREAD, "weight": 2}]},
                  features=frozenset({signers.OPPORTUNISTIC_BATCHING}))
        w.add_pods(pod("a", "1"), pod("b", "1"), pod("c", "1"))
        await w.cycle()
        await w.cycle()
        batch = w.profile.batch_for(w.profile.pipeline)
        assert batch is not None and batch.batched_pods == 1
        hinted = metrics.BATCH_ATTEMPTS.values[(("profile", SCHEDULER),
                                                ("result", "hint_used"))]
        assert hinted == 1
        # Another profile's pod: its own queue, the same engine.
        other_policy = load_policy({"apiVersion": "polsched.io/v1alpha1",
                                    "kind": "SchedulingPolicy",
                                    "metadata": {"name": "q", "generation": 1},
                                    "spec": {"schedulerName": "other"}}, CATALOG)
        other = Profile(other_policy, build_pipeline(other_policy, Handle(
            listers=w.cache.listers)), w.recorder, Counters())
        other.runnable.set()
        other.started = True
        x = {**pod("x", "1"), "spec": {**pod("x", "1")["spec"], "schedulerName": "other"}}
        w.cache.on_pod_event("ADDED", x)
        other.enqueue(w.cache.pods["ns/x"], w.cache.namespaces)
        qp = other.queue.pop_nowait()
        assert qp is not None
        await w.attempts.schedule_one(other, qp)
        await w.cycle()  # c: the next cycle of its profile, not of the engine
        assert batch.batched_pods == 1
        assert metrics.BATCH_CACHE_FLUSHED.values[(("profile", SCHEDULER),
                                                   ("reason", "pod_skipped"))] == 1

    asyncio.run(run())
