"""framework.runtime: the plugin lists of each extension point, computed once on the built
pipeline, and Reserve, Permit, WaitOnPermit, PreBind and PostBind as
framework/runtime/framework.go runs them, on plugins that a policy names and the
production builder builds (a test Registry holds them)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, ClassVar

import pytest

from polsched.api import load_policy
from polsched.framework.cycle_state import CycleState
from polsched.framework.diagnosis import FitError, PostFilterResult
from polsched.framework.interfaces import (
    ExtensionPoint,
    FilterPlugin,
    FrameworkHandle,
    Handle,
    PermitPlugin,
    PostBindPlugin,
    PostFilterPlugin,
    PreBindPlugin,
    ReservePlugin,
    ScorePlugin,
)
from polsched.framework.registry import Catalog, PluginSpec, Registry
from polsched.framework.runtime import Pipeline, PluginSet
from polsched.framework.status import SUCCESS, Code, Status
from polsched.framework.types import NodeInfo, PodInfo, Snapshot
from polsched.framework.waiting_pods import WaitingPod, go_duration
from polsched.scheduler.algorithm import schedule_pod
from polsched.scheduler.pipelines import build_pipeline
from tests.builders import make_node, make_pod

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

    def pre_bind_pre_flight(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        what = self.args.get("preFlight", "skip")
        self.log.append(f"preFlight:{self.name}")
        if what == "skip":
            return Status(Code.SKIP)
        return self._answer("preFlight")

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
             **when: Any) -> Pipeline:
    spec = {"filters": [{"name": "First", "args": dict(first or {})},
                        {"name": "Second", "args": dict(second or {}), **when}],
            "scorers": [{"name": "Score"}]}
    policy = load_policy({"apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
                          "metadata": {"name": "p"}, "spec": spec},
                         Catalog(REGISTRY))
    return build_pipeline(policy)


def pod(labels: Mapping[str, str] | None = None) -> PodInfo:
    return (make_pod().name("p").namespace("ns").uid("u").labels(labels or {}).container()
            .info())


@pytest.fixture(autouse=True)
def _clear_log() -> None:
    Steps.log.clear()


def plugins_for(p: PodInfo, **kw: Any) -> tuple[Pipeline, PluginSet]:
    pl = pipeline(**kw)
    return pl, pl.plugins_for(p)


def test_the_pipeline_exposes_each_points_plugins_in_order() -> None:
    pl = pipeline()
    for point in (ExtensionPoint.RESERVE, ExtensionPoint.PERMIT, ExtensionPoint.PRE_BIND,
                  ExtensionPoint.POST_BIND):
        assert [p.name for p in pl.plugins.at(point)] == ["First", "Second"]
    assert [e.name for e in pl.plugins.at(ExtensionPoint.FILTER)] == ["First", "Second"]
    assert [e.name for e in pl.plugins.at(ExtensionPoint.SCORE)] == ["Score"]
    assert pl.plugins.at(ExtensionPoint.PRE_FILTER) == ()
    # Without `when`, every pod gets the one set computed when the pipeline was built.
    assert pl.plugins_for(pod()) is pl.plugins
    assert pl.plugins_for(pod({"x": "y"})) is pl.plugins


def test_a_pod_s_plugin_set_is_computed_once_per_combination_of_entries() -> None:
    pl = pipeline(when={"podSelector": {"matchLabels": {"team": "a"}}})
    a1, a2 = pl.plugins_for(pod({"team": "a"})), pl.plugins_for(pod({"team": "a", "x": "1"}))
    other = pl.plugins_for(pod({"team": "b"}))
    assert a1 is a2 and a1 is not other
    assert [p.name for p in a1.reserve] == ["First", "Second"]
    assert [p.name for p in other.reserve] == ["First"]


def test_an_entry_whose_when_excludes_the_pod_takes_no_part() -> None:
    when = {"when": {"podSelector": {"matchLabels": {"team": "a"}}}}
    assert [p.name for p in plugins_for(pod(), **when)[1].reserve] == ["First"]
    assert [p.name for p in plugins_for(pod({"team": "a"}), **when)[1].reserve] == \
        ["First", "Second"]


def test_reserve_stops_at_the_first_failure_and_unreserve_runs_all_in_reverse() -> None:
    pl, bp = plugins_for(pod(), first={"reserve": "reject"})
    st = pl.run_reserve_plugins_reserve(CycleState(), pod(), "n1", bp)
    assert st.code is Code.UNSCHEDULABLE and st.plugin == "First"
    assert st.message == "First says no at reserve"
    pl.run_reserve_plugins_unreserve(CycleState(), pod(), "n1", bp)
    assert Steps.log == ["reserve:First", "unreserve:Second", "unreserve:First"]


def test_a_reserve_error_names_the_plugin_as_upstream() -> None:
    pl, bp = plugins_for(pod(), second={"reserve": "error"})
    st = pl.run_reserve_plugins_reserve(CycleState(), pod(), "n1", bp)
    assert st.code is Code.ERROR
    assert st.message == 'running Reserve plugin "Second": boom'


def test_permit_reject_wins_over_wait() -> None:
    pl, bp = plugins_for(pod(), first={"permit": "wait"}, second={"permit": "reject"})
    st, waits = pl.run_permit_plugins(CycleState(), pod(), "n1", bp)
    assert st.code is Code.UNSCHEDULABLE and st.plugin == "Second" and waits == {}


def test_permit_wait_then_allowed_by_every_waiting_plugin() -> None:
    async def main() -> None:
        pl, bp = plugins_for(pod(), first={"permit": "wait"},
                             second={"permit": "wait", "timeout": 3600})
        st, waits = pl.run_permit_plugins(CycleState(), pod(), "n1", bp)
        assert st.code is Code.WAIT
        assert st.message == "one or more plugins asked to wait and no plugin rejected pod"
        assert waits == {"First": 60.0, "Second": 900.0}  # at most maxTimeout (15 min)
        waiting = WaitingPod(pod(), waits)
        task = asyncio.create_task(waiting.wait())
        waiting.allow("First")
        await asyncio.sleep(0)
        assert not task.done() and waiting.pending_plugins == ["Second"]
        waiting.allow("Second")
        assert (await task).ok

    asyncio.run(main())


def test_permit_wait_times_out_as_a_rejection() -> None:
    async def main() -> None:
        waiting = WaitingPod(pod(), {"First": 0.05})
        st = await asyncio.wait_for(waiting.wait(), 5)
        assert st.code is Code.UNSCHEDULABLE and st.plugin == "First"
        assert st.message == "rejected due to timeout after waiting 50ms at plugin First"
        assert not waiting.reject("First", "too late")  # decided once

    asyncio.run(main())


def test_pre_bind_stops_at_the_first_failure() -> None:
    pl, bp = plugins_for(pod(), first={"preBind": "error"})
    st = asyncio.run(pl.run_pre_bind_plugins(CycleState(), pod(), "n1", bp))
    assert st.message == 'running PreBind plugin "First": boom'
    assert Steps.log == ["preBind:First"]
    pl, bp = plugins_for(pod())
    assert asyncio.run(pl.run_pre_bind_plugins(CycleState(), pod(), "n1", bp)).ok
    pl.run_post_bind_plugins(CycleState(), pod(), "n1", bp)
    assert Steps.log[-2:] == ["postBind:First", "postBind:Second"]


@pytest.mark.parametrize(("seconds", "text"), [(0.05, "50ms"), (1, "1s"), (90, "1m30s"),
                                               (900, "15m0s"), (3600, "1h0m0s")])
def test_go_duration(seconds: float, text: str) -> None:
    assert go_duration(seconds) == text


# -- PostFilter (RunPostFilterPlugins) ---------------------------------------------------
class After(FilterPlugin, PostFilterPlugin):
    """A filter that rejects every node and whose PostFilter answers as its args say."""

    def __init__(self, name: str, args: Mapping[str, Any]) -> None:
        self.NAME = name  # type: ignore[misc]
        self.args = args

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        return Status.unschedulable(f"{self.name} rejects")

    async def post_filter(self, handle: FrameworkHandle, state: CycleState, pod: PodInfo,
                          snapshot: Snapshot, diagnosis: FitError
                          ) -> tuple[PostFilterResult | None, Status]:
        Steps.log.append(f"postFilter:{self.name}")
        what = self.args.get("postFilter", "unschedulable")
        nominate = self.args.get("nominate")
        result = PostFilterResult(nominated_node=nominate) if nominate is not None else None
        if what == "success":
            return PostFilterResult(message=f"{self.name} made room",
                                    nominated_node=nominate), SUCCESS
        if what == "error":
            return None, Status.error(f"{self.name} failed")
        if what == "unresolvable":
            return result, Status.unresolvable(f"{self.name} gives up")
        return result, Status.unschedulable(f"{self.name} could not help")


def _after_spec(name: str) -> PluginSpec:
    def new(args: Mapping[str, Any], handle: Handle) -> FilterPlugin:
        return After(name, args)
    return PluginSpec(name, filter=new)


POST_REGISTRY = Registry([_after_spec("A"), _after_spec("B")])


def post_filter(a: Mapping[str, Any], b: Mapping[str, Any]) -> PostFilterResult | None:
    spec = {"filters": [{"name": "A", "args": dict(a)}, {"name": "B", "args": dict(b)}],
            "disabledPlugins": ["DefaultPreemption"]}
    policy = load_policy({"apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
                          "metadata": {"name": "p"}, "spec": spec},
                         Catalog(POST_REGISTRY))
    result = asyncio.run(schedule_pod(build_pipeline(policy), pod(),
                                      Snapshot([make_node().name("n1").info()])))
    assert result.node is None and result.fit_error is not None
    assert result.fit_error.post_filter_msg == (result.post_filter.message
                                                if result.post_filter else "")
    return result.post_filter


def test_post_filter_plugins_run_in_order_until_one_succeeds() -> None:
    got = post_filter({}, {"postFilter": "success", "nominate": "n1"})
    assert Steps.log == ["postFilter:A", "postFilter:B"]
    assert got is not None and got.message == "B made room" and got.nominated_node == "n1"


def test_post_filter_rejections_join_their_reasons_and_keep_a_nomination() -> None:
    got = post_filter({"nominate": ""}, {})
    assert got is not None
    assert got.message == "A could not help, B could not help"
    assert got.nominated_node == ""  # A's result nominates (clears): it is kept


def test_post_filter_error_or_unresolvable_ends_the_phase() -> None:
    got = post_filter({"postFilter": "error"}, {})
    assert Steps.log == ["postFilter:A"]
    assert got is not None and got.message == "A failed" and got.nominated_node is None
    Steps.log.clear()
    got = post_filter({"postFilter": "unresolvable"}, {})
    assert Steps.log == ["postFilter:A"] and got is not None and got.message == "A gives up"


def test_pre_bind_pre_flights_say_whether_any_pre_bind_has_work() -> None:
    """RunPreBindPreFlights: Skip when every plugin skips, Success when one has work, the
    first error wrapped as upstream, an unsupported code an error."""
    pl, bp = plugins_for(pod())
    assert pl.run_pre_bind_pre_flights(CycleState(), pod(), "n1", bp).code is Code.SKIP
    pl, bp = plugins_for(pod(), second={"preFlight": "ok"})
    assert pl.run_pre_bind_pre_flights(CycleState(), pod(), "n1", bp).ok
    pl, bp = plugins_for(pod(), first={"preFlight": "error"}, second={"preFlight": "ok"})
    st = pl.run_pre_bind_pre_flights(CycleState(), pod(), "n1", bp)
    assert st.code is Code.ERROR and st.plugin == "First"
    assert st.message == 'running PreBindPreFlight "First": boom'
    pl, bp = plugins_for(pod(), second={"preFlight": "reject"})
    st = pl.run_pre_bind_pre_flights(CycleState(), pod(), "n1", bp)
    assert st.code is Code.ERROR
    assert st.message == ('PreBindPreFlight Second returned "Unschedulable", which is '
                          "unsupported. It is supposed to return Success, Skip, or Error "
                          "status")
