"""Scenarios generated from a seed: pure data, no I/O.

A scenario is a node set, the objects its pods refer to (namespaces with labels,
StorageClasses, PVs, PVCs, Services, ReplicaSets, ResourceClaims) and a sequence of pods
that are scheduled one at a time, in order. Scenario `i` of seed `s` is always the same
(`generate(s, i)`); its family is FAMILIES[i % len(FAMILIES)], so any run of at least
len(FAMILIES) scenarios covers every family.

Every name a scenario creates carries its prefix (s0042-...), so objects of earlier
scenarios that a runner leaves behind (namespaces, PVs, StorageClasses) can never match
a later scenario's pods: StorageClass names are per scenario, and so are namespaces.
Nodes carry NODE_LABEL (the runner deletes them all between scenarios) and the scenario
label SCENARIO_LABEL.

Capacities are drawn so that nodes rarely tie on score; ties still happen and the
comparison counts them apart.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from polsched.objects import Json

NODE_LABEL = "conformance.polsched.io/node"
SCENARIO_LABEL = "conformance.polsched.io/scenario"
ZONE = "topology.kubernetes.io/zone"
HOSTNAME = "kubernetes.io/hostname"
IMAGE = "registry.k8s.io/pause:3.10"
GPU = "example.com/gpu"
POD_UID = "$POD_UID"  # PodStep.after: the pod's uid, once it exists
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"

# Cluster-wide objects every scenario may use; a runner creates them once per control plane.
PRIORITY_CLASSES = {"conformance-lowest": 5, "conformance-low": 10, "conformance-mid": 100,
                    "conformance-high": 1000}
PRIORITY_NEVER = "conformance-high-never"  # high priority, preemptionPolicy: Never
RUNTIME_CLASS = "conformance-overhead"
DEVICE_CLASS = "conformance-gpu"
# DRAExtendedResource: a class that serves an extended resource by name; every class also
# serves its implicit name.
DEVICE_CLASS_EXT = "conformance-gpu-ext"
EXT_RESOURCE = "gpu.example.com/gpu"
IMPLICIT_RESOURCE = "deviceclass.resource.kubernetes.io/" + DEVICE_CLASS
EXTENDED_RESOURCES = (EXT_RESOURCE, IMPLICIT_RESOURCE)


def global_objects() -> list[Json]:
    objs: list[Json] = [
        {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
         "metadata": {"name": name}, "value": value}
        for name, value in PRIORITY_CLASSES.items()]
    objs.append({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                 "metadata": {"name": PRIORITY_NEVER}, "value": 1000,
                 "preemptionPolicy": "Never"})
    objs.append({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                 "metadata": {"name": RUNTIME_CLASS}, "handler": "runc",
                 "overhead": {"podFixed": {"cpu": "250m", "memory": "120Mi"}}})
    objs.append({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
                 "metadata": {"name": DEVICE_CLASS},
                 "spec": {"selectors": [{"cel": {
                     "expression": 'device.driver == "gpu.example.com"'}}]}})
    objs.append({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
                 "metadata": {"name": DEVICE_CLASS_EXT},
                 "spec": {"extendedResourceName": EXT_RESOURCE, "selectors": [{"cel": {
                     "expression": 'device.driver == "gpu.example.com"'}}]}})
    return objs


@dataclass
class PodStep:
    pod: Json
    # A ReplicaSet (same namespace) that the runner makes the pod's controller owner: its
    # uid is only known once the ReplicaSet exists.
    owner: str | None = None
    # Objects created once the (gated) pod exists, before its gates go: an ownerReference
    # whose uid is POD_UID gets the pod's (a claim an earlier attempt left behind).
    after: list[Json] = field(default_factory=list)

    @property
    def gated(self) -> bool:
        return bool(self.pod["spec"].get("schedulingGates"))

    @property
    def name(self) -> str:
        return str(self.pod["metadata"]["name"])

    @property
    def namespace(self) -> str:
        return str(self.pod["metadata"]["namespace"])


@dataclass(frozen=True)
class Action:
    """One change a stepped scenario (the gang family) makes to the cluster:
    - "create": `obj` (a Pod, a PodGroup);
    - "min-count": set PodGroup `name`'s spec.schedulingPolicy.gang.minCount to `value`;
    - "delete": delete Pod `name`."""

    op: str
    namespace: str
    name: str
    obj: Json | None = None
    value: int | None = None

    def to_json(self) -> Json:
        out: Json = {"op": self.op, "namespace": self.namespace, "name": self.name}
        if self.obj is not None:
            out["obj"] = self.obj
        if self.value is not None:
            out["value"] = self.value
        return out


@dataclass
class Scenario:
    index: int
    seed: int
    family: str
    nodes: list[Json] = field(default_factory=list)
    namespaces: list[Json] = field(default_factory=list)
    objects: list[Json] = field(default_factory=list)  # created in this order
    pods: list[PodStep] = field(default_factory=list)
    # A stepped scenario (the gang family) has `steps` instead of `pods`: each step is a
    # few actions made at once, after which the runner lets the scheduler settle and
    # records every pod and PodGroup the scenario made so far.
    steps: list[list[Action]] = field(default_factory=list)
    # Stepped scenarios: whether each bound member's node is decided by construction (one
    # feasible node), so that the node is compared; otherwise only counts per group are.
    exact_nodes: bool = False
    # A stepped scenario whose bound pods' claims are reported (devices, reservedFor).
    claims: bool = False
    shape: str = ""  # the gang family's scenario shape (gang_fits, min_decrease, ...)
    # The gang-topology family: the node label its PodGroups' topology constraints name
    # (the runner reports each bound member's domain by it).
    topology_key: str = ""

    @property
    def prefix(self) -> str:
        return f"s{self.index:04d}"

    def namespace_names(self) -> list[str]:
        return [n["metadata"]["name"] for n in self.namespaces]

    def to_json(self) -> Json:
        out: Json = {"index": self.index, "seed": self.seed, "family": self.family,
                     "nodes": self.nodes, "namespaces": self.namespaces,
                     "objects": self.objects,
                     "pods": [{"pod": s.pod, **({"owner": s.owner} if s.owner else {}),
                               **({"after": s.after} if s.after else {})}
                              for s in self.pods]}
        if self.steps:
            out["shape"] = self.shape
            out["exact_nodes"] = self.exact_nodes
            if self.topology_key:
                out["topology_key"] = self.topology_key
            if self.claims:
                out["claims"] = True
            out["steps"] = [[a.to_json() for a in step] for step in self.steps]
        return out


# -- building blocks ------------------------------------------------------------------
class Builder:
    """Names and manifests for one scenario."""

    def __init__(self, sc: Scenario, rng: random.Random, ordinal: int = 0) -> None:
        self.sc = sc
        self.rng = rng
        # The scenario's rank within its family in this run (0, 1, 2...): the gang family
        # cycles its shapes with it, so that any run of N of its scenarios has N shapes.
        self.ordinal = ordinal
        self.p = sc.prefix
        self._pods = 0

    # namespaces
    def namespace(self, suffix: str, labels: dict[str, str] | None = None) -> str:
        name = f"{self.p}-{suffix}"
        self.sc.namespaces.append({"apiVersion": "v1", "kind": "Namespace",
                                   "metadata": {"name": name, "labels": labels or {}}})
        return name

    # nodes
    def node(self, cpu: str, memory: str, *, pods: int = 110, zone: str | None = "",
             labels: dict[str, str] | None = None, taints: list[Json] | None = None,
             unschedulable: bool = False, extra: dict[str, str] | None = None) -> Json:
        i = len(self.sc.nodes)
        name = f"{self.p}-n{i}"
        lab = {HOSTNAME: name, NODE_LABEL: "true", SCENARIO_LABEL: str(self.sc.index)}
        if zone == "":
            zone = f"z{i % 3}"
        if zone is not None:
            lab[ZONE] = zone
        lab.update(labels or {})
        res = {"cpu": cpu, "memory": memory, "pods": str(pods), "ephemeral-storage": "100Gi",
               **(extra or {})}
        spec: Json = {}
        if taints:
            spec["taints"] = taints
        if unschedulable:
            spec["unschedulable"] = True
        n = {"apiVersion": "v1", "kind": "Node",
             "metadata": {"name": name, "labels": lab},
             "spec": spec, "status": {"capacity": res, "allocatable": res}}
        self.sc.nodes.append(n)
        return n

    def nodes(self, count: int, **kw: Any) -> list[Json]:
        """`count` nodes of distinct sizes (so that scores rarely tie)."""
        cpus = self.rng.sample([1, 2, 3, 4, 5, 6, 8, 12], k=count)
        mems = self.rng.sample([2, 3, 4, 6, 8, 12, 16, 24], k=count)
        return [self.node(str(c), f"{m}Gi", **kw) for c, m in zip(cpus, mems, strict=True)]

    # pods
    def pod(self, ns: str, *, cpu: str | None = None, memory: str | None = None,
            limits: dict[str, str] | None = None, labels: dict[str, str] | None = None,
            owner: str | None = None, name: str | None = None, **spec: Any) -> Json:
        if name is None:
            name = f"p{self._pods:02d}"
        self._pods += 1
        c: Json = {"name": "c", "image": IMAGE}
        req = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v}
        if req or limits:
            c["resources"] = {}
            if req:
                c["resources"]["requests"] = req
            if limits:
                c["resources"]["limits"] = limits
        body: Json = {"apiVersion": "v1", "kind": "Pod",
                      "metadata": {"name": name, "namespace": ns, "labels": labels or {}},
                      "spec": {"containers": [c], "terminationGracePeriodSeconds": 0, **spec}}
        self.sc.pods.append(PodStep(body, owner))
        return body

    def obj(self, o: Json) -> Json:
        self.sc.objects.append(o)
        return o

    # random values
    def cpu(self, hi: int = 2000) -> str:
        m = self.rng.choice([50, 100, 250, 500, 750, 1000, 1500, 2000, 3000, 5000])
        return f"{m * hi // 2000}m"

    def mem(self) -> str:
        return f"{self.rng.choice([64, 128, 256, 512, 1024, 2048, 4096, 8192])}Mi"

    def maybe(self, p: float = 0.5) -> bool:
        return self.rng.random() < p


def _pin(b: Builder, node: Json) -> dict[str, str]:
    return {HOSTNAME: node["metadata"]["name"]}


# -- families ---------------------------------------------------------------------------
def fam_resources(b: Builder) -> None:
    r = b.rng
    nodes = b.nodes(r.randint(2, 5))
    if b.maybe(0.4):
        nodes[0]["status"]["capacity"][GPU] = nodes[0]["status"]["allocatable"][GPU] = "2"
    if b.maybe(0.3):
        n = r.choice(nodes)
        n["status"]["capacity"]["pods"] = n["status"]["allocatable"]["pods"] = "2"
    ns = b.namespace("a")
    for _ in range(r.randint(3, 8)):
        kind = r.random()
        if kind < 0.15:
            b.pod(ns)  # best effort
        elif kind < 0.3:
            lim = {"cpu": b.cpu(), "memory": b.mem()}
            b.pod(ns, limits=lim)  # requests default to limits
        elif kind < 0.4:
            p = b.pod(ns, cpu=b.cpu(), memory=b.mem(), limits={GPU: str(r.randint(1, 3))})
            p["spec"]["containers"][0]["resources"]["requests"][GPU] = \
                p["spec"]["containers"][0]["resources"]["limits"][GPU]
        elif kind < 0.5:
            p = b.pod(ns, cpu=b.cpu(4000))
            p["spec"]["containers"][0]["resources"]["requests"]["ephemeral-storage"] = \
                r.choice(["1Gi", "200Gi"])
        else:
            b.pod(ns, cpu=b.cpu(r.choice([2000, 6000])) if b.maybe(0.9) else None,
                  memory=b.mem() if b.maybe(0.8) else None)
        if b.maybe(0.2):  # a second container
            c = b.sc.pods[-1].pod["spec"]["containers"]
            c.append({"name": "c2", "image": IMAGE,
                      "resources": {"requests": {"cpu": b.cpu(), "memory": b.mem()}}})


def _init_containers(b: Builder, pod: Json) -> None:
    inits = []
    for i in range(b.rng.randint(1, 3)):
        c: Json = {"name": f"init{i}", "image": IMAGE,
                   "resources": {"requests": {"cpu": b.cpu(6000), "memory": b.mem()}}}
        if b.maybe(0.5):
            c["restartPolicy"] = "Always"  # a sidecar: counts alongside the containers
        inits.append(c)
    pod["spec"]["initContainers"] = inits


def fam_init_sidecar(b: Builder) -> None:
    b.nodes(b.rng.randint(2, 4))
    ns = b.namespace("a")
    for _ in range(b.rng.randint(3, 6)):
        p = b.pod(ns, cpu=b.cpu(), memory=b.mem())
        if b.maybe(0.8):
            _init_containers(b, p)


def fam_overhead(b: Builder) -> None:
    b.nodes(b.rng.randint(2, 4))
    ns = b.namespace("a")
    for _ in range(b.rng.randint(3, 6)):
        p = b.pod(ns, cpu=b.cpu(4000) if b.maybe(0.8) else None,
                  memory=b.mem() if b.maybe(0.7) else None)
        if b.maybe(0.7):
            p["spec"]["runtimeClassName"] = RUNTIME_CLASS
        if b.maybe(0.3):
            _init_containers(b, p)


def fam_pod_resources(b: Builder) -> None:
    b.nodes(b.rng.randint(2, 4))
    ns = b.namespace("a")
    for _ in range(b.rng.randint(3, 6)):
        p = b.pod(ns, cpu=b.cpu() if b.maybe(0.4) else None,
                  memory=b.mem() if b.maybe(0.4) else None)
        if b.maybe(0.8):
            cpu = b.cpu(4000)
            mem = b.mem()
            p["spec"]["resources"] = {"requests": {"cpu": cpu, "memory": mem},
                                      "limits": {"cpu": "10", "memory": "32Gi"}}
            c = p["spec"]["containers"][0]
            # Container requests must not exceed the pod's; keep them small or absent.
            if "resources" in c:
                c["resources"] = {"requests": {"cpu": "10m", "memory": "16Mi"}}
        if b.maybe(0.25):
            p["spec"]["runtimeClassName"] = RUNTIME_CLASS


def _taint(b: Builder) -> Json:
    effect = b.rng.choice(["NoSchedule", "PreferNoSchedule", "NoExecute"])
    key = b.rng.choice(["dedicated", "gpu", "spot"])
    t: Json = {"key": key, "effect": effect}
    if b.maybe(0.7):
        t["value"] = b.rng.choice(["a", "b"])
    return t


def _toleration(b: Builder) -> Json:
    r = b.rng
    k = r.random()
    if k < 0.1:
        return {"operator": "Exists"}
    t: Json = {"key": r.choice(["dedicated", "gpu", "spot"])}
    if k < 0.4:
        t["operator"] = "Exists"
    else:
        t["operator"] = "Equal"
        t["value"] = r.choice(["a", "b"])
    if b.maybe(0.6):
        t["effect"] = r.choice(["NoSchedule", "PreferNoSchedule", "NoExecute"])
        if t["effect"] == "NoExecute" and b.maybe(0.3):
            t["tolerationSeconds"] = 30
    return t


def fam_taints(b: Builder) -> None:
    for n in b.nodes(b.rng.randint(2, 5)):
        if b.maybe(0.7):
            n["spec"]["taints"] = [_taint(b) for _ in range(b.rng.randint(1, 2))]
            # The API server refuses two taints with the same key and effect.
            seen: dict[tuple[str, str], Json] = {}
            for t in n["spec"]["taints"]:
                seen[(t["key"], t["effect"])] = t
            n["spec"]["taints"] = list(seen.values())
    ns = b.namespace("a")
    for _ in range(b.rng.randint(3, 6)):
        p = b.pod(ns, cpu=b.cpu(), memory=b.mem())
        if b.maybe(0.7):
            p["spec"]["tolerations"] = [_toleration(b) for _ in range(b.rng.randint(1, 2))]


LABEL_VALUES = {"disk": ["ssd", "hdd"], "tier": ["1", "2", "3"], "team": ["x", "y"]}


def _label_nodes(b: Builder, nodes: list[Json]) -> None:
    for n in nodes:
        for k, vals in LABEL_VALUES.items():
            if b.maybe(0.7):
                n["metadata"]["labels"][k] = b.rng.choice(vals)


def _requirement(b: Builder, nodes: list[Json]) -> Json:
    r = b.rng
    k = r.random()
    if k < 0.15:
        return {"key": "tier", "operator": r.choice(["Gt", "Lt"]), "values": [r.choice(["1", "2"])]}
    key = r.choice([*LABEL_VALUES, ZONE])
    vals = LABEL_VALUES.get(key, ["z0", "z1", "z2"])
    op = r.choice(["In", "In", "NotIn", "Exists", "DoesNotExist"])
    req: Json = {"key": key, "operator": op}
    if op in ("In", "NotIn"):
        req["values"] = r.sample(vals, k=r.randint(1, len(vals)))
    return req


def _node_affinity(b: Builder, nodes: list[Json]) -> Json:
    r = b.rng
    aff: Json = {}
    if b.maybe(0.7):
        terms = []
        for _ in range(r.randint(1, 2)):
            term: Json = {}
            if b.maybe(0.25) and nodes:
                # Validation: exactly one value for In/NotIn on a field.
                term["matchFields"] = [{"key": "metadata.name",
                                        "operator": r.choice(["In", "NotIn"]),
                                        "values": [r.choice(nodes)["metadata"]["name"]]}]
            if not term or b.maybe(0.5):
                term["matchExpressions"] = [_requirement(b, nodes)
                                            for _ in range(r.randint(1, 2))]
            terms.append(term)
        aff["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": terms}
    if not aff or b.maybe(0.5):
        aff["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {"weight": r.randint(1, 100),
             "preference": {"matchExpressions": [_requirement(b, nodes)]}}
            for _ in range(r.randint(1, 3))]
    return aff


def fam_node_affinity(b: Builder) -> None:
    nodes = b.nodes(b.rng.randint(2, 5))
    _label_nodes(b, nodes)
    ns = b.namespace("a")
    for _ in range(b.rng.randint(3, 6)):
        p = b.pod(ns, cpu=b.cpu(), memory=b.mem())
        if b.maybe(0.85):
            p["spec"]["affinity"] = {"nodeAffinity": _node_affinity(b, nodes)}


def fam_node_selector(b: Builder) -> None:
    nodes = b.nodes(b.rng.randint(2, 5))
    _label_nodes(b, nodes)
    ns = b.namespace("a")
    for _ in range(b.rng.randint(3, 6)):
        p = b.pod(ns, cpu=b.cpu(), memory=b.mem())
        sel = {}
        for k, vals in LABEL_VALUES.items():
            if b.maybe(0.4):
                sel[k] = b.rng.choice(vals)
        if b.maybe(0.2):
            sel[HOSTNAME] = b.rng.choice(nodes)["metadata"]["name"]
        if sel:
            p["spec"]["nodeSelector"] = sel
        if b.maybe(0.2):
            p["spec"]["affinity"] = {"nodeAffinity": _node_affinity(b, nodes)}


APPS = ["web", "db", "cache"]


def _affinity_term(b: Builder, namespaces: list[str]) -> Json:
    r = b.rng
    term: Json = {"labelSelector": {"matchLabels": {"app": r.choice(APPS)}},
                  "topologyKey": r.choice([HOSTNAME, HOSTNAME, ZONE])}
    k = r.random()
    if k < 0.3:
        term["namespaces"] = r.sample(namespaces, k=r.randint(1, len(namespaces)))
    elif k < 0.6:
        term["namespaceSelector"] = r.choice([
            {}, {"matchLabels": {"team": r.choice(["red", "blue"])}},
            {"matchExpressions": [{"key": "env", "operator": "Exists"}]}])
        if b.maybe(0.3):
            term["namespaces"] = [r.choice(namespaces)]
    return term


def _pod_affinity(b: Builder, namespaces: list[str]) -> Json:
    r = b.rng
    aff: Json = {}
    for kind in ("podAffinity", "podAntiAffinity"):
        if not b.maybe(0.5):
            continue
        a: Json = {}
        if b.maybe(0.6):
            a["requiredDuringSchedulingIgnoredDuringExecution"] = [
                _affinity_term(b, namespaces)]
        if not a or b.maybe(0.4):
            a["preferredDuringSchedulingIgnoredDuringExecution"] = [
                {"weight": r.randint(1, 100), "podAffinityTerm": _affinity_term(b, namespaces)}
                for _ in range(r.randint(1, 2))]
        aff[kind] = a
    if not aff:
        aff["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [
            _affinity_term(b, namespaces)]}
    return aff


def fam_pod_affinity(b: Builder) -> None:
    r = b.rng
    nodes = b.nodes(r.randint(2, 4))
    nss = [b.namespace("a", {"team": "red", "env": "prod"}),
           b.namespace("b", {"team": "blue"})]
    if b.maybe(0.5):
        nss.append(b.namespace("c", {"team": "red"}))
    # Existing pods, each pinned to a node.
    for _ in range(r.randint(1, 4)):
        p = b.pod(r.choice(nss), cpu="100m", labels={"app": r.choice(APPS)},
                  nodeSelector=_pin(b, r.choice(nodes)))
        if b.maybe(0.3):  # existing pods' own anti-affinity (symmetry)
            p["spec"]["affinity"] = {"podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [_affinity_term(b, nss)]}}
    for _ in range(r.randint(2, 5)):
        p = b.pod(r.choice(nss), cpu=b.cpu(), memory=b.mem(),
                  labels={"app": r.choice(APPS)} if b.maybe(0.7) else {})
        p["spec"]["affinity"] = _pod_affinity(b, nss)


def _spread(b: Builder, app: str) -> Json:
    r = b.rng
    c: Json = {"maxSkew": r.choice([1, 1, 2]),
               "topologyKey": r.choice([ZONE, HOSTNAME]),
               "whenUnsatisfiable": r.choice(["DoNotSchedule", "ScheduleAnyway"]),
               "labelSelector": {"matchLabels": {"app": app}}}
    if c["whenUnsatisfiable"] == "DoNotSchedule" and b.maybe(0.2):
        c["minDomains"] = r.choice([2, 3, 4])
    if b.maybe(0.2):
        c["nodeAffinityPolicy"] = r.choice(["Honor", "Ignore"])
    if b.maybe(0.2):
        c["nodeTaintsPolicy"] = r.choice(["Honor", "Ignore"])
    if b.maybe(0.15):
        c["matchLabelKeys"] = ["pod-template-hash"]
    return c


def fam_spread(b: Builder) -> None:
    r = b.rng
    nodes = b.nodes(r.randint(3, 6))
    if b.maybe(0.3):
        del r.choice(nodes)["metadata"]["labels"][ZONE]
    if b.maybe(0.3):
        r.choice(nodes)["spec"]["taints"] = [{"key": "spot", "effect": "NoSchedule"}]
    ns = b.namespace("a")
    app = "web"
    for _ in range(r.randint(0, 2)):  # existing pods
        b.pod(ns, cpu="100m", labels={"app": app, "pod-template-hash": "h1"},
              nodeSelector=_pin(b, r.choice(nodes)))
    cons = [_spread(b, app) for _ in range(r.randint(1, 2))]
    # Two constraints on the same key and whenUnsatisfiable are refused by validation.
    uniq = {(c["topologyKey"], c["whenUnsatisfiable"]): c for c in cons}
    for _ in range(r.randint(3, 7)):
        p = b.pod(ns, cpu=b.cpu(1000), memory=b.mem(),
                  labels={"app": app, "pod-template-hash": r.choice(["h1", "h2"])})
        p["spec"]["topologySpreadConstraints"] = copy.deepcopy(list(uniq.values()))
        if b.maybe(0.2):
            p["spec"]["nodeSelector"] = {"disk": "ssd"}
            for n in nodes:
                if b.maybe(0.6):
                    n["metadata"]["labels"]["disk"] = "ssd"


def fam_default_spread(b: Builder) -> None:
    """No constraints: kube-scheduler's system defaults apply to pods that a Service,
    ReplicaSet, StatefulSet or ReplicationController selects."""
    r = b.rng
    nodes = b.nodes(r.randint(3, 5))
    ns = b.namespace("a")
    owner: str | None = None
    if b.maybe(0.5):
        b.obj({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": f"{b.p}-svc", "namespace": ns},
               "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}})
    if b.maybe(0.6):
        owner = f"{b.p}-rs"
        b.obj({"apiVersion": "apps/v1", "kind": "ReplicaSet",
               "metadata": {"name": owner, "namespace": ns},
               "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "web"}},
                        "template": {"metadata": {"labels": {"app": "web"}},
                                     "spec": {"containers": [{"name": "c", "image": IMAGE}]}}}})
    for _ in range(r.randint(0, 2)):
        b.pod(ns, cpu="100m", labels={"app": "web"}, owner=owner,
              nodeSelector=_pin(b, r.choice(nodes)))
    for _ in range(r.randint(3, 6)):
        b.pod(ns, cpu=b.cpu(1000), memory=b.mem(), labels={"app": "web"},
              owner=owner if b.maybe(0.8) else None)


def fam_host_ports(b: Builder) -> None:
    r = b.rng
    b.nodes(r.randint(1, 4))
    ns = b.namespace("a")
    for _ in range(r.randint(3, 7)):
        p = b.pod(ns, cpu=b.cpu(), memory=b.mem())
        ports = []
        for _ in range(r.randint(1, 2)):
            port: Json = {"containerPort": r.choice([80, 8080, 53]),
                          "hostPort": r.choice([80, 8080, 53, 9000])}
            if b.maybe(0.3):
                port["protocol"] = r.choice(["TCP", "UDP"])
            if b.maybe(0.2):
                port["hostIP"] = r.choice(["127.0.0.1", "0.0.0.0"])
            ports.append(port)
        # A container refuses two identical (hostPort, protocol, hostIP).
        seen = {(q["hostPort"], q.get("protocol", "TCP"), q.get("hostIP", "")): q for q in ports}
        if b.maybe(0.85):
            p["spec"]["containers"][0]["ports"] = list(seen.values())


def fam_volumes(b: Builder) -> None:
    """PVs/PVCs/StorageClasses: pre-bound claims (their PV's node affinity), Immediate
    claims left unbound, WaitForFirstConsumer claims with and without a matching local PV,
    a missing claim and ReadWriteOncePod conflicts."""
    r = b.rng
    nodes = b.nodes(r.randint(2, 4))
    ns = b.namespace("a")
    wffc, imm = f"{b.p}-wffc", f"{b.p}-imm"
    for name, mode in ((wffc, "WaitForFirstConsumer"), (imm, "Immediate")):
        b.obj({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
               "metadata": {"name": name}, "provisioner": "kubernetes.io/no-provisioner",
               "volumeBindingMode": mode})

    def pv(name: str, node: Json | None, sc: str, modes: list[str], claim: str | None) -> None:
        spec: Json = {"capacity": {"storage": "10Gi"}, "accessModes": modes,
                      "storageClassName": sc, "persistentVolumeReclaimPolicy": "Retain",
                      "hostPath": {"path": f"/tmp/{name}"}}
        if node is not None:
            spec["nodeAffinity"] = {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": HOSTNAME, "operator": "In", "values": [node["metadata"]["name"]]}]}]}}
        if claim:
            spec["claimRef"] = {"namespace": ns, "name": claim}
        b.obj({"apiVersion": "v1", "kind": "PersistentVolume",
               "metadata": {"name": f"{b.p}-{name}"}, "spec": spec})

    def pvc(name: str, sc: str, modes: list[str], volume: str | None = None) -> str:
        meta: Json = {"name": name, "namespace": ns}
        spec: Json = {"accessModes": modes, "storageClassName": sc,
                      "resources": {"requests": {"storage": "1Gi"}}}
        if volume:
            spec["volumeName"] = f"{b.p}-{volume}"
        b.obj({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta,
               "spec": spec})
        return name

    claims: list[str] = []
    kinds = r.sample(["bound", "bound-rwop", "wffc-static", "wffc-none", "imm-unbound",
                      "missing"], k=r.randint(2, 4))
    for i, kind in enumerate(kinds):
        if kind in ("bound", "bound-rwop"):
            modes = ["ReadWriteOncePod"] if kind == "bound-rwop" else ["ReadWriteOnce"]
            node = r.choice(nodes) if b.maybe(0.8) else None
            # The PV, then a claim naming it: kcm's PV controller binds the pair (the
            # runner waits for the claim to be Bound), as a pre-bound claim is in a
            # real cluster.
            pv(f"pv{i}", node, wffc, modes, None)
            claims.append(pvc(f"c{i}", wffc, modes, volume=f"pv{i}"))
        elif kind == "wffc-static":
            for j, node in enumerate(r.sample(nodes, k=r.randint(1, len(nodes)))):
                pv(f"pv{i}-{j}", node, wffc, ["ReadWriteOnce"], None)
            claims.append(pvc(f"c{i}", wffc, ["ReadWriteOnce"]))
        elif kind == "wffc-none":
            claims.append(pvc(f"c{i}", wffc, ["ReadWriteOnce"]))
        elif kind == "imm-unbound":
            claims.append(pvc(f"c{i}", imm, ["ReadWriteOnce"]))
        else:
            claims.append(f"c{i}-missing")
    for _ in range(r.randint(2, 5)):
        p = b.pod(ns, cpu=b.cpu(), memory=b.mem())
        vols = r.sample(claims, k=r.randint(1, min(2, len(claims))))
        p["spec"]["volumes"] = [{"name": f"v{j}", "persistentVolumeClaim": {"claimName": c}}
                                for j, c in enumerate(vols)]


def fam_gates(b: Builder) -> None:
    r = b.rng
    b.nodes(r.randint(1, 3))
    ns = b.namespace("a")
    for _ in range(r.randint(2, 5)):
        gated = b.maybe(0.6)
        # Half the gated pods fit no node: a scheduler that tries a gated pod then says so
        # (FailedScheduling, PodScheduled=False/Unschedulable instead of SchedulingGated).
        big = gated and b.maybe(0.5)
        p = b.pod(ns, cpu="64" if big else b.cpu(), memory=b.mem())
        if gated:
            p["spec"]["schedulingGates"] = [{"name": "example.com/queue"}]


def fam_no_nodes(b: Builder) -> None:
    ns = b.namespace("a")
    for _ in range(b.rng.randint(1, 3)):
        b.pod(ns, cpu=b.cpu() if b.maybe() else None)


def fam_unschedulable(b: Builder) -> None:
    r = b.rng
    nodes = b.nodes(r.randint(1, 4))
    for n in r.sample(nodes, k=r.randint(1, len(nodes))):
        n["spec"]["unschedulable"] = True
    ns = b.namespace("a")
    for _ in range(r.randint(2, 5)):
        p = b.pod(ns, cpu=b.cpu(), memory=b.mem())
        if b.maybe(0.35):
            p["spec"]["tolerations"] = [r.choice([
                {"key": UNSCHEDULABLE_TAINT, "operator": "Exists", "effect": "NoSchedule"},
                {"operator": "Exists"}, {"key": UNSCHEDULABLE_TAINT, "operator": "Exists"}])]


DRA_DRIVER = "gpu.example.com"


def _dra_request(b: Builder, name: str) -> Json:
    """One request of a claim: a count, sometimes a selector on the devices' attributes
    or capacity, sometimes all devices, sometimes a prioritized list."""
    r = b.rng
    sel = r.choice([
        None, None,
        f'device.attributes["{DRA_DRIVER}"].model == "{r.choice(["a100", "h100"])}"',
        f'device.capacity["{DRA_DRIVER}"].memory.compareTo('
        f'quantity("{r.choice(["40Gi", "80Gi"])}")) >= 0',
        f'device.attributes["{DRA_DRIVER}"].numa == {r.randint(0, 1)}',
        f'cel.bind(g, device.attributes["{DRA_DRIVER}"], g.model == "h100" || g.numa == 0)',
        # cel-go's optional literals and chaining, transformMapEntry (device_cel rewrites)
        f'[?device.attributes["{DRA_DRIVER}"].?model, '
        f'?device.attributes["{DRA_DRIVER}"].?vendor].exists(m, m == "a100") || '
        f'device.attributes[?"{DRA_DRIVER}"].numa.orValue(9) == {r.randint(0, 1)} && '
        f'device.attributes["{DRA_DRIVER}"].transformMapEntry(k, v, k == "model", '
        f'{{v: k}}).size() == 1',
    ])
    exactly: Json = {"deviceClassName": DEVICE_CLASS}
    if b.maybe(0.1):
        exactly["allocationMode"] = "All"
    else:
        exactly["allocationMode"] = "ExactCount"
        exactly["count"] = r.choice([1, 1, 1, 2, 3])
    if sel:
        exactly["selectors"] = [{"cel": {"expression": sel}}]
    if b.maybe(0.3):
        exactly["tolerations"] = [r.choice([
            {"key": "ecc", "operator": "Exists", "effect": "NoSchedule"},
            {"operator": "Exists"}, {"key": "ecc", "operator": "Equal", "value": "bad"}])]
    if b.maybe(0.2):
        # consumable capacity: a share of a device that allows multiple allocations
        exactly["capacity"] = {"requests": {"memory": r.choice(["10Gi", "20Gi", "40Gi"])}}
    if b.maybe(0.15):
        subs = []
        for i, model in enumerate(r.sample(["a100", "h100"], k=2)):
            subs.append({"name": f"s{i}", "deviceClassName": DEVICE_CLASS,
                         "allocationMode": "ExactCount", "count": r.choice([1, 2]),
                         "selectors": [{"cel": {"expression":
                                        f'device.attributes["{DRA_DRIVER}"].model == "{model}"'}}]})
        return {"name": name, "firstAvailable": subs}
    return {"name": name, "exactly": exactly}


def _dra_claim_spec(b: Builder, admin: bool = False) -> Json:
    requests = [_dra_request(b, f"r{i}") for i in range(b.rng.choice([1, 1, 1, 2]))]
    if admin:
        # adminAccess (the namespace carries resource.kubernetes.io/admin-access):
        # devices in use stay available to it.
        for rq in requests:
            if "exactly" in rq and b.maybe(0.6):
                rq["exactly"]["adminAccess"] = True
    spec: Json = {"devices": {"requests": requests}}
    if b.maybe(0.25):
        attr = "matchAttribute" if b.maybe(0.6) else "distinctAttribute"
        spec["devices"]["constraints"] = [{attr: f"{DRA_DRIVER}/numa"}]
    return spec


def fam_dra(b: Builder) -> None:
    """Pods with ResourceClaims (by name or from a template) on nodes whose ResourceSlices
    offer 0-4 GPUs with a model, a NUMA node and memory; the comparison includes the
    devices each bound pod's claims got (request, pool, device)."""
    r = b.rng
    nodes = b.nodes(r.randint(1, 3))
    admin = b.maybe(0.2)
    ns = b.namespace("a", {"resource.kubernetes.io/admin-access": "true"} if admin else None)
    for n in nodes:
        name = n["metadata"]["name"]
        if b.maybe(0.15):
            continue  # a node without the driver
        devices: list[Json] = []
        partitioned = b.maybe(0.25)
        for i in range(r.randint(0, 4)):
            d: Json = {"name": f"gpu-{i}",
                       "attributes": {"model": {"string": r.choice(["a100", "h100"])},
                                      "numa": {"int": i % 2}},
                       "capacity": {"memory": {"value": r.choice(["40Gi", "80Gi"])}}}
            if b.maybe(0.2):
                d["taints"] = [{"key": "ecc", "value": r.choice(["bad", "worse"]),
                                "effect": r.choice(["NoSchedule", "NoExecute", "None"])}]
            if b.maybe(0.2):
                d["allowMultipleAllocations"] = True
            if partitioned:
                # partitionable devices: each GPU uses memory from one counter set
                d["consumesCounters"] = [{"counterSet": "card", "counters": {
                    "mem": {"value": r.choice(["20Gi", "40Gi"])}}}]
            devices.append(d)
        spec: Json = {"driver": DRA_DRIVER, "nodeName": name,
                      "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                      "devices": devices}
        if partitioned and devices:
            # Counter sets live in a slice of their own (API validation).
            spec["pool"]["resourceSliceCount"] = 2
            b.obj({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                   "metadata": {"name": f"{name}-counters", "labels": {NODE_LABEL: "true"}},
                   "spec": {"driver": DRA_DRIVER, "nodeName": name,
                            "pool": {"name": name, "generation": 1, "resourceSliceCount": 2},
                            "sharedCounters": [{"name": "card", "counters": {
                                "mem": {"value": r.choice(["40Gi", "60Gi", "80Gi"])}}}]}})
        b.obj({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
               "metadata": {"name": f"{name}-gpu", "labels": {NODE_LABEL: "true"}},
               "spec": spec})
    claims = []
    for i in range(r.randint(1, 2)):
        claim = f"{b.p}-claim{i}"
        claims.append(claim)
        b.obj({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
               "metadata": {"name": claim, "namespace": ns},
               "spec": _dra_claim_spec(b, admin)})
    template = f"{b.p}-template"
    b.obj({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
           "metadata": {"name": template, "namespace": ns},
           "spec": {"spec": _dra_claim_spec(b)}})
    for _ in range(r.randint(2, 4)):
        # Small requests: the devices, not cpu or memory, decide most pods here.
        p = b.pod(ns, cpu=b.cpu(hi=500), memory=r.choice(["64Mi", "256Mi", "1Gi"]))
        if b.maybe(0.8):
            ref: Json = {"name": "gpu"}
            if b.maybe(0.5):
                ref["resourceClaimName"] = r.choice(claims)
            else:
                ref["resourceClaimTemplateName"] = template
            p["spec"]["resourceClaims"] = [ref]
            p["spec"]["containers"][0].setdefault("resources", {})["claims"] = [{"name": "gpu"}]


def _gpu_slice(b: Builder, node: Json, count: int, taints: bool = True) -> list[Json]:
    """A ResourceSlice on `node` with `count` GPUs (model, NUMA node, memory; some
    tainted); returns its devices."""
    r = b.rng
    name = node["metadata"]["name"]
    devices: list[Json] = []
    for i in range(count):
        d: Json = {"name": f"gpu-{i}",
                   "attributes": {"model": {"string": r.choice(["a100", "h100"])},
                                  "numa": {"int": i % 2}},
                   "capacity": {"memory": {"value": r.choice(["40Gi", "80Gi"])}}}
        if taints and b.maybe(0.15):
            d["taints"] = [{"key": "ecc", "value": "bad",
                            "effect": r.choice(["NoSchedule", "None"])}]
        devices.append(d)
    b.obj({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
           "metadata": {"name": f"{name}-gpu", "labels": {NODE_LABEL: "true"}},
           "spec": {"driver": DRA_DRIVER, "nodeName": name,
                    "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                    "devices": devices}})
    return devices


def fam_dra_extended(b: Builder) -> None:
    """DRAExtendedResource: containers ask for `gpu.example.com/gpu` (a DeviceClass's
    extendedResourceName) or a class's implicit name, on nodes whose slices offer 0-4 GPUs
    and some whose device plugin advertises the resource in allocatable (those serve it
    themselves). Init containers and sidecars ask too, so the claim's requests and the
    pod's requestMappings follow upstream's rules; some pods also have a claim of their
    own (only where no device plugin advertises the resource: kube-scheduler fails such a
    pod in PreBind on a node whose device plugin serves it, docs/differences.md)."""
    r = b.rng
    nodes = b.nodes(r.randint(1, 3))
    plugin_nodes = b.maybe(0.3)
    for n in nodes:
        if plugin_nodes and b.maybe(0.5):
            for key in ("capacity", "allocatable"):
                n["status"][key][EXT_RESOURCE] = str(r.randint(0, 2))
        if b.maybe(0.85):
            _gpu_slice(b, n, r.randint(0, 4))
    ns = b.namespace("a")
    template = f"{b.p}-template"
    own_claims = not plugin_nodes and b.maybe(0.4)
    if own_claims:
        b.obj({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
               "metadata": {"name": template, "namespace": ns},
               "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                   "deviceClassName": DEVICE_CLASS, "allocationMode": "ExactCount",
                   "count": 1}}]}}}})
    for _ in range(r.randint(2, 5)):
        p = b.pod(ns, cpu=b.cpu(hi=500), memory=r.choice(["64Mi", "256Mi"]))
        c = p["spec"]["containers"][0]
        res = r.choice([EXT_RESOURCE, EXT_RESOURCE, IMPLICIT_RESOURCE])
        c["resources"]["limits"] = {res: str(r.randint(1, 3))}
        if b.maybe(0.2):
            c["resources"]["limits"][r.choice(EXTENDED_RESOURCES)] = "1"
        if b.maybe(0.25):
            p["spec"]["containers"].append({"name": "c2", "image": IMAGE, "resources": {
                "limits": {EXT_RESOURCE: str(r.randint(1, 2))}}})
        if b.maybe(0.25):
            inits = []
            for i in range(r.randint(1, 2)):
                ic: Json = {"name": f"init{i}", "image": IMAGE, "resources": {
                    "limits": {res: str(r.randint(1, 3))}}}
                if b.maybe(0.4):
                    ic["restartPolicy"] = "Always"
                inits.append(ic)
            p["spec"]["initContainers"] = inits
        if own_claims and b.maybe(0.6):
            p["spec"]["resourceClaims"] = [{"name": "gpu",
                                            "resourceClaimTemplateName": template}]
            c["resources"]["claims"] = [{"name": "gpu"}]
        elif b.maybe(0.1):
            # A claim for its extended resources that an earlier attempt left behind:
            # Filter refuses it, PostFilter deletes it (the pod then waits for a flush).
            name = p["metadata"]["name"]
            p["spec"]["schedulingGates"] = [{"name": "example.com/queue"}]
            b.sc.pods[-1].after.append({
                "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                "metadata": {"name": f"{name}-extended-resources-old", "namespace": ns,
                             "annotations": {
                                 "resource.kubernetes.io/extended-resource-claim": "true"},
                             "finalizers": ["resource.kubernetes.io/delete-protection"],
                             "ownerReferences": [{"apiVersion": "v1", "kind": "Pod",
                                                  "name": name, "uid": POD_UID,
                                                  "controller": True}]},
                "spec": {"devices": {"requests": [{"name": "container-0-request-0",
                                                   "exactly": {
                                                       "deviceClassName": DEVICE_CLASS_EXT,
                                                       "allocationMode": "ExactCount",
                                                       "count": 1}}]}}})


def fam_dra_allocated(b: Builder) -> None:
    """Claims allocated before their pods come: on one node's devices (the allocation's
    node selector keeps the pods there, and other claims cannot have those devices), some
    with binding conditions the driver already reports True (PreBind waits for them, as
    upstream, and finds them met); pods share them by name, and some bring a claim of
    their own from a template, which must find other devices."""
    r = b.rng
    nodes = b.nodes(r.randint(1, 3))
    ns = b.namespace("a")
    offered = {n["metadata"]["name"]: _gpu_slice(b, n, r.randint(1, 3), taints=False)
               for n in nodes if b.maybe(0.9)}
    claims = []
    for i in range(r.randint(1, 2)):
        if not offered:
            break
        node = r.choice(sorted(offered))
        device = r.choice(offered[node])["name"]
        name = f"{b.p}-claim{i}"
        result: Json = {"request": "gpu", "driver": DRA_DRIVER, "pool": node,
                        "device": device}
        # With allocationTimestamp, as v1.37 writes it: PreBind adds one to an allocation
        # without, which the API server refuses (the allocation is immutable), on both.
        status: Json = {"allocation": {
            "devices": {"results": [result]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [node]}]}]},
            "allocationTimestamp": "2026-01-01T00:00:00Z"}}
        if b.maybe(0.4):
            result["bindingConditions"] = ["attached"]
            result["bindingFailureConditions"] = ["failed"]
            status["devices"] = [{"driver": DRA_DRIVER, "pool": node, "device": device,
                                  "conditions": [{
                                      "type": "attached", "status": "True",
                                      "reason": "Attached", "message": "",
                                      "lastTransitionTime": "2026-01-01T00:00:00Z"}]}]
        b.obj({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
               "metadata": {"name": name, "namespace": ns,
                            "finalizers": ["resource.kubernetes.io/delete-protection"]},
               "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                   "deviceClassName": DEVICE_CLASS, "allocationMode": "ExactCount",
                   "count": 1}}]}},
               "status": status})
        claims.append(name)
    template = f"{b.p}-template"
    b.obj({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
           "metadata": {"name": template, "namespace": ns},
           "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
               "deviceClassName": DEVICE_CLASS, "allocationMode": "ExactCount",
               "count": r.choice([1, 1, 2])}}]}}}})
    for _ in range(r.randint(2, 4)):
        # Either a claim allocated before (with requests small enough for its node) or
        # one of its own, never both: a pod that does not fit where its claim is
        # allocated makes PostFilter deallocate that, and the retry that follows races
        # the unschedulable status write (which kube-scheduler drops when the binding
        # overtakes it).
        if claims and b.maybe(0.7):
            p = b.pod(ns, cpu="100m", memory="64Mi")
            refs = [{"name": "shared", "resourceClaimName": r.choice(claims)}]
        else:
            p = b.pod(ns, cpu=b.cpu(hi=500), memory=r.choice(["64Mi", "256Mi", "1Gi"]))
            refs = [{"name": "own", "resourceClaimTemplateName": template}]
        p["spec"]["resourceClaims"] = refs
        p["spec"]["containers"][0].setdefault("resources", {})["claims"] = [
            {"name": ref["name"]} for ref in refs]


def fam_preemption(b: Builder) -> None:
    r = b.rng
    nodes = [b.node(str(c), f"{m}Gi") for c, m in
             zip(r.sample([1, 2, 3], k=r.randint(1, 3)), [2, 4, 6], strict=False)]
    ns = b.namespace("a")
    # Fill the nodes with low and mid priority pods.
    for n in nodes:
        for _ in range(r.randint(1, 3)):
            b.pod(ns, cpu=r.choice(["300m", "500m", "700m"]), memory="256Mi",
                  priorityClassName=r.choice(["conformance-lowest", "conformance-low",
                                              "conformance-mid"]),
                  labels={"app": r.choice(APPS)}, nodeSelector=_pin(b, n))
    for _ in range(r.randint(1, 3)):
        pc = r.choice(["conformance-high", "conformance-high", "conformance-mid",
                       PRIORITY_NEVER])
        p = b.pod(ns, cpu=r.choice(["500m", "1", "1500m", "4"]), memory="256Mi",
                  priorityClassName=pc)
        if b.maybe(0.2):
            p["spec"]["affinity"] = {"podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"app": r.choice(APPS)}},
                     "topologyKey": HOSTNAME}]}}


# NodeDeclaredFeatures (GA in v1.37): the features kube-scheduler's registry infers from a
# pod (component-helpers nodedeclaredfeatures) that the API server accepts with the default
# gates, and names a node may declare that no pod needs (ignored: TryMap).
RESTART_ALL = "RestartAllContainersOnContainerExits"
DECLARABLE = (RESTART_ALL, "ExtendWebSocketsToKubelet", "InPlacePodVerticalScalingInitContainers",
              "UserNamespacesHostNetworkSupport", "VolumeBindMountOptions",
              "ConformanceExample/subFeature")


def _restart_all(c: Json) -> None:
    """A restart rule that restarts the whole pod: needs RestartAllContainersOnContainerExits
    on the node."""
    c["restartPolicy"] = "Never"
    c["restartPolicyRules"] = [{"action": "RestartAllContainers",
                                "exitCodes": {"operator": "In", "values": [42]}}]


def fam_node_features(b: Builder) -> None:
    """NodeDeclaredFeatures: nodes declaring some features (status.declaredFeatures, sorted
    as validation demands), pods whose spec needs RestartAllContainersOnContainerExits (a
    RestartAllContainers rule on a container or an init container), and pods with fields
    whose feature is off by default (bindMountOptions, dropped by the API server; hostNetwork
    without a user namespace): those need nothing."""
    r = b.rng
    nodes = b.nodes(r.randint(2, 5))
    for n in nodes:
        if b.maybe(0.75):
            feats = sorted(r.sample(DECLARABLE, k=r.randint(1, 3)))
            if b.maybe(0.5) and RESTART_ALL not in feats:
                feats = sorted([*feats, RESTART_ALL])
            n["status"]["declaredFeatures"] = feats
    if b.maybe(0.3):
        _taint_some(b, nodes)
    ns = b.namespace("a")
    for _ in range(r.randint(3, 7)):
        p = b.pod(ns, cpu=b.cpu(4000) if b.maybe(0.8) else None,
                  memory=b.mem() if b.maybe(0.6) else None)
        c = p["spec"]["containers"][0]
        kind = r.random()
        if kind < 0.45:
            _restart_all(c)
        elif kind < 0.6:
            p["spec"]["initContainers"] = [{"name": "init", "image": IMAGE}]
            _restart_all(p["spec"]["initContainers"][0])
        elif kind < 0.7:
            p["spec"]["volumes"] = [{"name": "v", "emptyDir": {}}]
            c["volumeMounts"] = [{"name": "v", "mountPath": "/v",
                                  "bindMountOptions": ["nosuid"]}]
        elif kind < 0.8:
            p["spec"]["hostNetwork"] = True
        if b.maybe(0.2):
            p["spec"]["tolerations"] = [_toleration(b)]


def _taint_some(b: Builder, nodes: list[Json]) -> None:
    n = b.rng.choice(nodes)
    n["spec"]["taints"] = [_taint(b)]


def _bound_pod(b: Builder, ns: str, node: Json, spec_cpu: str, *, status_cpu: dict[str, str],
               memory: str = "256Mi", condition: str | None = None,
               pod_level: dict[str, str] | None = None, sidecar: bool = False) -> Json:
    """A pod already on `node` whose in-place resize is under way: its spec asks for
    `spec_cpu`; its status (written through the status subresource, as a kubelet would)
    says what was allocated and what runs (status_cpu: "allocated", "actual"), and a
    PodResizePending condition (Infeasible, Deferred) when `condition` is set. With
    `pod_level`, the pod has pod-level requests and the status pod-level resources."""
    name = f"r{len(b.sc.objects):02d}"
    c: Json = {"name": "c", "image": IMAGE,
               "resources": {"requests": {"cpu": spec_cpu, "memory": memory}}}
    spec: Json = {"nodeName": node["metadata"]["name"], "terminationGracePeriodSeconds": 0,
                  "containers": [c]}
    cstatus: Json = {"name": "c", "image": IMAGE, "imageID": "", "ready": True,
                     "restartCount": 0, "started": True,
                     "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}
    if "allocated" in status_cpu:
        cstatus["allocatedResources"] = {"cpu": status_cpu["allocated"], "memory": memory}
    if "actual" in status_cpu:
        cstatus["resources"] = {"requests": {"cpu": status_cpu["actual"], "memory": memory}}
    status: Json = {"phase": "Running", "containerStatuses": [cstatus],
                    "conditions": [{"type": "PodScheduled", "status": "True"}]}
    if sidecar:
        side_cpu = b.rng.choice(["100m", "300m"])
        spec["initContainers"] = [{"name": "side", "image": IMAGE, "restartPolicy": "Always",
                                   "resources": {"requests": {"cpu": side_cpu}}}]
        side_status = dict(cstatus, name="side")
        side_status["allocatedResources"] = {"cpu": b.rng.choice(["100m", "500m"])}
        side_status.pop("resources", None)
        status["initContainerStatuses"] = [side_status]
    if pod_level is not None:
        spec["resources"] = {"requests": {"cpu": pod_level["spec"], "memory": memory}}
        c["resources"] = {"requests": {"cpu": "10m", "memory": "16Mi"}}
        status["allocatedResources"] = {"cpu": pod_level["allocated"], "memory": memory}
        status["resources"] = {"requests": {"cpu": pod_level["actual"], "memory": memory}}
    if condition is not None:
        status["conditions"].append({"type": "PodResizePending", "status": "True",
                                     "reason": condition,
                                     "message": f"conformance: resize {condition}"})
    return b.obj({"apiVersion": "v1", "kind": "Pod",
                  "metadata": {"name": name, "namespace": ns}, "spec": spec,
                  "status": status})


def fam_resize(b: Builder) -> None:
    """In-place pod resize (InPlacePodVerticalScaling, GA): pods already on the nodes are
    mid-resize, their status resources above or below their spec, some infeasible or
    deferred, some with pod-level resources or a sidecar; then pending pods must fit what
    is left, and score the nodes on it."""
    r = b.rng
    nodes = b.nodes(r.randint(2, 4))
    ns = b.namespace("a")
    cpus = ["250m", "500m", "1", "1500m", "2"]
    for n in nodes:
        for _ in range(r.randint(1, 3)):
            spec_cpu, a, c = r.choice(cpus), r.choice(cpus), r.choice(cpus)
            kind = r.random()
            if kind < 0.3:  # resize in progress: allocated, not yet actuated
                _bound_pod(b, ns, n, spec_cpu, status_cpu={"allocated": spec_cpu, "actual": a})
            elif kind < 0.45:  # no allocation recorded yet
                _bound_pod(b, ns, n, spec_cpu, status_cpu={"actual": a})
            elif kind < 0.6:  # the node cannot give what the spec asks
                _bound_pod(b, ns, n, r.choice(["6", "16"]), status_cpu={"allocated": a,
                                                                       "actual": c},
                           condition="Infeasible")
            elif kind < 0.7:
                _bound_pod(b, ns, n, spec_cpu, status_cpu={"allocated": a, "actual": c},
                           condition="Deferred")
            elif kind < 0.85:
                _bound_pod(b, ns, n, "10m", status_cpu={},
                           pod_level={"spec": spec_cpu, "allocated": a, "actual": c},
                           condition="Infeasible" if b.maybe(0.2) else None)
            else:
                _bound_pod(b, ns, n, spec_cpu, status_cpu={"allocated": a, "actual": c},
                           sidecar=True)
    for _ in range(r.randint(3, 6)):
        b.pod(ns, cpu=b.cpu(r.choice([2000, 4000])) if b.maybe(0.9) else None,
              memory=b.mem() if b.maybe(0.7) else None)


CSI_DRIVERS = ("csi-a.conformance.example.com", "csi-b.conformance.example.com")


def fam_csi_limits(b: Builder) -> None:
    """NodeVolumeLimits: nodes whose CSINode caps a driver at 1-3 volumes; claims bound to
    CSI PVs of two drivers, some shared between pods (one volume, counted once on a node),
    some missing. Pods land one after the other, so the later ones meet the volumes of the
    earlier ones on their nodes."""
    r = b.rng
    nodes = b.nodes(r.randint(1, 3))
    for n in nodes:
        if not b.maybe(0.85):
            continue  # no CSINode: no limit on this node
        drivers = [{"name": d, "nodeID": n["metadata"]["name"],
                    **({"allocatable": {"count": r.randint(1, 3)}} if b.maybe(0.85) else {})}
                   for d in CSI_DRIVERS if d == CSI_DRIVERS[0] or b.maybe(0.5)]
        b.obj({"apiVersion": "storage.k8s.io/v1", "kind": "CSINode",
               "metadata": {"name": n["metadata"]["name"]}, "spec": {"drivers": drivers}})
    ns = b.namespace("a")
    claims: list[str] = []
    for i in range(r.randint(3, 6)):
        driver = CSI_DRIVERS[0] if b.maybe(0.7) else CSI_DRIVERS[1]
        sc = f"{b.p}-{driver.split('.')[0]}"
        if not any(o["kind"] == "StorageClass" and o["metadata"]["name"] == sc
                   for o in b.sc.objects):
            b.obj({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                   "metadata": {"name": sc}, "provisioner": driver,
                   "volumeBindingMode": "WaitForFirstConsumer"})
        # The PV, then a claim naming it: kcm's PV controller binds the pair.
        b.obj({"apiVersion": "v1", "kind": "PersistentVolume",
               "metadata": {"name": f"{b.p}-pv{i}"},
               "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce"],
                        "storageClassName": sc, "persistentVolumeReclaimPolicy": "Retain",
                        "csi": {"driver": driver, "volumeHandle": f"{b.p}-handle{i}"}}})
        b.obj({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
               "metadata": {"name": f"c{i}", "namespace": ns},
               "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": sc,
                        "volumeName": f"{b.p}-pv{i}",
                        "resources": {"requests": {"storage": "1Gi"}}}})
        claims.append(f"c{i}")
    if b.maybe(0.3):
        claims.append("c-missing")
    for _ in range(r.randint(3, 7)):
        p = b.pod(ns, cpu=b.cpu(), memory=b.mem())
        if b.maybe(0.85):
            vols = r.sample(claims, k=r.randint(1, min(3, len(claims))))
            p["spec"]["volumes"] = [{"name": f"v{j}", "persistentVolumeClaim": {
                "claimName": c}} for j, c in enumerate(vols)]


EXTENDER_RESOURCE = "conformance.polsched.io/extender"  # conformance/extender.py's


def fam_extender(b: Builder) -> None:
    """The suite's HTTP extender (filter, unresolvable filter, prioritize with weight 2),
    called for the pods that request its managed resource; the others never meet it. Some
    pods carry node affinity or tolerations too, so the extender sees a filtered list."""
    r = b.rng
    nodes = b.nodes(r.randint(2, 6))
    _label_nodes(b, nodes)
    for n in nodes:
        if b.maybe(0.2):
            n["spec"]["taints"] = [_taint(b)]
    ns = b.namespace("a")
    for _ in range(r.randint(3, 7)):
        p = b.pod(ns, cpu=b.cpu(), memory=b.mem())
        if b.maybe(0.8):
            res = p["spec"]["containers"][0]["resources"]
            res["requests"][EXTENDER_RESOURCE] = "1"
            res["limits"] = {EXTENDER_RESOURCE: "1"}
        if b.maybe(0.3):
            p["spec"]["affinity"] = {"nodeAffinity": _node_affinity(b, nodes)}
        if b.maybe(0.3):
            p["spec"]["tolerations"] = [_toleration(b)]


# Mixtures: each adds one feature to a scenario built by fam_resources.
def _mix_taints(b: Builder) -> None:
    for n in b.sc.nodes:
        if b.maybe(0.4):
            n["spec"]["taints"] = [_taint(b)]
    for s in b.sc.pods:
        if b.maybe(0.5):
            s.pod["spec"]["tolerations"] = [_toleration(b)]


def _mix_affinity(b: Builder) -> None:
    _label_nodes(b, b.sc.nodes)
    for s in b.sc.pods:
        if b.maybe(0.4):
            s.pod["spec"].setdefault("affinity", {})["nodeAffinity"] = \
                _node_affinity(b, b.sc.nodes)


def _mix_pod_affinity(b: Builder) -> None:
    nss = b.sc.namespace_names()
    for s in b.sc.pods:
        s.pod["metadata"]["labels"]["app"] = b.rng.choice(APPS)
        if b.maybe(0.4):
            s.pod["spec"].setdefault("affinity", {}).update(_pod_affinity(b, nss))


def _mix_spread(b: Builder) -> None:
    c = _spread(b, "web")
    for s in b.sc.pods:
        s.pod["metadata"]["labels"]["app"] = "web"
        if b.maybe(0.6):
            s.pod["spec"]["topologySpreadConstraints"] = [copy.deepcopy(c)]


def _mix_unschedulable(b: Builder) -> None:
    if b.sc.nodes:
        b.rng.choice(b.sc.nodes)["spec"]["unschedulable"] = True


def _mix_sidecars(b: Builder) -> None:
    for s in b.sc.pods:
        if b.maybe(0.3):
            _init_containers(b, s.pod)


def _mix_gates(b: Builder) -> None:
    for s in b.sc.pods:
        if b.maybe(0.25):
            s.pod["spec"]["schedulingGates"] = [{"name": "example.com/queue"}]


MIXERS: list[Callable[[Builder], None]] = [
    _mix_taints, _mix_affinity, _mix_pod_affinity, _mix_spread, _mix_unschedulable,
    _mix_sidecars, _mix_gates]


def fam_mixed(b: Builder) -> None:
    fam_resources(b)
    for mix in b.rng.sample(MIXERS, k=b.rng.randint(2, 4)):
        mix(b)



# -- the gang family (scheduling.k8s.io/v1beta1 PodGroups, GenericWorkload on) ------------
GANG_GATES = "GenericWorkload=true"
PODGROUP_API = "scheduling.k8s.io/v1beta1"
OTHER_SCHEDULER = "conformance-other"  # a scheduler name nobody serves


def podgroup(ns: str, name: str, min_count: int | None, *,
             priority_class: str | None = None, topology: str | None = None,
             parent: str | None = None) -> Json:
    """A PodGroup with a gang policy of `min_count`, or a basic policy when None; with
    `topology`, the constraint to keep it in one domain of that node label
    (TopologyAwareWorkloadScheduling); with `parent`, a child of that CompositePodGroup
    (CompositePodGroup; the API then wants a workloadRef, which nobody reads here)."""
    policy: Json = {"basic": {}} if min_count is None else {"gang": {"minCount": min_count}}
    spec: Json = {"schedulingPolicy": policy}
    if parent:
        spec["parentCompositePodGroupName"] = parent
        spec["workloadRef"] = {"workloadName": WORKLOAD, "templateName": name}
    if priority_class:
        spec["priorityClassName"] = priority_class
    if topology:
        spec["schedulingConstraints"] = {"topology": [{"key": topology}]}
    return {"apiVersion": PODGROUP_API, "kind": "PodGroup",
            "metadata": {"name": name, "namespace": ns}, "spec": spec}


def member(ns: str, name: str, group: str | None, cpu: str, **spec: Any) -> Json:
    """A pod of `group` (a plain pod when None) requesting `cpu` and 64Mi."""
    body: Json = {"apiVersion": "v1", "kind": "Pod",
                  "metadata": {"name": name, "namespace": ns},
                  "spec": {"containers": [{"name": "c", "image": IMAGE, "resources": {
                      "requests": {"cpu": cpu, "memory": "64Mi"}}}],
                           "terminationGracePeriodSeconds": 0, **spec}}
    if group is not None:
        body["spec"]["schedulingGroup"] = {"podGroupName": group}
    return body


class Gang:
    """Steps of one gang scenario: each `step(...)` is a set of actions made at once."""

    def __init__(self, b: Builder, shape: str) -> None:
        self.b = b
        b.sc.shape = shape
        self.ns = b.namespace("g")

    def step(self, *actions: Action) -> None:
        self.b.sc.steps.append(list(actions))

    def create(self, obj: Json) -> Action:
        return Action("create", self.ns, obj["metadata"]["name"], obj=obj)

    def group(self, name: str, min_count: int | None, **kw: Any) -> Action:
        return self.create(podgroup(self.ns, name, min_count, **kw))

    def pod(self, name: str, group: str | None, cpu: str, **spec: Any) -> Action:
        return self.create(member(self.ns, name, group, cpu, **spec))

    def min_count(self, group: str, value: int) -> Action:
        return Action("min-count", self.ns, group, value=value)

    def delete(self, name: str) -> Action:
        return Action("delete", self.ns, name)

    def members(self, group: str, count: int, cpu: str, *, start: int = 0,
                **spec: Any) -> list[Action]:
        return [self.pod(f"{group}{i}", group, cpu, **spec) for i in range(start, start + count)]

    def nodes(self, count: int, cpu: int, **kw: Any) -> list[Json]:
        """`count` nodes alike (`cpu` cores, 8Gi): which one a member lands on is a tie,
        how many land is not."""
        return [self.b.node(str(cpu), "8Gi", **kw) for _ in range(count)]

    def each(self, actions: list[Action]) -> None:
        """One step per action. Members that arrive together while their gang can go are
        a race inside kube-scheduler itself: the cache counts a pod (PreEnqueue passes)
        before the queue has put it in the group's entity, so an attempt may take only
        some of them ("minCount (4) cannot be satisfied: 1 scheduled, 2 remaining" in
        one run, "0 scheduled, 3 remaining" in the next; an oracle-vs-oracle run shows
        it). A burst of members is only made where they are all held (no PodGroup yet,
        or below minCount) until a later step lets the group go as one."""
        for a in actions:
            self.step(a)

    def either(self, actions: list[Action]) -> None:
        """The actions at once, or one step each (the seed decides): only for actions
        whose pods are held (see `each`)."""
        if self.b.maybe():
            self.step(*actions)
        else:
            for a in actions:
                self.step(a)


def _gang_fits(g: Gang) -> None:
    """A gang that fits whole: every member bound, the group Scheduled."""
    r = g.b.rng
    k = r.randint(2, 4)
    g.nodes(r.randint(1, 3), 4)
    g.step(g.group("a", k))
    g.each(g.members("a", k, r.choice(["500m", "1", "1500m"])))


def _gang_too_big(g: Gang) -> None:
    """A gang one member too many for the nodes: nothing bound, the group Unschedulable."""
    r = g.b.rng
    n = r.randint(1, 2)
    g.nodes(n, 2)
    per_node = r.choice([1, 2])
    cpu = "1500m" if per_node == 1 else "900m"
    k = n * per_node + 1
    g.step(g.group("a", k))
    g.each(g.members("a", k, cpu))


def _gang_more_than_min(g: Gang) -> None:
    """More members than minCount, not all fit: the gang goes with the ones that fit."""
    r = g.b.rng
    g.nodes(1, 4)
    k = r.randint(2, 3)
    g.step(g.group("a", k))
    g.each(g.members("a", k + 1, "1200m"))


def _basic_group(g: Gang) -> None:
    """A basic group: members scheduled one by one, some fit, some do not."""
    r = g.b.rng
    g.nodes(r.randint(1, 2), 2)
    g.step(g.group("a", None))
    g.each(g.members("a", r.randint(2, 5), r.choice(["700m", "1500m"])))


def _min_decrease(g: Gang) -> None:
    """minCount above the members present holds them; lowering it lets the gang go."""
    r = g.b.rng
    g.nodes(r.randint(1, 2), 4)
    k = r.randint(2, 3)
    g.step(g.group("a", k + 1))
    g.step(*g.members("a", k, "1"))
    g.step(g.min_count("a", k))


def _min_decrease_rejected(g: Gang) -> None:
    """A gang rejected for want of room; a lower minCount requeues it and it fits."""
    g.nodes(1, 2)
    g.step(g.group("a", 3))
    g.each(g.members("a", 3, "900m"))
    g.step(g.min_count("a", 2))


def _min_increase(g: Gang) -> None:
    """A rejected gang whose minCount goes up is not requeued; a new member requeues it."""
    r = g.b.rng
    g.nodes(1, 2)
    g.step(g.group("a", 2))
    g.each(g.members("a", 2, "1500m"))
    g.step(g.min_count("a", 3))
    g.step(g.pod("a2", "a", r.choice(["100m", "1500m"])))


def _min_increase_held(g: Gang) -> None:
    """Members held below minCount stay held when it goes up, until enough arrive."""
    g.nodes(2, 4)
    g.step(g.group("a", 2))
    g.step(g.pod("a0", "a", "1"))
    g.step(g.min_count("a", 3))
    g.step(g.pod("a1", "a", "1"))
    g.step(g.pod("a2", "a", "1"))


def _members_first(g: Gang) -> None:
    """Members that arrive before their PodGroup wait for it."""
    r = g.b.rng
    g.nodes(r.randint(1, 2), 4)
    k = r.randint(2, 3)
    g.either(g.members("a", k, "1"))
    g.step(g.group("a", r.choice([k, k, None])))


def _group_between(g: Gang) -> None:
    """Some members, then the PodGroup, then the rest."""
    r = g.b.rng
    g.nodes(1, 4)
    k = r.randint(3, 4)
    first = r.randint(1, k - 1)
    g.each(g.members("a", first, "1"))
    g.step(g.group("a", k))
    g.each(g.members("a", k - first, "1", start=first))


def _scheduler_names(g: Gang) -> None:
    """A member bound already under another schedulerName (validation error), or a member
    for another scheduler that never joins the queue."""
    g.nodes(1, 4)
    node = g.b.sc.nodes[0]["metadata"]["name"]
    g.step(g.group("a", 2))
    if g.b.maybe():
        g.step(g.pod("a0", "a", "1", schedulerName=OTHER_SCHEDULER, nodeName=node))
        g.step(g.pod("a1", "a", "1"))
        g.step(g.pod("a2", "a", "1"))
    else:
        g.step(g.pod("a0", "a", "1", schedulerName=OTHER_SCHEDULER))
        g.step(g.pod("a1", "a", "1"))


def _priorities(g: Gang) -> None:
    """Members whose priority differs from the group's, or whose preemption policies
    differ: a SchedulerError on the group."""
    r = g.b.rng
    g.nodes(1, 4)
    kind = r.choice(["member", "group", "policy"])
    if kind == "member":
        g.step(g.group("a", 2))
        g.each([g.pod("a0", "a", "500m"),
                g.pod("a1", "a", "500m", priorityClassName="conformance-low")])
    elif kind == "group":
        g.step(g.group("a", 2, priority_class="conformance-mid"))
        g.each(g.members("a", 2, "500m"))
    else:
        g.step(g.group("a", 2, priority_class="conformance-high"))
        g.each([g.pod("a0", "a", "500m", priorityClassName="conformance-high"),
                g.pod("a1", "a", "500m", priorityClassName=PRIORITY_NEVER)])


def _competing(g: Gang) -> None:
    """Two gangs for room that holds one: the first whole, the other nothing."""
    r = g.b.rng
    g.nodes(r.randint(1, 2), 2)
    n = len(g.b.sc.nodes)
    g.step(g.group("a", 2 * n), g.group("b", 2 * n))
    g.each(g.members("a", 2 * n, "900m"))
    g.each(g.members("b", 2 * n, "900m"))
    if g.b.maybe():
        g.step(g.delete("a0"))


def _competing_at_once(g: Gang) -> None:
    """Two gangs held below minCount, let go in one step by lowering both minCounts; the
    room for one of them. (Creating both PodGroups in one step instead, after their
    members, raced inside kube-scheduler: one oracle-vs-oracle run tried gang b before
    all its members had joined its entity and got DynamicResources' PodGroupPostFilter
    error, `not found`, the other did not.)"""
    g.nodes(1, 2)
    g.step(g.group("a", 3), g.group("b", 3))
    g.step(*g.members("a", 2, "900m"), *g.members("b", 2, "900m"))
    g.step(g.min_count("a", 2), g.min_count("b", 2))


def _with_plain_pods(g: Gang) -> None:
    """Plain pods before and after a gang take and leave room."""
    r = g.b.rng
    g.nodes(2, 2)
    g.step(g.pod("p0", None, r.choice(["500m", "1500m"])))
    g.step(g.group("a", 3))
    g.each(g.members("a", 3, "1"))
    g.step(g.pod("p1", None, "1"))
    g.step(g.delete("p0"))


def _selectors(g: Gang) -> None:
    """Members whose node selector or affinity admits one node only: the gang fits only
    if the one node holds enough of them; placement is decided by construction."""
    r = g.b.rng
    g.b.sc.exact_nodes = True
    g.nodes(1, 2, labels={"pool": "a"})
    g.nodes(1, 8, labels={"pool": "b"})
    pool = r.choice(["a", "b"])
    k = r.randint(2, 3)
    basic = g.b.maybe(0.3)
    g.step(g.group("a", None if basic else k))
    acts: list[Action] = []
    for i in range(k):
        if r.random() < 0.5:
            spec: Json = {"nodeSelector": {"pool": pool}}
        else:
            spec = {"affinity": {"nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "pool", "operator": "In",
                                           "values": [pool]}]}]}}}}
        acts.append(g.pod(f"a{i}", "a", "900m", **spec))
    g.each(acts)


def _member_deleted(g: Gang) -> None:
    """A member is deleted: from a bound gang (nothing moves), or from a gang that was
    held or rejected (the others are requeued with what is left)."""
    r = g.b.rng
    kind = r.choice(["bound", "held", "room"])
    if kind == "bound":
        g.nodes(1, 4)
        g.step(g.group("a", 2))
        g.each(g.members("a", 2, "1"))
        g.step(g.delete("a1"))
        g.step(g.pod("a2", "a", "1"))
    elif kind == "held":
        g.nodes(1, 4)
        g.step(g.group("a", 3))
        g.step(*g.members("a", 2, "1"))
        g.step(g.delete("a0"))
        g.each(g.members("a", 2, "1", start=2))
    else:
        g.nodes(1, 2)
        g.step(g.pod("p0", None, "1500m"))
        g.step(g.group("a", 2))
        g.each(g.members("a", 2, "900m"))
        g.step(g.delete("p0"))


def _preempt_fits(g: Gang) -> None:
    """Workload-aware preemption: a high-priority gang evicts just enough lower-priority
    pods (the victims' priorities differ, so which ones go is decided: the more
    important is reprieved first) and binds whole."""
    r = g.b.rng
    g.nodes(1, 4)
    g.step(g.pod("low", None, "2", priorityClassName="conformance-low"),
           g.pod("lowest", None, "2", priorityClassName="conformance-lowest"))
    g.step(g.group("a", 2, priority_class="conformance-high"))
    g.each(g.members("a", 2, r.choice(["500m", "1"]), priorityClassName="conformance-high"))


def _preempt_not_enough(g: Gang) -> None:
    """A high-priority gang that cannot fit even with every lower-priority pod gone
    evicts nothing."""
    r = g.b.rng
    g.nodes(1, 4)
    g.step(g.pod("low", None, r.choice(["500m", "1"]), priorityClassName="conformance-low"))
    g.step(g.group("a", 2, priority_class="conformance-high"))
    g.each(g.members("a", 2, "3", priorityClassName="conformance-high"))


GANG_SHAPES: dict[str, Callable[[Gang], None]] = {
    "gang_fits": _gang_fits,
    "gang_too_big": _gang_too_big,
    "gang_more_than_min": _gang_more_than_min,
    "basic_group": _basic_group,
    "min_decrease": _min_decrease,
    "min_decrease_rejected": _min_decrease_rejected,
    "min_increase": _min_increase,
    "min_increase_held": _min_increase_held,
    "members_first": _members_first,
    "group_between": _group_between,
    "scheduler_names": _scheduler_names,
    "priorities": _priorities,
    "competing": _competing,
    "competing_at_once": _competing_at_once,
    "with_plain_pods": _with_plain_pods,
    "selectors": _selectors,
    "member_deleted": _member_deleted,
    "preempt_fits": _preempt_fits,
    "preempt_not_enough": _preempt_not_enough,
}


def fam_gang(b: Builder) -> None:
    """Gang and basic PodGroups (scheduling.k8s.io/v1beta1), played on control planes
    with GANG_GATES: a stepped scenario of one of GANG_SHAPES, cycled by the scenario's
    rank in the family, each drawn from the seed (sizes, counts, orders, variants)."""
    shape = list(GANG_SHAPES)[b.ordinal % len(GANG_SHAPES)]
    GANG_SHAPES[shape](Gang(b, shape))


# -- the gang-topology family (TopologyAwareWorkloadScheduling) ------------------------------
TOPOLOGY_GATES = "GenericWorkload=true,TopologyAwareWorkloadScheduling=true"
RACK = "topology.polsched.io/rack"


class Racks(Gang):
    """A gang scenario whose nodes are in racks (the RACK label): `rack(...)` adds one.
    Every scenario avoids what kube-scheduler leaves to chance: which of two placements
    with the same total score wins (a random tie-break), and which placement is tried
    first (a Go map's order), which a group's message shows when none fits; so either
    one placement wins by its score, or every rack fails alike."""

    def __init__(self, b: Builder, shape: str) -> None:
        super().__init__(b, shape)
        b.sc.topology_key = RACK
        self.racks = 0

    def rack(self, nodes: int, cpu: int, memory: str = "8Gi") -> str:
        name = f"r{self.racks}"
        self.racks += 1
        for _ in range(nodes):
            self.b.node(str(cpu), memory, labels={RACK: name})
        return name

    def tgroup(self, name: str, min_count: int | None, key: str = RACK, **kw: Any) -> Action:
        return self.group(name, min_count, topology=key, **kw)


def _topo_one_rack_fits(g: Racks) -> None:
    """Only the bigger rack holds the gang: every member lands there (the smaller is
    infeasible), whatever order the racks come in."""
    r = g.b.rng
    for n in r.sample([1, 2], 2):
        g.rack(n, 4)
    if g.b.maybe():
        g.rack(1, 2)  # a rack too small for even two members
    k = r.choice([3, 4])
    g.step(g.tgroup("a", k))
    g.each(g.members("a", k, "1500m"))


def _topo_most_members(g: Racks) -> None:
    """More members than minCount, all there before the PodGroup: two racks hold minCount,
    one holds them all, and PodGroupPodsCount picks that one."""
    r = g.b.rng
    order = r.sample([2, 1], 2)
    for n in order:
        g.rack(n, 4)
    k = r.choice([2, 3])
    g.either(g.members("a", 4, "1500m"))
    g.step(g.tgroup("a", k))


def _topo_fullest_rack(g: Racks) -> None:
    """Both racks hold the whole gang: NodeResourcesFit's placement score (MostAllocated)
    prefers the one already fuller or smaller."""
    r = g.b.rng
    kind = r.choice(["bound", "sizes"])
    if kind == "bound":
        g.rack(1, 4)
        g.rack(1, 4)
        node = g.b.sc.nodes[r.randrange(2)]["metadata"]["name"]
        g.step(g.pod("p0", None, r.choice(["500m", "1"]), nodeName=node))
    else:
        for cpu in r.sample([4, 8], 2):
            g.rack(1, cpu)
    g.step(g.tgroup("a", 2))
    g.each(g.members("a", 2, "1"))


def _topo_no_rack_fits(g: Racks) -> None:
    """Every rack alike and too small: no member bound; the group's message names the
    placements tried and the first one's status, the same in every rack."""
    r = g.b.rng
    racks, per = r.randint(2, 3), r.choice([1, 2])
    for _ in range(racks):
        g.rack(per, 2)
    k = 2 * per + 1
    g.step(g.tgroup("a", k))
    g.each(g.members("a", k, "900m"))


def _topo_no_label(g: Racks) -> None:
    """The constraint names a label no node has (no placement at all), or racks that
    hold some nodes only."""
    r = g.b.rng
    if g.b.maybe():
        g.nodes(2, 4)
        g.step(g.tgroup("a", 2, key="topology.polsched.io/missing"))
        g.each(g.members("a", 2, "1"))
    else:
        g.nodes(1, 8)  # no rack label: never used by the gang
        g.rack(1, 4)
        k = r.choice([2, 3])
        g.step(g.tgroup("a", k))
        g.each(g.members("a", k, "1500m"))


def _topo_pinned(g: Racks) -> None:
    """A gang bound in its rack pins later members there: a member that fits only in the
    other rack stays pending, its message counting the pinned rack's nodes only."""
    r = g.b.rng
    g.rack(1, 4)
    g.rack(1, 8)
    # The 4-CPU rack is the fuller one for 2 x 1500m (MostAllocated), so the gang goes there.
    g.step(g.tgroup("a", 2))
    g.each(g.members("a", 2, "1500m"))
    g.step(g.pod("a2", "a", r.choice(["500m", "1500m"])))


def _topo_unconstrained(g: Racks) -> None:
    """A PodGroup without a topology constraint, the gate on: one placement of every node
    (placed across racks, or `0/1 placements are available` when it does not fit)."""
    r = g.b.rng
    g.rack(1, 4)
    g.rack(1, 4)
    k = r.choice([3, 5])
    g.step(g.group("a", k))
    g.each(g.members("a", k, "1500m"))


def _topo_two_gangs(g: Racks) -> None:
    """Two gangs one after the other: the first takes the rack it fills most, the second
    gets the other one or nothing."""
    r = g.b.rng
    g.rack(1, 4)
    g.rack(1, 6)
    g.step(g.tgroup("a", 2))
    g.each(g.members("a", 2, "1500m"))
    g.step(g.tgroup("b", 2))
    # 7 CPUs fit nowhere: both racks fail at the first member alike.
    g.each(g.members("b", 2, r.choice(["1500m", "7"])))


def _topo_plain_pods_first(g: Racks) -> None:
    """Plain pods bound in a rack leave it too little room: the gang goes to the other
    rack; deleting them later moves nothing."""
    g.rack(1, 4)
    g.rack(1, 4)
    node = g.b.sc.nodes[0]["metadata"]["name"]
    g.step(g.pod("p0", None, "2", nodeName=node))
    g.step(g.tgroup("a", 2))
    g.each(g.members("a", 2, "1500m"))
    g.step(g.delete("p0"))


def _topo_preempt_rack(g: Racks) -> None:
    """A high-priority gang that fits no rack as it is: workload-aware preemption reruns
    the placement algorithm without the lower-priority pods, picks the rack it then fits
    (the other is too small either way) and evicts only what stands in that rack; or, when
    no rack would hold it even then, evicts nothing."""
    r = g.b.rng
    g.rack(1, 4)
    g.rack(1, 2)
    node = g.b.sc.nodes[0]["metadata"]["name"]
    g.step(g.pod("low", None, "2", nodeName=node, priorityClassName="conformance-low"))
    # 1500m: each rack holds one member now (alike: "1 scheduled, 0 remaining"), the big
    # one both without `low`. 5 CPUs: no rack holds even one, before or after.
    cpu = r.choice(["1500m", "1500m", "5"])
    g.step(g.tgroup("a", 2, priority_class="conformance-high"))
    g.each(g.members("a", 2, cpu, priorityClassName="conformance-high"))


TOPOLOGY_SHAPES: dict[str, Callable[[Racks], None]] = {
    "one_rack_fits": _topo_one_rack_fits,
    "most_members": _topo_most_members,
    "fullest_rack": _topo_fullest_rack,
    "no_rack_fits": _topo_no_rack_fits,
    "no_label": _topo_no_label,
    "pinned": _topo_pinned,
    "unconstrained": _topo_unconstrained,
    "two_gangs": _topo_two_gangs,
    "plain_pods_first": _topo_plain_pods_first,
    "preempt_rack": _topo_preempt_rack,
}


def fam_gang_topology(b: Builder) -> None:
    """Gangs kept in one rack (PodGroup spec.schedulingConstraints.topology), played on
    control planes with TOPOLOGY_GATES: a stepped scenario of one of TOPOLOGY_SHAPES,
    cycled by the scenario's rank in the family; the runner reports each bound member's
    rack."""
    shape = list(TOPOLOGY_SHAPES)[b.ordinal % len(TOPOLOGY_SHAPES)]
    TOPOLOGY_SHAPES[shape](Racks(b, shape))


# -- the gang-composite family (CompositePodGroup) -------------------------------------------
COMPOSITE_GATES = ("GenericWorkload=true,TopologyAwareWorkloadScheduling=true,"
                   "CompositePodGroup=true")
COMPOSITE_API = "scheduling.k8s.io/v1alpha3"
WORKLOAD = "conformance"


def composite_podgroup(ns: str, name: str, min_groups: int | None, *,
                       topology: str | None = None, parent: str | None = None) -> Json:
    """A CompositePodGroup with a gang policy of `min_groups` children, or a basic policy
    when None; with `topology`, the constraint to keep its whole tree in one domain."""
    policy: Json = {"basic": {}} if min_groups is None \
        else {"gang": {"minGroupCount": min_groups}}
    spec: Json = {"schedulingPolicy": policy,
                  "workloadRef": {"workloadName": WORKLOAD, "templateName": name}}
    if topology:
        spec["schedulingConstraints"] = {"topology": [{"key": topology}]}
    if parent:
        spec["parentCompositePodGroupName"] = parent
    return {"apiVersion": COMPOSITE_API, "kind": "CompositePodGroup",
            "metadata": {"name": name, "namespace": ns}, "spec": spec}


class Trees(Racks):
    """A composite scenario: racks of nodes and trees of groups. Every tree is made in
    the same order, which keeps kube-scheduler's own races out: the root
    CompositePodGroup first, then its PodGroups, one step each in the order of their names
    (children are placed in order of creation, then of name, and creationTimestamp has
    one-second resolution), then their members one step each. Until the last member
    completes the tree's quorum every member waits at PreEnqueue in the tree's entity, so
    the tree goes as one. (Made the other way round, the root last, the members leave
    incompletePodGroupPods one by one when it appears, and kube-scheduler may pop the
    tree with only some of them: seen once in 25 scenarios, see FINDINGS.md.)"""

    def tree(self, root: str, min_groups: int | None,
             children: list[tuple[str, int | None, int, str]], *,
             key: str | None = RACK, child_key: dict[str, str] | None = None,
             member_order: list[str] | None = None) -> None:
        """`root` over PodGroups (name, minCount, members, cpu per member); members of
        the children in `member_order` (default: the children's names in order)."""
        self.step(self.create(composite_podgroup(self.ns, root, min_groups, topology=key)))
        for name, k, _, _ in sorted(children):
            self.step(self.group(name, k, parent=root,
                                 topology=(child_key or {}).get(name)))
        spec = {c[0]: c for c in children}
        for name in member_order or sorted(spec):
            _, _, n, cpu = spec[name]
            self.each(self.members(name, n, cpu))


def _cpg_one_rack_holds_both(g: Trees) -> None:
    """Prefill and decode must share a rack: the small rack holds one of them only (the
    parent's gang of 2 groups fails there), the big one holds both."""
    r = g.b.rng
    for n in r.sample([1, 2], 2):
        g.rack(n, 4)
    cpu = r.choice(["1500m", "2"])
    g.tree("infer", 2, [("decode", 2, 2, cpu), ("prefill", 2, 2, cpu)])


def _cpg_no_rack_holds_both(g: Trees) -> None:
    """Racks alike, each holding one child but not both: nothing bound; the first child
    gets the parent's status, the second its own."""
    r = g.b.rng
    for _ in range(r.randint(1, 2)):
        g.rack(1, 4)
    g.tree("infer", 2, [("decode", 2, 2, "1500m"), ("prefill", 2, 2, "1500m")])


def _cpg_min_group_one(g: Trees) -> None:
    """minGroupCount 1 (or a basic parent): the tree may go as soon as one child is
    complete. The child too big for the rack gets its members first (the tree goes, and
    is rejected, with the other child still empty, then short of one member); once the
    other child is complete it is bound and the big one keeps its own rejection."""
    r = g.b.rng
    g.rack(2, 4)
    big = r.choice(["decode", "prefill"])
    small = "prefill" if big == "decode" else "decode"
    min_groups = r.choice([1, None])
    g.tree("infer", min_groups, [(c, 2, 2, "5" if c == big else "1")
                                 for c in ("decode", "prefill")], member_order=[big, small])


def _cpg_child_constraint(g: Trees) -> None:
    """A child with its own constraint (one host) inside its parent's rack: the parent
    picks the only rack that fits, the child a host in it."""
    r = g.b.rng
    g.rack(1, 2)
    g.rack(2, r.choice([4, 6]))
    g.tree("infer", 2, [("decode", 2, 2, "1"), ("prefill", 2, 2, "1500m")],
           child_key={"prefill": HOSTNAME})


def _cpg_no_label(g: Trees) -> None:
    """The root's constraint names a label no node has: no placement at all; every member
    gets the root's status."""
    g.rack(1, 8)
    g.tree("infer", 2, [("decode", 1, 1, "1"), ("prefill", 1, 1, "1")],
           key="topology.polsched.io/missing")


def _cpg_two_trees(g: Trees) -> None:
    """Two workloads one after the other: the first takes the rack it fills most
    (NodeResourcesFit's placement score), the second the other rack or nothing."""
    r = g.b.rng
    g.rack(1, 4)
    g.rack(1, 6)
    g.tree("a", 2, [("a-decode", 1, 1, "1500m"), ("a-prefill", 1, 1, "1500m")])
    # 7 CPUs fit nowhere: both racks fail at the first child alike.
    cpu = r.choice(["1500m", "7"])
    g.tree("b", 2, [("b-decode", 1, 1, cpu), ("b-prefill", 1, 1, cpu)])


def _cpg_nested(g: Trees) -> None:
    """Three levels: a rack for the root, a composite gang of two PodGroups under it
    beside a PodGroup of its own; the big rack alone holds everything."""
    r = g.b.rng
    for n in r.sample([1, 2], 2):
        g.rack(n, 4)
    g.step(g.create(composite_podgroup(g.ns, "infer", 2, topology=RACK)))
    g.step(g.group("router", 1, parent="infer"))
    g.step(g.create(composite_podgroup(g.ns, "serve", 2, parent="infer")))
    for name in ("decode", "prefill"):
        g.step(g.group(name, 2, parent="serve"))
    g.each(g.members("router", 1, r.choice(["500m", "1"])))
    for name in ("decode", "prefill"):
        g.each(g.members(name, 2, "1"))


def _cpg_late_member(g: Trees) -> None:
    """A placed tree pins a later member of one of its PodGroups to its rack; it fits
    there, or it does not (though the other rack has room) and stays pending."""
    r = g.b.rng
    g.rack(1, 4)
    g.rack(1, 3)  # the fuller rack for the tree (MostAllocated): it goes there
    g.tree("infer", 2, [("decode", 1, 1, "1"), ("prefill", 1, 1, "1")])
    g.step(g.pod("decode1", "decode", r.choice(["1", "3"])))


COMPOSITE_SHAPES: dict[str, Callable[[Trees], None]] = {
    "one_rack_holds_both": _cpg_one_rack_holds_both,
    "no_rack_holds_both": _cpg_no_rack_holds_both,
    "min_group_one": _cpg_min_group_one,
    "child_constraint": _cpg_child_constraint,
    "no_label": _cpg_no_label,
    "two_trees": _cpg_two_trees,
    "nested": _cpg_nested,
    "late_member": _cpg_late_member,
}


def fam_gang_composite(b: Builder) -> None:
    """Hierarchical gangs (CompositePodGroup over PodGroups, a rack for the root), played on
    control planes with COMPOSITE_GATES: a stepped scenario of one of COMPOSITE_SHAPES,
    cycled by the scenario's rank in the family; the runner reports each bound member's
    rack."""
    shape = list(COMPOSITE_SHAPES)[b.ordinal % len(COMPOSITE_SHAPES)]
    COMPOSITE_SHAPES[shape](Trees(b, shape))


# -- the batching family (OpportunisticBatching) ------------------------------------------
# Its pair of control planes runs the gate explicitly on (it is on by default) and both
# schedulers with PodTopologySpread's defaultingType List and no default constraints
# (scheduler_perf batching/scheduler-config-no-topology.yaml), so that pods are signed.
BATCHING_GATES = "OpportunisticBatching=true"
NO_DEFAULT_SPREAD: Json = {"defaultingType": "List", "defaultConstraints": []}


def fam_batching(b: Builder) -> None:
    """Alike pods in a row, which both schedulers place on the hint the previous pod's
    ranking gives: one per node (host port 80, scheduler_perf's HostPortConflict), a
    node's CPU nearly filled (ResourceSaturation), or small enough that the last chosen
    node still fits and is re-scored; a different pod now and then (a new signature)."""
    r = b.rng
    nodes = b.nodes(r.randint(3, 8))
    ns = b.namespace("a")
    shape = ("hostport", "saturation", "small")[b.ordinal % 3]
    for _ in range(r.randint(len(nodes), len(nodes) + 4)):
        if shape == "hostport":
            p = b.pod(ns, cpu="100m", memory="100Mi")
            p["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 80}]
        elif shape == "saturation":
            p = b.pod(ns, cpu="900m", memory="1Gi")
        else:
            p = b.pod(ns, cpu="250m", memory="256Mi")
        if b.maybe(0.1):  # another signature breaks the batch
            p["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "50m"


# -- the dra-workload family (DRAWorkloadResourceClaims) ------------------------------------
WORKLOAD_CLAIM_GATES = ("DynamicResourceAllocation=true,GenericWorkload=true,"
                        "DRAWorkloadResourceClaims=true")


class Claims(Gang):
    """A gang scenario with devices: `gpu_node(...)` adds a node whose ResourceSlice offers
    `gpus` devices, `shared(...)` a claim (or template) of the PodGroup that its members
    name, `own(...)` a template each member gets a claim of its own from. Placement is
    decided by construction (which node has the devices, selectors), so node names and
    devices are compared exactly; every bound pod's claims are reported with what their
    status.reservedFor names (the PodGroup or pods)."""

    def __init__(self, b: Builder, shape: str) -> None:
        super().__init__(b, shape)
        b.sc.exact_nodes = True
        b.sc.claims = True

    def gpu_node(self, cpu: int, gpus: int, pool: str = "") -> Json:
        n = self.b.node(str(cpu), "8Gi", labels={"pool": pool} if pool else None)
        name = n["metadata"]["name"]
        if gpus:
            self.b.obj({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                        "metadata": {"name": f"{name}-gpu", "labels": {NODE_LABEL: "true"}},
                        "spec": {"driver": DRA_DRIVER, "nodeName": name,
                                 "pool": {"name": name, "generation": 1,
                                          "resourceSliceCount": 1},
                                 "devices": [{"name": f"gpu-{i}"} for i in range(gpus)]}})
        return n

    def _spec(self, count: int) -> Json:
        return {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": DEVICE_CLASS, "allocationMode": "ExactCount",
            "count": count}}]}}

    def shared(self, name: str, template: bool, count: int = 1) -> Json:
        """A claim (or a template) for the PodGroup: its spec.resourceClaims entry."""
        if template:
            self.b.obj({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                        "metadata": {"name": name, "namespace": self.ns},
                        "spec": {"spec": self._spec(count)}})
            return {"name": "shared", "resourceClaimTemplateName": name}
        self.b.obj({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                    "metadata": {"name": name, "namespace": self.ns},
                    "spec": self._spec(count)})
        return {"name": "shared", "resourceClaimName": name}

    def own(self, name: str) -> Json:
        self.b.obj({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                    "metadata": {"name": name, "namespace": self.ns},
                    "spec": {"spec": self._spec(1)}})
        return {"name": "own", "resourceClaimTemplateName": name}

    def cgroup(self, name: str, min_count: int | None, claims: list[Json]) -> Action:
        pg = podgroup(self.ns, name, min_count)
        pg["spec"]["resourceClaims"] = claims
        return self.create(pg)

    def cmembers(self, group: str, count: int, cpu: str, claims: list[Json], *,
                 start: int = 0, **spec: Any) -> list[Action]:
        return [self.pod(f"{group}{i}", group, cpu, resourceClaims=claims, **spec)
                for i in range(start, start + count)]


def _wc_shared_fits(g: Claims) -> None:
    """A gang whose members share one device of their PodGroup (a claim, or one made from
    a template for the group): all land on the one node with devices, the claim reserved
    for the PodGroup."""
    r = g.b.rng
    g.gpu_node(8, 0)
    g.gpu_node(8, r.randint(1, 2))
    k = r.randint(2, 3)
    shared = g.shared(f"{g.b.p}-shared", template=g.b.maybe())
    g.step(g.cgroup("a", k, [shared]))
    g.each(g.cmembers("a", k, "1", [shared]))


def _wc_shared_too_small(g: Claims) -> None:
    """The node with the devices cannot hold the whole gang: nothing is bound (the other
    node has room but no device for the shared claim)."""
    r = g.b.rng
    g.gpu_node(2, 1)
    g.gpu_node(8, 0)
    k = r.randint(2, 3)
    shared = g.shared(f"{g.b.p}-shared", template=g.b.maybe())
    g.step(g.cgroup("a", k, [shared]))
    g.each(g.cmembers("a", k, "1500m", [shared]))


def _wc_shared_and_own(g: Claims) -> None:
    """Each member has a device of its own besides the group's shared one: the node with
    enough devices for both takes the gang, or none fits (one device too few). The pod's
    own claim comes first: with the shared one first, which devices the claims get
    depends on which member wins the PreBind race (PREBIND_RACE in the runner; the
    allocations of a later member go to its claims in the wrong order, FINDINGS.md)."""
    r = g.b.rng
    k = 2
    g.gpu_node(8, k + 1 - (1 if g.b.maybe(0.3) else 0))
    g.gpu_node(8, 1)
    shared = g.shared(f"{g.b.p}-shared", template=g.b.maybe())
    own = g.own(f"{g.b.p}-own")
    claims = [own, shared]
    g.step(g.cgroup("a", k, [shared]))
    g.each(g.cmembers("a", k, r.choice(["500m", "1"]), claims))


def _wc_basic_one_by_one(g: Claims) -> None:
    """A basic PodGroup whose members come one at a time: the first allocates the group's
    claim for the PodGroup, the later ones find it reserved for their group and follow it
    to its node (until the node is full)."""
    r = g.b.rng
    g.gpu_node(r.choice([2, 3]), 1)
    g.gpu_node(8, 1)
    shared = g.shared(f"{g.b.p}-shared", template=g.b.maybe(), count=1)
    g.step(g.cgroup("a", None, [shared]))
    for a in g.cmembers("a", r.randint(2, 4), "1", [shared]):
        g.step(a)


def _wc_not_a_group_claim(g: Claims) -> None:
    """Members name a claim that is not their PodGroup's (another name in the pod than in
    the group): each member reserves it for itself; the claim stays shared by the pods."""
    r = g.b.rng
    g.gpu_node(8, 1)
    g.gpu_node(8, 0)
    k = r.randint(2, 3)
    shared = g.shared(f"{g.b.p}-shared", template=False)
    other = {**shared, "name": "mine"}
    g.step(g.cgroup("a", k, [shared]))
    g.each(g.cmembers("a", k, "1", [other]))


def _wc_reallocate(g: Claims) -> None:
    """A gang bound with its group's claim on one node is deleted; new members of the
    same group may only go to another node: PodGroupPostFilter frees the group's claim
    there (deallocated; or, when no node is left to try the claim on, the PodGroup
    taken out of its reservedFor), and the claim is allocated anew where the members fit,
    if they do."""
    r = g.b.rng
    g.gpu_node(4, 1, pool="a")
    g.gpu_node(4, 1 if g.b.maybe(0.7) else 0, pool="b")
    shared = g.shared(f"{g.b.p}-shared", template=g.b.maybe())
    g.step(g.cgroup("x", 1, [shared]))
    first = g.cmembers("x", 1, "1", [shared], nodeSelector={"pool": "a"})
    g.each(first)
    g.step(g.delete("x0"))
    # pool c: no node at all, so the claim is unusable nowhere and the PodGroup is taken
    # out of its reservedFor instead.
    pool = r.choice(["b", "b", "c"])
    g.step(*g.cmembers("x", 1, "1", [shared], start=1, nodeSelector={"pool": pool}))


def _wc_two_groups(g: Claims) -> None:
    """Two gangs, each with a claim of its own group, one device per node: the first
    takes the node its selector names, the second gets the other node's device."""
    r = g.b.rng
    g.gpu_node(8, 1, pool="a")
    g.gpu_node(8, 1, pool="b")
    sa = g.shared(f"{g.b.p}-sa", template=g.b.maybe())
    sb = {**g.shared(f"{g.b.p}-sb", template=g.b.maybe())}
    k = r.randint(1, 2)
    g.step(g.cgroup("a", k, [sa]), g.cgroup("b", k, [sb]))
    g.each(g.cmembers("a", k, "1", [sa], nodeSelector={"pool": "a"}))
    g.each(g.cmembers("b", k, "1", [sb]))


WORKLOAD_CLAIM_SHAPES: dict[str, Callable[[Claims], None]] = {
    "shared_fits": _wc_shared_fits,
    "shared_too_small": _wc_shared_too_small,
    "shared_and_own": _wc_shared_and_own,
    "basic_one_by_one": _wc_basic_one_by_one,
    "not_a_group_claim": _wc_not_a_group_claim,
    "reallocate": _wc_reallocate,
    "two_groups": _wc_two_groups,
}


def fam_dra_workload(b: Builder) -> None:
    """PodGroups with ResourceClaims shared by their members (PodGroup
    spec.resourceClaims), played on control planes with WORKLOAD_CLAIM_GATES: a stepped
    scenario of one of WORKLOAD_CLAIM_SHAPES, cycled by the scenario's rank in the family;
    the runner reports each bound pod's devices and what its claims are reserved for."""
    shape = list(WORKLOAD_CLAIM_SHAPES)[b.ordinal % len(WORKLOAD_CLAIM_SHAPES)]
    WORKLOAD_CLAIM_SHAPES[shape](Claims(b, shape))


FAMILIES: dict[str, Callable[[Builder], None]] = {
    "resources": fam_resources,
    "init-sidecar": fam_init_sidecar,
    "overhead": fam_overhead,
    "pod-resources": fam_pod_resources,
    "taints": fam_taints,
    "node-affinity": fam_node_affinity,
    "node-selector": fam_node_selector,
    "pod-affinity": fam_pod_affinity,
    "spread": fam_spread,
    "default-spread": fam_default_spread,
    "host-ports": fam_host_ports,
    "volumes": fam_volumes,
    "gates": fam_gates,
    "no-nodes": fam_no_nodes,
    "unschedulable": fam_unschedulable,
    "dra": fam_dra,
    "dra-extended": fam_dra_extended,
    "dra-allocated": fam_dra_allocated,
    "preemption": fam_preemption,
    "mixed": fam_mixed,
    "csi-limits": fam_csi_limits,
    "extender": fam_extender,
    "gang": fam_gang,
    "node-features": fam_node_features,
    "resize": fam_resize,
    "gang-topology": fam_gang_topology,
    "batching": fam_batching,
    "dra-workload": fam_dra_workload,
    "gang-composite": fam_gang_composite,
}
FAMILY_NAMES = list(FAMILIES)
# Families played on control planes with feature gates of their own (hack/cluster.sh's
# POLSCHED_FEATURE_GATES; the oracle gets them too): family -> gate list.
FAMILY_GATES = {"gang": GANG_GATES, "gang-topology": TOPOLOGY_GATES,
                "batching": BATCHING_GATES, "dra-workload": WORKLOAD_CLAIM_GATES,
                "gang-composite": COMPOSITE_GATES}


def generate(seed: int, index: int, family: str | None = None,
             ordinal: int | None = None) -> Scenario:
    """Scenario `index` of `seed` (its family: FAMILY_NAMES[index % len], unless given;
    `ordinal`, its rank within the family, defaults to what generate_all would give)."""
    if family is None:
        family = FAMILY_NAMES[index % len(FAMILY_NAMES)]
        if ordinal is None:
            ordinal = index // len(FAMILY_NAMES)
    rng = random.Random(f"{seed}/{index}/{family}")
    sc = Scenario(index=index, seed=seed, family=family)
    FAMILIES[family](Builder(sc, rng, ordinal if ordinal is not None else index))
    return sc


def generate_all(seed: int, count: int, families: list[str] | None = None) -> list[Scenario]:
    """`count` scenarios; with `families`, only those (indices still distinct)."""
    if not families:
        return [generate(seed, i) for i in range(count)]
    return [generate(seed, i, families[i % len(families)], i // len(families))
            for i in range(count)]
