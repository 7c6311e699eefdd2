"""The fuzzer's short run (issue 36): the saved corpus, a minimised case per finding, then
200 generated cases with a fixed seed, each in a worker subprocess under the watchdog,
through production code (tests.fuzz.worker). No invariant may break outside the corpus's
known (xfail) cases, and a known case that now passes must lose its xfail."""

from __future__ import annotations

import pytest

from tests.fuzz import campaign, generators

pytestmark = pytest.mark.unit

SEED = 36
CASES = 200
# Sizes of the short run: every kind of input, none of the huge ones (the corpus has those).
LIMIT = 300


def test_the_corpus_and_200_generated_cases_keep_every_invariant() -> None:
    report = campaign.run(CASES, SEED, timeout=20.0, limit=LIMIT)
    assert len(report.outcomes) == CASES + len(list(campaign.corpus_cases()))
    assert not report.failures(), report.summary()
    assert not report.xpassed(), "known cases now pass: drop their xfail\n" + report.summary()


def test_a_case_replays_exactly_from_its_seed_and_index() -> None:
    assert generators.generate(SEED, 7, LIMIT) == generators.generate(SEED, 7, LIMIT)
    assert generators.generate(SEED, 7, LIMIT) != generators.generate(SEED + 1, 7, LIMIT)
