"""The binding step with a bind extender (schedule_one.go extendersBinding): an ignorable
binder extender that fails is skipped and the default binder binds (issue 10, defect 7);
a non-ignorable one that fails fails the bind, and the pod is retried."""

from __future__ import annotations

from typing import Any

import pytest

from polsched.cluster.client import ApiClient
from tests.conftest import Cluster, NodeFactory, unique
from tests.e2e.scheduling import RUN, bound_node, nodes_ready, run_engine
from tests.e2e.test_extenders import (
    StartExtender,
    create,
    event_note,
    node_name,
    policy,
    start_extender,
)
from tests.unit.extender.fake_extender import Answer

pytestmark = pytest.mark.e2e
__all__ = ["start_extender"]  # the fixture, used by name

Json = dict[str, Any]


def test_an_ignorable_bind_extender_that_fails_falls_back_to_the_default_binder(
        cluster: Cluster, namespace: str, nodes: NodeFactory,
        start_extender: StartExtender) -> None:
    rid = unique("bfb")
    names = [nodes(f"{rid}-{i}", labels={RUN: rid}) for i in range(2)]
    ext = start_extender({"/bind": lambda _body: Answer(500, b"binder is down")})
    broken = start_extender({"/bind": lambda _body: {"Error": "no capacity to bind"}})
    ignorable, strict = f"{rid}-ign", f"{rid}-strict"
    policies = [
        policy(ignorable, {"urlPrefix": ext.url, "bindVerb": "bind", "ignorable": True}),
        policy(strict, {"urlPrefix": broken.url, "bindVerb": "bind"}),
    ]

    async def body(client: ApiClient) -> None:
        await nodes_ready(client, names)
        await create(client, namespace, "fallback", ignorable, rid)
        await create(client, namespace, "stuck", strict, rid)
        assert await bound_node(client, namespace, "fallback") in names
        assert [b["PodName"] for b in ext.bodies("/bind")] == ["fallback"]
        # Not ignorable: the bind fails, the pod stays Pending, and says why.
        note = await event_note(client, namespace, "stuck", "FailedScheduling")
        assert "no capacity to bind" in note, note
        assert not await node_name(client, namespace, "stuck")

    run_engine(cluster, policies, body)
