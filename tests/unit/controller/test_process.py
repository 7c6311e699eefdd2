"""controller.process.server: the one composition root of the operator and of a Dedicated
scheduler wires the real parts through their constructors (nothing is started here: no
API call is made)."""

from __future__ import annotations

import asyncio

import pytest

from polsched.api import load_policy
from polsched.cluster.cache import ClusterCache
from polsched.cluster.client import ApiClient
from polsched.controller.policies.reconciler import DedicatedScope, PolicyReconciler
from polsched.controller.process.leases import LeaseThread, LeaseTiming
from polsched.controller.process.server import Election, Process, ProcessConfig
from polsched.plugins import CATALOG

pytestmark = pytest.mark.unit

POLICY = {"apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
          "metadata": {"name": "p", "generation": 1}, "spec": {"schedulerName": "s"}}


def build(elect: bool) -> Process:
    client = ApiClient("https://127.0.0.1:9")  # never called: nothing is started
    election = Election("ns", "lease", LeaseTiming(15, 2.0), lambda: client) \
        if elect else None
    return Process(client, ClusterCache(client), ProcessConfig("me", election, 1.0),
                   lambda engine, writer: PolicyReconciler(
                       client, engine, writer, dedicated=DedicatedScope("p")))


def test_an_elected_process_binds_and_writes_only_within_its_lease() -> None:
    async def main() -> None:
        process = build(elect=True)
        assert isinstance(process.elector, LeaseThread)  # renewed off the event loop
        # Binds and status writes end by the lease's renew deadline.
        assert process.engine.binder.deadline == process.elector.valid_until
        assert process.writer.deadline == process.elector.valid_until
        assert process.reconciler.engine is process.engine
        assert process.reconciler.writer is process.writer
        process.engine.apply(load_policy(POLICY, CATALOG))
        assert not process.engine.stats("s").leading  # not before the lease says so
        await process.engine.stop()

    asyncio.run(main())


def test_a_process_without_election_leads_from_the_start() -> None:
    async def main() -> None:
        process = build(elect=False)
        assert process.elector is None
        assert process.engine.binder.deadline is None and process.writer.deadline is None
        process.engine.apply(load_policy(POLICY, CATALOG))
        assert process.engine.stats("s").leading
        await process.engine.stop()

    asyncio.run(main())


def test_a_listing_of_policies_lets_the_loop_turn_between_loads() -> None:
    """observe_all loads the policies of a listing one at a time and yields between
    them: a listing of large policies (~1 s each) does not hold the loop for its sum."""
    async def main() -> int:
        process = build(elect=False)
        process.reconciler.only = None
        bodies = [{**POLICY, "metadata": {"name": f"p{i}", "uid": f"u{i}", "generation": 1},
                   "spec": {"schedulerName": f"s{i}"}} for i in range(2)]
        listing = asyncio.get_running_loop().create_task(
            process.reconciler.observe_all(bodies))
        await asyncio.sleep(0)  # one turn: observe_all's first step has run
        loaded_at_first_turn = len(process.reconciler.book.records())
        await listing
        assert len(process.reconciler.book.records()) == 2
        await process.engine.stop()
        return loaded_at_first_turn

    assert asyncio.run(main()) == 1
