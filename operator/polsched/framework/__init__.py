"""The scheduling framework: Status, NodeInfo/PodInfo/Snapshot, CycleState, the
extension points' protocols (interfaces), the registry, the runtime that runs a policy's
plugins at every point (runtime.Pipeline) and the diagnosis types. Purely computational:
nothing in this package performs I/O except awaiting extenders through the Extender
protocol and PreBind plugins writing through Handle.api."""

from polsched.framework.cycle_state import CycleState
from polsched.framework.diagnosis import Explanation, FitError, PipelineError, ScheduleResult
from polsched.framework.interfaces import (
    MAX_NODE_SCORE,
    MIN_NODE_SCORE,
    ExtenderError,
    FilterPlugin,
    Handle,
    Plugin,
    PreFilterPlugin,
    PreScorePlugin,
    ScoreExtensions,
    ScorePlugin,
    default_normalize,
)
from polsched.framework.registry import ArgsError, PluginSpec, Registry
from polsched.framework.runtime import FilterEntry, Pipeline, ScoreEntry
from polsched.framework.status import SKIP, SUCCESS, Code, Status
from polsched.framework.types import NodeInfo, PodInfo, Snapshot

__all__ = [
    "MAX_NODE_SCORE", "MIN_NODE_SCORE", "SKIP", "SUCCESS", "ArgsError", "Code", "CycleState",
    "Explanation", "ExtenderError", "FilterEntry", "FilterPlugin", "FitError", "Handle",
    "NodeInfo", "Pipeline", "PipelineError", "Plugin", "PluginSpec", "PodInfo",
    "PreFilterPlugin", "PreScorePlugin", "Registry", "ScheduleResult", "ScoreEntry",
    "ScoreExtensions", "ScorePlugin", "Snapshot", "Status", "default_normalize",
]
