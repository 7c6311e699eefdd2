"""The schedulerNames held for deleted owners (controller.policies.book), kept where a
restart of the operator finds them: a Lease of the operator's namespace,
`polsched-name-holds`, whose annotation `polsched.io/held-names` maps each held name to
its former owner and the wall-clock time the hold ends.

Without it a restart within the grace period forgot the hold, and another team's idle
policy of the same schedulerName took the deleted owner's pods. The namespace is the
admin's: policy authors have no grant there, and the Dedicated schedulers' identity may
write Leases only in polsched-leases. What is read is bounded all the same: malformed
entries are skipped, at most MAX_HOLDS are kept, and no hold outlasts the grace period
the operator is configured with from the time it reads it (book.restore).

Every replica that sees an owner deleted writes the same record (merged with what is
stored, expired entries dropped, a conflicting write retried), so whichever replica
starts next finds it.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime

from polsched.cluster.client import ApiClient, ApiError
from polsched.objects import Json

log = logging.getLogger(__name__)

LEASE = "polsched-name-holds"
ANNOTATION = "polsched.io/held-names"
MAX_HOLDS = 10_000
_WRITE_ATTEMPTS = 5

# schedulerName -> (the deleted owner's policy name, when the hold ends: Unix seconds)
Holds = dict[str, tuple[str, float]]


def _rfc3339(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse(annotation: str | None) -> Holds:
    """The holds an annotation records; what does not parse is skipped."""
    if not annotation:
        return {}
    try:
        doc = json.loads(annotation)
    except ValueError:
        return {}
    out: Holds = {}
    if not isinstance(doc, dict):
        return out
    for sname, entry in doc.items():
        if len(out) >= MAX_HOLDS:
            break
        if not isinstance(entry, dict):
            continue
        owner, until = entry.get("policy"), entry.get("until")
        if not (isinstance(sname, str) and sname and isinstance(owner, str) and owner
                and isinstance(until, str)):
            continue
        try:
            ends = datetime.fromisoformat(until.replace("Z", "+00:00"))
        except ValueError:
            continue
        if ends.tzinfo is None:
            continue
        out[sname] = (owner, ends.timestamp())
    return out


def render(holds: Mapping[str, tuple[str, float]]) -> str:
    return json.dumps({s: {"policy": owner, "until": _rfc3339(until)}
                       for s, (owner, until) in sorted(holds.items())},
                      separators=(",", ":"))


class HoldStore:
    """Reads and writes the holds of `namespace` (the operator's)."""

    def __init__(self, client: ApiClient, namespace: str,
                 wall: Callable[[], float] = time.time) -> None:
        self.client = client
        self.namespace = namespace
        self.wall = wall
        self.path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"

    async def _read(self) -> Json | None:
        try:
            return await self.client.get(f"{self.path}/{LEASE}")
        except ApiError as e:
            if e.status == 404:
                return None
            raise

    async def load(self) -> Holds:
        """The holds not yet over. Raises ApiError when the Lease cannot be read."""
        obj = await self._read()
        if obj is None:
            return {}
        now = self.wall()
        stored = parse(((obj.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION))
        return {s: h for s, h in stored.items() if h[1] > now}

    async def save(self, holds: Mapping[str, tuple[str, float]]) -> None:
        """Record `holds` (this process's, as wall-clock ends), merged with the stored
        ones: for a name in both, the later end; ended ones dropped. Raises ApiError when
        it cannot be written."""
        for attempt in range(_WRITE_ATTEMPTS):
            obj = await self._read()
            now = self.wall()
            meta: Json = (obj or {}).get("metadata") or {}
            merged = parse((meta.get("annotations") or {}).get(ANNOTATION))
            for sname, held in holds.items():
                if sname not in merged or merged[sname][1] < held[1]:
                    merged[sname] = held
            merged = dict(sorted(((s, h) for s, h in merged.items() if h[1] > now),
                                 key=lambda kv: -kv[1][1])[:MAX_HOLDS])
            body: Json = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                          "metadata": {"name": LEASE, "namespace": self.namespace,
                                       "annotations": {ANNOTATION: render(merged)}},
                          "spec": {}}
            try:
                if obj is None:
                    await self.client.post(self.path, body)
                else:
                    body["metadata"]["resourceVersion"] = meta.get("resourceVersion")
                    body["spec"] = obj.get("spec") or {}
                    await self.client.put(f"{self.path}/{LEASE}", body)
                return
            except ApiError as e:
                if e.status != 409 or attempt == _WRITE_ATTEMPTS - 1:
                    raise
                log.debug("%s/%s changed meanwhile; merging again", self.namespace, LEASE)

