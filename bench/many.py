"""The many-policies workload (issue 15): 50 SchedulingPolicies at once on 1000 nodes,
each with its own schedulerName and its own pods, against one policy with the same pods.

- polsched: the one operator process (`polsched run`) runs 50 Shared policies,
  bench-polsched-00 .. -49, default plugins; pod i goes to policy i % 50.
- kube-scheduler: the fair equivalent, one process with 50 profiles
  (KubeSchedulerConfiguration profiles, one schedulerName each).
- the no-op binder binds the pods of all 50 names.

`many-policies-single` is the baseline in the same run: the same 1000 nodes and 5000
pods, one policy (one profile). From the two, `summary` gives polsched's total
throughput many/single (target >= 0.9) and its RSS per extra policy,
(peak RSS with 50 - peak RSS with 1) / 49 (target < 2 MB).

Importing this module registers both workloads in bench.workloads.WORKLOADS.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bench import workloads as wl

POLICIES = 50
NODES = 1000
PODS = 5000
MANY = "many-policies"
SINGLE = "many-policies-single"


@dataclass(frozen=True)
class ManyPolicies(wl.Workload):
    """Pod i is scheduled by scheduler name i % policies: `{name}-NN` for each scheduler's
    base name (polsched: one SchedulingPolicy each; kube-scheduler: one profile each; the
    no-op binder: all of them); with one policy, the base name itself."""

    policies: int = POLICIES

    def scheduler_names(self, base: str) -> list[str]:
        if self.policies == 1:
            return [base]
        return [f"{base}-{k:02d}" for k in range(self.policies)]

    def pod(self, i: int, scheduler: str, scheduler_name: str) -> dict[str, Any]:
        names = self.scheduler_names(scheduler_name)
        return wl.pod_base(f"bench-pod-{i:05d}", names[i % len(names)])


WORKLOADS: dict[str, ManyPolicies] = {
    MANY: ManyPolicies(
        MANY, NODES, PODS, f"{POLICIES} policies at once, {PODS // POLICIES} pods each "
        "(polsched: one operator, Shared; kube-scheduler: one process, 50 profiles)",
        equivalence=ManyPolicies.__doc__ or "", policies=POLICIES, rounds=5),
    SINGLE: ManyPolicies(
        SINGLE, NODES, PODS, f"the baseline of {MANY}: the same pods, one policy",
        equivalence=ManyPolicies.__doc__ or "", policies=1, rounds=5),
}
wl.WORKLOADS.update(WORKLOADS)


def scheduler_names(workload: wl.Workload, base: str) -> list[str]:
    """The scheduler names a runner must serve for `workload` (one for the others)."""
    if isinstance(workload, ManyPolicies):
        return workload.scheduler_names(base)
    return [base]


def summary(results: dict[str, Any]) -> dict[str, Any] | None:
    """Per scheduler, total throughput with many policies over one, and peak RSS per
    extra policy, when both workloads ran (results: the doc's "workloads")."""
    many, single = results.get(MANY), results.get(SINGLE)
    if many is None or single is None:
        return None
    policies = WORKLOADS[MANY].policies
    out: dict[str, Any] = {"policies": policies}
    for key, m in many["results"].items():
        s = single["results"].get(key) or {}
        if m.get("status") != "ok" or s.get("status") != "ok":
            continue
        row: dict[str, Any] = {
            "throughput_many": m["throughput_pods_per_s"],
            "throughput_single": s["throughput_pods_per_s"],
            "many_over_single": round(m["throughput_pods_per_s"]
                                      / max(s["throughput_pods_per_s"], 1e-9), 3),
            "cpu_s_many": m["cpu_s"], "cpu_s_single": s["cpu_s"],
            "cpu_many_over_single": round(m["cpu_s"] / max(s["cpu_s"], 1e-9), 3),
            "peak_rss_mb_many": m["peak_rss_mb"], "peak_rss_mb_single": s["peak_rss_mb"],
            "rss_mb_per_extra_policy": round((m["peak_rss_mb"] - s["peak_rss_mb"])
                                             / (policies - 1), 2)}
        rounds = zip((many.get("rounds") or {}).get(key) or (),
                     (single.get("rounds") or {}).get(key) or (), strict=False)
        by_round = [round(a["throughput_pods_per_s"] / max(b["throughput_pods_per_s"], 1e-9), 3)
                    for a, b in rounds if a.get("status") == b.get("status") == "ok"]
        if by_round:  # round i of the 50 policies against round i of one
            row["many_over_single_rounds"] = by_round
        out[key] = row
    kube = out.get("kube")
    pol = out.get("polsched")
    if kube and pol:
        pol["over_kube_many"] = round(pol["throughput_many"]
                                      / max(kube["throughput_many"], 1e-9), 3)
    return out


def render(summary_: dict[str, Any] | None) -> list[str]:
    """Markdown lines for RESULTS.md (empty when the workloads did not both run)."""
    if not summary_:
        return []
    n = summary_["policies"]
    lines = ["", f"### {MANY}: {n} policies against one, same pods", "",
             "| scheduler | pods/s, many | pods/s, one | many/one (target >= 0.9) "
             "| CPU s many / one | peak RSS MB many / one | RSS per extra policy "
             "(target < 2 MB) |",
             "|---|---|---|---|---|---|---|"]
    for key, r in summary_.items():
        if not isinstance(r, dict):
            continue
        lines.append(f"| {key} | {r['throughput_many']} | {r['throughput_single']} "
                     f"| {r['many_over_single']}x | {r['cpu_s_many']} / {r['cpu_s_single']} "
                     f"| {r['peak_rss_mb_many']} / {r['peak_rss_mb_single']} "
                     f"| {r['rss_mb_per_extra_policy']} MB |")
    rounds = [f"{key} " + " / ".join(f"{v}x" for v in r["many_over_single_rounds"])
              for key, r in summary_.items()
              if isinstance(r, dict) and r.get("many_over_single_rounds")]
    if rounds:
        lines += ["", "many/one by round (each workload's round i against the other's; the "
                      "table compares the median runs): " + "; ".join(rounds) + "."]
    pol = summary_.get("polsched")
    if isinstance(pol, dict) and "over_kube_many" in pol:
        lines += ["", f"polsched / kube-scheduler with {n} policies (profiles): "
                      f"{pol['over_kube_many']}x (target >= 1.0)."]
    return lines + [""]
