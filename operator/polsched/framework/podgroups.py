"""Pod groups (scheduling.k8s.io/v1beta1 PodGroup): the objects and each group's members.

As kube-scheduler's backend/cache/podgroupstate.go: per group ("namespace/name") the
cache keeps every member pod it knows (a pod is a member when its
`spec.schedulingGroup.podGroupName` names the group), and which of them are assumed
(passed Reserve, bind in flight) or assigned (bound). `scheduled` = assumed + assigned;
`unscheduled` = neither. The PodGroup objects themselves are kept beside the states, by
the same key (a state may exist without its object, and the other way round).

Who writes: the ClusterCache (pod and PodGroup watch events, assume and forget); offline
callers through the same methods. Plugins (GangScheduling) and the pod-group cycle only
read. Purely data: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from polsched.framework.types import PodInfo
from polsched.objects import Json

# The API (served with the GenericWorkload gate and runtime-config scheduling.k8s.io/v1beta1).
API_VERSION = "scheduling.k8s.io/v1beta1"
KIND = "PodGroup"
PATH = f"/apis/{API_VERSION}/podgroups"

# The PodGroup condition kube-scheduler writes (schedulingapi.PodGroupInitiallyScheduled)
# and its reasons (PodGroupReasonUnschedulable, PodGroupReasonSchedulerError).
POD_GROUP_INITIALLY_SCHEDULED = "PodGroupInitiallyScheduled"
REASON_SCHEDULED = "Scheduled"
REASON_UNSCHEDULABLE = "Unschedulable"
REASON_SCHEDULER_ERROR = "SchedulerError"


# The alpha gate of topology-constrained groups (Handle.features): the placement algorithm,
# and DynamicResources' PodGroupPostFilter leaves groups with schedulingConstraints alone.
TOPOLOGY_AWARE_WORKLOAD_SCHEDULING = "TopologyAwareWorkloadScheduling"

# Hierarchical gangs (alpha gate CompositePodGroup, scheduling.k8s.io/v1alpha3): a
# CompositePodGroup is the parent of PodGroups and of other CompositePodGroups
# (spec.parentCompositePodGroupName, in the same namespace); the queue schedules a tree
# from its root as one entity (backend/queue/workload_forest.go).
COMPOSITE_POD_GROUP = "CompositePodGroup"
COMPOSITE_API_VERSION = "scheduling.k8s.io/v1alpha3"
COMPOSITE_KIND = "CompositePodGroup"
COMPOSITE_PATH = f"/apis/{COMPOSITE_API_VERSION}/compositepodgroups"
# WorkloadMaxTreeDepth: deeper trees are refused (helper.GetPodGroupStates).
MAX_TREE_DEPTH = 4
# A composite group's key is "composite:namespace/name" (fwk.CompositePodGroupKey); a
# PodGroup's stays "namespace/name". No namespace starts with "composite:" (a DNS label).
COMPOSITE_PREFIX = "composite:"


def composite_key(namespace: str, name: str) -> str:
    return f"{COMPOSITE_PREFIX}{namespace}/{name}"


def split_key(key: str) -> tuple[bool, str, str]:
    """(composite, namespace, name) of a group key."""
    composite = key.startswith(COMPOSITE_PREFIX)
    ns, _, name = key.removeprefix(COMPOSITE_PREFIX).partition("/")
    return composite, ns, name


def parent_name(obj: Json | None) -> str | None:
    """spec.parentCompositePodGroupName of a PodGroup or CompositePodGroup, or None."""
    spec = (obj or {}).get("spec")
    name = spec.get("parentCompositePodGroupName") if isinstance(spec, Mapping) else None
    return name if isinstance(name, str) and name else None


def min_group_count(cpg: Json | None) -> int | None:
    """spec.schedulingPolicy.gang.minGroupCount of a CompositePodGroup; None when basic."""
    policy = ((cpg or {}).get("spec") or {}).get("schedulingPolicy") or {}
    gang = policy.get("gang")
    if not isinstance(gang, Mapping):
        return None
    value = gang.get("minGroupCount")
    return value if isinstance(value, int) else 0


def _created(obj: Json) -> str:
    meta = obj.get("metadata") or {}
    ts = meta.get("creationTimestamp")
    return ts if isinstance(ts, str) else ""


def pod_group_name(pod: PodInfo) -> str | None:
    """The PodGroup a pod belongs to (spec.schedulingGroup.podGroupName), or None."""
    group = pod.spec.get("schedulingGroup")
    if not isinstance(group, Mapping):
        return None
    name = group.get("podGroupName")
    return name if isinstance(name, str) and name else None


def pod_group_key(pod: PodInfo) -> str | None:
    """"namespace/podGroupName" of a member pod, or None (fwk.PodGroupKey)."""
    name = pod_group_name(pod)
    return None if name is None else f"{pod.namespace}/{name}"


def object_key(obj: Json) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"


def min_count(pod_group: Json | None) -> int | None:
    """spec.schedulingPolicy.gang.minCount; None for a basic (non-gang) group."""
    policy = ((pod_group or {}).get("spec") or {}).get("schedulingPolicy") or {}
    gang = policy.get("gang")
    if not isinstance(gang, Mapping):
        return None
    value = gang.get("minCount")
    return value if isinstance(value, int) else 0


def effective_min_count(pod_group: Json | None) -> int:
    """getMinCount: a basic group counts as minCount 1."""
    n = min_count(pod_group)
    return 1 if n is None else n


@dataclass(eq=False)
class PodGroupState:
    """podGroupStateData: the members of one group, by uid."""

    all_pods: dict[str, PodInfo] = field(default_factory=dict)
    assumed: dict[str, PodInfo] = field(default_factory=dict)
    assigned: set[str] = field(default_factory=set)
    # Bumped on every change (the cycle's snapshot of the state is taken per cycle).
    generation: int = 0
    # Whether an unscheduled member counts (None: all do). Upstream adds an unassigned pod
    # to its group only from addPodToSchedulingQueue, i.e. when responsibleForPod: a
    # member for a scheduler nobody here serves is not counted until it is bound.
    counts: Callable[[PodInfo], bool] | None = field(default=None, repr=False)
    # What `counts` answers may change without the state changing (a profile added or
    # removed): its version, part of all_pods_count's cache key.
    counts_epoch: Callable[[], int] | None = field(default=None, repr=False)
    _count_cache: tuple[int, int, int] = field(default=(-1, -1, 0), repr=False)

    def _counted(self, uid: str, pod: PodInfo) -> bool:
        return (self.counts is None or uid in self.assigned or uid in self.assumed
                or self.counts(pod))

    @property
    def all_pods_count(self) -> int:
        """Members that count, computed once per change of the state or of `counts`:
        GangScheduling's PreEnqueue asks it for every member of a group on every queue
        move, so a walk per call made filling a gang of n members O(n^3)."""
        if self.counts is None:
            return len(self.all_pods)
        epoch = self.counts_epoch() if self.counts_epoch is not None else 0
        generation, cached_epoch, count = self._count_cache
        if generation == self.generation and cached_epoch == epoch:
            return count
        count = sum(1 for u, p in self.all_pods.items() if self._counted(u, p))
        self._count_cache = (self.generation, epoch, count)
        return count

    @property
    def scheduled_pods_count(self) -> int:
        return len(self.assumed) + len(self.assigned)

    def scheduled_pods(self) -> list[PodInfo]:
        return [*(self.all_pods[u] for u in self.assigned if u in self.all_pods),
                *self.assumed.values()]

    def unscheduled_pods(self) -> list[PodInfo]:
        return [p for u, p in self.all_pods.items()
                if u not in self.assumed and u not in self.assigned and self._counted(u, p)]

    def add_pod(self, pod: PodInfo) -> None:
        """addPod / updatePod: bound pods are assigned (no longer assumed)."""
        self.generation += 1
        self.all_pods[pod.uid] = pod
        if pod.node_name:
            self.assigned.add(pod.uid)
            self.assumed.pop(pod.uid, None)

    def delete_pod(self, uid: str) -> None:
        self.generation += 1
        self.all_pods.pop(uid, None)
        self.assumed.pop(uid, None)
        self.assigned.discard(uid)

    def assume_pod(self, pod: PodInfo) -> None:
        """assumePod: a member that is not (or no longer) known is ignored."""
        stored = self.all_pods.get(pod.uid)
        if stored is None:
            return
        self.generation += 1
        if stored.node_name:
            self.assigned.add(pod.uid)
        else:
            self.assumed[pod.uid] = pod

    def forget_pod(self, uid: str) -> None:
        stored = self.all_pods.get(uid)
        if stored is None:
            return
        self.generation += 1
        self.assumed.pop(uid, None)
        if stored.node_name:
            self.assigned.add(uid)


class PodGroups:
    """The PodGroup objects and the member states of one cluster (fwk.PodGroupManager's
    PodGroups() and PodGroupStates())."""

    def __init__(self, served: bool = False) -> None:
        # Whether the cluster serves scheduling.k8s.io/v1beta1 podgroups (GenericWorkload
        # on): set by the cache from discovery. Off, no pod is a group member here, as
        # upstream's isPodGroupMember with the gate off.
        self.served = served
        self.objects: dict[str, Json] = {}
        self.states: dict[str, PodGroupState] = {}
        # The schedulerNames served here (the engine sets it to its profiles); None: all.
        self.responsible: Callable[[str], bool] | None = None
        # Bumped (responsible_changed) whenever what `responsible` answers may change.
        self.responsible_epoch = 0
        # CompositePodGroup on (the gate, and scheduling.k8s.io/v1alpha3 served): a
        # PodGroup's parentCompositePodGroupName counts only then, as upstream's
        # podGroupHasParent.
        self.composite = False
        self.composites: dict[str, Json] = {}
        # The forest: a composite group's key -> its children's keys (PodGroups and
        # CompositePodGroups observed with it as their parent).
        self._children: dict[str, set[str]] = {}

    def responsible_changed(self) -> None:
        """The set of schedulerNames served changed: counts are computed again."""
        self.responsible_epoch += 1

    def _responsible_epoch(self) -> int:
        return self.responsible_epoch

    def _counts(self, pod: PodInfo) -> bool:
        return self.responsible is None or self.responsible(pod.scheduler_name)

    def _new_state(self, key: str) -> PodGroupState:
        state = self.states[key] = PodGroupState(counts=self._counts,
                                                 counts_epoch=self._responsible_epoch)
        return state

    # -- reading --------------------------------------------------------------------------
    def group_of(self, pod: PodInfo) -> str | None:
        """The key of the group `pod` belongs to, when pod groups are served."""
        return pod_group_key(pod) if self.served else None

    def get(self, namespace: str, name: str) -> Json | None:
        return self.objects.get(f"{namespace}/{name}")

    def state(self, key: str) -> PodGroupState:
        """The state of a group (an empty one when no member is known)."""
        return self.states.get(key) or PodGroupState()

    def bound_gangs(self, scheduler_name: str) -> int:
        """Gang PodGroups of this scheduler's pods (schedulerName of their bound members)
        with at least minCount members bound now: the gangs placed whole."""
        n = 0
        for key, obj in self.objects.items():
            need = min_count(obj)
            state = self.states.get(key)
            if need is None or state is None:
                continue
            bound = [state.all_pods[u] for u in state.assigned if u in state.all_pods]
            if bound and len(bound) >= need and bound[0].scheduler_name == scheduler_name:
                n += 1
        return n

    def __iter__(self) -> Iterator[str]:
        return iter(self.objects)

    # -- the forest of composite groups (workload_forest.go) ------------------------------
    def _parent(self, obj: Json | None, composite: bool) -> str | None:
        """The parent's name: a PodGroup's counts only with CompositePodGroup on."""
        if not composite and not self.composite:
            return None
        return parent_name(obj)

    def get_composite(self, namespace: str, name: str) -> Json | None:
        return self.composites.get(f"{namespace}/{name}")

    def root_of(self, namespace: str, name: str, composite: bool = False) -> str | None:
        """The key of the root of the tree the group belongs to (getRootLookupInfo...):
        the group's own key when it has no parent; None while a group on the way up is
        not observed, or on a cycle or a tree deeper than MAX_TREE_DEPTH."""
        obj = (self.composites if composite else self.objects).get(f"{namespace}/{name}")
        if obj is None:
            return None
        key = composite_key(namespace, name) if composite else f"{namespace}/{name}"
        parent = self._parent(obj, composite)
        seen: set[str] = set()
        while parent is not None:
            if parent in seen or len(seen) >= MAX_TREE_DEPTH:
                return None
            seen.add(parent)
            cpg = self.composites.get(f"{namespace}/{parent}")
            if cpg is None:
                return None
            key = composite_key(namespace, parent)
            parent = parent_name(cpg)
        return key

    def entity_key(self, namespace: str, name: str) -> str:
        """The queue's key for the members of PodGroup `name`: its tree's root, or the
        PodGroup's own key while that root is not known (lookup() is then None, and the
        members wait in incompletePodGroupPods)."""
        return self.root_of(namespace, name) or f"{namespace}/{name}"

    def lookup(self, key: str) -> Json | None:
        """The object of a queue key when it is a complete root: a PodGroup without a
        parent, or a root CompositePodGroup; None otherwise."""
        composite, ns, name = split_key(key)
        if self.root_of(ns, name, composite) != key:
            return None
        return self.get_composite(ns, name) if composite else self.get(ns, name)

    def children(self, key: str) -> list[str]:
        """The child keys of a composite group, in upstream's order (GetChildGroups: by
        creationTimestamp, then by name)."""
        def order(child: str) -> tuple[str, str]:
            composite, ns, name = split_key(child)
            obj = (self.composites if composite else self.objects).get(f"{ns}/{name}")
            return (_created(obj) if obj is not None else "", name)
        return sorted(self._children.get(key, ()), key=order)

    def leaves(self, key: str) -> list[str]:
        """The PodGroup keys under a group key (itself for a PodGroup), depth-bounded."""
        out: list[str] = []

        def walk(k: str, depth: int) -> None:
            if not split_key(k)[0]:
                out.append(k)
                return
            if depth >= MAX_TREE_DEPTH:
                return
            for child in self.children(k):
                walk(child, depth + 1)
        walk(key, 0)
        return out

    def subtree_scheduled(self, key: str) -> list[PodInfo]:
        """The scheduled members of every PodGroup under `key` (GetPodGroupStates)."""
        return [p for leaf in self.leaves(key) for p in self.state(leaf).scheduled_pods()]

    def _link(self, obj: Json, composite: bool, add: bool) -> None:
        ns, name = object_key(obj).split("/", 1)
        parent = self._parent(obj, composite)
        if parent is None:
            return
        pkey = composite_key(ns, parent)
        child = composite_key(ns, name) if composite else f"{ns}/{name}"
        if add:
            self._children.setdefault(pkey, set()).add(child)
            return
        kids = self._children.get(pkey)
        if kids is not None:
            kids.discard(child)
            if not kids:
                del self._children[pkey]

    def apply_composite(self, event: str, obj: Json) -> Json | None:
        """A CompositePodGroup ADDED / MODIFIED / DELETED; returns the previous version."""
        key = object_key(obj)
        old = self.composites.pop(key, None) if event == "DELETED" \
            else self.composites.get(key)
        if old is not None:
            self._link(old, True, False)
        if event != "DELETED":
            self.composites[key] = obj
            self._link(obj, True, True)
        return old

    def set_composite(self, on: bool) -> None:
        """Turn CompositePodGroup on or off: PodGroups' parents are read again."""
        if on == self.composite:
            return
        for obj in self.objects.values():
            self._link(obj, False, False)
        self.composite = on
        for obj in self.objects.values():
            self._link(obj, False, True)

    # -- writing (the cache) --------------------------------------------------------------
    def apply(self, event: str, obj: Json) -> Json | None:
        """A PodGroup ADDED / MODIFIED / DELETED; returns the previous version."""
        key = object_key(obj)
        if event == "DELETED":
            old = self.objects.pop(key, None)
            if old is not None:
                self._link(old, False, False)
            state = self.states.get(key)
            if state is not None and not state.all_pods:
                del self.states[key]
            return old
        old = self.objects.get(key)
        if old is not None:
            self._link(old, False, False)
        self.objects[key] = obj
        self._link(obj, False, True)
        return old

    def pod_added(self, pod: PodInfo) -> None:
        """A member was added or updated (bound members become assigned)."""
        key = pod_group_key(pod)
        if key is None:
            return
        if pod.terminal:
            self.pod_deleted(pod)
            return
        state = self.states.get(key)
        if state is None:
            state = self._new_state(key)
        state.add_pod(pod)

    def pod_deleted(self, pod: PodInfo) -> None:
        key = pod_group_key(pod)
        if key is None:
            return
        state = self.states.get(key)
        if state is None:
            return
        state.delete_pod(pod.uid)
        if not state.all_pods and key not in self.objects:
            del self.states[key]

    def assume(self, pod: PodInfo) -> None:
        key = pod_group_key(pod)
        if key is None:
            return
        state = self.states.get(key)
        if state is None:
            state = self._new_state(key)
            state.all_pods[pod.uid] = pod
        state.assume_pod(pod)

    def forget(self, pod: PodInfo) -> None:
        key = pod_group_key(pod)
        if key is None:
            return
        state = self.states.get(key)
        if state is not None:
            state.forget_pod(pod.uid)
