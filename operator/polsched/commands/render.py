"""`polsched render`: the install manifests, printed from the same sources kustomize and
the operator use.

- `render operator`: the Namespace and RBAC (manifests/rbac/*.yaml), the CRD (crds/), and
  manifests/templates/operator.yaml.j2 (Deployment, webhook Service and configuration;
  no metrics Service: /metrics listens on the pod's loopback, the chart's
  metrics.service.enabled exposes it). `kubectl apply -k manifests/` installs the same
  objects with the defaults; manifests/operator.yaml is the template rendered with them
  (a unit test keeps the two equal).
- `render dedicated --policy F`: a Dedicated policy's Deployment, rendered by the
  operator's own function (controller.dedicated.deployments.render); its ServiceAccount and RBAC
  are the install's (manifests/rbac/dedicated.yaml).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import jinja2
import yaml

from polsched.objects import Json

DEFAULT_NAMESPACE = "polsched-system"
OPERATOR_TEMPLATE = "operator.yaml.j2"
METRICS_PORT = 8080
HEALTH_PORT = 8081
WEBHOOK_PORT = 9443
RBAC_FILES = ("operator.yaml", "dedicated.yaml")


def _templates_dir() -> Path:
    from polsched.controller.dedicated.deployments import templates_dir

    return templates_dir()


def _default_image() -> str:
    from polsched.controller.dedicated.deployments import DEFAULT_IMAGE

    return DEFAULT_IMAGE


def operator_templated(namespace: str = DEFAULT_NAMESPACE, image: str | None = None,
                       replicas: int = 1, directory: Path | None = None) -> list[Json]:
    """The objects of operator.yaml.j2 (Deployment, Services, webhook configuration)."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(directory or _templates_dir())),
                             undefined=jinja2.StrictUndefined, autoescape=False,
                             keep_trailing_newline=True)
    selector = {"app.kubernetes.io/name": "polsched-operator"}
    text = env.get_template(OPERATOR_TEMPLATE).render(
        namespace=namespace, image=image or _default_image(), replicas=replicas,
        selector=selector, labels={**selector, "app.kubernetes.io/part-of": "polsched"},
        metrics_port=METRICS_PORT, health_port=HEALTH_PORT, webhook_port=WEBHOOK_PORT)
    return [d for d in yaml.safe_load_all(text) if d]


def _renamespace(obj: Json, namespace: str) -> Json:
    """RBAC files name polsched-system; move their objects and subjects to `namespace`."""
    if obj.get("kind") == "Namespace":
        obj["metadata"]["name"] = namespace
    elif obj["metadata"].get("namespace") == DEFAULT_NAMESPACE:
        obj["metadata"]["namespace"] = namespace
    for s in obj.get("subjects") or ():
        if s.get("namespace") == DEFAULT_NAMESPACE:
            s["namespace"] = namespace
    return obj


def rbac(namespace: str = DEFAULT_NAMESPACE) -> list[Json]:
    """The Namespace and the operator's and Dedicated schedulers' RBAC."""
    base = _templates_dir().parent / "rbac"
    out: list[Json] = []
    for f in RBAC_FILES:
        out += [_renamespace(d, namespace)
                for d in yaml.safe_load_all((base / f).read_text(encoding="utf-8")) if d]
    return out


def operator_install(namespace: str = DEFAULT_NAMESPACE, image: str | None = None,
                     crd: bool = True, with_rbac: bool = True) -> list[Json]:
    """Every object `kubectl apply -k manifests/` creates, in apply order."""
    import copy

    from polsched.api.crd import crd_manifest

    out: list[Json] = []
    if with_rbac:
        out += rbac(namespace)
    if crd:
        out.append(copy.deepcopy(crd_manifest()))
    return out + operator_templated(namespace, image)


def dedicated(policy_obj: Json, namespace: str = DEFAULT_NAMESPACE,
              image: str | None = None) -> list[Json]:
    """A Dedicated policy's objects, as the operator applies them. Without a uid (a file
    that was never applied) the ownerReference to the policy is left out: the operator
    sets it when it applies them."""
    from polsched.api import load_policy
    from polsched.controller.dedicated.deployments import render
    from polsched.controller.policies.book import PolicyRecord
    from polsched.plugins import CATALOG

    policy = load_policy(policy_obj, CATALOG)
    meta = policy_obj.get("metadata") or {}
    record = PolicyRecord(name=policy.name, uid=str(meta.get("uid") or ""),
                          created=str(meta.get("creationTimestamp") or ""),
                          generation=int(meta.get("generation") or 0),
                          claimed=policy.scheduler_name, loaded=policy, error=None, status={})
    objs = render(record, namespace=namespace, image=image or _default_image())
    if not record.uid:
        for o in objs:
            o["metadata"].pop("ownerReferences", None)
    return objs


def dump(objs: list[Json]) -> str:
    return "".join("---\n" + yaml.safe_dump(o, sort_keys=False) for o in objs)


def run(args: argparse.Namespace) -> int:
    from polsched.api import KIND, PolicyError

    if args.what == "operator":
        sys.stdout.write(dump(operator_install(args.namespace, args.image,
                                               crd=not args.no_crd,
                                               with_rbac=not args.no_rbac)))
        return 0
    if not args.policy:
        print("polsched render dedicated: --policy FILE is required", file=sys.stderr)
        return 1
    try:
        text = sys.stdin.read() if args.policy == "-" else Path(args.policy).read_text()
        docs = [d for d in yaml.safe_load_all(text) if isinstance(d, dict)
                and d.get("kind") == KIND]
    except (OSError, yaml.YAMLError) as e:
        print(f"polsched render dedicated: {args.policy}: {e}", file=sys.stderr)
        return 1
    if not docs:
        print(f"polsched render dedicated: {args.policy}: no {KIND}", file=sys.stderr)
        return 1
    out: list[Json] = []
    for i, doc in enumerate(docs):
        mode = ((doc.get("spec") or {}).get("runtime") or {}).get("mode", "Shared")
        if mode != "Dedicated":
            print(f"polsched render dedicated: {args.policy}:{i}: spec.runtime.mode is "
                  f"{mode!r}: only a Dedicated policy has its own Deployment (rendering it "
                  "anyway)", file=sys.stderr)
        try:
            out += dedicated(doc, args.namespace, args.image)
        except PolicyError as e:
            print(f"polsched render dedicated: {args.policy}:{i}: {e}", file=sys.stderr)
            return 1
    sys.stdout.write(dump(out))
    return 0
