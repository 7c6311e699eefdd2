#!/usr/bin/env python3
"""What the CEL cost guard (issue 26, finding 1) costs per evaluation: offline, no API.

  .venv/bin/python bench/cel_guard.py               # 2000 nodes, 5 rounds
  .venv/bin/python bench/cel_guard.py --nodes 500 --rounds 3

For three expressions (node-only and cheap; pod-and-node on labels; node-only walking
images, whose static estimate is over CHEAP_COST so each evaluation is estimated again
with the sizes measured), per node:

  bare     what an evaluation cost before the guard: project the node, run the program
           (node-only), or add the pod view to the node's context and run (pod-and-node);
  guarded  the Evaluator as it runs now: the same, plus measuring the view where the
           estimate reads it, and charging the pod's budget;
  hit      the Evaluator answering from its per-node-version cache (no evaluation: the
           guard adds nothing there);

and per pod the pod view (project + key, and now + measure). Figures are CPU time
(time.process_time) per call, the median of the rounds; the load-time estimate per
expression is reported too. Results go to bench/NOTES.md by hand ("CEL cost guard").
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT, ROOT / "operator"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from polsched.framework.types import NodeInfo, PodInfo  # noqa: E402
from polsched.plugins import expression  # noqa: E402

EXPRESSIONS = {
    "node-only labels": "node.metadata.labels.zone == 'a'",
    "pod-and-node labels": "pod.metadata.labels.app == node.metadata.labels.app",
    "node-only images": ("node.status.images.exists(i, "
                         "i.names.exists(n, n.startsWith('registry.example/')))"),
}


def make_node(i: int) -> NodeInfo:
    return NodeInfo.from_json({
        "metadata": {"name": f"n{i}", "labels": {
            "zone": "ab"[i % 2], "app": "web" if i % 3 else "db",
            "kubernetes.io/hostname": f"n{i}", "tier": "x"}},
        "spec": {"taints": []},
        "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                   "images": [{"names": [f"docker.io/library/img{j}:1",
                                         f"docker.io/library/img{j}@sha256:{j:064d}"],
                               "sizeBytes": 1000 + j} for j in range(20)]}})


def pod(i: int) -> PodInfo:
    return PodInfo.from_json({"metadata": {"name": f"p{i}", "namespace": "ns",
                                           "labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "c", "image": "nginx"}]}})


def per_call(fn: Callable[[], Any], calls: int) -> float:
    t0 = time.process_time()
    fn()
    return (time.process_time() - t0) / calls * 1e6


def bench(source: str, n_nodes: int) -> dict[str, float]:
    compiled = expression.compile_expression(source)
    cel = expression._cel()
    nodes = [make_node(i) for i in range(n_nodes)]
    a_pod = pod(0)
    out: dict[str, float] = {}

    def bare() -> None:
        if compiled.reads_pod:
            view = expression.project(a_pod.raw, compiled.pod_paths)
            for n in nodes:
                ctx = cel.Context({"node": expression.project(n.raw, compiled.node_paths)})
                ctx.add_variable("pod", view)
                try:
                    compiled.program.execute(ctx)
                except Exception:  # noqa: BLE001, S110 - as the Evaluator: errors are outcomes
                    pass
        else:
            for n in nodes:
                try:
                    compiled.program.execute(
                        {"node": expression.project(n.raw, compiled.node_paths)})
                except Exception:  # noqa: BLE001, S110
                    pass

    def unlimited() -> expression.Rate:
        # the rate's bookkeeping is measured, its refusals are not: a bench spends more
        # than a second's units on purpose
        return expression.Rate(burst=10 ** 15)

    ev = expression.Evaluator(compiled, unlimited())
    view = ev.pod_view(a_pod)

    def guarded() -> None:
        budget = expression.Budget(10 ** 12)
        for n in nodes:
            ok, value = ev.evaluate(view, n, budget)
            assert not isinstance(value, expression.Refused), value

    def fresh_guarded() -> None:
        nonlocal ev
        ev = expression.Evaluator(compiled, unlimited())
        guarded()

    def hit() -> None:
        budget = expression.Budget(10 ** 12)
        for n in nodes:
            ev.evaluate(view, n, budget)

    out["bare us/node"] = per_call(bare, n_nodes)
    out["guarded us/node"] = per_call(fresh_guarded, n_nodes)
    out["hit us/node"] = per_call(hit, n_nodes)

    pods = [pod(i) for i in range(1000)]

    def view_bare() -> None:
        for p in pods:
            v = expression.project(p.raw, compiled.pod_paths) if compiled.reads_pod else {}
            json.dumps(v, sort_keys=True, default=str)

    def view_guarded() -> None:
        for p in pods:
            ev.pod_view(p)

    out["pod view bare us"] = per_call(view_bare, len(pods))
    out["pod view guarded us"] = per_call(view_guarded, len(pods))
    t0 = time.process_time()
    for _ in range(100):
        expression.compile_expression(source)
    out["load (compile+estimate) us"] = (time.process_time() - t0) / 100 * 1e6
    t0 = time.process_time()
    for _ in range(100):
        cel.compile(source)
    out["library compile us"] = (time.process_time() - t0) / 100 * 1e6
    out["static estimate"] = compiled.static_cost
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    for label, source in EXPRESSIONS.items():
        rounds = [bench(source, args.nodes) for _ in range(args.rounds)]
        keys = rounds[0].keys()
        med = {k: statistics.median(r[k] for r in rounds) for k in keys}
        print(f"{label}: {source}")
        for k in keys:
            print(f"  {k:28} {med[k]:10.2f}")
        if med["bare us/node"]:
            print(f"  {'guarded / bare':28} {med['guarded us/node'] / med['bare us/node']:10.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
