"""After a run, from the pods on the API server: which placements break a workload's rule.

A scheduler that decides must not break them; the no-op binder (round-robin, no rules) is
expected to. The checks are written here from the rules' definitions (the Kubernetes API
reference), not with polsched's plugins: a check must not share the code it checks.

Pods are read into `PodView`s (the few fields the checks need), so that 30 000 pods from
the scale workload cost little memory in the bench process. `check(workload, pods, nodes)`
returns a `Verdict`: the number of violations, what was counted, and facts worth reporting
that are not violations (the spread skew of default-spreading, whose constraints are
ScheduleAnyway).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bench import workloads as wl

HOSTNAME = "kubernetes.io/hostname"

# What `violations` counts, per workload (RESULTS.md prints it).
EXPLAIN: dict[str, str] = {
    "labels": "pods on a node whose tier is not gold or silver, or on a tainted node",
    "affinity": "pods on a node outside zone-0..zone-5, or on a tainted node",
    "extender": "pods on a node the extender filters out (every 10th), or on a tainted node",
    "pod-anti-affinity": "measured pods that share their node with another color=green pod "
                         "(initial or measured): the required anti-affinity per hostname",
    "topology-spreading": "color=blue pods beyond maxSkew 5: per zone, the pods above "
                          "(fewest in a zone + 5), from the final placement",
    "mixed": "pods on a node outside their required zones, or on a tainted node they do not "
             "tolerate, plus the nodes whose pods request more cpu or memory than it has",
    "gangs-of-3": "gangs bound in part (some but not all of a PodGroup's minCount "
                  "members bound: a gang is bound whole or not at all), plus pods on an "
                  "unknown node and nodes whose pods request more cpu or memory than it "
                  "has (scheduler_perf's 4-CPU nodes)",
    "gangs-of-1000": "gangs bound in part (some but not all of a PodGroup's minCount "
                     "members bound: a gang is bound whole or not at all), plus pods on an "
                     "unknown node and nodes whose pods request more cpu or memory than it "
                     "has (scheduler_perf's 4-CPU nodes)",
    "dra": "measured pods bound without an allocated claim, or with a device from another "
           "node's pool, plus devices allocated to more than one claim (initial claims "
           "included)",
    "default-spreading": "none can be: the system default constraints are ScheduleAnyway; "
                         "the final zone and hostname skews of the Service's pods are "
                         "reported for information",
}
DEFAULT_EXPLAIN = "pods on a tainted node (no bench pod tolerates the taint)"


@dataclass(frozen=True)
class PodView:
    namespace: str
    name: str
    node: str | None
    labels: Mapping[str, str] = field(default_factory=dict)
    cpu_milli: int = 0
    memory: int = 0
    tolerations: tuple[Mapping[str, Any], ...] = ()
    # requiredDuringScheduling nodeSelectorTerms (ORed; each term's expressions ANDed)
    node_terms: tuple[Mapping[str, Any], ...] = ()
    group: str | None = None  # spec.schedulingGroup.podGroupName

    @classmethod
    def of(cls, pod: Mapping[str, Any]) -> PodView:
        meta = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        cpu = mem = 0
        for c in spec.get("containers") or ():
            req = (c.get("resources") or {}).get("requests") or {}
            if "cpu" in req:
                cpu += _milli(req["cpu"])
            if "memory" in req:
                mem += _bytes(req["memory"])
        affinity = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution") or {}
        return cls(namespace=meta.get("namespace", ""), name=meta.get("name", ""),
                   node=spec.get("nodeName") or None,
                   labels=dict(meta.get("labels") or {}), cpu_milli=cpu, memory=mem,
                   tolerations=tuple(spec.get("tolerations") or ()),
                   node_terms=tuple(affinity.get("nodeSelectorTerms") or ()),
                   group=(spec.get("schedulingGroup") or {}).get("podGroupName"))


@dataclass
class Verdict:
    violations: int = 0
    # the violations by kind (kinds with 0 are listed too, so a report says what was checked)
    by_kind: dict[str, int] = field(default_factory=dict)
    # facts that are not violations (skews), for the report
    info: dict[str, Any] = field(default_factory=dict)


# -- quantities ---------------------------------------------------------------------------
_SUFFIX = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 10**3, "M": 10**6,
           "G": 10**9, "T": 10**12}


def _bytes(q: Any) -> int:
    s = str(q)
    for suffix, mult in _SUFFIX.items():
        if s.endswith(suffix):
            return int(float(s[:-len(suffix)]) * mult)
    return int(float(s))


def _milli(q: Any) -> int:
    s = str(q)
    if s.endswith("m"):
        return int(s[:-1])
    return int(float(s) * 1000)


# -- node rules ---------------------------------------------------------------------------
def tolerated(taint: Mapping[str, Any], tolerations: Iterable[Mapping[str, Any]]) -> bool:
    """Whether one toleration matches the taint (v1 Toleration semantics)."""
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint.get("effect"):
            continue
        op = t.get("operator") or "Equal"
        if not t.get("key"):
            if op == "Exists":
                return True  # an empty key with Exists tolerates everything
            continue
        if t["key"] != taint.get("key"):
            continue
        if op == "Exists" or (t.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def untolerated_taint(pod: PodView, node: Mapping[str, Any]) -> bool:
    return any(taint.get("effect") in ("NoSchedule", "NoExecute")
               and not tolerated(taint, pod.tolerations)
               for taint in (node.get("spec") or {}).get("taints") or ())


def _expression(expr: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, op = expr["key"], expr["operator"]
    values: list[str] = list(expr.get("values") or ())
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    if op in ("Gt", "Lt") and key in labels:
        try:
            have, want = int(labels[key]), int(values[0])
        except (ValueError, IndexError):
            return False
        return have > want if op == "Gt" else have < want
    return False


def required_affinity_holds(pod: PodView, node: Mapping[str, Any]) -> bool:
    if not pod.node_terms:
        return True
    labels = (node.get("metadata") or {}).get("labels") or {}
    return any(all(_expression(e, labels) for e in term.get("matchExpressions") or ())
               for term in pod.node_terms)


def _allocatable(node: Mapping[str, Any]) -> tuple[int, int]:
    alloc = (node.get("status") or {}).get("allocatable") or {}
    return _milli(alloc.get("cpu", "0")), _bytes(alloc.get("memory", "0"))


def overcommitted_nodes(pods: Iterable[PodView], nodes: Mapping[str, Mapping[str, Any]]
                        ) -> list[str]:
    """Nodes whose bound pods (every namespace given) request more cpu or memory than
    the node's allocatable."""
    cpu: Counter[str] = Counter()
    mem: Counter[str] = Counter()
    for p in pods:
        if p.node:
            cpu[p.node] += p.cpu_milli
            mem[p.node] += p.memory
    out = []
    for name in sorted(set(cpu) | set(mem)):
        if name not in nodes:
            continue
        a_cpu, a_mem = _allocatable(nodes[name])
        if cpu[name] > a_cpu or mem[name] > a_mem:
            out.append(name)
    return out


# -- spreading ------------------------------------------------------------------------------
def domain_counts(pods: Iterable[PodView], nodes: Mapping[str, Mapping[str, Any]], key: str,
                  selector: Mapping[str, str]) -> dict[str, int]:
    """Per value of the node label `key` (every value the nodes have, 0 included): how
    many pods matching `selector` (matchLabels) are bound there."""
    counts: dict[str, int] = {}
    for n in nodes.values():
        value = ((n.get("metadata") or {}).get("labels") or {}).get(key)
        if value is not None:
            counts.setdefault(value, 0)
    for p in pods:
        if p.node and p.node in nodes and all(p.labels.get(k) == v for k, v in selector.items()):
            value = ((nodes[p.node].get("metadata") or {}).get("labels") or {}).get(key)
            if value is not None:
                counts[value] += 1
    return counts


def skew(counts: Mapping[str, int]) -> int:
    return max(counts.values()) - min(counts.values()) if counts else 0


def beyond_skew(counts: Mapping[str, int], max_skew: int) -> int:
    """Pods above (fewest in a domain + max_skew), summed over the domains."""
    if not counts:
        return 0
    floor = min(counts.values()) + max_skew
    return sum(max(0, c - floor) for c in counts.values())


# -- per workload ---------------------------------------------------------------------------
def gang_counts(workload: wl.Gangs, pods: Iterable[PodView]) -> tuple[int, int, int]:
    """(gangs bound whole, gangs bound in part, gangs with nothing bound) among the
    workload's groups: a gang is whole when at least its minCount (`per_group`) members
    are bound, in part when some but fewer are (all or nothing: the violation)."""
    bound: Counter[str] = Counter(p.group for p in pods
                                  if p.namespace == wl.NAMESPACE and p.node and p.group)
    whole = partial = unbound = 0
    for g in range(workload.groups):
        n = bound[workload.group_name(g)]
        if n >= workload.per_group:
            whole += 1
        elif n:
            partial += 1
        else:
            unbound += 1
    return whole, partial, unbound


def legacy_rule(workload_name: str, extender: bool, node: Mapping[str, Any]) -> bool:
    """The first round's workloads: whether a node breaks the workload's rule (a taint
    always does: no bench pod of those workloads tolerates it)."""
    labels = node["metadata"]["labels"]
    if node["spec"].get("taints"):
        return True
    name = node["metadata"]["name"]
    if workload_name == "labels":
        return labels[wl.TIER] not in ("gold", "silver")
    if workload_name == "affinity":
        return labels[wl.ZONE] not in {f"zone-{z}" for z in range(6)}
    if extender:
        return int(name.rsplit("-", 1)[-1]) % 10 == 0
    return False


def dra_allocations(pods: Sequence[PodView], claims: Sequence[Mapping[str, Any]]) -> Verdict:
    """The DRA workload's checks, from the claims on the server: each bound measured pod's
    claim (the one it owns) is allocated, from the pool of the pod's node (the workload
    names each node's pool after it); no device is in two claims' allocations. Facts: how
    many devices are allocated, and digests of the allocated devices and of the devices
    per node, which a workload that fills every device makes the same for any correct
    scheduler (run.py compares them between schedulers)."""
    import hashlib

    by_owner: dict[str, list[Mapping[str, Any]]] = {}
    holders: Counter[tuple[str, str, str]] = Counter()
    for c in claims:
        meta = c.get("metadata") or {}
        for ref in meta.get("ownerReferences") or ():
            if ref.get("kind") == "Pod" and ref.get("controller"):
                by_owner.setdefault(f"{meta.get('namespace')}/{ref.get('name')}", []).append(c)
        alloc = (c.get("status") or {}).get("allocation") or {}
        for r in (alloc.get("devices") or {}).get("results") or ():
            holders[(str(r.get("driver")), str(r.get("pool")), str(r.get("device")))] += 1
    unallocated = wrong_node = 0
    for p in pods:
        if p.namespace != wl.NAMESPACE or not p.node:
            continue
        owned = by_owner.get(f"{p.namespace}/{p.name}") or []
        allocs = [(c.get("status") or {}).get("allocation") for c in owned]
        if not owned or any(a is None for a in allocs):
            unallocated += 1
            continue
        if any(r.get("pool") != p.node for a in allocs if a
               for r in (a.get("devices") or {}).get("results") or ()):
            wrong_node += 1
    twice = sum(n - 1 for n in holders.values() if n > 1)
    per_node: Counter[str] = Counter(pool for _d, pool, _dev in holders)
    devices = "\n".join("/".join(d) for d in sorted(holders)).encode()
    counts = "\n".join(f"{k}={v}" for k, v in sorted(per_node.items())).encode()
    v = Verdict()
    v.by_kind = {"bound without an allocated claim": unallocated,
                 "device from another node": wrong_node, "device allocated twice": twice}
    v.violations = unallocated + wrong_node + twice
    v.info = {"allocated_devices": len(holders),
              "allocated_devices_digest": hashlib.sha256(devices).hexdigest()[:16],
              "devices_per_node_digest": hashlib.sha256(counts).hexdigest()[:16]}
    return v


def compare_allocations(results: Mapping[str, Mapping[str, Any]]) -> dict[str, Any] | None:
    """Whether polsched and kube-scheduler left the same devices allocated (and the same
    count per node): None unless both runs have the DRA digests."""
    got = {k: (results.get(k) or {}).get("placement") or {} for k in ("polsched", "kube")}
    if not all("allocated_devices_digest" in g for g in got.values()):
        return None
    keys = ("allocated_devices_digest", "devices_per_node_digest")
    return {"identical": all(got["polsched"][k] == got["kube"][k] for k in keys),
            **{f"{s}_{k}": got[s][k] for s in got for k in keys}}


def check(workload: wl.Workload, pods: Sequence[PodView],
          nodes: Mapping[str, Mapping[str, Any]],
          claims: Sequence[Mapping[str, Any]] = ()) -> Verdict:
    """`pods`: every pod of the bench's namespaces after the run (measured ones in
    wl.NAMESPACE, initial ones in wl.OTHER_NAMESPACE); `nodes` by name; `claims`: the
    ResourceClaims of both namespaces (the DRA workload)."""
    measured = [p for p in pods if p.namespace == wl.NAMESPACE and p.node]
    v = Verdict()
    if isinstance(workload, wl.DynamicResources):
        v = dra_allocations(pods, claims)
    elif isinstance(workload, wl.PodAntiAffinity):
        green: Counter[str] = Counter(p.node for p in pods
                                      if p.node and p.labels.get("color") == "green")
        shared = sum(1 for p in measured
                     if p.labels.get("color") == "green" and green[p.node or ""] > 1)
        v.by_kind = {"sharing a node with another green pod": shared}
        v.violations = shared
    elif isinstance(workload, wl.DefaultSpreading):
        zones = domain_counts(measured, nodes, wl.ZONE, wl.SERVICE_SELECTOR)
        hosts = domain_counts(measured, nodes, HOSTNAME, wl.SERVICE_SELECTOR)
        v.info = {"zone_skew": skew(zones), "hostname_skew": skew(hosts),
                  "zone_counts": dict(sorted(zones.items()))}
    elif isinstance(workload, wl.TopologySpreading):
        zones = domain_counts(measured, nodes, wl.ZONE, {"color": "blue"})
        over = beyond_skew(zones, 5)
        v.by_kind = {"beyond maxSkew 5": over}
        v.violations = over
        v.info = {"zone_skew": skew(zones), "zone_counts": dict(sorted(zones.items()))}
    elif isinstance(workload, wl.LoadAware):
        # Placement, not a rule: the mean usage (cores of 32, before the run) of the nodes
        # the pods landed on, against every node's. Lower means load-aware.
        index = {wl.node_name(i): i for i in range(workload.nodes)}
        used = [wl.LoadAware.usage_cores(index[p.node]) for p in measured if p.node in index]
        every = [wl.LoadAware.usage_cores(i) for i in range(workload.nodes)]
        v.info = {"mean_usage_cores_of_chosen_nodes":
                  round(sum(used) / len(used), 2) if used else None,
                  "mean_usage_cores_of_all_nodes": round(sum(every) / max(len(every), 1), 2),
                  "pods_on_nodes_using_under_4_cores": sum(1 for u in used if u < 4)}
    elif isinstance(workload, wl.Gangs):
        whole, partial, unbound = gang_counts(workload, pods)
        unknown = sum(1 for p in measured if p.node not in nodes)
        over_nodes = len(overcommitted_nodes(pods, nodes))
        v.by_kind = {"gangs bound in part": partial, "on an unknown node": unknown,
                     "overcommitted nodes": over_nodes}
        v.violations = partial + unknown + over_nodes
        v.info = {"gangs_whole": whole, "gangs_unbound": unbound}
    elif isinstance(workload, wl.Mixed):
        outside = sum(1 for p in measured if p.node is not None and p.node in nodes
                      and not required_affinity_holds(p, nodes[p.node]))
        tainted = sum(1 for p in measured if p.node is not None and p.node in nodes
                      and untolerated_taint(p, nodes[p.node]))
        over_nodes = len(overcommitted_nodes(pods, nodes))
        unknown = sum(1 for p in measured if p.node not in nodes)
        v.by_kind = {"outside required zones": outside, "untolerated taint": tainted,
                     "overcommitted nodes": over_nodes, "on an unknown node": unknown}
        v.violations = outside + tainted + over_nodes + unknown
    else:
        bad = sum(1 for p in measured if p.node not in nodes
                  or legacy_rule(workload.name, workload.extender, nodes[p.node or ""]))
        v.by_kind = {"placement": bad}
        v.violations = bad
    return v

