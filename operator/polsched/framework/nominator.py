"""Nominator: pods nominated to a node, as kube-scheduler's nominator (backend/queue
nominator.go) keeps them.

A pod is nominated to a node when its preemption chose that node (its victims are being
evicted) or when the API server shows status.nominatedNodeName. Filters count the pods
nominated to a node with a priority equal or higher than the pod being scheduled as if
they already ran there (RunFilterPluginsWithNominatedPods), so the room preemption frees
is not taken by another pod. Purely data: no I/O. One Nominator per engine, shared by
every policy's pipeline (they schedule onto the same nodes).
"""

from __future__ import annotations

from polsched.framework.types import PodInfo


class Nominator:
    __slots__ = ("_by_node", "_node_of")

    def __init__(self) -> None:
        # node name -> pod key -> the nominated pod (insertion order kept)
        self._by_node: dict[str, dict[str, PodInfo]] = {}
        # pod key -> node name
        self._node_of: dict[str, str] = {}

    def __len__(self) -> int:
        return len(self._node_of)

    def add(self, pod: PodInfo, node_name: str) -> None:
        """Nominate `pod` to `node_name` (AddNominatedPod); "" removes the nomination."""
        self.remove(pod.key)
        if not node_name:
            return
        self._by_node.setdefault(node_name, {})[pod.key] = pod
        self._node_of[pod.key] = node_name

    def update(self, pod: PodInfo) -> None:
        """A pending pod changed: follow its status.nominatedNodeName when it has one;
        otherwise keep the nomination made in memory (its status patch may not have
        landed yet), with the pod's new version."""
        node = pod.nominated_node or self._node_of.get(pod.key, "")
        if node:
            self.add(pod, node)

    def remove(self, key: str) -> str:
        """Forget the pod's nomination; returns the node it had ("" if none)."""
        node = self._node_of.pop(key, "")
        if node:
            pods = self._by_node.get(node)
            if pods is not None:
                pods.pop(key, None)
                if not pods:
                    del self._by_node[node]
        return node

    def node_of(self, key: str) -> str:
        return self._node_of.get(key, "")

    def pods_for_node(self, node_name: str) -> list[PodInfo]:
        pods = self._by_node.get(node_name)
        return list(pods.values()) if pods else []

    def nodes(self) -> list[str]:
        """Nodes with at least one nominated pod."""
        return list(self._by_node)
