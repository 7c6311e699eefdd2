"""Dedicated mode: a SchedulingPolicy's own scheduler Deployment, ServiceAccount and RBAC
bindings, rendered from manifests/templates/*.j2 and applied server-side.

Every object carries an ownerReference to the (cluster-scoped) policy, so deleting the
policy lets the garbage collector remove them; a namespaced dependent may have a
cluster-scoped owner. Apply is server-side (fieldManager polsched, force), so a re-apply
after an edit changes only what we own and a kubectl edit of other fields survives.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import polsched
from polsched.api import API_VERSION, KIND
from polsched.cluster.client import ApiClient, ApiError
from polsched.controller.policies import PolicyRecord
from polsched.objects import Json

FIELD_MANAGER = "polsched"
TEMPLATES = ("dedicated-serviceaccount.yaml.j2", "dedicated-rbac.yaml.j2",
             "dedicated-deployment.yaml.j2")
DEFAULT_IMAGE = f"ghcr.io/polsched/polsched:{polsched.__version__}"


def templates_dir() -> Path:
    """$POLSCHED_TEMPLATES, else manifests/templates of the source tree."""
    env = os.environ.get("POLSCHED_TEMPLATES")
    if env:
        return Path(env)
    return Path(polsched.__file__).resolve().parents[2] / "manifests" / "templates"


def object_name(policy_name: str) -> str:
    return f"polsched-{policy_name}"


def render(record: PolicyRecord, *, namespace: str, image: str,
           directory: Path | None = None) -> list[Json]:
    """The objects of `record`'s Dedicated scheduler, in apply order. Pure but for
    reading the templates."""
    policy = record.loaded
    if policy is None:
        raise ValueError(f"SchedulingPolicy {record.name} has no loaded spec to render")
    # Only for Dedicated policies: not on `polsched run`'s start-up path (yaml alone was
    # ~10 ms of its imports, bench/NOTES.md "eighth pass").
    import jinja2
    import yaml

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(directory or templates_dir())),
                             undefined=jinja2.StrictUndefined, autoescape=False,
                             keep_trailing_newline=True)
    selector = {"app.kubernetes.io/name": "polsched-scheduler",
                "polsched.io/policy": record.name}
    values = {
        "name": object_name(record.name),
        "namespace": namespace,
        "policy": record.name,
        "image": image,
        "replicas": policy.runtime.replicas,
        "resources": dict(policy.runtime.resources),
        "selector": selector,
        "labels": {**selector, "app.kubernetes.io/managed-by": "polsched"},
        "owner": {"apiVersion": API_VERSION, "kind": KIND, "name": record.name,
                  "uid": record.uid, "controller": True, "blockOwnerDeletion": False},
    }
    out: list[Json] = []
    for template in TEMPLATES:
        text = env.get_template(template).render(**values)
        out.extend(doc for doc in yaml.safe_load_all(text) if doc)
    return out


def api_path(obj: Mapping[str, Any]) -> str:
    """The object's URL, from its apiVersion, kind, namespace and name."""
    kind = obj["kind"]
    meta = obj["metadata"]
    plural = {"ServiceAccount": "serviceaccounts", "Deployment": "deployments",
              "ClusterRoleBinding": "clusterrolebindings",
              "RoleBinding": "rolebindings"}[kind]
    api_version = obj["apiVersion"]
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    ns = meta.get("namespace")
    return f"{base}/namespaces/{ns}/{plural}/{meta['name']}" if ns else \
        f"{base}/{plural}/{meta['name']}"


class DedicatedDeployer:
    def __init__(self, client: ApiClient, *, namespace: str, image: str = DEFAULT_IMAGE,
                 directory: Path | None = None) -> None:
        self.client = client
        self.namespace = namespace
        self.image = image
        self.directory = directory

    async def apply(self, record: PolicyRecord) -> None:
        for obj in render(record, namespace=self.namespace, image=self.image,
                          directory=self.directory):
            await self.client.patch(api_path(obj), obj, "apply", field_manager=FIELD_MANAGER,
                                    force=True)

    async def delete(self, name: str) -> None:
        """Remove what apply() made (the policy now runs Shared, or lost its name)."""
        n, ns = object_name(name), self.namespace
        for path in (f"/apis/apps/v1/namespaces/{ns}/deployments/{n}",
                     f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings/{n}",
                     f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{n}",
                     f"/api/v1/namespaces/{ns}/serviceaccounts/{n}"):
            try:
                await self.client.delete(path)
            except ApiError as e:
                if e.status != 404:
                    raise
