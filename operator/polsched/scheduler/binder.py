"""Binder: the binding cycle, run in the background.

As kube-scheduler's bindingCycle (schedule_one.go) the scheduling loop assumes the pod and
moves on; the bind runs in the background, at most `concurrency` at a time. DefaultBinder
(pkg/scheduler/framework/plugins/defaultbinder) posts a v1 Binding to pods/binding; an
extender with a bindVerb that is interested in the pod binds instead (extendersBinding:
the first such extender).

The outcome goes back to the scheduler through a callback, which forgets the assumed pod
and requeues it when the bind failed. A 409 Conflict means the pod is already bound
(someone else won, or our own earlier bind went through): it is never bound twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import json
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
# pod, node, callback, binding extender, annotations
_BindJob = tuple[PodInfo, str, BindCallback, BindingExtender | None, Mapping[str, str] | None]


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


def encode_binding(pod: PodInfo, node_name: str,
                   annotations: Mapping[str, str] | None = None) -> bytes:
    """`binding` as the bytes posted (compact JSON)."""
    return json.dumps(binding(pod, node_name, annotations), separators=(",", ":")).encode()


def binding_extender(extenders: Sequence[object], pod: PodInfo) -> BindingExtender | None:
    for ext in extenders:
        if isinstance(ext, BindingExtender) and ext.is_binder() and ext.is_interested(pod):
            return ext
    return None


class Binder:
    """A fixed set of `concurrency` writer coroutines drains a queue of binds: no task,
    semaphore and done-callback per pod (that plumbing was a visible share of the
    scheduler's CPU per pod). They start with the first bind, in its event loop."""

    def __init__(self, client: ApiClient, *, concurrency: int = 32) -> None:
        self._client = client
        self._concurrency = max(concurrency, 1)
        self._queue: asyncio.Queue[_BindJob] = asyncio.Queue()
        self._workers: list[asyncio.Task[None]] = []
        self._pending = 0  # queued or being written

    @property
    def in_flight(self) -> int:
        return self._pending

    def bind(self, pod: PodInfo, node_name: str, done: BindCallback,
             extenders: Sequence[object] = (),
             annotations: Mapping[str, str] | None = None) -> None:
        """Start binding `pod` to `node_name`; `done(outcome, message)` is called after.
        `annotations` ride on the Binding (not on an extender's bind)."""
        if not self._workers:
            loop = asyncio.get_running_loop()
            self._workers = [loop.create_task(self._work(), name=f"polsched-binder-{i}")
                             for i in range(self._concurrency)]
        self._pending += 1
        self._queue.put_nowait(
            (pod, node_name, done, binding_extender(extenders, pod), annotations))

    async def _work(self) -> None:
        queue = self._queue
        while True:
            pod, node_name, done, extender, annotations = await queue.get()
            try:
                await self._bind(pod, node_name, done, extender, annotations)
            finally:
                self._pending -= 1
                queue.task_done()

    async def _bind(self, pod: PodInfo, node_name: str, done: BindCallback,
                    extender: BindingExtender | None,
                    annotations: Mapping[str, str] | None = None) -> None:
        outcome, message = BindOutcome.BOUND, ""
        try:
            if extender is not None:
                await extender.bind(pod, node_name)
            else:
                await self._client.send(
                    "POST", f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/binding",
                    encode_binding(pod, node_name, annotations))
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
        except Exception as err:  # a bug here must not leave the pod assumed forever
            log.exception("binding %s failed", pod.key)
            outcome, message = BindOutcome.FAILED, str(err) or type(err).__name__
        try:
            done(outcome, message)
        except Exception:
            log.exception("bind callback for %s failed", pod.key)

    async def close(self, timeout: float = 10.0) -> None:
        """Let binds queued or in flight finish (within `timeout`), then stop the
        writers."""
        if self._pending:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._queue.join(), timeout)
        for t in self._workers:
            t.cancel()
        for t in self._workers:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        self._workers = []
