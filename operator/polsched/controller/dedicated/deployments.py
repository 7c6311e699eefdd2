"""Dedicated mode: a SchedulingPolicy's own scheduler Deployment, rendered from
manifests/templates/dedicated-deployment.yaml.j2 and applied server-side.

What the operator may touch is small on purpose (docs/security.md): one Deployment per
Dedicated policy, in the operator's namespace, named `polsched-dedicated-<policy>`. Its
pods run as the ServiceAccount `polsched-scheduler`, which the install made together with
its ClusterRoleBinding (manifests/rbac/dedicated.yaml): the operator creates no
ServiceAccount and no role binding, so a policy author can never make it mint an identity
or grant a role.

The prefix keeps the name apart from the operator's own objects (`polsched-operator`, the
webhook Service, the chart's opt-in metrics Service); and the operator applies or deletes
a Deployment only if it made it (ours(): the managed-by label and a controller
ownerReference to a SchedulingPolicy of the same name). Anything else under that name is reported
(ForeignObject) and left alone: applying with force over it, or putting our
ownerReference on it, would let deleting the policy garbage-collect someone else's
object.

The Deployment carries an ownerReference to the (cluster-scoped) policy, so deleting the
policy lets the garbage collector remove it. Apply is server-side (fieldManager polsched,
force), so a re-apply after an edit changes only what we own and a kubectl edit of other
fields survives.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polsched
from polsched.api import API_VERSION, GROUP, KIND
from polsched.cluster.client import ApiClient, ApiError
from polsched.controller.policies.book import PolicyRecord
from polsched.controller.process.options import DEFAULT_METRICS_LISTEN
from polsched.objects import Json

FIELD_MANAGER = "polsched"
TEMPLATES = ("dedicated-deployment.yaml.j2",)
DEFAULT_IMAGE = f"ghcr.io/polsched/polsched:{polsched.__version__}"
# Made at install time (manifests/rbac/dedicated.yaml), never by the operator.
SERVICE_ACCOUNT = "polsched-scheduler"
NAME_PREFIX = "polsched-dedicated-"
MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGER = "polsched"
COMPONENT = "app.kubernetes.io/component"
DEDICATED_COMPONENT = "dedicated-scheduler"
# Where a Dedicated scheduler's pod finds its extenders' CA Secrets, one directory each.
EXTENDER_CA_DIR = "/etc/polsched/extender-ca"
# The probes' port on the pod's IP, as the operator's (commands.render.HEALTH_PORT).
HEALTH_PORT = 8081
_LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")


class ForeignObject(Exception):
    """An object already has the name of a policy's Dedicated object, and polsched did
    not make it for that policy: it is left alone."""


def templates_dir() -> Path:
    """$POLSCHED_TEMPLATES, else manifests/templates of the source tree."""
    env = os.environ.get("POLSCHED_TEMPLATES")
    if env:
        return Path(env)
    return Path(polsched.__file__).resolve().parents[2] / "manifests" / "templates"


def object_name(policy_name: str) -> str:
    """The Deployment of policy `policy_name`: the prefix keeps it apart from the
    operator's own objects, whatever the policy is called."""
    return f"{NAME_PREFIX}{policy_name}"


def mounted_ca_secrets(record: PolicyRecord, namespace: str) -> list[str]:
    """The caSecretRef Secrets in `namespace` (the pod's), which the Deployment mounts."""
    policy = record.loaded
    if policy is None:
        return []
    return sorted({ref[1] for ref in (e.ca_secret_ref for e in policy.extenders)
                   if ref is not None and ref[0] == namespace})


@dataclass(frozen=True)
class Inherited:
    """What a Dedicated scheduler takes over from the operator that deploys it.
    `args`: more flags for `polsched scheduler` (the operator's admission flags, so that
    a Dedicated scheduler enforces the same rules). `feature_gates`: the operator's
    POLSCHED_FEATURE_GATES, given to the scheduler too (TopologyAwareWorkloadScheduling
    changes how it places pod groups). `metrics_listen`: the operator's --metrics-listen
    (None: the loopback default, "": off), so that a Dedicated scheduler's /metrics is
    exposed exactly when the operator's is; `metrics_secure_listen` likewise
    (--metrics-secure-listen, with a self-signed certificate: the operator's
    --metrics-cert-dir is not mounted there)."""

    args: tuple[str, ...] = ()
    feature_gates: str = ""
    metrics_listen: str | None = None
    metrics_secure_listen: str | None = None


def render(record: PolicyRecord, *, namespace: str, image: str,
           directory: Path | None = None, inherited: Inherited = Inherited()) -> list[Json]:
    """The objects of `record`'s Dedicated scheduler, in apply order. Pure but for
    reading the templates. `inherited`: what it takes over from the operator (Inherited).
    Its probes always answer on HEALTH_PORT, as the operator's do."""
    metrics_listen = inherited.metrics_listen
    metrics_secure_listen = inherited.metrics_secure_listen
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
    ca_secrets = mounted_ca_secrets(record, namespace)
    args = ["scheduler", "--policy", record.name, "--leader-elect=true",
            "--health-listen", f"0.0.0.0:{HEALTH_PORT}"]
    # Passed only when the operator's was given: the default address is given up with a
    # warning when taken, an explicit one must bind (controller.process.endpoints).
    if metrics_listen is not None:
        args += ["--metrics-listen", metrics_listen]
    listen = DEFAULT_METRICS_LISTEN if metrics_listen is None else metrics_listen
    # A port is declared (for a PodMonitor) only when /metrics listens beyond loopback.
    host, _, port = listen.rpartition(":")
    metrics_port = int(port) if listen and host not in _LOOPBACK and port.isdigit() else None
    secure_port = None
    if metrics_secure_listen:
        args += ["--metrics-secure-listen", metrics_secure_listen]
        secure_port = int(metrics_secure_listen.rpartition(":")[2])
    if ca_secrets:
        args.append(f"--extender-ca-dir={EXTENDER_CA_DIR}")
    args.extend(inherited.args)
    values = {
        "name": object_name(record.name),
        "namespace": namespace,
        "service_account": SERVICE_ACCOUNT,
        "image": image,
        "args": args,
        "replicas": policy.runtime.replicas,
        "resources": dict(policy.runtime.resources),
        "selector": selector,
        "labels": {**selector, MANAGED_BY: MANAGER, COMPONENT: DEDICATED_COMPONENT},
        "owner": {"apiVersion": API_VERSION, "kind": KIND, "name": record.name,
                  "uid": record.uid, "controller": True, "blockOwnerDeletion": False},
        "ca_secrets": ca_secrets,
        "ca_dir": EXTENDER_CA_DIR,
        "feature_gates": inherited.feature_gates,
        "health_port": HEALTH_PORT,
        "metrics_port": metrics_port,
        "secure_port": secure_port,
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
    plural = {"Deployment": "deployments"}[kind]
    api_version = obj["apiVersion"]
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    ns = meta.get("namespace")
    return f"{base}/namespaces/{ns}/{plural}/{meta['name']}" if ns else \
        f"{base}/{plural}/{meta['name']}"


def ours(obj: Mapping[str, Any], policy_name: str) -> bool:
    """Whether polsched made `obj` for SchedulingPolicy `policy_name`: our managed-by
    label and a controller ownerReference to a SchedulingPolicy of that name (its uid may
    be an earlier incarnation's, deleted and created again before the garbage collector
    came by)."""
    meta = obj.get("metadata") or {}
    if (meta.get("labels") or {}).get(MANAGED_BY) != MANAGER:
        return False
    for ref in meta.get("ownerReferences") or ():
        if ref.get("controller") and ref.get("kind") == KIND \
                and str(ref.get("apiVersion", "")).split("/")[0] == GROUP \
                and ref.get("name") == policy_name:
            return True
    return False


def foreign_message(obj: Mapping[str, Any], policy_name: str) -> str:
    meta = obj.get("metadata") or {}
    owners = ", ".join(f"{r.get('kind')} {r.get('name')}"
                       for r in meta.get("ownerReferences") or ()) or "none"
    return (f"{obj.get('kind', 'object')} {meta.get('namespace')}/{meta.get('name')} "
            f"already exists and was not made by polsched for SchedulingPolicy "
            f"{policy_name!r} (label {MANAGED_BY}="
            f"{(meta.get('labels') or {}).get(MANAGED_BY)!r}, owners: {owners}); polsched "
            f"leaves it alone: delete or rename that object, or rename the policy")


class DedicatedDeployer:
    def __init__(self, client: ApiClient, *, namespace: str, image: str = DEFAULT_IMAGE,
                 directory: Path | None = None, inherited: Inherited = Inherited()) -> None:
        self.client = client
        self.namespace = namespace
        self.image = image
        self.directory = directory
        self.inherited = inherited

    async def _existing(self, path: str) -> Json | None:
        try:
            return await self.client.get(path)
        except ApiError as e:
            if e.status == 404:
                return None
            raise

    async def apply(self, record: PolicyRecord) -> None:
        """Apply the policy's objects; ForeignObject (nothing applied) when one of their
        names is taken by an object polsched did not make for this policy."""
        objs = render(record, namespace=self.namespace, image=self.image,
                      directory=self.directory, inherited=self.inherited)
        for obj in objs:
            existing = await self._existing(api_path(obj))
            if existing is not None and not ours(existing, record.name):
                raise ForeignObject(foreign_message(existing, record.name))
        for obj in objs:
            await self.client.patch(api_path(obj), obj, "apply", field_manager=FIELD_MANAGER,
                                    force=True)

    async def delete(self, name: str) -> None:
        """Remove what apply() made (the policy now runs Shared, or lost its name); an
        object of that name that polsched did not make is left alone."""
        path = (f"/apis/apps/v1/namespaces/{self.namespace}/deployments/"
                f"{object_name(name)}")
        existing = await self._existing(path)
        if existing is None or not ours(existing, name):
            return
        try:
            # The precondition: delete the object we just looked at, not a newer one.
            await self.client.delete(path, {"preconditions": {
                "uid": existing["metadata"]["uid"]}})
        except ApiError as e:
            if e.status not in (404, 409):
                raise
