"""The pod-group parts of the scheduling queue (upstream's scheduling_queue.go for
PodGroups: addPodGroupMember, deletePodGroupMember, AddPodGroup, DeletePodGroup,
AddAttemptedPodGroupIfNeeded): a pod group waits as one entity with its own history, its
members held while its PodGroup is not observed (incompletePodGroupPods) or while it is in
its cycle (pendingPodGroupPods)."""

from __future__ import annotations

from polsched.framework.types import PodInfo
from polsched.scheduler.queue.core import QueueCore, changes_sizes
from polsched.scheduler.queue.types import (
    GroupOutcome,
    Location,
    QueuedPod,
    QueuedPodGroup,
    Strategy,
)


class PodGroupQueue(QueueCore):
    """The queue's pod-group moves; SchedulingQueue builds its surface on them."""

    def _regroup(self) -> None:
        """Pods queued alone that are pod group members now (the pipeline runs
        GangScheduling since this configure) join their groups."""
        assert self._group_of is not None
        now = self._clock()
        for d in (self._active.entries, self._backoff.entries,
                  self._unschedulable.entries):
            for qp in [e for e in d.values() if isinstance(e, QueuedPod)]:
                if self._group_of(qp.pod) is not None:
                    self._take(qp)
                    self._add_member(qp, now)

    def _dissolve_groups(self) -> None:
        """The pipeline no longer schedules pod groups (GangScheduling switched off): the
        members of queued groups, and those held for a PodGroup, are queued as pods (a
        group in its cycle ends it first; its members then come back as pods)."""
        members: list[QueuedPod] = []
        for g in list(self._groups.values()):
            self._take(g)
            members.extend(g.members)
        self._groups.clear()
        self._member_of.clear()
        for held in self._incomplete.values():
            members.extend(held.values())
        self._incomplete.clear()
        for qp in members:
            if qp.key not in self._in_flight_keys:
                self._move_to_active(qp)

    def _add_group_pod(self, group: str, pod: PodInfo, now: float) -> None:
        """Add / Update of a pod group member that is not in flight."""
        key = pod.key
        for area in (self._group_pending, self._incomplete):
            held = area.get(group)
            qp = held.get(key) if held is not None else None
            if qp is None:
                continue
            assert held is not None
            if qp.uid == pod.uid:
                qp.pod = pod
                return
            del held[key]  # a predecessor of the same name: this one is new
            break
        g = self._member_of.get(key)
        if g is not None:
            qp = g.member(key)
            if qp is not None and qp.uid == pod.uid:
                if self._location(g) in (Location.UNSCHEDULABLE, Location.GATED):
                    self._updated_parked(g, qp, pod, now)
                else:
                    qp.pod = pod  # activeQ / backoffQ: updated in place
                return
            self._remove_member(g, key)
        self._add_member(QueuedPod(pod, timestamp=now), now)

    def _add_member(self, qp: QueuedPod, now: float) -> None:
        """addPodGroupMember: a member (new, or back from its attempt) joins its group: to
        incompletePodGroupPods while the PodGroup is not observed; into the queued group
        wherever it waits, requeued with that queue's strategy; to pendingPodGroupPods
        while the group is in its cycle; else a new group entity in activeQ."""
        assert self._group_of is not None
        key = self._group_of(qp.pod)
        assert key is not None
        if self._pod_group is not None and self._pod_group(key) is None:
            self._incomplete.setdefault(key, {})[qp.key] = qp
            return
        g = self._groups.get(key)
        if g is not None:
            loc = self._take(g)
            g.members.append(qp)
            self._member_of[qp.key] = g
            strategy = (Strategy.IMMEDIATELY if loc is Location.ACTIVE
                        else Strategy.AFTER_BACKOFF if loc is Location.BACKOFF
                        else Strategy.SKIP)
            self._requeue(g, strategy, now)
            return
        if key in self._groups_in_flight:
            self._group_pending.setdefault(key, {})[qp.key] = qp
            return
        g = QueuedPodGroup(key, [qp], timestamp=qp.timestamp,
                           priority=self._group_priority(key, qp), _order=self._next_seq())
        self._groups[key] = g
        self._member_of[qp.key] = g
        self._move_to_active(g)

    def _group_priority(self, key: str, first: QueuedPod) -> int:
        """PodGroupPriority: the PodGroup's spec.priority (0 when unset)."""
        if self._pod_group is None:
            return first.pod.priority
        obj = self._pod_group(key) or {}
        priority = (obj.get("spec") or {}).get("priority")
        return priority if isinstance(priority, int) else 0

    def _remove_member(self, g: QueuedPodGroup, key: str) -> None:
        """deletePodGroupMember: the member leaves its queued group; the group is requeued
        with the strategy of the queue it was in, or dropped when empty."""
        loc = self._take(g)
        g.members = [m for m in g.members if m.key != key]
        self._member_of.pop(key, None)
        if not g.members:
            self._groups.pop(g.key, None)
            return
        strategy = (Strategy.IMMEDIATELY if loc is Location.ACTIVE
                    else Strategy.AFTER_BACKOFF if loc is Location.BACKOFF
                    else Strategy.SKIP)
        self._requeue(g, strategy, self._clock())

    @changes_sizes
    def pod_group_added(self, key: str) -> None:
        """AddPodGroup: the PodGroup of that key is observed; its members waiting for it
        (incompletePodGroupPods) join the queue."""
        held = self._incomplete.pop(key, None)
        if not held:
            return
        now = self._clock()
        for qp in held.values():
            self._add_member(qp, now)

    @changes_sizes
    def pod_group_deleted(self, key: str) -> None:
        """DeletePodGroup: the members of that group, queued or held for its cycle, wait
        for a PodGroup again (incompletePodGroupPods)."""
        moved: list[QueuedPod] = list(self._group_pending.pop(key, {}).values())
        g = self._groups.pop(key, None)
        if g is not None:
            self._take(g)
            for m in g.members:
                self._member_of.pop(m.key, None)
            moved.extend(g.members)
        if moved:
            held = self._incomplete.setdefault(key, {})
            for qp in moved:
                held[qp.key] = qp

    @changes_sizes
    def regroup_trees(self) -> None:
        """CompositePodGroup on, a PodGroup or CompositePodGroup came or went: the trees'
        roots may have changed (workload_forest.go). Members held in
        incompletePodGroupPods whose root is now observed join it (AddPodGroup /
        AddCompositePodGroup); queued members whose root is no longer their group's, or
        whose group is no complete root any more, leave it and join their root or wait
        in incompletePodGroupPods (DeletePodGroup / DeleteCompositePodGroup). A group in
        its cycle is regrouped when it comes back (group_done)."""
        if self._group_of is None:
            return
        now = self._clock()
        moved: list[QueuedPod] = []
        for key in list(self._incomplete):
            held = self._incomplete[key]
            for mkey, qp in list(held.items()):
                target = self._group_of(qp.pod)
                if target is None or target == key and (
                        self._pod_group is not None and self._pod_group(key) is None):
                    continue
                del held[mkey]
                moved.append(qp)
            if not held:
                del self._incomplete[key]
        for g in list(self._groups.values()):
            complete = self._pod_group is None or self._pod_group(g.key) is not None
            for m in list(g.members):
                if complete and self._group_of(m.pod) == g.key:
                    continue
                if self._groups.get(g.key) is g:
                    self._remove_member(g, m.key)
                moved.append(m)
        for qp in moved:
            self._add_member(qp, now)

    @changes_sizes
    def pop_group(self, qp: QueuedPod) -> QueuedPodGroup | None:
        """After pop_nowait: the pod group popped as one unit when `qp` is the first of its
        members (every queued member now in flight, in upstream's order); None for a plain
        pod. The group stays in its cycle until group_done."""
        g = self._popped_group
        if g is None or not g.members or g.members[0] is not qp:
            return None
        self._popped_group = None
        return g

    @changes_sizes
    def group_done(self, key: str, outcome: GroupOutcome = GroupOutcome.SUCCESS) -> None:
        """AddAttemptedPodGroupIfNeeded: the group's cycle ended with `outcome`, each
        member's attempt ended already (a member that failed came back to
        pendingPodGroupPods, with the members that arrived meanwhile). With none there the
        group leaves the queue. Otherwise it is queued again as one entity: after a
        success straight to activeQ with its counters reset (its timestamp kept when a
        member of this cycle is among them, so that preemption is tried at once); after a
        rejection UnschedulableCount++ and after an error ConsecutiveErrorsCount++, then
        backoffQ while backing off, else activeQ."""
        g = self._groups_in_flight.pop(key, None)
        pending = self._group_pending.pop(key, {})
        if self._popped_group is g:
            self._popped_group = None
        if g is None or self._group_of is None:
            # Not popped as a group, or the pipeline no longer schedules groups: the
            # members that came back are queued as pods.
            for qp in pending.values():
                self._move_to_active(qp)
            return
        if not pending:
            return
        if self._pod_group is not None and self._pod_group(key) is None:
            self._incomplete.setdefault(key, {}).update(pending)
            return
        tried = {m.uid for m in g.members}
        had_unschedulable = any(qp.uid in tried for qp in pending.values())
        g.members = list(pending.values())
        for qp in g.members:
            self._member_of[qp.key] = g
        self._groups[key] = g
        g.priority = self._group_priority(key, g.members[0])
        now = self._clock()
        if outcome is GroupOutcome.RESTORED:
            g.attempts -= 1
            self._move_to_active(g, from_backoff=True)
            return
        g._expiry = None
        if outcome is GroupOutcome.SUCCESS:
            g.consecutive_errors = g.unschedulable_count = 0
            if not had_unschedulable:
                g.timestamp, g._order = now, self._next_seq()
        elif outcome is GroupOutcome.REJECTED:
            g.unschedulable_count += 1
            g.consecutive_errors = 0
            g.timestamp, g._order = now, self._next_seq()
        else:
            g.consecutive_errors += 1
            g.timestamp, g._order = now, self._next_seq()
        g.flush_timestamp = 0.0
        if outcome is not GroupOutcome.SUCCESS and self._backoff.backing_off(g, now):
            self._move_to_backoff(g)
        else:
            self._move_to_active(g)
