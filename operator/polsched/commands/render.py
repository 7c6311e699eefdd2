"""`polsched render`: the install manifests, printed from the same sources kustomize and
the operator use.

- `render operator`: the Namespace and RBAC (manifests/rbac/*.yaml), the CRD (crds/), and
  manifests/templates/operator.yaml.j2 (Deployment, webhook Service and configuration;
  no metrics Service: /metrics listens on the pod's loopback; the chart's
  metrics.service.enabled and manifests/monitoring/ expose it). `kubectl apply -k
  manifests/` installs the same objects with the defaults; manifests/operator.yaml is the
  template rendered with them (a unit test keeps the two equal). `--tenancy-config FILE`
  adds the admin's tenancy configuration (a ConfigMap the operator reads),
  `--webhook-allow-from CIDR,...` a NetworkPolicy that lets only the API server's networks
  reach the webhook, `--webhook-client-ca FILE` the CA of the API server's webhook client
  certificate (a ConfigMap) and the flag that makes the webhook serve no other client.
- `render dedicated --policy F`: a Dedicated policy's Deployment, rendered by the
  operator's own function (controller.dedicated.deployments.render); its ServiceAccount and RBAC
  are the install's (manifests/rbac/dedicated.yaml).
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import jinja2
import yaml

from polsched.cluster import featuregates
from polsched.objects import Json

DEFAULT_NAMESPACE = "polsched-system"
OPERATOR_TEMPLATE = "operator.yaml.j2"
METRICS_PORT = 8080
HEALTH_PORT = 8081
WEBHOOK_PORT = 9443
RBAC_FILES = ("operator.yaml", "dedicated.yaml")
TENANCY_API_VERSION = "polsched.io/v1alpha1"
TENANCY_KIND = "SchedulingTenancy"


def _templates_dir() -> Path:
    from polsched.controller.dedicated.deployments import templates_dir

    return templates_dir()


def _default_image() -> str:
    from polsched.controller.dedicated.deployments import DEFAULT_IMAGE

    return DEFAULT_IMAGE


def tenancy_json(config: Json) -> str:
    """The admin's tenancy configuration as the ConfigMap holds it: compact JSON with sorted
    keys and <, >, & escaped, which is what the chart's `toJson` writes for the same
    values, so that both front ends install the same ConfigMap."""
    body = {**config, "apiVersion": TENANCY_API_VERSION, "kind": TENANCY_KIND}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    for c in "<>&\u2028\u2029":
        text = text.replace(c, f"\\u{ord(c):04x}")
    return text


def read_tenancy_file(path: str) -> Json:
    """The tenancy configuration of `path`, checked as the operator will check it; raises
    ValueError naming the file and the field."""
    from polsched.api.tenancy import TenancyError, parse_tenancy

    try:
        config = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        parse_tenancy(config)
    except (OSError, yaml.YAMLError, TenancyError) as e:
        raise ValueError(f"--tenancy-config {path}: {e}") from e
    if not isinstance(config, dict):
        raise ValueError(f"--tenancy-config {path}: empty")
    return config


def read_client_ca_file(path: str) -> str:
    """The PEM CA bundle of `path`, checked as the operator checks --webhook-client-ca;
    ValueError naming the file."""
    import ssl

    try:
        text = Path(path).read_text(encoding="ascii")
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_verify_locations(cadata=text)
    except (OSError, UnicodeDecodeError, ssl.SSLError) as e:
        raise ValueError(f"--webhook-client-ca {path}: not a PEM file of CA certificates "
                         f"({e})") from e
    if not context.get_ca_certs():
        raise ValueError(f"--webhook-client-ca {path}: holds no CA certificate")
    return text


def webhook_sources(cidrs: Iterable[str]) -> list[Json]:
    """NetworkPolicy peers for the API server's networks; ValueError names a bad one."""
    peers: list[Json] = []
    for cidr in cidrs:
        try:
            peers.append({"ipBlock": {"cidr": str(ipaddress.ip_network(cidr.strip()))}})
        except ValueError as e:
            raise ValueError(f"--webhook-allow-from: {e}") from e
    return peers


def gate_list(value: str) -> str:
    """`--feature-gates A=true,B=false` as the operator's POLSCHED_FEATURE_GATES, sorted by
    name (the chart's featureGates map comes out so); "" for none. Raises ValueError naming
    the bad item."""
    gates = featuregates.parse(value, "--feature-gates")
    return ",".join(f"{k}={'true' if v else 'false'}" for k, v in sorted(gates.items()))


@dataclass(frozen=True)
class InstallOptions:
    """What `render operator` adds to the install: with `tenancy`, the ConfigMap the
    operator reads it from; with `allow_from`, the NetworkPolicy that lets only those
    networks reach the webhook; with `client_ca` (PEM), its ConfigMap and
    --webhook-client-ca; with `feature_gates`, the operator's POLSCHED_FEATURE_GATES."""

    tenancy: Json | None = None
    allow_from: tuple[str, ...] = ()
    client_ca: str | None = None
    feature_gates: str = ""


def operator_templated(namespace: str = DEFAULT_NAMESPACE, image: str | None = None,
                       replicas: int = 1, directory: Path | None = None,
                       options: InstallOptions = InstallOptions()) -> list[Json]:
    """The objects of operator.yaml.j2 (Deployment, Services, webhook configuration, and
    what `options` adds)."""
    tenancy = options.tenancy
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(directory or _templates_dir())),
                             undefined=jinja2.StrictUndefined, autoescape=False,
                             keep_trailing_newline=True)
    selector = {"app.kubernetes.io/name": "polsched-operator"}
    text = env.get_template(OPERATOR_TEMPLATE).render(
        namespace=namespace, image=image or _default_image(), replicas=replicas,
        selector=selector, labels={**selector, "app.kubernetes.io/part-of": "polsched"},
        metrics_port=METRICS_PORT, health_port=HEALTH_PORT, webhook_port=WEBHOOK_PORT,
        tenancy_json=None if tenancy is None else tenancy_json(tenancy),
        webhook_sources=webhook_sources(options.allow_from),
        webhook_client_ca=options.client_ca, feature_gates=gate_list(options.feature_gates))
    return [d for d in yaml.safe_load_all(text) if d]


def _renamespace(obj: Json, namespace: str) -> Json:
    """RBAC files name polsched-system; move their objects and subjects to `namespace`."""
    if obj.get("kind") == "Namespace":
        if obj["metadata"]["name"] == DEFAULT_NAMESPACE:  # not polsched-leases
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
                     crd: bool = True, with_rbac: bool = True,
                     options: InstallOptions = InstallOptions()) -> list[Json]:
    """Every object `kubectl apply -k manifests/` creates, in apply order."""
    import copy

    from polsched.api.crd import crd_manifest

    out: list[Json] = []
    if with_rbac:
        out += rbac(namespace)
    if crd:
        out.append(copy.deepcopy(crd_manifest()))
    return out + operator_templated(namespace, image, options=options)


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
        try:
            tenancy = read_tenancy_file(args.tenancy_config) if args.tenancy_config else None
            client_ca = (read_client_ca_file(args.webhook_client_ca)
                         if args.webhook_client_ca else None)
            options = InstallOptions(
                tenancy=tenancy, client_ca=client_ca, feature_gates=args.feature_gates or "",
                allow_from=tuple(c for c in (args.webhook_allow_from or "").split(",")
                                 if c.strip()))
            objs = operator_install(args.namespace, args.image, crd=not args.no_crd,
                                    with_rbac=not args.no_rbac, options=options)
        except ValueError as e:
            print(f"polsched render operator: {e}", file=sys.stderr)
            return 1
        sys.stdout.write(dump(objs))
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
