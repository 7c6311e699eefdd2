"""Reserve, Permit, WaitOnPermit, PreBind and PostBind, as framework/runtime/framework.go
runs them, on plugins that a policy names and the production builder builds (a test
Registry holds them)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, ClassVar

import pytest

from polsched.api import load_policy
from polsched.framework.cycle_state import CycleState
from polsched.framework.interfaces import (
    FilterPlugin,
    Handle,
    PermitPlugin,
    PostBindPlugin,
    PreBindPlugin,
    ReservePlugin,
    ScorePlugin,
)
from polsched.framework.registry import Catalog, PluginSpec, Registry
from polsched.framework.status import SUCCESS, Code, Status
from polsched.framework.types import NodeInfo, PodInfo
from polsched.scheduler import binding_cycle as bc
from polsched.scheduler.pipelines import build_pipeline

pytestmark = pytest.mark.unit


class Steps(FilterPlugin, ReservePlugin, PermitPlugin, PreBindPlugin, PostBindPlugin):
    """Records every call in `log`; its args say what each point answers
    ("ok", "reject", "error", "wait")."""

    log: ClassVar[list[str]] = []

    def __init__(self, name: str, args: Mapping[str, Any]) -> None:
        self.NAME = name  # type: ignore[misc]
        self.args = args

    def _answer(self, point: str) -> Status:
        self.log.append(f"{point}:{self.name}")
        what = self.args.get(point, "ok")
        if what == "reject":
            return Status.unschedulable(f"{self.name} says no at {point}")
        if what == "error":
            return Status.error("boom")
        if what == "wait":
            return Status(Code.WAIT)
        return SUCCESS

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        return SUCCESS

    def reserve(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        return self._answer("reserve")

    def unreserve(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        self.log.append(f"unreserve:{self.name}")

    def permit(self, state: CycleState, pod: PodInfo, node_name: str) -> tuple[Status, float]:
        return self._answer("permit"), float(self.args.get("timeout", 60))

    async def pre_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        return self._answer("preBind")

    def post_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        self._answer("postBind")


class Score(ScorePlugin):
    NAME = "Score"

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        return 0


def _spec(name: str) -> PluginSpec:
    def new(args: Mapping[str, Any], handle: Handle) -> FilterPlugin:
        return Steps(name, args)
    return PluginSpec(name, filter=new)


REGISTRY = Registry([_spec("First"), _spec("Second"),
                     PluginSpec("Score", score=lambda args, handle: Score())])


def pipeline(first: Mapping[str, Any] | None = None, second: Mapping[str, Any] | None = None,
             **when: Any) -> Any:
    spec = {"filters": [{"name": "First", "args": dict(first or {})},
                        {"name": "Second", "args": dict(second or {}), **when}],
            "scorers": [{"name": "Score"}]}
    policy = load_policy({"apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
                          "metadata": {"name": "p"}, "spec": spec},
                         Catalog(REGISTRY))
    return build_pipeline(policy)


def pod(labels: Mapping[str, str] | None = None) -> PodInfo:
    return PodInfo.from_json({"metadata": {"name": "p", "namespace": "ns", "uid": "u",
                                           "labels": dict(labels or {})},
                              "spec": {"containers": [{"name": "c"}]}})


@pytest.fixture(autouse=True)
def _clear_log() -> None:
    Steps.log.clear()


def plugins_for(p: PodInfo, **kw: Any) -> bc.BindingPlugins:
    return bc.binding_plugins(pipeline(**kw).binding_plugins_for(p))


def test_the_pipeline_exposes_its_binding_cycle_plugins_in_order() -> None:
    pl = pipeline()
    assert [p.name for p in pl.reserve_plugins] == ["First", "Second"]
    assert [p.name for p in pl.permit_plugins] == ["First", "Second"]
    assert [p.name for p in pl.pre_bind_plugins] == ["First", "Second"]
    assert [p.name for p in pl.post_bind_plugins] == ["First", "Second"]
    assert bc.binding_plugins(pl.binding_plugins_for(pod())).reserve == pl.reserve_plugins


def test_an_entry_whose_when_excludes_the_pod_takes_no_part() -> None:
    when = {"when": {"podSelector": {"matchLabels": {"team": "a"}}}}
    assert [p.name for p in plugins_for(pod(), **when).reserve] == ["First"]
    assert [p.name for p in plugins_for(pod({"team": "a"}), **when).reserve] == \
        ["First", "Second"]


def test_reserve_stops_at_the_first_failure_and_unreserve_runs_all_in_reverse() -> None:
    bp = plugins_for(pod(), first={"reserve": "reject"})
    st = bc.run_reserve(bp, CycleState(), pod(), "n1")
    assert st.code is Code.UNSCHEDULABLE and st.plugin == "First"
    assert st.message == "First says no at reserve"
    bc.run_unreserve(bp, CycleState(), pod(), "n1")
    assert Steps.log == ["reserve:First", "unreserve:Second", "unreserve:First"]


def test_a_reserve_error_names_the_plugin_as_upstream() -> None:
    bp = plugins_for(pod(), second={"reserve": "error"})
    st = bc.run_reserve(bp, CycleState(), pod(), "n1")
    assert st.code is Code.ERROR
    assert st.message == 'running Reserve plugin "Second": boom'


def test_permit_reject_wins_over_wait() -> None:
    bp = plugins_for(pod(), first={"permit": "wait"}, second={"permit": "reject"})
    st, waits = bc.run_permit(bp, CycleState(), pod(), "n1")
    assert st.code is Code.UNSCHEDULABLE and st.plugin == "Second" and waits == {}


def test_permit_wait_then_allowed_by_every_waiting_plugin() -> None:
    async def main() -> None:
        bp = plugins_for(pod(), first={"permit": "wait"}, second={"permit": "wait",
                                                                  "timeout": 3600})
        st, waits = bc.run_permit(bp, CycleState(), pod(), "n1")
        assert st.code is Code.WAIT
        assert st.message == "one or more plugins asked to wait and no plugin rejected pod"
        assert waits == {"First": 60.0, "Second": 900.0}  # at most maxTimeout (15 min)
        waiting = bc.WaitingPod(pod(), waits)
        task = asyncio.create_task(waiting.wait())
        waiting.allow("First")
        await asyncio.sleep(0)
        assert not task.done() and waiting.pending_plugins == ["Second"]
        waiting.allow("Second")
        assert (await task).ok

    asyncio.run(main())


def test_permit_wait_times_out_as_a_rejection() -> None:
    async def main() -> None:
        waiting = bc.WaitingPod(pod(), {"First": 0.05})
        st = await asyncio.wait_for(waiting.wait(), 5)
        assert st.code is Code.UNSCHEDULABLE and st.plugin == "First"
        assert st.message == "rejected due to timeout after waiting 50ms at plugin First"
        assert not waiting.reject("First", "too late")  # decided once

    asyncio.run(main())


def test_pre_bind_stops_at_the_first_failure() -> None:
    bp = plugins_for(pod(), first={"preBind": "error"})
    st = asyncio.run(bc.run_pre_bind(bp, CycleState(), pod(), "n1"))
    assert st.message == 'running PreBind plugin "First": boom'
    assert Steps.log == ["preBind:First"]
    bp = plugins_for(pod())
    assert asyncio.run(bc.run_pre_bind(bp, CycleState(), pod(), "n1")).ok
    bc.run_post_bind(bp, CycleState(), pod(), "n1")
    assert Steps.log[-2:] == ["postBind:First", "postBind:Second"]


@pytest.mark.parametrize(("seconds", "text"), [(0.05, "50ms"), (1, "1s"), (90, "1m30s"),
                                               (900, "15m0s"), (3600, "1h0m0s")])
def test_go_duration(seconds: float, text: str) -> None:
    assert bc.go_duration(seconds) == text
