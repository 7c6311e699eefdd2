"""A watch of one named object (a Secret of the webhook, its configuration): the events
of that object, forever, with the reflector's backoff between failures.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from polsched.cluster.backoff import Backoff, retry_delay
from polsched.cluster.client import ApiClient, ApiError, is_unreachable

log = logging.getLogger(__name__)


async def watch_named(client: ApiClient, collection: str, name: str,
                      on_event: Callable[[str, dict[str, Any]], None]) -> None:
    """Watch the one object `name` of `collection` (fieldSelector metadata.name, which
    RBAC authorizes by resourceNames) forever: `on_event(type, object)` for each ADDED,
    MODIFIED and DELETED; the first event of each watch is the object as it is (a watch
    from no resourceVersion starts with it). Failures wait the reflector's backoff."""
    backoff = Backoff()
    selector = f"metadata.name={name}"
    while True:
        retry_after: float | None = None
        try:
            async for kind, obj in client.watch(collection, field_selector=selector,
                                                allow_watch_bookmarks=False):
                if kind in ("ADDED", "MODIFIED", "DELETED"):
                    on_event(kind, obj)
            continue  # the server ended the watch: watch again (a fresh ADDED first)
        except asyncio.CancelledError:
            raise
        except ApiError as e:
            log.warning("watching %s %s: %s", collection.rsplit("/", 1)[-1], name, e)
            retry_after = e.retry_after
        except Exception as e:
            if is_unreachable(e):
                client.outage.failed(e)
            else:
                log.warning("watching %s %s: %s", collection.rsplit("/", 1)[-1], name, e)
        await asyncio.sleep(retry_delay(backoff, retry_after))

