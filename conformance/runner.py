"""Play scenarios against one scheduler on its own control plane.

A Side is one control plane (hack/cluster.sh, no kwok: nothing here needs a node to run
a pod) with one scheduler on it, started once and reused for every scenario:

- kube: the kube-scheduler that hack/build.sh builds, default plugins in one profile named
  SCHEDULER_NAME, leader election off, `--vmodule=schedule_one=10` so that its final
  score per node ("Calculated node's final score for pod") is in its log and ties can be
  told apart;
- polsched: `polsched run` (the operator) with one SchedulingPolicy, spec.schedulerName
  SCHEDULER_NAME and no plugins named (the default plugins), `--annotate-decisions`
  so that each bound pod says how many nodes were feasible and which scorer decided (""
  when the best totals tied).

Pods are identical on both sides: a pod that names no scheduler is given SCHEDULER_NAME
(not default-scheduler, which a policy may not claim: docs/security.md). Each control plane
has only the scenario's nodes while the scenario plays: "0/N nodes are available" counts
every node the scheduler knows.

Per scenario: the previous scenario's pods and every node are deleted; the namespaces,
objects and nodes are created; a sentinel pod proves the scheduler's cache caught up (it
tolerates everything, selects the scenario's nodes and asks for an extended resource no
node has: only once the scheduler sees exactly the new nodes does it fail with
"0/N nodes are available: N Insufficient ..."; a stale node fails the selector instead).
Then each pod in turn: create it, wait until it is bound or has PodScheduled=False
(Unschedulable or SchedulerError), read its FailedScheduling event. A pod that fails and
is not nominated is deleted at once, so that no later event retries it and every later
pod meets the same cluster on both sides. A nominated pod (preemption) is given time to
be bound after its victims go. A gated pod is checked untouched (after a probe pod went
through the queue behind it), then its gates are removed and it is scheduled.

Namespaces, PVs, StorageClasses and the rest stay behind: their names are per scenario,
and deleting namespaces costs the namespace controller far more than they weigh.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TypeVar

import aiohttp
import yaml

from conformance import extender as ext
from conformance import scenarios as scn
from polsched.cluster import featuregates
from polsched.cluster.client import ApiClient, ApiError
from polsched.cluster.crdwait import wait_established
from polsched.objects import Json

T = TypeVar("T")

ROOT = Path(__file__).resolve().parent.parent
HACK = ROOT / "hack"
# Both sides' scheduler name. Not default-scheduler: polsched refuses a policy that claims
# it (a policy must not race kube-scheduler), so both sides serve this name instead.
SCHEDULER_NAME = "conformance"
POLICY_NAME = "conformance-default"
SENTINEL_NS = "conformance-sentinel"
SENTINEL_RESOURCE = "conformance.polsched.io/sentinel"
OPERATOR_NS = "polsched-system"
DECIDING = "polsched.io/deciding-scorer"
FEASIBLE = "polsched.io/feasible-nodes"
# polsched's count of kept nodes that tied for an OpportunisticBatching hint: a hinted pod
# is scored by neither side, so the tie is known from polsched's (identical) ranking.
HINT_TIES = "polsched.io/hint-ties"

DECISION_TIMEOUT = 15.0  # a pod neither bound nor failed by then is "pending"
FIRST_WAIT = 2.0  # then a probe tells whether the scheduler passed the pod over
EVENT_TIMEOUT = 5.0
BINDING_PENDING = "BindingConditionsPending"
PREEMPTION_TIMEOUT = 12.0  # a nominated pod's victims go, then it is retried after backoff
SENTINEL_TIMEOUT = 30.0
# Stepped scenarios: a step is settled once, after the probe, nothing of the scenario
# changed for QUIET seconds and the scheduler's active and backoff queues are empty (a
# gang's backoff grows to 10s), or after SETTLE_TIMEOUT.
QUIET = 1.5
SETTLE_TIMEOUT = 30.0
# ... or, while something waits in backoff, once a pod-group cycle has run since the step
# began and nothing changed for BACKOFF_QUIET: a rejected or failing group goes back to
# backoff after every attempt, forever, with the same message. The cycle is what matters:
# a step that changes a group without requeueing it (minCount raised) shows only at the
# group's next retry, up to 10 s x sqrt(members) later, and with a quiet spell alone
# whether that retry fell inside the step was a race (gang family, min_increase, seed 7).
BACKOFF_QUIET = 11.5

# Members of one pod-group cycle sharing an unallocated claim all go to PreBind with the
# claim as PreFilter saw it; the first status write wins and every other member fails with
# this error once and is bound at its retry (kube-scheduler v1.37.1 bindClaim, polsched
# alike). Which member wins is a race between the binding goroutines (it varies between
# kube-scheduler runs), so in scenarios with claims these notes are left out of a pod's
# events and counted per PodGroup instead (conformance/FINDINGS.md).
PREBIND_RACE = "got allocated elsewhere in the meantime"

_SCORE_LINE = re.compile(
    r'"Calculated node\'s final score for pod" pod="([^"]+)" node="([^"]+)" score=(\d+)')

# kind -> (collection path template, namespaced)
_PATHS = {
    "Namespace": ("/api/v1/namespaces", False),
    "Node": ("/api/v1/nodes", False),
    "PersistentVolume": ("/api/v1/persistentvolumes", False),
    "PersistentVolumeClaim": ("/api/v1/namespaces/{ns}/persistentvolumeclaims", True),
    "Service": ("/api/v1/namespaces/{ns}/services", True),
    "Pod": ("/api/v1/namespaces/{ns}/pods", True),
    "ReplicaSet": ("/apis/apps/v1/namespaces/{ns}/replicasets", True),
    "StorageClass": ("/apis/storage.k8s.io/v1/storageclasses", False),
    "CSINode": ("/apis/storage.k8s.io/v1/csinodes", False),
    "PriorityClass": ("/apis/scheduling.k8s.io/v1/priorityclasses", False),
    "RuntimeClass": ("/apis/node.k8s.io/v1/runtimeclasses", False),
    "DeviceClass": ("/apis/resource.k8s.io/v1/deviceclasses", False),
    "ResourceClaim": ("/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims", True),
    "ResourceClaimTemplate": ("/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaimtemplates",
                              True),
    "ResourceSlice": ("/apis/resource.k8s.io/v1/resourceslices", False),
    "PodGroup": (f"/apis/{scn.PODGROUP_API}/namespaces/{{ns}}/podgroups", True),
    "CompositePodGroup": (f"/apis/{scn.COMPOSITE_API}/namespaces/{{ns}}/compositepodgroups",
                          True),
}


def _asks_extended(pod: Json) -> bool:
    """Whether a container asks for an extended resource a DeviceClass of the suite's
    serves (scenarios.EXTENDED_RESOURCES)."""
    spec = pod.get("spec") or {}
    for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        res = c.get("resources") or {}
        for names in (res.get("requests") or {}, res.get("limits") or {}):
            if any(n in scn.EXTENDED_RESOURCES for n in names):
                return True
    return False


def collection(obj: Json) -> str:
    tmpl, namespaced = _PATHS[obj["kind"]]
    return tmpl.format(ns=obj["metadata"].get("namespace", "")) if namespaced else tmpl


@dataclass
class PodResult:
    """What happened to one pod on one side."""

    pod: str
    # bound | Unschedulable | SchedulerError | pending (neither within DECISION_TIMEOUT)
    outcome: str = "pending"
    node: str | None = None
    message: str = ""  # PodScheduled=False message
    event: str | None = None  # the first FailedScheduling event's note
    nominated: str | None = None
    victims: list[str] = field(default_factory=list)
    # Where the top score was unique: True; False: tied with `tied`; None: not bound.
    unique: bool | None = None
    tied: list[str] = field(default_factory=list)
    scores: dict[str, int] = field(default_factory=dict)  # kube only (from its log)
    # Gated pods, before their gates were removed: what the pod looked like.
    gated: str | None = None
    # A bound pod's claims: "claim-in-pod/request: pool/device" per allocated device, as
    # the claims' status.allocation says (DRA).
    devices: list[str] = field(default_factory=list)
    error: str | None = None  # the runner's own trouble (an API error creating the pod)
    # Stepped scenarios: every distinct event note seen for the object so far, in order
    # (recorded for reading, not compared: see Side._snapshot).
    notes: list[str] = field(default_factory=list)
    # Stepped scenarios with a topology label (scenario.topology_key): a bound pod's
    # domain (its node's value of the label); for a PodGroup, its bound members' domains.
    domain: str | None = None

    def to_json(self) -> Json:
        return {k: v for k, v in asdict(self).items() if v not in (None, [], {}, "")}


@dataclass
class ScenarioResult:
    index: int
    family: str
    pods: list[PodResult]
    error: str | None = None
    seconds: float = 0.0


class Side:
    """One control plane and its scheduler; `play` runs a scenario on it.

    `gates` (a feature-gate list, e.g. scn.GANG_GATES) starts the control plane and the
    oracle with those gates, in a directory of its own (KEY-gated). `scheduler` is the
    scheduler that runs on the side: normally the key's, but "kube" on the polsched side
    makes an oracle-vs-oracle run, which shows what in a family is not deterministic."""

    def __init__(self, key: str, workdir: Path, extender_url: str = "", *, gates: str = "",
                 scheduler: str | None = None) -> None:
        assert key in ("kube", "polsched")
        self.key = key
        self.scheduler = scheduler or key
        assert self.scheduler in ("kube", "polsched")
        self.gates = gates
        # The suite's extender (conformance/extender.py), for pods of its resource only.
        self.extender_url = extender_url
        self.dir = workdir / side_dir(key, gates)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.kubeconfig = str(self.dir / "kubeconfig")
        self.client: ApiClient | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = self.dir / f"{key}-scheduler.log"
        self._log_offset = 0
        self._scores: dict[str, dict[str, int]] = {}
        self.pods: dict[str, Json] = {}  # "ns/name" -> latest object
        self.deleted: list[Json] = []  # pods deleted, in order
        self.own_deletes: set[str] = set()  # uids the runner deleted itself
        self.events: dict[str, list[str]] = {}  # pod uid -> FailedScheduling notes
        # pod uid -> BindingConditionsPending notes (DynamicResources' PreBind)
        self.waits: dict[str, list[str]] = {}
        self._cond = asyncio.Condition()
        self._tasks: list[asyncio.Task[None]] = []
        self._prev_namespaces: list[str] = []
        self._owners: dict[str, str] = {}  # "ns/name" of a ReplicaSet -> uid
        self._sentinels = 0
        self.phases: dict[str, float] = defaultdict(float)  # seconds per phase (progress)
        # Stepped scenarios (gated sides): every event of the scenario's objects, by uid
        # ("Reason: message", distinct), the PodGroups, and when anything of the scenario
        # last changed (the settling rule waits for a quiet spell).
        self.all_events: dict[str, list[str]] = {}
        self.podgroups: dict[str, Json] = {}  # "ns/name" -> latest object
        self._watched_ns: set[str] = set()
        self._last_change = time.monotonic()
        # Settles of a stepped scenario put off because the watches were behind the API
        # server (reported at the end of the run).
        self.watch_lag: list[str] = []
        # Gated sides serve the scheduler's /metrics on this loopback port: the settling
        # rule reads scheduler_pending_pods (kube-scheduler's and polsched's alike).
        self.metrics_port = _free_port() if gates else 0

    def env(self) -> dict[str, str]:
        """The environment of the side's control plane and schedulers: its gates, or the
        caller's POLSCHED_FEATURE_GATES (upstream's defaults when unset)."""
        env = dict(os.environ)
        if self.gates:
            env[featuregates.ENV] = self.gates
        return env

    # -- lifecycle -------------------------------------------------------------------------
    async def start_control_plane(self) -> None:
        env = {**self.env(), "POLSCHED_NO_KWOK": "1"}
        proc = await asyncio.create_subprocess_exec(
            str(HACK / "cluster.sh"), "up", str(self.dir), env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        out, _ = await proc.communicate()
        if proc.returncode != 0:
            raise RuntimeError(f"{self.key}: hack/cluster.sh up failed:\n{out.decode()[-3000:]}")

    def stop_control_plane(self) -> None:
        subprocess.run([str(HACK / "cluster.sh"), "down", str(self.dir)], capture_output=True)

    async def start(self, bin_dir: Path) -> None:
        await self.start_control_plane()
        self.client = ApiClient.from_kubeconfig(self.kubeconfig)
        for obj in [{"apiVersion": "v1", "kind": "Namespace",
                     "metadata": {"name": n}} for n in (SENTINEL_NS, OPERATOR_NS)]:
            await self.create(obj)
        for obj in scn.global_objects():
            await self.create(obj)
        self._tasks.append(asyncio.create_task(self._watch_pods()))
        self._tasks.append(asyncio.create_task(self._watch_events()))
        if self.gates:
            self._tasks.append(asyncio.create_task(self._watch("/api/v1/events",
                                                               self._on_any_event)))
            self._tasks.append(asyncio.create_task(self._watch(
                f"/apis/{scn.PODGROUP_API}/podgroups", self._on_podgroup)))
        self._tasks.append(asyncio.create_task(self._watch("/api/v1/events", self._on_wait,
                                                           f"reason={BINDING_PENDING}")))
        if self.scheduler == "kube":
            self._start_kube_scheduler(bin_dir)
        else:
            await self._start_polsched()

    def _start_kube_scheduler(self, bin_dir: Path) -> None:
        cfg = {"apiVersion": "kubescheduler.config.k8s.io/v1",
               "kind": "KubeSchedulerConfiguration",
               "clientConnection": {"kubeconfig": self.kubeconfig, "qps": 500, "burst": 500},
               "leaderElection": {"leaderElect": False},
               "profiles": [{"schedulerName": SCHEDULER_NAME}]}
        if self.gates == scn.BATCHING_GATES:
            cfg["profiles"][0]["pluginConfig"] = [  # type: ignore[index]
                {"name": "PodTopologySpread", "args": scn.NO_DEFAULT_SPREAD}]
        if self.extender_url:
            cfg["extenders"] = [ext.config(self.extender_url)]
        path = self.dir / "kube-scheduler.yaml"
        path.write_text(yaml.safe_dump(cfg))
        serving = ["--secure-port", "0"]
        if self.metrics_port:
            serving = ["--secure-port", str(self.metrics_port), "--bind-address", "127.0.0.1",
                       "--authorization-always-allow-paths", "/healthz,/readyz,/livez,/metrics"]
        self.proc = subprocess.Popen(
            [str(bin_dir / "kube-scheduler"), "--config", str(path), *serving,
             "--v", "0", "--vmodule", ",".join(filter(None, (
                 "schedule_one=10", os.environ.get("CONFORMANCE_KUBE_VMODULE")))),
             *featuregates.kube_scheduler_args(self.env())],
            stdout=self.log_path.open("wb"), stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True)
        self._record_pid()

    async def _start_polsched(self) -> None:
        env = {**self.env(), "KUBECONFIG": self.kubeconfig}
        subprocess.run(["kubectl", "apply", "--server-side", "--force-conflicts", "-f",
                        str(ROOT / "crds")], env=env, check=True, capture_output=True)
        await asyncio.to_thread(wait_established, ["schedulingpolicies.polsched.io"],
                                env=env)
        spec: Json = {"schedulerName": SCHEDULER_NAME}
        if self.gates == scn.BATCHING_GATES:  # the same PodTopologySpread args as the oracle
            entry = {"name": "PodTopologySpread", "args": scn.NO_DEFAULT_SPREAD}
            spec["filters"] = [entry]
            spec["scorers"] = [{**entry, "weight": 2}]
        if self.extender_url:
            spec["extenders"] = [ext.config(self.extender_url)]
        policy = {"apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
                  "metadata": {"name": POLICY_NAME}, "spec": spec}
        await self.create(policy, "/apis/polsched.io/v1alpha1/schedulingpolicies")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "polsched.commands.cli", "run", "--kubeconfig", self.kubeconfig,
             "--namespace", OPERATOR_NS, "--identity", "conformance", "--annotate-decisions",
             "--metrics-listen",
             f"127.0.0.1:{self.metrics_port}" if self.metrics_port else ""],
            stdout=self.log_path.open("wb"), stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True, env=env)
        self._record_pid()
        deadline = time.monotonic() + 120
        assert self.client is not None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"polsched run exited: {self.tail()}")
            p = await self.client.get(
                f"/apis/polsched.io/v1alpha1/schedulingpolicies/{POLICY_NAME}")
            st = p.get("status") or {}
            if any(c.get("type") == "Ready" and c.get("status") == "True"
                   for c in st.get("conditions") or ()):
                return
            await asyncio.sleep(0.2)
        raise RuntimeError(f"policy {POLICY_NAME} not Ready in 120s: {self.tail()}")

    def _record_pid(self) -> None:
        # For stop_leftovers, should this process die before its finally blocks run.
        assert self.proc is not None
        (self.dir / "scheduler.pid").write_text(f"{self.proc.pid}\n")

    def tail(self, n: int = 20) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])

    async def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        if self.client is not None:
            await self.client.close()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    # -- watches ----------------------------------------------------------------------------
    async def _notify(self) -> None:
        async with self._cond:
            self._cond.notify_all()

    async def _watch(self, path: str, handle: Callable[[str, Json], None],
                     field_selector: str | None = None) -> None:
        assert self.client is not None
        while True:
            try:
                lst = await self.client.list(path, field_selector=field_selector)
                for item in lst.get("items") or ():
                    handle("ADDED", item)
                await self._notify()
                rv = lst["metadata"]["resourceVersion"]
                async for kind, obj in self.client.watch(path, resource_version=rv,
                                                         field_selector=field_selector,
                                                         timeout_seconds=3600):
                    if kind == "BOOKMARK":
                        continue
                    handle(kind, obj)
                    await self._notify()
            except asyncio.CancelledError:
                raise
            except Exception:
                await asyncio.sleep(0.2)

    def _changed(self, meta: Json) -> None:
        """Note a change to an object of the stepped scenario playing (probes apart)."""
        if meta.get("namespace") in self._watched_ns and \
                not str(meta.get("name", "")).startswith("probe-"):
            self._last_change = time.monotonic()

    def _on_any_event(self, kind: str, obj: Json) -> None:
        inv = obj.get("involvedObject") or {}
        if inv.get("namespace") not in self._watched_ns or kind == "DELETED":
            return
        if str(inv.get("name", "")).startswith("probe-"):
            return
        uid = inv.get("uid")
        if uid:
            seen = self.all_events.setdefault(uid, [])
            note = f"{obj.get('reason')}: {obj.get('message') or ''}"
            if note not in seen:
                seen.append(note)
                self._last_change = time.monotonic()

    def _on_podgroup(self, kind: str, obj: Json) -> None:
        m = obj["metadata"]
        key = f"{m.get('namespace')}/{m['name']}"
        if kind == "DELETED":
            self.podgroups.pop(key, None)
        else:
            self.podgroups[key] = obj
        self._changed(m)

    def _on_pod(self, kind: str, obj: Json) -> None:
        m = obj["metadata"]
        self._changed(m)
        key = f"{m.get('namespace')}/{m['name']}"
        if kind == "DELETED":
            cur = self.pods.get(key)
            if cur is not None and cur["metadata"]["uid"] == m["uid"]:
                del self.pods[key]
            self.deleted.append(obj)
        else:
            self.pods[key] = obj

    def _on_event(self, kind: str, obj: Json) -> None:
        if kind != "ADDED":
            return
        uid = (obj.get("involvedObject") or {}).get("uid")
        if uid:
            self.events.setdefault(uid, []).append(str(obj.get("message") or ""))

    def _on_wait(self, kind: str, obj: Json) -> None:
        if kind != "ADDED":
            return
        uid = (obj.get("involvedObject") or {}).get("uid")
        if uid:
            self.waits.setdefault(uid, []).append(
                f"{obj.get('type')} {BINDING_PENDING}: {obj.get('message') or ''}")

    async def _watch_pods(self) -> None:
        await self._watch("/api/v1/pods", self._on_pod)

    async def _watch_events(self) -> None:
        await self._watch("/api/v1/events", self._on_event, "reason=FailedScheduling")

    async def until(self, pred: Callable[[], T | None], timeout: float) -> T | None:
        """pred()'s first truthy value, re-checked after each watch event; None on timeout."""
        deadline = time.monotonic() + timeout
        async with self._cond:
            while True:
                v = pred()
                if v:
                    return v
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._cond.wait(), left)

    # -- API helpers -------------------------------------------------------------------------
    async def create(self, obj: Json, path: str | None = None) -> Json:
        assert self.client is not None
        if obj.get("kind") == "Pod" and not obj.get("spec", {}).get("schedulerName"):
            obj = {**obj, "spec": {**obj["spec"], "schedulerName": SCHEDULER_NAME}}
        try:
            return await self.client.post(path or collection(obj), obj)
        except ApiError as e:
            if e.status == 409:
                return {}
            raise

    async def delete_pod(self, ns: str, name: str, uid: str) -> None:
        assert self.client is not None
        self.own_deletes.add(uid)
        with contextlib.suppress(ApiError):
            await self.client.delete(f"/api/v1/namespaces/{ns}/pods/{name}",
                                     {"gracePeriodSeconds": 0,
                                      "preconditions": {"uid": uid}})

    async def cleanup(self) -> None:
        assert self.client is not None
        for ns in self._prev_namespaces:
            for p in list(self.pods.values()):
                if p["metadata"]["namespace"] == ns:
                    self.own_deletes.add(p["metadata"]["uid"])
            await self.client.request("DELETE", f"/api/v1/namespaces/{ns}/pods",
                                      body={"gracePeriodSeconds": 0})
        await self.client.request("DELETE", "/api/v1/nodes",
                                  params={"labelSelector": scn.NODE_LABEL})
        await self.client.request("DELETE", "/apis/resource.k8s.io/v1/resourceslices",
                                  params={"labelSelector": scn.NODE_LABEL})
        self._prev_namespaces = []

    # -- the log of kube-scheduler ----------------------------------------------------------
    def _read_scores(self) -> None:
        if self.scheduler != "kube":
            return
        with self.log_path.open("rb") as f:
            f.seek(self._log_offset)
            data = f.read()
        end = data.rfind(b"\n")
        if end < 0:
            return
        self._log_offset += end + 1
        for m in _SCORE_LINE.finditer(data[:end].decode(errors="replace")):
            self._scores.setdefault(m.group(1), {})[m.group(2)] = int(m.group(3))

    # -- a scenario ---------------------------------------------------------------------------
    async def play(self, sc: scn.Scenario) -> ScenarioResult:
        t0 = time.monotonic()
        try:
            await self.cleanup()
            t1 = time.monotonic()
            await self._setup(sc)
            t2 = time.monotonic()
            await self._sentinel(sc)
            t3 = time.monotonic()
            self.phases["cleanup"] += t1 - t0
            self.phases["setup"] += t2 - t1
            self.phases["sentinel"] += t3 - t2
        except Exception as e:
            return ScenarioResult(sc.index, sc.family, [],
                                  error=f"{self.key}: setup: {type(e).__name__}: {e}",
                                  seconds=time.monotonic() - t0)
        finally:
            self._prev_namespaces = sc.namespace_names()
        if sc.steps:
            try:
                steps = await self._play_steps(sc)
            except Exception as e:
                return ScenarioResult(sc.index, sc.family, [],
                                      error=f"{self.key}: steps: {type(e).__name__}: {e}",
                                      seconds=time.monotonic() - t0)
            self.phases["steps"] += time.monotonic() - t3
            return ScenarioResult(sc.index, sc.family, steps, seconds=time.monotonic() - t0)
        results = []
        for step in sc.pods:
            try:
                results.append(await self._step(step))
            except Exception as e:
                results.append(PodResult(step.name, outcome="runner-error",
                                         error=f"{type(e).__name__}: {e}"))
        self.phases["pods"] += time.monotonic() - t3
        return ScenarioResult(sc.index, sc.family, results, seconds=time.monotonic() - t0)

    async def _setup(self, sc: scn.Scenario) -> None:
        assert self.client is not None
        for ns in sc.namespaces:
            await self.create(ns)
        for obj in sc.objects:
            made = await self.create(obj)
            if obj.get("status") and obj["kind"] in ("ResourceClaim", "Pod") and made:
                # A claim allocated before the pods come, a bound pod mid-resize (the
                # status is a subresource).
                await self.client.request(
                    "PUT", f"{collection(obj)}/{obj['metadata']['name']}/status",
                    body={**made, "status": obj["status"]})
            if obj["kind"] == "ReplicaSet" and made:
                self._owners[f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"] = \
                    made["metadata"]["uid"]
        # Claims that name their PV are bound by kcm's PV controller: wait for it, so
        # that both schedulers meet them Bound.
        assert self.client is not None
        for obj in sc.objects:
            if obj["kind"] == "PersistentVolumeClaim" and obj["spec"].get("volumeName"):
                path = f"{collection(obj)}/{obj['metadata']['name']}"
                deadline = time.monotonic() + 20
                while time.monotonic() < deadline:
                    got = await self.client.get(path)
                    if (got.get("status") or {}).get("phase") == "Bound":
                        break
                    await asyncio.sleep(0.05)
        for node in sc.nodes:
            await self.create(node)

    async def _sentinel(self, sc: scn.Scenario) -> None:
        n = len(sc.nodes)

        def caught_up(msg: str) -> bool:
            if n == 0:
                return "no nodes available" in msg or msg.startswith("0/0 nodes")
            return msg.startswith(f"0/{n} nodes are available") and \
                "node affinity/selector" not in msg

        deadline = time.monotonic() + SENTINEL_TIMEOUT
        last = ""
        while time.monotonic() < deadline:
            self._sentinels += 1
            name = f"sentinel-{self._sentinels}"
            res = {SENTINEL_RESOURCE: "1"}
            pod = {"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": name, "namespace": SENTINEL_NS},
                   "spec": {"terminationGracePeriodSeconds": 0,
                            "tolerations": [{"operator": "Exists"}],
                            "nodeSelector": {scn.SCENARIO_LABEL: str(sc.index)},
                            "containers": [{"name": "c", "image": scn.IMAGE, "resources": {
                                "requests": res, "limits": res}}]}}
            made = await self.create(pod)
            uid = made["metadata"]["uid"]
            key = f"{SENTINEL_NS}/{name}"
            got = await self.until(lambda key=key: _failure(self.pods.get(key)), 10)  # type: ignore[misc]
            await self.delete_pod(SENTINEL_NS, name, uid)
            if got is not None:
                last = got[1]
                if caught_up(last):
                    return
        raise RuntimeError(f"the scheduler's cache did not catch up with scenario "
                           f"{sc.index}'s {n} nodes; last sentinel message: {last!r}")

    async def _step(self, step: scn.PodStep) -> PodResult:
        body = copy.deepcopy(step.pod)
        ns, name = step.namespace, step.name
        if step.owner:
            uid = self._owners.get(f"{ns}/{step.owner}")
            if uid:
                body["metadata"]["ownerReferences"] = [{
                    "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": step.owner,
                    "uid": uid, "controller": True}]
        res = PodResult(name)
        deleted_mark = len(self.deleted)
        try:
            made = await self.create(body)
        except ApiError as e:
            res.outcome = "create-refused"
            res.error = f"{e.status}: {e}"
            return res
        uid = made["metadata"]["uid"]
        key = f"{ns}/{name}"
        for obj in step.after:
            obj = copy.deepcopy(obj)
            for ref in obj["metadata"].get("ownerReferences") or []:
                if ref.get("uid") == scn.POD_UID:
                    ref["uid"] = uid
            await self.create(obj)
        if step.gated:
            res.gated = await self._check_gated(ns, key, uid)
            assert self.client is not None
            await self.client.patch(f"/api/v1/namespaces/{ns}/pods/{name}",
                                    [{"op": "remove", "path": "/spec/schedulingGates"}], "json")
        # A gated pod that was already tried (and perhaps dropped) gets a short wait.
        timeout = DECISION_TIMEOUT if res.gated in (None, "SchedulingGated") else 3.0
        pod = await self.until(lambda: _decided(self.pods.get(key), uid),
                               min(timeout, FIRST_WAIT))
        if pod is None:
            # Not decided yet: either still in a (slow) binding cycle, or passed over (a
            # PreEnqueue plugin keeps it out of the queue). A probe created now is queued
            # behind it; once the probe has been tried, so has the pod, if it ever will be.
            await self._probe(ns)
            pod = await self.until(lambda: _decided(self.pods.get(key), uid), 0.5)
        if pod is None:
            cur = self.pods.get(key)
            res.outcome = "pending"
            res.message = _condition(cur)[1] if cur else ""
            return res
        self._fill(res, pod)
        if res.outcome != "bound":
            notes = await self.until(lambda: self.events.get(uid), EVENT_TIMEOUT)
            res.event = notes[0] if notes else None
            res.nominated = (pod.get("status") or {}).get("nominatedNodeName") or None
            if res.nominated is None:
                # A nomination may come with the condition or right after it.
                cur = self.pods.get(key)
                res.nominated = ((cur or {}).get("status") or {}).get("nominatedNodeName")
            if res.nominated:
                later = await self.until(
                    lambda: _bound(self.pods.get(key), uid), PREEMPTION_TIMEOUT)
                if later is not None:
                    # Bound once its victims went. The end state is what both must agree
                    # on: kube-scheduler drops the failed attempt's status write when the
                    # binding overtakes it (SchedulerAsyncAPICalls), so a preemptor may
                    # never show PodScheduled=False there; its event is always written.
                    res.outcome, res.message, res.nominated = "bound", "", None
                    res.node = later["spec"]["nodeName"]
                    self._tie(res, later)
            else:
                await self.delete_pod(ns, name, uid)
        else:
            self._tie(res, pod)
            res.devices = await self._devices(pod)
        res.victims = sorted(f"{d['metadata']['namespace']}/{d['metadata']['name']}"
                             for d in self.deleted[deleted_mark:]
                             if d["metadata"]["uid"] not in self.own_deletes)
        if res.outcome == "bound" and res.victims and res.event is None:
            notes = await self.until(lambda: self.events.get(uid), EVENT_TIMEOUT)
            res.event = notes[0] if notes else None
        return res

    # -- stepped scenarios (the gang family) -----------------------------------------------
    async def _play_steps(self, sc: scn.Scenario) -> list[PodResult]:
        """Make each step's actions, let the scheduler settle, record every pod and
        PodGroup the scenario made so far (see _snapshot)."""
        assert self.client is not None
        ns_names = sc.namespace_names()
        self._watched_ns = set(ns_names)
        uids: dict[str, str] = {}  # "ns/name" of a pod -> uid
        pods: list[str] = []  # "ns/name" of the scenario's pods, in order of creation
        groups: list[str] = []
        deleted: set[str] = set()
        out: list[PodResult] = []
        for i, step in enumerate(sc.steps):
            _, step_tries = await self._queued()
            for a in step:
                key = f"{a.namespace}/{a.name}"
                if a.op == "create":
                    assert a.obj is not None
                    made = await self.create(copy.deepcopy(a.obj))
                    if a.obj["kind"] == "Pod":
                        uids[key] = made["metadata"]["uid"]
                        pods.append(key)
                    elif a.obj["kind"] == "PodGroup":
                        # A CompositePodGroup has no condition of its own to compare; its
                        # PodGroups' members and conditions say how it was placed.
                        groups.append(key)
                elif a.op == "min-count":
                    await self.client.patch(
                        f"/apis/{scn.PODGROUP_API}/namespaces/{a.namespace}/podgroups/{a.name}",
                        {"spec": {"schedulingPolicy": {"gang": {"minCount": a.value}}}},
                        "merge")
                elif a.op == "delete":
                    await self.delete_pod(a.namespace, a.name, uids[key])
                    deleted.add(key)
                else:
                    raise ValueError(f"scenario {sc.index}: unknown action {a.op!r}")
            await self._settle(sc, uids, deleted, step_tries)
            snap = self._snapshot(sc, i, pods, groups, uids, deleted)
            if sc.claims:
                await self._report_claims(snap, pods, uids, groups)
            out.extend(snap)
        self._watched_ns = set()
        return out

    async def _settle(self, sc: scn.Scenario, uids: dict[str, str], deleted: set[str],
                      step_tries: int) -> None:
        """The settling rule of a step: the watches show what the step made (created pods
        present, deleted ones gone); a probe pod created after it has been tried, so the
        scheduler has dequeued whatever the step queued before it (the probe has the
        lowest priority); then nothing of the scenario (pods, PodGroups, events) changed
        for QUIET seconds (binding cycles and status writes are in), every bound pod's
        Scheduled event has been seen, and the scheduler's
        active and backoff queues are empty (a gang retried after its backoff has been
        retried; with a quiet spell alone, whether a 2-8 s backoff retry fell inside a
        step or the next was a race: oracle-vs-oracle runs showed it), or nothing changed
        for BACKOFF_QUIET (a group in an error loop). Capped at SETTLE_TIMEOUT."""
        def seen() -> bool:
            for key, uid in uids.items():
                cur = self.pods.get(key)
                present = cur is not None and cur["metadata"]["uid"] == uid
                if present == (key in deleted):
                    return False
            return True

        def announced() -> bool:
            # Both schedulers write a Scheduled event for every bind, in the background
            # (polsched's through its client's event budget, which a burst can hold up).
            for key, uid in uids.items():
                cur = self.pods.get(key)
                if cur is not None and cur["metadata"]["uid"] == uid and \
                        cur["spec"].get("nodeName") and not any(
                            e.startswith("Scheduled:") for e in self.all_events.get(uid, ())):
                    return False
            return True

        await self.until(seen, EVENT_TIMEOUT)
        await self._probe(sc.namespace_names()[0])
        deadline = time.monotonic() + SETTLE_TIMEOUT
        while True:
            now = time.monotonic()
            quiet_for = now - self._last_change
            if now >= deadline:
                return
            if quiet_for >= QUIET and announced():
                before = self._last_change
                queued, tried = await self._queued()
                if not queued or (quiet_for >= BACKOFF_QUIET and tried > step_tries):
                    behind = await self._behind(sc.namespace_names())
                    # The answers came a while after the quiet spell was measured: settled
                    # only if the watches showed nothing new meanwhile and every bound pod
                    # still has its Scheduled event (issue 29, branch ghang).
                    if not behind and self._last_change == before and announced():
                        return
                    if not behind:
                        continue
                    # The watches had not delivered everything yet (a loaded machine):
                    # what the API server holds changed since; settle on that, anew.
                    self.watch_lag.append(f"scenario {sc.index}: {', '.join(behind)}")
                    self._last_change = time.monotonic()
                    continue
            await asyncio.sleep(max(0.05, min(QUIET - quiet_for, deadline - now)))

    async def _behind(self, namespaces: Sequence[str]) -> list[str]:
        """What the API server holds now that the watches have not shown yet: the
        scenario's pods and PodGroups (by resourceVersion) and its events' notes. A step
        is recorded from the watches, so it must not settle before they caught up."""
        assert self.client is not None
        behind: list[str] = []
        for ns in namespaces:
            pods = await self.client.get(f"/api/v1/namespaces/{ns}/pods")
            for p in pods.get("items") or ():
                m = p["metadata"]
                if str(m["name"]).startswith("probe-"):
                    continue
                cur = self.pods.get(f"{ns}/{m['name']}")
                if cur is None or cur["metadata"]["resourceVersion"] != m["resourceVersion"]:
                    behind.append(f"pod {ns}/{m['name']}")
            groups = await self.client.get(f"/apis/{scn.PODGROUP_API}/namespaces/{ns}/podgroups")
            for g in groups.get("items") or ():
                m = g["metadata"]
                cur = self.podgroups.get(f"{ns}/{m['name']}")
                if cur is None or cur["metadata"]["resourceVersion"] != m["resourceVersion"]:
                    behind.append(f"podgroup {ns}/{m['name']}")
            events = await self.client.get(f"/api/v1/namespaces/{ns}/events")
            for e in events.get("items") or ():
                inv = e.get("involvedObject") or {}
                if str(inv.get("name", "")).startswith("probe-") or not inv.get("uid"):
                    continue
                note = f"{e.get('reason')}: {e.get('message') or ''}"
                if note not in self.all_events.get(inv["uid"], ()):
                    behind.append(f"event {inv.get('name')} {e.get('reason')}")
        return behind

    async def _queued(self) -> tuple[int, int]:
        """From the scheduler's /metrics: the pods it has in its active and backoff queues
        and, for a group in its cycle, waiting to join it (scheduler_pending_pods{queue=
        active|backoff|pending}, kube-scheduler's gauge, which polsched reports too): a
        rejected gang retried after its backoff is still to come while this is above 0;
        plus its binding cycles under way (scheduler_goroutines{operation="binding"}: a
        gang member's bind and Scheduled event, its nomination while it waits on Permit,
        are still to come); and its pod-group cycles so far
        (scheduler_podgroup_schedule_attempts_total).
        The unschedulable pool is not counted: nothing takes a pod from it without a
        cluster event, and every step's events are in."""
        if not self.metrics_port:
            return 0, 0
        scheme = "https" if self.scheduler == "kube" else "http"
        url = f"{scheme}://127.0.0.1:{self.metrics_port}/metrics"
        try:
            async with aiohttp.ClientSession() as http, \
                    http.get(url, ssl=False, timeout=aiohttp.ClientTimeout(total=5)) as r:
                text = await r.text()
        except (aiohttp.ClientError, TimeoutError):
            return 1, 0  # not answering (yet): not settled
        return (pending_in(text, ("active", "backoff", "pending"))
                + metric_sum(text, "scheduler_goroutines", operation="binding"),
                metric_sum(text, "scheduler_podgroup_schedule_attempts_total"))

    def _snapshot(self, sc: scn.Scenario, step: int, pods: list[str], groups: list[str],
                  uids: dict[str, str], deleted: set[str]) -> list[PodResult]:
        """After step `step`: per pod (named "STEP/NAME"), bound or the PodScheduled
        reason and message, the node when the scenario decides it by construction, and
        its events (the first note per reason, see `events`); per PodGroup
        ("STEP/podgroup/NAME"), how many of its present members are bound, its
        conditions and its events. Node names are masked as <node> in texts unless the
        scenario's placement is exact."""
        nodes = [n["metadata"]["name"] for n in sc.nodes]

        def mask(text: str) -> str:
            if sc.exact_nodes:
                return text
            for n in sorted(nodes, key=len, reverse=True):
                text = re.sub(rf"\b{re.escape(n)}\b", "<node>", text)
            return text

        def events(uid: str) -> str | None:
            """The first note of each reason, reasons sorted. Not every distinct note:
            kube-scheduler's recorder (client-go tools/events recordToSink, getKey) folds
            an event into the series of an earlier one with the same regarding object
            (resourceVersion included) and reason whatever its note, and its queue keeps
            the pod object of the last non-status update, so a member's later failures
            in one PodScheduled spell count up the first note's series; whether a later
            note is written depends on when a pod update reached the queue (a race: an
            oracle-vs-oracle run shows it). The condition message carries the latest
            attempt's text instead."""
            first: dict[str, str] = {}
            for e in self.all_events.get(uid, ()):
                if sc.claims and PREBIND_RACE in e:
                    continue  # counted per PodGroup instead (see PREBIND_RACE)
                first.setdefault(e.split(":", 1)[0], mask(e))
            return " | ".join(first[r] for r in sorted(first)) or None

        def notes(uid: str) -> list[str]:
            return [mask(e) for e in self.all_events.get(uid, ())]

        out: list[PodResult] = []
        # node name -> its value of the scenario's topology label
        domains = {n["metadata"]["name"]: n["metadata"]["labels"][sc.topology_key]
                   for n in sc.nodes if sc.topology_key in n["metadata"].get("labels", {})}
        domains_in: dict[str, set[str]] = defaultdict(set)
        # The PodGroups with a topology constraint, or under a CompositePodGroup (whose
        # scenarios all constrain their roots): their members' domains are compared
        # (another group's members land where ties take them).
        constrained = {k for k, pg in self.podgroups.items()
                       if sc.topology_key and ((pg.get("spec") or {}).get("schedulingConstraints")
                                               or (pg.get("spec") or {}).get(
                                                   "parentCompositePodGroupName"))}
        bound_in: dict[str, int] = defaultdict(int)
        members_in: dict[str, int] = defaultdict(int)
        raced_in: dict[str, int] = defaultdict(int)
        for key in pods:
            ns, name = key.split("/", 1)
            res = PodResult(f"{step}/{name}")
            out.append(res)
            if key in deleted:
                res.outcome = "deleted"
                continue
            cur = self.pods.get(key)
            if cur is None or cur["metadata"]["uid"] != uids[key]:
                res.outcome = "missing"
                continue
            group = ((cur["spec"].get("schedulingGroup") or {}).get("podGroupName"))
            if group:
                members_in[f"{ns}/{group}"] += 1
                if sc.claims and any(PREBIND_RACE in e for e in self.all_events.get(
                        uids[key], ())):
                    raced_in[f"{ns}/{group}"] += 1
            if cur["spec"].get("nodeName"):
                res.outcome = "bound"
                if group:
                    bound_in[f"{ns}/{group}"] += 1
                if sc.exact_nodes:
                    res.node = cur["spec"]["nodeName"]
                    res.unique = True
                if group and f"{ns}/{group}" in constrained:
                    res.domain = domains.get(cur["spec"]["nodeName"], "<none>")
                    domains_in[f"{ns}/{group}"].add(res.domain)
            else:
                status, reason, msg = _condition_full(cur)
                res.outcome = reason or status or "pending"
                res.message = mask(msg)
            nominated = (cur.get("status") or {}).get("nominatedNodeName")
            res.nominated = mask(nominated) if nominated else None
            res.event = events(uids[key])
            res.notes = notes(uids[key])
        for key in groups:
            ns, name = key.split("/", 1)
            res = PodResult(f"{step}/podgroup/{name}")
            out.append(res)
            pg = self.podgroups.get(key)
            if pg is None:
                res.outcome = "missing"
                continue
            res.outcome = f"{bound_in[key]} of {members_in[key]} members bound"
            if raced_in[key]:
                res.outcome += f", {raced_in[key]} lost the claim's PreBind race"
            if domains_in[key]:
                res.domain = ",".join(sorted(domains_in[key]))
            res.message = "; ".join(
                mask(f"{c.get('type')}={c.get('status')} {c.get('reason') or ''}: "
                     f"{_condition_message(c)}")
                for c in sorted((pg.get("status") or {}).get("conditions") or (),
                                key=lambda c: str(c.get("type"))))
            res.event = events(pg["metadata"]["uid"])
            res.notes = notes(pg["metadata"]["uid"]) + [
                mask(f"condition {c.get('type')}={c.get('status')}: {c.get('message') or ''}")
                for c in (pg.get("status") or {}).get("conditions") or ()]
        return out

    async def _report_claims(self, snap: list[PodResult], pods: list[str],
                             uids: dict[str, str], groups: list[str]) -> None:
        """Stepped scenarios with claims (scenario.claims): each bound pod's devices, and
        per claim what its status.reservedFor names ("podgroups/NAME", "pods/NAME,...");
        each PodGroup's own claims, whatever its members are doing (allocated where, or
        not; reserved for whom: PodGroupPostFilter frees them)."""
        assert self.client is not None
        by_name = {r.pod.split("/", 1)[1]: r for r in snap}
        for key in groups:
            ns, name = key.split("/", 1)
            res = by_name.get(f"podgroup/{name}")
            pg = self.podgroups.get(key)
            if res is None or pg is None:
                continue
            made = {c.get("name"): c.get("resourceClaimName") for c in
                    (pg.get("status") or {}).get("resourceClaimStatuses") or []}
            for gc in (pg.get("spec") or {}).get("resourceClaims") or []:
                claim_name = gc.get("resourceClaimName") or made.get(gc.get("name"))
                if not claim_name:
                    res.devices.append(f"{gc.get('name')}: no claim")
                    continue
                res.devices.append(f"{gc.get('name')}: " + await self._claim_state(
                    ns, str(claim_name)))
        for key in pods:
            ns, name = key.split("/", 1)
            res = by_name.get(name)
            cur = self.pods.get(key)
            if res is None or res.outcome != "bound" or cur is None or \
                    cur["metadata"]["uid"] != uids[key]:
                continue
            res.devices = await self._devices(cur)
            current = await self.client.get(f"/api/v1/namespaces/{ns}/pods/{name}")
            generated = {c["name"]: c.get("resourceClaimName") for c in
                         (current.get("status") or {}).get("resourceClaimStatuses") or []}
            for pc in (cur.get("spec") or {}).get("resourceClaims") or []:
                claim_name = pc.get("resourceClaimName") or generated.get(pc["name"])
                if not claim_name:
                    continue
                try:
                    claim = await self.client.get(
                        f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims/"
                        f"{claim_name}")
                except ApiError as e:
                    res.devices.append(f"{pc['name']} reservedFor: {e.status}")
                    continue
                refs: dict[str, list[str]] = defaultdict(list)
                for ref in (claim.get("status") or {}).get("reservedFor") or []:
                    refs[str(ref.get("resource"))].append(str(ref.get("name")))
                res.devices.append(f"{pc['name']} reservedFor: " + " ".join(
                    f"{k}/{','.join(sorted(v))}" for k, v in sorted(refs.items())))

    async def _claim_state(self, ns: str, name: str) -> str:
        """"<pool>/<device>,... reservedFor <resource>/<names>..." of a claim, or why not."""
        assert self.client is not None
        try:
            claim = await self.client.get(
                f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims/{name}")
        except ApiError as e:
            return str(e.status)
        status = claim.get("status") or {}
        devs = ",".join(f"{r.get('pool')}/{r.get('device')}" for r in
                        ((status.get("allocation") or {}).get("devices") or {}).get("results")
                        or []) or "not allocated"
        refs: dict[str, list[str]] = defaultdict(list)
        for ref in status.get("reservedFor") or []:
            refs[str(ref.get("resource"))].append(str(ref.get("name")))
        return f"{devs} reservedFor " + (" ".join(
            f"{k}/{','.join(sorted(v))}" for k, v in sorted(refs.items())) or "nobody")

    async def _devices(self, pod: Json) -> list[str]:
        """The devices a bound pod's claims got (status.allocation of each claim), and
        for extended resources served by devices (DRAExtendedResource) the scheduler's
        claim ("extended/<request>") and the pod's requestMappings."""
        assert self.client is not None
        spec_claims = (pod.get("spec") or {}).get("resourceClaims") or []
        extended = _asks_extended(pod)
        if not spec_claims and not extended:
            return []
        ns = pod["metadata"]["namespace"]
        path = f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}"
        current = await self.client.get(path)
        status = current.get("status") or {}
        generated = {s["name"]: s.get("resourceClaimName") for s in
                     status.get("resourceClaimStatuses") or []}
        wanted = [(str(pc["name"]), pc.get("resourceClaimName") or generated.get(pc["name"]))
                  for pc in spec_claims]
        ext = status.get("extendedResourceClaimStatus") or {}
        if extended:
            wanted.append(("extended", ext.get("resourceClaimName")))
        out = [f"map {m.get('containerName')}/{m.get('resourceName')}: {m.get('requestName')}"
               for m in ext.get("requestMappings") or []]
        waited = False
        for label, name in wanted:
            if not name:
                out.append(f"{label}: no claim")
                continue
            try:
                claim = await self.client.get(
                    f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims/{name}")
            except ApiError as e:
                out.append(f"{label}: {e.status}")
                continue
            alloc = (claim.get("status") or {}).get("allocation")
            if not alloc:
                out.append(f"{label}: not allocated")
                continue
            for r in (alloc.get("devices") or {}).get("results") or []:
                used = ",".join(f"{k}={v}" for k, v in
                                sorted((r.get("consumedCapacity") or {}).items()))
                out.append(f"{label}/{r['request']}: {r['pool']}/{r['device']}"
                           + (f" ({used})" if used else ""))
                waited = waited or bool(r.get("bindingConditions"))
        if waited:
            # PreBind waited for the devices' binding conditions: its event, written in
            # the background, is compared too.
            uid = pod["metadata"]["uid"]
            notes = await self.until(lambda: self.waits.get(uid), EVENT_TIMEOUT)
            out.extend(notes or [f"no {BINDING_PENDING} event"])
        return out

    async def _check_gated(self, ns: str, key: str, uid: str) -> str:
        """Send a probe through the queue behind the gated pod; then say how the gated
        pod looks: 'SchedulingGated' when untouched."""
        await self._probe(ns)
        cur = self.pods.get(key) or {}
        if (cur.get("spec") or {}).get("nodeName"):
            return f"bound:{cur['spec']['nodeName']}"
        status, reason, _ = _condition_full(cur)
        if self.events.get(uid):
            return f"FailedScheduling:{reason}"
        return reason or status or "no condition"

    async def _probe(self, ns: str) -> None:
        """A pod that fits no node (priority 0, behind every scenario pod in the queue):
        returns once the scheduler has tried it (and deleted it)."""
        self._sentinels += 1
        name = f"probe-{self._sentinels}"
        probe = {"apiVersion": "v1", "kind": "Pod",
                 "metadata": {"name": name, "namespace": ns},
                 "spec": {"terminationGracePeriodSeconds": 0,
                          "tolerations": [{"operator": "Exists"}],
                          "nodeSelector": {"conformance.polsched.io/probe": "none"},
                          "containers": [{"name": "c", "image": scn.IMAGE}]}}
        made = await self.create(probe)
        puid = made["metadata"]["uid"]
        await self.until(lambda: _failure(self.pods.get(f"{ns}/{name}")), DECISION_TIMEOUT)
        await self.delete_pod(ns, name, puid)

    def _fill(self, res: PodResult, pod: Json) -> None:
        if pod["spec"].get("nodeName"):
            res.outcome = "bound"
            res.node = pod["spec"]["nodeName"]
        else:
            reason, msg = _condition(pod)
            res.outcome = reason
            res.message = msg

    def _tie(self, res: PodResult, pod: Json) -> None:
        if self.scheduler == "kube":
            self._read_scores()
            key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
            scores = self._scores.pop(key, {})
            res.scores = scores
            if not scores:
                res.unique = True  # one feasible node: nothing scored
                return
            top = max(scores.values())
            best = sorted(n for n, s in scores.items() if s == top)
            res.unique = len(best) == 1
            if not res.unique:
                res.tied = best
        else:
            ann = pod["metadata"].get("annotations") or {}
            feasible = ann.get(FEASIBLE, "")
            n = int(feasible.split("/")[0]) if feasible.split("/")[0].isdigit() else 0
            res.unique = n <= 1 or bool(ann.get(DECIDING))
            ties = ann.get(HINT_TIES, "")
            if ties.isdigit() and int(ties) > 1:
                res.unique = False


def _condition_message(c: Json) -> str:
    """A PodGroup condition's message as compared. PodGroupInitiallyScheduled=True's is
    not: kube-scheduler writes the group status' message, usually empty, but in 3 of 4
    oracle-vs-oracle runs one side's gang that went through after a minCount decrease
    wrote `pod group is unschedulable, pod group preemption: No preemption victims found
    for incoming preemptor` (shape min_decrease_rejected), the other side nothing. The
    message stays in `notes`."""
    if c.get("type") == "PodGroupInitiallyScheduled" and c.get("status") == "True":
        return "(message not compared)"
    return str(c.get("message") or "")


_PENDING = re.compile(r'^scheduler_pending_pods\{([^}]*)\} ([0-9.e+]+)$', re.M)


def metric_sum(metrics_text: str, name: str, **labels: str) -> int:
    """The sum of the series of metric `name` whose labels include `labels`, in a
    Prometheus text page."""
    total = 0.0
    for m in re.finditer(rf'^{re.escape(name)}(?:\{{([^}}]*)\}})? ([0-9.e+]+)$', metrics_text,
                         re.M):
        have = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1) or ""))
        if all(have.get(k) == v for k, v in labels.items()):
            total += float(m.group(2))
    return int(total)


def pending_in(metrics_text: str, queues: tuple[str, ...]) -> int:
    """The sum of scheduler_pending_pods over `queues` in a Prometheus text page."""
    total = 0.0
    for m in _PENDING.finditer(metrics_text):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
        if labels.get("queue") in queues:
            total += float(m.group(2))
    return int(total)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _condition_full(pod: Json | None) -> tuple[str, str, str]:
    for c in ((pod or {}).get("status") or {}).get("conditions") or ():
        if c.get("type") == "PodScheduled":
            return str(c.get("status") or ""), str(c.get("reason") or ""), \
                str(c.get("message") or "")
    return "", "", ""


def _condition(pod: Json | None) -> tuple[str, str]:
    _, reason, msg = _condition_full(pod)
    return reason, msg


def _failure(pod: Json | None) -> tuple[str, str] | None:
    status, reason, msg = _condition_full(pod)
    if status == "False" and reason in ("Unschedulable", "SchedulerError"):
        return reason, msg
    return None


def _decided(pod: Json | None, uid: str) -> Json | None:
    if pod is None or pod["metadata"]["uid"] != uid:
        return None
    if pod["spec"].get("nodeName") or _failure(pod) is not None:
        return pod
    return None


def _bound(pod: Json | None, uid: str) -> Json | None:
    if pod is None or pod["metadata"]["uid"] != uid:
        return None
    return pod if pod["spec"].get("nodeName") else None


def side_dir(key: str, gates: str) -> str:
    """A side's directory in the run's workdir: KEY, KEY-gated for the gang family's
    gates, KEY-gated-<slug> for any other gate list (each pair of control planes has its
    own etcd)."""
    if not gates:
        return key
    if gates == scn.GANG_GATES:
        return f"{key}-gated"
    return f"{key}-gated-" + hashlib.sha256(gates.encode()).hexdigest()[:8]


def stop_leftovers(workdir: Path) -> None:
    """Stop what a run in `workdir` started, whatever state it was left in: the
    schedulers (by the pid each recorded) and the control planes (ungated and gated)."""
    for d in sorted({workdir / side_dir(key, gates) for key in ("kube", "polsched")
                     for gates in ("", *scn.FAMILY_GATES.values())}):
        pid_file = d / "scheduler.pid"
        if pid_file.exists():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid_file.read_text().strip()), signal.SIGKILL)
            pid_file.unlink()
        if d.exists():
            subprocess.run([str(HACK / "cluster.sh"), "down", str(d)], capture_output=True)


def build_bin_dir() -> Path:
    out = subprocess.run([str(HACK / "build.sh")], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"hack/build.sh failed:\n{out.stderr[-3000:]}")
    return Path(out.stdout.strip().splitlines()[-1])


async def run_sides(scenarios: list[scn.Scenario], workdir: Path, *,
                    progress: Callable[[str], None] = lambda s: None,
                    keep: bool = False,
                    oracle_vs_oracle: bool = False) -> dict[str, list[ScenarioResult]]:
    """Start both sides, play every scenario on each (the two sides in parallel), stop.

    Families with gates of their own (scn.FAMILY_GATES: the gang family) are played after
    the others on a second pair of control planes started with those gates, once for the
    run, after the first pair is stopped (two at a time on a small machine). Results come
    in that order, the same on both sides. `oracle_vs_oracle` runs kube-scheduler on the
    polsched side too: every difference is then the suite's own nondeterminism."""
    bin_dir = build_bin_dir()
    if shutil.which("kubectl") is None:
        raise RuntimeError("kubectl is not on PATH")
    by_gates: dict[str, list[scn.Scenario]] = {}
    for sc in scenarios:
        by_gates.setdefault(scn.FAMILY_GATES.get(sc.family, ""), []).append(sc)
    out: dict[str, list[ScenarioResult]] = {"kube": [], "polsched": []}
    extender = ext.Extender()
    extender.__enter__()
    try:
        for gates in sorted(by_gates):
            await _run_pair(by_gates[gates], workdir, gates, bin_dir, extender.url, out,
                            progress=progress, keep=keep, oracle_vs_oracle=oracle_vs_oracle)
    finally:
        extender.__exit__(None, None, None)
    return out


async def _run_pair(scenarios: list[scn.Scenario], workdir: Path, gates: str, bin_dir: Path,
                    extender_url: str, out: dict[str, list[ScenarioResult]], *,
                    progress: Callable[[str], None], keep: bool,
                    oracle_vs_oracle: bool) -> None:
    if gates == scn.BATCHING_GATES:
        # No extender: a profile with one signs no pod (upstream's
        # computeBatchablePlugins), and the batching family is about signed pods.
        extender_url = ""
    sides = [Side("kube", workdir, extender_url, gates=gates),
             Side("polsched", workdir, extender_url, gates=gates,
                  scheduler="kube" if oracle_vs_oracle else "polsched")]
    label = f" (gates {gates})" if gates else ""
    try:
        await asyncio.gather(*(s.start(bin_dir) for s in sides))
        progress(f"both schedulers up{label}")

        async def play_all(side: Side) -> None:
            results = out[side.key]
            for i, sc in enumerate(scenarios):
                if not side.alive():
                    results.append(ScenarioResult(sc.index, sc.family, [],
                                                  error=f"{side.key} scheduler exited: "
                                                        f"{side.tail(5)}"))
                    continue
                results.append(await side.play(sc))
                if (i + 1) % 50 == 0 or (gates and (i + 1) % 5 == 0):
                    progress(f"{side.key}{label}: {i + 1}/{len(scenarios)} scenarios")

        await asyncio.gather(*(play_all(s) for s in sides))
        for s in sides:
            progress(f"{s.key}{label}: seconds per phase: " + ", ".join(
                f"{k} {v:.0f}" for k, v in sorted(s.phases.items(), key=lambda kv: -kv[1])))
            for lag in s.watch_lag:
                progress(f"{s.key}{label}: a step waited for its watches: {lag}")
    finally:
        for s in sides:
            await s.stop()
        if not keep:
            for s in sides:
                s.stop_control_plane()


def dump_results(path: Path, results: dict[str, list[ScenarioResult]]) -> None:
    path.write_text(json.dumps({k: [{"index": r.index, "family": r.family, "error": r.error,
                                     "seconds": round(r.seconds, 2),
                                     "pods": [p.to_json() for p in r.pods]} for r in v]
                                for k, v in results.items()}, indent=1))
