"""`polsched import`: a kube-scheduler configuration as SchedulingPolicies.

Two inputs:
- KubeSchedulerConfiguration (kubescheduler.config.k8s.io/v1): one SchedulingPolicy per
  profile. Plugins are merged as kube-scheduler merges them (default profile, then
  multiPoint, then each extension point: `disabled` removes, "*" removes every default,
  `enabled` adds or re-weights); pluginConfig args go with their plugin; the top-level
  extenders go to every profile.
- a legacy Policy file (kind: Policy, apiVersion v1; removed from kube-scheduler in
  v1.23): predicates and priorities map to the plugins that replaced them (upstream
  pkg/scheduler/framework/plugins/legacy_registry.go, v1.22), extenders as they are.

DefaultPreemption and SchedulingGates, which polsched runs outside its filters and
scorers, follow their extension points (postFilter, preEnqueue, multiPoint): disabled there,
they go to spec.disabledPlugins; DefaultPreemption's args become spec.preemption.
What polsched has no equivalent for (volume plugins, queue sort, binding plugins,
predicates without a plugin) is listed on stderr; the output validates with
`polsched validate`. Pure data conversion but for reading the file.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from polsched.api import API_VERSION, KIND
from polsched.api.admission import DEFAULT_SCHEDULER
from polsched.objects import Json
from polsched.plugins import DEFAULT_FILTERS, DEFAULT_SCORERS, REGISTRY

KSC_API_VERSION = "kubescheduler.config.k8s.io/v1"
EXTENSION_POINTS = ("queueSort", "preEnqueue", "preFilter", "filter", "postFilter",
                    "preScore", "score", "reserve", "permit", "preBind", "bind", "postBind")
_WHY = {
    "PrioritySort": "polsched's queue always orders by priority, then arrival (PrioritySort)",
    "DefaultBinder": "polsched binds with a v1 Binding (DefaultBinder's behaviour)",
}
# Default plugins polsched runs outside the filters and scorers, and the extension points
# (besides multiPoint) where a KubeSchedulerConfiguration enables or disables them.
DEFAULT_PREEMPTION = "DefaultPreemption"
SCHEDULING_GATES = "SchedulingGates"
GANG_SCHEDULING = "GangScheduling"
# The schedulerName a default-scheduler profile is imported under.
IMPORTED_DEFAULT = "polsched-default"
_OWN_POINT = {DEFAULT_PREEMPTION: "postFilter", SCHEDULING_GATES: "preEnqueue",
              GANG_SCHEDULING: "preEnqueue"}
PREEMPTION_ARGS = {"minCandidateNodesPercentage", "minCandidateNodesAbsolute"}

# legacy_registry.go (v1.22): predicate -> plugins.
LEGACY_PREDICATES: dict[str, tuple[str, ...]] = {
    "PodFitsResources": ("NodeResourcesFit",),
    "PodFitsHostPorts": ("NodePorts",),
    "PodFitsPorts": ("NodePorts",),
    "HostName": ("NodeName",),
    "PodFitsHost": ("NodeName",),
    "MatchNodeSelector": ("NodeAffinity",),
    "GeneralPredicates": ("NodeResourcesFit", "NodeName", "NodePorts", "NodeAffinity"),
    "PodToleratesNodeTaints": ("TaintToleration",),
    "CheckNodeUnschedulable": ("NodeUnschedulable",),
    "MatchInterPodAffinity": ("InterPodAffinity",),
    "EvenPodsSpread": ("PodTopologySpread",),
}
# predicate -> scheduler plugin upstream, for the report.
LEGACY_UNSUPPORTED_PREDICATES = {
    "NoVolumeZoneConflict": "VolumeZone", "MaxEBSVolumeCount": "EBSLimits",
    "MaxGCEPDVolumeCount": "GCEPDLimits", "MaxAzureDiskVolumeCount": "AzureDiskLimits",
    "MaxCSIVolumeCountPred": "NodeVolumeLimits", "MaxCinderVolumeCount": "CinderLimits",
    "CheckVolumeBinding": "VolumeBinding", "NoDiskConflict": "VolumeRestrictions",
    "CheckServiceAffinity": "ServiceAffinity",
}
# legacy_registry.go: priority -> (plugin, args).
LEGACY_PRIORITIES: dict[str, tuple[str, Json]] = {
    "LeastRequestedPriority": ("NodeResourcesFit",
                               {"scoringStrategy": {"type": "LeastAllocated"}}),
    "MostRequestedPriority": ("NodeResourcesFit", {"scoringStrategy": {"type": "MostAllocated"}}),
    "BalancedResourceAllocation": ("NodeResourcesBalancedAllocation", {}),
    "InterPodAffinityPriority": ("InterPodAffinity", {}),
    "NodeAffinityPriority": ("NodeAffinity", {}),
    "TaintTolerationPriority": ("TaintToleration", {}),
    "ImageLocalityPriority": ("ImageLocality", {}),
    "EvenPodsSpreadPriority": ("PodTopologySpread", {}),
}
LEGACY_UNSUPPORTED_PRIORITIES = {
    "SelectorSpreadPriority": "SelectorSpread (removed upstream; PodTopologySpread's "
                              "default constraints replace it)",
    "ServiceSpreadingPriority": "SelectorSpread", "NodePreferAvoidPodsPriority":
    "NodePreferAvoidPods (removed upstream)", "EqualPriority": "no plugin: every node equal",
    "ResourceLimitsPriority": "no plugin",
}


@dataclass
class Profile:
    """A pipeline being assembled: filters (name -> args) and scorers (name -> weight)."""

    filters: dict[str, Json | None] = field(default_factory=dict)
    scorers: dict[str, int] = field(default_factory=dict)
    args: dict[str, Json] = field(default_factory=dict)
    # DefaultPreemption and SchedulingGates: on, as in the default profile.
    others: dict[str, bool] = field(default_factory=lambda: {
        DEFAULT_PREEMPTION: True, SCHEDULING_GATES: True, GANG_SCHEDULING: True})
    preemption_args: Json = field(default_factory=dict)

    @classmethod
    def defaults(cls) -> Profile:
        return cls({n: None for n in DEFAULT_FILTERS}, dict(DEFAULT_SCORERS))


class Importer:
    def __init__(self, source: str) -> None:
        self.source = source
        self.notes: list[str] = []

    def note(self, where: str, message: str) -> None:
        self.notes.append(f"{self.source}: {where}: {message}")

    # -- KubeSchedulerConfiguration ----------------------------------------------------
    def from_config(self, cfg: Mapping[str, Any]) -> list[Json]:
        profiles = cfg.get("profiles") or [{"schedulerName": "default-scheduler"}]
        extenders = [self.extender(e, f"extenders[{i}]")
                     for i, e in enumerate(cfg.get("extenders") or ())]
        pct = cfg.get("percentageOfNodesToScore")
        out = []
        for i, p in enumerate(profiles):
            where = f"profiles[{i}]"
            prof = Profile.defaults()
            plugins = p.get("plugins") or {}
            self.apply_set(prof, plugins.get("multiPoint") or {}, "multiPoint",
                           f"{where}.plugins.multiPoint")
            for point in EXTENSION_POINTS:
                if point in plugins:
                    self.apply_set(prof, plugins[point] or {}, point,
                                   f"{where}.plugins.{point}")
            for j, pc in enumerate(p.get("pluginConfig") or ()):
                name = str(pc.get("name") or "")
                if name == DEFAULT_PREEMPTION:
                    self.preemption_args(prof, pc.get("args") or {},
                                         f"{where}.pluginConfig[{j}].args")
                elif name in REGISTRY:
                    prof.args[name] = dict(pc.get("args") or {})
                    # apiVersion/kind of typed args are kube-scheduler's, not ours.
                    prof.args[name].pop("apiVersion", None)
                    prof.args[name].pop("kind", None)
                else:
                    self.note(f"{where}.pluginConfig[{j}]",
                              f"args of {name} dropped: polsched has no plugin {name}")
            sname = str(p.get("schedulerName") or "default-scheduler")
            if dns_name(sname) != sname:
                # A pod's spec.schedulerName must be a DNS subdomain (pod validation), so
                # no pod could ever name this profile as it is.
                self.note(f"{where}.schedulerName", f"{sname!r} is not a DNS subdomain, "
                          f"which pods require: imported as {dns_name(sname)!r}")
                sname = dns_name(sname)
            if sname == DEFAULT_SCHEDULER:
                # kube-scheduler keeps that name; a policy may not claim it (api.admission).
                self.note(f"{where}.schedulerName", f"{sname!r} is kube-scheduler's own and "
                          f"reserved: imported as {IMPORTED_DEFAULT!r} (pods opt in with "
                          f"spec.schedulerName: {IMPORTED_DEFAULT})")
                sname = IMPORTED_DEFAULT
            out.append(self.policy(sname, prof, extenders,
                                   p.get("percentageOfNodesToScore", pct)))
        return out

    def apply_set(self, prof: Profile, pset: Mapping[str, Any], point: str, where: str) -> None:
        """kube-scheduler's mergePluginSet for one extension point (or multiPoint)."""
        filters = point in ("multiPoint", "filter")
        scores = point in ("multiPoint", "score")
        for d in pset.get("disabled") or ():
            name = str(d.get("name") or "")
            for other, own in _OWN_POINT.items():
                if name in ("*", other) and point in ("multiPoint", own):
                    prof.others[other] = False
            if name == "*":
                if filters:
                    prof.filters.clear()
                if scores:
                    prof.scorers.clear()
                continue
            if filters:
                prof.filters.pop(name, None)
            if scores:
                prof.scorers.pop(name, None)
        for j, e in enumerate(pset.get("enabled") or ()):
            name = str(e.get("name") or "")
            if name in _OWN_POINT:
                if point in ("multiPoint", _OWN_POINT[name]):
                    prof.others[name] = True
                else:
                    self.note(f"{where}.enabled[{j}]", f"{name} at {point}: polsched runs "
                              f"it at {_OWN_POINT[name]} only")
                continue
            spec = REGISTRY.get(name)
            if spec is None:
                why = _WHY.get(name, f"polsched has no plugin {name}")
                self.note(f"{where}.enabled[{j}]", f"{name} not imported: {why}")
                continue
            if point not in ("multiPoint", "filter", "score", "preFilter", "preScore"):
                self.note(f"{where}.enabled[{j}]", f"{name} at {point}: polsched has no "
                          f"{point} extension point; {name} runs where it filters or scores")
                continue
            if filters and spec.filter is not None:
                prof.filters.setdefault(name, None)
            if scores and spec.score is not None:
                weight = int(e.get("weight") or 0)
                prof.scorers[name] = weight or prof.scorers.get(name) or 1
            if (point == "filter" and spec.filter is None) or \
                    (point == "score" and spec.score is None):
                self.note(f"{where}.enabled[{j}]", f"{name} has no {point} in polsched")

    def preemption_args(self, prof: Profile, args: Mapping[str, Any], where: str) -> None:
        """DefaultPreemptionArgs -> spec.preemption (polsched validates the values)."""
        for key, value in args.items():
            if key in PREEMPTION_ARGS:
                prof.preemption_args[key] = value
            elif key not in ("apiVersion", "kind"):
                self.note(f"{where}.{key}", "not imported: DefaultPreemptionArgs has no "
                          "such field in polsched's spec.preemption")

    # -- legacy Policy -----------------------------------------------------------------
    def from_legacy(self, pol: Mapping[str, Any], name: str) -> list[Json]:
        prof = Profile.defaults()
        if "predicates" in pol:
            prof.filters = {}
            for i, pr in enumerate(pol.get("predicates") or ()):
                self.legacy_predicate(prof, pr, f"predicates[{i}]")
        if "priorities" in pol:
            prof.scorers = {}
            for i, pr in enumerate(pol.get("priorities") or ()):
                self.legacy_priority(prof, pr, f"priorities[{i}]")
        for key in ("hardPodAffinitySymmetricWeight", "alwaysCheckAllPredicates"):
            if key in pol:
                self.note(key, "no equivalent: not imported")
        extenders = [self.extender(e, f"extenders[{i}]")
                     for i, e in enumerate(pol.get("extenders") or ())]
        return [self.policy(name, prof, extenders, None)]

    def legacy_predicate(self, prof: Profile, pr: Mapping[str, Any], where: str) -> None:
        name = str(pr.get("name") or "")
        arg = pr.get("argument") or {}
        if "labelsPresence" in arg:
            lp = arg["labelsPresence"]
            op = "Exists" if lp.get("presence") else "DoesNotExist"
            reqs = [{"key": k, "operator": op} for k in lp.get("labels") or ()]
            # Several such predicates add up: a node must pass them all.
            existing = prof.filters.get("NodeLabel") or {"requirements": []}
            existing["requirements"] += reqs
            prof.filters["NodeLabel"] = existing
            return
        if name in LEGACY_PREDICATES:
            for plugin in LEGACY_PREDICATES[name]:
                prof.filters.setdefault(plugin, None)
        elif name in LEGACY_UNSUPPORTED_PREDICATES:
            self.note(where, f"{name} not imported: its plugin "
                      f"{LEGACY_UNSUPPORTED_PREDICATES[name]} has no polsched equivalent")
        else:
            self.note(where, f"{name} not imported: no polsched equivalent")

    def legacy_priority(self, prof: Profile, pr: Mapping[str, Any], where: str) -> None:
        name = str(pr.get("name") or "")
        weight = int(pr.get("weight") or 1)
        arg = pr.get("argument") or {}
        if "labelPreference" in arg:
            lp = arg["labelPreference"]
            op = "Exists" if lp.get("presence") else "DoesNotExist"
            args = prof.args.setdefault("NodeLabel", {"preferred": []})
            args.setdefault("preferred", []).append(
                {"weight": 1, "requirement": {"key": lp.get("label", ""), "operator": op}})
            prof.scorers["NodeLabel"] = prof.scorers.get("NodeLabel", 0) + weight
            return
        if "requestedToCapacityRatioArguments" in arg or name == \
                "RequestedToCapacityRatioPriority":
            rtc = arg.get("requestedToCapacityRatioArguments") or {}
            shape = [{"utilization": int(p.get("utilization", 0)), "score": int(p.get("score", 0))}
                     for p in rtc.get("shape") or ()]
            resources = [{"name": r.get("name"), "weight": int(r.get("weight") or 1)}
                         for r in rtc.get("resources") or ()] or \
                [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}]
            prof.args["NodeResourcesFit"] = {"scoringStrategy": {
                "type": "RequestedToCapacityRatio", "resources": resources,
                "requestedToCapacityRatio": {"shape": shape}}}
            prof.scorers["NodeResourcesFit"] = weight
            return
        if name in LEGACY_PRIORITIES:
            plugin, args = LEGACY_PRIORITIES[name]
            if args:
                prof.args[plugin] = args
            prof.scorers[plugin] = weight
        else:
            why = LEGACY_UNSUPPORTED_PRIORITIES.get(name, "no polsched equivalent")
            self.note(where, f"{name} not imported: {why}")

    # -- shared ------------------------------------------------------------------------
    def extender(self, e: Mapping[str, Any], where: str) -> Json:
        out: Json = {}
        for key in ("urlPrefix", "filterVerb", "prioritizeVerb", "bindVerb", "preemptVerb",
                    "weight", "nodeCacheCapable", "ignorable"):
            if e.get(key) not in (None, ""):
                out[key] = e[key]
        https = e.get("enableHTTPS", e.get("enableHttps"))
        if https:
            out["enableHTTPS"] = True
        timeout = e.get("httpTimeout")
        if isinstance(timeout, int) and not isinstance(timeout, bool):
            # The legacy file's time.Duration: nanoseconds.
            out["httpTimeout"] = f"{timeout / 1e9:g}s"
        elif timeout:
            out["httpTimeout"] = str(timeout)
        if e.get("managedResources"):
            out["managedResources"] = [
                {"name": r["name"], **({"ignoredByScheduler": True}
                                       if r.get("ignoredByScheduler") else {})}
                for r in e["managedResources"]]
        tls = e.get("tlsConfig") or {}
        if tls:
            t: Json = {}
            if tls.get("insecure"):
                t["insecure"] = True
            if tls.get("caData"):
                t["caData"] = tls["caData"]
            for k in ("caFile", "certFile", "keyFile", "certData", "keyData", "serverName"):
                if tls.get(k):
                    self.note(f"{where}.tlsConfig.{k}", "not imported: give the CA as "
                              "tlsConfig.caData or a caSecretRef; client certificates are "
                              "not supported")
            if t:
                out["tlsConfig"] = t
        return out

    def policy(self, scheduler_name: str, prof: Profile, extenders: list[Json],
               pct: Any) -> Json:
        spec: Json = {"schedulerName": scheduler_name}
        if pct:
            spec["percentageOfNodesToScore"] = int(pct)
        default_scorers = dict(DEFAULT_SCORERS)
        all_defaults = set(DEFAULT_FILTERS) | set(default_scorers)
        missing_f = {n for n in DEFAULT_FILTERS if n not in prof.filters}
        missing_s = {n for n in default_scorers if n not in prof.scorers}
        # disabledPlugins removes a default at both points: usable only when every removed
        # plugin is gone from both (or only has the one point).
        disabled = sorted(missing_f | missing_s)
        expressible = all(
            (n not in DEFAULT_FILTERS or n in missing_f)
            and (n not in default_scorers or n in missing_s) for n in disabled)
        gates = prof.others[SCHEDULING_GATES]
        # defaultPlugins: false drops SchedulingGates too: keep the defaults (every filter
        # and scorer disabled) when the profile keeps the gates.
        use_defaults = expressible and (len(disabled) < len(all_defaults) or gates)
        if not use_defaults and gates:
            self.note(f"profile {scheduler_name}", "SchedulingGates not imported: the profile's "
                      "plugins need defaultPlugins: false, which switches it off too")
        if use_defaults and not gates:
            disabled.append(SCHEDULING_GATES)
        if use_defaults and not prof.others[GANG_SCHEDULING]:
            disabled.append(GANG_SCHEDULING)
        if not prof.others[DEFAULT_PREEMPTION]:
            disabled.append(DEFAULT_PREEMPTION)
        filters: list[Json] = []
        scorers: list[Json] = []
        for n, fargs in prof.filters.items():
            args = fargs if fargs is not None else prof.args.get(n)
            if use_defaults and n in DEFAULT_FILTERS and not args:
                continue
            filters.append({"name": n, **({"args": args} if args else {})})
        for n, w in prof.scorers.items():
            args = prof.args.get(n)
            if use_defaults and default_scorers.get(n) == w and not args:
                continue
            scorers.append({"name": n, "weight": w, **({"args": args} if args else {})})
        if not use_defaults:
            spec["defaultPlugins"] = False
            disabled = [n for n in disabled if n == DEFAULT_PREEMPTION]
        if disabled:
            spec["disabledPlugins"] = disabled
        if prof.preemption_args and prof.others[DEFAULT_PREEMPTION]:
            spec["preemption"] = dict(prof.preemption_args)
        if filters:
            spec["filters"] = filters
        if scorers:
            spec["scorers"] = scorers
        if extenders:
            spec["extenders"] = extenders
        return {"apiVersion": API_VERSION, "kind": KIND,
                "metadata": {"name": dns_name(scheduler_name)}, "spec": spec}


def dns_name(name: str) -> str:
    """A valid metadata.name (RFC 1123 subdomain) from a schedulerName."""
    n = re.sub(r"[^a-z0-9.-]+", "-", name.lower()).strip("-.")
    return n[:253] or "imported"


def convert(doc: Mapping[str, Any], source: str, name: str) -> tuple[list[Json], list[str]]:
    """(SchedulingPolicies, notes on what has no equivalent). Raises ValueError when `doc`
    is neither a KubeSchedulerConfiguration nor a legacy Policy."""
    imp = Importer(source)
    kind = doc.get("kind")
    if kind == "KubeSchedulerConfiguration":
        if doc.get("apiVersion") != KSC_API_VERSION:
            imp.note("apiVersion", f"{doc.get('apiVersion')}: read as {KSC_API_VERSION}")
        return imp.from_config(doc), imp.notes
    if kind == "Policy":
        return imp.from_legacy(doc, name), imp.notes
    raise ValueError(f"{source}: kind {kind!r}: expected KubeSchedulerConfiguration "
                     f"({KSC_API_VERSION}) or Policy (the legacy policy file)")


def run(args: argparse.Namespace) -> int:
    path = args.path
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
        doc = yaml.safe_load(text)
    except (OSError, yaml.YAMLError) as e:
        print(f"polsched import: {path}: {e}", file=sys.stderr)
        return 1
    if not isinstance(doc, dict):
        print(f"polsched import: {path}: not a YAML or JSON object", file=sys.stderr)
        return 1
    name = args.name or dns_name(Path(path).stem if path != "-" else "imported")
    try:
        policies, notes = convert(doc, path, name)
    except ValueError as e:
        print(f"polsched import: {e}", file=sys.stderr)
        return 1
    for n in notes:
        print(f"polsched import: {n}", file=sys.stderr)
    sys.stdout.write(dump(policies))
    return 0


class _NoAliases(yaml.SafeDumper):
    """Plain YAML: one plugin's args shared by its filter and scorer entries are written
    out twice rather than as an anchor and alias."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def dump(policies: list[Json]) -> str:
    return "".join("---\n" + yaml.dump(p, Dumper=_NoAliases, sort_keys=False)
                   for p in policies)
