"""`polsched explain`: why a pod lands where it lands.

It runs the very pipeline the scheduler runs (scheduler.pipelines.build_pipeline) with
explain=True against a snapshot built by the scheduler's own cache (cluster.ClusterCache,
fed the objects instead of a watch), so resources of bound pods are accounted exactly as
the engine accounts them. Two sources for the objects:

- offline: `--policy F --nodes F --pod F [--pods F]`, YAML or JSON files (a List, or
  several documents);
- live: `POD -n NS [--policy NAME]`, read from the cluster (KUBECONFIG honoured); the
  policy is the one whose schedulerName the pod names.

Extenders are called for real in both modes: the explanation includes their verdicts.
A pod that is already bound is explained as if it were pending: it is not counted on its
node, and its spec.nodeName is cleared.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from polsched.api import API_VERSION, KIND, PLURAL, Policy, PolicyError, load_policy
from polsched.cluster import featuregates
from polsched.cluster.cache import ClusterCache
from polsched.commands import dryrun, snapshot
from polsched.extender.client import ExtenderSetupError
from polsched.framework import listers as ls
from polsched.framework import pod_bounds
from polsched.framework import podgroups as pgs
from polsched.framework import resources as res
from polsched.framework.device_classes import is_dra_extended_resource_name
from polsched.framework.diagnosis import PipelineError, PluginScore
from polsched.framework.interfaces import Handle, PodGroupInfo
from polsched.framework.load import (
    NODE_METRICS_KIND,
    NODE_METRICS_PATH,
    LoadSource,
    ago,
    static_load,
)
from polsched.framework.runtime import Pipeline
from polsched.framework.status import Status
from polsched.framework.types import PodInfo
from polsched.objects import Json
from polsched.plugins import CATALOG, topology_placement
from polsched.preemption.candidates import PreemptionReport
from polsched.scheduler import load_status
from polsched.scheduler.algorithm import schedule_pod
from polsched.scheduler.pipelines import build_pipeline, nominator_of
from polsched.scheduler.schedule_one_podgroup import (
    PodGroupResult,
    build_tree,
    complete_tree,
    placement_capacity,
    pod_group_verdict,
    tree_leaves,
)


class ExplainError(Exception):
    """Something the user has to fix (a file, a name); printed without a traceback."""


# -- the report ------------------------------------------------------------------------
@dataclass(frozen=True)
class NodeUsage:
    """What the load-aware scorers read of one node: its usage from the Metrics API and the
    sample's age (None: no fresh sample; `note` says so, with when it was last seen)."""

    node: str
    cpu: float | None = None  # millicores
    cpu_allocatable: int = 0
    memory: float | None = None  # bytes
    memory_allocatable: int = 0
    age: float | None = None  # seconds
    note: str = ""

    def to_json(self) -> Json:
        out: Json = {"node": self.node}
        if self.cpu is not None:
            out.update(cpuMillicores=round(self.cpu, 1), memoryBytes=round(self.memory or 0),
                       cpuPercent=_pct(self.cpu, self.cpu_allocatable),
                       memoryPercent=_pct(self.memory or 0, self.memory_allocatable),
                       sampleAgeSeconds=None if self.age is None else round(self.age, 1))
        if self.note:
            out["note"] = self.note
        return out


def _pct(used: float, total: int) -> float | None:
    return round(100 * used / total, 1) if total else None


@dataclass
class NodeReport:
    name: str
    # The first failing filter's status; None for a feasible node.
    rejected: Status | None = None
    # scorer (or extender) -> its raw, normalized and weighted score
    scores: dict[str, PluginScore] = field(default_factory=dict)
    total: int | None = None


@dataclass(frozen=True)
class GangMember:
    """One pending member in the pod-group cycle's simulation: the node it would get, or
    why it fits nowhere (its own FailedScheduling text); `tried` False when the cycle
    stopped before it."""

    pod: str
    node: str | None
    reason: str = ""
    tried: bool = True


@dataclass(frozen=True)
class DomainReport:
    """One placement the placement algorithm tried for the group (a domain of the
    topology label, or "" for every node): how many of the group's members it holds
    (already scheduled ones and pending ones that fit, each seeing those before it),
    whether the group fit there in the engine's trial (else that trial's status), and
    when several domains fit, each PlacementScore plugin's weighted score and the total."""

    domain: str
    nodes: int
    holds: int
    feasible: bool
    status: str = ""
    scores: dict[str, int] = field(default_factory=dict)
    total: int | None = None


@dataclass(frozen=True)
class TopologyReport:
    """The placement algorithm's view of the group (TopologyAwareWorkloadScheduling): the
    label its constraint names (None: no constraint, one placement of every node), every
    placement tried, the one chosen and why, or why none was."""

    key: str | None
    domains: list[DomainReport]
    chosen: str | None
    why: str

    def to_json(self) -> Json:
        return {"key": self.key, "chosen": self.chosen, "why": self.why,
                "domains": [{"domain": d.domain, "nodes": d.nodes, "holds": d.holds,
                             "feasible": d.feasible, "status": d.status,
                             "scores": d.scores, "total": d.total} for d in self.domains]}


@dataclass(frozen=True)
class ChildReport:
    """One PodGroup of a composite tree in the engine's trial: whether it fit and its
    status (what its PodGroupInitiallyScheduled condition would say, before any
    preemption text)."""

    group: str
    fits: bool
    message: str


@dataclass(frozen=True)
class GangReport:
    """The pod group of the pod explained, as the pod-group cycle sees it now: minCount
    (None: a basic group), members already scheduled, each pending member's outcome, and
    the group's verdict (its PodGroupInitiallyScheduled message when rejected)."""

    group: str
    min_count: int | None
    scheduled: int
    members: list[GangMember]
    fits: bool
    message: str
    topology: TopologyReport | None = None
    # A tree rooted at a CompositePodGroup (`group` is then "composite:ns/name" and
    # `min_count` its minGroupCount): each of its PodGroups.
    children: list[ChildReport] = field(default_factory=list)

    def to_json(self) -> Json:
        out: Json = {"podGroup": self.group, "minCount": self.min_count,
                     "alreadyScheduled": self.scheduled, "fits": self.fits,
                     "message": self.message,
                     "members": [{"pod": m.pod, "node": m.node, "reason": m.reason,
                                  "tried": m.tried} for m in self.members]}
        if self.topology is not None:
            out["topology"] = self.topology.to_json()
        if self.children:
            out["podGroups"] = [{"podGroup": c.group, "fits": c.fits, "message": c.message}
                                for c in self.children]
        return out


@dataclass
class Report:
    pod: str
    policy: str
    scheduler_name: str
    nodes: list[NodeReport]
    scorers: list[tuple[str, int]]  # (name, weight) in pipeline order, then extenders
    winner: str | None
    deciding_scorer: str = ""
    # When no node fits: the FailedScheduling text kube-scheduler would write.
    message: str = ""
    tied: list[str] = field(default_factory=list)
    # When no node fits and DefaultPreemption ran: its candidates, victims and choice.
    preemption: PreemptionReport | None = None
    # For a pod with ResourceClaims: per node, the devices each request could get and why
    # the others cannot (plugins.dynamic_resources.diagnose), as lines of text.
    devices: dict[str, list[str]] = field(default_factory=dict)
    # For a policy with load-aware scorers: every node's usage as they read it.
    node_usage: list[NodeUsage] = field(default_factory=list)
    # For a member of a PodGroup: the group as a whole (pod_group_algorithm).
    gang: GangReport | None = None

    def preemption_json(self) -> Json | None:
        pr = self.preemption
        if pr is None:
            return None
        out: Json = {
            "candidates": [{"node": c.node, "victims": [
                {"pod": v.key, "priority": v.priority,
                 "pdbViolations": c.pdb_violations.get(v.key, [])} for v in c.victims],
                "numPDBViolations": c.num_pdb_violations} for c in pr.candidates],
            "notCandidates": {n: {"plugin": st.plugin, "code": st.code.name,
                                  "reasons": list(st.reasons)}
                              for n, st in pr.non_candidates.items()},
            "chosen": pr.chosen, "decidingRule": pr.deciding_rule}
        if pr.not_eligible:
            out["notEligible"] = pr.not_eligible
        if pr.not_tried:
            out["notTried"] = pr.not_tried
        if pr.extenders:
            out["extenders"] = pr.extenders
            out["droppedByExtenders"] = pr.dropped_by_extenders
        return out

    def to_json(self) -> Json:
        nodes = []
        for n in self.nodes:
            entry: Json = {"name": n.name, "feasible": n.rejected is None}
            if n.rejected is not None:
                entry["filter"] = {"plugin": n.rejected.plugin, "code": n.rejected.code.name,
                                   "reasons": list(n.rejected.reasons)}
            else:
                entry["scores"] = {k: {"raw": ps.raw, "normalized": ps.normalized,
                                       "weighted": ps.weighted}
                                   for k, ps in n.scores.items()}
                entry["total"] = n.total
            if n.name in self.devices:
                entry["devices"] = self.devices[n.name]
            nodes.append(entry)
        out: Json = {"pod": self.pod, "policy": self.policy,
                     "schedulerName": self.scheduler_name,
                     "scorers": [{"name": s, "weight": w} for s, w in self.scorers],
                     "nodes": nodes, "winner": self.winner,
                     "decidingScorer": self.deciding_scorer}
        if self.tied:
            out["tiedWith"] = self.tied
        if self.message:
            out["message"] = self.message
        preemption = self.preemption_json()
        if preemption is not None:
            out["preemption"] = preemption
        if self.node_usage:
            out["nodeUsage"] = [u.to_json() for u in self.node_usage]
        if self.gang is not None:
            out["gang"] = self.gang.to_json()
        return out


@dataclass(frozen=True)
class Usage:
    """Node usage for an explanation: what the load-aware scorers read (`load`), and
    node -> "last seen 3m ago" for the nodes without metrics, as the running scheduler
    reported them (`last_seen`)."""

    load: LoadSource | None = None
    last_seen: Mapping[str, str] | None = None


async def explain(policy: Policy, pod: Json, nodes: Iterable[Json], pods: Iterable[Json] = (),
                  extenders: Sequence[Any] = (), objects: Iterable[Json] = (),
                  usage: Usage = Usage()) -> Report:
    """Run `policy`'s pipeline for `pod` over `nodes` (with `pods` bound on them, and the
    pending ones nominated to a node counted there). `objects` are the other cluster
    objects plugins read (namespaces, PVCs, Services, PDBs...: any kind in
    framework.listers.KINDS, by their `kind` field; others are ignored). `usage`: the node
    usage load-aware scorers read, and when the nodes without metrics were last seen."""
    node_load, last_seen = usage.load, usage.last_seen
    # A bound pod is decided again as a new pending one; a pending one as it is (its
    # nominatedNodeName counts, as in the engine).
    target = dryrun.pending_copy(pod) if (pod.get("spec") or {}).get("nodeName") else pod
    target_key = PodInfo.from_json(target).key
    cache = ClusterCache(None)
    for n in nodes:
        cache.on_node_event("ADDED", n)
    for p in pods:
        meta = p.get("metadata") or {}
        if f"{meta.get('namespace') or ''}/{meta.get('name') or ''}" == target_key:
            continue  # the pod explained never counts against itself
        cache.on_pod_event("ADDED", p)
    # The nominations the engine's Nominator holds for these pods (simulate's too).
    nominator = nominator_of(cache.pods.values())
    for o in objects:
        kind = ls.KINDS_BY_NAME.get(o.get("kind") or "")
        if kind is not None:
            cache.on_object_event(kind, "ADDED", o)
        elif o.get("kind") == "PodGroup":  # the cluster serves them: gangs as upstream
            cache.pod_groups.served = True
            cache.on_pod_group_event("ADDED", o)
        elif o.get("kind") == pgs.COMPOSITE_KIND:
            cache.on_composite_pod_group_event("ADDED", o)
    # CompositePodGroup on, as the operator's cache has it: PodGroups' parents count.
    cache.pod_groups.set_composite(cache.pod_groups.served and pgs.COMPOSITE_POD_GROUP
                                   in featuregates.scheduler_features())
    # The engine's construction, with listers filled from the objects given.
    pipeline: Pipeline = build_pipeline(
        policy, Handle(listers=cache.listers, nominator=nominator, load=node_load,
                       pod_groups=cache.pod_groups,
                       features=featuregates.scheduler_features()), extenders)
    info = PodInfo.from_json(target)
    refused = pod_bounds.violation(info.spec)
    if refused:  # the engine never queues it (scheduler.profile): no search to explain
        return Report(pod=info.key, policy=policy.name, scheduler_name=policy.scheduler_name,
                      nodes=[NodeReport(n.name) for n in cache.snapshot.nodes], scorers=[],
                      winner=None, message=refused)
    gang = await _explain_gang(pipeline, cache, info)
    result = await schedule_pod(pipeline, info, cache.snapshot, explain=True)
    ex = result.explanation
    scores = {s.node: s for s in ex.scores} if ex is not None else {}
    rejected = ex.filters if ex is not None else (
        result.fit_error.node_statuses if result.fit_error is not None else {})
    reports = []
    for node in cache.snapshot.nodes:
        nr = NodeReport(node.name, rejected=rejected.get(node.name))
        ns = scores.get(node.name)
        if ns is not None:
            nr.scores = dict(ns.plugins)
            nr.total = ns.total
        reports.append(nr)
    scorers = [(s.name, s.weight) for s in pipeline.plugins_for(info).scorers]
    scorers += [(e.name, e.weight) for e in pipeline.extenders
                if e.is_prioritizer() and e.is_interested(info)]
    report = Report(pod=info.key, policy=policy.name, scheduler_name=policy.scheduler_name,
                    nodes=reports, scorers=scorers, winner=result.node,
                    deciding_scorer=result.deciding_scorer, gang=gang)
    # A pod with claims, or with extended resources a DeviceClass may serve
    # (DRAExtendedResource): diagnose says which (None when none).
    if info.spec.get("resourceClaims") or any(
            is_dra_extended_resource_name(n) for n in info.requests):
        report.devices = _devices(pipeline, info, cache)
    if load_status.reads_node_load(pipeline):
        report.node_usage = _node_usage(cache, node_load, last_seen or {})
    if result.node is None:
        report.message = result.fit_error.message if result.fit_error is not None else ""
        post = result.post_filter
        if post is not None and isinstance(post.details, PreemptionReport):
            report.preemption = post.details
    else:
        best = scores[result.node].total if result.node in scores else None
        report.tied = [s.node for s in scores.values()
                       if s.total == best and s.node != result.node]
    return report


def _devices(pipeline: Pipeline, pod: PodInfo, cache: ClusterCache) -> dict[str, list[str]]:
    """DynamicResources' device-level account per node (when the policy runs it)."""
    from polsched.dra import NodeRef
    from polsched.plugins.dynamic_resources import DynamicResources, diagnose

    plugin = next((f.plugin for f in pipeline.filters
                   if isinstance(f.plugin, DynamicResources)), None)
    if plugin is None:
        return {}
    out: dict[str, list[str]] = {}
    for node in cache.snapshot.nodes:
        report = diagnose(plugin, pod, NodeRef(node.name, node.labels), node)
        if report is not None:
            out[node.name] = report.lines()
    return out


def _node_usage(cache: ClusterCache, source: LoadSource | None,
                last_seen: Mapping[str, str]) -> list[NodeUsage]:
    out = []
    for node in cache.snapshot.nodes:
        st = source.state(node.name) if source is not None else None
        cpu_alloc = node.allocatable.get(res.CPU, 0)
        mem_alloc = node.allocatable.get(res.MEMORY, 0)
        if st is None or st.load is None:
            seen = last_seen.get(node.name) or (
                f"last seen {ago(st.age)}" if st is not None and st.age is not None
                else "not served by the Metrics API now")
            out.append(NodeUsage(node.name, cpu_allocatable=cpu_alloc,
                                 memory_allocatable=mem_alloc,
                                 note=f"no metrics for node {node.name} ({seen}): the "
                                      "load-aware scorers give it their neutral score"))
            continue
        out.append(NodeUsage(node.name, st.load.cpu.latest, cpu_alloc, st.load.memory.latest,
                             mem_alloc, st.age))
    return out


# -- output ----------------------------------------------------------------------------
async def _explain_gang(pipeline: Pipeline, cache: ClusterCache, pod: PodInfo
                        ) -> GangReport | None:
    """For a member of a served PodGroup: the pod-group cycle's simulation of its pending
    members (the pod explained first), as the engine would run it now; None otherwise."""
    key = cache.pod_groups.group_of(pod)
    name = pgs.pod_group_name(pod)
    if key is None or name is None:
        return None
    obj = cache.pod_groups.get(pod.namespace, name)
    if obj is None:
        return GangReport(key, None, 0, [], False,
                          f'waiting for pods\'s pod group "{name}" to appear in scheduling '
                          "queue")
    if cache.pod_groups.composite and pgs.parent_name(obj) is not None:
        return await _explain_tree(pipeline, cache, pod, obj)
    state = cache.pod_groups.state(key)
    members = [pod] + [p for p in state.unscheduled_pods()
                       if p.key != pod.key and not p.node_name]
    group = PodGroupInfo(pod.namespace, name, obj)
    # The PodGroupPostFilter plugins as the engine runs them, acting on nothing.
    verdict = await pod_group_verdict(pipeline, cache, group, members)
    outcome, status = verdict.outcome, verdict.status
    out: list[GangMember] = []
    for i, m in enumerate(members):
        if i >= len(outcome.members):
            out.append(GangMember(m.key, None, "not tried: the cycle stopped before it",
                                  tried=False))
            continue
        r = outcome.members[i]
        if r.status.ok:
            out.append(GangMember(m.key, r.node))
        else:
            out.append(GangMember(m.key, None, r.fit_error.message if r.fit_error
                                  is not None else r.status.message))
    topology = await _explain_topology(pipeline, cache, group, members, outcome,
                                       state.scheduled_pods_count)
    return GangReport(key, pgs.min_count(obj), state.scheduled_pods_count, out,
                      status.ok, status.message, topology)


async def _explain_tree(pipeline: Pipeline, cache: ClusterCache, pod: PodInfo, obj: Json
                        ) -> GangReport:
    """For a member of a PodGroup under a CompositePodGroup: the cycle of its whole tree
    (the recursive algorithm, pod_group_verdict) with every PodGroup's pending members,
    the pod explained first; each PodGroup's result (completed from its parent's, as the
    engine submits them) and the root's placements."""
    groups = cache.pod_groups
    root = groups.root_of(pod.namespace, pgs.object_key(obj).split("/", 1)[1])
    info = build_tree(groups, root) if root is not None else None
    if root is None or info is None:
        parent = pgs.parent_name(obj) or ""
        return GangReport(pgs.composite_key(pod.namespace, parent), None, 0, [], False,
                          "failed to build hierarchy snapshot: composite pod group object "
                          f"not found in state for {pgs.composite_key(pod.namespace, parent)}")
    leaves = tree_leaves(info)
    members = [pod] + [p for leaf in leaves for p in groups.state(leaf.key).unscheduled_pods()
                       if p.key != pod.key and not p.node_name]
    scheduled = sum(groups.state(leaf.key).scheduled_pods_count for leaf in leaves)
    verdict = await pod_group_verdict(pipeline, cache, info, members)
    outcome, status = verdict.outcome, verdict.status
    # Each PodGroup's result completed from the algorithm's statuses (the root's before
    # its PodGroupPostFilter message; the root's own line says the final one).
    results = complete_tree(info, replace(outcome, status=outcome.untried or outcome.status))
    by_pod = {m.pod.key: (m, results[leaf.key]) for leaf in leaves
              for m in results[leaf.key].members}
    # What each PodGroup placed in the trial before its result was completed from its
    # parent's (a child that fit under a parent that did not).
    trial = {m.pod.key for r in (outcome.subtree or {}).values() for m in r.members
             if m.status.ok}
    out: list[GangMember] = []
    for m in members:
        found = by_pod.get(m.key)
        if found is None:
            leaf = results.get(pgs.pod_group_key(m) or "")
            why = leaf.status.message if leaf is not None else status.message
            if m.key in trial:
                out.append(GangMember(m.key, None, f"its group fit, its parent did not: {why}"))
            else:
                out.append(GangMember(m.key, None, f"not tried: {why}", tried=False))
            continue
        r, leaf = found
        if r.status.ok and leaf.status.ok:
            out.append(GangMember(m.key, r.node))
        elif r.status.ok:
            out.append(GangMember(m.key, None, leaf.status.message))
        else:
            out.append(GangMember(m.key, None, r.fit_error.message if r.fit_error
                                  is not None else r.status.message))
    children = [ChildReport(leaf.key, results[leaf.key].status.ok,
                            results[leaf.key].status.message) for leaf in leaves]
    topology = await _explain_topology(pipeline, cache, info, members, outcome, scheduled)
    need = pgs.min_group_count(info.pod_group)
    return GangReport(info.key, need, scheduled, out, status.ok, status.message, topology,
                      children)


async def _explain_topology(pipeline: Pipeline, cache: ClusterCache, group: PodGroupInfo,
                            members: Sequence[PodInfo], outcome: PodGroupResult,
                            scheduled: int) -> TopologyReport | None:
    """The placements of the engine's trial (`outcome`, pod_group_algorithm's), each
    domain's room for the group (placement_capacity, the engine's member search), and
    the reason for the choice in words; None when the group has no topology constraint
    and the placement algorithm is off."""
    key = topology_placement.topology_key(group.pod_group)
    if outcome.placements is None:
        if key is None:
            return None
        return TopologyReport(key, [], None, (
            f"{featuregates.TOPOLOGY_AWARE_WORKLOAD_SCHEDULING} is off here, so the "
            "constraint is not applied: set POLSCHED_FEATURE_GATES as the operator has it"))
    label = key if key is not None else "placement"
    domains = []
    for tried in outcome.placements:
        if group.composite:
            # A composite group's room in a domain: its PodGroups that fit there in the
            # engine's trial (minGroupCount counts groups, not members).
            holds = len({pgs.pod_group_key(m.pod) for m in tried.members})
        else:
            holds = scheduled + await placement_capacity(pipeline, cache, members,
                                                         tried.placement)
        domains.append(DomainReport(tried.placement.name, len(tried.placement.nodes), holds,
                                    tried.status.ok, "" if tried.status.ok
                                    else tried.status.message, tried.scores, tried.total))
    if group.composite:
        groups_needed = pgs.min_group_count(group.pod_group)
        need, unit = (1 if groups_needed is None else groups_needed), "groups"
    else:
        need, unit = pgs.effective_min_count(group.pod_group), "members"
    feasible = [d for d in domains if d.feasible]
    if not domains:
        algorithm = outcome.untried or outcome.status  # before the PodGroupPostFilter
        why = (f"no node has the label {key}" if algorithm.message ==
               "no feasible placements found" else algorithm.message)
    elif not feasible:
        closest = max(domains, key=lambda d: d.holds)
        why = (f"no {label} domain can hold {need} {unit}; the closest "
               f"({closest.domain or 'every node'}) holds {closest.holds}")
    elif len(feasible) == 1:
        why = (f"{feasible[0].domain or 'every node'} is the only {label} domain that "
               f"holds the group")
    else:
        ranked = sorted(feasible, key=lambda d: -(d.total or 0))
        best = next(d for d in ranked if d.domain == outcome.chosen)
        parts = ", ".join(f"{n} {v}" for n, v in best.scores.items())
        tied = [d.domain for d in ranked if d.total == best.total and d is not best]
        if tied:
            why = (f"{best.domain} tied at {best.total} ({parts}) with {', '.join(tied)}; "
                   "the tie is broken at random, as kube-scheduler does")
        else:
            runner_up = next(d for d in ranked if d is not best)
            why = (f"{best.domain} has the highest total score, {best.total} ({parts}); "
                   f"next: {runner_up.domain} with {runner_up.total}")
    return TopologyReport(key, domains, outcome.chosen, why)


def _format_gang(g: GangReport) -> list[str]:
    fit = sum(m.node is not None for m in g.members)
    composite, ns, name = pgs.split_key(g.group)
    if composite:
        kind = (f"gang of groups, minGroupCount {g.min_count}" if g.min_count is not None
                else "basic")
        out = [f"CompositePodGroup {ns}/{name} ({kind}): {g.scheduled} member(s) already "
               f"scheduled, {fit} of {len(g.members)} pending member(s) fit"]
        rows = [["PODGROUP", "FITS", "STATUS"]]
        for c in g.children:
            rows.append([c.group, "yes" if c.fits else "no", c.message or "-"])
        out += [dryrun.table(rows)]
    else:
        kind = f"gang, minCount {g.min_count}" if g.min_count is not None else "basic group"
        out = [f"PodGroup {g.group} ({kind}): {g.scheduled} member(s) already scheduled, "
               f"{fit} of {len(g.members)} pending member(s) fit"]
    rows = [["MEMBER", "NODE", "WHY NOT"]]
    for m in g.members:
        rows.append([m.pod, m.node or "-", m.reason])
    out += [dryrun.table(rows)]
    out.append("The group fits: its members bind together." if g.fits
               else f"The group does not fit: {g.message}")
    if g.topology is not None:
        out += _format_topology(g.topology)
    return out


def _format_topology(t: TopologyReport) -> list[str]:
    head = (f"Topology: one domain of {t.key} (spec.schedulingConstraints.topology)"
            if t.key is not None else "Topology: no constraint, one placement of every node")
    out = ["", f"{head}: {len(t.domains)} placement(s) tried, "
               f"{sum(d.feasible for d in t.domains)} feasible"]
    if t.domains:
        plugins = list(dict.fromkeys(n for d in t.domains for n in d.scores))
        rows = [["DOMAIN", "NODES", "HOLDS", "FEASIBLE", *plugins, "TOTAL", "WHY NOT"]]
        for d in t.domains:
            rows.append([d.domain or "(every node)", str(d.nodes), str(d.holds),
                         "yes" if d.feasible else "no",
                         *(str(d.scores[n]) if n in d.scores else "-" for n in plugins),
                         "-" if d.total is None else str(d.total), d.status])
        out.append(dryrun.table(rows))
    out.append(f"Chosen: {t.chosen}: {t.why}" if t.chosen is not None else t.why)
    return out


def format_report(r: Report) -> str:
    out = [f"Pod {r.pod}: SchedulingPolicy {r.policy} (schedulerName {r.scheduler_name}), "
           f"{len(r.nodes)} node(s), {sum(n.rejected is None for n in r.nodes)} feasible", ""]
    rows = [["NODE", "FILTERS", "PLUGIN", "REASON"]]
    for n in r.nodes:
        if n.rejected is None:
            rows.append([n.name, "passed", "", ""])
        else:
            rows.append([n.name, n.rejected.code.name.replace("_", " ").title()
                         .replace(" ", ""), n.rejected.plugin, n.rejected.message])
    out += [dryrun.table(rows), ""]
    feasible = [n for n in r.nodes if n.rejected is None and n.total is not None]
    if feasible and r.scorers:
        out.append("Scores per node, each cell raw/normalized/weighted (weight in brackets):")
        head = ["NODE"] + [f"{name}[{w}]" for name, w in r.scorers] + ["TOTAL"]
        rows = [head]
        for n in sorted(feasible, key=lambda n: (-(n.total or 0), n.name)):
            cells = [n.name]
            for name, _ in r.scorers:
                s = n.scores.get(name)
                cells.append("-" if s is None else f"{s.raw}/{s.normalized}/{s.weighted}")
            cells.append(str(n.total))
            rows.append(cells)
        out += [dryrun.table(rows), ""]
    if r.devices:
        out.append("Devices (DynamicResources), per node:")
        for name, lines in r.devices.items():
            out.append(f"{name}:")
            out += lines
        out.append("")
    if r.node_usage:
        out.append("Node usage the load-aware scorers read (Metrics API):")
        rows = [["NODE", "CPU", "MEMORY", "SAMPLE AGE"]]
        notes = []
        for u in r.node_usage:
            if u.cpu is None:
                rows.append([u.node, "-", "-", "-"])
                notes.append(u.note)
                continue
            rows.append([u.node, f"{u.cpu:.0f}m ({_pct_text(u.cpu, u.cpu_allocatable)})",
                         f"{(u.memory or 0) / 2**20:.0f}Mi "
                         f"({_pct_text(u.memory or 0, u.memory_allocatable)})",
                         "-" if u.age is None else f"{u.age:.0f}s"])
        out += [dryrun.table(rows), *notes, ""]
    if r.gang is not None:
        out += [*_format_gang(r.gang), ""]
    if r.winner is None:
        out.append(f"No node fits: {r.message}")
        if r.preemption is not None:
            out += ["", *_format_preemption(r.preemption)]
    else:
        line = f"Winner: {r.winner}"
        if r.deciding_scorer:
            line += f" (deciding scorer: {r.deciding_scorer})"
        if r.tied:
            line += f"; tied with {', '.join(r.tied)}: the scheduler picks one at random"
        out.append(line)
    return "\n".join(out) + "\n"


def _pct_text(used: float, total: int) -> str:
    pct = _pct(used, total)
    return "?" if pct is None else f"{pct:g}%"


def _format_preemption(pr: PreemptionReport) -> list[str]:
    """DefaultPreemption's reasoning: candidates with victims and PDB violations, the rule
    that chose, and why the other nodes were not candidates."""
    if pr.not_eligible:
        return [f"Preemption: the pod may not preempt: {pr.not_eligible}"]
    out = ["Preemption (DefaultPreemption):"]
    if pr.candidates:
        rows = [["CANDIDATE", "VICTIMS (priority)", "PDB VIOLATIONS"]]
        for c in pr.candidates:
            victims = ", ".join(f"{v.key} ({v.priority})" for v in c.victims)
            broken = "; ".join(f"{k} breaks {', '.join(pdbs)}"
                               for k, pdbs in c.pdb_violations.items())
            rows.append([c.node, victims, f"{c.num_pdb_violations}" +
                         (f" ({broken})" if broken else "")])
        out += [dryrun.table(rows), ""]
    if pr.non_candidates:
        rows = [["NOT A CANDIDATE", "PLUGIN", "REASON"]]
        for name, st in pr.non_candidates.items():
            rows.append([name, st.plugin, st.message])
        out += [dryrun.table(rows), ""]
    if pr.not_tried:
        out.append(f"Not tried (enough candidates found): {', '.join(pr.not_tried)}")
    if pr.extenders:
        line = f"Extenders asked (preemptVerb): {', '.join(pr.extenders)}"
        if pr.dropped_by_extenders:
            line += f"; they dropped {', '.join(pr.dropped_by_extenders)}"
        out.append(line)
    if pr.chosen:
        chosen = next((c for c in pr.candidates if c.node == pr.chosen), None)
        victims = ", ".join(v.key for v in chosen.victims) if chosen else ""
        out.append(f"Nominated: {pr.chosen}, evicting {victims} "
                   f"(deciding rule: {pr.deciding_rule})")
    else:
        out.append("No candidate: nothing is evicted")
    return out


# -- reading objects -------------------------------------------------------------------
def read_objects(path: str) -> list[Json]:
    """Every object in a YAML or JSON file: several documents, and List items, flattened."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise ExplainError(f"{path}: {e.strerror or e}") from e
    try:
        return snapshot.parse_objects(text, path)
    except snapshot.SnapshotError as e:
        raise ExplainError(str(e)) from e


def _of_kind(objs: list[Json], kind: str) -> list[Json]:
    return [o for o in objs if o.get("kind") == kind]


def _load(obj: Json) -> Policy:
    try:
        return load_policy(obj, CATALOG)
    except PolicyError as e:
        raise ExplainError(str(e)) from e


def pick_policy(objs: list[Json], pod: Json, source: str) -> Json:
    """The policy whose schedulerName the pod names (the one the operator runs when several
    claim it: dryrun.owner_of); the only one if there is one."""
    policies = dryrun.policies_in(objs)
    if not policies:
        raise ExplainError(f"{source}: no {KIND} ({API_VERSION}) found")
    if len(policies) == 1:
        return policies[0]
    wanted = (pod.get("spec") or {}).get("schedulerName") or "default-scheduler"
    owner = dryrun.owner_of(policies, wanted)
    if owner is None:
        raise ExplainError(f"{source}: none of the {len(policies)} policies has schedulerName "
                           f"{wanted!r} (the pod's spec.schedulerName)")
    return owner


async def _run_pipeline(policy: Policy, pod: Json, nodes: list[Json], pods: list[Json],
                        client: Any | None, objects: list[Json],
                        usage: Usage = Usage()) -> Report:
    try:
        extenders = await dryrun.open_extenders(policy, client)
    except ExtenderSetupError as e:
        hint = "" if client is not None else \
            "; run `polsched explain POD -n NS` against the cluster"
        raise ExplainError(f"{e}{hint}") from e
    try:
        return await explain(policy, pod, nodes, pods, extenders, objects, usage)
    finally:
        await dryrun.close_extenders(extenders)


async def offline(args: argparse.Namespace) -> Report:
    pod_objs = _of_kind(read_objects(args.pod), "Pod")
    if args.name:
        pod_objs = [p for p in pod_objs if (p.get("metadata") or {}).get("name") == args.name]
    if not pod_objs:
        raise ExplainError(f"{args.pod}: no Pod" + (f" named {args.name!r}" if args.name else ""))
    pod = pod_objs[0]
    policy = _load(pick_policy(read_objects(args.policy), pod, args.policy))
    node_objs = read_objects(args.nodes)
    nodes = _of_kind(node_objs, "Node")
    if not nodes:
        raise ExplainError(f"{args.nodes}: no Node objects")
    pods = _of_kind(node_objs, "Pod")
    # Namespaces, PVCs, Services... may come in the nodes file or any --pods file.
    objects = [o for o in node_objs if o.get("kind") in ls.KINDS_BY_NAME
               or o.get("kind") == "PodGroup"]
    metrics = _of_kind(node_objs, NODE_METRICS_KIND)
    for f in args.pods or ():
        more = read_objects(f)
        pods += _of_kind(more, "Pod")
        objects += [o for o in more if o.get("kind") in ls.KINDS_BY_NAME
                    or o.get("kind") == "PodGroup"]
        metrics += _of_kind(more, NODE_METRICS_KIND)
    # NodeMetrics objects (`polsched snapshot --node-metrics`) are the load-aware scorers'
    # usage; their ages are counted from the newest of them.
    return await _run_pipeline(policy, pod, nodes, pods, None, objects,
                               Usage(static_load(metrics)))


async def live(args: argparse.Namespace) -> Report:
    from polsched.cluster.client import ApiError
    from polsched.commands import connection

    client = connection.client(args)
    try:
        ns = connection.namespace(args)
        try:
            pod = await client.get(f"/api/v1/namespaces/{ns}/pods/{args.name}")
        except ApiError as e:
            raise ExplainError(f"pod {ns}/{args.name}: {e.reason or e.status} {e.message}"
                               ) from e
        base = f"/apis/{API_VERSION}/{PLURAL}"
        if args.policy:
            try:
                policy_obj = await client.get(f"{base}/{args.policy}")
            except ApiError as e:
                raise ExplainError(f"{KIND} {args.policy}: {e.reason or e.status} "
                                   f"{e.message}") from e
        else:
            listed = await client.get(base)
            objs = [{**o, "apiVersion": API_VERSION, "kind": KIND}
                    for o in listed.get("items") or ()]
            policy_obj = pick_policy(objs, pod, "the cluster") if objs else {}
            if not objs:
                raise ExplainError(f"the cluster has no {KIND}")
        policy = _load(policy_obj)
        nodes = (await client.get("/api/v1/nodes")).get("items") or []
        pods = (await client.get("/api/v1/pods")).get("items") or []
        objects: list[Json] = []
        for kind in ls.KINDS:  # what the engine's cache lists for its plugins
            try:
                listed = await client.get(kind.path)
            except ApiError:
                continue  # not served (an older server) or not allowed: left empty
            objects += [{**o, "kind": kind.name} for o in listed.get("items") or ()]
        try:  # PodGroups, when the cluster serves them (GenericWorkload)
            listed = await client.get(pgs.PATH)
            objects += [{**o, "kind": pgs.KIND} for o in listed.get("items") or ()]
        except ApiError:
            pass
        if pgs.COMPOSITE_POD_GROUP in featuregates.scheduler_features():
            try:  # CompositePodGroups (scheduling.k8s.io/v1alpha3), with the gate on
                listed = await client.get(pgs.COMPOSITE_PATH)
                objects += [{**o, "kind": pgs.COMPOSITE_KIND}
                            for o in listed.get("items") or ()]
            except ApiError:
                pass
        # Node usage as the load-aware scorers read it now (nothing when the Metrics API
        # is not served), and when the running scheduler last saw the nodes without it.
        try:
            served = (await client.get(NODE_METRICS_PATH)).get("items") or []
        except ApiError:
            served = []
        node_load = static_load([{**o, "kind": NODE_METRICS_KIND} for o in served],
                                now=time.time())
        last_seen = _last_seen(policy_obj, [n["metadata"]["name"] for n in nodes])
        return await _run_pipeline(policy, pod, nodes, pods, client, objects,
                                   Usage(node_load, last_seen))
    finally:
        await client.close()


def _last_seen(policy_obj: Json, names: Sequence[str]) -> dict[str, str]:
    """node -> "last seen 3m ago" from the policy's MetricsAvailable condition, which the
    scheduler running it writes from its node metrics watcher."""
    conds = (policy_obj.get("status") or {}).get("conditions") or []
    message = next((str(c.get("message") or "") for c in conds
                    if isinstance(c, dict) and c.get("type") == "MetricsAvailable"), "")
    out = {}
    for name in names:
        m = re.search(rf"(?:node |, ){re.escape(name)} \((last seen [^)]*|never seen)\)",
                      message)
        if m:
            out[name] = m.group(1)
    return out


def run(args: argparse.Namespace) -> int:
    # --nodes or --pod means offline, and then --policy is a file, not a policy's name.
    offline_mode = bool(args.pod or args.nodes)
    try:
        if offline_mode:
            missing = [f for f, v in (("--policy", args.policy), ("--nodes", args.nodes),
                                      ("--pod", args.pod)) if not v]
            if missing:
                raise ExplainError(f"offline explain needs {', '.join(missing)} as well "
                                   "(or give POD -n NAMESPACE to explain a pod in the cluster)")
            report = asyncio.run(offline(args))
        else:
            if not args.name:
                raise ExplainError("give POD [-n NAMESPACE] (live) or --policy F --nodes F "
                                   "--pod F (offline)")
            report = asyncio.run(live(args))
    except ExplainError as e:
        print(f"polsched explain: {e}", file=sys.stderr)
        return 1
    except PipelineError as e:
        print(f"polsched explain: the pipeline failed: {e}", file=sys.stderr)
        return 1
    from polsched.commands import output

    if args.output in output.STRUCTURED:
        sys.stdout.write(output.render(report.to_json(), args.output))
    else:
        sys.stdout.write(format_report(report))
    if getattr(args, "heatmap", None):
        from polsched.commands import plot

        output.write(plot.heatmap_svg(report.to_json()), args.heatmap)
    return 0
