"""`polsched simulate`: what a candidate policy would do, before it is applied.

The cluster comes from a snapshot file (polsched.snapshot, or kwokctl's export) or, live,
from the API server (listed, never written). Its objects are fed to the scheduler's own
cache (cluster.ClusterCache) through the same ingest methods its watches call, and the
candidate's Pipeline is the one scheduler.pipelines.build_pipeline builds for the engine,
so the simulation sees the state and runs the code the operator would.

Pods decided:
- the pending pods of the candidate's schedulerName, in the order its queue pops them
  (scheduler.queue.SchedulingQueue: priority, then creationTimestamp);
- with `replay`, also the pods of that schedulerName bound now: they are taken off the
  cluster and re-decided first, in creation order, then the pending pods.
Each decision is assumed on its node in the cache (as the engine assumes before binding),
so the next pod sees it. Nothing is bound and nothing is written: no client is handed to
the cache, and the live mode only lists. Extenders are called (filter and prioritize).

Ties between equally scored nodes are broken by a draw from a seeded generator, the same
seed for the candidate and the baseline, so a run repeats exactly and a policy compared
with itself shows no change.

A pod that does not fit when its turn comes stays unschedulable in the report; the live
scheduler would retry it on later cluster events, which a simulation without time has
none of.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import functools
import json
import random
import re
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from polsched import dryrun
from polsched.api import API_VERSION, KIND, Policy, PolicyError, load_policy
from polsched.cluster.cache import ClusterCache
from polsched.extender.client import ExtenderSetupError, HTTPExtender
from polsched.framework import listers as ls
from polsched.framework import resources as res
from polsched.framework.diagnosis import PipelineError
from polsched.framework.interfaces import Handle
from polsched.framework.load import static_load
from polsched.framework.runtime import Pipeline
from polsched.framework.types import PodInfo
from polsched.objects import Json
from polsched.plugins import CATALOG
from polsched.scheduler.pipelines import build_pipeline
from polsched.scheduler.queue import SchedulingQueue
from polsched.scheduler.schedule_one import schedule_pod
from polsched.snapshot import KIND_ORDER, SnapshotError, read_snapshot

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


# -- results ------------------------------------------------------------------------------
@dataclass
class Decision:
    namespace: str
    name: str
    node: str | None
    # Why it would not schedule (the FailedScheduling message), "" when it would.
    reason: str = ""
    # The distinct per-node reasons ("Insufficient cpu"), for the histogram.
    reasons: tuple[str, ...] = ()
    deciding_scorer: str = ""
    replayed: bool = False
    # Where it runs now (replayed pods only).
    current_node: str | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


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
        if self.baseline_decisions is not None:
            out["baseline"] = {
                "scheduled": sum(d.node is not None for d in self.baseline_decisions),
                "unschedulable": sum(d.node is None for d in self.baseline_decisions)}
            out["changed"] = len(self.changes)
            out["changedPercent"] = round(self.changed_percent(), 2)
            out["moved"] = sum(c.kind == "moved" for c in self.changes)
            out["newUnschedulable"] = len(self.new_unschedulable())
            out["newSchedulable"] = sum(c.kind == "now schedulable" for c in self.changes)
        return out


# -- feeding the cache --------------------------------------------------------------------
def _ingesters(cache: ClusterCache) -> dict[str, Callable[[str, Json], None]]:
    """kind -> the cache's ingest method for it, the one its watch calls. Kinds the cache
    does not hold are not fed (scheduling does not read them)."""
    out: dict[str, Callable[[str, Json], None]] = {
        "Node": cache.on_node_event, "Pod": cache.on_pod_event}
    for kind in ls.KINDS:
        out[kind.name] = functools.partial(cache.on_object_event, kind)
    return out


def build_cache(objects: Sequence[Json], leave_out: frozenset[str] = frozenset()
                ) -> ClusterCache:
    """A ClusterCache holding `objects` (pods whose key is in `leave_out` excepted), fed
    as the watches would: nodes first, then the rest, pods last. No API client."""
    cache = ClusterCache(None)
    feed = _ingesters(cache)
    for obj in sorted(objects, key=lambda o: KIND_ORDER.get(str(o.get("kind")), -1)):
        kind = str(obj.get("kind"))
        fn = feed.get(kind)
        if fn is None:
            continue
        if kind == "Pod" and _key(obj) in leave_out:
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


@dataclass
class Plan:
    """The pods to decide, in order, and the pods the cluster is emptied of."""

    pods: list[tuple[Json, bool, str | None]]  # (pending pod object, replayed, current node)
    leave_out: frozenset[str]
    # Pending pods a PreEnqueue plugin (SchedulingGates) keeps out of the queue: never
    # attempted, as in the engine.
    gated: list[Json] = field(default_factory=list)


def plan(objects: Sequence[Json], scheduler_name: str, replay: bool,
         pre_enqueue: Sequence[Any] = ()) -> Plan:
    pods = [o for o in objects if o.get("kind") == "Pod"]
    infos = [(o, PodInfo.from_json(o)) for o in pods]
    replayed = sorted(((o, i) for o, i in infos if i.scheduler_name == scheduler_name
                       and i.node_name and not i.terminal and replay),
                      key=lambda oi: (oi[1].creation, oi[1].key))
    queue = SchedulingQueue(clock=lambda: 0.0)
    queue.configure(pre_enqueue)
    by_key: dict[str, Json] = {}
    for o, i in infos:
        if i.scheduler_name == scheduler_name and not i.node_name and not i.terminal \
                and not (o.get("metadata") or {}).get("deletionTimestamp"):
            queue.add(i)
            by_key[i.key] = o
    order: list[tuple[Json, bool, str | None]] = [
        (dryrun.pending_copy(o), True, i.node_name) for o, i in replayed]
    popped = set()
    while (qp := queue.pop_nowait()) is not None:
        queue.done(qp)
        popped.add(qp.key)
        order.append((by_key[qp.key], False, None))
    gated = [o for k, o in by_key.items() if k not in popped]
    return Plan(order, frozenset(i.key for _, i in replayed), gated)


async def decide(policy: Policy, objects: Sequence[Json], the_plan: Plan,
                 extenders: Sequence[Any] = (), progress: Progress | None = None,
                 done_before: int = 0, total: int = 0,
                 ) -> tuple[list[Decision], ClusterCache]:
    """Every planned pod decided by `policy`'s pipeline, each assumed where it goes."""
    cache = build_cache(objects, the_plan.leave_out)
    # The engine's builder, its plugins reading the listers the cache was fed.
    # Load-aware scorers read the snapshot's NodeMetrics (`polsched snapshot --node-metrics`);
    # the pods placed during the simulation are in flight on their nodes.
    pipeline: Pipeline = build_pipeline(policy, Handle(listers=cache.listers,
                                                       load=static_load(objects)), extenders,
                                        rng=random.Random(SEED))
    selector = policy.namespace_selector
    out: list[Decision] = []
    last = time.monotonic()
    for i, (obj, replayed, current) in enumerate(the_plan.pods):
        if progress is not None and (i & 63) == 0 and time.monotonic() - last > 0.2:
            last = time.monotonic()
            progress(done_before + i, total)
        pod = PodInfo.from_json(obj)
        d = Decision(pod.namespace, pod.name, None, replayed=replayed, current_node=current)
        out.append(d)
        if selector is not None:
            labels = cache.namespaces.get(pod.namespace) or {
                "kubernetes.io/metadata.name": pod.namespace}
            if not selector(labels):
                d.reason = (f'namespace "{pod.namespace}" is not selected by '
                            f'spec.namespaceSelector of SchedulingPolicy "{policy.name}"')
                d.reasons = ("namespace not selected",)
                continue
        try:
            result = await schedule_pod(pipeline, pod, cache.snapshot)
        except PipelineError as e:
            d.reason = f"error: {e}"
            d.reasons = (d.reason,)
            continue
        if result.node is None:
            fe = result.fit_error
            d.reason = fe.message if fe is not None else "no node fits"
            if fe is not None and fe.pre_filter_msg:
                d.reasons = (fe.pre_filter_msg,)
            elif fe is not None:
                d.reasons = tuple(sorted({r for st in fe.node_statuses.values()
                                          for r in st.reasons})) or (d.reason,)
            else:
                d.reasons = (d.reason,)
            continue
        # Reserve, as the engine does before binding: what a plugin holds for the pod
        # (DynamicResources' devices) is held from the next pod too.
        rejected = _reserve(pipeline, result.state, pod, result.node)
        if rejected:
            d.reason = rejected
            d.reasons = (rejected,)
            continue
        d.node = result.node
        d.deciding_scorer = result.deciding_scorer
        cache.assume(pod, result.node)
    for obj in the_plan.gated:
        pod = PodInfo.from_json(obj)
        out.append(Decision(pod.namespace, pod.name, None,
                            reason="gated: a PreEnqueue plugin (such as SchedulingGates) keeps "
                                   "it out of the scheduling queue", reasons=("gated",)))
    return out, cache


@dataclass(frozen=True)
class Baseline:
    """The policy the candidate is compared with: its label in the report (its name when
    None) and its extenders."""

    policy: Policy
    label: str | None = None
    extenders: Sequence[Any] = ()


def _reserve(pipeline: Pipeline, state: Any, pod: PodInfo, node: str) -> str:
    """Run the Reserve plugins that apply to the pod (the runtime's
    RunReservePluginsReserve); on a failure, unreserve them all and return the message
    ("" when all reserved)."""
    if state is None:
        return ""
    plugins = pipeline.plugins_for(pod)
    st = pipeline.run_reserve_plugins_reserve(state, pod, node, plugins)
    if st.ok:
        return ""
    pipeline.run_reserve_plugins_unreserve(state, pod, node, plugins)
    return f'running Reserve plugin "{st.plugin}": {st.message}'


async def simulate(candidate: Policy, objects: Sequence[Json], *, replay: bool = False,
                   compare: Baseline | None = None, source: str = "",
                   extenders: Sequence[Any] = (),
                   progress: Progress | None = None) -> Report:
    started = time.perf_counter()
    baseline = compare.policy if compare is not None else None
    # PreEnqueue plugins read the cluster (DynamicResources: do the pod's claims exist?).
    gate_listers = ls.Listers()
    gate_listers.load(objects)
    gates = build_pipeline(candidate, Handle(listers=gate_listers)).pre_enqueue_plugins
    the_plan = plan(objects, candidate.scheduler_name, replay, gates)
    n = len(the_plan.pods)
    total = n * (2 if baseline is not None else 1)
    decisions, after = await decide(candidate, objects, the_plan, extenders, progress, 0, total)
    before_cache = build_cache(objects)
    report = Report(policy=candidate.name, scheduler_name=candidate.scheduler_name,
                    source=source, nodes=len(after.snapshot.nodes), decisions=decisions,
                    before=_usage(before_cache), after=_usage(after))
    for node in after.snapshot.nodes:
        zone = next((node.labels[k] for k in ZONE_LABELS if k in node.labels), "")
        report.node_zone[node.name] = zone
    if baseline is not None:
        assert compare is not None
        base, _ = await decide(baseline, objects, the_plan, compare.extenders, progress, n,
                               total)
        report.baseline = compare.label or baseline.name
        report.baseline_decisions = base
        for b, c in zip(base, decisions, strict=True):
            if b.node != c.node:
                report.changes.append(Change(c.key, b, c))
    report.seconds = time.perf_counter() - started
    if progress is not None:
        progress(total, total)
    return report


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
        pods.append(entry)
    out: Json = {"policy": r.policy, "schedulerName": r.scheduler_name, "source": r.source,
                 "baseline": r.baseline, "summary": r.summary(),
                 "reasons": [{"reason": k, "pods": v} for k, v in r.reason_histogram()],
                 "pods": pods}
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
    out: list[tuple[str, str, list[list[str]] | None]] = [("Summary", line, None)]
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
        rows.append([d.key + (" (replayed)" if d.replayed else ""),
                     d.node or "-", (d.deciding_scorer or "-") if d.node else d.reason])
    out.append(("Pods", "" if r.decisions else "No pod to decide.",
                rows if r.decisions else None))
    return out


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


# -- progress -----------------------------------------------------------------------------
class ProgressBar:
    """A one-line bar on a terminal, shown once a run has taken `after` seconds."""

    def __init__(self, stream: TextIO, after: float = 2.0) -> None:
        self.stream = stream
        self.after = after
        self.start = time.monotonic()
        self.shown = False

    def __call__(self, done: int, total: int) -> None:
        elapsed = time.monotonic() - self.start
        if elapsed < self.after or not total:
            return
        self.shown = True
        width = 30
        filled = width * done // total
        self.stream.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} "
                          f"decisions, {elapsed:.0f} s")
        self.stream.flush()

    def close(self) -> None:
        if self.shown:
            self.stream.write("\n")
            self.stream.flush()


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
    from polsched.plugins.trimaran import LoadAwareScorer

    return any(isinstance(s.plugin, LoadAwareScorer)
               for s in build_pipeline(policy, Handle()).scorers)


async def _run(args: argparse.Namespace, conditions: Sequence[FailOn]) -> Report:
    candidate = load_candidate(args.file, args.policy)
    client = None
    try:
        if args.snapshot and args.snapshot != "live":
            source = args.snapshot
            try:
                objects = read_snapshot(args.snapshot)
            except SnapshotError as e:
                raise SimulateError(str(e)) from e
        else:
            from polsched.cluster.client import ApiClient
            from polsched.snapshot import KINDS, NODE_METRICS, collect

            source = "the live cluster"
            client = ApiClient.from_kubeconfig(args.kubeconfig)
            # Node usage too when the candidate has a load-aware scorer (the Metrics API;
            # left out with a warning where it is not served).
            kinds = (*KINDS, NODE_METRICS) if _reads_load(candidate) else KINDS
            def warn(message: str) -> None:  # only about node usage, as before
                if message.startswith(f"{NODE_METRICS.plural} left out"):
                    print(f"polsched simulate: node usage (metrics.k8s.io) {message}; the "
                          "load-aware scorers see no metrics", file=sys.stderr)

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
            return await simulate(candidate, objects, replay=args.replay, compare=compare,
                                  source=source, extenders=exts, progress=bar)
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
    if args.output == "json":
        text = json.dumps(to_json(report), indent=1) + "\n"
    elif args.output == "markdown":
        text = format_markdown(report)
    else:
        text = format_table(report)
    if args.out and args.out != "-":
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    code, why = verdict(report, conditions)
    for w in why:
        print(f"polsched simulate: --fail-on: {w}", file=sys.stderr)
    return code
