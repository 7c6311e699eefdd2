"""Prometheus metrics under kube-scheduler's names, and the /metrics, /healthz and /readyz
endpoints.

Every stable and beta metric of kube-scheduler v1.37 (pkg/scheduler/metrics/metrics.go) is
registered under its name, labels and histogram buckets; a profile is a policy's
schedulerName. Not all of them are observed yet: docs/metrics.md (generated from ALL by
hack/metrics_doc.py) says which ones stay empty. Beside them: client-go's rest_client_*
(counted at cluster.client), the process_* family of the Prometheus client libraries,
leader_election_master_status as kube components export it, and polsched's own under
polsched_. A dashboard written for kube-scheduler's names finds them, but panels on
metrics polsched leaves empty (per-plugin timings, go_*) stay blank: see
manifests/monitoring/ for a dashboard and alerts checked against what is exported.

The module-level functions are the hooks the engine and the operator call; they are
cheap (a dict update under no lock: everything runs on one event loop). The text
exposition format (version 0.0.4) is small enough to write here, which spares a
dependency; prometheus_client would add its own global registry and threads for no gain.
"""

from __future__ import annotations

import functools
import math
import os
import platform
import resource
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import polsched
from polsched.cluster import client

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



def exponential_buckets(start: float, factor: float, count: int) -> tuple[float, ...]:
    """prometheus.ExponentialBuckets, multiplied step by step as Go does, so that the le
    labels are the same floats as kube-scheduler's."""
    out, upper = [], start
    for _ in range(count):
        out.append(upper)
        upper *= factor
    return tuple(out)


# metrics.ExponentialBuckets(0.001, 2, 15), as schedulingLatency.
ATTEMPT_BUCKETS = exponential_buckets(0.001, 2, 15)
# Loading and building a policy: from a millisecond to tens of seconds.
RELOAD_BUCKETS = exponential_buckets(0.001, 2, 16)

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


def _help_line(name: str, text: str, stability: str) -> str:
    """# HELP, with component-base's "[STABLE] " prefix on the families Kubernetes
    components register through it (the Prometheus client libraries' process_* and
    polsched's own have none)."""
    if name.startswith(_COMPONENT_BASE):
        text = f"[{stability}] {text}"
    return f"# HELP {name} {text}"


_COMPONENT_BASE = ("scheduler_", "rest_client_", "leader_election_")
# Stability levels, as component-base/metrics StabilityLevel (and polsched's own: its
# polsched_* names may change between minor releases).
STABLE = "STABLE"
BETA = "BETA"
ALPHA = "ALPHA"


@dataclass
class Counter:
    name: str
    help: str
    values: dict[Labels, float] = field(default_factory=dict)
    labels: tuple[str, ...] = ()
    stability: str = ALPHA
    kind: ClassVar[str] = "counter"

    def inc(self, labels: Labels, by: float = 1.0) -> None:
        self.values[labels] = self.values.get(labels, 0.0) + by

    def lines(self) -> Iterable[str]:
        yield _help_line(self.name, self.help, self.stability)
        yield f"# TYPE {self.name} counter"
        # A counter without labels is exported at 0 before its first increment, as
        # client_golang's (a Vec's series appear with their first increment).
        values = self.values or ({(): 0.0} if not self.labels else {})
        for labels, v in sorted(values.items()):
            yield f"{self.name}{_labels(labels)} {_num(v)}"


@dataclass
class Gauge:
    """A gauge whose series are set by (labels) and summed over `hidden` label keys."""

    name: str
    help: str
    # The series as set, keyed by their full labels (including hidden ones).
    values: dict[Labels, float] = field(default_factory=dict)
    hidden: frozenset[str] = frozenset()
    labels: tuple[str, ...] = ()
    stability: str = ALPHA
    kind: ClassVar[str] = "gauge"

    def set(self, labels: Labels, value: float) -> None:
        self.values[labels] = value

    def lines(self) -> Iterable[str]:
        shown: dict[Labels, float] = {}
        for labels, v in self.values.items():
            key = tuple(kv for kv in labels if kv[0] not in self.hidden)
            shown[key] = shown.get(key, 0.0) + v
        yield _help_line(self.name, self.help, self.stability)
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
    labels: tuple[str, ...] = ()
    stability: str = ALPHA
    kind: ClassVar[str] = "histogram"

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
        yield _help_line(self.name, self.help, self.stability)
        yield f"# TYPE {self.name} histogram"
        series = self.series or (
            {(): ([0] * (len(self.buckets) + 1), [0.0, 0.0])} if not self.labels else {})
        for labels, (counts, (total, n)) in sorted(series.items()):
            acc = 0
            for upper, c in zip((*self.buckets, math.inf), counts, strict=True):
                acc += c
                yield f"{self.name}_bucket{_labels((*labels, ('le', _num(upper))))} {acc}"
            yield f"{self.name}_sum{_labels(labels)} {_num(total)}"
            yield f"{self.name}_count{_labels(labels)} {int(n)}"


@dataclass
class Sampled:
    """A counter or gauge read when scraped (a Prometheus collector): `read()` yields its
    series. For what is cheaper to read than to keep up to date (the process's /proc
    figures, the unschedulable pool's rejecting plugins)."""

    name: str
    help: str
    read: Callable[[], Iterable[tuple[Labels, float]]]
    kind: str = "gauge"
    labels: tuple[str, ...] = ()
    stability: str = ALPHA

    def lines(self) -> Iterable[str]:
        yield _help_line(self.name, self.help, self.stability)
        yield f"# TYPE {self.name} {self.kind}"
        try:
            series = sorted(self.read())
        except OSError:  # /proc unreadable (not Linux, or a sandbox): no series
            series = []
        for labels, v in series:
            yield f"{self.name}{_labels(labels)} {_num(v)}"


# -- the process, as the Prometheus client libraries' process collector reads it ------------
def _proc_stat() -> list[str]:
    with open("/proc/self/stat", "rb") as f:
        raw = f.read().decode()
    return raw[raw.rindex(")") + 2:].split()  # the fields after the command name


@functools.cache
def _ticks_and_boot() -> tuple[float, float, int]:
    ticks = float(os.sysconf("SC_CLK_TCK"))
    page = os.sysconf("SC_PAGE_SIZE")
    with open("/proc/stat", "rb") as f:
        boot = next(float(line.split()[1]) for line in f if line.startswith(b"btime"))
    return ticks, boot, page


def _cpu_seconds() -> Iterable[tuple[Labels, float]]:
    stat = _proc_stat()
    ticks, _, _ = _ticks_and_boot()
    yield (), (int(stat[11]) + int(stat[12])) / ticks  # utime + stime


def _start_time() -> Iterable[tuple[Labels, float]]:
    ticks, boot, _ = _ticks_and_boot()
    yield (), boot + int(_proc_stat()[19]) / ticks


def _virtual_memory() -> Iterable[tuple[Labels, float]]:
    yield (), float(_proc_stat()[20])


def _resident_memory() -> Iterable[tuple[Labels, float]]:
    yield (), float(int(_proc_stat()[21]) * _ticks_and_boot()[2])


def _open_fds() -> Iterable[tuple[Labels, float]]:
    yield (), float(len(os.listdir("/proc/self/fd")))


def _max_fds() -> Iterable[tuple[Labels, float]]:
    yield (), float(resource.getrlimit(resource.RLIMIT_NOFILE)[0])


PROCESS: tuple[Sampled, ...] = (
    Sampled("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.",
            _cpu_seconds, "counter"),
    Sampled("process_start_time_seconds",
            "Start time of the process since unix epoch in seconds.", _start_time),
    Sampled("process_virtual_memory_bytes", "Virtual memory size in bytes.", _virtual_memory),
    Sampled("process_resident_memory_bytes", "Resident memory size in bytes.",
            _resident_memory),
    Sampled("process_open_fds", "Number of open file descriptors.", _open_fds),
    Sampled("process_max_fds", "Maximum number of open file descriptors.", _max_fds),
)


# -- kube-scheduler's stable and beta metrics (metrics.go, v1.37) ---------------------------
SCHEDULE_ATTEMPTS = Counter(
    "scheduler_schedule_attempts_total",
    "Number of attempts to schedule pods, by the result. 'unschedulable' means a pod could "
    "not be scheduled, while 'error' means an internal scheduler problem.",
    labels=("profile", "result"), stability=STABLE)
ATTEMPT_DURATION = Histogram(
    "scheduler_scheduling_attempt_duration_seconds",
    "Scheduling attempt latency in seconds (scheduling algorithm + binding)", ATTEMPT_BUCKETS,
    labels=("profile", "result"), stability=STABLE)
ALGORITHM_DURATION = Histogram(
    "scheduler_scheduling_algorithm_duration_seconds",
    "Scheduling algorithm latency in seconds", ATTEMPT_BUCKETS, stability=BETA)
PENDING_PODS = Gauge(
    "scheduler_pending_pods",
    "Number of pending pods, by the queue type. 'active' means number of pods in activeQ; "
    "'backoff' means number of pods in backoffQ; 'unschedulable' means number of pods in "
    "unschedulableEntities that the scheduler attempted to schedule and failed; 'gated' is "
    "the number of unschedulable pods that the scheduler never attempted to schedule "
    "because they are gated; 'incomplete' means number of pods in incompletePodGroupPods; "
    "'pending' means number of pods in pendingPodGroupPods.",
    hidden=frozenset({"profile"}), labels=("queue",), stability=STABLE)
PREEMPTION_ATTEMPTS = Counter(
    "scheduler_preemption_attempts_total", "Total preemption attempts in the cluster till now",
    stability=STABLE)
PREEMPTION_VICTIMS = Histogram(
    "scheduler_preemption_victims",
    "Number of selected preemption victims for preemption initiated by a single pod",
    exponential_buckets(1, 2, 7), stability=STABLE)
GOROUTINES = Gauge(
    "scheduler_goroutines",
    "Number of running goroutines split by the work they do such as binding. (polsched: "
    "the binding cycles under way, from Permit's wait to the Binding's answer.)",
    labels=("operation",), stability=BETA)
# metrics.ExponentialBuckets(0.01, 2, 20): 10 ms .. ~88 min.
SLI_BUCKETS = exponential_buckets(0.01, 2, 20)
POD_SCHEDULING_SLI_DURATION = Histogram(
    "scheduler_pod_scheduling_sli_duration_seconds",
    "E2e latency for a pod being scheduled, from the time the pod enters the scheduling "
    "queue and might involve multiple scheduling attempts.", SLI_BUCKETS,
    labels=("attempts",), stability=BETA)
POD_SCHEDULING_ATTEMPTS = Histogram(
    "scheduler_pod_scheduling_attempts", "Number of attempts to successfully schedule a pod.",
    exponential_buckets(1, 2, 5), stability=STABLE)
# metrics.ExponentialBuckets(0.0001, 2, 12) and (0.00001, 1.5, 20).
EXTENSION_POINT_BUCKETS = exponential_buckets(0.0001, 2, 12)
PLUGIN_BUCKETS = exponential_buckets(0.00001, 1.5, 20)
EXTENSION_POINT_DURATION = Histogram(
    "scheduler_framework_extension_point_duration_seconds",
    "Latency for running all plugins of a specific extension point. (polsched: registered, "
    "not observed yet.)",
    EXTENSION_POINT_BUCKETS, labels=("extension_point", "status", "profile"),
    stability=STABLE)
PLUGIN_EXECUTION_DURATION = Histogram(
    "scheduler_plugin_execution_duration_seconds",
    "Duration for running a plugin at a specific extension point. (polsched: registered, "
    "not observed: per-plugin timing on the per-node path is left to the benchmark.)",
    PLUGIN_BUCKETS, labels=("plugin", "extension_point", "status"), stability=BETA)
QUEUE_INCOMING_PODS = Counter(
    "scheduler_queue_incoming_pods_total",
    "Number of pods added to scheduling queues by event and queue type. (polsched: "
    "registered, not observed yet.)",
    labels=("queue", "event"), stability=STABLE)
PERMIT_WAIT_DURATION = Histogram(
    "scheduler_permit_wait_duration_seconds", "Duration of waiting on permit.",
    ATTEMPT_BUCKETS, labels=("result",), stability=BETA)
# Each policy's unschedulable pool (SchedulingQueue.unschedulable_pods), by profile:
# counted when scraped rather than kept up to date at every park and unpark.
_unschedulable_pools: dict[str, Mapping[str, Any]] = {}


def _unschedulable_by_plugin() -> Iterable[tuple[Labels, float]]:
    for profile, pool in list(_unschedulable_pools.items()):
        counts: dict[str, int] = {}
        for entry in list(pool.values()):
            # A pod group counts each member, as upstream's per-pod gauge does.
            for pod in getattr(entry, "members", None) or (entry,):
                for plugin in pod.rejected_by:
                    counts[plugin] = counts.get(plugin, 0) + 1
        for plugin, n in counts.items():
            yield (("plugin", plugin), ("profile", profile)), float(n)


UNSCHEDULABLE_PODS = Sampled(
    "scheduler_unschedulable_pods",
    "The number of unschedulable pods broken down by plugin name. A pod will increment the "
    "gauge for all plugins that caused it to not schedule and so this metric have meaning "
    "only when broken down by plugin.", _unschedulable_by_plugin,
    labels=("plugin", "profile"), stability=BETA)
PLUGIN_EVALUATION = Counter(
    "scheduler_plugin_evaluation_total",
    "Number of attempts to schedule pods by each plugin and the extension point (available "
    "only in PreFilter, Filter, PreScore, and Score). (polsched: registered, not observed "
    "yet.)",
    labels=("plugin", "extension_point", "profile"), stability=BETA)

# -- kube-scheduler's alpha metrics polsched observes too ---------------------------------
# GenericWorkload's metrics (metrics.go podGroupScheduleAttempts, podGroupSchedulingLatency,
# PodGroupSchedulingAlgorithmLatency, WorkloadPreemptionAttempts, WorkloadPreemptionVictims,
# PreemptionWorkloadDisruptions): a pod group's cycle and its workload-aware preemption.
PODGROUP_SCHEDULE_ATTEMPTS = Counter(
    "scheduler_podgroup_schedule_attempts_total",
    "Number of attempts to schedule pod group, by the result. 'unschedulable' means a pod "
    "group could not be scheduled, while 'error' means an internal scheduler problem.",
    labels=("profile", "result"))
PODGROUP_ATTEMPT_DURATION = Histogram(
    "scheduler_podgroup_scheduling_attempt_duration_seconds",
    "Pod group scheduling attempt latency in seconds", ATTEMPT_BUCKETS,
    labels=("profile", "result"))
PODGROUP_ALGORITHM_DURATION = Histogram(
    "scheduler_podgroup_scheduling_algorithm_duration_seconds",
    "Pod group scheduling algorithm latency in seconds", ATTEMPT_BUCKETS)
# metrics.ExponentialBuckets(1, 2, 11): 1 .. 1024.
_UNIT_BUCKETS = exponential_buckets(1, 2, 11)
WORKLOAD_PREEMPTION_ATTEMPTS = Counter(
    "scheduler_workload_preemption_attempts_total",
    "Total preemption attempts initiated by workload (including pod groups) in the cluster "
    "till now.", labels=("result",))
WORKLOAD_PREEMPTION_VICTIMS = Histogram(
    "scheduler_workload_preemption_victims",
    "Number of pod preemption victims caused by workload preemption.", _UNIT_BUCKETS)
PREEMPTION_WORKLOAD_DISRUPTIONS = Histogram(
    "scheduler_preemption_workload_disruptions",
    "Number of workload preemption units being preempted. A single preemption unit can be "
    "all pods in a pod group (in case of DisruptionMode=all), or a single pod (in case of "
    "DisruptionMode=single).", _UNIT_BUCKETS, labels=("preemptor",))
# TopologyAwareWorkloadScheduling's (metrics.go GeneratedPlacementsTotal,
# PlacementEvaluations, PlacementEvaluationDuration): the placement algorithm.
GENERATED_PLACEMENTS = Counter(
    "scheduler_generated_placements_total",
    "Number of candidate placements generated when scheduling pod groups.",
    labels=("profile",))
PLACEMENT_EVALUATIONS = Counter(
    "scheduler_placement_evaluations_total",
    "Number of candidate placements evaluated when scheduling pod groups, by result. "
    "'feasible' means the pod group fit into the placement, while 'infeasible' means it "
    "did not.", labels=("profile", "result"))
# metrics.ExponentialBuckets(0.001, 2, 15)
PLACEMENT_EVALUATION_DURATION = Histogram(
    "scheduler_placement_evaluation_duration_seconds",
    "Latency in seconds of evaluating a single candidate placement when scheduling pod "
    "groups, by result. 'feasible' means the pod group fit into the placement, while "
    "'infeasible' means it did not.", exponential_buckets(0.001, 2, 15),
    labels=("profile", "result"))
FEASIBLE, INFEASIBLE = "feasible", "infeasible"

# -- client-go and kube components ----------------------------------------------------------
# component-base/metrics/prometheus/restclient: every request of the one API client.
REST_CLIENT_BUCKETS = (0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0)
REST_CLIENT_REQUESTS = Counter(
    "rest_client_requests_total",
    "Number of HTTP requests, partitioned by status code, method, and host.",
    labels=("code", "host", "method"))
REST_CLIENT_DURATION = Histogram(
    "rest_client_request_duration_seconds",
    "Request latency in seconds. Broken down by verb, and host.", REST_CLIENT_BUCKETS,
    labels=("host", "verb"))
LEADER = Gauge(
    "leader_election_master_status",
    "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, "
    "1 indicates master. 'name' is the string used to identify the lease. Please make sure "
    "to group by name.", labels=("name",))

# -- polsched's own ---------------------------------------------------------------------------
BUILD_INFO = Gauge(
    "polsched_build_info",
    "A metric with a constant '1' value labeled by the version of polsched and of the "
    "Python that runs it.", labels=("python_version", "version"))
POLICY_PENDING_PODS = Gauge(
    "polsched_pending_pods",
    "scheduler_pending_pods of one policy's scheduler (profile: its schedulerName), by the "
    "same queue types.", labels=("profile", "queue"))
POLICY_CONDITION = Gauge(
    "polsched_policy_condition",
    "A SchedulingPolicy's status conditions as last written by the leader: 1 on the series "
    "of the condition's status ('True', 'False' or 'Unknown'), 0 on the others.",
    labels=("policy", "status", "type"))
WEBHOOK_CERT_EXPIRY = Gauge(
    "polsched_webhook_certificate_expiration_timestamp_seconds",
    "When the serving certificate the admission webhook presents expires (its notAfter), "
    "in seconds since the Unix epoch.")
POLICY_RELOADS = Counter(
    "polsched_policy_reloads_total",
    "SchedulingPolicy generations loaded into a pipeline, by policy and result "
    "('success', or 'error' when the spec did not load and the last good pipeline stayed).",
    labels=("policy", "result"))
RELOAD_DURATION = Histogram(
    "polsched_policy_reload_duration_seconds",
    "Time to load a SchedulingPolicy generation and build its pipeline, in seconds",
    RELOAD_BUCKETS, labels=("policy",))
# The end of a hot reload as users feel it: the first pod decided by a generation.
FIRST_DECISION_GENERATION = Gauge(
    "polsched_policy_first_decision_generation",
    "The latest SchedulingPolicy generation that has decided a pod (chosen a node or found "
    "none): its pipeline is in effect", labels=("policy",))
FIRST_DECISION_TIME = Gauge(
    "polsched_policy_first_decision_timestamp_seconds",
    "When polsched_policy_first_decision_generation decided its first pod, in seconds since "
    "the Unix epoch", labels=("policy",))
FIRST_DECISION_WAIT = Gauge(
    "polsched_policy_first_decision_wait_seconds",
    "Seconds from polsched_policy_first_decision_generation's pipeline being swapped in to "
    "its first decision (the wait for a pod to decide, and for the cycle under way)",
    labels=("policy",))
FIRST_DECISION_IDLE = Gauge(
    "polsched_policy_first_decision_idle_seconds",
    "Of polsched_policy_first_decision_wait_seconds, the seconds before the pod it decided "
    "entered the queue: the policy had no pod to decide (0 when one was already queued)",
    labels=("policy",))

# The process's garbage collector (controller/process/gcpolicy.py): each pass stops the event loop.
GC_PAUSE = Histogram(
    "polsched_gc_pause_seconds",
    "Cyclic garbage collector passes and how long each stopped the process, in seconds, by "
    "generation (2: a full pass)", exponential_buckets(0.0005, 2, 12),
    labels=("generation",))
GC_THRESHOLD = Gauge(
    "polsched_gc_threshold",
    "The collector's thresholds (gc.get_threshold()) set at start, by generation",
    labels=("generation",))
GC_FROZEN = Gauge(
    "polsched_gc_frozen_objects",
    "Objects moved out of the collector's passes once the cache had synced (gc.freeze)")

# The event recorder's bound (scheduler/recorder.py): events not written, and why.
EVENTS_DROPPED = Counter(
    "polsched_events_dropped_total",
    "Events recorded but not written to the API server, by reporting controller (the "
    "policy's schedulerName) and reason: queue_full (1000 writes already waiting, as "
    "client-go's event broadcaster drops) or spam (the pod's events over the spam filter's "
    "budget, as client-go's EventSourceObjectSpamFilter)", labels=("controller", "reason"))

# The load-aware scorers' whole API cost: one request per polling interval, whatever the
# number of pods (cluster.node_metrics).
NODE_METRICS_REQUESTS = Counter(
    "polsched_node_metrics_requests_total",
    "Requests for node usage to the Metrics API (metrics.k8s.io) by the node metrics "
    "watcher, by result ('success' or 'error'); none on the per-pod path",
    labels=("result",))

# Issue 36's guards of the shared loop: attempts ended on their time budget
# (framework.budget) and pods refused over the pod bounds (framework.pod_bounds).
BUDGET_EXCEEDED = Counter(
    "polsched_attempt_budget_exceeded_total",
    "Scheduling attempts that ended on their time budget (--attempt-budget), by profile "
    "(the policy's schedulerName); each also counts as an 'error' attempt",
    labels=("profile",))
PODS_REFUSED = Counter(
    "polsched_pods_refused_total",
    "Pods refused before they were queued because they are over the pod bounds (terms, "
    "requirements, values, spread constraints, tolerations), by profile; counted once per "
    "refusal message",
    labels=("profile",))

# OpportunisticBatching (KEP-5598; scheduler.batch), as pkg/scheduler/metrics/metrics.go.
BATCH_ATTEMPTS = Counter(
    "scheduler_batch_attempts_total", "Counts of results when we attempt to use batching.",
    labels=("profile", "result"))
BATCH_CACHE_FLUSHED = Counter(
    "scheduler_batch_cache_flushed_total", "Counts of cache flushes by reason.",
    labels=("profile", "reason"))
BATCH_RESCORE_ATTEMPTS = Counter(
    "scheduler_batch_rescore_attempts_total",
    "Counts of rescore attempts during opportunistic batching.", labels=("profile",))
# metrics.ExponentialBuckets(0.00001, 2, 12): 0.01 ms to ~20 ms.
BATCH_BUCKETS = exponential_buckets(0.00001, 2, 12)
GET_NODE_HINT_DURATION = Histogram(
    "scheduler_get_node_hint_duration_seconds", "Latency for getting a node hint.",
    BATCH_BUCKETS, labels=("hinted", "profile"))
STORE_SCHEDULE_RESULTS_DURATION = Histogram(
    "scheduler_store_schedule_results_duration_seconds",
    "Latency for storing scheduling results.", BATCH_BUCKETS, labels=("profile",))
BATCH_RESCORE_DURATION = Histogram(
    "scheduler_batch_rescore_duration_seconds",
    "Latency for rescoring a node during opportunistic batching.", BATCH_BUCKETS,
    labels=("profile",))

Metric = Counter | Gauge | Histogram | Sampled

ALL: tuple[Metric, ...] = (*PROCESS,
    SCHEDULE_ATTEMPTS, ATTEMPT_DURATION, ALGORITHM_DURATION, PENDING_PODS,
    PREEMPTION_ATTEMPTS, PREEMPTION_VICTIMS, GOROUTINES, POD_SCHEDULING_SLI_DURATION,
    POD_SCHEDULING_ATTEMPTS, EXTENSION_POINT_DURATION, PLUGIN_EXECUTION_DURATION,
    QUEUE_INCOMING_PODS, PERMIT_WAIT_DURATION, UNSCHEDULABLE_PODS, PLUGIN_EVALUATION,
    PODGROUP_SCHEDULE_ATTEMPTS, PODGROUP_ATTEMPT_DURATION, PODGROUP_ALGORITHM_DURATION,
    WORKLOAD_PREEMPTION_ATTEMPTS, WORKLOAD_PREEMPTION_VICTIMS,
    PREEMPTION_WORKLOAD_DISRUPTIONS,
    GENERATED_PLACEMENTS, PLACEMENT_EVALUATIONS, PLACEMENT_EVALUATION_DURATION,
    REST_CLIENT_REQUESTS, REST_CLIENT_DURATION, LEADER,
    BUILD_INFO, POLICY_PENDING_PODS, POLICY_CONDITION, WEBHOOK_CERT_EXPIRY,
    POLICY_RELOADS, RELOAD_DURATION,
    FIRST_DECISION_GENERATION, FIRST_DECISION_TIME, FIRST_DECISION_WAIT, FIRST_DECISION_IDLE,
    GC_PAUSE, GC_THRESHOLD, GC_FROZEN, EVENTS_DROPPED, NODE_METRICS_REQUESTS,
    BUDGET_EXCEEDED, PODS_REFUSED, BATCH_ATTEMPTS, BATCH_CACHE_FLUSHED,
    BATCH_RESCORE_ATTEMPTS, GET_NODE_HINT_DURATION, STORE_SCHEDULE_RESULTS_DURATION,
    BATCH_RESCORE_DURATION)


# -- the hooks -------------------------------------------------------------------------
def schedule_attempt(profile: str, result: str, seconds: float) -> None:
    """One scheduling attempt ended: result is SCHEDULED, UNSCHEDULABLE or ERROR;
    seconds from popping the pod to the end of its binding (scheduled) or the failure."""
    labels = (("profile", profile), ("result", result))
    SCHEDULE_ATTEMPTS.inc(labels)
    ATTEMPT_DURATION.observe(labels, seconds)


def budget_exceeded(profile: str) -> None:
    BUDGET_EXCEEDED.inc((("profile", profile),))


def batch_attempt(profile: str, result: str) -> None:
    BATCH_ATTEMPTS.inc((("profile", profile), ("result", result)))


def batch_flushed(profile: str, reason: str) -> None:
    BATCH_CACHE_FLUSHED.inc((("profile", profile), ("reason", reason)))


def batch_rescore(profile: str, seconds: float) -> None:
    BATCH_RESCORE_ATTEMPTS.inc((("profile", profile),))
    BATCH_RESCORE_DURATION.observe((("profile", profile),), seconds)


def node_hint(profile: str, hinted: bool, seconds: float) -> None:
    GET_NODE_HINT_DURATION.observe(
        (("hinted", "hint" if hinted else "no_hint"), ("profile", profile)), seconds)


def store_schedule_results(profile: str, seconds: float) -> None:
    STORE_SCHEDULE_RESULTS_DURATION.observe((("profile", profile),), seconds)


def pod_refused(profile: str) -> None:
    PODS_REFUSED.inc((("profile", profile),))


def pending_pods(profile: str, queue: str, count: int) -> None:
    """How many of `profile`'s pods wait in `queue` now (ACTIVE, BACKOFF,
    UNSCHEDULABLE_QUEUE, GATED). Exported per queue, summed over profiles as upstream's
    single-scheduler metric is."""
    labels = (("profile", profile), ("queue", queue))
    PENDING_PODS.set(labels, count)
    POLICY_PENDING_PODS.set(labels, count)


def unschedulable_pool(profile: str, pool: Mapping[str, Any]) -> None:
    """`profile`'s unschedulable pool (its entries have `rejected_by`, a group's
    `members`): scheduler_unschedulable_pods counts it when scraped."""
    _unschedulable_pools[profile] = pool


def forget_profile(profile: str) -> None:
    """The policy is gone: its pods no longer count as pending here."""
    for gauge in (PENDING_PODS, POLICY_PENDING_PODS):
        for labels in [k for k in gauge.values if ("profile", profile) in k]:
            del gauge.values[labels]
    _unschedulable_pools.pop(profile, None)


def scheduling_algorithm(seconds: float) -> None:
    """SchedulingAlgorithmLatency: the search of one pod took `seconds`."""
    ALGORITHM_DURATION.observe((), seconds)


def pod_scheduled(attempts: int, seconds: float) -> None:
    """A pod was bound after `attempts` attempts, `seconds` after its first one began
    (PodSchedulingAttempts, PodSchedulingSLIDuration)."""
    POD_SCHEDULING_ATTEMPTS.observe((), attempts)
    # getAttemptsLabel: "1" .. "14", then "15+".
    label = str(attempts) if attempts < 15 else "15+"
    POD_SCHEDULING_SLI_DURATION.observe((("attempts", label),), seconds)


def permit_waited(code: int, seconds: float) -> None:
    """WaitOnPermit ended with status code `code` after `seconds`."""
    PERMIT_WAIT_DURATION.observe((("result", code_name(code)),), seconds)


def rest_client_request(method: str, host: str, code: int | None, seconds: float) -> None:
    """One request of the API client: `code` the HTTP status, None when no answer came
    (client-go's "<error>")."""
    REST_CLIENT_REQUESTS.inc((("code", "<error>" if code is None else str(code)),
                              ("host", host), ("method", method)))
    REST_CLIENT_DURATION.observe((("host", host), ("verb", method)), seconds)


def leader(lease: str, leading: bool) -> None:
    """This process holds (or no longer holds) the Lease `lease`."""
    LEADER.set((("name", lease),), 1.0 if leading else 0.0)


_CONDITION_STATUSES = ("True", "False", "Unknown")


def policy_conditions(policy: str, conditions: Iterable[Mapping[str, Any]]) -> None:
    """The conditions written to `policy`'s status, kube-state-metrics style: one series
    per type and possible status, 1 on the current one."""
    for c in conditions:
        kind, status = str(c.get("type") or ""), str(c.get("status") or "Unknown")
        if not kind:
            continue
        for s in _CONDITION_STATUSES:
            POLICY_CONDITION.set((("policy", policy), ("status", s), ("type", kind)),
                                 1.0 if s == status else 0.0)


def forget_policy_conditions(policy: str) -> None:
    for labels in [k for k in POLICY_CONDITION.values if ("policy", policy) in k]:
        del POLICY_CONDITION.values[labels]


def webhook_certificate(not_after: float) -> None:
    """The webhook now presents a certificate that expires at `not_after` (epoch s)."""
    WEBHOOK_CERT_EXPIRY.set((), not_after)


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


def code_name(code: int) -> str:
    return _CODE_NAMES[code] if 0 <= code < len(_CODE_NAMES) else f"Code({code})"


def workload_preemption_attempt(code: int) -> None:
    """DefaultPreemption's PodGroupPostFilter ended with status code `code`."""
    WORKLOAD_PREEMPTION_ATTEMPTS.inc((("result", code_name(code)),))


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


def _build_info() -> None:
    BUILD_INFO.set((("python_version", platform.python_version()),
                    ("version", polsched.__version__)), 1.0)


def reset() -> None:
    """Forget every value (tests)."""
    for m in ALL:
        if isinstance(m, Histogram):
            m.series.clear()
        elif isinstance(m, Counter | Gauge):
            m.values.clear()
    _unschedulable_pools.clear()
    _build_info()
# Installed on import, as a Prometheus client library's default collectors: a process
# that can expose these metrics counts its API requests from its first one.
client.request_observer = rest_client_request


_build_info()
# Installed on import, as a Prometheus client library's default collectors: a process
# that can expose these metrics counts its API requests from its first one.
client.request_observer = rest_client_request


# -- the reference ----------------------------------------------------------------------
_REFERENCE_HEAD = """\
# Metrics reference

<!-- Generated from operator/polsched/scheduler/metrics.py by hack/metrics_doc.py: edit
the metrics there, then run `.venv/bin/python hack/metrics_doc.py > docs/metrics.md`.
tests/unit/scheduler/test_metrics_doc.py fails when this page and the code disagree. -->

Every process that schedules (`polsched run`, a Dedicated scheduler's `polsched
scheduler`) serves these on `/metrics` at `--metrics-listen` (default `127.0.0.1:8080`,
the pod's loopback: `kubectl port-forward` reaches it). `/metrics` is plain HTTP without
authentication; to scrape it from Prometheus, listen on the pod's IP and restrict who
reaches it: the chart's `metrics.service.enabled` and `metrics.serviceMonitor.enabled`, or
[manifests/monitoring/](../manifests/monitoring/) (Service, ServiceMonitor, PodMonitor for
Dedicated schedulers, alerts as a PrometheusRule, and a Grafana dashboard).

## Scraping with authentication, from the Helm chart

`--metrics-secure-listen` serves `/metrics` over HTTPS to bearer tokens the API server
authenticates (TokenReview) and allows to `get` the non-resource URL `/metrics`
(SubjectAccessReview), as kube-scheduler's secure port does; the plain listener stays on
the loopback. With the chart and the Prometheus Operator (kube-prometheus-stack):

```yaml
metrics:
  secure:
    enabled: true          # --metrics-secure-listen 0.0.0.0:8443, port https-metrics,
                           # the RBAC for both reviews, ClusterRole polsched-metrics-reader
    readerServiceAccounts: # who may read /metrics: your Prometheus's ServiceAccount
      - {name: prometheus-kube-prometheus-prometheus, namespace: monitoring}
  service:
    enabled: true          # Service polsched-metrics, HTTPS port only
  serviceMonitor:
    enabled: true          # scheme https, Prometheus's ServiceAccount token
    labels: {release: prometheus}
  prometheusRule:
    enabled: true          # the alerts of manifests/monitoring/prometheusrule.yaml
    labels: {release: prometheus}
  dashboard:
    enabled: true          # ConfigMap polsched-dashboard, label grafana_dashboard: "1"
```

The certificate is self-signed (made at start): the ServiceMonitor skips its
verification, and the token is what lets a scraper in. A token without the reader role
gets 403, no token 401. Check it from a pod of the Prometheus ServiceAccount, or with a
token of your own: `kubectl create token prometheus-kube-prometheus-prometheus -n
monitoring`, then `curl -k -H "Authorization: Bearer $TOKEN"
https://polsched-metrics.polsched-system.svc:8443/metrics`. Dedicated schedulers follow
the operator's `--metrics-secure-listen` (port `https-metrics`); without the chart, see
[manifests/monitoring/kustomization.yaml](../manifests/monitoring/kustomization.yaml).

## Metrics

kube-scheduler's stable and beta metrics (v1.37) keep their names, labels and buckets; a
`profile` is a policy's `schedulerName`. A few are registered but not observed yet (their
help says so): dashboards that chart them show no data. polsched exports no `go_*`
metrics (it is a Python process); `process_*` are read from `/proc` as the Prometheus
client libraries read them.

Stability: STABLE and BETA as kube-scheduler declares them; ALPHA for everything else,
including polsched's own `polsched_*` (their names may change between minor releases).

| Metric | Type | Labels | Stability | Help |
|---|---|---|---|---|
"""


def reference() -> str:
    """docs/metrics.md: every registered metric, from ALL."""
    rows = []
    for m in ALL:
        text = " ".join(m.help.split()).replace("|", "\\|")
        labels = ", ".join(f"`{label}`" for label in sorted(m.labels)) or "-"
        rows.append(f"| `{m.name}` | {m.kind} | {labels} | {m.stability} | {text} |")
    return _REFERENCE_HEAD + "\n".join(rows) + "\n"


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
                with_metrics: bool = True,
                explain: Callable[[], str] | None = None) -> web.AppRunner:
    """Serve /metrics, /healthz and /readyz on `listen` (HOST:PORT; port 0 picks a free
    one: read it from the runner's addresses). /readyz answers 200 once `ready()` is true
    (the cache has synced), /healthz while `healthy()` is. `with_metrics=False`: the
    probes only (--health-listen: what kubelet reaches on the pod's IP tells nothing but
    ok). `explain()`: the body of a failing /healthz. Stop with `await runner.cleanup()`."""
    from aiohttp import web

    async def metrics(_: web.Request) -> web.Response:
        # Served from a thread apart from the loop that updates the series
        # (controller.process.endpoints): a series added meanwhile ends an iteration
        # with RuntimeError; the next try reads a consistent dict.
        for _attempt in range(4):
            try:
                text = exposition()
                break
            except RuntimeError:
                continue
        else:
            text = exposition()
        return web.Response(body=text.encode(), headers={"Content-Type": CONTENT_TYPE})

    def probe(check: Callable[[], bool],
              why: Callable[[], str] | None = None) -> Callable[[web.Request], object]:
        async def handler(_: web.Request) -> web.Response:
            ok = check()
            text = "ok" if ok else "not ok" + (f": {why()}" if why is not None else "")
            return web.Response(status=200 if ok else 503, text=text)
        return handler

    app = web.Application()
    if with_metrics:
        app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", probe(healthy, explain))  # type: ignore[arg-type]
    app.router.add_get("/readyz", probe(ready))  # type: ignore[arg-type]
    host, port = parse_listen(listen)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner
