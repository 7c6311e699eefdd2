"""SchedulingQueue with pod groups: the group is one queue entity, as upstream's
QueuedPodGroupInfo (backend/queue/scheduling_queue.go): popped as one unit (members in
upstream's order), with its own attempts, unschedulable count, backoff and timestamp;
AddAttemptedPodGroupIfNeeded's rules after a cycle (group_done); members arriving during
its cycle wait in pendingPodGroupPods, members without a PodGroup in
incompletePodGroupPods; events move the group by any member's hints; Activate of a member
activates the group; the flushes; the pending-pods counts. The queue is configured from a
pipeline the production builder built from the default policy (GangScheduling's
PreEnqueue, hints and PodGroup lookup) over a ClusterCache fed with watch events."""

from __future__ import annotations

import math

from polsched.api import load_policy
from polsched.cluster.cache import ClusterCache
from polsched.framework import events as ev
from polsched.framework.interfaces import Handle
from polsched.framework.types import PodInfo
from polsched.objects import Json
from polsched.plugins import CATALOG
from polsched.scheduler.pipelines import build_pipeline, pod_group_key_fn, pod_group_lookup_fn
from polsched.scheduler.queue.scheduling_queue import SchedulingQueue
from polsched.scheduler.queue.types import GroupOutcome, Location, QueuedPodGroup
from tests.builders import make_pod

GANG = "GangScheduling"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def pod_group(name: str = "g", min_count: int | None = None, priority: int = 0) -> Json:
    policy: Json = {"gang": {"minCount": min_count}} if min_count is not None \
        else {"basic": {}}
    spec: Json = {"schedulingPolicy": policy}
    if priority:
        spec["priority"] = priority
    return {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "ns", "generation": 1}, "spec": spec}


def member(name: str, group: str | None = "g", priority: int = 0) -> Json:
    p = (make_pod().name(name).namespace("ns").uid(f"uid-{name}").resource_version("1")
         .scheduler("s").priority(priority).container(image="x"))
    if group is not None:
        p.pod_group(group)
    return p.obj()


class Env:
    """A queue, its cache and clock; pods and PodGroups arrive as the engine feeds them
    (the cache first, then the queue: Add, then the UnscheduledPod/Add event)."""

    def __init__(self) -> None:
        self.clock = Clock()
        self.cache = ClusterCache(None)
        self.cache.pod_groups.served = True
        handle = Handle(listers=self.cache.listers, pod_groups=self.cache.pod_groups,
                        waiting_pods={})
        pipeline = build_pipeline(load_policy({
            "apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
            "metadata": {"name": "s"}, "spec": {}}, CATALOG), handle)
        self.pipeline = pipeline
        self.queue = SchedulingQueue(clock=self.clock)
        self.configure()

    def configure(self) -> None:
        """As the engine configures the queue from the pipeline (every apply)."""
        p = self.pipeline
        self.queue.configure(p.pre_enqueue_plugins, p.queueing_hints(), pod_group_key_fn(p),
                             pod_group_lookup_fn(p))

    def group(self, obj: Json, kind: str = "ADDED") -> None:
        old = self.cache.pod_groups.get("ns", obj["metadata"]["name"])
        self.cache.on_pod_group_event(kind, obj)
        key = f"ns/{obj['metadata']['name']}"
        if kind == "ADDED":
            self.queue.pod_group_added(key)
            self.queue.move(ev.POD_GROUP_ADD, None, obj)
        elif kind == "DELETED":
            self.queue.pod_group_deleted(key)
            self.queue.move(ev.POD_GROUP_DELETE, obj, None)
        else:
            self.queue.move(ev.POD_GROUP_UPDATE, old, obj)

    def pod(self, obj: Json) -> PodInfo:
        self.cache.on_pod_event("ADDED", obj)
        p = PodInfo.from_json(obj)
        self.queue.add(p)
        self.queue.move(ev.UNSCHEDULED_POD_ADD, None, p)
        return p

    def pop(self) -> QueuedPodGroup:
        first = self.queue.pop_nowait()
        assert first is not None
        g = self.queue.pop_group(first)
        assert g is not None
        return g

    def reject(self, g: QueuedPodGroup, plugins: tuple[str, ...] = ()) -> None:
        """The group's cycle rejected it: each member fails (with the group's status, no
        plugin), then group_done."""
        for m in g.members:
            self.queue.add_unschedulable(m, plugins)
        self.queue.group_done(g.key, GroupOutcome.REJECTED)


def names(g: QueuedPodGroup) -> list[str]:
    return [m.pod.name for m in g.members]


def test_a_group_is_popped_as_one_unit_in_upstreams_member_order() -> None:
    env = Env()
    env.group(pod_group())
    env.group(pod_group("h"))
    for name in ("a", "b", "plain", "c"):
        env.pod(member(name, None if name == "plain" else "g"))
        env.clock.now += 1
    env.pod(member("other", "h"))
    assert env.queue.sizes() == (5, 0, 0, 0)  # pods, as upstream's pending_pods
    group = env.pop()
    assert group.key == "ns/g" and names(group) == ["a", "b", "c"]
    assert group.attempts == 1 and all(m.attempts == 1 for m in group.members)
    assert all(env.queue.where(m.key) is Location.IN_FLIGHT for m in group.members)
    plain = env.queue.pop_nowait()
    assert plain is not None and plain.pod.name == "plain"
    assert env.queue.pop_group(plain) is None
    assert names(env.pop()) == ["other"]


def test_groups_are_ordered_by_the_podgroups_priority_not_their_members() -> None:
    env = Env()
    env.group(pod_group("low"))
    env.group(pod_group("high", priority=100))
    env.pod(member("l", "low", priority=500))
    env.pod(member("h", "high"))
    assert env.pop().key == "ns/high"


def test_members_without_a_podgroup_wait_incomplete_until_it_is_observed() -> None:
    env = Env()
    env.pod(member("a"))
    env.pod(member("b"))
    assert env.queue.where("ns/a") is Location.INCOMPLETE
    assert env.queue.group_sizes() == (0, 2) and env.queue.pop_nowait() is None
    env.group(pod_group())
    assert env.queue.where("ns/a") is Location.ACTIVE
    assert env.queue.group_sizes() == (0, 0) and names(env.pop()) == ["a", "b"]


def test_a_podgroup_deleted_sends_its_queued_members_back_to_incomplete() -> None:
    env = Env()
    env.group(pod_group())
    env.pod(member("a"))
    env.group(pod_group(), "DELETED")
    assert env.queue.where("ns/a") is Location.INCOMPLETE and len(env.queue) == 0


def test_a_gang_waits_gated_as_a_whole_until_min_count_members_are_there() -> None:
    env = Env()
    env.group(pod_group(min_count=3))
    env.pod(member("a"))
    env.pod(member("b"))
    assert env.queue.where("ns/a") is Location.GATED
    assert env.queue.sizes() == (0, 0, 0, 2)
    env.pod(member("c"))  # the UnscheduledPod/Add hint of GangScheduling moves the group
    assert env.queue.where("ns/a") is Location.ACTIVE
    assert env.queue.sizes() == (3, 0, 0, 0)
    assert names(env.pop()) == ["a", "b", "c"]


def test_a_rejected_group_backs_off_as_one_entity_and_counts_its_rejections() -> None:
    env = Env()
    env.group(pod_group())
    env.pod(member("a"))
    env.pod(member("b"))
    g = env.pop()
    env.reject(g)
    assert g.unschedulable_count == 1 and g.consecutive_errors == 0
    assert env.queue.where("ns/a") is Location.BACKOFF
    assert env.queue.sizes() == (0, 2, 0, 0)
    # A group is never popped from backoffQ early (its own rejector plugins are empty:
    # upstream's error backoff heap), even with activeQ empty.
    assert env.queue.pop_nowait() is None
    env.clock.now = env.queue.backoff_expiry(g)
    assert env.pop() is g and g.attempts == 2
    env.reject(g)
    # 2 s for the second rejection (aligned to the next whole-second window).
    assert env.queue.backoff_expiry(g) == math.floor(env.clock.now + 2) + 1


def test_a_groups_maximum_backoff_grows_with_the_square_root_of_its_size() -> None:
    env = Env()
    env.group(pod_group())
    for name in ("a", "b", "c", "d"):
        env.pod(member(name))
    g = env.pop()
    for _ in range(6):
        env.reject(g)
        env.clock.now = env.queue.backoff_expiry(g)
        assert env.pop() is g
    # calculateBackoffDuration: maxBackoff (10 s) * sqrt(4 members) = 20 s, not 10 s.
    assert env.queue.backoff_duration(g) == 20.0


def test_after_a_success_the_remaining_members_go_straight_to_active_with_their_timestamp(
        ) -> None:
    env = Env()
    env.group(pod_group())
    env.pod(member("a"))
    env.pod(member("b"))
    g = env.pop()
    env.reject(g)
    env.clock.now = env.queue.backoff_expiry(g)
    g = env.pop()
    stamp = g.timestamp
    a, b = g.members
    env.clock.now += 5
    env.queue.done(a)  # bound
    env.queue.add_unschedulable(b, ("NodeResourcesFit",))  # did not fit
    env.queue.group_done(g.key, GroupOutcome.SUCCESS)
    assert env.queue.where("ns/b") is Location.ACTIVE
    assert g.unschedulable_count == 0 and g.consecutive_errors == 0
    assert g.timestamp == stamp  # kept: preemption is tried at once
    assert names(env.pop()) == ["b"]


def test_after_a_success_new_members_alone_get_a_new_timestamp() -> None:
    env = Env()
    env.group(pod_group())
    env.pod(member("a"))
    g = env.pop()
    env.clock.now += 5
    env.pod(member("late"))  # arrives during the cycle: pendingPodGroupPods
    assert env.queue.where("ns/late") is Location.PENDING
    assert env.queue.group_sizes() == (1, 0) and env.queue.pop_nowait() is None
    env.queue.done(g.members[0])
    env.queue.group_done(g.key, GroupOutcome.SUCCESS)
    assert env.queue.where("ns/late") is Location.ACTIVE and g.timestamp == env.clock.now


def test_an_error_counts_consecutive_errors_and_backs_off() -> None:
    env = Env()
    env.group(pod_group())
    env.pod(member("a"))
    g = env.pop()
    env.queue.add_backoff(g.members[0])
    env.queue.group_done(g.key, GroupOutcome.ERROR)
    assert g.consecutive_errors == 1 and env.queue.where("ns/a") is Location.BACKOFF


def test_a_group_with_nothing_left_to_schedule_leaves_the_queue() -> None:
    env = Env()
    env.group(pod_group())
    env.pod(member("a"))
    g = env.pop()
    env.queue.done(g.members[0])
    env.queue.group_done(g.key, GroupOutcome.SUCCESS)
    assert len(env.queue) == 0 and env.queue.keys() == set()
    # A member that fails later (its binding) starts a new group entity.
    env.queue.add_unschedulable(g.members[0], ())
    assert env.queue.where("ns/a") is Location.ACTIVE
    assert env.queue.group("ns/g") is not g


def test_a_member_added_to_a_backing_off_group_joins_it_there() -> None:
    env = Env()
    env.group(pod_group())
    env.pod(member("a"))
    g = env.pop()
    env.reject(g)
    env.pod(member("b"))
    assert env.queue.where("ns/b") is Location.BACKOFF and names(g) == ["a", "b"]
    assert env.queue.sizes() == (0, 2, 0, 0)


def test_a_deleted_member_leaves_its_group_and_an_empty_group_leaves_the_queue() -> None:
    env = Env()
    env.group(pod_group())
    env.pod(member("a"))
    env.pod(member("b"))
    env.queue.delete("ns/a", "uid-a")
    assert "ns/a" not in env.queue and env.queue.where("ns/b") is Location.ACTIVE
    env.queue.delete("ns/b")
    assert len(env.queue) == 0 and env.queue.group("ns/g") is None


def test_deleting_a_gang_member_gates_the_group_again() -> None:
    env = Env()
    env.group(pod_group(min_count=2))
    env.pod(member("a"))
    env.pod(member("b"))
    assert env.queue.where("ns/a") is Location.ACTIVE
    env.cache.on_pod_event("DELETED", member("b"))
    env.queue.delete("ns/b")
    assert env.queue.where("ns/a") is Location.GATED


def test_a_held_member_deleted_during_the_cycle_is_not_queued() -> None:
    env = Env()
    env.group(pod_group())
    env.pod(member("a"))
    g = env.pop()
    env.pod(member("late"))
    env.queue.delete("ns/late")
    env.queue.done(g.members[0])
    env.queue.group_done(g.key, GroupOutcome.SUCCESS)
    assert "ns/late" not in env.queue and len(env.queue) == 0


def test_activate_of_a_member_activates_the_whole_group() -> None:
    env = Env()
    env.group(pod_group())
    env.pod(member("a"))
    env.pod(member("b"))
    g = env.pop()
    env.reject(g)
    assert env.queue.where("ns/a") is Location.BACKOFF
    assert env.queue.activate(["ns/b", "ns/missing"]) == 1
    assert env.queue.where("ns/a") is Location.ACTIVE
    assert env.pop() is g


def test_a_min_count_decrease_moves_a_gated_gang_by_the_groups_hint() -> None:
    env = Env()
    env.group(pod_group(min_count=3))
    env.pod(member("a"))
    env.pod(member("b"))
    assert env.queue.where("ns/a") is Location.GATED
    env.group(pod_group(min_count=4), "MODIFIED")  # an increase: QueueSkip
    assert env.queue.where("ns/a") is Location.GATED
    env.group(pod_group(min_count=2), "MODIFIED")
    assert env.queue.where("ns/a") is Location.ACTIVE


def test_a_gated_group_is_flushed_through_preenqueue_after_five_minutes() -> None:
    env = Env()
    env.group(pod_group(min_count=2))
    env.pod(member("a"))
    assert env.queue.where("ns/a") is Location.GATED
    env.clock.now += 400
    assert env.queue.pop_nowait() is None and env.queue.where("ns/a") is Location.GATED


def test_restore_puts_a_paused_groups_members_back_uncounted() -> None:
    env = Env()
    env.group(pod_group())
    env.pod(member("a"))
    env.pod(member("b"))
    g = env.pop()
    for m in g.members:
        env.queue.restore(m)
    env.queue.group_done(g.key, GroupOutcome.RESTORED)
    assert g.attempts == 0 and env.queue.where("ns/a") is Location.ACTIVE
    assert sorted(names(env.pop())) == ["a", "b"]


def test_a_member_updated_in_flight_is_not_queued_twice() -> None:
    env = Env()
    env.group(pod_group())
    env.pod(member("a"))
    g = env.pop()
    updated = member("a")
    updated["metadata"]["labels"] = {"x": "y"}
    env.queue.add(PodInfo.from_json(updated))
    assert env.queue.where("ns/a") is Location.IN_FLIGHT
    env.reject(g)
    assert env.queue.keys() == {"ns/a"} and names(g) == ["a"]
    assert g.members[0].pod.labels == {"x": "y"}


def test_switching_gang_scheduling_off_queues_the_members_as_pods() -> None:
    env = Env()
    env.group(pod_group())
    env.pod(member("a"))
    env.pod(member("b", "nogroup"))  # incomplete
    env.queue.configure()
    assert env.queue.where("ns/a") is Location.ACTIVE
    assert env.queue.where("ns/b") is Location.ACTIVE
    popped = {env.queue.pop_nowait().pod.name for _ in range(2)}  # type: ignore[union-attr]
    assert popped == {"a", "b"}


def test_switching_gang_scheduling_on_queues_waiting_members_as_their_group() -> None:
    env = Env()
    env.queue.configure()  # a pipeline without GangScheduling
    env.group(pod_group())
    env.pod(member("a"))
    env.pod(member("b"))
    assert env.queue.group("ns/g") is None
    env.configure()
    assert names(env.pop()) == ["a", "b"]


def where_all(env: Env, live: set[str]) -> dict[str, Location | None]:
    return {k: env.queue.where(k) for k in sorted(live)}


def test_random_transitions_never_lose_or_duplicate_a_member() -> None:
    """Random adds, pops with every outcome, deletes, activations, events, PodGroup
    deletions and re-creations and time: every live pod waits in exactly one place (or
    is in flight), sizes() counts each once, and nothing is popped twice at once."""
    import random

    rng = random.Random(7)
    env = Env()
    live: set[str] = set()
    in_cycle: list[QueuedPodGroup] = []
    groups = {"g": 2, "h": None}
    env.group(pod_group("g", min_count=2))
    env.group(pod_group("h"))
    n = 0
    for _ in range(3000):
        op = rng.random()
        if op < 0.3:
            n += 1
            group = rng.choice(["g", "h", "x", None])
            obj = member(f"p{n}", group)
            env.pod(obj)
            live.add(f"ns/p{n}")
        elif op < 0.5 and not in_cycle:
            first = env.queue.pop_nowait()
            if first is not None:
                g = env.queue.pop_group(first)
                if g is None:
                    env.queue.add_unschedulable(first, ("NodeResourcesFit",))
                else:
                    assert len({m.key for m in g.members}) == len(g.members)
                    in_cycle.append(g)
        elif op < 0.6 and in_cycle:
            g = in_cycle.pop()
            outcome = rng.choice(list(GroupOutcome))
            for m in g.members:
                if outcome is GroupOutcome.RESTORED:
                    env.queue.restore(m)
                elif outcome is GroupOutcome.SUCCESS and rng.random() < 0.5:
                    env.queue.done(m)  # bound: it leaves
                    live.discard(m.key)
                    env.cache.on_pod_event("DELETED", member(m.pod.name, None))
                elif outcome is GroupOutcome.ERROR:
                    env.queue.add_backoff(m)
                else:
                    env.queue.add_unschedulable(m, rng.choice([(), (GANG,)]))
            env.queue.group_done(g.key, outcome)
        elif op < 0.7 and live:
            key = rng.choice(sorted(live))
            env.cache.on_pod_event("DELETED", member(key.partition("/")[2], None))
            env.queue.delete(key)
            live.discard(key)
        elif op < 0.75 and live:
            env.queue.activate([rng.choice(sorted(live))])
        elif op < 0.8:
            env.queue.move(rng.choice([ev.NODE_ADD, ev.EVENT_POLICY_CHANGE]))
        elif op < 0.83 and not in_cycle:
            name = rng.choice(sorted(groups))
            if env.cache.pod_groups.get("ns", name) is not None:
                env.group(pod_group(name, min_count=groups[name]), "DELETED")
            else:
                env.group(pod_group(name, min_count=groups[name]))
        else:
            env.clock.now += rng.choice([0.5, 2, 11, 400])
        places = where_all(env, live)
        flying = {m.key for g in in_cycle for m in g.members}
        for key, loc in places.items():
            assert loc is not None, key  # never dropped
            assert (loc is Location.IN_FLIGHT) == (key in flying), (key, loc)
        counted = [sum(loc is want for loc in places.values()) for want in (
            Location.ACTIVE, Location.BACKOFF, Location.UNSCHEDULABLE,
            Location.GATED, Location.PENDING, Location.INCOMPLETE)]
        assert [*env.queue.sizes(), *env.queue.group_sizes()] == counted
        # A pod deleted during its group's cycle stays in flight until the cycle ends.
        assert live <= env.queue.keys() <= live | flying


def test_a_member_joining_keeps_its_groups_place_among_equal_timestamps() -> None:
    """With one timestamp for all (simulate's clock), a group stays where its first
    member put it when more members join, as its timestamp does live."""
    env = Env()
    env.group(pod_group())
    env.pod(member("a"))
    env.pod(member("plain", None))
    env.pod(member("b"))
    assert names(env.pop()) == ["a", "b"]


def test_filling_a_gang_counts_its_members_once_per_change() -> None:
    """Every queue move runs PreEnqueue for each member of the group (upstream's
    runPreEnqueuePlugins), and GangScheduling's PreEnqueue asks how many members the group
    has: the count is cached per change of the group, so filling a gang of n members asks
    `responsible` O(n^2) times, not O(n^3) (a gang of 1000 kept the engine's loop busy for
    minutes before the fix)."""
    env = Env()
    calls = 0

    def responsible(name: str) -> bool:
        nonlocal calls
        calls += 1
        return True

    env.cache.pod_groups.responsible = responsible
    n = 100
    env.group(pod_group("g", n))
    for i in range(n):
        env.pod(member(f"m{i:03d}"))
    assert env.queue.sizes()[0] == n
    assert env.pop().key == "ns/g"
    assert calls <= n * n, calls  # a walk per PreEnqueue call: ~n^3 / 2 = 500000
