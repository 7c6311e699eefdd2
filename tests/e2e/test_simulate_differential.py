"""`polsched simulate` against the engine, scenario by scenario: for the conformance suite's
scenario shapes that a simulation can predict, `simulate` on a snapshot taken before the
pods are created must say what the engine then does with each pod: the node (any of the
tied nodes where the engine's best totals tied, and from there on nothing more of the
scenario, whose clusters now differ), or the message it is left unschedulable with.

The engine is conformance.runner's polsched side: a real API server, `polsched run` from
production wiring with the default plugins, pods created one at a time, each decided
before the next. The scenario's nodes and objects are created first; the snapshot is taken
then (`polsched.commands.snapshot.collect`); the scenario's pods are added to it as pending,
in the order the runner will create them (their creation revisions), and simulated.

Sampled, seeded so that a run repeats: SAMPLE scenarios per family by default; set
POLSCHED_SIMULATE_DIFFERENTIAL to a larger number for the long run.

Shapes simulate cannot predict, left out (UNPREDICTABLE says why); a pod whose engine
decision is one of them (a preemption in a mixed scenario) ends the comparison of its
scenario and is reported as skipped, as does a scenario whose claims come from a
ResourceClaimTemplate (unpredictable_pods); the message of a pod sharing a claim an
earlier pod bound is not compared (shares_a_claim). Not compared at all: the devices a
bound pod's claims get and a preemptor's victims (simulate's report names neither).
"""

from __future__ import annotations

import asyncio
import copy
import os
import tempfile
from pathlib import Path

import pytest
from conformance import runner
from conformance import scenarios as scn
from conformance.runner import PodResult, Side

from polsched.api import load_policy
from polsched.commands import simulate, simulate_groups, snapshot
from polsched.objects import Json
from polsched.plugins import CATALOG

pytestmark = pytest.mark.e2e

SEED = 35
SAMPLE = int(os.environ.get("POLSCHED_SIMULATE_DIFFERENTIAL", "1"))

# Families whose shape a simulation from a snapshot cannot predict, and why.
UNPREDICTABLE = {
    "gates": "its pods' schedulingGates are removed after they were created: a snapshot "
             "shows them gated, and simulate has no time in which the gates go",
    "preemption": "simulate reports a preemptor unschedulable: it has no time in which the "
                  "victims are evicted and the pod retried",
    "gang": "a stepped scenario: PodGroups, minCount changes and deletions over time",
    "dra-workload": "a stepped scenario (PodGroups whose claims the resourceclaim "
                    "controller makes, members deleted), on control planes with "
                    "DRAWorkloadResourceClaims on",
    "extender": "the suite's extender server runs beside the conformance pair only",
}
FAMILIES = [f for f in scn.FAMILY_NAMES if f not in UNPREDICTABLE]
# POLSCHED_SIMULATE_FAMILIES=a,b: only those (to look into one).
ONLY = [f for f in os.environ.get("POLSCHED_SIMULATE_FAMILIES", "").split(",") if f]


def sample() -> list[scn.Scenario]:
    return [scn.generate(SEED, i * len(FAMILIES) + k, family, i)
            for i in range(SAMPLE) for k, family in enumerate(FAMILIES)
            if not ONLY or family in ONLY]


async def pending_pods(side: Side, sc: scn.Scenario) -> list[Json]:
    """The scenario's pods (and the objects made with them) as the snapshot would show
    them pending: as the API server stores them (a server-side dry run: defaulted, e.g.
    requests from limits), created in the runner's order, nothing written since."""
    assert side.client is not None
    out: list[Json] = []
    for i, step in enumerate(sc.pods):
        pod = copy.deepcopy(step.pod)
        # As the runner creates it (Side.create): a pod naming no scheduler gets the side's.
        pod["spec"].setdefault("schedulerName", runner.SCHEDULER_NAME)
        key = f"{step.namespace}/{step.owner}"
        if step.owner and key in side._owners:
            pod["metadata"]["ownerReferences"] = [{
                "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": step.owner,
                "uid": side._owners[key], "controller": True}]
        pod = await side.client.post(runner.collection(pod), pod, {"dryRun": "All"})
        pod.setdefault("apiVersion", "v1")
        pod.setdefault("kind", "Pod")
        meta = pod["metadata"]
        uid = f"simulated-{sc.index}-{i}"
        meta.update(uid=uid, creationTimestamp="2026-01-01T00:00:00Z",
                    resourceVersion=str(10**12 + i))
        meta.pop("managedFields", None)
        out.append(pod)
        for obj in step.after:
            obj = copy.deepcopy(obj)
            for ref in obj["metadata"].get("ownerReferences") or []:
                if ref.get("uid") == scn.POD_UID:
                    ref["uid"] = uid
            out.append(obj)
    return out


def unpredictable_pods(sc: scn.Scenario) -> str:
    """Why the scenario's pods are not predictable from a snapshot taken before them, ""
    when they are."""
    for step in sc.pods:
        if any(c.get("resourceClaimTemplateName")
               for c in step.pod["spec"].get("resourceClaims") or ()):
            return ("a pod's ResourceClaim comes from a ResourceClaimTemplate: the resourceclaim "
                    "controller makes it after the pod exists, so a snapshot taken before "
                    "the pods has none (simulate reports the pod gated by DynamicResources)")
    return ""


def shares_a_claim(sc: scn.Scenario, step: scn.PodStep) -> bool:
    """Whether the pod uses a PersistentVolumeClaim that an earlier pod of the scenario
    used: the engine's message for it then depends on time. Once the earlier pod is bound,
    the PV controller binds the claim, and a node the PV's affinity excludes reads "didn't
    match PersistentVolume's node affinity"; before that (and in a simulation, which has no
    time: the binding is assumed, as VolumeBinding's Reserve assumes it), "didn't find
    available persistent volumes to bind". The outcome is the same; the text is not."""
    def claims(st: scn.PodStep) -> set[str]:
        return {str(v["persistentVolumeClaim"]["claimName"])
                for v in st.pod["spec"].get("volumes") or () if "persistentVolumeClaim" in v}

    before = set().union(*(claims(o) for o in sc.pods[:sc.pods.index(step)]))
    return bool(claims(step) & before)


def verdict(engine: PodResult, predicted: simulate_groups.Decision, *,
            message: bool = True) -> tuple[str, bool]:
    """(the difference, "" when none; whether the clusters diverge from here). `message`:
    whether an unschedulable pod's message is compared too."""
    if engine.outcome == "bound":
        if predicted.node == engine.node:
            return "", False
        if engine.unique is False and predicted.node is not None \
                and not predicted.deciding_scorer:
            return "", True  # both tied; another draw: later pods meet other clusters
        return f"node: engine {engine.node}, simulate {predicted.node} " \
               f"({predicted.reason or predicted.deciding_scorer})", True
    if predicted.node is not None:
        return f"engine {engine.outcome} ({engine.message}), simulate {predicted.node}", True
    said = predicted.reason.removeprefix("error: ")
    if message and said != engine.message:
        return f"message: engine {engine.message!r}, simulate {said!r}", False
    return "", False


async def differential(workdir: Path) -> tuple[list[str], list[str], int]:
    """(differences, scenarios skipped and why, pods compared)."""
    side = Side("polsched", workdir)
    differences: list[str] = []
    skipped: list[str] = []
    compared = 0
    policy = load_policy({"apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
                          "metadata": {"name": runner.POLICY_NAME},
                          "spec": {"schedulerName": runner.SCHEDULER_NAME}}, CATALOG)
    try:
        await side.start(runner.build_bin_dir())
        assert side.client is not None
        for sc in sample():
            why = unpredictable_pods(sc)
            if why:
                skipped.append(f"scenario {sc.index} ({sc.family}): {why}")
                continue
            await side.cleanup()
            await side._setup(sc)
            await side._sentinel(sc)
            side._prev_namespaces = sc.namespace_names()
            objects = [o for o in await snapshot.collect(side.client)
                       if not (o["kind"] == "Pod"
                               and o["metadata"].get("namespace") == runner.SENTINEL_NS)]
            objects += await pending_pods(side, sc)
            report = await simulate.simulate(
                policy, simulate.Cluster(objects, f"scenario {sc.index}", pod_groups=False))
            predicted = {d.key: d for d in report.decisions}
            print(f"scenario {sc.index} ({sc.family}): simulated {len(predicted)} pods")
            for step in sc.pods:
                engine = await side._step(step)
                where = f"scenario {sc.index} ({sc.family}) pod {step.name}"
                if engine.nominated or engine.victims or engine.gated:
                    skipped.append(f"{where}: preemption or gates, which simulate does "
                                   "not predict; the rest of the scenario not compared")
                    break
                if engine.outcome not in ("bound", "Unschedulable", "SchedulerError"):
                    skipped.append(f"{where}: the engine left it {engine.outcome}")
                    break
                d = predicted.get(f"{step.namespace}/{step.name}")
                if d is None:
                    differences.append(f"{where}: not in the simulation")
                    break
                compared += 1
                timed = shares_a_claim(sc, step)
                if timed and engine.outcome != "bound":
                    skipped.append(f"{where}: its message not compared (a claim an earlier "
                                   "pod bound: see shares_a_claim)")
                diff, diverged = verdict(engine, d, message=not timed)
                if diff:
                    differences.append(f"{where}: {diff}")
                if diverged:
                    break
    finally:
        await side.stop()
        side.stop_control_plane()
    return differences, skipped, compared


def test_simulate_predicts_what_the_engine_does_scenario_by_scenario() -> None:
    with tempfile.TemporaryDirectory(prefix="polsched-differential-") as d:
        differences, skipped, compared = asyncio.run(differential(Path(d)))
    print(f"{compared} pods compared over {len(sample())} scenarios; skipped: {skipped}")
    assert not differences, "\n".join(differences)
    assert compared > 0


def test_every_family_is_sampled_or_named_unpredictable() -> None:
    assert set(FAMILIES) | set(UNPREDICTABLE) == set(scn.FAMILY_NAMES)
    assert {s.family for s in sample()} == set(FAMILIES)
