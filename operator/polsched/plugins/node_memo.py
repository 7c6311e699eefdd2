"""NodeMemo: per-node results of a PreFilter/PreScore scan, reused across cycles.

InterPodAffinity and PodTopologySpread reduce every pod of the cluster to counts per
topology domain for each incoming pod. Consecutive pods of one workload carry the same
terms or constraints, and between two of their cycles only the nodes that gained or lost
a pod change; a node's share of the counts is therefore remembered per signature (what the
incoming pod's result depends on) and reused while the node is the same NodeInfo object at
the same generation (NodeInfo.generation moves on every change to the node or its pods).
(kube-scheduler v1.36 also grew memo files for both plugins, interpodaffinity/
filtering_memo.go and podtopologyspread/scoring_memo.go; this scheme is our own and does not
follow them.)

Not thread-safe: a plugin instance is used by one scheduling loop.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar

from polsched.framework.types import NodeInfo

V = TypeVar("V")


class NodeMemo(Generic[V]):
    """signature -> node name -> (node, generation, value), keeping the `size` most
    recently used signatures."""

    __slots__ = ("_tables", "_size", "_seen")

    def __init__(self, size: int = 8) -> None:
        self._tables: dict[Hashable, dict[str, tuple[NodeInfo, int, V]]] = {}
        self._size = size
        # Signatures seen once and not yet given a table (table_if_repeated), oldest first.
        self._seen: dict[Hashable, None] = {}

    def table_if_repeated(self, signature: Hashable
                          ) -> dict[str, tuple[NodeInfo, int, V]] | None:
        """The table of a signature seen before; None the first time it is seen. Pods that
        are all different (requests drawn from a range) then pay no memo writes that no
        later pod would read; alike pods get their table from the second one on."""
        if signature in self._tables:
            return self.table(signature)
        seen = self._seen
        if signature in seen:
            del seen[signature]
            return self.table(signature)
        if len(seen) >= 8 * self._size:
            del seen[next(iter(seen))]
        seen[signature] = None
        return None

    def table(self, signature: Hashable) -> dict[str, tuple[NodeInfo, int, V]]:
        """The table of a signature, created when new; least recently used ones go."""
        tables = self._tables
        table = tables.pop(signature, None)
        if table is None:
            table = {}
            if len(tables) >= self._size:
                del tables[next(iter(tables))]
        tables[signature] = table
        return table

    def clear(self) -> None:
        self._tables.clear()
        self._seen.clear()
