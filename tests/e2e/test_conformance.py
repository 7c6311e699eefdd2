"""The differential conformance suite's fast subset: kube-scheduler and polsched's default
policy, side by side on two control planes, agree pod by pod.

`make conformance` plays the whole suite (conformance/, every family, 25 scenarios each);
this test plays FAST_COUNT scenarios of the families in FAST_FAMILIES through the same
runner and comparison, and fails with the table and the differing pods.

Every family of the suite is in the fast subset (main has every feature they exercise).
The DRA families (dra, dra-extended, dra-allocated) compare the devices each bound pod's
claims got, too, and for extended resources served by devices the scheduler's claim and
the pod's requestMappings.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from conformance import compare, runner
from conformance import scenarios as scn

pytestmark = pytest.mark.e2e

SEED = 7
FAST_COUNT = 72  # three scenarios of each family
FAST_FAMILIES = ["resources", "init-sidecar", "overhead", "pod-resources", "taints",
                 "node-affinity", "node-selector", "pod-affinity", "spread", "host-ports",
                 "gates", "no-nodes", "unschedulable", "preemption", "default-spread",
                 "dra", "dra-extended", "dra-allocated", "volumes", "mixed", "csi-limits",
                 "extender", "node-features", "resize"]


def test_polsched_decides_as_kube_scheduler_on_the_fast_subset(tmp_path: Path) -> None:
    scenarios = scn.generate_all(SEED, FAST_COUNT, FAST_FAMILIES)
    results = asyncio.run(runner.run_sides(scenarios, tmp_path / "planes"))
    c = compare.compare(scenarios, results["kube"], results["polsched"])
    detail = json.dumps({"errors": c.errors, "differences": c.differences[:10]}, indent=1)
    assert not c.errors and not c.differences, f"\n{compare.table(c)}\n{detail}"
