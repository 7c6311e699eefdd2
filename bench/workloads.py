"""The bench workloads: which nodes, which pods, and how each scheduler is told the rule.

Every node (bench-node-NNNNN) has 32 CPU, 128Gi, 110 pods and the labels
topology.kubernetes.io/zone (zone-0..9), bench.polsched.io/tier (gold, silver, bronze by
turns) and bench.polsched.io/priority (0..9); every 20th node carries the taint
bench.polsched.io/maintenance=true:NoSchedule, which no bench pod tolerates. Every pod
requests 100m CPU and 128Mi, so capacity never runs out and every pod is schedulable.

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

    def scaled(self, scale: float) -> Workload:
        from dataclasses import replace

        return replace(self, nodes=max(2, round(self.nodes * scale)),
                       pods=max(1, round(self.pods * scale)))

    def pod(self, i: int, scheduler: str, scheduler_name: str) -> dict[str, Any]:
        return pod_base(f"bench-pod-{i:05d}", scheduler_name)

    def node(self, i: int) -> dict[str, Any]:
        return node(i)

    def policy_spec(self) -> dict[str, Any]:
        """spec of the SchedulingPolicy polsched runs (schedulerName is added)."""
        return {"runtime": {"mode": "Shared"}}


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


class HotReload(Workload):
    """Plain pods stream in while the policy's NodeLabelValue weight flips between 1 and 2
    (each flip is a new generation); polsched only measures reload latency."""

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


WORKLOADS: dict[str, Workload] = {w.name: w for w in (
    Workload("basic", 500, 2000, "plain pods, default plugins (scheduler_perf SchedulingBasic)"),
    Workload("large", 5000, 10000,
             "plain pods, ten times the nodes (scheduler_perf SchedulingBasic at 5000 nodes)"),
    LabelRules("labels", 500, 2000, "label rules: NodeLabel filter + NodeLabelValue scorer",
               equivalence=LabelRules.__doc__ or ""),
    NodeAffinity("affinity", 500, 2000, "required + preferred node affinity in every pod",
                 equivalence=NodeAffinity.__doc__ or ""),
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
    HotReload("hotreload", 500, 2000, "the policy patched 20 times while the pods stream in",
              equivalence=HotReload.__doc__ or "", reload_patches=20),
    Preemption("preemption", 500, 500,
               "PreemptionAsync: nodes full of low-priority pods, a high-priority pod every "
               "200 ms while the measured pods stream in (scheduler_perf "
               "default_preemption 500Nodes)", equivalence=Preemption.__doc__ or ""),
)}
