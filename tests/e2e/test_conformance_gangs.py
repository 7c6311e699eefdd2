"""The conformance suite's gang family is deterministic: played with kube-scheduler on
both sides (`--oracle-vs-oracle`, on a pair of control planes with GenericWorkload on),
every step of every scenario reads the same on both. A difference here is the family's
own nondeterminism (a burst of members racing inside kube-scheduler, a step snapshotted
before a backoff retry), which would make the polsched-vs-oracle figures meaningless.

The first GANG_COUNT shapes of the family (docs/gangs.md, "Checking it"); `make
conformance` plays all of them against polsched."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from conformance import compare, runner
from conformance import scenarios as scn

pytestmark = pytest.mark.e2e

SEED = 3
GANG_COUNT = 6


def test_gang_family_reads_the_same_on_two_kube_schedulers(tmp_path: Path) -> None:
    scenarios = scn.generate_all(SEED, GANG_COUNT, ["gang"])
    results = asyncio.run(runner.run_sides(scenarios, tmp_path / "planes",
                                           oracle_vs_oracle=True))
    c = compare.compare(scenarios, results["kube"], results["polsched"])
    detail = json.dumps({"errors": c.errors, "differences": c.differences[:10]}, indent=1)
    assert not c.errors and not c.differences, f"\n{compare.table(c)}\n{detail}"
    # The scenarios did schedule gangs: some member was bound, some PodGroup reached
    # PodGroupInitiallyScheduled=True and some was refused as a whole.
    records = [p for r in results["kube"] for p in r.pods]
    assert any(p.outcome == "bound" for p in records)
    assert any("PodGroupInitiallyScheduled=True" in p.message for p in records)
    assert any("PodGroupInitiallyScheduled=False Unschedulable" in p.message for p in records)
