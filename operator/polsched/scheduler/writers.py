"""When a pool of writer tasks (the binder's lanes, the event recorder) takes one more.

Both start with no writer and add one each time work is queued that no idle writer has
taken, up to their limit: a quiet pool keeps one or a few, a backlog gets them all. Both
share a semaphore of request slots with other pools (the binder's `_posts`, the recorder's
`shared`); while every slot is taken, a pool that already has a writer does not add
another, which would only wait for a slot (50 policies once started 96 writers each
behind the same 96 slots). A writer that gets a slot asks again then.
"""

from __future__ import annotations

import asyncio


def wants_writer(queued: int, idle: int, workers: int, limit: int,
                 slots: asyncio.Semaphore | None) -> bool:
    """True when the pool should start one more writer: more queued than idle writers,
    fewer writers than `limit`, and either none yet or a free slot (None: no shared
    slots)."""
    return queued > idle and workers < limit and (
        not workers or slots is None or not slots.locked())
