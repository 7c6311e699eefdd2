"""kubectl's connection flags for the commands that talk to a cluster.

For: `--kubeconfig`, `--context`, `--namespace/-n` and `--as`/`--as-group`, added to a
subcommand's parser by `add_arguments` and turned into an ApiClient (`client`) and a
namespace (`namespace`) the way kubectl turns them: the namespace is the flag, else the
context's `namespace`, else `default`; `--as` impersonates through the API server's
Impersonate-User and Impersonate-Group headers, so RBAC answers for that user.

What it must not do: import the cluster client at module import (`polsched --help`
loads this module with the parser; the client comes with the first request).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from polsched.cluster.client import ApiClient

DEFAULT_NAMESPACE = "default"


def add_arguments(p: argparse.ArgumentParser, *, namespace: bool = True) -> None:
    """kubectl's global flags that matter to a read-only client."""
    g = p.add_argument_group("cluster connection (as kubectl)")
    g.add_argument("--kubeconfig", default=None, metavar="FILE",
                   help="kubeconfig (default: $KUBECONFIG, else ~/.kube/config)")
    g.add_argument("--context", default=None, metavar="NAME",
                   help="the kubeconfig context to use (default: its current-context)")
    if namespace:
        g.add_argument("-n", "--namespace", default=None, metavar="NS",
                       help="the namespace (default: the context's, else `default`)")
    g.add_argument("--as", dest="as_user", default=None, metavar="USER",
                   help="impersonate this user (Impersonate-User), as `kubectl --as`")
    g.add_argument("--as-group", dest="as_group", action="append", default=[],
                   metavar="GROUP", help="impersonate this group (repeatable)")


def impersonation(args: argparse.Namespace) -> list[tuple[str, str]]:
    """The Impersonate-* headers of --as and --as-group (kubectl refuses a group without
    a user, and so does the API server; say so before any request)."""
    user = getattr(args, "as_user", None)
    groups = list(getattr(args, "as_group", None) or ())
    if groups and not user:
        raise SystemExit("polsched: --as-group needs --as (the API server impersonates a "
                         "user, with groups)")
    if not user:
        return []
    return [("Impersonate-User", user), *(("Impersonate-Group", g) for g in groups)]


def client(args: argparse.Namespace, **kwargs: Any) -> ApiClient:
    """An ApiClient for the flags' kubeconfig and context, impersonating --as."""
    from polsched.cluster.client import ApiClient

    return ApiClient.from_kubeconfig(getattr(args, "kubeconfig", None),
                                     getattr(args, "context", None),
                                     headers=impersonation(args), **kwargs)


def namespace(args: argparse.Namespace) -> str:
    """--namespace, else the context's namespace, else `default` (kubectl's order)."""
    given = getattr(args, "namespace", None)
    if given:
        return str(given)
    return context_namespace(getattr(args, "kubeconfig", None),
                             getattr(args, "context", None)) or DEFAULT_NAMESPACE


def context_namespace(path: str | None, context: str | None) -> str | None:
    """The `namespace` of `context` (default: current-context) in the kubeconfig at
    `path` (default: $KUBECONFIG, ':'-separated and merged as kubectl merges it: the
    first file that sets current-context, or defines a context, wins), or None."""
    import yaml

    paths = [p for p in (path or os.environ.get("KUBECONFIG") or
                         os.path.expanduser("~/.kube/config")).split(os.pathsep) if p]
    docs: list[Mapping[str, Any]] = []
    for p in paths:
        try:
            with open(p, "rb") as f:
                doc = yaml.load(f, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        except (OSError, yaml.YAMLError):
            continue  # the client says what is wrong with the file when it reads it
        if isinstance(doc, Mapping):
            docs.append(doc)
    name = context or next((d["current-context"] for d in docs if d.get("current-context")),
                           None)
    if not name:
        return None
    for d in docs:
        for entry in d.get("contexts") or ():
            if isinstance(entry, Mapping) and entry.get("name") == name:
                ctx = entry.get("context")
                ns = ctx.get("namespace") if isinstance(ctx, Mapping) else None
                return str(ns) if ns else None
    return None
