"""Carrying out preemption: the API calls, off the scheduling loop (async preemption).

Once DefaultPreemption (polsched.plugins.default_preemption) has chosen a node and its
victims, kube-scheduler's Executor (pkg/scheduler/framework/preemption/executor.go,
prepareCandidateAsync) does the writes in a goroutine while the scheduling loop goes on:

1. pods nominated to that node with a lower priority than the preemptor lose their
   nomination (status.nominatedNodeName cleared);
2. every victim but the last, concurrently, then the last one: the DisruptionTarget
   condition (reason PreemptionByScheduler) is patched into its status, the pod is
   deleted, and a Normal "Preempted" event names the preemptor
   ("Preempted by pod <uid> on node <node>"). A victim that Permit plugins hold in its
   binding cycle (a waiting pod) is rejected in memory instead, without API calls
   (" (in kube-scheduler memory)." ends the event's note); when the last victim went that
   way, the preemptor is retried at once (nothing else would move it).

While this runs the preemptor is not scheduled again (upstream's PreEnqueue): `running`
says so, and keeps saying so after the calls while a victim deleted through the API server
is still in the cache and not terminating (the watch has not shown the deletion yet):
tried in that window, the preemptor would find its node still full, no victim terminating
there, and preempt a second time elsewhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from polsched.cluster.client import ApiClient, ApiError
from polsched.framework.nominator import Nominator
from polsched.framework.types import PodInfo
from polsched.framework.waiting_pods import WaitingPod
from polsched.objects import Json
from polsched.preemption.victims import DISRUPTION_TARGET, REASON_PREEMPTION_BY_SCHEDULER
from polsched.scheduler import metrics
from polsched.scheduler.recorder import NORMAL, rfc3339

log = logging.getLogger(__name__)


class VictimRefused(Exception):
    """The executor's last check refused a victim (Executor.refuses): nothing was
    written for it, and the preemptor is retried."""


class Recorder(Protocol):
    """What the executor needs of an EventRecorder."""

    def event(self, pod: PodInfo, type_: str, reason: str, action: str, note: str,
              related: PodInfo | None = None) -> None: ...


def preempted_message(preemptor: PodInfo | GroupPreemptor, node_name: str,
                      preemptor_type: str = "pod") -> str:
    """The Preempted event's note (executor.go PreemptPod): `Preempted by <type> <uid> on
    node <node>`, type "pod" or "podgroup" (then the PodGroup's uid, node "cluster")."""
    return f"Preempted by {preemptor_type} {preemptor.uid} on node {node_name}"


@dataclass(frozen=True)
class GroupPreemptor:
    """A pod group as the preemptor (podGroupExecutorPreemptor): the PodGroup's uid (what
    the executor keys its bookkeeping and the event's note by) and one of its members
    (the priority, and the events' related object: the recorder relates pods)."""

    member: PodInfo
    uid: str
    kind: str = "podgroup"
    # Of the victims' units, the pod groups taken whole (numPodGroupDisruptions).
    disruptions: int = 0

    @property
    def priority(self) -> int:
        return self.member.priority

    @property
    def key(self) -> str:
        return self.member.key


def _pod(preemptor: PodInfo | GroupPreemptor) -> PodInfo:
    return preemptor.member if isinstance(preemptor, GroupPreemptor) else preemptor


def disruption_target(scheduler_name: str, pod: PodInfo, preemptor_type: str = "pod") -> Json:
    """The condition a victim gets before it is deleted."""
    condition: Json = {
        "type": DISRUPTION_TARGET, "status": "True", "reason": REASON_PREEMPTION_BY_SCHEDULER,
        "message": f"{scheduler_name}: preempting to accommodate a higher priority "
                   f"{preemptor_type}",
        "lastTransitionTime": rfc3339(time.time()),
    }
    generation = (pod.raw.get("metadata") or {}).get("generation")
    if generation:
        condition["observedGeneration"] = generation
    return condition


def _has_condition(pod: PodInfo, condition: Json) -> bool:
    for c in (pod.raw.get("status") or {}).get("conditions") or ():
        if c.get("type") == condition["type"]:
            return all(c.get(k) == condition[k] for k in ("status", "reason", "message"))
    return False


class Executor:
    """Runs each preemption's API calls in the background (one engine, every policy)."""

    def __init__(self, client: ApiClient, nominator: Nominator,
                 pods: Mapping[str, PodInfo],
                 waiting_pods: Mapping[str, WaitingPod] | None = None) -> None:
        self._client = client
        self._nominator = nominator
        self._pods = pods  # the cache's pods, to see the last victim terminating
        self._waiting = waiting_pods if waiting_pods is not None else {}
        # preemptor uid -> its victims, while the API calls run
        self._running: dict[str, list[PodInfo]] = {}
        # preemptor uid -> the victims deleted through the API server, until the cache
        # shows each gone or terminating
        self._settling: dict[str, list[PodInfo]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def running(self, uid: str) -> bool:
        """isRunningPreemption: the preemptor's victims are still being evicted, or the
        cache does not show their deletion yet."""
        if uid in self._running:
            return True
        victims = self._settling.get(uid)
        if victims is None:
            return False
        for v in victims:
            current = self._pods.get(v.key)
            if current is not None and current.uid == v.uid and not current.deleting:
                return True
        del self._settling[uid]
        return False

    def forget(self, uid: str) -> None:
        """The preemptor left (bound or deleted)."""
        self._settling.pop(uid, None)

    def actuate(self, scheduler_name: str, recorder: Recorder,
                preemptor: PodInfo | GroupPreemptor,
                node_name: str, victims: Sequence[PodInfo],
                on_error: Callable[[PodInfo], None],
                on_done: Callable[[], None] = lambda: None) -> None:
        """Start evicting `victims` for `preemptor` (prepareCandidateAsync); `on_error`
        is called with the preemptor when a call failed, to retry it at once, `on_done`
        when the calls succeeded (the cache may already show the victims gone). For a
        pod group (actuatePodGroupPreemption) `preemptor` is a GroupPreemptor."""
        if isinstance(preemptor, GroupPreemptor):
            metrics.preemption_victims(len(victims), True, preemptor.disruptions)
        else:
            metrics.preemption_victims(len(victims))
        to_delete = [v for v in victims if not v.deleting]
        if not to_delete:
            return
        self._running[preemptor.uid] = to_delete
        self._spawn(self._run(scheduler_name, recorder, preemptor, node_name, to_delete,
                              on_error, on_done))

    async def close(self) -> None:
        for t in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, scheduler_name: str, recorder: Recorder,
                   preemptor: PodInfo | GroupPreemptor,
                   node_name: str, victims: list[PodInfo],
                   on_error: Callable[[PodInfo], None], on_done: Callable[[], None]) -> None:
        uid = preemptor.uid
        ok = True
        deleted: list[PodInfo] = []
        try:
            lower = [p for p in self._nominator.pods_for_node(node_name)
                     if p.priority < preemptor.priority]
            for p in lower:
                self._nominator.remove(p.key)
            cleared = await asyncio.gather(*(self._clear_nomination(p) for p in lower),
                                           return_exceptions=True)
            ok = not any(isinstance(r, BaseException) for r in cleared)
            *first, last = victims
            done = await asyncio.gather(
                *(self._preempt_pod(scheduler_name, recorder, preemptor, node_name, v)
                  for v in first), return_exceptions=True)
            errors = [r for r in done if isinstance(r, BaseException)]
            deleted += [v for v, r in zip(first, done, strict=True) if r is False]
            if errors:
                ok = False
                log.warning("preempting for %s: %s", preemptor.key, errors[0])
            else:
                try:
                    in_memory = await self._preempt_pod(scheduler_name, recorder, preemptor,
                                                        node_name, last)
                    if in_memory:
                        ok = False  # activate the preemptor: no deletion event will
                    else:
                        deleted.append(last)
                except Exception as err:
                    ok = False
                    log.warning("preempting for %s: %s", preemptor.key, err)
        finally:
            self._running.pop(uid, None)
        if not ok:
            on_error(_pod(preemptor))
        else:
            if deleted:
                self._settling[uid] = deleted
            on_done()

    def refuses(self, preemptor: PodInfo | GroupPreemptor, node_name: str,
                victim: PodInfo) -> str:
        """Why `victim` must not be deleted for `preemptor`, "" when it may: checked right
        before each delete, whatever chose the victim (an extender's preempt answer is
        narrowed where it is read, and this is the last line): the victim, as decided and
        as the cache has it now, is of a lower priority than the preemptor and, for a
        pod's preemption, on the node it was offered on."""
        current = self._pods.get(victim.key)
        if current is not None and current.uid != victim.uid:
            current = None  # re-created since: the UID precondition guards the delete
        for seen in (victim, current):
            if seen is None:
                continue
            if seen.priority >= preemptor.priority:
                return (f"its priority {seen.priority} is not lower than the preemptor's "
                        f"{preemptor.priority}")
            # The cache shows a pod Permit holds (assumed, a waiting pod) unbound.
            if (not isinstance(preemptor, GroupPreemptor) and seen.node_name
                    and seen.node_name != node_name):
                return (f"it is on node {seen.node_name!r}, not on {node_name!r} where "
                        "victims were offered")
        return ""

    async def _preempt_pod(self, scheduler_name: str, recorder: Recorder,
                           preemptor: PodInfo | GroupPreemptor,
                           node_name: str, victim: PodInfo) -> bool:
        """executor.go PreemptPod: condition, delete, event. A victim already gone is no
        error. True when the victim was a waiting pod, rejected in memory."""
        kind = preemptor.kind if isinstance(preemptor, GroupPreemptor) else "pod"
        refused = self.refuses(preemptor, node_name, victim)
        if refused:
            raise VictimRefused(f"not preempting pod {victim.key} for {preemptor.key}: "
                                f"{refused}")
        note = preempted_message(preemptor, node_name, kind)
        waiting = self._waiting.get(victim.uid)
        if waiting is not None and waiting.reject("DefaultPreemption", "preempted"):
            recorder.event(victim, NORMAL, "Preempted", "Preempting",
                           note + " (in kube-scheduler memory).", related=_pod(preemptor))
            return True
        base = f"/api/v1/namespaces/{victim.namespace}/pods/{victim.name}"
        condition = disruption_target(scheduler_name, victim, kind)
        try:
            if not _has_condition(victim, condition):
                await self._client.patch(base + "/status",
                                         {"status": {"conditions": [condition]}}, "strategic")
            # The UID precondition: a pod re-created under the victim's name since the
            # decision was never offered, and the API server refuses it with 409.
            await self._client.delete(base, {
                "kind": "DeleteOptions", "apiVersion": "v1",
                "preconditions": {"uid": victim.uid}})
        except ApiError as err:
            if err.status in (404, 409):
                return False
            raise
        recorder.event(victim, NORMAL, "Preempted", "Preempting", note, related=_pod(preemptor))
        return False

    async def _clear_nomination(self, pod: PodInfo) -> None:
        if not pod.nominated_node:
            return
        path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/status"
        try:
            await self._client.patch(path, {"status": {"nominatedNodeName": None}}, "strategic")
        except ApiError as err:
            if err.status != 404:
                raise
