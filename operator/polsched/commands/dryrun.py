"""What the dry-run commands share: `polsched explain` and `polsched simulate` run a
policy's pipeline outside the operator, on objects read from files or listed from a
cluster, and bind nothing and write nothing (kubectl's --dry-run, for a scheduler).

- which policy a pod's schedulerName selects when several claim it (api.claims, the
  operator's rule), so that both commands pick the policy the operator runs;
- a bound pod turned back into a pending one, to be decided again;
- the policy's extenders, built as the operator builds them (extender.client);
- the plain-text tables both print.

Not for the operator: nothing here runs in `polsched run`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from polsched.api import API_VERSION, KIND, Policy, claims
from polsched.extender.client import CAReader, HTTPExtender, build_extenders, secret_ca_reader
from polsched.objects import Json

# The status fields of a decision already taken: a pod decided again carries none of
# them (a stale nominatedNodeName would make preemption think it still waits on that node).
_DECIDED_STATUS = ("phase", "conditions", "nominatedNodeName")


def policies_in(objs: Iterable[Json]) -> list[Json]:
    """The SchedulingPolicy objects (of the version this polsched serves) among `objs`."""
    return [o for o in objs
            if o.get("kind") == KIND and str(o.get("apiVersion", "")) == API_VERSION]


def owner_of(policies: Iterable[Json], scheduler_name: str) -> Json | None:
    """The policy that schedules the pods of `scheduler_name`, as the operator decides when
    several claim it (api.claims.owners: the owner the operator would keep); None if none
    claims it."""
    by_name = {claims.ObjectClaim.of(p).name: p for p in policies}
    found = [claims.ObjectClaim.of(p) for p in by_name.values()]
    # The operator's record of owners is not readable here: its reports in the status
    # stand in for it (a prediction; the operator decides without them).
    owner = claims.owners(found, claims.reported_owners(found)).get(scheduler_name)
    return by_name[owner] if owner is not None else None


def pending_copy(pod: Json) -> Json:
    """`pod` as if it had never been decided: no spec.nodeName, and none of the status a
    decision leaves (phase, conditions, nominatedNodeName). The object given is not
    changed (its metadata is copied too: the cache edits what it ingests)."""
    spec = dict(pod.get("spec") or {})
    spec.pop("nodeName", None)
    status = {k: v for k, v in (pod.get("status") or {}).items() if k not in _DECIDED_STATUS}
    return {**pod, "metadata": dict(pod.get("metadata") or {}), "spec": spec, "status": status}


class _Getter(Protocol):
    async def get(self, path: str) -> Json: ...


async def open_extenders(policy: Policy, client: _Getter | None) -> list[HTTPExtender]:
    """The policy's extenders, built as the operator builds them; a caSecretRef is read
    with `client` (cluster.ApiClient), and is an error without one. Raises
    extender.client.ExtenderSetupError. Close each one when done."""
    read: CAReader | None = None
    if client is not None:
        getter = client

        async def read_secret(namespace: str, name: str) -> Json:
            return await getter.get(f"/api/v1/namespaces/{namespace}/secrets/{name}")

        read = secret_ca_reader(read_secret)
    return await build_extenders(policy.extenders, read)


async def close_extenders(extenders: Sequence[HTTPExtender]) -> None:
    for ext in extenders:
        await ext.close()


def table(rows: list[list[str]]) -> str:
    """Rows as left-aligned columns two spaces apart (the first row is the header), as
    kubectl prints them."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(widths[i]) for i, c in enumerate(r)).rstrip()
                     for r in rows)
