"""The unschedulable pods (upstream's unschedulablePods): the entities rejected by plugins,
or gated by a PreEnqueue plugin, until a cluster event for which one of the plugins that
rejected them gives the hint Queue, or until they waited too long. Each is indexed by its
rejecting plugins, so that an event visits only the entities one of whose plugins
registered it."""

from __future__ import annotations

from collections.abc import Iterable

from polsched.scheduler.queue.types import Entry, HintMap, QueuedPodGroup, extra

# How often the pool is checked for entities that waited too long (Run:
# flushUnschedulableEntitiesLeftover every 30 s), and how long is too long
# (podMaxInUnschedulablePodsDuration).
UNSCHEDULABLE_FLUSH_PERIOD = 30.0
DEFAULT_POD_MAX_IN_UNSCHEDULABLE_PODS_DURATION = 300.0


class UnschedulablePods:
    def __init__(self) -> None:
        self.entries: dict[str, Entry] = {}
        # How many of the entries are gated, and the members of groups beyond their first
        # (sizes in O(1)).
        self.gated = 0
        self._extra_unschedulable = 0
        self._extra_gated = 0
        # rejecting plugin (or "*") -> keys of the parked entities it rejected
        self._index: dict[str, set[str]] = {}

    def sizes(self) -> tuple[int, int]:
        """How many pods wait here unschedulable, and gated."""
        return (len(self.entries) - self.gated + self._extra_unschedulable,
                self.gated + self._extra_gated)

    def _count(self, qp: Entry, sign: int) -> None:
        if qp.gated:
            self._extra_gated += sign * extra(qp)
            self.gated += sign
        else:
            self._extra_unschedulable += sign * extra(qp)

    def park(self, qp: Entry, hints: HintMap | None) -> None:
        """In (gated or not), indexed by its rejecting plugins."""
        if qp._qkey in self.entries:
            self.unpark(qp._qkey)
        self.entries[qp._qkey] = qp
        self._count(qp, 1)
        self._index_add(qp, hints)

    def unpark(self, key: str) -> Entry | None:
        qp = self.entries.pop(key, None)
        if qp is not None:
            self._count(qp, -1)
            for plugin in qp._indexed:
                keys = self._index.get(plugin)
                if keys is not None:
                    keys.discard(key)
            qp._indexed = ()
        return qp

    def _index_add(self, qp: Entry, hints: HintMap | None) -> None:
        """Index the parked pod by its rejecting plugins; a pod with no rejecting plugin,
        or one this pipeline does not know (an extender), is visited by every event ("*").
        A group is indexed by every member's plugins (isEntityWorthRequeuing asks each)."""
        if isinstance(qp, QueuedPodGroup):
            rejections = [m.rejected_by for m in qp.members]
        else:
            rejections = [qp.rejected_by]
        if hints is None or any(not r or any(p not in hints for p in r)
                                for r in rejections):
            qp._indexed = ("*",)
        else:
            qp._indexed = tuple(frozenset().union(*rejections))
        for plugin in qp._indexed:
            self._index.setdefault(plugin, set()).add(qp._qkey)

    def reindex(self, hints: HintMap | None) -> None:
        """The pipeline's hints changed (configure)."""
        self._index.clear()
        for qp in self.entries.values():
            self._index_add(qp, hints)

    def interested(self, plugins: Iterable[str]) -> list[Entry]:
        """The entities that one of `plugins` rejected, or that any event visits."""
        keys = set(self._index.get("*", ()))
        for plugin in plugins:
            keys.update(self._index.get(plugin, ()))
        return [self.entries[k] for k in keys]

    def gated_keys(self, plugin: str) -> list[str]:
        """The keys of the entities `plugin` may gate (its index, and "*")."""
        keys = self._index.get(plugin, set()) | self._index.get("*", set())
        return list(keys)
