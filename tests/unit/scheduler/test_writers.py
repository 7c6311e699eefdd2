"""polsched.scheduler.writers: the rule by which the binder's lanes and the event recorder
start one more writer task."""

from __future__ import annotations

import asyncio

import pytest

from polsched.scheduler.writers import wants_writer

pytestmark = pytest.mark.unit


def test_grows_only_when_queued_work_outnumbers_idle_writers_below_the_limit() -> None:
    assert wants_writer(queued=1, idle=0, workers=0, limit=4, slots=None)
    assert not wants_writer(queued=1, idle=1, workers=1, limit=4, slots=None)
    assert wants_writer(queued=2, idle=1, workers=1, limit=4, slots=None)
    assert not wants_writer(queued=9, idle=0, workers=4, limit=4, slots=None)
    assert not wants_writer(queued=0, idle=0, workers=0, limit=4, slots=None)


def test_no_more_writers_while_every_shared_slot_is_taken_unless_there_is_none() -> None:
    async def check() -> None:
        slots = asyncio.Semaphore(1)
        assert wants_writer(queued=3, idle=0, workers=1, limit=4, slots=slots)
        async with slots:  # every slot taken: a pool with a writer waits for it
            assert not wants_writer(queued=3, idle=0, workers=1, limit=4, slots=slots)
            # A pool with no writer still gets its first one.
            assert wants_writer(queued=3, idle=0, workers=0, limit=4, slots=slots)
        assert wants_writer(queued=3, idle=0, workers=1, limit=4, slots=slots)

    asyncio.run(check())
