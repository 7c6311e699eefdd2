"""Compare kube-scheduler's and polsched's results pod by pod; the table and the JSON.

Per pod, these must be equal: the outcome (bound, Unschedulable, SchedulerError, pending),
the PodScheduled=False message, the first FailedScheduling event's note, what a gated pod
looked like before its gates were removed, the nominated node and the victims of a
preemption, the topology domain of a bound member of a topology-constrained gang (and of
its PodGroup), and the chosen node wherever both sides' top score was unique. A bound pod
whose best score tied on either side is a tie, counted apart and never a difference; when
the two sides then chose different nodes, the scenario's later pods met different
clusters: their differences are counted as "diverged", apart from the real ones.
A difference that docs/differences.md lists on purpose (DOCUMENTED) is counted as
"documented", never as a difference.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from conformance.runner import PodResult, ScenarioResult
from conformance.scenarios import PRIORITY_CLASSES, Scenario
from polsched.objects import Json

FIELDS = ("outcome", "message", "event", "gated", "nominated", "victims", "devices",
          "domain")

# Differences that docs/differences.md lists on purpose, recognised by what polsched says:
# (family, why, predicate on the scenario's pod spec and polsched's result).
DOCUMENTED: list[tuple[str, str, Callable[[Json, PodResult], bool]]] = []


@dataclass
class FamilyStats:
    scenarios: int = 0
    pods: int = 0
    agree: int = 0
    differ: int = 0
    documented: int = 0
    ties: int = 0
    diverged: int = 0
    errors: int = 0
    differing_scenarios: set[int] = field(default_factory=set)


@dataclass
class Comparison:
    differences: list[Json] = field(default_factory=list)
    documented: list[Json] = field(default_factory=list)
    diverged: list[Json] = field(default_factory=list)
    errors: list[Json] = field(default_factory=list)
    families: dict[str, FamilyStats] = field(default_factory=lambda: defaultdict(FamilyStats))
    fields: Counter[str] = field(default_factory=Counter)

    @property
    def pods_differing(self) -> int:
        return len(self.differences)


def _preemption_tie(k: PodResult, p: PodResult, priorities: dict[str, int]) -> bool:
    """Both preempted, other victims on another node, but the two victim sets rank the
    same by upstream's pickOneNodeForPreemption criteria that the suite can tell (highest
    victim priority, sum of priorities, count): the next criterion is the victims' start
    time, which no pod here has (no kubelet), so upstream's pick is arbitrary."""
    if not (k.victims and p.victims) or k.victims == p.victims:
        return False

    def rank(victims: list[str]) -> tuple[int, int, int]:
        prios = [priorities.get(v, 0) for v in victims]
        return max(prios), sum(prios), len(prios)

    return rank(k.victims) == rank(p.victims)


# The random suffix of a generated name (apiserver's generateName: 5 characters of this
# alphabet), e.g. of the ResourceClaim that kube-controller-manager makes from a template
# ("<pod>-<claim>-x7k2q"): it differs between the two control planes.
_GENERATED = re.compile(r"(?<=-)[bcdfghjklmnpqrstvwxz2456789]{5}\b")


def _same(k: Any, p: Any) -> bool:
    if isinstance(k, str) and isinstance(p, str):
        return _GENERATED.sub("*", k) == _GENERATED.sub("*", p)
    return bool(k == p)


def compare_pod(k: PodResult, p: PodResult, priorities: dict[str, int] | None = None
                ) -> tuple[list[str], bool]:
    """(fields that differ, whether the choice of node was a tie on either side)."""
    diff = [f for f in FIELDS if not _same(getattr(k, f), getattr(p, f))]
    tie = False
    if priorities is not None and _preemption_tie(k, p, priorities):
        kn, pn = k.nominated or k.node or "", p.nominated or p.node or ""
        same_text = all((getattr(k, f) or "").replace(kn, pn) == (getattr(p, f) or "")
                        for f in ("message", "event"))
        if same_text and k.outcome == p.outcome:
            return [], True
    if k.node and p.node:
        if k.unique is False or p.unique is False:
            tie = True
            if k.node != p.node and "devices" in diff:
                diff.remove("devices")  # another node, so other pools
        elif k.node != p.node:
            diff.append("node")
    elif k.node != p.node:
        diff.append("node")
    if k.error or p.error:
        diff.append("error")
    return diff, tie


def compare(scenarios: list[Scenario], kube: list[ScenarioResult],
            ours: list[ScenarioResult]) -> Comparison:
    out = Comparison()
    by_index = {s.index: s for s in scenarios}
    for kr, pr in zip(kube, ours, strict=True):
        sc = by_index[kr.index]
        st = out.families[sc.family]
        st.scenarios += 1
        if kr.error or pr.error:
            st.errors += 1
            st.differing_scenarios.add(sc.index)
            out.errors.append({"scenario": sc.index, "seed": sc.seed, "family": sc.family,
                               "kube": kr.error, "polsched": pr.error})
            continue
        diverged = False
        priorities = {f"{s.namespace}/{s.name}":
                      PRIORITY_CLASSES.get(s.pod["spec"].get("priorityClassName") or "",
                                           1000 if s.pod["spec"].get("priorityClassName")
                                           else 0)
                      for s in sc.pods}
        specs: dict[str, Json] = {s.name: s.pod["spec"] for s in sc.pods}
        for k, p in zip(kr.pods, pr.pods, strict=True):
            st.pods += 1
            diff, tie = compare_pod(k, p, priorities)
            why = next((w for _, w, pred in DOCUMENTED
                        if diff and k.pod in specs and pred(specs[k.pod], p)), None)
            if why is not None:
                st.documented += 1
                out.documented.append({"scenario": sc.index, "family": sc.family,
                                       "pod": k.pod, "why": why, "kube": k.to_json(),
                                       "polsched": p.to_json()})
                continue
            if tie:
                st.ties += 1
            record = {"scenario": sc.index, "seed": sc.seed, "family": sc.family,
                      "pod": k.pod, "fields": diff, "kube": k.to_json(),
                      "polsched": p.to_json()}
            if diff and diverged:
                st.diverged += 1
                out.diverged.append(record)
            elif diff:
                st.differ += 1
                st.differing_scenarios.add(sc.index)
                out.fields.update(diff)
                out.differences.append(record)
            else:
                st.agree += 1
            if k.node != p.node:
                diverged = True  # a tie broken differently, or a difference: later pods
                # meet different clusters
    return out


def table(c: Comparison) -> str:
    head = f"{'family':<16}{'scen':>6}{'pods':>6}{'agree':>7}{'differ':>8}{'documented':>12}" \
           f"{'ties':>6}{'diverged':>10}{'errors':>8}"
    lines = [head, "-" * len(head)]
    total = FamilyStats()
    for fam in sorted(c.families):
        s = c.families[fam]
        lines.append(f"{fam:<16}{s.scenarios:>6}{s.pods:>6}{s.agree:>7}{s.differ:>8}"
                     f"{s.documented:>12}{s.ties:>6}{s.diverged:>10}{s.errors:>8}")
        for attr in ("scenarios", "pods", "agree", "differ", "documented", "ties", "diverged",
                     "errors"):
            setattr(total, attr, getattr(total, attr) + getattr(s, attr))
    lines.append("-" * len(head))
    lines.append(f"{'total':<16}{total.scenarios:>6}{total.pods:>6}{total.agree:>7}"
                 f"{total.differ:>8}{total.documented:>12}{total.ties:>6}{total.diverged:>10}"
                 f"{total.errors:>8}")
    if c.fields:
        lines.append("differing fields: " + ", ".join(f"{k} {v}" for k, v in
                                                     c.fields.most_common()))
    return "\n".join(lines)


def report_json(c: Comparison, scenarios: list[Scenario], meta: Json) -> Json:
    differing = {d["scenario"] for d in c.differences} | {e["scenario"] for e in c.errors}
    return {
        **meta,
        "families": {f: {"scenarios": s.scenarios, "pods": s.pods, "agree": s.agree,
                         "differ": s.differ, "documented": s.documented, "ties": s.ties,
                         "diverged": s.diverged,
                         "errors": s.errors}
                     for f, s in sorted(c.families.items())},
        "differences": c.differences,
        "errors": c.errors,
        "documented": c.documented,
        "diverged": c.diverged,
        # The scenarios behind every difference, so that each can be replayed and read.
        "scenarios": {str(s.index): s.to_json() for s in scenarios if s.index in differing},
    }
