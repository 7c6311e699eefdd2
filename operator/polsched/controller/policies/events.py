"""Warning events on a SchedulingPolicy: a fault contained in one policy (its spec does
not load, its pipeline or an extender could not be built, its shadow is not allowed)
shows in that policy's status conditions and, for `kubectl describe spol NAME` and
event-based alerting, as an events.k8s.io/v1 Event regarding the policy.

The policy is cluster-scoped, so its events live in the `default` namespace, where
kubectl describe looks for them (client-go's recorder does the same for Nodes).

Bounded like the rest of the operator's writes: one event per (policy, reason, note)
until it changes (a fault that persists across re-syncs is not repeated), at most
MAX_IN_FLIGHT writes at a time (more are dropped with a debug log: the condition still
says it), and every note truncated to the API's note limit. A note never carries an
answer body from an extender: callers pass the contained error's message, which the
extender client keeps to a status code and a bounded reason.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
import uuid
from typing import Any

from polsched.api import API_VERSION, KIND
from polsched.cluster.client import ApiClient, ApiError
from polsched.framework.diagnosis import truncate_message
from polsched.scheduler.recorder import WARNING, micro_time

log = logging.getLogger(__name__)

EVENTS_NAMESPACE = "default"
REPORTING_CONTROLLER = "polsched.io/operator"
MAX_IN_FLIGHT = 8
# Remembered (policy -> last note) entries; a deleted policy's goes with forget().
ACTION = "Reconcile"


class PolicyEvents:
    """Posts Warning events about policies; `enabled` only while this process leads."""

    def __init__(self, client: ApiClient, instance: str | None = None) -> None:
        self.client = client
        self.instance = instance or f"{REPORTING_CONTROLLER}-{socket.gethostname()}"
        self.enabled = False
        self._last: dict[str, tuple[str, str]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()

    def warn(self, name: str, uid: str, reason: str, note: str) -> None:
        """Post a Warning about policy `name` unless the same one was the last posted."""
        if not self.enabled:
            return
        key = (reason, note)
        if self._last.get(name) == key:
            return
        if len(self._tasks) >= MAX_IN_FLIGHT:
            log.debug("SchedulingPolicy %s: event %s dropped (%d in flight)", name, reason,
                      len(self._tasks))
            return
        self._last[name] = key
        task = asyncio.get_running_loop().create_task(self._post(name, uid, reason, note))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def resolved(self, name: str) -> None:
        """The fault is gone: the next one is posted even if it repeats the last."""
        self._last.pop(name, None)

    forget = resolved

    async def _post(self, name: str, uid: str, reason: str, note: str) -> None:
        now = time.time()
        body = {
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": f"{name}.{uuid.uuid4().hex[:16]}",
                         "namespace": EVENTS_NAMESPACE},
            "eventTime": micro_time(now),
            "reportingController": REPORTING_CONTROLLER,
            "reportingInstance": self.instance[:128],
            "action": ACTION, "reason": reason, "type": WARNING,
            "regarding": {"apiVersion": API_VERSION, "kind": KIND, "name": name, "uid": uid},
            "note": truncate_message(note),
        }
        try:
            await self.client.post(f"/apis/events.k8s.io/v1/namespaces/{EVENTS_NAMESPACE}/events",
                                   body)
        except (TimeoutError, ApiError, OSError) as e:
            log.info("SchedulingPolicy %s: posting event %s failed: %s", name, reason, e)
        except Exception as e:  # noqa: BLE001 - an event is best effort, never fatal
            log.info("SchedulingPolicy %s: posting event %s failed: %r", name, reason, e)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            try:
                await task
            except BaseException:  # noqa: BLE001, S110 - cancelled on shutdown
                pass
