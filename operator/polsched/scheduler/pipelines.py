"""Building a policy's Pipeline: the one builder for every caller that runs a policy.

The engine runs the pipeline for real, `polsched explain` runs it to show why, the tests
run it to check the plugins: all of them build it here, from a loaded Policy (whose
entries are plugin specs, api.model.PluginEntry) and a typed Handle, so none of them can
run wiring that production lacks (same plugins, order, weights, args, extenders, handle
and PostFilter). Who passes which Handle:

- the engine: Handle(listers=cache.listers, api=client), the live cache's listers;
- explain and other offline callers: Handle(listers=...) with listers they filled from
  the objects they read (Listers.load), or an empty Handle();
- tests: tests/unit/pipelines.py, with listers the test fills.

The policy's ignored_resources (extenders' managedResources with ignoredByScheduler) are
put into the handle here, so no caller can forget them. Pure: no I/O.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, TypeVar

from polsched.framework.interfaces import FilterPlugin, Handle, PreEnqueuePlugin, ScorePlugin
from polsched.framework.pipeline import Extender, FilterEntry, Pipeline, ScoreEntry
from polsched.plugins.default_preemption import DefaultPreemption, DefaultPreemptionArgs

if TYPE_CHECKING:
    from polsched.api.model import PluginEntry, Policy


_P = TypeVar("_P", FilterPlugin, ScorePlugin, PreEnqueuePlugin)


class BuildError(RuntimeError):
    """A loaded policy's plugin could not be built: a polsched bug, since the loader built
    it once already to check its args."""


def build_pipeline(policy: Policy, handle: Handle | None = None,
                   extenders: Sequence[Extender] = (), *,
                   rng: random.Random | None = None) -> Pipeline:
    """The Pipeline that schedules pods for `policy` (a loaded, validated Policy), its
    plugins built with `handle` (an empty Handle when None). DefaultPreemption, the
    PostFilter, reads PodDisruptionBudgets from handle.listers; the filters count the pods
    of handle.nominator (shared by every pipeline of one engine; None offline)."""
    handle = replace(handle or Handle(), ignored_resources=policy.ignored_resources)
    filters = [FilterEntry(_build(e, handle, FilterPlugin), e.when) for e in policy.filters]
    scorers = [ScoreEntry(_build(e, handle, ScorePlugin), e.weight, e.when)
               for e in policy.scorers]
    pre_enqueue = [_build(e, handle, PreEnqueuePlugin) for e in policy.pre_enqueue]
    post_filter = None
    if policy.preemption is not None:  # spec.preemption; disabledPlugins may switch it off
        args = DefaultPreemptionArgs(policy.preemption.min_candidate_nodes_percentage,
                                     policy.preemption.min_candidate_nodes_absolute)
        post_filter = DefaultPreemption(handle.listers, args, rng=rng)
    return Pipeline(filters, scorers, extenders, policy.percentage_of_nodes_to_score,
                    post_filter=post_filter, rng=rng, pre_enqueue=pre_enqueue,
                    nominator=handle.nominator)


def _build(entry: PluginEntry, handle: Handle, kind: type[_P]) -> _P:
    try:
        plugin = entry.factory(entry.args, handle)
    except Exception as err:
        raise BuildError(f"{entry.path}: building {entry.name} failed after its args were "
                         f"validated (a polsched bug): {err}") from err
    if not isinstance(plugin, kind):
        raise BuildError(f"{entry.path}: {entry.name}'s factory returned "
                         f"{type(plugin).__name__}, not a {kind.__name__}")
    return plugin
