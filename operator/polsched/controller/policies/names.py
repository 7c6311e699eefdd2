"""The operator's record of schedulerName ownership (controller.policies.book), kept where
a restart of the operator finds it: the Lease `polsched-names` of the operator's
namespace, with two annotations:

- `polsched.io/name-owners`: each schedulerName and the policy that owns it. The recorded
  owner keeps its name while it claims it (api.claims.owners); before, that rule read the
  policies' status, which whoever may patch `schedulingpolicies/status` can write.
- `polsched.io/held-names`: each name held for a deleted owner, the owner and the
  wall-clock time the hold ends; before, a restart within the grace period forgot it, and
  another team's idle policy of the same schedulerName took the deleted owner's pods.

The namespace is the admin's: policy authors have no grant there, and the Dedicated
schedulers' identity may write Leases only in polsched-leases. What is read is bounded all
the same: malformed entries are skipped, at most MAX_ENTRIES of each are kept, and no hold
outlasts the grace period the operator is configured with from the time it reads it
(book.restore). The leader writes the record whenever it changes, and a replica taking
the lead writes what it holds.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from polsched.cluster.client import ApiClient, ApiError
from polsched.objects import Json

log = logging.getLogger(__name__)

LEASE = "polsched-names"
HELD = "polsched.io/held-names"
OWNERS = "polsched.io/name-owners"
MAX_ENTRIES = 10_000
_WRITE_ATTEMPTS = 5

# schedulerName -> (the deleted owner's policy name, when the hold ends: Unix seconds)
Holds = dict[str, tuple[str, float]]


@dataclass(frozen=True)
class Names:
    """What the record holds. `exists`: False when there is no record yet (the first
    start of an operator that keeps one)."""

    holds: Holds = field(default_factory=dict)
    owners: dict[str, str] = field(default_factory=dict)
    exists: bool = True


def _rfc3339(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _entries(annotation: str | None) -> list[tuple[str, object]]:
    if not annotation:
        return []
    try:
        doc = json.loads(annotation)
    except ValueError:
        return []
    if not isinstance(doc, dict):
        return []
    return [(k, v) for k, v in doc.items() if isinstance(k, str) and k][:MAX_ENTRIES]


def parse_holds(annotation: str | None) -> Holds:
    """The holds an annotation records; what does not parse is skipped."""
    out: Holds = {}
    for sname, entry in _entries(annotation):
        if not isinstance(entry, dict):
            continue
        owner, until = entry.get("policy"), entry.get("until")
        if not (isinstance(owner, str) and owner and isinstance(until, str)):
            continue
        try:
            ends = datetime.fromisoformat(until.replace("Z", "+00:00"))
        except ValueError:
            continue
        if ends.tzinfo is not None:
            out[sname] = (owner, ends.timestamp())
    return out


def parse_owners(annotation: str | None) -> dict[str, str]:
    return {s: o for s, o in _entries(annotation) if isinstance(o, str) and o}


def render_holds(holds: Mapping[str, tuple[str, float]]) -> str:
    return json.dumps({s: {"policy": owner, "until": _rfc3339(until)}
                       for s, (owner, until) in sorted(holds.items())},
                      separators=(",", ":"))


def render_owners(owners: Mapping[str, str]) -> str:
    return json.dumps(dict(sorted(owners.items())), separators=(",", ":"))


class NameStore:
    """Reads and writes the record of `namespace` (the operator's)."""

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

    async def load(self) -> Names:
        """The record, holds already over left out. Raises ApiError when the Lease cannot
        be read."""
        obj = await self._read()
        if obj is None:
            return Names(exists=False)
        now = self.wall()
        notes = (obj.get("metadata") or {}).get("annotations") or {}
        holds = {s: h for s, h in parse_holds(notes.get(HELD)).items() if h[1] > now}
        return Names(holds, parse_owners(notes.get(OWNERS)))

    async def save(self, holds: Mapping[str, tuple[str, float]],
                   owners: Mapping[str, str]) -> None:
        """Record `holds` (wall-clock ends; ended ones left out) and `owners` as they are
        now. Raises ApiError when it cannot be written."""
        now = self.wall()
        notes = {HELD: render_holds({s: h for s, h in holds.items() if h[1] > now}),
                 OWNERS: render_owners(owners)}
        for attempt in range(_WRITE_ATTEMPTS):
            obj = await self._read()
            body: Json = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                          "metadata": {"name": LEASE, "namespace": self.namespace,
                                       "annotations": notes},
                          "spec": {}}
            try:
                if obj is None:
                    await self.client.post(self.path, body)
                else:
                    meta = obj.get("metadata") or {}
                    body["metadata"]["resourceVersion"] = meta.get("resourceVersion")
                    body["spec"] = obj.get("spec") or {}
                    await self.client.put(f"{self.path}/{LEASE}", body)
                return
            except ApiError as e:
                if e.status != 409 or attempt == _WRITE_ATTEMPTS - 1:
                    raise
                log.debug("%s/%s changed meanwhile; writing again", self.namespace, LEASE)
