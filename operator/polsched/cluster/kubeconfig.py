"""Where the API server is and how to authenticate: a kubeconfig's context or the pod's
service account, read as the kubernetes client's loaders read them (and so as kubectl).

The common shapes (one file; a server with a CA file or data or no verification; a user
with a token, a client certificate and key, or a username and password) are read here
directly: importing the kubernetes package costs ~0.4 s of CPU, a third of
`polsched run`'s start-up. Anything else (exec and auth-provider plugins, tokenFile,
impersonation, proxies, several files in $KUBECONFIG to merge) goes to
kubernetes.config, which remains the reference: the fast path yields the same
Connection for what it accepts (tests/unit/cluster/test_kubeconfig.py compares them).
"""

from __future__ import annotations

import atexit
import base64
import os
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

SERVICE_HOST_ENV = "KUBERNETES_SERVICE_HOST"
SERVICE_PORT_ENV = "KUBERNETES_SERVICE_PORT"
SERVICE_TOKEN_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/token"
SERVICE_CA_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"

# The keys the fast path understands; any other one sends the file to kubernetes.config.
_CLUSTER_KEYS = frozenset({"server", "certificate-authority", "certificate-authority-data",
                           "insecure-skip-tls-verify", "tls-server-name", "extensions"})
_USER_KEYS = frozenset({"token", "client-certificate", "client-certificate-data",
                        "client-key", "client-key-data", "username", "password",
                        "extensions"})
_CONTEXT_KEYS = frozenset({"cluster", "user", "namespace", "extensions"})


def _no_authorization() -> str | None:
    return None


@dataclass(frozen=True)
class Connection:
    """What a client needs: the server, TLS files and the Authorization header value.

    `authorization` is called whenever the header is (re)read: with kubernetes.config's
    loaders it runs their refresh hook (a rotated service-account token, an expired exec
    credential)."""

    host: str
    verify_ssl: bool = True
    ssl_ca_cert: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    tls_server_name: str | None = None
    authorization: Callable[[], str | None] = field(default=_no_authorization, compare=False)


class _Unsupported(Exception):
    """A shape the fast path leaves to kubernetes.config."""


def default_path() -> str:
    """kubectl's: $KUBECONFIG (read now, not at import), else ~/.kube/config."""
    return os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")


def from_kubeconfig(path: str | None = None, context: str | None = None) -> Connection:
    """The context `context` (default: current-context) of the kubeconfig at `path`
    (default: default_path(); a ':'-separated list is merged as kubectl does)."""
    path = path or default_path()
    try:
        return _read_kubeconfig(path, context)
    except _Unsupported:
        return _kubernetes_kubeconfig(path, context)


def in_cluster() -> Connection:
    """The pod's service account, as kubernetes.config.load_incluster_config: the token
    file is re-read each time the header is (the kubelet rotates it)."""
    host, port = os.environ.get(SERVICE_HOST_ENV), os.environ.get(SERVICE_PORT_ENV)
    if not host or not port:
        raise ValueError(f"in-cluster configuration: ${SERVICE_HOST_ENV} and "
                         f"${SERVICE_PORT_ENV} must be set (is this process in a pod?)")
    for f in (SERVICE_TOKEN_FILE, SERVICE_CA_FILE):
        if not os.path.isfile(f) or os.path.getsize(f) == 0:
            raise ValueError(f"in-cluster configuration: {f} is missing or empty "
                             "(is a service account token mounted?)")
    hostport = f"[{host}]:{port}" if ":" in host or "%" in host else f"{host}:{port}"

    def authorization() -> str | None:
        with open(SERVICE_TOKEN_FILE) as f:
            token = f.read()
        return "bearer " + token if token else None

    return Connection(host="https://" + hostport, ssl_ca_cert=SERVICE_CA_FILE,
                      authorization=authorization)


# -- the fast path -------------------------------------------------------------------------
def _read_kubeconfig(path: str, context: str | None) -> Connection:
    if os.pathsep in path and len([p for p in path.split(os.pathsep) if p]) > 1:
        raise _Unsupported("several files to merge")
    path = path.strip(os.pathsep)
    try:
        with open(path, "rb") as f:
            text = f.read()
    except OSError as e:
        raise _Unsupported(str(e)) from e  # kubernetes.config says it its way
    import yaml

    try:
        doc = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as e:
        raise _Unsupported(str(e)) from e
    if not isinstance(doc, dict):
        raise _Unsupported("not a mapping")
    name = context or doc.get("current-context")
    ctx = _named(doc, "contexts", "context", name)
    if set(ctx) - _CONTEXT_KEYS:
        raise _Unsupported("context fields")
    cluster = _named(doc, "clusters", "cluster", ctx.get("cluster"))
    user = _named(doc, "users", "user", ctx.get("user")) if ctx.get("user") else {}
    if set(cluster) - _CLUSTER_KEYS or set(user) - _USER_KEYS:
        raise _Unsupported("cluster or user fields")
    server = cluster.get("server")
    if not isinstance(server, str) or not server:
        raise _Unsupported("no server")
    host = server.rstrip("/")
    base = os.path.abspath(os.path.dirname(path))
    ca = cert = key = None
    if host.startswith("https"):  # as kubernetes.config: TLS files only for https
        ca = _file_or_data(cluster, "certificate-authority", base)
        cert = _file_or_data(user, "client-certificate", base)
        key = _file_or_data(user, "client-key", base)
    verify = True
    if "insecure-skip-tls-verify" in cluster:
        verify = not cluster["insecure-skip-tls-verify"]
    tls_name = cluster.get("tls-server-name")
    # kubernetes.config's order: a token first, then a username and password.
    header: str | None = None
    if user.get("token"):
        header = f"Bearer {user['token']}"
    elif "username" in user and "password" in user:
        raw = f"{user['username']}:{user['password']}".encode("latin-1")
        header = "Basic " + base64.b64encode(raw).decode()
    return Connection(host=host, verify_ssl=verify, ssl_ca_cert=ca, cert_file=cert,
                      key_file=key, tls_server_name=tls_name or None,
                      authorization=(lambda: header))


def _named(doc: Mapping[str, Any], section: str, key: str, name: Any) -> Mapping[str, Any]:
    if not isinstance(name, str) or not name:
        raise _Unsupported(f"no {key} name")
    entries = doc.get(section)
    if not isinstance(entries, list):
        raise _Unsupported(f"no {section}")
    for entry in entries:
        if isinstance(entry, dict) and entry.get("name") == name:
            value = entry.get(key)
            if value is None:
                return {}
            if not isinstance(value, dict):
                raise _Unsupported(f"{section} {name}")
            return value
    raise _Unsupported(f"{section}: no {name}")


_temp_files: dict[bytes, str] = {}


def _file_or_data(obj: Mapping[str, Any], key: str, base: str) -> str | None:
    """A path for obj[key + "-data"] (base64; written to a private temporary file, as
    kubernetes.config does) or obj[key] (relative to the kubeconfig's directory)."""
    data = obj.get(key + "-data")
    if data:
        try:
            content = base64.standard_b64decode(str(data).encode())
        except ValueError as e:
            raise _Unsupported(f"{key}-data") from e
        known = _temp_files.get(content)
        if known is not None and os.path.isfile(known):
            return known
        fd, name = tempfile.mkstemp(prefix="polsched-kubeconfig-")
        with os.fdopen(fd, "wb") as f:
            f.write(content)
        _temp_files[content] = name
        atexit.register(_remove, name)
        return name
    value = obj.get(key)
    if not value:
        return None
    full = os.path.normpath(os.path.join(base, str(value)))
    if not os.path.isfile(full):
        raise _Unsupported(f"{key}: no file {full}")  # kubernetes.config's error
    return full


def _remove(name: str) -> None:
    try:
        os.remove(name)
    except OSError:
        pass


# -- the reference: kubernetes.config ------------------------------------------------------
def _kubernetes_kubeconfig(path: str, context: str | None) -> Connection:
    from kubernetes import client as k8s_client
    from kubernetes import config as k8s_config

    cfg = k8s_client.Configuration()
    k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
        config_file=path, context=context, client_configuration=cfg, persist_config=False)
    return _from_kubernetes(cfg)


def _from_kubernetes(cfg: Any) -> Connection:
    def authorization() -> str | None:
        # Runs the loader's refresh hook (an expired exec credential is re-run).
        value: str | None = cfg.get_api_key_with_prefix("BearerToken", alias="authorization")
        if value and " " not in value:
            value = "Bearer " + value
        return value

    return Connection(host=cfg.host, verify_ssl=bool(cfg.verify_ssl),
                      ssl_ca_cert=cfg.ssl_ca_cert or None, cert_file=cfg.cert_file or None,
                      key_file=cfg.key_file or None,
                      tls_server_name=getattr(cfg, "tls_server_name", None) or None,
                      authorization=authorization)
