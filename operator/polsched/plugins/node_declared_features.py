"""NodeDeclaredFeatures: a pod that needs a node feature goes only to nodes that declare it
in node.status.declaredFeatures.

Copies kube-scheduler's nodedeclaredfeatures plugin (k8s.io/kubernetes@v1.37.1
pkg/scheduler/framework/plugins/nodedeclaredfeatures), GA and locked on in v1.37, with
the feature registry and inference of k8s.io/component-helpers@v0.37.1
nodedeclaredfeatures (features/registry.go AllFeatures). PreFilter infers the features the
pod's spec needs (Skip when none); Filter rejects, UnschedulableAndUnresolvable, a node
whose declared features do not include them all. A node's features that the registry does
not know are ignored (FeatureMapper.TryMap); the API server keeps the list sorted and
unique, so a set is the same test as upstream's bitmap subset.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from polsched.framework import events as ev
from polsched.framework import signers
from polsched.framework.cycle_state import CycleState
from polsched.framework.interfaces import (
    FilterPlugin,
    Handle,
    PreFilterPlugin,
    SignFragment,
    SignPlugin,
)
from polsched.framework.registry import ArgsError, PluginSpec
from polsched.framework.status import SKIP, SUCCESS, Status
from polsched.framework.types import NodeInfo, PodInfo, Snapshot
from polsched.objects import Json

NAME = "NodeDeclaredFeatures"

# errReasonUnsatisfiedRequirements
ERR_REASON_UNSATISFIED_REQUIREMENTS = "node(s) didn't match Pod's required features"
PRE_FILTER_STATE_KEY = "PreFilter" + NAME

# The kube-scheduler release whose registry this is: a feature whose MaxVersion is older
# is no longer required (every feature has an operator past its skew window).
Version = tuple[int, int, int]
SCHEDULER_VERSION: Version = (1, 37, 1)

_UNSATISFIED = Status.unresolvable(ERR_REASON_UNSATISFIED_REQUIREMENTS)


@dataclass(frozen=True, slots=True)
class Feature:
    """types.Feature, the part the scheduler uses: the name a node declares, whether a pod
    (its spec) needs it to be scheduled, and the last version where that matters (None:
    no bound)."""

    name: str
    infer_for_scheduling: Callable[[Json], bool]
    max_version: Version | None = None


def _never(spec: Json) -> bool:
    return False


def _containers(spec: Json, *kinds: str) -> Iterable[Json]:
    for kind in kinds:
        for c in spec.get(kind) or ():
            if isinstance(c, dict):
                yield c


def _restart_all_containers(spec: Json) -> bool:
    """restartallcontainers: a container rule whose action is RestartAllContainers."""
    return any(rule.get("action") == "RestartAllContainers"
               for c in _containers(spec, "containers", "initContainers")
               for rule in c.get("restartPolicyRules") or ())


def _user_namespaces_host_network(spec: Json) -> bool:
    """usernamespaceshostnetwork: host network in a user namespace (hostUsers false)."""
    return bool(spec.get("hostNetwork")) and spec.get("hostUsers") is False


def _volume_bind_mount_options(spec: Json) -> bool:
    """volumebindmountoptions: a volume mount of any container with bindMountOptions."""
    return any(m.get("bindMountOptions")
               for c in _containers(spec, "containers", "initContainers",
                                    "ephemeralContainers")
               for m in c.get("volumeMounts") or ())


# features.AllFeatures, sorted by name as ndf.New sorts it. The ones whose
# InferForScheduling is always false (they matter to pod updates or to other plugins:
# DRAOptionalNodeOperations is DynamicResources' own check) are listed for completeness.
ALL_FEATURES: tuple[Feature, ...] = tuple(sorted((
    Feature("RestartAllContainersOnContainerExits", _restart_all_containers),
    Feature("InPlacePodLevelResourcesVerticalScaling", _never),
    Feature("ExtendWebSocketsToKubelet", _never),
    Feature("InPlacePodVerticalScalingInitContainers", _never),
    Feature("InPlacePodVerticalScalingMemoryBackedVolumes", _never),
    Feature("UserNamespacesHostNetworkSupport", _user_namespaces_host_network),
    Feature("DRANodeAllocatableResources", _never),
    Feature("VolumeBindMountOptions", _volume_bind_mount_options),
    Feature("DRAOptionalNodeOperations", _never),
), key=lambda f: f.name))


def infer_for_pod_scheduling(spec: Json, features: Sequence[Feature] = ALL_FEATURES,
                             version: Version = SCHEDULER_VERSION) -> frozenset[str]:
    """Framework.InferForPodScheduling: the features `spec` needs on its node."""
    return frozenset(f.name for f in features
                     if (f.max_version is None or version <= f.max_version)
                     and f.infer_for_scheduling(spec))


def declared_features(node: Json) -> tuple[str, ...]:
    """node.status.declaredFeatures as written (sorted and unique by validation)."""
    return tuple((node.get("status") or {}).get("declaredFeatures") or ())


class NodeDeclaredFeatures(SignPlugin, PreFilterPlugin, FilterPlugin, ev.EnqueueExtensions):
    NAME = NAME

    def sign_pod(self, pod: PodInfo) -> Sequence[SignFragment] | None:
        """SignPod (OpportunisticBatching): what of the pod this plugin reads."""
        return [(signers.FEATURES, sorted(self._requirements(pod)))]

    def __init__(self, features: Sequence[Feature] = ALL_FEATURES,
                 version: Version = SCHEDULER_VERSION) -> None:
        self.features = tuple(features)
        self.version = version

    def _requirements(self, pod: PodInfo) -> frozenset[str]:
        # As upstream, the spec alone: a pending pod's status says nothing of its needs.
        return infer_for_pod_scheduling(pod.spec, self.features, self.version)

    def pre_filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> Status:
        reqs = self._requirements(pod)
        if not reqs:
            return SKIP
        state.write(PRE_FILTER_STATE_KEY, reqs)
        return SUCCESS

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        reqs: frozenset[str] | None = state.get(PRE_FILTER_STATE_KEY)
        if reqs is None:
            return Status.error(
                f'error reading "{PRE_FILTER_STATE_KEY}" from cycle-state: not found')
        if reqs <= node.declared_features:
            return SUCCESS
        return _UNSATISFIED

    # -- queueing hints ------------------------------------------------------------------
    def events_to_register(self) -> tuple[ev.ClusterEventWithHint, ...]:
        r, a = ev.Resource, ev.ActionType
        return (ev.event(r.NODE, a.ADD | a.UPDATE_NODE_DECLARED_FEATURE,
                         self._after_node_change),
                ev.event(r.TARGET_POD, a.UPDATE, self._after_target_pod_update))

    def _after_node_change(self, pod: PodInfo, old: Any, new: Any) -> ev.QueueingHint:
        """isSchedulableAfterNodeChange: a node was added, or its declared features
        changed."""
        if old is not None and _raw(old, declared_features) == _raw(new, declared_features):
            return ev.QUEUE_SKIP
        return ev.QUEUE

    def _after_target_pod_update(self, pod: PodInfo, old: Any, new: Any) -> ev.QueueingHint:
        """isSchedulableAfterTargetPodUpdate: the pod's own update changed what it needs."""
        before = infer_for_pod_scheduling(_raw(old, _spec), self.features, self.version)
        after = infer_for_pod_scheduling(_raw(new, _spec), self.features, self.version)
        return ev.QUEUE_SKIP if before == after else ev.QUEUE


def _spec(pod: Json) -> Json:
    spec: Json = pod.get("spec") or {}
    return spec


def _raw(obj: Any, fn: Callable[[Json], Any]) -> Any:
    """`fn` of an event object, given as its JSON or as a PodInfo / NodeInfo."""
    return fn(obj.raw if isinstance(obj, PodInfo | NodeInfo) else obj)


def new(args: Mapping[str, Any] | None, handle: Handle) -> NodeDeclaredFeatures:
    if args:
        raise ArgsError("", f"{NAME} takes no args; remove them")
    return NodeDeclaredFeatures()


SPEC = PluginSpec(name=NAME, filter=new)
