"""`polsched run`'s namespace (its Lease, its webhook Secret, Dedicated schedulers) must
exist before anything else starts: created here where RBAC allows it, otherwise the
process ends with an error that says what to do, instead of waiting on a Lease it can
never take while every policy shows not Ready."""

from __future__ import annotations

import logging

from polsched.cluster.client import ApiClient, ApiError

log = logging.getLogger(__name__)


async def ensure(client: ApiClient, namespace: str) -> None:
    """Return once `namespace` exists (creating it if needed); SystemExit when it cannot."""
    try:
        await client.get(f"/api/v1/namespaces/{namespace}")
        return
    except ApiError as e:
        if e.status not in (403, 404):  # 403: we may not read it; creating it tells
            raise SystemExit(f"polsched: reading namespace {namespace}: {e}") from e
    body = {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": namespace,
                         "labels": {"app.kubernetes.io/part-of": "polsched"}}}
    try:
        await client.post("/api/v1/namespaces", body)
    except ApiError as e:
        if e.status == 409:  # it exists (created meanwhile, or only reading was forbidden)
            return
        if e.status == 403:
            raise SystemExit(
                f"polsched: namespace {namespace!r} does not exist and this user may not "
                f"create it ({e.message}). Create it (kubectl create namespace {namespace}), "
                "or pass --namespace with one that exists.") from e
        raise SystemExit(f"polsched: creating namespace {namespace!r}: {e}") from e
    log.info("created namespace %s (for the operator's Lease)", namespace)
