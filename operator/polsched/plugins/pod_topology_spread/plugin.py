"""The PodTopologySpread plugin: its filtering and scoring halves, the cluster events
that may make a pod it rejected schedulable (queueing hints) and its registry entry
(upstream's plugin.go).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from polsched.framework import events as ev
from polsched.framework.interfaces import Handle, SignFragment, SignPlugin
from polsched.framework.registry import PluginSpec
from polsched.framework.types import PodInfo
from polsched.plugins.pod_topology_spread.args import DEFAULT_ARGS, DO_NOT_SCHEDULE, parse_args
from polsched.plugins.pod_topology_spread.common import NAME, SpreadConstraint, has_keys
from polsched.plugins.pod_topology_spread.filtering import Filtering
from polsched.plugins.pod_topology_spread.scoring import Scoring


class PodTopologySpread(SignPlugin, Filtering, Scoring, ev.EnqueueExtensions):
    """One plugin at two extension points, as upstream's one type whose methods live in
    filtering.go and scoring.go: Filtering and Scoring share SpreadBase's state (the
    memo of counts, the compiled constraints)."""

    NAME = NAME

    def sign_pod(self, pod: PodInfo) -> Sequence[SignFragment] | None:
        """SignPod (OpportunisticBatching): what of the pod this plugin reads."""
        # Not signable with constraints of its own or default ones (the System defaulting
        # type's included: under the default profile no pod is batched).
        if pod.spec.get("topologySpreadConstraints"):
            return None
        if self.signs_no_pod():
            return None
        return []

    def signs_no_pod(self) -> bool:
        return self.system_defaulted or bool(self.args.default_constraints)

    def events_to_register(self) -> tuple[ev.ClusterEventWithHint, ...]:
        r, a = ev.Resource, ev.ActionType
        return (
            ev.event(r.ASSIGNED_POD, a.ADD | a.UPDATE_POD_LABEL | a.DELETE,
                     self._after_assigned_pod_change),
            ev.event(r.TARGET_POD, a.UPDATE_POD_TOLERATION | a.UPDATE_POD_LABEL,
                     self._after_target_pod_change),
            ev.event(r.NODE, a.ADD | a.DELETE | a.UPDATE_NODE_LABEL | a.UPDATE_NODE_TAINT,
                     self._after_node_change),
        )

    @staticmethod
    def _label_change(constraints: Sequence[SpreadConstraint], old: PodInfo,
                      new: PodInfo) -> ev.QueueingHint:
        """isSchedulableAfterPodLabelChange: a constraint selects the pod before xor after."""
        if old.labels == new.labels:
            return ev.QUEUE_SKIP
        for c in constraints:
            if c.selector(old.labels) != c.selector(new.labels):
                return ev.QUEUE
        return ev.QUEUE_SKIP

    def _after_target_pod_change(self, pod: PodInfo, old: Any, new: Any) -> ev.QueueingHint:
        constraints = self._constraints(pod, DO_NOT_SCHEDULE)
        if old.tolerations != new.tolerations and any(c.honor_node_taints
                                                      for c in constraints):
            return ev.QUEUE
        return self._label_change(constraints, old, new)

    def _after_assigned_pod_change(self, pod: PodInfo, old: Any,
                                   new: Any) -> ev.QueueingHint:
        """isSchedulableAfterAssignedPodChange: a pod in the pod's namespace that its
        constraints select arrived, left or changed labels."""
        def involved(other: PodInfo) -> bool:  # involvedInTopologySpreading
            return other.uid == pod.uid or (bool(other.node_name)
                                            and other.namespace == pod.namespace)

        if (new is not None and not involved(new)) or (old is not None and not involved(old)):
            return ev.QUEUE_SKIP
        constraints = self._constraints(pod, DO_NOT_SCHEDULE)
        if new is not None and old is not None:
            return self._label_change(constraints, old, new)
        changed: PodInfo = new if new is not None else old
        if any(c.selector(changed.labels) for c in constraints):
            return ev.QUEUE
        return ev.QUEUE_SKIP

    def _after_node_change(self, pod: PodInfo, old: Any, new: Any) -> ev.QueueingHint:
        constraints = self._constraints(pod, DO_NOT_SCHEDULE)
        before = ev.node_of(old)
        after = ev.node_of(new)
        was = before is not None and has_keys(before.labels, constraints)
        now = after is not None and has_keys(after.labels, constraints)
        if before is not None and after is not None:
            if was != now:
                return ev.QUEUE
            if now and (any(before.labels.get(c.topology_key) != after.labels.get(c.topology_key)
                            for c in constraints) or before.taints != after.taints):
                return ev.QUEUE
            return ev.QUEUE_SKIP
        if after is not None:
            return ev.QUEUE if now else ev.QUEUE_SKIP
        return ev.QUEUE if was else ev.QUEUE_SKIP


def new(args: Mapping[str, Any] | None, handle: Handle) -> PodTopologySpread:
    return PodTopologySpread(parse_args(args), handle)


SPEC = PluginSpec(name=NAME, filter=new, score=new, default_args=DEFAULT_ARGS)
