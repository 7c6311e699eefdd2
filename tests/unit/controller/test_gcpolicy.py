"""The garbage collector's policy of the long-running commands (controller/process/gcpolicy.py):
the thresholds, $POLSCHED_GC_THRESHOLDS, the pauses on /metrics, no collection during
the start-up, and the freeze."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from polsched.controller.process import gcpolicy
from polsched.scheduler import metrics

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def restore() -> Iterator[None]:
    before = gc.get_threshold()
    metrics.reset()
    yield
    gc.set_threshold(*before)
    gc.enable()
    if gcpolicy._on_gc in gc.callbacks:
        gc.callbacks.remove(gcpolicy._on_gc)
    gc.unfreeze()
    metrics.reset()


def test_thresholds_default_and_override() -> None:
    assert gcpolicy.thresholds({}) == gcpolicy.THRESHOLDS
    # Full passes ten times less often than CPython's default; the young ones unchanged.
    assert gcpolicy.THRESHOLDS == (700, 10, 100)
    assert gcpolicy.thresholds({gcpolicy.ENV: " 50000,20,100 "}) == (50000, 20, 100)


@pytest.mark.parametrize("raw", ["700,10", "a,b,c", "700,10,-1", "1,2,3,4"])
def test_a_bad_override_names_the_variable(raw: str) -> None:
    with pytest.raises(SystemExit, match=r"POLSCHED_GC_THRESHOLDS.*three non-negative"):
        gcpolicy.thresholds({gcpolicy.ENV: raw})


def test_apply_sets_the_thresholds_and_exports_each_pause() -> None:
    gcpolicy.apply({})
    assert gc.get_threshold() == gcpolicy.THRESHOLDS
    assert not gc.isenabled()  # no pass over the start-up's allocations
    gcpolicy.apply({})  # once more: one callback, not two
    assert gc.callbacks.count(gcpolicy._on_gc) == 1
    gc.collect(2)
    gc.collect(0)
    text = metrics.exposition()
    assert 'polsched_gc_threshold{generation="2"} 100' in text
    assert 'polsched_gc_pause_seconds_count{generation="2"} 1' in text
    assert 'polsched_gc_pause_seconds_count{generation="0"} 1' in text


def test_freeze_takes_what_exists_and_collects_what_is_made_later() -> None:
    class Node:
        def __init__(self) -> None:
            self.me = self

    gcpolicy.apply({})
    before = Node()
    assert not gc.isenabled()
    gcpolicy.freeze()
    assert gc.isenabled()  # collections start once the start-up's objects are frozen
    frozen = gc.get_freeze_count()
    assert frozen > 0
    assert f"polsched_gc_frozen_objects {frozen}" in metrics.exposition()
    after = Node()
    walked = {id(o) for o in gc.get_objects()}
    assert id(before) not in walked  # out of every pass
    assert id(after) in walked
    # A cycle made after the freeze is garbage to the next pass.
    del after
    assert gc.collect() >= 1


def test_resume_collects_again_when_the_start_up_is_slow() -> None:
    gcpolicy.apply({})
    assert not gc.isenabled()
    gcpolicy.resume()  # controller.process.boot: STARTUP_PAUSE_SECONDS later, synced or not
    assert gc.isenabled()
    assert gcpolicy.STARTUP_PAUSE_SECONDS <= 10
