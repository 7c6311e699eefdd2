"""The bench workloads: which nodes, which pods, and how each scheduler is told the rule.

Every node (bench-node-NNNNN) has 32 CPU, 128Gi, 110 pods and the labels
topology.kubernetes.io/zone (zone-0..9), bench.polsched.io/tier (gold, silver, bronze by
turns) and bench.polsched.io/priority (0..9); every 20th node carries the taint
bench.polsched.io/maintenance=true:NoSchedule, which no bench pod tolerates. Every pod
requests 100m CPU and 128Mi, so capacity never runs out and every pod is schedulable.
The gang workloads (`Gangs`) take scheduler_perf's own nodes and pods instead (4 CPU, 32Gi,
no labels or taints; 100m and 100Mi), as podgroup/gangscheduling creates them.

Where a workload's rule lives in the SchedulingPolicy for polsched, kube-scheduler gets
the equivalent in the pod (see `LabelRules`); the no-op binder ignores every rule: it
shows what the API server can bind, not what a scheduler can decide.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

NAMESPACE = "bench"
# Pods that are not measured (the preemption workload's low-priority fill and its
# high-priority preemptors) live here, out of the bind watcher's namespace.
OTHER_NAMESPACE = "bench-other"
NODE_LABEL = "polsched.io/bench"  # every bench node has it: cleanup deletes by it
ZONE = "topology.kubernetes.io/zone"
TIER = "bench.polsched.io/tier"
PRIORITY = "bench.polsched.io/priority"
TAINT_KEY = "bench.polsched.io/maintenance"
TIERS = ("gold", "silver", "bronze")


def node_name(i: int) -> str:
    return f"bench-node-{i:05d}"


def node(i: int) -> dict[str, Any]:
    name = node_name(i)
    res = {"cpu": "32", "memory": "128Gi", "pods": "110", "ephemeral-storage": "100Gi"}
    taints = [{"key": TAINT_KEY, "value": "true", "effect": "NoSchedule"}] if i % 20 == 19 else []
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {
            "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", NODE_LABEL: "true",
            ZONE: f"zone-{i % 10}", TIER: TIERS[i % 3], PRIORITY: str(i % 10)}},
        "spec": {"taints": taints},
        "status": {"capacity": res, "allocatable": res,
                   "conditions": [{"type": "Ready", "status": "True", "reason": "Bench"}]},
    }


def pod_base(name: str, scheduler_name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"app": "bench"}},
        "spec": {
            "schedulerName": scheduler_name,
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}],
        },
    }


@dataclass(frozen=True)
class Workload:
    name: str
    nodes: int
    pods: int
    description: str
    # polsched and kube-scheduler are told the same rule in different places; say how.
    equivalence: str = "same pods for every scheduler; polsched runs its default plugins"
    extender: bool = False
    reload_patches: int = 0  # > 0: patch the policy this many times while pods stream in
    # polsched: a shadow policy (spec.shadowOf, shadow_spec) decides beside the live one.
    shadow: bool = False
    # Rounds of every scheduler in turn (run.py --rounds overrides): a short run's ratio
    # moves with the machine from one run to the next (labels' polsched/ceiling read 1.11x
    # in one full run and 0.68x in the next), so the runs of a few seconds are measured
    # three times (many-policies and its baseline five) and the report gives every round
    # and each scheduler's median run.
    rounds: int = 1
    # The workload needs the Metrics API (a control plane with METRICS=1 and kwok on).
    metrics: bool = False
    # Feature gates the workload's control plane and kube-scheduler need (hack/cluster.sh's
    # POLSCHED_FEATURE_GATES): run.py starts one control plane per distinct gate list.
    gates: str = ""
    # The workload uses DRA objects (ResourceSlices, claims): the bench cleans them up and
    # checks the allocations.
    dra: bool = False
    # KubeSchedulerConfiguration pluginConfig for kube-scheduler's profile (polsched's
    # policy_spec says the same in its own terms).
    plugin_config: tuple[dict[str, Any], ...] = ()

    def scaled(self, scale: float) -> Workload:
        from dataclasses import replace

        return replace(self, nodes=max(2, round(self.nodes * scale)),
                       pods=max(1, round(self.pods * scale)))

    def pod(self, i: int, scheduler: str, scheduler_name: str) -> dict[str, Any]:
        return pod_base(f"bench-pod-{i:05d}", scheduler_name)

    def node(self, i: int) -> dict[str, Any]:
        return node(i)

    def warmup_pod(self, scheduler: str, scheduler_name: str) -> dict[str, Any]:
        """The pod that proves a scheduler schedules before the measured ones (named
        bench-warmup by the runner): one like the first."""
        return self.pod(0, scheduler, scheduler_name)

    def policy_spec(self) -> dict[str, Any]:
        """spec of the SchedulingPolicy polsched runs (schedulerName is added)."""
        return {"runtime": {"mode": "Shared"}}

    def init_pods(self, scheduler_name: str) -> list[dict[str, Any]]:
        """Pods that exist, already bound (spec.nodeName), before the scheduler starts:
        scheduler_perf's unmeasured `createPods` step. They live in OTHER_NAMESPACE unless a
        workload says otherwise, out of the bind watcher's namespace."""
        return []

    def extra_objects(self) -> list[tuple[str, dict[str, Any]]]:
        """(collection path, object) created before the pods (a Service, say); removed by
        the runner's cleanup."""
        return []


def default_node(i: int) -> dict[str, Any]:
    """scheduler_perf's templates/node-default.yaml (createNodes without a template):
    4 CPU, 32Gi, 110 pods, Ready, no taint and no topology label, allocatable as
    capacity; only the bench's cleanup label and the hostname are added."""
    name = node_name(i)
    res = {"pods": "110", "cpu": "4", "memory": "32Gi"}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                                                  NODE_LABEL: "true"}},
            "spec": {},
            "status": {"capacity": res, "allocatable": res,
                       "conditions": [{"type": "Ready", "status": "True",
                                       "reason": "Bench"}]}}


GANG_GATES = "GenericWorkload=true"
PODGROUP_API = "scheduling.k8s.io/v1beta1"
PODGROUPS = f"/apis/{PODGROUP_API}/namespaces/{NAMESPACE}/podgroups"


@dataclass(frozen=True)
class Gangs(Workload):
    """scheduler_perf's podgroup/gangscheduling (k8s.io/kubernetes@v1.37.1
    test/integration/scheduler_perf/podgroup/gangscheduling/performance-config.yaml):
    `groups` PodGroups gang-0..gang-N (gang policy, minCount = `per_group`) created before
    the pods, then `per_group` pods per group naming it in spec.schedulingGroup (pod i in
    gang-(i // per_group)), on a control plane with GenericWorkload on; kube-scheduler
    gets the gate too, and polsched runs its default policy (GangScheduling where the
    cluster serves PodGroups). `pods` is always groups x per_group (--pods cannot split a
    gang). `scaled` scales the nodes and the number of groups, or, with `scale_size`, the
    size of each group (3 gangs of 1000 stays 3 gangs)."""

    groups: int = 1
    per_group: int = 1
    scale_size: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "pods", self.groups * self.per_group)

    def scaled(self, scale: float) -> Gangs:
        from dataclasses import replace

        if self.scale_size:
            return replace(self, nodes=max(2, round(self.nodes * scale)),
                           per_group=max(2, round(self.per_group * scale)))
        return replace(self, nodes=max(2, round(self.nodes * scale)),
                       groups=max(1, round(self.groups * scale)))

    @staticmethod
    def group_name(g: int) -> str:
        return f"gang-{g}"

    def node(self, i: int) -> dict[str, Any]:
        return default_node(i)

    def _pod(self, name: str, scheduler_name: str) -> dict[str, Any]:
        """templates/gang-pod.yaml's container: pause 3.10.1, 100m CPU and 100Mi."""
        p = pod_base(name, scheduler_name)
        p["spec"]["containers"] = [{"name": "pause", "image": "registry.k8s.io/pause:3.10.1",
                                    "resources": {"requests": {"cpu": "100m",
                                                               "memory": "100Mi"}}}]
        return p

    def pod(self, i: int, scheduler: str, scheduler_name: str) -> dict[str, Any]:
        p = self._pod(f"bench-pod-{i:05d}", scheduler_name)
        p["spec"]["schedulingGroup"] = {"podGroupName": self.group_name(i // self.per_group)}
        return p

    def warmup_pod(self, scheduler: str, scheduler_name: str) -> dict[str, Any]:
        # Not a member: a lone member of a gang of 3 would be held forever.
        return self._pod("bench-pod-00000", scheduler_name)

    def extra_objects(self) -> list[tuple[str, dict[str, Any]]]:
        return [(PODGROUPS, {"apiVersion": PODGROUP_API, "kind": "PodGroup",
                             "metadata": {"name": self.group_name(g), "namespace": NAMESPACE},
                             "spec": {"schedulingPolicy": {"gang": {
                                 "minCount": self.per_group}}}})
                for g in range(self.groups)]


def shadow_spec() -> dict[str, Any]:
    """The shadow's spec (shadowOf is added): the default plugins plus a NodeLabelValue
    scorer, so it decides as much as the live policy and often differently."""
    return {"scorers": [{"name": "NodeLabelValue", "weight": 2,
                         "args": {"key": PRIORITY, "default": 0}}]}


class LabelRules(Workload):
    """polsched: NodeLabel filter (tier In gold, silver) + NodeLabelValue scorer (priority,
    weight 2). kube-scheduler: the pod carries the same rule as node affinity: required
    tier In (gold, silver), and nine preferred terms `priority Gt v` (v = 0..8) of weight 1,
    so a node's raw score is its priority: NodeAffinity normalizes by the maximum,
    NodeLabelValue min-max, and the feasible minimum is 0, so both score a node
    priority/9 x 100 with default-profile weight 2 (NodeAffinity) and 2 (NodeLabelValue)."""

    def pod(self, i: int, scheduler: str, scheduler_name: str) -> dict[str, Any]:
        p = super().pod(i, scheduler, scheduler_name)
        if scheduler == "kube":
            p["spec"]["affinity"] = {"nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": TIER, "operator": "In",
                                           "values": ["gold", "silver"]}]}]},
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 1, "preference": {"matchExpressions": [
                        {"key": PRIORITY, "operator": "Gt", "values": [str(v)]}]}}
                    for v in range(9)],
            }}
        return p

    def policy_spec(self) -> dict[str, Any]:
        return {
            **super().policy_spec(),
            "filters": [{"name": "NodeLabel", "args": {"requirements": [
                {"key": TIER, "operator": "In", "values": ["gold", "silver"]}]}}],
            "scorers": [{"name": "NodeLabelValue", "weight": 2,
                         "args": {"key": PRIORITY, "default": 0}}],
        }


class NodeAffinity(Workload):
    """Every pod: required zone In (zone-0..zone-5), preferred tier gold (weight 10) and
    silver (weight 5). The same pods for every scheduler (polsched: default NodeAffinity)."""

    def pod(self, i: int, scheduler: str, scheduler_name: str) -> dict[str, Any]:
        p = super().pod(i, scheduler, scheduler_name)
        p["spec"]["affinity"] = {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": ZONE, "operator": "In",
                                       "values": [f"zone-{z}" for z in range(6)]}]}]},
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 10, "preference": {"matchExpressions": [
                    {"key": TIER, "operator": "In", "values": ["gold"]}]}},
                {"weight": 5, "preference": {"matchExpressions": [
                    {"key": TIER, "operator": "In", "values": ["silver"]}]}},
            ],
        }}
        return p


EXTENDER_CONFIG = {  # shared by kube-scheduler's config and polsched's spec.extenders
    "filterVerb": "filter", "prioritizeVerb": "prioritize", "weight": 1,
    "nodeCacheCapable": True, "ignorable": False, "httpTimeout": "5s",
}


class Extender(Workload):
    def policy_spec(self) -> dict[str, Any]:
        return {**super().policy_spec(), "extenders": []}  # the runner fills in urlPrefix


@dataclass(frozen=True)
class HotReload(Workload):
    """Plain pods stream in at a steady rate (`pod_rate` per second, for every scheduler)
    while the policy's NodeLabelValue weight flips between 1 and 2 (each flip is a new
    generation); polsched only measures reload latency (bench/reload.py)."""

    pod_rate: float = 150.0

    def policy_spec(self) -> dict[str, Any]:
        return {**super().policy_spec(), "scorers": [self.scorer(1)]}

    @staticmethod
    def scorer(weight: int) -> dict[str, Any]:
        return {"name": "NodeLabelValue", "weight": weight, "args": {"key": PRIORITY}}

    def patches(self) -> list[dict[str, Any]]:
        return [{"spec": {"scorers": [self.scorer(2 if k % 2 == 0 else 1)]}}
                for k in range(self.reload_patches)]


HIGH_PRIORITY_CLASS = "bench-high-priority"


class Preemption(Workload):
    """scheduler_perf's PreemptionAsync (test/integration/scheduler_perf/default_preemption):
    nodes of 4 CPU and 32Gi, each filled with 4 low-priority pods of 900m (priority 0,
    bound before the scheduler starts, in namespace bench-other); while the measured pods
    (100m, priority 0) stream in, a high-priority pod (3970m, priority 9999999 through a
    PriorityClass, as the Priority admission plugin requires) is created every 200 ms:
    each one must evict a node's pods and is bound there once they are gone. The same
    pods for every scheduler (polsched: default plugins, DefaultPreemption)."""

    init_pods_per_node = 4
    high_interval_s = 0.2

    def node(self, i: int) -> dict[str, Any]:
        n = node(i)
        res = {"cpu": "4", "memory": "32Gi", "pods": "110"}
        n["status"]["capacity"] = n["status"]["allocatable"] = res
        n["spec"]["taints"] = []
        return n

    def pod(self, i: int, scheduler: str, scheduler_name: str) -> dict[str, Any]:
        p = super().pod(i, scheduler, scheduler_name)
        p["spec"]["containers"][0]["resources"] = {
            "requests": {"cpu": "100m", "memory": "500Mi"},
            "limits": {"cpu": "100m", "memory": "500Mi"}}
        return p

    @staticmethod
    def priority_class() -> dict[str, Any]:
        return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                "metadata": {"name": HIGH_PRIORITY_CLASS}, "value": 9999999,
                "description": "polsched bench: the preemption workload's preemptors"}

    def init_pods(self, scheduler_name: str) -> list[dict[str, Any]]:
        out = []
        for i in range(self.nodes):
            for k in range(self.init_pods_per_node):
                p = pod_base(f"bench-low-{i:05d}-{k}", scheduler_name)
                p["metadata"]["namespace"] = OTHER_NAMESPACE
                p["spec"]["nodeName"] = node_name(i)
                p["spec"]["containers"][0]["resources"] = {
                    "requests": {"cpu": "900m", "memory": "500Mi"},
                    "limits": {"cpu": "900m", "memory": "500Mi"}}
                out.append(p)
        return out

    def high_pod(self, k: int, scheduler_name: str) -> dict[str, Any]:
        p = pod_base(f"bench-high-{k:05d}", scheduler_name)
        p["metadata"]["namespace"] = OTHER_NAMESPACE
        p["spec"]["priorityClassName"] = HIGH_PRIORITY_CLASS
        p["spec"]["containers"][0]["resources"] = {
            "requests": {"cpu": "3970m", "memory": "500Mi"},
            "limits": {"cpu": "3970m", "memory": "500Mi"}}
        return p


# -- scheduler_perf's hard workloads (issue 15) ------------------------------------------
def perf_node(i: int, zones: int) -> dict[str, Any]:
    """scheduler_perf's node-default.yaml (4 CPU, 32Gi, 110 pods, no taints), with its
    labelNodePrepareStrategy zone label (`zones` values) and the bench's labels."""
    n = node(i)
    res = {"cpu": "4", "memory": "32Gi", "pods": "110"}
    n["status"]["capacity"] = n["status"]["allocatable"] = res
    n["spec"]["taints"] = []
    n["metadata"]["labels"][ZONE] = f"moon-{i % zones + 1}"
    return n


def perf_pod(name: str, scheduler_name: str, namespace: str = NAMESPACE,
             labels: dict[str, str] | None = None) -> dict[str, Any]:
    """scheduler_perf's pod-default.yaml: 100m / 500Mi requests and limits."""
    p = pod_base(name, scheduler_name)
    p["metadata"]["namespace"] = namespace
    p["metadata"]["labels"] = dict(labels if labels is not None else {"app": "bench"})
    p["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "100m", "memory": "500Mi"},
        "limits": {"cpu": "100m", "memory": "500Mi"}}
    return p


class PodAntiAffinity(Workload):
    """scheduler_perf SchedulingPodAntiAffinity (5000Nodes_2000Pods): every pod (initial and
    measured) is labelled color=green and has a required pod anti-affinity to color=green
    pods in both namespaces, topologyKey kubernetes.io/hostname: one such pod per node.
    The initial pods (namespace bench-other, as scheduler_perf's sched-0) are created bound,
    one per node (on a fifth of the nodes), before the scheduler starts; the measured pods
    (bench, as sched-1) are the same for every scheduler (polsched: default plugins,
    InterPodAffinity)."""

    def init_count(self) -> int:
        return self.nodes // 5  # 1000 at 5000 nodes, scaled with the nodes

    def node(self, i: int) -> dict[str, Any]:
        return perf_node(i, 3)

    def _pod(self, name: str, scheduler_name: str, namespace: str) -> dict[str, Any]:
        p = perf_pod(name, scheduler_name, namespace, {"app": "bench", "color": "green"})
        p["spec"]["affinity"] = {"podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [{
                "labelSelector": {"matchLabels": {"color": "green"}},
                "topologyKey": "kubernetes.io/hostname",
                "namespaces": [NAMESPACE, OTHER_NAMESPACE]}]}}
        p["spec"]["containers"][0]["ports"] = [{"containerPort": 80}]
        return p

    def pod(self, i: int, scheduler: str, scheduler_name: str) -> dict[str, Any]:
        return self._pod(f"bench-pod-{i:05d}", scheduler_name, NAMESPACE)

    def init_pods(self, scheduler_name: str) -> list[dict[str, Any]]:
        out = []
        for i in range(self.init_count()):
            p = self._pod(f"bench-init-{i:05d}", scheduler_name, OTHER_NAMESPACE)
            p["spec"]["nodeName"] = node_name(i)
            out.append(p)
        return out


class PodAffinity(Workload):
    """scheduler_perf SchedulingPodAffinity (5000Nodes_5000Pods, threshold 70 pods/s):
    nodes in one zone; every pod (initial and measured) is labelled color=blue with a
    required pod affinity to color=blue pods in both namespaces, topologyKey
    topology.kubernetes.io/zone (templates/pod-with-pod-affinity.yaml). As many initial
    pods as nodes (bench-other, as scheduler_perf's sched-0) are created bound, one per
    node, before the scheduler starts; the measured pods (bench, as sched-1) are the same
    for every scheduler (polsched: default plugins, InterPodAffinity)."""

    def node(self, i: int) -> dict[str, Any]:
        return perf_node(i, 1)

    def _pod(self, name: str, scheduler_name: str, namespace: str) -> dict[str, Any]:
        p = perf_pod(name, scheduler_name, namespace, {"app": "bench", "color": "blue"})
        p["spec"]["affinity"] = {"podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [{
                "labelSelector": {"matchLabels": {"color": "blue"}},
                "topologyKey": ZONE, "namespaces": [NAMESPACE, OTHER_NAMESPACE]}]}}
        p["spec"]["containers"][0]["ports"] = [{"containerPort": 80}]
        return p

    def pod(self, i: int, scheduler: str, scheduler_name: str) -> dict[str, Any]:
        return self._pod(f"bench-pod-{i:05d}", scheduler_name, NAMESPACE)

    def init_pods(self, scheduler_name: str) -> list[dict[str, Any]]:
        out = []
        for i in range(self.nodes):
            p = self._pod(f"bench-init-{i:05d}", scheduler_name, OTHER_NAMESPACE)
            p["spec"]["nodeName"] = node_name(i)
            out.append(p)
        return out


class TopologySpreading(Workload):
    """scheduler_perf TopologySpreading (5000Nodes_5000Pods): nodes in three zones; the
    initial pods (pod-default, no labels that matter) are created bound, spread round-robin
    over the nodes; every measured pod is labelled color=blue with a spread constraint
    maxSkew 5 over topology.kubernetes.io/zone, DoNotSchedule, selecting color=blue. The
    same pods for every scheduler (polsched: default plugins, PodTopologySpread)."""

    def node(self, i: int) -> dict[str, Any]:
        return perf_node(i, 3)

    def pod(self, i: int, scheduler: str, scheduler_name: str) -> dict[str, Any]:
        p = perf_pod(f"bench-pod-{i:05d}", scheduler_name, NAMESPACE,
                     {"app": "bench", "color": "blue"})
        p["spec"]["topologySpreadConstraints"] = [{
            "maxSkew": 5, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"color": "blue"}}}]
        p["spec"]["containers"][0]["ports"] = [{"containerPort": 80}]
        return p

    def init_pods(self, scheduler_name: str) -> list[dict[str, Any]]:
        out = []
        for i in range(self.pods):  # as many initial pods as measured ones (5000 + 5000)
            p = perf_pod(f"bench-init-{i:05d}", scheduler_name, OTHER_NAMESPACE, {})
            p["spec"]["nodeName"] = node_name(i % self.nodes)
            out.append(p)
        return out


SERVICE_SELECTOR = {"app": "scheduler-perf"}


class DefaultSpreading(TopologySpreading):
    """scheduler_perf DefaultTopologySpreading: a Service in the bench namespace selects the
    measured pods (pod-with-label.yaml: label app=scheduler-perf, no requests, no
    constraints of their own), so the system default constraints apply (zone maxSkew 5
    and hostname maxSkew 3, both ScheduleAnyway); initial pods as in topology-spreading.
    Upstream measures 10 000 pods after 5 000; here 5 000 after 5 000. The same pods for
    every scheduler (polsched: default plugins, PodTopologySpread with system defaults)."""

    def pod(self, i: int, scheduler: str, scheduler_name: str) -> dict[str, Any]:
        p = pod_base(f"bench-pod-{i:05d}", scheduler_name)
        p["metadata"]["labels"] = dict(SERVICE_SELECTOR)
        del p["spec"]["containers"][0]["resources"]
        return p

    def extra_objects(self) -> list[tuple[str, dict[str, Any]]]:
        return [(f"/api/v1/namespaces/{NAMESPACE}/services", {
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "bench-service", "namespace": NAMESPACE},
            "spec": {"selector": dict(SERVICE_SELECTOR),
                     "ports": [{"protocol": "TCP", "port": 80, "targetPort": 8000}]}})]


class Mixed(Workload):
    """No two pods alike, drawn from a seeded RNG (the same pods for every scheduler):
    requests cpu 50-1000m and memory 64-2048Mi; required node affinity to a random 4-9 of
    the 10 zones, and a preferred tier term of random weight; half tolerate the bench's
    maintenance taint; a third carry a zone spread constraint (maxSkew 1-5, DoNotSchedule or
    ScheduleAnyway) over one of 20 groups (label group=g<k>). Nodes are the bench's usual
    ones (every 20th tainted). polsched: default plugins."""

    def pod(self, i: int, scheduler: str, scheduler_name: str) -> dict[str, Any]:
        import random

        r = random.Random(1_000_003 * i + 17)
        p = pod_base(f"bench-pod-{i:05d}", scheduler_name)
        p["spec"]["containers"][0]["resources"] = {"requests": {
            "cpu": f"{r.randrange(50, 1001)}m", "memory": f"{r.randrange(64, 2049)}Mi"}}
        zones = sorted(r.sample(range(10), r.randrange(4, 10)))
        p["spec"]["affinity"] = {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": ZONE, "operator": "In",
                                       "values": [f"zone-{z}" for z in zones]}]}]},
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": r.randrange(1, 101), "preference": {"matchExpressions": [
                    {"key": TIER, "operator": "In", "values": [r.choice(TIERS)]}]}}]}}
        if r.random() < 0.5:
            p["spec"]["tolerations"] = [{"key": TAINT_KEY, "operator": "Equal",
                                         "value": "true", "effect": "NoSchedule"}]
        if r.random() < 1 / 3:
            group = f"g{r.randrange(20)}"
            p["metadata"]["labels"]["group"] = group
            p["spec"]["topologySpreadConstraints"] = [{
                "maxSkew": r.randrange(1, 6), "topologyKey": ZONE,
                "whenUnsatisfiable": r.choice(("DoNotSchedule", "ScheduleAnyway")),
                "labelSelector": {"matchLabels": {"group": group}}}]
        return p


class LoadAware(Workload):
    """polsched: LoadVariationRiskBalancing (weight 5, metricsIntervalSeconds 10) over the
    default plugins, reading node usage from the Metrics API: every node runs one
    unmeasured pod that kwok reports as using (7 * i) % 24 cpu of its 32, so real usage
    differs from node to node while requests are equal. kube-scheduler: its default
    plugins on the same pods (it has no load-aware scorer). Nodes are kwok's (annotation
    kwok.x-k8s.io/node=fake): the run needs `hack/cluster.sh` with METRICS=1 and kwok, which
    bench/run.py starts for this workload."""

    USAGE_CPU = "kwok.x-k8s.io/usage-cpu"

    @staticmethod
    def usage_cores(i: int) -> int:
        return (7 * i) % 24

    def node(self, i: int) -> dict[str, Any]:
        n = node(i)
        # kwok initializes it (address, kubelet port, the metrics-path annotation) only
        # while it is not Ready.
        n["metadata"]["annotations"] = {"kwok.x-k8s.io/node": "fake"}
        del n["status"]["conditions"]
        return n

    def init_pods(self, scheduler_name: str) -> list[dict[str, Any]]:
        pods = []
        for i in range(self.nodes):
            p = pod_base(f"bench-load-{i:05d}", "bench-none")
            p["metadata"]["namespace"] = OTHER_NAMESPACE
            p["metadata"]["annotations"] = {self.USAGE_CPU: str(self.usage_cores(i)),
                                            "kwok.x-k8s.io/usage-memory": "1Gi"}
            p["spec"]["nodeName"] = node_name(i)
            p["spec"]["containers"][0]["resources"] = {}
            pods.append(p)
        return pods

    def policy_spec(self) -> dict[str, Any]:
        return {"runtime": {"mode": "Shared"},
                "scorers": [{"name": "LoadVariationRiskBalancing", "weight": 5,
                             "args": {"metricsIntervalSeconds": 10}}]}


# -- Dynamic Resource Allocation (issue 28) -----------------------------------------------
DRA_DRIVER = "test-driver.cdi.k8s.io"
DRA_CLASS = "test-class"
DRA_TEMPLATE = "test-claim-template"
DRA_POD_CLAIM = "resource"
RESOURCE_API = "/apis/resource.k8s.io/v1"


@dataclass(frozen=True)
class DynamicResources(Workload):
    """scheduler_perf SchedulingWithResourceClaimTemplate/5000pods_500nodes
    (test/integration/scheduler_perf/dra/performance-config.yaml): every node
    (node-with-dra-test-driver.yaml: 4 CPU, 32Gi, 110 pods) has one ResourceSlice of
    `devices_per_node` devices (resourceslice-basic-devices.yaml: 14 attributes, 2
    capacities each, pool "<node name>"), one DeviceClass selects the driver in CEL
    (deviceclass.yaml), `init_claims_per_node` x nodes claims in bench-other are allocated
    before the scheduler starts (allocResourceClaims; here each on a node drawn from a
    seeded RNG, first free device, so every scheduler starts from the same allocations),
    and every measured pod (pod-with-claim-template.yaml, no requests) gets its claim from
    the ResourceClaimTemplate through kube-controller-manager's resourceclaim controller.
    The defaults fill the cluster exactly: at the end every device is allocated once, so
    the set of allocated devices and the devices per node are the same for any correct
    scheduler (which pod gets which node is a tie-break). The same pods for every
    scheduler (polsched: default plugins, DynamicResources)."""

    devices_per_node: int = 10
    init_claims_per_node: int = 5
    dra: bool = True
    # The measured pods' claims come from a ResourceClaimTemplate (kube-controller-manager
    # makes them before the pods can be tried); False: the scheduler makes them.
    template_claims: bool = True

    def node(self, i: int) -> dict[str, Any]:
        n = perf_node(i, 3)
        n["metadata"]["labels"]["node-with-dra"] = "true"
        return n

    def pod(self, i: int, scheduler: str, scheduler_name: str) -> dict[str, Any]:
        p = pod_base(f"bench-pod-{i:05d}", scheduler_name)
        c = p["spec"]["containers"][0]
        c["resources"] = {"claims": [{"name": DRA_POD_CLAIM}]}
        p["spec"]["resourceClaims"] = [{"name": DRA_POD_CLAIM,
                                        "resourceClaimTemplateName": DRA_TEMPLATE}]
        return p

    def warmup_pod(self, scheduler: str, scheduler_name: str) -> dict[str, Any]:
        """A plain pod: a warm-up with a claim would hold a device until the controller
        has deleted its claim, and the measured pods fill every device."""
        return pod_base("bench-warmup", scheduler_name)

    def init_count(self) -> int:
        return min(self.nodes * self.init_claims_per_node,
                   self.nodes * self.devices_per_node)

    @staticmethod
    def pool(i: int) -> str:
        return node_name(i)

    def device_class(self) -> dict[str, Any]:
        return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
                "metadata": {"name": DRA_CLASS},
                "spec": {"selectors": [{"cel": {
                    "expression": f'device.driver == "{DRA_DRIVER}"'}}]}}

    def claim_template(self) -> dict[str, Any]:
        return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                "metadata": {"name": DRA_TEMPLATE, "namespace": NAMESPACE},
                "spec": {"spec": {"devices": {"requests": [
                    {"name": "req-0", "exactly": {"deviceClassName": DRA_CLASS}}]}}}}

    def resource_slice(self, i: int) -> dict[str, Any]:
        roots = 2
        devices = []
        for d in range(self.devices_per_node):
            devices.append({
                "name": f"basic-device-{d}",
                "attributes": {
                    "driver": {"string": "xe"},
                    "driverVersion": {"version": "1.2.3"},
                    "resource.k8s.io/pciRoot": {"string": str(d % roots)},
                    "family": {"string": "Arc Pro B-Series"},
                    "health": {"string": "Healthy"},
                    "model": {"string": "B60"},
                    "pciAddress": {"string": f"0000:0{d}:00.0"},
                    "pciId": {"string": "0xe211"},
                    "pciRoot": {"string": f"0{d % roots}"},
                    "resource.kubernetes.io/pciBusID": {"string": f"0000:0{d}:00.0"},
                    "resource.kubernetes.io/pciRoot": {"string": f"pci0000:0{d % roots}"},
                    "sriov": {"bool": True},
                    "type": {"string": "gpu"},
                },
                "capacity": {"memory": {"value": "24480Mi"}, "millicores": {"value": "1k"}},
            })
        return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                "metadata": {"name": f"resourceslice-{i:05d}"},
                "spec": {"pool": {"name": self.pool(i), "generation": 1,
                                  "resourceSliceCount": 1},
                         "driver": DRA_DRIVER, "nodeName": node_name(i),
                         "devices": devices}}

    def extra_objects(self) -> list[tuple[str, dict[str, Any]]]:
        out = [(f"{RESOURCE_API}/deviceclasses", self.device_class()),
               (f"{RESOURCE_API}/namespaces/{NAMESPACE}/resourceclaimtemplates",
                self.claim_template())]
        out += [(f"{RESOURCE_API}/resourceslices", self.resource_slice(i))
                for i in range(self.nodes)]
        return out

    @staticmethod
    def allocation(node: str, pool: str, device: str, request: str = "req-0"
                   ) -> dict[str, Any]:
        """status.allocation of a one-device claim on `node` (what the allocator writes for
        a node-local slice: the result and a node selector on metadata.name)."""
        return {"devices": {"results": [{"request": request, "driver": DRA_DRIVER,
                                         "pool": pool, "device": device}]},
                "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [{
                    "key": "metadata.name", "operator": "In", "values": [node]}]}]}}

    def init_claims(self) -> list[dict[str, Any]]:
        """The allocated claims that exist before the scheduler starts (resourceclaim.yaml,
        namespace bench-other), each with its status.allocation (written after the
        create, through the status subresource)."""
        import random

        r = random.Random(28)
        used = [0] * self.nodes
        open_nodes = list(range(self.nodes))
        out = []
        for k in range(self.init_count()):
            j = r.randrange(len(open_nodes))
            i = open_nodes[j]
            device = f"basic-device-{used[i]}"
            used[i] += 1
            if used[i] == self.devices_per_node:
                open_nodes[j] = open_nodes[-1]
                open_nodes.pop()
            out.append({
                "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                "metadata": {"name": f"test-claim-{k:05d}", "namespace": OTHER_NAMESPACE},
                "spec": {"devices": {"requests": [
                    {"name": "req-0", "exactly": {"deviceClassName": DRA_CLASS}}]}},
                "status": {"allocation": self.allocation(node_name(i), self.pool(i),
                                                         device)}})
        return out

    def generated_claim(self, pod: dict[str, Any]) -> dict[str, Any]:
        """The claim the resourceclaim controller makes for a measured pod from the
        template (owned by the pod; name <pod>-<claim>-<suffix>), for offline use."""
        meta = pod["metadata"]
        return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                "metadata": {
                    "name": f"{meta['name']}-{DRA_POD_CLAIM}-x", "namespace": meta["namespace"],
                    "annotations": {"resource.kubernetes.io/pod-claim-name": DRA_POD_CLAIM},
                    "ownerReferences": [{"apiVersion": "v1", "kind": "Pod",
                                         "name": meta["name"], "uid": meta.get("uid", ""),
                                         "controller": True, "blockOwnerDeletion": True}]},
                "spec": self.claim_template()["spec"]["spec"]}


DRA_EXTENDED_CLASS_PREFIX = "test-class-"


@dataclass(frozen=True)
class DRAExtendedResources(DynamicResources):
    """scheduler_perf dra/extendedresource ExtendedResource Explicit_25classes_5000pods_500nodes
    (threshold 120 pods/s): the DRA workload's nodes and ResourceSlices (10 devices each),
    `classes` DeviceClasses test-class-K selecting the driver with extendedResourceName
    example.com/gpu-K (deviceclass-extended-resource.yaml), and pods that request one
    example.com/gpu-(i mod classes) as an extended resource
    (pod-with-extended-resource.yaml): no claim in the pod, the scheduler allocates a
    device and makes the pod's claim itself (DRAExtendedResource, GA in v1.37). Upstream's
    2500 initial pods, scheduled unmeasured before the measured ones, are left out: here
    2500 measured pods on 5000 devices. The same pods for every scheduler (polsched:
    default plugins, NodeResourcesFit and DynamicResources)."""

    classes: int = 25
    init_claims_per_node: int = 0
    template_claims: bool = False

    def extended_resource(self, i: int) -> str:
        return f"example.com/gpu-{i % self.classes}"

    def pod(self, i: int, scheduler: str, scheduler_name: str) -> dict[str, Any]:
        p = pod_base(f"bench-pod-{i:05d}", scheduler_name)
        one = {self.extended_resource(i): "1"}
        p["spec"]["containers"][0]["resources"] = {"requests": one, "limits": one}
        return p

    def device_classes(self) -> list[dict[str, Any]]:
        return [{"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
                 "metadata": {"name": f"{DRA_EXTENDED_CLASS_PREFIX}{k}"},
                 "spec": {"selectors": [{"cel": {
                     "expression": f'device.driver == "{DRA_DRIVER}"'}}],
                     "extendedResourceName": self.extended_resource(k)}}
                for k in range(self.classes)]

    def extra_objects(self) -> list[tuple[str, dict[str, Any]]]:
        out = [(f"{RESOURCE_API}/deviceclasses", c) for c in self.device_classes()]
        out += [(f"{RESOURCE_API}/resourceslices", self.resource_slice(i))
                for i in range(self.nodes)]
        return out


# scheduler_perf batching/scheduler-config-no-topology.yaml: PodTopologySpread without
# default constraints, so that pods without constraints of their own can be signed.
NO_DEFAULT_SPREAD = {"defaultingType": "List", "defaultConstraints": []}


@dataclass(frozen=True)
class Batching(Workload):
    """scheduler_perf batching HostPortConflict (k8s.io/kubernetes@v1.37.1
    test/integration/scheduler_perf/batching/performance-config.yaml): nodes of
    templates/node-default.yaml and as many pods of templates/pod-hostport-80.yaml (host
    port 80, 100m and 100Mi: one pod per node), with PodTopologySpread's defaultingType
    List and no default constraints in both schedulers (kube-scheduler: its pluginConfig,
    as scheduler-config-no-topology.yaml; polsched: the plugin's args in the policy), so
    that every pod is signed and OpportunisticBatching (on by default in both) places each
    pod on the hint from the one before. Upstream runs 20000 nodes and 20000 pods; the
    warm-up pod takes no host port, so it leaves every node to the measured pods."""

    plugin_config: tuple[dict[str, Any], ...] = (
        {"name": "PodTopologySpread", "args": NO_DEFAULT_SPREAD},)

    def node(self, i: int) -> dict[str, Any]:
        return default_node(i)

    def _pod(self, name: str, scheduler_name: str, port: bool) -> dict[str, Any]:
        p = pod_base(name, scheduler_name)
        c: dict[str, Any] = {"name": "pause", "image": "registry.k8s.io/pause:3.10.1",
                             "resources": {"requests": {"cpu": "100m", "memory": "100Mi"}}}
        if port:
            c["ports"] = [{"containerPort": 80, "hostPort": 80}]
        p["spec"]["containers"] = [c]
        return p

    def pod(self, i: int, scheduler: str, scheduler_name: str) -> dict[str, Any]:
        return self._pod(f"bench-pod-{i:05d}", scheduler_name, True)

    def warmup_pod(self, scheduler: str, scheduler_name: str) -> dict[str, Any]:
        return self._pod("bench-pod-00000", scheduler_name, False)

    def policy_spec(self) -> dict[str, Any]:
        entry = {"name": "PodTopologySpread", "args": NO_DEFAULT_SPREAD}
        return {"runtime": {"mode": "Shared"}, "filters": [entry],
                "scorers": [{**entry, "weight": 2}]}


WORKLOADS: dict[str, Workload] = {w.name: w for w in (
    Workload("basic", 500, 2000, "plain pods, default plugins (scheduler_perf SchedulingBasic)",
             rounds=3),
    Workload("large", 5000, 10000,
             "plain pods, ten times the nodes (scheduler_perf SchedulingBasic at 5000 nodes)"),
    LabelRules("labels", 500, 2000, "label rules: NodeLabel filter + NodeLabelValue scorer",
               equivalence=LabelRules.__doc__ or "", rounds=3),
    NodeAffinity("affinity", 500, 2000, "required + preferred node affinity in every pod",
                 equivalence=NodeAffinity.__doc__ or "", rounds=3),
    Extender("extender", 500, 2000,
             "an HTTP extender (bench/extender.py: filter + prioritize, nodeCacheCapable)",
             equivalence="kube-scheduler: KubeSchedulerConfiguration.extenders; polsched: "
                         "spec.extenders with the same fields; the no-op binder skips it",
             extender=True),
    Workload("shadow", 500, 2000,
             "basic, with a shadow policy (spec.shadowOf) deciding beside polsched's: what "
             "shadowing costs the live policy", shadow=True,
             equivalence="same pods for every scheduler; only polsched has a shadow (the "
                         "operator's default --shadow-budget)"),
    HotReload("hotreload", 500, 7500, "the policy patched 120 times while the pods stream "
              "in at 150 pods/s", equivalence=HotReload.__doc__ or "", reload_patches=120),
    Preemption("preemption", 500, 500,
               "PreemptionAsync: nodes full of low-priority pods, a high-priority pod every "
               "200 ms while the measured pods stream in (scheduler_perf "
               "default_preemption 500Nodes)", equivalence=Preemption.__doc__ or "",
               rounds=3),
    Mixed("mixed", 5000, 5000, "every pod different: requests, node affinity, tolerations, "
          "a third spread (no two pods alike)", equivalence=Mixed.__doc__ or ""),
    PodAntiAffinity("pod-anti-affinity", 5000, 2000,
                    "required pod anti-affinity per hostname, after 1000 initial pods "
                    "(scheduler_perf SchedulingPodAntiAffinity 5000Nodes_2000Pods)",
                    equivalence=PodAntiAffinity.__doc__ or ""),
    PodAffinity("pod-affinity", 5000, 5000,
                "required pod affinity per zone, after 5000 initial pods (scheduler_perf "
                "SchedulingPodAffinity 5000Nodes_5000Pods)",
                equivalence=PodAffinity.__doc__ or ""),
    TopologySpreading("topology-spreading", 5000, 5000,
                      "zone spread constraint maxSkew 5, after 5000 initial pods "
                      "(scheduler_perf TopologySpreading 5000Nodes_5000Pods)",
                      equivalence=TopologySpreading.__doc__ or ""),
    DefaultSpreading("default-spreading", 5000, 5000,
                     "a Service's pods, spread by the system default constraints, after "
                     "5000 initial pods (scheduler_perf DefaultTopologySpreading, reduced "
                     "from 10000 measured pods)", equivalence=DefaultSpreading.__doc__ or ""),
    Workload("scale", 15000, 30000, "plain pods at 15 000 nodes: throughput and peak RSS"),
    # scheduler_perf's 5000Nodes_1000Gangs_3000Pods and 5000Nodes_3Gangs_3000Pods_1000PerGroup
    # with the pods and gangs as upstream and a tenth of the nodes (500: a default run stays
    # within minutes on a small machine; --nodes 5000 for upstream's).
    Gangs("gangs-of-3", 500, 0, "1000 gangs of 3 (PodGroup minCount 3), GenericWorkload on "
          "(scheduler_perf podgroup/gangscheduling 5000Nodes_1000Gangs_3000Pods, 500 nodes)",
          equivalence=Gangs.__doc__ or "", gates=GANG_GATES, groups=1000, per_group=3),
    Gangs("gangs-of-1000", 500, 0, "3 gangs of 1000 (PodGroup minCount 1000), GenericWorkload "
          "on (scheduler_perf 5000Nodes_3Gangs_3000Pods_1000PerGroup, 500 nodes)",
          equivalence=Gangs.__doc__ or "", gates=GANG_GATES, groups=3, per_group=1000,
          scale_size=True),
    DynamicResources("dra", 500, 2500,
                     "Dynamic Resource Allocation: a claim per pod from a "
                     "ResourceClaimTemplate, 10 devices per node, half allocated before the "
                     "run (scheduler_perf SchedulingWithResourceClaimTemplate "
                     "5000pods_500nodes)", equivalence=DynamicResources.__doc__ or ""),
    # Upstream's 20000Nodes_20000Pods, at 5000 (the large workload's size) on this machine.
    Batching("batching", 5000, 5000,
             "identical pods, one per node (host port 80), PodTopologySpread without "
             "default constraints: OpportunisticBatching's shape (scheduler_perf batching "
             "HostPortConflict 20000Nodes_20000Pods, 5000 nodes)",
             equivalence=Batching.__doc__ or ""),
    DRAExtendedResources("dra-extended", 500, 2500,
                         "DRA-backed extended resources: pods request example.com/gpu-K "
                         "(25 DeviceClasses with extendedResourceName), no claim of their "
                         "own (scheduler_perf dra/extendedresource "
                         "Explicit_25classes_5000pods_500nodes, without the 2500 initial "
                         "pods)", equivalence=DRAExtendedResources.__doc__ or ""),
    LoadAware("load-aware", 500, 2000,
              "load-aware: LoadVariationRiskBalancing on real usage from the Metrics API "
              "(kwok usage -> metrics-server) against the default plugins, same pods",
              equivalence=LoadAware.__doc__ or "", metrics=True),
)}
