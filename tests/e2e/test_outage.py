"""An API server outage, as the operator sees it (issue 11, defect 5): the operator
reaches the real API server through a proxy that goes down (connections closed, new ones
refused) and comes back. The log says one line when the outage starts and one when it
ends, with no traceback, and binding resumes: pods created during the outage are bound
after it, each once, and the status counts them."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Cluster, NodeFactory, unique
from tests.e2e.operators import Harness, wait_for, zone_policy
from tests.e2e.proxy import StallingProxy
from tests.e2e.rbac import OPERATOR_NAMESPACE

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def harness(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    h = Harness(cluster, Path(tmp_path_factory.mktemp("polsched-outage")))
    yield h
    h.reset()


def test_an_outage_is_two_lines_and_binding_resumes(harness: Harness, namespace: str,
                                                    nodes: NodeFactory) -> None:
    h = harness
    rid = unique("outage")
    for i in range(2):
        nodes(f"{rid}-a{i}", labels={"zone": "a"})
    proxy = StallingProxy.for_kubeconfig(h.cluster.kubeconfig).start()
    try:
        via = h.workdir / f"{rid}.kubeconfig"
        sa = json.loads(h.operator_kubeconfig.read_text())
        sa["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{proxy.port}"
        via.write_text(json.dumps(sa))
        op = h.process(via, "run", "--identity", f"{rid}-op", "--namespace",
                       OPERATOR_NAMESPACE, "--metrics-listen", "")
        name = h.apply_policy(zone_policy(rid, "a"))
        h.wait_ready(name, 20)
        h.create_pods(namespace, [f"p{i}" for i in range(10)], rid)
        wait_for(lambda: len(h.bound(namespace)) == 10, 20, "10 pods bound")

        proxy.down()
        # Long enough for retries to back off several times (and, before the fix, for the
        # watch's retry delay to grow to 16 s), shorter than the lease (15 s).
        h.create_pods(namespace, [f"q{i}" for i in range(10)], rid)
        time.sleep(10)
        proxy.up()
        t_up = time.monotonic()
        wait_for(lambda: len(h.bound(namespace)) == 20, 60, "binding resumes")
        print(f"the 10 pods created during the outage bound "
              f"{time.monotonic() - t_up:.1f}s after it ended")
        wait_for(lambda: (s := h.status(name)).get("boundPods") == 20
                 and s.get("bindsTotal") == 20, 20, "status counts all 20 binds")
        assert all(n == 1 for n in h.scheduled_events(namespace).values())
        assert op.alive()
        op.stop()  # through the proxy: it releases its lease
    finally:
        op.stop()
        proxy.stop()
    log = op.log()
    print(log[-4000:])
    assert "Traceback" not in log
    starts = [line for line in log.splitlines() if "unreachable (" in line]
    ends = [line for line in log.splitlines() if "answers again after" in line]
    assert len(starts) == 1, starts
    assert len(ends) == 1, ends
    # Nothing else about the outage: no line per failed write or watch.
    noisy = [line for line in log.splitlines()
             if "WARNING" in line or "ERROR" in line]
    assert noisy == starts + ends, noisy
