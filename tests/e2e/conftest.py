"""Fixtures of the e2e suite beyond tests/conftest.py: the one gated control plane
(`make cluster FEATURE_GATES=GenericWorkload=true`) that test_feature_gates.py and the
gang tests share, started on first use and stopped at the end of the session; the
operator harness each test module shares (`harness`, reset after every test); a free
loopback port (`free_port`)."""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from polsched.cluster import featuregates
from tests.conftest import HACK, Cluster
from tests.e2e import operators
from tests.e2e.operators import Harness

GATES = "GenericWorkload=true"


@pytest.fixture(scope="session")
def gated(cluster: Cluster) -> Iterator[tuple[Cluster, Path]]:
    """A second control plane started as `make cluster FEATURE_GATES=GenericWorkload=true`
    starts it (cluster.sh with POLSCHED_FEATURE_GATES)."""
    with tempfile.TemporaryDirectory(prefix="polsched-e2e-gates-") as d:
        env = {**os.environ, featuregates.ENV: GATES, "POLSCHED_NO_KWOK": "1"}
        up = subprocess.run([str(HACK / "cluster.sh"), "up", d], env=env,
                            capture_output=True, text=True)
        try:
            if up.returncode != 0:
                raise RuntimeError(f"the gated control plane did not start:\n{up.stderr}")
            yield Cluster(str(Path(d) / "kubeconfig"), cluster.bin_dir), Path(d)
        finally:
            subprocess.run([str(HACK / "cluster.sh"), "down", d], capture_output=True)


@pytest.fixture(scope="module")
def harness_module(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory,
                   request: pytest.FixtureRequest) -> Harness:
    """One operator harness per test module, its files under a directory named after it."""
    name = request.module.__name__.rsplit(".", 1)[-1].removeprefix("test_")
    return Harness(cluster, Path(tmp_path_factory.mktemp(f"polsched-{name}")))


@pytest.fixture
def harness(harness_module: Harness) -> Iterator[Harness]:
    """The module's harness; what a test started (operators, policies) goes after it."""
    yield harness_module
    harness_module.reset()


@pytest.fixture(name="free_port")
def free_port_fixture() -> int:
    return operators.free_port()
