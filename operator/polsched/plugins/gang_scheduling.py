"""GangScheduling: a PodGroup with a gang policy is placed all or nothing.

Copies kube-scheduler v1.37's gangscheduling plugin
(pkg/scheduler/framework/plugins/gangscheduling/gangscheduling.go; with the
CompositePodGroup gate on (Handle.pod_groups.composite), a PodGroup under a
CompositePodGroup is judged with its whole tree: isCPGTreeReady, permitPodForHierarchy),
which the default profile runs when the GenericWorkload gate is on; here it runs when the
cluster serves scheduling.k8s.io/v1beta1 PodGroups (Handle.pod_groups.served) and
otherwise lets every pod through. A pod is a member of the PodGroup its
`spec.schedulingGroup.podGroupName` names, in its namespace.

- PreEnqueue (preEnqueueHierarchiesDisabled): a member waits outside the active queue
  until its PodGroup exists and, for a gang, until minCount members are known.
- PlacementFeasible: in the pod-group cycle (scheduler.schedule_one_podgroup), whether the members
  tried so far and those left can still reach minCount (a basic group counts as 1).
- Permit (permitPodGroup): a gang member waits (5 minutes at most) until minCount members
  are assumed or bound; the member that completes the quorum allows the others.
- EventsToRegister: a member added (unscheduled or bound), the PodGroup added, and a
  PodGroup update only when its gang minCount decreased; with CompositePodGroup on, a
  CompositePodGroup added, each in the same tree (areSameHierarchy).
- CompositePodGroup on: PreEnqueue and Permit of a PodGroup with a parent ask of its
  tree's root whether at least minGroupCount (1 when basic) children are ready, a child
  PodGroup when it has minCount (1 when basic) members known (PreEnqueue) or scheduled
  (Permit); Permit then allows every assumed member of the tree; PlacementFeasible of a
  CompositePodGroup counts children against minGroupCount.

Texts are upstream's word for word (including "pods's").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from polsched.framework import events as ev
from polsched.framework import podgroups as pg
from polsched.framework.cycle_state import CycleState
from polsched.framework.interfaces import (
    Handle,
    PermitPlugin,
    PlacementFeasiblePlugin,
    PlacementProgress,
    PodGroupInfo,
    PreEnqueuePlugin,
)
from polsched.framework.registry import ArgsError, PluginSpec
from polsched.framework.status import SUCCESS, Code, Status
from polsched.framework.types import PodInfo
from polsched.objects import Json

NAME = "GangScheduling"
# permitTimeoutDuration: how long gang members wait at Permit for a quorum.
PERMIT_TIMEOUT = 300.0
# Resource for PodGroup events (fwk.PodGroup).
POD_GROUP = ev.Resource.POD_GROUP


class GangScheduling(PreEnqueuePlugin, PermitPlugin, PlacementFeasiblePlugin,
                     ev.EnqueueExtensions):
    NAME = NAME

    def __init__(self, handle: Handle) -> None:
        self._groups = handle.pod_groups
        self._waiting = handle.waiting_pods
        self._activate = handle.activate

    def _group_of(self, pod: PodInfo) -> str | None:
        groups = self._groups
        if groups is None or not groups.served:
            return None
        return pg.pod_group_name(pod)

    def group_key(self, pod: PodInfo) -> str | None:
        """The key of the group the queue pops `pod` with, when pod groups are served
        (isPodGroupMember): "namespace/name" of its PodGroup, or with CompositePodGroup on
        the key of its tree's root (getRootLookupInfoForPod); None for a plain pod."""
        name = self._group_of(pod)
        if name is None:
            return None
        assert self._groups is not None
        return self._groups.entity_key(pod.namespace, name)

    def pod_group(self, key: str) -> Json | None:
        """The object of a group key in the cache (a PodGroup, or a root
        CompositePodGroup), None while the key is no complete root (the queue keeps its
        members in incompletePodGroupPods)."""
        groups = self._groups
        if groups is None:
            return None
        return groups.lookup(key)

    def _parent(self, group: Json) -> str | None:
        assert self._groups is not None
        return pg.parent_name(group) if self._groups.composite else None

    # -- the tree of a composite group (isCPGTreeReady) -----------------------------------
    def _tree_ready(self, key: str, count: Callable[[pg.PodGroupState], int],
                    depth: int = 0) -> bool:
        """isCPGTreeReady / isPGReady: a PodGroup is ready with minCount (1 when basic)
        members by `count`; a CompositePodGroup with minGroupCount (1 when basic) ready
        children."""
        assert self._groups is not None
        groups = self._groups
        composite, ns, name = pg.split_key(key)
        if not composite:
            obj = groups.get(ns, name)
            if obj is None:
                return False
            return count(groups.state(key)) >= pg.effective_min_count(obj)
        cpg = groups.get_composite(ns, name)
        if cpg is None or depth >= pg.MAX_TREE_DEPTH:
            return False
        need = pg.min_group_count(cpg)
        ready = sum(1 for child in groups.children(key)
                    if self._tree_ready(child, count, depth + 1))
        return ready >= (1 if need is None else need)

    def _root(self, namespace: str, parent: str) -> tuple[str | None, Status]:
        """GetRootKeyForGroup of the parent CompositePodGroup, or the status PreEnqueue
        and Permit answer without one."""
        assert self._groups is not None
        root = self._groups.root_of(namespace, parent, composite=True)
        if root is None:
            return None, Status.unresolvable(
                "failed to build hierarchy snapshot: composite pod group object not found "
                f"in state for {pg.composite_key(namespace, parent)}")
        return root, SUCCESS

    def _for_tree(self, key: str, fn: Callable[[pg.PodGroupState], None]) -> None:
        assert self._groups is not None
        for leaf in self._groups.leaves(key):
            fn(self._groups.state(leaf))

    # -- PreEnqueue -----------------------------------------------------------------------
    def pre_enqueue(self, pod: PodInfo) -> Status:
        name = self._group_of(pod)
        if name is None:
            return SUCCESS
        assert self._groups is not None
        group = self._groups.get(pod.namespace, name)
        if group is None:
            # The pod is unschedulable until its PodGroup object is created.
            return Status.unresolvable(
                f"waiting for pods's pod group {_go_quote(name)} to appear in scheduling "
                "queue")
        parent = self._parent(group)
        if parent is not None:  # checkCPGHierarchyReadiness
            root, st = self._root(pod.namespace, parent)
            if root is None:
                return st
            if self._tree_ready(root, lambda s: s.all_pods_count):
                return SUCCESS
            return Status.unresolvable("waiting for composite pod group "
                                       f"{_go_quote(pg.split_key(root)[2])} tree to meet "
                                       "quorum")
        min_count = pg.min_count(group)
        if min_count is None:  # this plugin only cares about gangs
            return SUCCESS
        if self._groups.state(f"{pod.namespace}/{name}").all_pods_count < min_count:
            return Status.unresolvable(
                "waiting for minCount pods from a gang to appear in scheduling queue")
        return SUCCESS

    # -- Permit ---------------------------------------------------------------------------
    def permit(self, state: CycleState, pod: PodInfo, node_name: str) -> tuple[Status, float]:
        name = self._group_of(pod)
        if name is None:
            return SUCCESS, 0.0
        assert self._groups is not None
        group = self._groups.get(pod.namespace, name)
        if group is None:
            return Status.error(f"failed to get podGroup {pod.namespace}/{name}: "
                                f'podgroup.scheduling.k8s.io "{name}" not found'), 0.0
        parent = self._parent(group)
        if parent is not None:
            return self._permit_for_tree(pod.namespace, parent)
        min_count = pg.min_count(group)
        if min_count is None:
            return SUCCESS, 0.0
        group_state = self._groups.state(f"{pod.namespace}/{name}")
        if group_state.scheduled_pods_count < min_count:
            # Activate the unscheduled members in case they waited for this one.
            if self._activate is not None:
                self._activate(group_state.unscheduled_pods())
            return (Status(Code.WAIT, ("waiting for minCount pods from a gang to be "
                                       "scheduled",)), PERMIT_TIMEOUT)
        # The quorum is met: allow this pod and every member waiting on Permit.
        for uid in list(group_state.assumed):
            waiting = self._waiting.get(uid)
            if waiting is not None:
                waiting.allow(NAME)
        return SUCCESS, 0.0

    def _permit_for_tree(self, namespace: str, parent: str) -> tuple[Status, float]:
        """permitPodForHierarchy: wait until the root's tree meets its quorum by
        scheduled members (activating the tree's unscheduled members meanwhile), then
        allow every assumed member of the tree."""
        root, st = self._root(namespace, parent)
        if root is None:
            return Status.error(st.message), 0.0
        if not self._tree_ready(root, lambda s: s.scheduled_pods_count):
            if self._activate is not None:
                activate = self._activate
                self._for_tree(root, lambda s: activate(s.unscheduled_pods()))
            return (Status(Code.WAIT, ("waiting for composite pod group "
                                       f"{_go_quote(pg.split_key(root)[2])} tree to meet "
                                       "quorum",)), PERMIT_TIMEOUT)

        def allow(s: pg.PodGroupState) -> None:
            for uid in list(s.assumed):
                waiting = self._waiting.get(uid)
                if waiting is not None:
                    waiting.allow(NAME)
        self._for_tree(root, allow)
        return SUCCESS, 0.0

    # -- PlacementFeasible ----------------------------------------------------------------
    def placement_feasible(self, state: CycleState, group: PodGroupInfo,
                           progress: PlacementProgress) -> Status:
        # getMinCount: a composite group's minGroupCount, a PodGroup's minCount; 1 when
        # basic.
        if group.composite:
            need = pg.min_group_count(group.pod_group)
            min_count = 1 if need is None else need
        else:
            min_count = pg.effective_min_count(group.pod_group)
        remaining, scheduled = progress.remaining, progress.scheduled
        if remaining + scheduled < min_count:
            return Status.unschedulable(
                f"minCount ({min_count}) cannot be satisfied: {scheduled} scheduled, "
                f"{remaining} remaining")
        if scheduled < min_count:
            return Status(Code.WAIT, (f"minCount ({min_count}) is not yet satisfied: "
                                      f"{scheduled} scheduled, {remaining} remaining",))
        return SUCCESS

    # -- EnqueueExtensions ----------------------------------------------------------------
    def events_to_register(self) -> tuple[ev.ClusterEventWithHint, ...]:
        groups = self._groups
        if groups is not None:
            return self._tree_events(groups)
        return (
            # A new member (unscheduled or bound) may complete the gang's minCount; the
            # scheduling group is immutable, so pod updates are not registered.
            ev.event(ev.Resource.UNSCHEDULED_POD, ev.ActionType.ADD, _after_pod_added),
            ev.event(ev.Resource.ASSIGNED_POD, ev.ActionType.ADD, _after_pod_added),
            ev.event(POD_GROUP, ev.ActionType.ADD, _after_pod_group_added),
            ev.event(POD_GROUP, ev.ActionType.UPDATE, _after_pod_group_updated),
        )

    @staticmethod
    def _tree_events(groups: pg.PodGroups) -> tuple[ev.ClusterEventWithHint, ...]:
        """The events, CompositePodGroup's included: each hint asks areSameHierarchy (the
        same root when the gate is on, else the same PodGroup)."""
        def same_tree(pod: PodInfo, key: str) -> bool:
            name = pg.pod_group_name(pod)
            if name is None:
                return False
            if not groups.composite:
                return f"{pod.namespace}/{name}" == key
            mine = groups.root_of(pod.namespace, name)
            composite, ns, other = pg.split_key(key)
            return mine is not None and mine == groups.root_of(ns, other, composite)

        def pod_added(pod: PodInfo, old: Any, new: Any) -> ev.QueueingHint:
            if not isinstance(new, PodInfo):
                return ev.QUEUE
            added = pg.pod_group_key(new)
            return ev.QUEUE if added is not None and same_tree(pod, added) \
                else ev.QUEUE_SKIP

        def group_added(pod: PodInfo, old: Any, new: Any) -> ev.QueueingHint:
            key = _group_key(new)
            return ev.QUEUE if key and same_tree(pod, key) else ev.QUEUE_SKIP

        def group_updated(pod: PodInfo, old: Any, new: Any) -> ev.QueueingHint:
            key = _group_key(new)
            if not key or not same_tree(pod, key):
                return ev.QUEUE_SKIP
            before, after = pg.min_count(old), pg.min_count(new)
            if before is None or after is None:
                return ev.QUEUE_SKIP
            return ev.QUEUE if after < before else ev.QUEUE_SKIP

        def composite_added(pod: PodInfo, old: Any, new: Any) -> ev.QueueingHint:
            if not isinstance(new, dict):
                return ev.QUEUE
            ns, _, name = pg.object_key(new).partition("/")
            return ev.QUEUE if same_tree(pod, pg.composite_key(ns, name)) \
                else ev.QUEUE_SKIP

        return (
            ev.event(ev.Resource.UNSCHEDULED_POD, ev.ActionType.ADD, pod_added),
            ev.event(ev.Resource.ASSIGNED_POD, ev.ActionType.ADD, pod_added),
            ev.event(POD_GROUP, ev.ActionType.ADD, group_added),
            ev.event(POD_GROUP, ev.ActionType.UPDATE, group_updated),
            ev.event(ev.Resource.COMPOSITE_POD_GROUP, ev.ActionType.ADD, composite_added),
        )


def _go_quote(s: str) -> str:
    """Go's %q for a Kubernetes name (no characters that need escaping)."""
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _group_key(obj: Any) -> str:
    return pg.object_key(obj) if isinstance(obj, dict) else ""


def _after_pod_added(pod: PodInfo, old: Any, new: Any) -> ev.QueueingHint:
    """isSchedulableAfterPodAdded: the added pod is in the same group."""
    if not isinstance(new, PodInfo):
        return ev.QUEUE
    mine, added = pg.pod_group_key(pod), pg.pod_group_key(new)
    if mine is None or added is None:
        return ev.QUEUE_SKIP
    return ev.QUEUE if mine == added else ev.QUEUE_SKIP


def _after_pod_group_added(pod: PodInfo, old: Any, new: Any) -> ev.QueueingHint:
    """isSchedulableAfterPodGroupAdded: the pod's own group was added."""
    mine = pg.pod_group_key(pod)
    if mine is None:
        return ev.QUEUE_SKIP
    return ev.QUEUE if mine == _group_key(new) else ev.QUEUE_SKIP


def _after_pod_group_updated(pod: PodInfo, old: Any, new: Any) -> ev.QueueingHint:
    """isSchedulableAfterPodGroupUpdated: the pod's group, a gang before and after, and
    its minCount decreased."""
    mine = pg.pod_group_key(pod)
    if mine is None or mine != _group_key(new):
        return ev.QUEUE_SKIP
    before, after = pg.min_count(old), pg.min_count(new)
    if before is None or after is None:
        return ev.QUEUE_SKIP  # updates to non-gang policies do not help
    return ev.QUEUE if after < before else ev.QUEUE_SKIP


def new(args: Mapping[str, Any] | None, handle: Handle) -> GangScheduling:
    if args:
        raise ArgsError("", f"{NAME} takes no args; remove them")
    return GangScheduling(handle)


SPEC = PluginSpec(name=NAME, pre_enqueue=new)
