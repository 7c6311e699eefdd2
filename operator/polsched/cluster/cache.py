"""ClusterCache: nodes, pods and the other objects plugins read, listed then watched.

It keeps what kube-scheduler's cache (pkg/scheduler/backend/cache/cache.go) keeps: a
NodeInfo per node with the pods assigned to it, including pods *assumed* onto a node while
their bind is in flight, so the very next scheduling cycle sees their requests. When the
watch shows the pod bound, the assumed entry is replaced by the real one (no double
counting); if the bind fails the scheduler forgets it. Deleted and terminal pods
(Succeeded/Failed) free their node's resources.

Objects are kept as the API server sends them, minus metadata.managedFields. Besides
nodes and pods, every kind in framework.listers.KINDS (namespaces, PVs, PVCs, storage
classes, CSINodes, Services, workload controllers, PDBs, priority classes) is kept in
`listers`, which plugins read through their Handle.

The Snapshot handed to the pipeline is maintained incrementally: its node list, name index
and image counts change with each node event, never rebuilt per cycle. A cycle runs
without awaiting, so nothing changes under it.

The cache tells a CacheListener what happened (pending pods to queue, pods that left the
queue, cluster events that may make unschedulable pods schedulable). Listener callbacks
run synchronously in the watch task and must not block.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import operator
from collections.abc import Awaitable, Callable, Mapping

import aiohttp

from polsched.cluster import featuregates
from polsched.cluster.backoff import Backoff, retry_delay
from polsched.cluster.client import ApiClient, ApiError, is_unreachable
from polsched.framework import listers as ls
from polsched.framework import podgroups as pgs
from polsched.framework.podgroups import PodGroups
from polsched.framework.types import NODE_CHANGES, NodeInfo, PodInfo, Snapshot
from polsched.objects import Json

log = logging.getLogger(__name__)

NODES = "/api/v1/nodes"
PODS = "/api/v1/pods"
NAMESPACES = ls.NAMESPACE.path
# scheduling.k8s.io/v1beta1 PodGroups (GenericWorkload): watched only when discovery
# lists them, as kube-scheduler's informer exists only with the gate on.
POD_GROUP_VERSION = "/apis/" + pgs.API_VERSION
POD_GROUPS = pgs.PATH
# scheduling.k8s.io/v1alpha3 CompositePodGroups: watched only with the CompositePodGroup gate
# on (POLSCHED_FEATURE_GATES, as kube-scheduler's informer) and discovery listing them.
COMPOSITE_VERSION = "/apis/" + pgs.COMPOSITE_API_VERSION
COMPOSITE_POD_GROUPS = pgs.COMPOSITE_PATH


class CacheListener:
    """What the scheduler hears from the cache. Every method is a no-op by default."""

    def pending_pod_changed(self, pod: PodInfo, old: PodInfo | None) -> None:
        """A pod without a node (not terminal, not assumed) was added or updated."""

    def pending_pod_removed(self, pod: PodInfo) -> None:
        """A pending pod was deleted, got bound (by anyone) or finished."""

    def assigned_pod_added(self, pod: PodInfo) -> None:
        """A pod now runs on a node (confirmed binding, or listed already bound)."""

    def assigned_pod_updated(self, pod: PodInfo, old: PodInfo) -> None:
        """A pod on a node changed its labels or requests (AssignedPod Update)."""

    def assigned_pod_removed(self, pod: PodInfo) -> None:
        """A pod on a node was deleted or finished: its resources are free."""

    def node_changed(self, node: NodeInfo, added: bool) -> None:
        """A node was added, or changed in a way that can change scheduling decisions."""

    def node_updated(self, node: NodeInfo, old: Json) -> None:
        """As node_changed(node, False), with the node object before the update."""

    def node_removed(self, node: NodeInfo) -> None:
        """A node was deleted."""

    def namespace_changed(self, name: str, labels: Mapping[str, str]) -> None:
        """A namespace was added or its labels changed."""

    def object_changed(self, kind: ls.Kind, old: Json | None, new: Json | None) -> None:
        """An object of a lister kind was added (old None), updated or deleted (new None)."""

    def counts_changed(self, scheduler_name: str) -> None:
        """The number of bound or pending pods with this schedulerName changed."""

    def pod_group_changed(self, old: Json | None, new: Json | None) -> None:
        """A PodGroup was added (old None), updated or deleted (new None)."""

    def composite_pod_group_changed(self, old: Json | None, new: Json | None) -> None:
        """A CompositePodGroup was added (old None), updated or deleted (new None)."""


def _counts_changed(listener: CacheListener, name: str) -> None:
    listener.counts_changed(name)


class ClusterCache:
    def __init__(self, client: ApiClient | None, *, watch_timeout: int = 300,
                 page_size: int = 500,
                 backoff: Callable[[], Backoff] = Backoff,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self._client = client
        self._backoff_factory = backoff  # one per watch, as one per reflector
        self._sleep = sleep
        self._watch_timeout = watch_timeout
        self._page_size = page_size
        self.snapshot = Snapshot([])
        # Every pod the API server has, as it has it (key "ns/name").
        self.pods: dict[str, PodInfo] = {}
        # Namespaces, volumes, services, workload controllers...: what plugins read
        # through Handle.listers besides nodes and pods.
        self.listers = ls.Listers()
        # namespace name -> labels (the listers' view, kept here for the engine)
        self.namespaces: dict[str, Mapping[str, str]] = self.listers.namespace_labels
        # Every NodeInfo, including placeholders for nodes that pods name but that we have
        # not seen (yet, or any more); only those with a node object are in the snapshot.
        self._infos: dict[str, NodeInfo] = {}
        # pod key -> node whose NodeInfo counts it
        self._placed: dict[str, str] = {}
        # pod key -> the assumed PodInfo (node_name set) while its bind is in flight
        self._assumed: dict[str, PodInfo] = {}
        self._bound: dict[str, int] = {}
        self._pending: dict[str, int] = {}
        self._listeners: list[CacheListener] = []
        self._tasks: list[asyncio.Task[None]] = []
        # The initial lists in flight (prefetch), by path, until start() applies them.
        self._lists: dict[str, asyncio.Future[Json]] | None = None
        self.synced = False
        # PodGroups and their members' states (framework.podgroups); `served` once
        # discovery at start() found scheduling.k8s.io/v1beta1 podgroups.
        self.pod_groups = PodGroups()

    # -- listeners ----------------------------------------------------------------------
    def add_listener(self, listener: CacheListener) -> None:
        self._listeners.append(listener)

    def _notify(self, call: Callable[[CacheListener], None], what: str) -> None:
        """`call(listener)` for every listener: a typed call of one CacheListener method
        (`what` names it in the log)."""
        for listener in self._listeners:
            try:
                call(listener)
            except Exception:  # a listener bug must not stop the watch
                log.exception("cache listener %s failed", what)

    # -- queries --------------------------------------------------------------------------
    def bound_pods(self, scheduler_name: str) -> int:
        """Pods with this schedulerName that exist and have spec.nodeName."""
        return self._bound.get(scheduler_name, 0)

    def pending_pods(self, scheduler_name: str) -> int:
        """Pods with this schedulerName, without spec.nodeName, not terminal."""
        return self._pending.get(scheduler_name, 0)

    def is_assumed(self, key: str) -> bool:
        return key in self._assumed

    def assumed_keys(self, scheduler_name: str) -> list[str]:
        """Pods of this scheduler assumed now: bind in flight or not yet confirmed."""
        return [k for k, p in self._assumed.items() if p.scheduler_name == scheduler_name]

    def assumed_keys_by_scheduler(self) -> dict[str, list[str]]:
        """assumed_keys of every scheduler, in one pass over the assumed pods."""
        out: dict[str, list[str]] = {}
        for k, p in self._assumed.items():
            keys = out.get(p.scheduler_name)
            if keys is None:
                out[p.scheduler_name] = keys = []
            keys.append(k)
        return out

    def node_info(self, name: str) -> NodeInfo | None:
        """Any NodeInfo, including a placeholder for a node without a node object."""
        return self._infos.get(name)

    # -- assume / forget ----------------------------------------------------------------
    def assume(self, pod: PodInfo, node_name: str) -> PodInfo:
        """Count `pod` on `node_name` now, before the bind completes (cache.AssumePod)."""
        values = list(_POD_VALUES(pod))  # dataclasses.replace, without its generic work
        values[_NODE_NAME_AT] = node_name
        assumed = PodInfo(*values)
        self._assumed[pod.key] = assumed
        self._place(assumed, node_name)
        self.pod_groups.assume(assumed)
        return assumed

    def forget(self, pod: PodInfo) -> None:
        """The bind failed: stop counting the assumed pod (cache.ForgetPod). A no-op when
        the watch has already shown the pod bound, wherever that is."""
        if self._assumed.pop(pod.key, None) is None:
            return
        self.pod_groups.forget(pod)
        current = self.pods.get(pod.key)
        if current is not None and current.node_name and not current.terminal:
            self._place(current, current.node_name)
        else:
            self._unplace(pod.key)

    # -- events (public so tests can feed plain dicts) ----------------------------------
    def on_pod_event(self, kind: str, obj: Json) -> None:
        _drop_managed_fields(obj)
        new = PodInfo.from_json(obj)
        key = new.key
        old = self.pods.get(key)
        if kind == "DELETED":
            self._delete_pod(key, old)
            return
        if old is not None and old.uid != new.uid:
            # Deleted and recreated under the same name between two events we saw.
            self._delete_pod(key, old)
            old = None
        self.pods[key] = new
        self._recount(old, new)
        self.pod_groups.pod_added(new)
        if new.node_name:
            self._assumed.pop(key, None)  # confirmed, or bound by someone else
            if new.terminal:
                self._unplace(key)
                if old is not None and old.node_name and not old.terminal:
                    self._notify(lambda x: x.assigned_pod_removed(new), "assigned_pod_removed")
                elif old is not None and not old.node_name and not old.terminal:
                    self._notify(lambda x: x.pending_pod_removed(old), "pending_pod_removed")
                return
            self._place(new, new.node_name)
            if old is None or not old.node_name or old.terminal:
                if old is not None and not old.node_name and not old.terminal:
                    self._notify(lambda x: x.pending_pod_removed(old), "pending_pod_removed")
                self._notify(lambda x: x.assigned_pod_added(new), "assigned_pod_added")
            elif old.labels != new.labels or old.requests != new.requests:
                self._notify(lambda x: x.assigned_pod_updated(new, old), "assigned_pod_updated")
            return
        if new.terminal:
            if key in self._assumed:
                self._assumed.pop(key)
                self._unplace(key)
            if old is not None and not old.terminal:
                self._notify(lambda x: x.pending_pod_removed(old), "pending_pod_removed")
            return
        if key in self._assumed:
            return  # its bind is in flight; the scheduler already decided
        self._notify(lambda x: x.pending_pod_changed(new, old), "pending_pod_changed")

    def _delete_pod(self, key: str, old: PodInfo | None) -> None:
        was_assumed = self._assumed.pop(key, None) is not None
        if old is None and not was_assumed:
            return
        self.pods.pop(key, None)
        self._unplace(key)
        if old is None:
            return
        self.pod_groups.pod_deleted(old)
        self._recount(old, None)
        if old.node_name:
            if not old.terminal:
                self._notify(lambda x: x.assigned_pod_removed(old), "assigned_pod_removed")
        elif not old.terminal:
            self._notify(lambda x: x.pending_pod_removed(old), "pending_pod_removed")

    def on_node_event(self, kind: str, obj: Json) -> None:
        _drop_managed_fields(obj)
        name = (obj.get("metadata") or {}).get("name") or ""
        info = self._infos.get(name)
        snap = self.snapshot
        if kind == "DELETED":
            if info is None:
                return
            if name in snap.by_name:
                self._snapshot_remove(info)
                removed = info
                self._notify(lambda x: x.node_removed(removed), "node_removed")
            if not info.pods:
                del self._infos[name]
            return
        if info is None or name not in snap.by_name:
            if info is None:
                info = NodeInfo.from_json(obj)
                self._infos[name] = info
            else:
                info.set_node(obj)
            self._snapshot_add(info)
            self._notify(lambda x: x.node_changed(info, True), "node_changed")
            return
        old_raw = info.raw
        relevant = _changed_for_scheduling(old_raw, obj)
        old_images = info.images
        info.set_node(obj)
        if old_images.keys() != info.images.keys():
            _count_images(snap.image_nodes, old_images, -1)
            _count_images(snap.image_nodes, info.images, +1)
        if relevant:
            self._notify(lambda x: x.node_changed(info, False), "node_changed")
            self._notify(lambda x: x.node_updated(info, old_raw), "node_updated")

    def on_object_event(self, kind: ls.Kind, event: str, obj: Json) -> None:
        """An object of a lister kind: record it, tell the listeners."""
        _drop_managed_fields(obj)
        old = self.listers.apply(kind, event, obj)
        new = None if event == "DELETED" else obj
        if kind is ls.NAMESPACE and new is not None:
            old_labels = ((old or {}).get("metadata") or {}).get("labels") or {}
            labels: Mapping[str, str] = (new.get("metadata") or {}).get("labels") or {}
            if old is None or old_labels != labels:
                name = ls.object_key(kind, new)
                self._notify(lambda x: x.namespace_changed(name, labels), "namespace_changed")
        self._notify(lambda x: x.object_changed(kind, old, new), "object_changed")

    def on_pod_group_event(self, kind: str, obj: Json) -> None:
        """A PodGroup: record it, tell the listeners."""
        _drop_managed_fields(obj)
        old = self.pod_groups.apply(kind, obj)
        new = None if kind == "DELETED" else obj
        self._notify(lambda x: x.pod_group_changed(old, new), "pod_group_changed")

    def on_composite_pod_group_event(self, kind: str, obj: Json) -> None:
        """A CompositePodGroup: record it in the forest, tell the listeners."""
        _drop_managed_fields(obj)
        old = self.pod_groups.apply_composite(kind, obj)
        new = None if kind == "DELETED" else obj
        self._notify(lambda x: x.composite_pod_group_changed(old, new),
                     "composite_pod_group_changed")

    # -- bookkeeping ----------------------------------------------------------------------
    def _place(self, pod: PodInfo, node_name: str) -> None:
        key = pod.key
        prev = self._placed.get(key)
        if prev is not None and prev != node_name:
            self._unplace(key)
        info = self._infos.get(node_name)
        if info is None:
            info = NodeInfo.from_json({"metadata": {"name": node_name}})
            self._infos[node_name] = info
        affinity, anti = info.pods_with_affinity, info.pods_with_required_anti_affinity
        info.add_pod(pod)  # replaces the entry with the same key, accounting included
        self._placed[key] = node_name
        self._count_affinity(info, affinity, anti)

    def _unplace(self, key: str) -> None:
        prev = self._placed.pop(key, None)
        if prev is None:
            return
        info = self._infos.get(prev)
        if info is None:
            return
        counted = info.pods.get(key)
        if counted is not None:
            affinity, anti = info.pods_with_affinity, info.pods_with_required_anti_affinity
            info.remove_pod(counted)
            self._count_affinity(info, affinity, anti)
        if not info.pods and prev not in self.snapshot.by_name:
            del self._infos[prev]

    def _recount(self, old: PodInfo | None, new: PodInfo | None) -> None:
        changed: set[str] = set()
        for pod, delta in ((old, -1), (new, 1)):
            if pod is None:
                continue
            if pod.node_name:
                table = self._bound
            elif not pod.terminal:
                table = self._pending
            else:
                continue
            table[pod.scheduler_name] = table.get(pod.scheduler_name, 0) + delta
            changed.add(pod.scheduler_name)
        if old is not None and new is not None and old.scheduler_name == new.scheduler_name \
                and bool(old.node_name) == bool(new.node_name) and old.terminal == new.terminal:
            return  # same buckets: nothing a status shows has changed
        for name in changed:
            self._notify(functools.partial(_counts_changed, name=name), "counts_changed")

    def _count_affinity(self, info: NodeInfo, affinity: int, anti: int) -> None:
        """Keep the snapshot's cluster-wide affinity counts in step with `info`'s, which
        were `affinity` and `anti` before its pods changed (only snapshot nodes count)."""
        snap = self.snapshot
        if snap.by_name.get(info.name) is info:
            snap.pods_with_affinity += info.pods_with_affinity - affinity
            snap.pods_with_required_anti_affinity += \
                info.pods_with_required_anti_affinity - anti

    def _snapshot_add(self, info: NodeInfo) -> None:
        snap = self.snapshot
        snap.nodes.append(info)
        snap.version += 1
        snap.by_name[info.name] = info
        NODE_CHANGES.note(info.name)
        _count_images(snap.image_nodes, info.images, +1)
        snap.pods_with_affinity += info.pods_with_affinity
        snap.pods_with_required_anti_affinity += info.pods_with_required_anti_affinity

    def _snapshot_remove(self, info: NodeInfo) -> None:
        snap = self.snapshot
        snap.nodes.remove(info)  # O(nodes), and node deletions are rare
        snap.version += 1
        del snap.by_name[info.name]
        NODE_CHANGES.note(info.name)
        _count_images(snap.image_nodes, info.images, -1)
        snap.pods_with_affinity -= info.pods_with_affinity
        snap.pods_with_required_anti_affinity -= info.pods_with_required_anti_affinity

    # -- list + watch ---------------------------------------------------------------------
    def _resources(self) -> list[tuple[str, Callable[[str, Json], None]]]:
        """What the cache lists and watches, in the order the lists are applied."""
        resources: list[tuple[str, Callable[[str, Json], None]]] = [(NODES, self.on_node_event)]
        # Namespaces and the other lister kinds before pods: a pod is queued (and may be
        # decided) as soon as it is listed, and plugins read these for it.
        for kind in ls.KINDS:
            resources.append((kind.path, functools.partial(self.on_object_event, kind)))
        if self.pod_groups.served and self.pod_groups.composite:
            resources.append((COMPOSITE_POD_GROUPS, self.on_composite_pod_group_event))
        if self.pod_groups.served:  # before pods: PreEnqueue reads the groups
            resources.append((POD_GROUPS, self.on_pod_group_event))
        resources.append((PODS, self.on_pod_event))
        return resources

    async def discover(self) -> bool:
        """Whether the API server serves scheduling.k8s.io/v1beta1 podgroups (discovery);
        sets pod_groups.served. An error or a 404 counts as not served."""
        if self._client is None:
            return False
        try:
            doc = await self._client.get(POD_GROUP_VERSION)
        except ApiError as err:
            if err.status != 404:
                log.warning("discovery of %s failed: %s", POD_GROUP_VERSION, err)
            doc = {}
        except (aiohttp.ClientError, TimeoutError) as err:
            log.warning("discovery of %s failed: %s", POD_GROUP_VERSION, err)
            doc = {}
        served = any(isinstance(r, Mapping) and r.get("name") == "podgroups"
                     for r in doc.get("resources") or ())
        self.pod_groups.served = served
        if served and featuregates.enabled(pgs.COMPOSITE_POD_GROUP):
            self.pod_groups.set_composite(await self._serves(COMPOSITE_VERSION,
                                                             "compositepodgroups"))
        return served

    async def _serves(self, version: str, resource: str) -> bool:
        """Whether discovery of `version` lists `resource` (an error: no)."""
        assert self._client is not None
        try:
            doc = await self._client.get(version)
        except ApiError as err:
            if err.status != 404:
                log.warning("discovery of %s failed: %s", version, err)
            return False
        except (aiohttp.ClientError, TimeoutError) as err:
            log.warning("discovery of %s failed: %s", version, err)
            return False
        return any(isinstance(r, Mapping) and r.get("name") == resource
                   for r in doc.get("resources") or ())

    def prefetch(self) -> None:
        """Send the initial lists now; start() applies their answers. For a process that
        has more to do before start() (`polsched run` imports most of polsched meanwhile,
        controller.process.boot): the API server answers the lists on the other core. Nothing is
        applied, and no listener called, before start(). Needs a running event loop."""
        if self._client is None:
            raise RuntimeError("ClusterCache.prefetch needs an ApiClient")
        if self._lists is not None or self._tasks:
            return
        client = self._client
        self._lists = {path: asyncio.ensure_future(client.list_all(path,
                                                                   page_size=self._page_size))
                       for path, _handler in self._resources()}

    async def start(self) -> None:
        """List nodes, namespaces and pods, start watching them; return once synced."""
        if self._client is None:
            raise RuntimeError("ClusterCache.start needs an ApiClient")
        if not self.pod_groups.served and await self.discover() and self._lists is not None:
            # prefetch() ran before discovery: the PodGroups' list is sent now.
            client = self._client
            self._lists[POD_GROUPS] = asyncio.ensure_future(
                client.list_all(POD_GROUPS, page_size=self._page_size))
            if self.pod_groups.composite:
                self._lists[COMPOSITE_POD_GROUPS] = asyncio.ensure_future(
                    client.list_all(COMPOSITE_POD_GROUPS, page_size=self._page_size))
        resources = self._resources()
        # Every list is sent at once (one round trip, not thirteen in a row, before the
        # first pod can be queued), unless prefetch() sent them already; the answers are
        # applied in the order above, nodes first, so listed pods land on real nodes.
        self.prefetch()
        assert self._lists is not None
        lists = self._lists
        versions = []
        try:
            for path, handler in resources:
                versions.append(self._reconcile(path, handler, await lists.pop(path)))
        finally:  # a list failed (or start was cancelled): the others are not waited for
            await self._drop_lists()
        for (path, handler), rv in zip(resources, versions, strict=True):
            self._tasks.append(asyncio.create_task(self._watch(path, handler, rv),
                                                   name=f"polsched-watch{path}"))
        self.synced = True

    async def _drop_lists(self) -> None:
        """Cancel the initial lists not applied (yet) and wait for them to end."""
        lists, self._lists = self._lists or {}, None
        for listing in lists.values():
            listing.cancel()
        await asyncio.gather(*lists.values(), return_exceptions=True)

    async def stop(self) -> None:
        await self._drop_lists()
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self._tasks.clear()

    def _known(self, path: str) -> dict[str, Json]:
        if path == PODS:
            return {k: p.raw for k, p in self.pods.items()}
        if path == NODES:
            return {n.name: n.raw for n in self.snapshot.nodes}
        if path == POD_GROUPS:
            return dict(self.pod_groups.objects)
        if path == COMPOSITE_POD_GROUPS:
            return dict(self.pod_groups.composites)
        kind = next(k for k in ls.KINDS if k.path == path)
        return dict(self.listers.objects[kind.name])

    async def _relist(self, path: str, handler: Callable[[str, Json], None]) -> str:
        """List `path` and reconcile: what vanished is DELETED, what changed is MODIFIED
        (the reflector's replace). Returns the list's resourceVersion."""
        assert self._client is not None
        return self._reconcile(path, handler,
                               await self._client.list_all(path, page_size=self._page_size))

    def _reconcile(self, path: str, handler: Callable[[str, Json], None], listing: Json) -> str:
        """Apply a list of `path` (see _relist); returns its resourceVersion."""
        known = self._known(path)
        seen: set[str] = set()
        for obj in listing.get("items") or ():
            meta = obj.get("metadata") or {}
            key = meta.get("name") or ""
            if path in (PODS, POD_GROUPS, COMPOSITE_POD_GROUPS) or path in _NAMESPACED_PATHS:
                key = f"{meta.get('namespace') or ''}/{key}"
            seen.add(key)
            prev = known.get(key)
            prev_rv = (prev.get("metadata") or {}).get("resourceVersion") if prev else None
            if prev is not None and prev_rv == meta.get("resourceVersion"):
                continue
            handler("MODIFIED" if prev is not None else "ADDED", obj)
        for key, raw in known.items():
            if key not in seen:
                handler("DELETED", raw)
        rv: str = (listing.get("metadata") or {}).get("resourceVersion") or ""
        return rv

    async def _watch(self, path: str, handler: Callable[[str, Json], None], rv: str) -> None:
        """Watch from `rv` forever: re-watch when the server ends the stream, relist on
        410 Gone (the reflector's ListAndWatch). A failure waits the reflector's backoff
        (cluster.backoff.Backoff: 0.8 s doubling to 30 s, each delay jittered up to twice,
        starting over two minutes after it started), or the answer's Retry-After when
        that is longer (a 429 from API priority and fairness)."""
        assert self._client is not None
        client = self._client
        backoff = self._backoff_factory()
        delay = 0.0
        while True:
            try:
                if delay:
                    await self._sleep(delay)
                    delay = 0.0
                async for kind, obj in client.watch(
                        path, resource_version=rv, timeout_seconds=self._watch_timeout):
                    rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
                    if kind != "BOOKMARK":
                        handler(kind, obj)
            except asyncio.CancelledError:
                raise
            except ApiError as err:
                if err.status == 410:
                    log.info("watch %s: resourceVersion %s expired; listing again", path, rv)
                    try:
                        rv = await self._relist(path, handler)
                    except ApiError as lerr:
                        self._report(f"relist {path} failed", lerr)
                        delay = retry_delay(backoff, lerr.retry_after)
                    except (aiohttp.ClientError, TimeoutError) as lerr:
                        self._report(f"relist {path} failed", lerr)
                        delay = retry_delay(backoff, None)
                else:
                    log.warning("watch %s failed: %s", path, err)
                    delay = retry_delay(backoff, err.retry_after)
            except (aiohttp.ClientError, ConnectionError, TimeoutError, ValueError) as err:
                self._report(f"watch {path} interrupted", err)
                delay = retry_delay(backoff, None)

    def _report(self, what: str, err: BaseException) -> None:
        """An outage is reported once by the client (ApiClient.outage); other failures
        are worth a line each."""
        if self._client is not None and is_unreachable(err):
            self._client.outage.failed(err)
            log.debug("%s: %s", what, err)
        else:
            log.warning("%s: %s", what, str(err) or type(err).__name__)


_NAMESPACED_PATHS = frozenset(k.path for k in ls.KINDS if k.namespaced)
_POD_FIELDS = [f.name for f in dataclasses.fields(PodInfo) if f.init]  # __post_init__ sets the rest
_POD_VALUES = operator.attrgetter(*_POD_FIELDS)
_NODE_NAME_AT = _POD_FIELDS.index("node_name")


def _drop_managed_fields(obj: Json) -> None:
    """Forget metadata.managedFields on ingest, as kube-scheduler's pod informer does
    (pkg/scheduler/scheduler.go newPodInformer, "to improve memory usage"): nothing here
    reads them (the queue's update check ignores them, extenders and CEL have no use for
    them), and kept on every pod and node they are a large share of the cache's memory."""
    meta = obj.get("metadata")
    if meta and "managedFields" in meta:
        del meta["managedFields"]


def _count_images(into: dict[str, int], images: Mapping[str, int], delta: int) -> None:
    for image in images:
        n = into.get(image, 0) + delta
        if n > 0:
            into[image] = n
        else:
            into.pop(image, None)


def _changed_for_scheduling(old: Json, new: Json) -> bool:
    """Whether a node update can change a scheduling decision (kube-scheduler's
    NodeUpdate event kinds: allocatable, labels, taints, annotations, spec), ignoring
    status heartbeats."""
    om, nm = old.get("metadata") or {}, new.get("metadata") or {}
    if om.get("labels") != nm.get("labels") or om.get("annotations") != nm.get("annotations"):
        return True
    if old.get("spec") != new.get("spec"):
        return True
    os_, ns = old.get("status") or {}, new.get("status") or {}
    return bool(os_.get("allocatable") != ns.get("allocatable")
                or os_.get("images") != ns.get("images"))
