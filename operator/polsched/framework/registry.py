"""The plugin registry: plugin name -> factories per extension point.

A factory takes the entry's args (a plain mapping, as the user wrote it, or the upstream
default when absent) and a Handle, validates the args and returns a plugin. Invalid args
raise ArgsError naming the field relative to `args` ("requirements[0].operator"); the
loader prefixes the entry's path. This runs when a policy loads, never per pod.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from polsched.framework.interfaces import FilterPlugin, Handle, PreEnqueuePlugin, ScorePlugin


class ArgsError(ValueError):
    """A plugin's args are invalid. `path` is relative to the entry's args."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path
        self.message = message


FilterFactory = Callable[[Mapping[str, Any], Handle], FilterPlugin]
ScoreFactory = Callable[[Mapping[str, Any], Handle], ScorePlugin]
PreEnqueueFactory = Callable[[Mapping[str, Any], Handle], PreEnqueuePlugin]


@dataclass(frozen=True)
class PluginSpec:
    name: str
    filter: FilterFactory | None = None
    score: ScoreFactory | None = None
    # A plugin that only gates pods before they enter the active queue (SchedulingGates):
    # neither filter nor scorer, it runs in the default profile unless disabled.
    pre_enqueue: PreEnqueueFactory | None = None
    # Upstream default args (KubeSchedulerConfiguration v1 defaults) used when an entry
    # gives none; also what a default-profile entry runs with.
    default_args: Mapping[str, Any] | None = None

    @property
    def points(self) -> tuple[str, ...]:
        return tuple(p for p, f in (("filter", self.filter), ("score", self.score),
                                    ("preEnqueue", self.pre_enqueue)) if f)


class Registry:
    def __init__(self, specs: Iterable[PluginSpec] = ()) -> None:
        self._specs: dict[str, PluginSpec] = {}
        for spec in specs:
            self.register(spec)

    def register(self, spec: PluginSpec) -> None:
        if spec.name in self._specs:
            raise ValueError(f"plugin {spec.name!r} is registered twice")
        self._specs[spec.name] = spec

    def get(self, name: str) -> PluginSpec | None:
        return self._specs.get(name)

    def names(self, point: str | None = None) -> list[str]:
        return sorted(n for n, s in self._specs.items() if point is None or point in s.points)

    def __contains__(self, name: object) -> bool:
        return name in self._specs


@dataclass(frozen=True)
class Catalog:
    """The plugins a policy may name (the registry) and the default profile: the plugins
    it runs unless it disables them, in order, with the scorers' weights.

    What the API layer's loader validates a policy against, handed to it from above (the
    in-tree one is polsched.plugins.CATALOG): the loader never imports the plugins, as
    upstream's apis/config never imports framework/plugins; the caller that composes the
    process picks the registry (upstream: scheduler.New with the in-tree registry)."""

    registry: Registry
    filters: tuple[str, ...] = ()
    scorers: tuple[tuple[str, int], ...] = ()
    pre_enqueue: tuple[str, ...] = field(default=())
