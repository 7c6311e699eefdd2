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
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TypeVar

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

DECISION_TIMEOUT = 15.0  # a pod neither bound nor failed by then is "pending"
FIRST_WAIT = 2.0  # then a probe tells whether the scheduler passed the pod over
EVENT_TIMEOUT = 5.0
BINDING_PENDING = "BindingConditionsPending"
PREEMPTION_TIMEOUT = 12.0  # a nominated pod's victims go, then it is retried after backoff
SENTINEL_TIMEOUT = 30.0

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
    """One control plane and its scheduler; `play` runs a scenario on it."""

    def __init__(self, key: str, workdir: Path, extender_url: str = "") -> None:
        assert key in ("kube", "polsched")
        self.key = key
        # The suite's extender (conformance/extender.py), for pods of its resource only.
        self.extender_url = extender_url
        self.dir = workdir / key
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

    # -- lifecycle -------------------------------------------------------------------------
    async def start_control_plane(self) -> None:
        env = {**os.environ, "POLSCHED_NO_KWOK": "1"}
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
        self._tasks.append(asyncio.create_task(self._watch("/api/v1/events", self._on_wait,
                                                           f"reason={BINDING_PENDING}")))
        if self.key == "kube":
            self._start_kube_scheduler(bin_dir)
        else:
            await self._start_polsched()

    def _start_kube_scheduler(self, bin_dir: Path) -> None:
        cfg = {"apiVersion": "kubescheduler.config.k8s.io/v1",
               "kind": "KubeSchedulerConfiguration",
               "clientConnection": {"kubeconfig": self.kubeconfig, "qps": 500, "burst": 500},
               "leaderElection": {"leaderElect": False},
               "profiles": [{"schedulerName": SCHEDULER_NAME}]}
        if self.extender_url:
            cfg["extenders"] = [ext.config(self.extender_url)]
        path = self.dir / "kube-scheduler.yaml"
        path.write_text(yaml.safe_dump(cfg))
        self.proc = subprocess.Popen(
            [str(bin_dir / "kube-scheduler"), "--config", str(path), "--secure-port", "0",
             "--v", "0", "--vmodule", "schedule_one=10",
             *featuregates.kube_scheduler_args()],
            stdout=self.log_path.open("wb"), stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True)
        self._record_pid()

    async def _start_polsched(self) -> None:
        env = {**os.environ, "KUBECONFIG": self.kubeconfig}
        subprocess.run(["kubectl", "apply", "--server-side", "--force-conflicts", "-f",
                        str(ROOT / "crds")], env=env, check=True, capture_output=True)
        await asyncio.to_thread(wait_established, ["schedulingpolicies.polsched.io"],
                                env=env)
        spec: Json = {"schedulerName": SCHEDULER_NAME}
        if self.extender_url:
            spec["extenders"] = [ext.config(self.extender_url)]
        policy = {"apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
                  "metadata": {"name": POLICY_NAME}, "spec": spec}
        await self.create(policy, "/apis/polsched.io/v1alpha1/schedulingpolicies")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "polsched.cli", "run", "--kubeconfig", self.kubeconfig,
             "--namespace", OPERATOR_NS, "--identity", "conformance", "--annotate-decisions",
             "--metrics-listen", ""],
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

    def _on_pod(self, kind: str, obj: Json) -> None:
        m = obj["metadata"]
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
        if self.key != "kube":
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
            if obj.get("status") and obj["kind"] == "ResourceClaim" and made:
                # A claim allocated before the pods come (the status is a subresource).
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
        if self.key == "kube":
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


def stop_leftovers(workdir: Path) -> None:
    """Stop what a run in `workdir` started, whatever state it was left in: the two
    schedulers (by the pid each recorded) and the two control planes."""
    for key in ("kube", "polsched"):
        d = workdir / key
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
                    keep: bool = False) -> dict[str, list[ScenarioResult]]:
    """Start both sides, play every scenario on each (the two sides in parallel), stop."""
    bin_dir = build_bin_dir()
    if shutil.which("kubectl") is None:
        raise RuntimeError("kubectl is not on PATH")
    extender = ext.Extender()
    sides = [Side("kube", workdir, extender.url), Side("polsched", workdir, extender.url)]
    out: dict[str, list[ScenarioResult]] = {}
    extender.__enter__()
    try:
        await asyncio.gather(*(s.start(bin_dir) for s in sides))
        progress("both schedulers up")

        async def play_all(side: Side) -> None:
            results = out.setdefault(side.key, [])
            for i, sc in enumerate(scenarios):
                if not side.alive():
                    results.append(ScenarioResult(sc.index, sc.family, [],
                                                  error=f"{side.key} scheduler exited: "
                                                        f"{side.tail(5)}"))
                    continue
                results.append(await side.play(sc))
                if (i + 1) % 50 == 0:
                    progress(f"{side.key}: {i + 1}/{len(scenarios)} scenarios")

        await asyncio.gather(*(play_all(s) for s in sides))
        for s in sides:
            progress(f"{s.key}: seconds per phase: " + ", ".join(
                f"{k} {v:.0f}" for k, v in sorted(s.phases.items(), key=lambda kv: -kv[1])))
    finally:
        for s in sides:
            await s.stop()
        if not keep:
            for s in sides:
                s.stop_control_plane()
        extender.__exit__(None, None, None)
    return out


def dump_results(path: Path, results: dict[str, list[ScenarioResult]]) -> None:
    path.write_text(json.dumps({k: [{"index": r.index, "family": r.family, "error": r.error,
                                     "seconds": round(r.seconds, 2),
                                     "pods": [p.to_json() for p in r.pods]} for r in v]
                                for k, v in results.items()}, indent=1))
