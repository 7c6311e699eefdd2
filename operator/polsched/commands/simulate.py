"""`polsched simulate`: what a candidate policy would do, before it is applied.

The cluster comes from a snapshot file (polsched.commands.snapshot, or kwokctl's export) or,
live, from the API server (listed, never written). Its objects are fed to the scheduler's
own cache through the ingest methods its watches call; the candidate's Pipeline is the one
scheduler.pipelines.build_pipeline builds for the engine. What is decided is decided by
the engine's functions: the engine's queue (SchedulingQueue, its PreEnqueue plugins and
pop_group) orders the pods; schedule_pod searches; reserve_and_permit assumes, reserves
and permits, with schedule_one.rejection's message; profile.namespace_selected and its
message; pipelines.nominator_of counts the nominated pods; a pod group goes through
validate_pod_group, pod_group_verdict (pod_group_algorithm and its PodGroupPostFilter,
acting on nothing) and member_verdict (the submit, member by member), and a gang's quorum
is GangScheduling's Permit. What is simulate's own: the order of the pods (`arrival`: the
order the engine's watch received them, from the snapshot's creation revisions) and the
report. The engine's ScheduleOne itself is not driven: its cycles write conditions,
events and metrics through a Profile and bind through the API, and a recording Profile
and binder were more than this round could build and prove; the functions above are the
decisions it makes, called rather than restated.

Pods decided: the pending pods of the candidate's schedulerName; with `replay`, also the
pods bound now, taken off the cluster and decided first, in creation order. Each decision is
assumed in the cache, so the next pod sees it. Nothing is bound or written. Extenders are
called. Ties between equally scored nodes are drawn from a seeded generator (the same for
candidate and baseline). A pod that does not fit stays unschedulable: a simulation without
time has no later events to retry it on, and no Permit timeouts (a Permit that waits
passes).

Pod groups (scheduling.k8s.io/v1beta1, where the policy runs GangScheduling): a gang that
does not fit places none of its members and holds nothing for the pods after it. Members
that GangScheduling's PreEnqueue holds are reported waiting, with its text. From a file, a
member whose PodGroup is not in the file is an error; live, it waits for its group.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import functools
import math
import random
import re
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from polsched.api import API_VERSION, KIND, Policy, PolicyError, load_policy
from polsched.cluster import featuregates
from polsched.cluster.cache import ClusterCache
from polsched.commands import dryrun
from polsched.commands.output import ProgressBar as ProgressBar
from polsched.commands.simulate_groups import (
    GROUP_ERROR,
    NOT_PLACED,
    PLACED,
    WAITING,
    Decision,
    Entry,
    GroupOutcome,
    Planned,
    assume,
    decide_group,
    decide_tree,
    mark_unschedulable,
    not_selected,
    pre_bind,
)
from polsched.commands.snapshot import (
    KIND_ORDER,
    SnapshotError,
    creation_revision,
    read_snapshot,
)
from polsched.extender.client import ExtenderSetupError, HTTPExtender
from polsched.framework import listers as ls
from polsched.framework import podgroups as pgs
from polsched.framework import resources as res
from polsched.framework.diagnosis import PipelineError
from polsched.framework.interfaces import Handle
from polsched.framework.load import static_load
from polsched.framework.runtime import Pipeline
from polsched.framework.types import PodInfo
from polsched.objects import Json
from polsched.plugins import CATALOG
from polsched.plugins.gang_scheduling import NAME as GANG_SCHEDULING
from polsched.scheduler import load_status
from polsched.scheduler.algorithm import SearchLimits, schedule_pod
from polsched.scheduler.batch import new_batch
from polsched.scheduler.pipelines import build_pipeline, nominator_of, pod_group_key_fn
from polsched.scheduler.queue.scheduling_queue import SchedulingQueue

SEED = 0
ZONE_LABELS = ("topology.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/zone")

# Exit codes: 0 nothing tripped, 1 bad input or a failed run, 2 bad arguments (argparse),
# then one per --fail-on condition; when several trip, the smallest code wins.
EXIT_ERROR = 1
EXIT_UNSCHEDULABLE = 3
EXIT_NEW_UNSCHEDULABLE = 4
EXIT_CHANGED = 5


class SimulateError(Exception):
    """Something the user has to fix; printed without a traceback."""


@dataclass
class GroupChange:
    """A pod group whose outcome differs between the baseline and the candidate (or whose
    members moved)."""

    group: str
    baseline: str  # its state under the baseline ("" when the baseline had no cycle)
    candidate: str
    # "now placed", "no longer placed", "moved", "changed"; "now a group" / "no longer a
    # group" when one of the policies does not run GangScheduling.
    kind: str


@dataclass
class Usage:
    """Requested over allocatable, summed over a node or a zone."""

    cpu: int = 0
    cpu_alloc: int = 0
    memory: int = 0
    memory_alloc: int = 0
    pods: int = 0

    def add(self, other: Usage) -> None:
        self.cpu += other.cpu
        self.cpu_alloc += other.cpu_alloc
        self.memory += other.memory
        self.memory_alloc += other.memory_alloc
        self.pods += other.pods

    @property
    def cpu_pct(self) -> float:
        return 100.0 * self.cpu / self.cpu_alloc if self.cpu_alloc else 0.0

    @property
    def memory_pct(self) -> float:
        return 100.0 * self.memory / self.memory_alloc if self.memory_alloc else 0.0

    def to_json(self) -> Json:
        return {"cpuRequestedMilli": self.cpu, "cpuAllocatableMilli": self.cpu_alloc,
                "cpuPercent": round(self.cpu_pct, 1), "memoryRequested": self.memory,
                "memoryAllocatable": self.memory_alloc,
                "memoryPercent": round(self.memory_pct, 1), "pods": self.pods}


@dataclass
class Change:
    pod: str
    baseline: Decision
    candidate: Decision

    @property
    def kind(self) -> str:
        if self.baseline.node and self.candidate.node:
            return "moved"
        return "now unschedulable" if self.baseline.node else "now schedulable"


@dataclass
class Report:
    policy: str
    scheduler_name: str
    source: str
    nodes: int
    decisions: list[Decision]
    baseline: str | None = None  # what the candidate is compared with
    baseline_decisions: list[Decision] | None = None
    changes: list[Change] = field(default_factory=list)
    zone_label: str = ZONE_LABELS[0]
    node_zone: dict[str, str] = field(default_factory=dict)
    before: dict[str, Usage] = field(default_factory=dict)  # node -> usage
    after: dict[str, Usage] = field(default_factory=dict)
    seconds: float = 0.0
    groups: list[GroupOutcome] = field(default_factory=list)
    baseline_groups: list[GroupOutcome] | None = None
    group_changes: list[GroupChange] = field(default_factory=list)

    # -- derived ----------------------------------------------------------------------
    @property
    def scheduled(self) -> int:
        return sum(d.node is not None for d in self.decisions)

    @property
    def unschedulable(self) -> int:
        return len(self.decisions) - self.scheduled

    def new_unschedulable(self) -> list[Change]:
        return [c for c in self.changes if c.kind == "now unschedulable"]

    def changed_percent(self) -> float:
        return 100.0 * len(self.changes) / len(self.decisions) if self.decisions else 0.0

    def reason_histogram(self) -> list[tuple[str, int]]:
        """Per reason, how many unschedulable pods it held back on at least one node."""
        counts: dict[str, int] = {}
        for d in self.decisions:
            if d.node is None:
                for r in d.reasons or (d.reason,):
                    counts[r] = counts.get(r, 0) + 1
        return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))

    def zones(self, usage: Mapping[str, Usage]) -> dict[str, Usage]:
        out: dict[str, Usage] = {}
        for node, u in usage.items():
            out.setdefault(self.node_zone.get(node, ""), Usage()).add(u)
        return dict(sorted(out.items()))

    def changed_nodes(self) -> list[str]:
        return sorted(n for n, u in self.after.items()
                      if dataclasses.astuple(u) != dataclasses.astuple(self.before.get(n, Usage())))

    def summary(self) -> Json:
        out: Json = {"pods": len(self.decisions), "scheduled": self.scheduled,
                     "unschedulable": self.unschedulable,
                     "replayed": sum(d.replayed for d in self.decisions),
                     "nodes": self.nodes, "seconds": round(self.seconds, 3)}
        unknown = sum(d.order_unknown for d in self.decisions)
        if unknown:
            out["orderUnknown"] = unknown
        if self.groups or self.baseline_groups:
            out["gangs"] = gang_counts(self.groups)
        if self.groups:
            out["basicGroups"] = sum(g.kind == "basic" for g in self.groups)
            out["waitingForPodGroup"] = sum(not g.exists for g in self.groups)
        if self.baseline_decisions is not None:
            out["baseline"] = {
                "scheduled": sum(d.node is not None for d in self.baseline_decisions),
                "unschedulable": sum(d.node is None for d in self.baseline_decisions)}
            out["changed"] = len(self.changes)
            out["changedPercent"] = round(self.changed_percent(), 2)
            out["moved"] = sum(c.kind == "moved" for c in self.changes)
            out["newUnschedulable"] = len(self.new_unschedulable())
            out["newSchedulable"] = sum(c.kind == "now schedulable" for c in self.changes)
            if self.groups or self.baseline_groups:
                out["baseline"]["gangs"] = gang_counts(self.baseline_groups or [])
                out["groupChanges"] = len(self.group_changes)
        return out


def gang_counts(groups: Sequence[GroupOutcome]) -> Json:
    """Gangs (groups with a minCount) by outcome: placed whole, not placed, waiting at
    PreEnqueue, failed."""
    gangs = [g for g in groups if g.gang]
    return {"total": len(gangs), "placed": sum(g.state == PLACED for g in gangs),
            "notPlaced": sum(g.state == NOT_PLACED for g in gangs),
            "waiting": sum(g.state == WAITING for g in gangs),
            "error": sum(g.state == GROUP_ERROR for g in gangs)}


# -- feeding the cache --------------------------------------------------------------------
def _ingesters(cache: ClusterCache) -> dict[str, Callable[[str, Json], None]]:
    """kind -> the cache's ingest method for it, the one its watch calls. Kinds the cache
    does not hold are not fed (scheduling does not read them)."""
    out: dict[str, Callable[[str, Json], None]] = {
        "Node": cache.on_node_event, "Pod": cache.on_pod_event,
        pgs.KIND: cache.on_pod_group_event,
        pgs.COMPOSITE_KIND: cache.on_composite_pod_group_event}
    for kind in ls.KINDS:
        out[kind.name] = functools.partial(cache.on_object_event, kind)
    return out


def build_cache(objects: Sequence[Json], leave_out: frozenset[str] = frozenset(), *,
                redecide: frozenset[str] = frozenset(), pod_groups: bool | None = None,
                scheduler_name: str | None = None) -> ClusterCache:
    """A ClusterCache holding `objects` (pods whose key is in `leave_out` excepted; those
    in `redecide` as pending copies, off their nodes), fed as the watches would: nodes
    first, then the rest, pods last. No API client.

    `pod_groups`: whether the cluster serves PodGroups (None: when `objects` hold any);
    `scheduler_name`: the one scheduler simulated, whose pending members count in their
    groups (as the engine counts only the members of the schedulers it serves)."""
    cache = ClusterCache(None)
    groups = cache.pod_groups
    groups.served = any(o.get("kind") == pgs.KIND for o in objects) if pod_groups is None \
        else pod_groups
    # CompositePodGroup: with the gate on, PodGroups' parents count (as the engine's cache
    # with the gate on and scheduling.k8s.io/v1alpha3 served).
    groups.set_composite(groups.served and pgs.COMPOSITE_POD_GROUP
                         in featuregates.scheduler_features())
    if scheduler_name is not None:
        groups.responsible = scheduler_name.__eq__
    feed = _ingesters(cache)
    for obj in sorted(objects, key=lambda o: KIND_ORDER.get(str(o.get("kind")), -1)):
        kind = str(obj.get("kind"))
        fn = feed.get(kind)
        if fn is None:
            continue
        if kind == "Pod":
            key = _key(obj)
            if key in leave_out:
                continue
            if key in redecide:
                fn("ADDED", dryrun.pending_copy(obj))
                continue
        fn("ADDED", _copy(obj))
    return cache


def _copy(obj: Json) -> Json:
    # Shallow: the cache drops metadata.managedFields from what it is given.
    return {**obj, "metadata": dict(obj.get("metadata") or {})}


def _key(obj: Json) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"


def _usage(cache: ClusterCache) -> dict[str, Usage]:
    out = {}
    for n in cache.snapshot.nodes:
        out[n.name] = Usage(cpu=n.requested.get(res.CPU, 0),
                            cpu_alloc=n.allocatable.get(res.CPU, 0),
                            memory=n.requested.get(res.MEMORY, 0),
                            memory_alloc=n.allocatable.get(res.MEMORY, 0), pods=len(n.pods))
    return out


# -- the run ------------------------------------------------------------------------------
Progress = Callable[[int, int], None]
# (pending pod object, replayed, current node)
@dataclass
class Plan:
    """The cycles to run, in order, and the pods the cluster is emptied of."""

    entries: list[Entry]
    # Bound pods decided again (--replay): fed to the cache as pending copies.
    redecide: frozenset[str]
    # Pending pods a PreEnqueue plugin (SchedulingGates, GangScheduling...) keeps out of
    # the queue: never attempted, as in the engine. (pod, plugin, its message)
    gated: list[tuple[Json, str, str]] = field(default_factory=list)
    # The scheduler whose pods are decided ("": the policy's), and whether the cluster
    # serves PodGroups (None: when the objects hold any).
    scheduler_name: str = ""
    pod_groups: bool | None = None
    # Pending pods whose turn in the queue the input does not show (order_unknown).
    order_unknown: frozenset[str] = frozenset()

    @property
    def pods(self) -> list[Planned]:
        return [p for e in self.entries for p in e.pods]


def plan(objects: Sequence[Json], scheduler_name: str, replay: bool,
         pre_enqueue: Sequence[Any] = (),
         group_of: Callable[[PodInfo], str | None] | None = None) -> Plan:
    """The engine's queue (scheduler.queue.SchedulingQueue, configured with the policy's
    PreEnqueue plugins and `group_of`, pipelines.pod_group_key_fn) emptied in pop order:
    a pod group's members come out together (pop_group). Replayed pods go first, in
    creation order; the replayed members of a group form one cycle, at its first member,
    with its pending members."""
    pods = [o for o in objects if o.get("kind") == "Pod"]
    infos = [(o, PodInfo.from_json(o)) for o in pods]
    replayed = sorted(((o, i) for o, i in infos if i.scheduler_name == scheduler_name
                       and i.node_name and not i.terminal and replay),
                      key=lambda oi: arrival(*oi))
    entries: list[Entry] = []
    by_group: dict[str, Entry] = {}
    for o, i in replayed:
        item = (dryrun.pending_copy(o), True, i.node_name)
        key = group_of(i) if group_of is not None else None
        if key is None:
            entries.append(Entry([item]))
        elif key in by_group:
            by_group[key].pods.append(item)
        else:
            entries.append(by_group.setdefault(key, Entry([item], key)))
    queue = SchedulingQueue(clock=lambda: 0.0)
    queue.configure(pre_enqueue, group_of=group_of)
    by_key: dict[str, Json] = {}
    # Added in the order the pods reached the running scheduler (arrival): the queue
    # orders by priority, then by when a pod was added.
    pending = sorted(((o, i) for o, i in infos
                      if i.scheduler_name == scheduler_name and not i.node_name
                      and not i.terminal
                      and not (o.get("metadata") or {}).get("deletionTimestamp")),
                     key=lambda oi: arrival(*oi))
    for o, i in pending:
        queue.add(i)
        by_key[i.key] = o
    popped = set()
    while (qp := queue.pop_nowait()) is not None:
        group = queue.pop_group(qp)
        members = group.members if group is not None else [qp]
        for m in members:
            queue.done(m)
            popped.add(m.key)
        items: list[Planned] = [(by_key[m.key], False, None) for m in members]
        if group is not None:
            queue.group_done(group.key)
            if group.key in by_group:
                # On the cluster emptied of its replayed members, they and these wait in
                # the queue together: one cycle.
                by_group[group.key].pods += items
                continue
        entries.append(Entry(items, group.key if group is not None else ""))
    for e in by_group.values():  # PodGroupMemberPodsOrderingFunc: priority first
        e.pods.sort(key=lambda it: -PodInfo.from_json(it[0]).priority)
    gated = []
    plugins = {p.name: p for p in pre_enqueue}
    for k, o in by_key.items():
        if k in popped:
            continue
        name = queue.gated_by(k)
        p = plugins.get(name)
        message = p.pre_enqueue(PodInfo.from_json(o)).message if p is not None else ""
        gated.append((o, name, message))
    return Plan(entries, frozenset(i.key for _, i in replayed), gated,
                order_unknown=order_unknown(pending))


def arrival(obj: Json, pod: PodInfo) -> tuple[str, float, str]:
    """Where a pending pod stands in the order the running engine received it: its cache's
    order (Engine._start_scheduler walks it when a policy is applied; a later pod comes
    with its watch event), which is etcd's creation order (snapshot.creation_revision);
    creationTimestamp agrees with it across seconds. A pod whose creation revision is not
    known goes after the known ones of its second, by name: a guess (order_unknown). An
    operator started after the pods lists them in key order instead; simulate predicts
    the operator that was running when they came."""
    revision = creation_revision(obj)
    return (pod.creation, float(revision) if revision is not None else math.inf, pod.key)


def order_unknown(pending: Sequence[tuple[Json, PodInfo]]) -> frozenset[str]:
    """The pending pods whose turn simulate cannot know: those sharing a priority and a
    creation second with another where one of them has no known creation revision."""
    by_turn: dict[tuple[int, str], list[tuple[Json, PodInfo]]] = {}
    for o, i in pending:
        by_turn.setdefault((i.priority, i.creation), []).append((o, i))
    return frozenset(i.key for same in by_turn.values() if len(same) > 1
                     and any(creation_revision(o) is None for o, _ in same) for _, i in same)


def _gated_reason(plugin: str, message: str) -> str:
    if plugin == GANG_SCHEDULING and message:
        return message  # upstream's text, as the member's wait in the cluster has it
    return (f"gated: {plugin or 'a PreEnqueue plugin'} keeps it out of the scheduling queue"
            + (f" ({message})" if message else ""))


async def decide(policy: Policy, objects: Sequence[Json], the_plan: Plan,
                 extenders: Sequence[Any] = (), progress: Progress | None = None,
                 done_before: int = 0, total: int = 0,
                 ) -> tuple[list[Decision], list[GroupOutcome], ClusterCache]:
    """Every planned cycle run by `policy`'s pipeline, each pod assumed where it goes."""
    cache = build_cache(objects, redecide=the_plan.redecide, pod_groups=the_plan.pod_groups,
                        scheduler_name=the_plan.scheduler_name or policy.scheduler_name)
    # The engine's builder, its plugins reading the listers the cache was fed.
    # Load-aware scorers read the snapshot's NodeMetrics (`polsched snapshot --node-metrics`);
    # the pods placed during the simulation are in flight on their nodes.
    # The pending pods' nominations count as the engine's Nominator counts them.
    nominator = nominator_of(cache.pods.values())
    pipeline: Pipeline = build_pipeline(policy, Handle(listers=cache.listers,
                                                       load=static_load(objects),
                                                       pod_groups=cache.pod_groups,
                                                       features=featuregates.scheduler_features(),
                                                       nominator=nominator),
                                        extenders, rng=random.Random(SEED))
    batch = new_batch(pipeline, policy.scheduler_name)  # as the engine; an entry is a cycle
    out: list[Decision] = []
    groups: list[GroupOutcome] = []
    last = time.monotonic()
    i = 0
    for cycle, entry in enumerate(the_plan.entries, 1):
        if progress is not None and time.monotonic() - last > 0.2:
            last = time.monotonic()
            progress(done_before + i, total)
        i += len(entry.pods)
        if entry.group and pgs.split_key(entry.group)[0]:
            decisions, outcomes = await decide_tree(policy, pipeline, cache, nominator,
                                                     entry)
            out += decisions
            groups += outcomes
            continue
        if entry.group:
            decisions, outcome = await decide_group(policy, pipeline, cache, nominator,
                                                     entry)
            out += decisions
            groups.append(outcome)
            continue
        obj, replayed, current = entry.pods[0]
        pod = PodInfo.from_json(obj)
        d = Decision(pod.namespace, pod.name, None, replayed=replayed, current_node=current)
        out.append(d)
        if not_selected(policy, cache, pod, d):
            continue
        try:
            result = await schedule_pod(pipeline, pod, cache.snapshot,
                                        limits=SearchLimits(batch=batch, cycle=cycle))
        except PipelineError as e:
            d.reason = f"error: {e}"
            d.reasons = (d.reason,)
            continue
        if result.node is None:
            mark_unschedulable(d, result.fit_error)
            continue
        # Assume, Reserve and Permit as the engine's scheduling cycle does: what a plugin
        # holds for the pod (DynamicResources' devices) is held from the next pod too.
        assumed, _ = assume(pipeline, cache, nominator, result.state, pod, result.node, d)
        if assumed is None:
            continue
        pre_bind(pipeline, cache, result.state, assumed, result.node)
        d.node = result.node
        d.deciding_scorer = result.deciding_scorer
    waiting: dict[str, GroupOutcome] = {}
    for obj, plugin, message in the_plan.gated:
        pod = PodInfo.from_json(obj)
        reason = _gated_reason(plugin, message)
        key = cache.pod_groups.group_of(pod) or ""
        out.append(Decision(pod.namespace, pod.name, None, reason=reason,
                            reasons=(f"{plugin}: {message}" if message else "gated",),
                            group=key if key and plugin == GANG_SCHEDULING else "",
                            gated_by=plugin or "PreEnqueue"))
        if key and plugin == GANG_SCHEDULING:
            if key not in waiting:
                # No PodGroup object: its kind is unknown (reported as basic, minCount None).
                obj_group = cache.pod_groups.get(pod.namespace, key.partition("/")[2])
                waiting[key] = GroupOutcome(
                    key, pgs.min_count(obj_group), WAITING, message,
                    already_scheduled=cache.pod_groups.state(key).scheduled_pods_count,
                    exists=obj_group is not None)
            waiting[key].members.append(pod.key)
    groups += waiting.values()
    for d in out:
        d.order_unknown = not d.replayed and d.key in the_plan.order_unknown
    return out, groups, cache


@dataclass(frozen=True)
class Baseline:
    """The policy the candidate is compared with: its label in the report (its name when
    None) and its extenders."""

    policy: Policy
    label: str | None = None
    extenders: Sequence[Any] = ()


def _plan_for(policy: Policy, objects: Sequence[Json], scheduler_name: str, replay: bool,
              gate_cache: ClusterCache) -> Plan:
    """The plan of `policy`'s queue: its PreEnqueue plugins read the cluster (DynamicResources:
    do the pod's claims exist? GangScheduling: does the group exist, with enough
    members?), and its GangScheduling tells the group members."""
    gates = build_pipeline(policy, Handle(listers=gate_cache.listers,
                                          pod_groups=gate_cache.pod_groups,
                                          features=featuregates.scheduler_features()))
    out = plan(objects, scheduler_name, replay, gates.pre_enqueue_plugins,
               pod_group_key_fn(gates))
    out.scheduler_name, out.pod_groups = scheduler_name, gate_cache.pod_groups.served
    return out


def missing_pod_groups(objects: Sequence[Json], scheduler_name: str, replay: bool
                       ) -> list[tuple[str, str]]:
    """(pod key, PodGroup name) of the pods to decide whose PodGroup is not in `objects`."""
    present = {pgs.object_key(o) for o in objects if o.get("kind") == pgs.KIND}
    out = []
    for o in objects:
        if o.get("kind") != "Pod":
            continue
        i = PodInfo.from_json(o)
        if i.scheduler_name != scheduler_name or i.terminal or (i.node_name and not replay):
            continue
        key, name = pgs.pod_group_key(i), pgs.pod_group_name(i)
        if key is not None and name is not None and key not in present:
            out.append((i.key, name))
    return out


@dataclass(frozen=True)
class Cluster:
    """The cluster simulated: its objects, where they came from (for the report), and
    whether it serves PodGroups (live: discovery, as the engine's cache decides; None for
    objects from a file, where they are served when the file has any: a member whose
    PodGroup the file lacks then waits, as live; in a file with no PodGroup at all, a pod
    to decide that names one is an error)."""

    objects: Sequence[Json]
    source: str = ""
    pod_groups: bool | None = None


async def simulate(candidate: Policy, cluster: Cluster, *, replay: bool = False,
                   compare: Baseline | None = None, extenders: Sequence[Any] = (),
                   progress: Progress | None = None) -> Report:
    started = time.perf_counter()
    baseline = compare.policy if compare is not None else None
    name = candidate.scheduler_name
    objects, source, pod_groups = cluster.objects, cluster.source, cluster.pod_groups
    if pod_groups is None:
        # Objects from a file serve PodGroups when they hold any: then a member whose
        # PodGroup is missing waits at PreEnqueue, as in a live cluster (a snapshot may
        # catch a pod before its group). A file with none, whose pods name groups, most
        # likely left the PodGroups out: that is an error.
        pod_groups = any(o.get("kind") == pgs.KIND for o in objects)
        missing = [] if pod_groups else missing_pod_groups(objects, name, replay)
        if missing:
            pod, group = missing[0]
            more = f" (and {len(missing) - 1} more member(s))" if len(missing) > 1 else ""
            raise SimulateError(
                f"{source or 'the input'}: pod {pod} names PodGroup {group!r} "
                f"(spec.schedulingGroup.podGroupName), which is not in the input{more}; "
                "add the PodGroup (`polsched snapshot` lists podgroups where the cluster "
                "serves scheduling.k8s.io/v1beta1). In the cluster the pod would wait at "
                f'PreEnqueue: waiting for pods\'s pod group "{group}" to appear in '
                "scheduling queue")
    # The cluster as it is: the gates' view and the utilisation before.
    before_cache = build_cache(objects, pod_groups=pod_groups, scheduler_name=name)
    the_plan = _plan_for(candidate, objects, name, replay, before_cache)
    total = len(the_plan.pods) * (2 if baseline is not None else 1)
    decisions, groups, after = await decide(candidate, objects, the_plan, extenders, progress,
                                            0, total)
    report = Report(policy=candidate.name, scheduler_name=name,
                    source=source, nodes=len(after.snapshot.nodes), decisions=decisions,
                    before=_usage(before_cache), after=_usage(after), groups=groups)
    for node in after.snapshot.nodes:
        zone = next((node.labels[k] for k in ZONE_LABELS if k in node.labels), "")
        report.node_zone[node.name] = zone
    if baseline is not None:
        assert compare is not None
        base_plan = _plan_for(baseline, objects, name, replay, before_cache)
        base, base_groups, _ = await decide(baseline, objects, base_plan, compare.extenders,
                                            progress, len(the_plan.pods), total)
        report.baseline = compare.label or baseline.name
        report.baseline_decisions = base
        report.baseline_groups = base_groups
        by_key = {d.key: d for d in base}
        for c in decisions:
            b = by_key.get(c.key)
            if b is not None and b.node != c.node:
                report.changes.append(Change(c.key, b, c))
        report.group_changes = group_changes(base_groups, groups, base, decisions)
    report.seconds = time.perf_counter() - started
    if progress is not None:
        progress(total, total)
    return report


def group_changes(baseline: Sequence[GroupOutcome], candidate: Sequence[GroupOutcome],
                  base_decisions: Sequence[Decision], decisions: Sequence[Decision]
                  ) -> list[GroupChange]:
    """The groups whose outcome differs, or whose members land elsewhere."""
    base = {g.group: g for g in baseline}
    cand = {g.group: g for g in candidate}
    b_node = {d.key: d.node for d in base_decisions}
    c_node = {d.key: d.node for d in decisions}
    out = []
    for key in [*cand, *(k for k in base if k not in cand)]:
        b, c = base.get(key), cand.get(key)
        bs, cs = (b.state if b else ""), (c.state if c else "")
        if bs != cs:
            # "": that policy runs no pod-group cycle for it (GangScheduling off).
            kind = "now a group" if not bs else "no longer a group" if not cs else \
                "now placed" if cs == PLACED else \
                "no longer placed" if bs == PLACED else "changed"
            out.append(GroupChange(key, bs, cs, kind))
        elif c is not None and any(b_node.get(m) != c_node.get(m) for m in c.members):
            out.append(GroupChange(key, bs, cs, "moved"))
    return out


# -- output -------------------------------------------------------------------------------
def to_json(r: Report) -> Json:
    pods = []
    for d in r.decisions:
        entry: Json = {"namespace": d.namespace, "name": d.name, "node": d.node,
                       "reason": d.reason or None}
        if d.deciding_scorer:
            entry["decidingScorer"] = d.deciding_scorer
        if d.replayed:
            entry["replayed"] = True
            entry["currentNode"] = d.current_node
        if d.group:
            entry["podGroup"] = d.group
        if d.gated_by:
            entry["gatedBy"] = d.gated_by
        if d.order_unknown:
            entry["orderUnknown"] = True
        pods.append(entry)
    out: Json = {"policy": r.policy, "schedulerName": r.scheduler_name, "source": r.source,
                 "baseline": r.baseline, "summary": r.summary(),
                 "reasons": [{"reason": k, "pods": v} for k, v in r.reason_histogram()],
                 "pods": pods}
    if r.groups or r.baseline_groups:
        by_key = {d.key: d for d in r.decisions}
        out["podGroups"] = [g.to_json(by_key) for g in r.groups]
    if r.baseline_groups is not None and (r.groups or r.baseline_groups):
        out["groupChanges"] = [{"podGroup": c.group, "change": c.kind,
                                "baseline": c.baseline or None,
                                "candidate": c.candidate or None}
                               for c in r.group_changes]
    if r.baseline_decisions is not None:
        out["changes"] = [
            {"namespace": c.candidate.namespace, "name": c.candidate.name, "change": c.kind,
             "baseline": {"node": c.baseline.node, "reason": c.baseline.reason or None,
                          "decidingScorer": c.baseline.deciding_scorer or None},
             "candidate": {"node": c.candidate.node, "reason": c.candidate.reason or None,
                           "decidingScorer": c.candidate.deciding_scorer or None}}
            for c in r.changes]
    zb, za = r.zones(r.before), r.zones(r.after)
    out["utilisation"] = {
        "zoneLabel": r.zone_label,
        "zones": [{"zone": z, "before": zb[z].to_json(), "after": za.get(z, Usage()).to_json()}
                  for z in zb],
        "nodes": [{"node": n, "zone": r.node_zone.get(n, ""), "before": r.before[n].to_json(),
                   "after": r.after[n].to_json()} for n in sorted(r.after)],
    }
    return out


def _md(rows: list[list[str]]) -> str:
    def cell(s: str) -> str:
        return s.replace("|", "\\|").replace("\n", " ")

    head, *body = rows
    lines = ["| " + " | ".join(cell(c) for c in head) + " |",
             "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(cell(c) for c in r) + " |" for r in body]
    return "\n".join(lines)


def _pct(u: Usage) -> tuple[str, str]:
    return f"{u.cpu_pct:.1f}%", f"{u.memory_pct:.1f}%"


def _sections(r: Report) -> list[tuple[str, str, list[list[str]] | None]]:
    """(title, text, rows) per section, shared by the table and Markdown renderings."""
    s = r.summary()
    line = (f"{s['pods']} pod(s) simulated ({s['replayed']} replayed) on {s['nodes']} node(s): "
            f"{s['scheduled']} would schedule, {s['unschedulable']} would not.")
    if r.baseline_decisions is not None:
        line += (f" Against {r.baseline}: {s['changed']} change(s) ({s['changedPercent']}%): "
                 f"{s['moved']} moved, {s['newUnschedulable']} newly unschedulable, "
                 f"{s['newSchedulable']} newly schedulable.")
    else:
        line += " No baseline to compare with."
    if r.groups or r.baseline_groups:
        line += " " + _gang_line(r)
    if s.get("orderUnknown"):
        line += (f" {s['orderUnknown']} pod(s) (marked *) share a creation second and "
                 "priority, and their creation order is not known: their placements, and "
                 "those after them, may differ.")
    out: list[tuple[str, str, list[list[str]] | None]] = [("Summary", line, None)]
    if r.groups:
        out.append(("Pod groups", "", _group_rows(r)))
    if r.baseline_groups is not None and (r.groups or r.baseline_groups):
        rows = [["POD GROUP", "CHANGE", "BASELINE", "CANDIDATE"]]
        for gc in r.group_changes:
            rows.append([gc.group, gc.kind, gc.baseline or "no group cycle",
                         gc.candidate or "no group cycle"])
        out.append((f"Pod group changes against {r.baseline}",
                    "" if r.group_changes else "None.",
                    rows if r.group_changes else None))
    hist = r.reason_histogram()
    if hist:
        out.append(("Why pods would not schedule", "",
                    [["PODS", "REASON"]] + [[str(v), k] for k, v in hist]))
    if r.baseline_decisions is not None:
        rows = [["POD", "CHANGE", "BASELINE", "DECIDED BY", "CANDIDATE", "DECIDED BY"]]
        for c in r.changes:
            rows.append([c.pod, c.kind, c.baseline.node or "unschedulable",
                         c.baseline.deciding_scorer or "-",
                         c.candidate.node or "unschedulable",
                         c.candidate.deciding_scorer or "-"])
        out.append((f"Changes against {r.baseline}", "" if r.changes else "None.",
                    rows if r.changes else None))
    zb, za = r.zones(r.before), r.zones(r.after)
    rows = [["ZONE", "CPU BEFORE", "CPU AFTER", "MEMORY BEFORE", "MEMORY AFTER",
             "PODS BEFORE", "PODS AFTER"]]
    for z, u in zb.items():
        a = za.get(z, Usage())
        rows.append([z or "(no zone)", *_interleave(_pct(u), _pct(a)), str(u.pods),
                     str(a.pods)])
    out.append((f"Utilisation per zone ({r.zone_label}), requested / allocatable", "", rows))
    changed = r.changed_nodes()
    rows = [["NODE", "ZONE", "CPU BEFORE", "CPU AFTER", "MEMORY BEFORE", "MEMORY AFTER",
             "PODS BEFORE", "PODS AFTER"]]
    for n in changed:
        b, a = r.before.get(n, Usage()), r.after[n]
        rows.append([n, r.node_zone.get(n, "") or "-", *_interleave(_pct(b), _pct(a)),
                     str(b.pods), str(a.pods)])
    out.append((f"Utilisation per node ({len(changed)} of {len(r.after)} changed)",
                "" if changed else "No node changes.", rows if changed else None))
    rows = [["POD", "NODE", "DECIDED BY / REASON"]]
    for d in r.decisions:
        rows.append([d.key + (" (replayed)" if d.replayed else "")
                     + (" *" if d.order_unknown else ""),
                     d.node or "-", (d.deciding_scorer or "-") if d.node else d.reason])
    out.append(("Pods", "" if r.decisions else "No pod to decide.",
                rows if r.decisions else None))
    return out


def _gang_line(r: Report) -> str:
    g = gang_counts(r.groups)
    line = (f"{g['total']} gang(s): {g['placed']} placed whole, {g['notPlaced']} not placed, "
            f"{g['waiting']} waiting at PreEnqueue" + (f", {g['error']} failed" if g["error"]
                                                      else "") + ".")
    basic = sum(x.kind == "basic" for x in r.groups)
    if basic:
        line += f" {basic} basic group(s)."
    missing = sum(not x.exists for x in r.groups)
    if missing:
        line += f" {missing} group(s) waiting for their PodGroup."
    if r.baseline_groups is not None:
        b = gang_counts(r.baseline_groups)
        line += (f" Under {r.baseline}: {b['placed']} gang(s) placed whole; "
                 f"{len(r.group_changes)} group(s) change.")
    return line


_OUTCOME_TEXT = {PLACED: "placed", NOT_PLACED: "not placed", WAITING: "waiting",
                 GROUP_ERROR: "error"}


def _group_rows(r: Report) -> list[list[str]]:
    """Per group: its kind, the outcome, each member's node (or -), the group's message."""
    nodes = {d.key: d.node for d in r.decisions}
    rows = [["POD GROUP", "KIND", "OUTCOME", "MEMBERS (NODE)", "MESSAGE"]]
    for g in r.groups:
        kind = f"gang, minCount {g.min_count}" if g.gang else g.kind
        outcome = _OUTCOME_TEXT[g.state]
        if g.state == PLACED:
            n = sum(nodes.get(m) is not None for m in g.members)
            outcome = "placed whole" if g.gang else f"placed {n} of {len(g.members)}"
        if g.already_scheduled:
            outcome += f" ({g.already_scheduled} bound before)"
        members = ", ".join(f"{m.partition('/')[2]} ({nodes.get(m) or '-'})"
                            for m in g.members)
        rows.append([g.group, kind, outcome, members, g.message or "-"])
    return rows


def _interleave(a: tuple[str, str], b: tuple[str, str]) -> list[str]:
    return [a[0], b[0], a[1], b[1]]


def format_table(r: Report) -> str:
    head = (f"SchedulingPolicy {r.policy} (schedulerName {r.scheduler_name}) "
            f"against {r.source}, {r.seconds:.1f} s")
    parts = [head, ""]
    for title, text, rows in _sections(r):
        parts.append(f"{title}:")
        if text:
            parts.append(text)
        if rows:
            parts.append(dryrun.table(rows))
        parts.append("")
    return "\n".join(parts)


# Sections longer than this many rows fold into <details> in the Markdown report.
_MD_FOLD = 20


def format_markdown(r: Report) -> str:
    parts = [f"### polsched simulate: `{r.policy}` against {r.source}", ""]
    for title, text, rows in _sections(r):
        if title == "Summary":
            parts += [text, ""]
            continue
        if rows and len(rows) - 1 > _MD_FOLD:
            parts += [f"<details><summary>{title} ({len(rows) - 1})</summary>", "",
                      _md(rows), "", "</details>", ""]
            continue
        parts += [f"#### {title}", ""]
        if text:
            parts += [text, ""]
        if rows:
            parts += [_md(rows), ""]
    return "\n".join(parts)


# -- --fail-on ----------------------------------------------------------------------------
@dataclass(frozen=True)
class FailOn:
    """One CI condition: `unschedulable`, `new-unschedulable`, `changed>N` or `changed>N%`."""

    what: str
    limit: float = 0.0
    percent: bool = False

    @classmethod
    def parse(cls, text: str) -> FailOn:
        t = text.strip().replace(" ", "")
        if t in ("unschedulable", "new-unschedulable"):
            return cls(t)
        m = re.fullmatch(r"changed(?:>(\d+(?:\.\d+)?)(%?))?", t)
        if m:
            return cls("changed", float(m.group(1) or 0), m.group(2) == "%")
        raise argparse.ArgumentTypeError(
            f"unknown --fail-on condition {text!r}: use unschedulable, new-unschedulable, "
            "changed, changed>N or changed>N%")

    def needs_baseline(self) -> bool:
        return self.what != "unschedulable"

    def check(self, r: Report) -> tuple[int, str] | None:
        """(exit code, why) when the condition trips."""
        if self.what == "unschedulable":
            if r.unschedulable:
                return EXIT_UNSCHEDULABLE, f"{r.unschedulable} pod(s) would not schedule"
            return None
        if self.what == "new-unschedulable":
            n = len(r.new_unschedulable())
            if n:
                return (EXIT_NEW_UNSCHEDULABLE,
                        f"{n} pod(s) schedulable under {r.baseline} would not schedule")
            return None
        value = r.changed_percent() if self.percent else float(len(r.changes))
        if value > self.limit:
            unit = "%" if self.percent else ""
            return (EXIT_CHANGED, f"{value:.4g}{unit} of placements change against "
                    f"{r.baseline} (limit {self.limit:g}{unit})")
        return None


def parse_fail_on(values: Iterable[str]) -> list[FailOn]:
    out = []
    for v in values:
        for part in v.split(","):
            if part.strip():
                out.append(FailOn.parse(part))
    return out


def verdict(r: Report, conditions: Sequence[FailOn]) -> tuple[int, list[str]]:
    tripped = [t for c in conditions if (t := c.check(r)) is not None]
    if not tripped:
        return 0, []
    return min(code for code, _ in tripped), [why for _, why in tripped]


# -- the command --------------------------------------------------------------------------
def _load(obj: Json, source: str) -> Policy:
    try:
        return load_policy(obj, CATALOG)
    except PolicyError as e:
        raise SimulateError(f"{source}: {e}") from e


def load_candidate(path: str, name: str | None) -> Policy:
    try:
        objs = read_snapshot(path)
    except SnapshotError as e:
        raise SimulateError(str(e)) from e
    found = dryrun.policies_in(objs)
    if name:
        found = [p for p in found if (p.get("metadata") or {}).get("name") == name]
    if not found:
        raise SimulateError(f"{path}: no {KIND} ({API_VERSION})"
                            + (f" named {name!r}" if name else ""))
    if len(found) > 1:
        names = ", ".join(str((p.get("metadata") or {}).get("name")) for p in found)
        raise SimulateError(f"{path}: {len(found)} policies ({names}); pick one with --policy")
    return _load(found[0], path)


def current_policy(objects: Sequence[Json], candidate: Policy) -> Json | None:
    """The applied policy the candidate would replace: the one it shadows (spec.shadowOf),
    else the one of the same name, else of the same schedulerName (the one the
    operator runs when several claim it: dryrun.owner_of)."""
    found = dryrun.policies_in(objects)
    wanted = candidate.shadow_of or candidate.name
    same = [p for p in found if (p.get("metadata") or {}).get("name") == wanted]
    if same:
        return same[0]
    return dryrun.owner_of(found, candidate.scheduler_name)


async def _extenders(policy: Policy, client: Any | None) -> list[HTTPExtender]:
    try:
        return await dryrun.open_extenders(policy, client)
    except ExtenderSetupError as e:
        raise SimulateError(str(e)) from e


def _reads_load(policy: Policy) -> bool:
    return load_status.reads_node_load(build_pipeline(policy, Handle()))


async def _run(args: argparse.Namespace, conditions: Sequence[FailOn]) -> Report:
    candidate = load_candidate(args.file, args.policy)
    client = None
    # From a file: PodGroups where the file has them (simulate checks every member's).
    served: bool | None = None
    try:
        if args.snapshot and args.snapshot != "live":
            source = args.snapshot
            try:
                objects = read_snapshot(args.snapshot)
            except SnapshotError as e:
                raise SimulateError(str(e)) from e
        else:
            from polsched.commands import connection
            from polsched.commands.snapshot import KINDS, NODE_METRICS, POD_GROUPS, collect

            source = "the live cluster"
            client = connection.client(args)
            # Node usage too when the candidate has a load-aware scorer (the Metrics API;
            # left out with a warning where it is not served).
            kinds = (*KINDS, NODE_METRICS) if _reads_load(candidate) else KINDS
            # PodGroups where discovery lists them, as the engine's cache decides.
            served = await ClusterCache(client).discover()

            def warn(message: str) -> None:  # node usage, and PodGroups served but hidden
                if message.startswith(f"{NODE_METRICS.plural} left out"):
                    print(f"polsched simulate: node usage (metrics.k8s.io) {message}; the "
                          "load-aware scorers see no metrics", file=sys.stderr)
                elif served and message.startswith(f"{POD_GROUPS.plural} left out"):
                    print(f"polsched simulate: {message}; every gang member looks as if "
                          "its PodGroup did not exist", file=sys.stderr)

            try:
                objects = await collect(client, kinds, warn=warn)
            except SnapshotError as e:
                raise SimulateError(str(e)) from e
        baseline: Policy | None = None
        label = None
        if args.baseline == "current":
            obj = current_policy(objects, candidate)
            if obj is not None:
                baseline = _load(obj, f"{source}: {KIND} "
                                      f"{(obj.get('metadata') or {}).get('name')}")
                label = f"the current {(obj.get('metadata') or {}).get('name')}"
                if candidate.shadow_of:
                    # A shadow decides the pods of the policy it shadows.
                    candidate = dataclasses.replace(candidate,
                                                    scheduler_name=baseline.scheduler_name)
        elif args.baseline != "none":
            baseline = load_candidate(args.baseline, None)
            label = f"{baseline.name} from {args.baseline}"
        if baseline is None and any(c.needs_baseline() for c in conditions):
            raise SimulateError(
                f"--fail-on {', '.join(c.what for c in conditions if c.needs_baseline())} "
                f"needs a baseline, and {source} has no {KIND} named {candidate.name!r} or "
                f"with schedulerName {candidate.scheduler_name!r}; give --baseline FILE")
        exts = await _extenders(candidate, client)
        base_exts = await _extenders(baseline, client) if baseline is not None else []
        bar = ProgressBar(sys.stderr) if sys.stderr.isatty() else None
        try:
            compare = Baseline(baseline, label, base_exts) if baseline is not None else None
            return await simulate(candidate, Cluster(objects, source, served),
                                  replay=args.replay, compare=compare, extenders=exts,
                                  progress=bar)
        finally:
            if bar is not None:
                bar.close()
            for ext in (*exts, *base_exts):
                await ext.close()
    finally:
        if client is not None:
            await client.close()


def run(args: argparse.Namespace) -> int:
    try:
        conditions = parse_fail_on(args.fail_on or ())
    except argparse.ArgumentTypeError as e:
        print(f"polsched simulate: {e}", file=sys.stderr)
        return 2
    try:
        report = asyncio.run(_run(args, conditions))
    except SimulateError as e:
        print(f"polsched simulate: {e}", file=sys.stderr)
        return EXIT_ERROR
    from polsched.commands import output, plot

    if args.output in output.STRUCTURED:
        text = output.render(to_json(report), args.output, indent=1)
    elif args.output == "markdown":
        text = format_markdown(report) + plot.mermaid_section(to_json(report))
    else:
        text = format_table(report)
    output.write(text, args.out)
    if getattr(args, "plot", None):
        output.write(plot.utilisation_svg(to_json(report)), args.plot)
    code, why = verdict(report, conditions)
    for w in why:
        print(f"polsched simulate: --fail-on: {w}", file=sys.stderr)
    return code
