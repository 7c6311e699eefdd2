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

from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from polsched.framework.types import NODE_CHANGES, NodeInfo, Snapshot

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


# (group, key, n): n counted for `key` of `group`, e.g. (topologyKey, value, pods).
Entry = tuple[Hashable, Hashable, int]
Share = tuple[Entry, ...]


class Aggregate:
    """The sum of every snapshot node's share, kept up to date across cycles.

    `sync` returns group -> key -> summed n over the nodes' shares, a key present when at
    least one node's share has an entry for it (even if they sum to zero) and a group
    present when it has keys: what walking every node and summing their shares gives, in
    that walk's place. The first sync on a snapshot computes every node's share; later
    ones recompute only the nodes that framework.types.NODE_CHANGES named since (added,
    removed, or changed: their pods or the node object), subtracting their old share and
    adding the new. A share must depend on nothing but the node and its pods, and on what
    the caller keys the Aggregate by (its signature).

    The dicts returned are the Aggregate's own and change at the next sync: a cycle may
    read them (and copy them to change them) but must not keep them past its end.
    """

    __slots__ = ("shares", "totals", "refs", "_snapshot", "_position", "_n_nodes", "_version")

    def __init__(self) -> None:
        # node name -> (node, its generation, its share), for nodes with a non-empty share
        self.shares: dict[str, tuple[NodeInfo, int, Share]] = {}
        self.totals: dict[Hashable, dict[Hashable, int]] = {}
        # group -> key -> how many shares have an entry for it
        self.refs: dict[Hashable, dict[Hashable, int]] = {}
        self._snapshot: Snapshot | None = None
        self._position = -1
        self._n_nodes = -1
        self._version = -1

    def sync(self, snapshot: Snapshot, compute: Callable[[NodeInfo], Share],
             ) -> dict[Hashable, dict[Hashable, int]]:
        changed = None
        # The cache names the nodes it adds or removes (and bumps the snapshot's version):
        # a node count that moved without a version bump was changed some other way.
        if self._snapshot is snapshot and (self._n_nodes == len(snapshot.nodes)
                                           or self._version != snapshot.version):
            changed = NODE_CHANGES.since(self._position)
        position = NODE_CHANGES.position
        shares = self.shares
        if changed is None:
            # Until this recount ends the memo matches no snapshot: a compute that raises
            # (the attempt's time budget) leaves it to be counted afresh, never partly.
            self._snapshot = None
            shares.clear()
            self.totals.clear()
            self.refs.clear()
            changed = [n.name for n in snapshot.nodes]
        elif len(changed) > 1:
            changed = list(dict.fromkeys(changed))
        by_name = snapshot.by_name
        apply = self._apply
        for name in changed:
            node = by_name.get(name)
            old = shares.get(name)
            if old is not None:
                if node is old[0] and node.generation == old[1]:
                    continue
                apply(old[2], -1)
                del shares[name]
            if node is not None:
                share = compute(node)
                if share:  # a node with nothing to add is not kept
                    shares[name] = (node, node.generation, share)
                    apply(share, 1)
        self._snapshot = snapshot
        self._position = position
        self._n_nodes = len(snapshot.nodes)
        self._version = snapshot.version
        return self.totals

    def _apply(self, share: Share, sign: int) -> None:
        totals, refs = self.totals, self.refs
        for group, key, n in share:
            by_key = totals.get(group)
            if by_key is None:
                by_key = totals[group] = {}
                ref = refs[group] = {}
            else:
                ref = refs[group]
            r = ref.get(key, 0) + sign
            if r:
                ref[key] = r
                by_key[key] = by_key.get(key, 0) + sign * n
            else:
                del ref[key]
                del by_key[key]
                if not ref:
                    del refs[group]
                    del totals[group]


class AggregateMemo:
    """signature -> Aggregate, keeping the `size` most recently used signatures."""

    __slots__ = ("_aggregates", "_size")

    def __init__(self, size: int = 8) -> None:
        self._aggregates: dict[Hashable, Aggregate] = {}
        self._size = size

    def get(self, signature: Hashable) -> Aggregate:
        aggregates = self._aggregates
        agg = aggregates.pop(signature, None)
        if agg is None:
            agg = Aggregate()
            if len(aggregates) >= self._size:
                del aggregates[next(iter(aggregates))]
        aggregates[signature] = agg
        return agg

    def clear(self) -> None:
        self._aggregates.clear()


class SnapshotSync:
    """Where a consumer of one snapshot's nodes last read framework.types.NODE_CHANGES.

    `changed(snapshot)` gives the names of the nodes added, removed or changed (their pods
    or the node object) since the previous call on the same snapshot, repeats possible, or
    None when every node must be revisited: the first call, another snapshot, a node count
    that moved without a version bump (nodes changed some other way than the cache's), or
    a log that has dropped names since. Aggregate's rule, for a consumer that keeps its own
    per-node results.
    """

    __slots__ = ("_snapshot", "_position", "_n_nodes", "_version")

    def __init__(self) -> None:
        self._snapshot: Snapshot | None = None
        self._position = -1
        self._n_nodes = -1
        self._version = -1

    def changed(self, snapshot: Snapshot) -> list[str] | None:
        changed = None
        if self._snapshot is snapshot and (self._n_nodes == len(snapshot.nodes)
                                           or self._version != snapshot.version):
            changed = NODE_CHANGES.since(self._position)
        self._snapshot = snapshot
        self._position = NODE_CHANGES.position
        self._n_nodes = len(snapshot.nodes)
        self._version = snapshot.version
        return changed


class SyncedValues(Generic[V]):
    """signature -> {node name: value} for the nodes of one snapshot, keeping the `size`
    most recently used signatures.

    Unlike NodeMemo, whose entries are checked per node (NodeInfo identity and generation)
    at every read, a table is brought up to date once per cycle: `table_if_repeated` drops
    the entries of the nodes NODE_CHANGES named since the signature's last use (all of them
    on another snapshot), so every entry left is current for that snapshot's nodes and a
    cycle reads them with C-level lookups (`map(table.get, names)`). The value must depend
    on nothing but the node, its pods and the signature; the table must be read only for
    nodes of the snapshot it was synced with, before that snapshot changes."""

    __slots__ = ("_tables", "_size", "_seen")

    def __init__(self, size: int = 8) -> None:
        self._tables: dict[Hashable, tuple[SnapshotSync, dict[str, V]]] = {}
        self._size = size
        self._seen: dict[Hashable, None] = {}  # as NodeMemo._seen

    def table_if_repeated(self, signature: Hashable, snapshot: Snapshot,
                          ) -> dict[str, V] | None:
        """The signature's table, current for `snapshot`; None the first time the
        signature is seen (as NodeMemo.table_if_repeated)."""
        tables = self._tables
        entry = tables.pop(signature, None)
        if entry is None:
            seen = self._seen
            if signature not in seen:
                if len(seen) >= 8 * self._size:
                    del seen[next(iter(seen))]
                seen[signature] = None
                return None
            del seen[signature]
            entry = (SnapshotSync(), {})
            if len(tables) >= self._size:
                del tables[next(iter(tables))]
        tables[signature] = entry
        sync, values = entry
        changed = sync.changed(snapshot)
        if changed is None:
            values.clear()
        else:
            pop = values.pop
            for name in changed:
                pop(name, None)
        return values

    def clear(self) -> None:
        self._tables.clear()
        self._seen.clear()
