"""SchedulingPolicies as they change: a plain list-then-watch (an informer without a
store) that hands every object to PolicyReconciler.observe, and every deletion to
forget, the moment the event arrives.

Both the operator (every policy) and a Dedicated scheduler (`name`: its one policy) use
it. Hot reload rides on it, so nothing else may sit in front of it: kopf, which the
operator used to watch policies with, handles one object's events one after the other,
and after a spec change ran its change handlers and PATCHed its progress and diff-base
annotations before it looked at the next event. Under load each such round trip took up
to a second, and the next generation's swap waited behind them (bench/NOTES.md "Hot
reload under load"). The reconciler is idempotent and loads a spec only when its
generation is new, so a re-list after an expired watch (410) is safe. A failure waits
the reflector's jittered backoff, or the answer's Retry-After when longer
(cluster.backoff).
"""

from __future__ import annotations

import asyncio
import logging

from polsched.api import GROUP, PLURAL, VERSION
from polsched.cluster.backoff import Backoff, retry_delay
from polsched.cluster.client import ApiClient, ApiError, is_unreachable
from polsched.controller.policies.reconciler import PolicyReconciler

log = logging.getLogger(__name__)

COLLECTION = f"/apis/{GROUP}/{VERSION}/{PLURAL}"


async def watch_policies(client: ApiClient, reconciler: PolicyReconciler, *,
                         name: str | None = None, first: asyncio.Event | None = None,
                         backoff: Backoff | None = None) -> None:
    """Run until cancelled. `name`: watch that one policy only. `first` is set once the
    first listing has been observed."""
    backoff = backoff or Backoff()
    selector = f"metadata.name={name}" if name is not None else None
    what = f"SchedulingPolicy {name}" if name is not None else "SchedulingPolicies"
    while True:
        try:
            listed = await client.list_all(COLLECTION, field_selector=selector)
            items = listed.get("items") or []
            present = {str(obj["metadata"]["name"]) for obj in items}
            await reconciler.observe_all(items)
            # Deleted while the watch was down: their schedulers stop.
            for gone in reconciler.known() - present:
                await reconciler.forget(gone)
            if name is not None and not items:
                log.warning("SchedulingPolicy %s does not exist (yet); waiting for it", name)
                await reconciler.forget(name)
            if first is not None:
                first.set()
            rv = (listed.get("metadata") or {}).get("resourceVersion")
            while True:
                async for kind, obj in client.watch(COLLECTION, resource_version=rv,
                                                    field_selector=selector):
                    rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
                    if kind in ("ADDED", "MODIFIED"):
                        await reconciler.observe(obj)
                    elif kind == "DELETED":
                        await reconciler.forget(str(obj["metadata"]["name"]))
        except asyncio.CancelledError:
            raise
        except ApiError as e:
            if e.status != 410:
                log.warning("watching %s: %s", what, e)
                await asyncio.sleep(retry_delay(backoff, e.retry_after))
        except Exception as e:
            if is_unreachable(e):  # an outage: ApiClient.outage says so once
                client.outage.failed(e)
                log.debug("watching %s: %r", what, e)
            else:
                log.warning("watching %s: %s", what, e)
            await asyncio.sleep(retry_delay(backoff, None))
