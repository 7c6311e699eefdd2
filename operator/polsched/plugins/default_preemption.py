"""DefaultPreemption's PostFilter message, without the preemption.

When no node fits, kube-scheduler runs the DefaultPreemption PostFilter
(pkg/scheduler/framework/plugins/defaultpreemption/default_preemption.go and
pkg/scheduler/framework/preemption/preemption.go) and the pod's FailedScheduling event
carries its verdict as a second sentence, e.g.

    0/10 nodes are available: 10 Insufficient cpu. preemption: 0/10 nodes are available:
    10 No preemption victims found for incoming pod.

polsched does not preempt (yet). This module computes the sentence kube-scheduler would
write so that polsched's FailedScheduling text equals kube-scheduler's, following
upstream's steps:

1. A pod with spec.preemptionPolicy Never: "preemption: not eligible due to
   preemptionPolicy=Never."
2. Only nodes whose filter status is Unschedulable are potential nodes; the others (status
   UnschedulableAndUnresolvable, or none) count as "Preemption is not helpful for
   scheduling".
3. On a potential node the victims are the pods with a lower priority than the pod. No
   victims: "No preemption victims found for incoming pod". Otherwise the pod is tried on
   the node without all its victims: if it still does not fit, the node counts under the
   reasons of that failure.
4. With no candidate at all the sentence is "preemption: " + the "0/N nodes are available:
   ..." text over those per-node statuses, exactly as upstream formats it (the string ends
   with a period).

Trying the pod on a node without its victims (step 3) uses `node_filter`, a callable
(pod, node) -> Status that the pipeline can supply to run its filters on a copy of the
node (upstream re-runs all filters). Without one, the check understands NodeResourcesFit
(free resources after removing the victims, with upstream's "Insufficient <resource>" and
"Too many pods" reasons) and NodePorts (ports the remaining pods hold); a node rejected
by any other plugin keeps its original status, which is exact for plugins that do not
look at the node's pods (NodeLabel, Expression, taints, affinity to nodes) and an
approximation for PodTopologySpread and InterPodAffinity. Filters that ran after the one
that rejected the node are assumed to pass, as they were never evaluated.

Known gap: when a candidate exists (lower-priority victims whose removal makes the pod
fit), kube-scheduler evicts them, nominates the node and schedules the pod in a later
cycle; its FailedScheduling event for this cycle has no preemption sentence, and that is
what this returns (""). polsched does not evict, so such a pod stays Pending until the
cluster changes; upstream's per-node dry-run limits (minCandidateNodesPercentage/
Absolute), PodDisruptionBudgets and the "terminating pod on the nominated node" check do
not change the message in the cases handled here and are not modelled.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterable

from polsched.framework import resources as res
from polsched.framework.pipeline import FitError
from polsched.framework.status import SUCCESS, Code, Status
from polsched.framework.types import HostPort, NodeInfo, PodInfo, Snapshot

NAME = "DefaultPreemption"

NOT_ELIGIBLE_NEVER = "not eligible due to preemptionPolicy=Never."
NOT_HELPFUL = "Preemption is not helpful for scheduling"
NO_VICTIMS = "No preemption victims found for incoming pod"
PREEMPTION_PREFIX = "preemption: "

NodeFilter = Callable[[PodInfo, NodeInfo], Status]

# Trial copies of a node get generations no real node has, so that caches keyed by
# (node.name, node.generation) never take a trial result for the live node's.
_trial_generations = itertools.count(-1, -1)


def node_without(node: NodeInfo, victims: Iterable[PodInfo]) -> NodeInfo:
    """A copy of `node` with `victims` removed; the live NodeInfo is not touched."""
    trial = dataclasses.replace(
        node, requested=dict(node.requested), pods=dict(node.pods),
        used_ports=set(node.used_ports))
    for victim in victims:
        trial.remove_pod(victim)
    trial.generation = next(_trial_generations)
    return trial


def insufficient_resources(pod: PodInfo, node: NodeInfo, ignored: frozenset[str] = frozenset(),
                           ) -> list[str]:
    """NodeResourcesFit's fitsRequest reasons (plugins/noderesources/fit.go) for `pod` on
    `node` as it stands."""
    reasons: list[str] = []
    if len(node.pods) + 1 > node.allocatable.get(res.PODS, 0):
        reasons.append("Too many pods")
    requests = pod.requests
    if not any(requests.values()):
        return reasons
    alloc, used = node.allocatable, node.requested
    for name in (res.CPU, res.MEMORY, res.EPHEMERAL_STORAGE):
        want = requests.get(name, 0)
        if want > 0 and want > alloc.get(name, 0) - used.get(name, 0):
            reasons.append(f"Insufficient {name}")
    for name, want in requests.items():
        if name in (res.CPU, res.MEMORY, res.EPHEMERAL_STORAGE, res.PODS) or want == 0:
            continue
        if name in ignored:
            continue
        if want > alloc.get(name, 0) - used.get(name, 0):
            reasons.append(f"Insufficient {name}")
    return reasons


def _ports_conflict(wanted: Iterable[HostPort], used: set[HostPort]) -> bool:
    """NodePorts' fitsPorts: same protocol and port, and the same or a wildcard IP."""
    for ip, proto, port in wanted:
        for uip, uproto, uport in used:
            if port == uport and proto == uproto and (
                    ip == uip or ip == "0.0.0.0" or uip == "0.0.0.0"):
                return True
    return False


class DefaultPreemption:
    """A PostFilter (framework.pipeline.PostFilter) returning upstream's preemption
    sentence; see the module docstring."""

    def __init__(self, node_filter: NodeFilter | None = None,
                 ignored_resources: frozenset[str] = frozenset()) -> None:
        self.node_filter = node_filter
        self.ignored_resources = ignored_resources

    def _without_victims(self, pod: PodInfo, node: NodeInfo, victims: list[PodInfo],
                         original: Status) -> Status:
        """The status of `pod` on `node` once every victim is gone (SelectVictimsOnNode's
        first check)."""
        if self.node_filter is not None:
            return self.node_filter(pod, node_without(node, victims))
        if original.plugin == "NodeResourcesFit":
            trial = node_without(node, victims)
            reasons = insufficient_resources(pod, trial, self.ignored_resources)
            return Status.unschedulable(*reasons).with_plugin(original.plugin) \
                if reasons else SUCCESS
        if original.plugin == "NodePorts":
            trial = node_without(node, victims)
            return original if _ports_conflict(pod.host_ports, trial.used_ports) else SUCCESS
        return original

    def __call__(self, pod: PodInfo, snapshot: Snapshot, diagnosis: FitError) -> str:
        nodes = snapshot.nodes
        if not nodes:
            # Upstream: no nodes is ErrNoNodesAvailable, not a FitError: no PostFilter.
            return ""
        if pod.spec.get("preemptionPolicy") == "Never":
            return PREEMPTION_PREFIX + NOT_ELIGIBLE_NEVER
        not_helpful = Status.unresolvable(NOT_HELPFUL)
        no_victims = Status.unresolvable(NO_VICTIMS)
        statuses: dict[str, Status] = {}
        priority = pod.priority
        for node in nodes:
            st = diagnosis.node_statuses.get(node.name)
            if st is None or st.code is not Code.UNSCHEDULABLE:
                statuses[node.name] = not_helpful
                continue
            victims = [p for p in node.pods.values() if p.priority < priority]
            if not victims:
                statuses[node.name] = no_victims
                continue
            after = self._without_victims(pod, node, victims, st)
            if after.ok:
                # A candidate: upstream preempts and its event has no preemption sentence.
                return ""
            statuses[node.name] = after
        return PREEMPTION_PREFIX + FitError(len(nodes), statuses).message


_DEFAULT = DefaultPreemption()


def preemption_message(pod: PodInfo, snapshot: Snapshot, diagnosis: FitError) -> str:
    """The PostFilter message with the built-in check (no node_filter)."""
    return _DEFAULT(pod, snapshot, diagnosis)
