"""Binder: the binding cycle, run in the background.

As kube-scheduler's bindingCycle (schedule_one.go) the scheduling loop assumes the pod and
moves on; the bind runs in its own task, at most `concurrency` at a time. DefaultBinder
(pkg/scheduler/framework/plugins/defaultbinder) posts a v1 Binding to pods/binding; an
extender with a bindVerb that is interested in the pod binds instead (extendersBinding:
the first such extender).

The outcome goes back to the scheduler through a callback, which forgets the assumed pod
and requeues it when the bind failed. A 409 Conflict means the pod is already bound
(someone else won, or our own earlier bind went through): it is never bound twice.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol, runtime_checkable

import aiohttp

from polsched.cluster.client import ApiClient, ApiError
from polsched.framework.pipeline import ExtenderError
from polsched.framework.types import Json, PodInfo

log = logging.getLogger(__name__)


class BindOutcome(enum.Enum):
    BOUND = "Bound"
    # 409: already assigned to a node, or the name now belongs to another pod (UID).
    CONFLICT = "Conflict"
    # 404: the pod is gone.
    GONE = "Gone"
    FAILED = "Failed"


@runtime_checkable
class BindingExtender(Protocol):
    """What binding needs of an HTTP extender (polsched.extender.HTTPExtender)."""

    def is_binder(self) -> bool: ...
    def is_interested(self, pod: PodInfo) -> bool: ...
    async def bind(self, pod: PodInfo, node_name: str) -> None: ...


BindCallback = Callable[[BindOutcome, str], None]


def binding(pod: PodInfo, node_name: str,
            annotations: Mapping[str, str] | None = None) -> Json:
    """The v1 Binding DefaultBinder posts; the UID makes a recreated pod refuse it.
    `annotations` end up on the pod: the API server merges a Binding's annotations into
    the pod's (pkg/registry/core/pod/storage setPodNodeAndMetadata)."""
    meta: Json = {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid}
    if annotations:
        meta["annotations"] = dict(annotations)
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": meta,
        "target": {"apiVersion": "v1", "kind": "Node", "name": node_name},
    }


def binding_extender(extenders: Sequence[object], pod: PodInfo) -> BindingExtender | None:
    for ext in extenders:
        if isinstance(ext, BindingExtender) and ext.is_binder() and ext.is_interested(pod):
            return ext
    return None


class Binder:
    def __init__(self, client: ApiClient, *, concurrency: int = 32) -> None:
        self._client = client
        self._sem = asyncio.Semaphore(concurrency)
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    def bind(self, pod: PodInfo, node_name: str, done: BindCallback,
             extenders: Sequence[object] = (),
             annotations: Mapping[str, str] | None = None) -> None:
        """Start binding `pod` to `node_name`; `done(outcome, message)` is called after.
        `annotations` ride on the Binding (not on an extender's bind)."""
        task = asyncio.get_running_loop().create_task(
            self._bind(pod, node_name, done, binding_extender(extenders, pod), annotations))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _bind(self, pod: PodInfo, node_name: str, done: BindCallback,
                    extender: BindingExtender | None,
                    annotations: Mapping[str, str] | None = None) -> None:
        outcome, message = BindOutcome.BOUND, ""
        try:
            async with self._sem:
                if extender is not None:
                    await extender.bind(pod, node_name)
                else:
                    await self._client.post(
                        f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/binding",
                        binding(pod, node_name, annotations))
        except ApiError as err:
            message = err.message or str(err)
            if err.status == 409:
                outcome = BindOutcome.CONFLICT
            elif err.status == 404:
                outcome = BindOutcome.GONE
            else:
                outcome = BindOutcome.FAILED
        except (ExtenderError, aiohttp.ClientError, TimeoutError) as err:
            outcome, message = BindOutcome.FAILED, str(err) or type(err).__name__
        try:
            done(outcome, message)
        except Exception:
            log.exception("bind callback for %s failed", pod.key)

    async def close(self, timeout: float = 10.0) -> None:
        """Let binds in flight finish (within `timeout`)."""
        if self._tasks:
            _, pending = await asyncio.wait(set(self._tasks), timeout=timeout)
            for t in pending:
                t.cancel()
