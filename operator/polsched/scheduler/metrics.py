"""Prometheus metrics under kube-scheduler's names, and the /metrics, /healthz and /readyz
endpoints.

Dashboards and alerts written for kube-scheduler work unchanged: the names, labels and
histogram buckets are those of pkg/scheduler/metrics/metrics.go (schedule_attempts_total
{result,profile}, scheduling_attempt_duration_seconds{result,profile}, pending_pods{queue});
a profile is a policy's schedulerName. polsched adds its own reload metrics under
polsched_.

The module-level functions are the hooks the engine and the operator call; they are
cheap (a dict update under no lock: everything runs on one event loop). The text
exposition format (version 0.0.4) is small enough to write here, which spares a
dependency; prometheus_client would add its own global registry and threads for no gain.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aiohttp import web

# kube-scheduler's result label values (metrics.go ScheduledResult, ...).
SCHEDULED = "scheduled"
UNSCHEDULABLE = "unschedulable"
ERROR = "error"
# A pod group whose cycle found victims to evict (podgroup_schedule_attempts_total only).
WAITING_ON_PREEMPTION = "waiting_on_preemption"
# goroutines operation label value: binding cycles under way.
BINDING = "binding"
# pending_pods queue label values.
ACTIVE = "active"
BACKOFF = "backoff"
UNSCHEDULABLE_QUEUE = "unschedulable"
GATED = "gated"
# Pod group members waiting for their group's cycle to end, and for their PodGroup
# (metrics.PendingPodGroupPods, IncompletePodGroupPods).
PENDING = "pending"
INCOMPLETE = "incomplete"

# metrics.ExponentialBuckets(0.001, 2, 15), as schedulingLatency.
ATTEMPT_BUCKETS = tuple(0.001 * 2 ** i for i in range(15))
# Loading and building a policy: from a millisecond to tens of seconds.
RELOAD_BUCKETS = tuple(0.001 * 2 ** i for i in range(16))

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
Labels = tuple[tuple[str, str], ...]


def _labels(labels: Labels) -> str:
    if not labels:
        return ""
    esc = (v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
           for _, v in labels)
    return "{" + ",".join(f'{k}="{v}"' for (k, _), v in zip(labels, esc, strict=True)) + "}"


def _num(v: float) -> str:
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v)) if not float(v).is_integer() else str(int(v))


@dataclass
class Counter:
    name: str
    help: str
    values: dict[Labels, float] = field(default_factory=dict)

    def inc(self, labels: Labels, by: float = 1.0) -> None:
        self.values[labels] = self.values.get(labels, 0.0) + by

    def lines(self) -> Iterable[str]:
        yield f"# HELP {self.name} {self.help}"
        yield f"# TYPE {self.name} counter"
        for labels, v in sorted(self.values.items()):
            yield f"{self.name}{_labels(labels)} {_num(v)}"


@dataclass
class Gauge:
    """A gauge whose series are set by (labels) and summed over `hidden` label keys."""

    name: str
    help: str
    # The series as set, keyed by their full labels (including hidden ones).
    values: dict[Labels, float] = field(default_factory=dict)
    hidden: frozenset[str] = frozenset()

    def set(self, labels: Labels, value: float) -> None:
        self.values[labels] = value

    def lines(self) -> Iterable[str]:
        shown: dict[Labels, float] = {}
        for labels, v in self.values.items():
            key = tuple(kv for kv in labels if kv[0] not in self.hidden)
            shown[key] = shown.get(key, 0.0) + v
        yield f"# HELP {self.name} {self.help}"
        yield f"# TYPE {self.name} gauge"
        for labels, v in sorted(shown.items()):
            yield f"{self.name}{_labels(labels)} {_num(v)}"


@dataclass
class Histogram:
    name: str
    help: str
    buckets: Sequence[float]
    # labels -> (per-bucket counts, not cumulative; the last is +Inf), sum, count
    series: dict[Labels, tuple[list[int], list[float]]] = field(default_factory=dict)

    def observe(self, labels: Labels, value: float) -> None:
        s = self.series.get(labels)
        if s is None:
            s = ([0] * (len(self.buckets) + 1), [0.0, 0.0])
            self.series[labels] = s
        counts, total = s
        for i, upper in enumerate(self.buckets):
            if value <= upper:
                counts[i] += 1
                break
        else:
            counts[-1] += 1
        total[0] += value
        total[1] += 1

    def lines(self) -> Iterable[str]:
        yield f"# HELP {self.name} {self.help}"
        yield f"# TYPE {self.name} histogram"
        for labels, (counts, (total, n)) in sorted(self.series.items()):
            acc = 0
            for upper, c in zip((*self.buckets, math.inf), counts, strict=True):
                acc += c
                yield f"{self.name}_bucket{_labels((*labels, ('le', _num(upper))))} {acc}"
            yield f"{self.name}_sum{_labels(labels)} {_num(total)}"
            yield f"{self.name}_count{_labels(labels)} {int(n)}"


SCHEDULE_ATTEMPTS = Counter(
    "scheduler_schedule_attempts_total",
    "Number of attempts to schedule pods, by the result. 'unschedulable' means a pod could "
    "not be scheduled, while 'error' means an internal scheduler problem.")
ATTEMPT_DURATION = Histogram(
    "scheduler_scheduling_attempt_duration_seconds",
    "Scheduling attempt latency in seconds (scheduling algorithm + binding)", ATTEMPT_BUCKETS)
PENDING_PODS = Gauge(
    "scheduler_pending_pods",
    "Number of pending pods, by the queue type. 'active' means number of pods in activeQ; "
    "'backoff' means number of pods in backoffQ; 'unschedulable' means number of pods in "
    "unschedulablePods that the scheduler attempted to schedule and failed; 'gated' is the "
    "number of unschedulable pods that the scheduler never attempted to schedule because "
    "they are gated.", hidden=frozenset({"profile"}))
POLICY_RELOADS = Counter(
    "polsched_policy_reloads_total",
    "SchedulingPolicy generations loaded into a pipeline, by policy and result "
    "('success', or 'error' when the spec did not load and the last good pipeline stayed).")
RELOAD_DURATION = Histogram(
    "polsched_policy_reload_duration_seconds",
    "Time to load a SchedulingPolicy generation and build its pipeline, in seconds",
    RELOAD_BUCKETS)
# The end of a hot reload as users feel it: the first pod decided by a generation.
FIRST_DECISION_GENERATION = Gauge(
    "polsched_policy_first_decision_generation",
    "The latest SchedulingPolicy generation that has decided a pod (chosen a node or found "
    "none): its pipeline is in effect")
FIRST_DECISION_TIME = Gauge(
    "polsched_policy_first_decision_timestamp_seconds",
    "When polsched_policy_first_decision_generation decided its first pod, in seconds since "
    "the Unix epoch")
FIRST_DECISION_WAIT = Gauge(
    "polsched_policy_first_decision_wait_seconds",
    "Seconds from polsched_policy_first_decision_generation's pipeline being swapped in to "
    "its first decision (the wait for a pod to decide, and for the cycle under way)")
FIRST_DECISION_IDLE = Gauge(
    "polsched_policy_first_decision_idle_seconds",
    "Of polsched_policy_first_decision_wait_seconds, the seconds before the pod it decided "
    "entered the queue: the policy had no pod to decide (0 when one was already queued)")

PREEMPTION_ATTEMPTS = Counter(
    "scheduler_preemption_attempts_total", "Total preemption attempts in the cluster till now")
PREEMPTION_VICTIMS = Histogram(
    "scheduler_preemption_victims",
    "Number of selected preemption victims for preemption initiated by a single pod",
    tuple(float(2 ** i) for i in range(7)))

GOROUTINES = Gauge(
    "scheduler_goroutines",
    "Number of running goroutines split by the work they do such as binding. (polsched: "
    "the binding cycles under way, from Permit's wait to the Binding's answer.)")

# GenericWorkload's metrics (metrics.go podGroupScheduleAttempts, podGroupSchedulingLatency,
# PodGroupSchedulingAlgorithmLatency, WorkloadPreemptionAttempts, WorkloadPreemptionVictims,
# PreemptionWorkloadDisruptions): a pod group's cycle and its workload-aware preemption.
PODGROUP_SCHEDULE_ATTEMPTS = Counter(
    "scheduler_podgroup_schedule_attempts_total",
    "Number of attempts to schedule pod group, by the result. 'unschedulable' means a pod "
    "group could not be scheduled, while 'error' means an internal scheduler problem.")
PODGROUP_ATTEMPT_DURATION = Histogram(
    "scheduler_podgroup_scheduling_attempt_duration_seconds",
    "Pod group scheduling attempt latency in seconds", ATTEMPT_BUCKETS)
PODGROUP_ALGORITHM_DURATION = Histogram(
    "scheduler_podgroup_scheduling_algorithm_duration_seconds",
    "Pod group scheduling algorithm latency in seconds", ATTEMPT_BUCKETS)
# metrics.ExponentialBuckets(1, 2, 11): 1 .. 1024.
_UNIT_BUCKETS = tuple(float(2 ** i) for i in range(11))
WORKLOAD_PREEMPTION_ATTEMPTS = Counter(
    "scheduler_workload_preemption_attempts_total",
    "Total preemption attempts initiated by workload (including pod groups) in the cluster "
    "till now.")
WORKLOAD_PREEMPTION_VICTIMS = Histogram(
    "scheduler_workload_preemption_victims",
    "Number of pod preemption victims caused by workload preemption.", _UNIT_BUCKETS)
PREEMPTION_WORKLOAD_DISRUPTIONS = Histogram(
    "scheduler_preemption_workload_disruptions",
    "Number of workload preemption units being preempted. A single preemption unit can be "
    "all pods in a pod group (in case of DisruptionMode=all), or a single pod (in case of "
    "DisruptionMode=single).", _UNIT_BUCKETS)
# TopologyAwareWorkloadScheduling's (metrics.go GeneratedPlacementsTotal,
# PlacementEvaluations, PlacementEvaluationDuration): the placement algorithm.
GENERATED_PLACEMENTS = Counter(
    "scheduler_generated_placements_total",
    "Number of candidate placements generated when scheduling pod groups.")
PLACEMENT_EVALUATIONS = Counter(
    "scheduler_placement_evaluations_total",
    "Number of candidate placements evaluated when scheduling pod groups, by result. "
    "'feasible' means the pod group fit into the placement, while 'infeasible' means it "
    "did not.")
# metrics.ExponentialBuckets(0.001, 2, 15)
PLACEMENT_EVALUATION_DURATION = Histogram(
    "scheduler_placement_evaluation_duration_seconds",
    "Latency in seconds of evaluating a single candidate placement when scheduling pod "
    "groups, by result. 'feasible' means the pod group fit into the placement, while "
    "'infeasible' means it did not.", tuple(0.001 * 2 ** i for i in range(15)))
FEASIBLE, INFEASIBLE = "feasible", "infeasible"

# The process's garbage collector (controller/process/gcpolicy.py): each pass stops the event loop.
GC_PAUSE = Histogram(
    "polsched_gc_pause_seconds",
    "Cyclic garbage collector passes and how long each stopped the process, in seconds, by "
    "generation (2: a full pass)", tuple(0.0005 * 2 ** i for i in range(12)))
GC_THRESHOLD = Gauge(
    "polsched_gc_threshold",
    "The collector's thresholds (gc.get_threshold()) set at start, by generation")
GC_FROZEN = Gauge(
    "polsched_gc_frozen_objects",
    "Objects moved out of the collector's passes once the cache had synced (gc.freeze)")

# The event recorder's bound (scheduler/recorder.py): events not written, and why.
EVENTS_DROPPED = Counter(
    "polsched_events_dropped_total",
    "Events recorded but not written to the API server, by reporting controller (the "
    "policy's schedulerName) and reason: queue_full (1000 writes already waiting, as "
    "client-go's event broadcaster drops) or spam (the pod's events over the spam filter's "
    "budget, as client-go's EventSourceObjectSpamFilter)")

# The load-aware scorers' whole API cost: one request per polling interval, whatever the
# number of pods (cluster.node_metrics).
NODE_METRICS_REQUESTS = Counter(
    "polsched_node_metrics_requests_total",
    "Requests for node usage to the Metrics API (metrics.k8s.io) by the node metrics "
    "watcher, by result ('success' or 'error'); none on the per-pod path")

ALL: tuple[Counter | Gauge | Histogram, ...] = (
    SCHEDULE_ATTEMPTS, ATTEMPT_DURATION, PENDING_PODS, POLICY_RELOADS, RELOAD_DURATION,
    FIRST_DECISION_GENERATION, FIRST_DECISION_TIME, FIRST_DECISION_WAIT, FIRST_DECISION_IDLE,
    PREEMPTION_ATTEMPTS,
    PREEMPTION_VICTIMS, GOROUTINES, PODGROUP_SCHEDULE_ATTEMPTS, PODGROUP_ATTEMPT_DURATION,
    PODGROUP_ALGORITHM_DURATION, WORKLOAD_PREEMPTION_ATTEMPTS, WORKLOAD_PREEMPTION_VICTIMS,
    PREEMPTION_WORKLOAD_DISRUPTIONS, GC_PAUSE, GC_THRESHOLD, GC_FROZEN, EVENTS_DROPPED,
    NODE_METRICS_REQUESTS, GENERATED_PLACEMENTS, PLACEMENT_EVALUATIONS,
    PLACEMENT_EVALUATION_DURATION)


# -- the hooks -------------------------------------------------------------------------
def schedule_attempt(profile: str, result: str, seconds: float) -> None:
    """One scheduling attempt ended: result is SCHEDULED, UNSCHEDULABLE or ERROR;
    seconds from popping the pod to the end of its binding (scheduled) or the failure."""
    labels = (("profile", profile), ("result", result))
    SCHEDULE_ATTEMPTS.inc(labels)
    ATTEMPT_DURATION.observe(labels, seconds)


def pending_pods(profile: str, queue: str, count: int) -> None:
    """How many of `profile`'s pods wait in `queue` now (ACTIVE, BACKOFF,
    UNSCHEDULABLE_QUEUE, GATED). Exported per queue, summed over profiles as upstream's
    single-scheduler metric is."""
    PENDING_PODS.set((("profile", profile), ("queue", queue)), count)


def forget_profile(profile: str) -> None:
    """The policy is gone: its pods no longer count as pending here."""
    for labels in [k for k in PENDING_PODS.values if ("profile", profile) in k]:
        del PENDING_PODS.values[labels]


def first_decision(policy: str, generation: int, timestamp: float, wait: float = 0.0,
                   idle: float = 0.0) -> None:
    """`policy`'s generation decided its first pod at `timestamp` (time.time()), `wait`
    seconds after its pipeline was swapped in, `idle` of them with no pod queued."""
    labels = (("policy", policy),)
    FIRST_DECISION_GENERATION.set(labels, generation)
    FIRST_DECISION_TIME.set(labels, timestamp)
    FIRST_DECISION_WAIT.set(labels, wait)
    FIRST_DECISION_IDLE.set(labels, idle)


def forget_policy(policy: str) -> None:
    """The policy no longer runs here: drop its per-policy gauges."""
    labels = (("policy", policy),)
    for gauge in (FIRST_DECISION_GENERATION, FIRST_DECISION_TIME, FIRST_DECISION_WAIT,
                  FIRST_DECISION_IDLE):
        gauge.values.pop(labels, None)


def event_dropped(controller: str, reason: str) -> None:
    """The recorder of `controller` dropped an event: reason "queue_full" or "spam"."""
    EVENTS_DROPPED.inc((("controller", controller), ("reason", reason)))


def preemption_attempt() -> None:
    """DefaultPreemption's PostFilter ran (eligible or not, with a candidate or not)."""
    PREEMPTION_ATTEMPTS.inc(())


def preemption_victims(count: int, workload: bool = False, disruptions: int = 0) -> None:
    """A preemption chose `count` victims (observeVictims): a pod group's (`workload`) in
    scheduler_workload_preemption_victims, a pod's in scheduler_preemption_victims; and,
    when some were pod groups taken whole, how many (`disruptions`)."""
    (WORKLOAD_PREEMPTION_VICTIMS if workload else PREEMPTION_VICTIMS).observe((), count)
    if disruptions > 0:
        PREEMPTION_WORKLOAD_DISRUPTIONS.observe(
            (("preemptor", "podgroup" if workload else "pod"),), disruptions)


def goroutines(operation: str, count: int) -> None:
    """How many of `operation` (BINDING) are under way now."""
    GOROUTINES.set((("operation", operation),), count)


def pod_group_attempt(profile: str, result: str, seconds: float) -> None:
    """A pod group's cycle ended (observePodGroupScheduleAttemptAndLatency): result is
    SCHEDULED, UNSCHEDULABLE, WAITING_ON_PREEMPTION or ERROR; seconds since its pop."""
    labels = (("profile", profile), ("result", result))
    PODGROUP_SCHEDULE_ATTEMPTS.inc(labels)
    PODGROUP_ATTEMPT_DURATION.observe(labels, seconds)


def pod_group_algorithm(seconds: float) -> None:
    """The pod group scheduling algorithm took `seconds` since the group's pop."""
    PODGROUP_ALGORITHM_DURATION.observe((), seconds)


def generated_placements(profile: str, count: int) -> None:
    """RecordGeneratedPlacements: the placement algorithm generated `count` placements."""
    GENERATED_PLACEMENTS.inc((("profile", profile),), count)


def placement_evaluation(profile: str, feasible: bool, seconds: float) -> None:
    """ObservePlacementEvaluation: one placement tried, the group fit there or not."""
    labels = (("profile", profile), ("result", FEASIBLE if feasible else INFEASIBLE))
    PLACEMENT_EVALUATIONS.inc(labels)
    PLACEMENT_EVALUATION_DURATION.observe(labels, seconds)


# fwk.Code's String(), the result label of scheduler_workload_preemption_attempts_total.
_CODE_NAMES = ("Success", "Error", "Unschedulable", "UnschedulableAndUnresolvable", "Wait",
               "Skip", "Pending")


def workload_preemption_attempt(code: int) -> None:
    """DefaultPreemption's PodGroupPostFilter ended with status code `code`."""
    name = _CODE_NAMES[code] if 0 <= code < len(_CODE_NAMES) else f"Code({code})"
    WORKLOAD_PREEMPTION_ATTEMPTS.inc((("result", name),))


def policy_reload(policy: str, result: str, seconds: float) -> None:
    """A policy generation was loaded ("success") or refused ("error")."""
    POLICY_RELOADS.inc((("policy", policy), ("result", result)))
    RELOAD_DURATION.observe((("policy", policy),), seconds)


def gc_pause(generation: int, seconds: float) -> None:
    """A collection of `generation` stopped the process for `seconds`."""
    GC_PAUSE.observe((("generation", str(generation)),), seconds)


def gc_thresholds(thresholds: Sequence[int]) -> None:
    for generation, value in enumerate(thresholds):
        GC_THRESHOLD.set((("generation", str(generation)),), value)


def node_metrics_request(ok: bool) -> None:
    NODE_METRICS_REQUESTS.inc((("result", "success" if ok else "error"),))


def gc_frozen(count: int) -> None:
    GC_FROZEN.set((), count)


def exposition() -> str:
    return "\n".join(line for m in ALL for line in m.lines()) + "\n"


def reset() -> None:
    """Forget every value (tests)."""
    for m in ALL:
        if isinstance(m, Histogram):
            m.series.clear()
        else:
            m.values.clear()


# -- the endpoints ---------------------------------------------------------------------
def parse_listen(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"--metrics-listen {listen!r}: expected HOST:PORT, "
                         "e.g. 127.0.0.1:8080")
    return host.strip("[]"), int(port)


def import_server() -> None:
    """Import what serve() needs (aiohttp.web, ~30 ms of CPU) now: controller.process.boot calls
    this on its worker thread, so that serve() does not import it on the event loop
    while the cache's lists are answered."""
    import aiohttp.web  # noqa: F401


async def serve(listen: str, ready: Callable[[], bool] = lambda: True,
                healthy: Callable[[], bool] = lambda: True, *,
                with_metrics: bool = True) -> web.AppRunner:
    """Serve /metrics, /healthz and /readyz on `listen` (HOST:PORT; port 0 picks a free
    one: read it from the runner's addresses). /readyz answers 200 once `ready()` is true
    (the cache has synced), /healthz while `healthy()` is. `with_metrics=False`: the
    probes only (--health-listen: what kubelet reaches on the pod's IP tells nothing but
    ok). Stop with `await runner.cleanup()`."""
    from aiohttp import web

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=exposition().encode(),
                            headers={"Content-Type": CONTENT_TYPE})

    def probe(check: Callable[[], bool]) -> Callable[[web.Request], object]:
        async def handler(_: web.Request) -> web.Response:
            ok = check()
            return web.Response(status=200 if ok else 503, text="ok" if ok else "not ok")
        return handler

    app = web.Application()
    if with_metrics:
        app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", probe(healthy))  # type: ignore[arg-type]
    app.router.add_get("/readyz", probe(ready))  # type: ignore[arg-type]
    host, port = parse_listen(listen)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner
