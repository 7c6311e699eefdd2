"""PodInfo, NodeInfo and Snapshot: the scheduler's view of the cluster.

A PodInfo is computed once per pod version from the pod's JSON (a plain dict, as the API
server sends it; we do not build kubernetes client model objects on the hot path). A
NodeInfo aggregates a node and the pods assigned to it, like kube-scheduler's
framework.NodeInfo (pkg/scheduler/framework/types.go). Plugins read these; only the cache
(cluster/) changes them. Purely data: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from polsched.framework import resources as res

# Re-exported for the modules that take it from here; defined once, in polsched.objects.
from polsched.objects import Json as Json

# A host port in use: (hostIP, protocol, hostPort), hostIP "0.0.0.0" when unset.
HostPort = tuple[str, str, int]

# Bumped whenever some NodeInfo's labels, taints or unschedulable flag change (set_node):
# a Snapshot's NodeIndex built at another epoch is rebuilt before use.
_node_epoch = [0]


class NodeChanges:
    """The names of nodes as they change, in order: every NodeInfo change (its generation
    moves; not a copy's, whose generation is negative: a what-if of preemption or of the
    nominated pods leaves the node itself as it was) and every node the cache adds to or
    removes from its snapshot. A consumer holding
    results per node (plugins/node_memo.Aggregate) remembers its `position` and later
    revisits only the nodes named since, instead of walking every node. Bounded: the oldest
    names go, and a consumer whose position is older than what is kept starts over."""

    __slots__ = ("names", "base")
    LIMIT = 1 << 16

    def __init__(self) -> None:
        self.names: list[str] = []
        self.base = 0  # the position of names[0]

    def note(self, name: str) -> None:
        names = self.names
        names.append(name)
        if len(names) > self.LIMIT:
            drop = len(names) // 2
            del names[:drop]
            self.base += drop

    @property
    def position(self) -> int:
        return self.base + len(self.names)

    def since(self, position: int) -> list[str] | None:
        """The names noted from `position` on; None when some of them are gone."""
        if position < self.base:
            return None
        return self.names[position - self.base:]


# One log for the process: NodeInfos do not know their cache, and a consumer only looks up
# the names in the snapshot it works on (other snapshots' nodes cost it a lookup).
NODE_CHANGES = NodeChanges()


@dataclass(slots=True, eq=False)
class PodInfo:
    raw: Json
    namespace: str
    name: str
    uid: str
    labels: Mapping[str, str]
    scheduler_name: str
    node_name: str
    priority: int
    creation: str
    # What the pod counts on its node and in scores: its spec's requests, or while it is
    # resized in place, the larger of those and its status's (framework.resources).
    requests: dict[str, int]
    non_zero_cpu: int
    non_zero_memory: int
    host_ports: tuple[HostPort, ...]
    tolerations: tuple[Json, ...]
    node_selector: Mapping[str, str]
    affinity: Json
    images: tuple[str, ...]
    resource_version: str
    terminal: bool
    # The spec's requests alone (NodeResourcesFit's PreFilter and score); the same object
    # as `requests` when the status says nothing of resources.
    spec_requests: dict[str, int] = field(default_factory=dict)
    # "namespace/name", set once: the queue, the cache, the nominator and preemption's dry
    # runs (per victim and candidate node) look it up far more often than pods are built.
    key: str = field(init=False)
    # Whether the pod has pod (anti-)affinity terms, and required anti-affinity ones: read
    # by NodeInfo.add_pod / remove_pod on every placement and in every preemption dry run.
    has_affinity: bool = field(init=False)
    has_required_anti_affinity: bool = field(init=False)

    def __post_init__(self) -> None:
        self.key = f"{self.namespace}/{self.name}"
        affinity = self.affinity
        if not affinity:  # most pods
            self.has_affinity = self.has_required_anti_affinity = False
            return
        self.has_affinity = bool(affinity.get("podAffinity") or affinity.get("podAntiAffinity"))
        anti = affinity.get("podAntiAffinity") or {}
        self.has_required_anti_affinity = bool(
            anti.get("requiredDuringSchedulingIgnoredDuringExecution"))

    @property
    def spec(self) -> Json:
        spec: Json = self.raw.get("spec") or {}
        return spec

    @property
    def deleting(self) -> bool:
        """metadata.deletionTimestamp is set: the pod is terminating."""
        return bool((self.raw.get("metadata") or {}).get("deletionTimestamp"))

    @property
    def nominated_node(self) -> str:
        """status.nominatedNodeName ("" when unset)."""
        return str((self.raw.get("status") or {}).get("nominatedNodeName") or "")

    @classmethod
    def from_json(cls, pod: Json) -> PodInfo:
        meta = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        status = pod.get("status") or {}
        ports: list[HostPort] = []
        # scheduler/util GetHostPorts: of the init containers, only sidecars (restartPolicy
        # Always) hold their host ports for the pod's life.
        sidecars = [c for c in spec.get("initContainers") or ()
                    if c.get("restartPolicy") == "Always"]
        for c in (*sidecars, *(spec.get("containers") or ())):
            for p in c.get("ports") or ():
                hp = p.get("hostPort") or 0
                if hp > 0:
                    ports.append((p.get("hostIP") or "0.0.0.0", p.get("protocol") or "TCP", hp))
        # UseStatusResources (InPlacePodVerticalScaling, GA): what NodeInfo and the scorers
        # count (PodInfo.CalculateResource) reads the status of a pod being resized;
        # NodeResourcesFit's PreFilter reads the spec alone (computePodResourceRequest).
        spec_requests = res.pod_requests(spec)
        if res.reads_status(status):
            requests = res.pod_requests(spec, status=status)
            non_zero = res.pod_requests(spec, non_zero=True, status=status)
        else:
            requests = spec_requests
            non_zero = res.pod_requests(spec, non_zero=True)
        return cls(
            raw=pod,
            namespace=meta.get("namespace") or "",
            name=meta.get("name") or "",
            uid=meta.get("uid") or "",
            labels=meta.get("labels") or {},
            scheduler_name=spec.get("schedulerName") or "default-scheduler",
            node_name=spec.get("nodeName") or "",
            priority=spec.get("priority") or 0,
            creation=meta.get("creationTimestamp") or "",
            requests=requests,
            spec_requests=spec_requests,
            non_zero_cpu=non_zero.get(res.CPU, 0),
            non_zero_memory=non_zero.get(res.MEMORY, 0),
            host_ports=tuple(ports),
            tolerations=tuple(spec.get("tolerations") or ()),
            node_selector=spec.get("nodeSelector") or {},
            affinity=spec.get("affinity") or {},
            images=tuple(c.get("image") or "" for c in spec.get("containers") or ()),
            resource_version=meta.get("resourceVersion") or "",
            terminal=status.get("phase") in ("Succeeded", "Failed"),
        )


@dataclass(slots=True, eq=False)
class NodeInfo:
    """A node and the pods on it (bound, or assumed while their bind is in flight)."""

    raw: Json
    name: str
    labels: Mapping[str, str]
    taints: tuple[Json, ...]
    unschedulable: bool
    allocatable: dict[str, int]
    # image name -> size in bytes, from node.status.images (every name of an image).
    images: dict[str, int]
    requested: dict[str, int] = field(default_factory=dict)
    non_zero_cpu: int = 0
    non_zero_memory: int = 0
    pods: dict[str, PodInfo] = field(default_factory=dict)
    used_ports: set[HostPort] = field(default_factory=set)
    pods_with_affinity: int = 0
    pods_with_required_anti_affinity: int = 0
    # node.status.declaredFeatures (NodeDeclaredFeatures' Filter tests a subset of it).
    declared_features: frozenset[str] = frozenset()
    # Bumped on every change to the node or its pods; caches keyed on (name, generation)
    # are valid while it is unchanged.
    generation: int = 0

    @classmethod
    def from_json(cls, node: Json) -> NodeInfo:
        info = cls(raw={}, name="", labels={}, taints=(), unschedulable=False,
                   allocatable={}, images={})
        info.set_node(node)
        return info

    def set_node(self, node: Json) -> None:
        meta = node.get("metadata") or {}
        spec = node.get("spec") or {}
        status = node.get("status") or {}
        self.raw = node
        old_name = self.name
        self.name = meta.get("name") or ""
        labels = meta.get("labels") or {}
        taints = tuple(spec.get("taints") or ())
        unschedulable = bool(spec.get("unschedulable"))
        if (old_name != self.name or labels != self.labels or taints != self.taints
                or unschedulable != self.unschedulable):
            _node_epoch[0] += 1
        self.labels = labels
        self.taints = taints
        self.unschedulable = unschedulable
        self.allocatable = res.resource_list(status.get("allocatable") or status.get("capacity"))
        images: dict[str, int] = {}
        for image in status.get("images") or ():
            for n in image.get("names") or ():
                images[n] = image.get("sizeBytes") or 0
        self.images = images
        self.declared_features = frozenset(status.get("declaredFeatures") or ())
        self.generation += 1
        if old_name and old_name != self.name:
            NODE_CHANGES.note(old_name)
        NODE_CHANGES.note(self.name)

    def add_pod(self, pod: PodInfo) -> None:
        if pod.key in self.pods:
            self.remove_pod(self.pods[pod.key])
        self.pods[pod.key] = pod
        for k, v in pod.requests.items():
            self.requested[k] = self.requested.get(k, 0) + v
        self.non_zero_cpu += pod.non_zero_cpu
        self.non_zero_memory += pod.non_zero_memory
        self.used_ports.update(pod.host_ports)
        self.pods_with_affinity += pod.has_affinity
        self.pods_with_required_anti_affinity += pod.has_required_anti_affinity
        self.generation += 1
        if self.generation >= 0:  # not a copy (framework.runtime.node_copy)
            NODE_CHANGES.note(self.name)

    def remove_pod(self, pod: PodInfo) -> bool:
        old = self.pods.pop(pod.key, None)
        if old is None:
            return False
        for k, v in old.requests.items():
            self.requested[k] = self.requested.get(k, 0) - v
        self.non_zero_cpu -= old.non_zero_cpu
        self.non_zero_memory -= old.non_zero_memory
        if old.host_ports:
            self.used_ports = {p for q in self.pods.values() for p in q.host_ports}
        self.pods_with_affinity -= old.has_affinity
        self.pods_with_required_anti_affinity -= old.has_required_anti_affinity
        self.generation += 1
        if self.generation >= 0:  # not a copy (framework.runtime.node_copy)
            NODE_CHANGES.note(self.name)
        return True


class Snapshot:
    """The nodes a scheduling cycle sees, in a stable order.

    The cache hands out its live NodeInfos: a cycle runs without awaiting, so nothing
    changes under it, and an assumed pod is visible to the very next cycle.
    """

    __slots__ = ("nodes", "by_name", "image_nodes", "pods_with_affinity",
                 "pods_with_required_anti_affinity", "version", "_index", "_index_key")

    def __init__(self, nodes: list[NodeInfo]) -> None:
        self.nodes = nodes
        self.by_name = {n.name: n for n in nodes}
        # image name -> number of nodes that have it (ImageLocality spreads by it)
        self.image_nodes: dict[str, int] = {}
        for n in nodes:
            for image in n.images:
                self.image_nodes[image] = self.image_nodes.get(image, 0) + 1
        # The nodes' pods_with_affinity / pods_with_required_anti_affinity summed: zero
        # where upstream's HavePodsWithAffinityNodeInfoList /
        # HavePodsWithRequiredAntiAffinityNodeInfoList are empty, so InterPodAffinity can
        # skip its per-node scans in O(1). Counted here from `nodes`; whoever then adds or
        # removes pods or nodes of a live snapshot keeps them in step (ClusterCache does).
        self.pods_with_affinity = sum(n.pods_with_affinity for n in nodes)
        self.pods_with_required_anti_affinity = sum(
            n.pods_with_required_anti_affinity for n in nodes)
        # Bumped by whoever adds or removes nodes of a live snapshot (ClusterCache does):
        # with the node epoch and the node count it says whether the NodeIndex is current.
        self.version = 0
        self._index: NodeIndex | None = None
        self._index_key: tuple[int, int, int] = (-1, -1, -1)

    def node_index(self) -> NodeIndex:
        """The nodes indexed by label, taints and cordon, built when first asked for after
        a node was added, removed or changed its labels, taints or unschedulable flag (rare
        events: a node's status updates keep it)."""
        key = (_node_epoch[0], self.version, len(self.nodes))
        index = self._index
        if index is None or key != self._index_key:
            index = self._index = NodeIndex(self.nodes)
            self._index_key = key
        return index

    def __len__(self) -> int:
        return len(self.nodes)

    def __iter__(self) -> Iterator[NodeInfo]:
        return iter(self.nodes)

    def get(self, name: str) -> NodeInfo | None:
        return self.by_name.get(name)


class NodeIndex:
    """Node names by label key and value, by their NoSchedule/NoExecute taints, and the
    cordoned ones: filters that depend only on these evaluate a pod against the whole
    cluster with a few set operations (framework.selectors.NodeSet) instead of per node.
    Read-only once built; the sets are shared with the NodeSets built from them."""

    __slots__ = ("labels", "taints", "unschedulable")

    def __init__(self, nodes: list[NodeInfo]) -> None:
        labels: dict[str, dict[str, set[str]]] = {}
        taints: dict[tuple[tuple[str, str, str], ...], set[str]] = {}
        unschedulable: set[str] = set()
        for n in nodes:
            name = n.name
            for k, v in n.labels.items():
                by_value = labels.get(k)
                if by_value is None:
                    by_value = labels[k] = {}
                names = by_value.get(v)
                if names is None:
                    by_value[v] = {name}
                else:
                    names.add(name)
            if n.taints:
                sig = tuple(
                    (t.get("key") or "", str(t.get("value") or ""), t.get("effect") or "")
                    for t in n.taints)
                group = taints.get(sig)
                if group is None:
                    taints[sig] = {name}
                else:
                    group.add(name)
            if n.unschedulable:
                unschedulable.add(name)
        self.labels = labels
        # (key, value, effect) of every taint, in the node's order -> the nodes with them.
        self.taints = taints
        self.unschedulable = unschedulable
