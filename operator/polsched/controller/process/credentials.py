"""Cluster credentials for the controller's two clients, from one source as kubectl:
--kubeconfig, else $KUBECONFIG, else the pod's service account, else ~/.kube/config.

The engine and the status writer use polsched.cluster.client.ApiClient; kopf (which runs
only to serve the admission webhook) gets the same server, CA and token or client
certificate through its login handler, so both talk to the same cluster as the same user.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from polsched.cluster import kubeconfig as kubeconfig_
from polsched.cluster.client import ApiClient, ClientLimits

if TYPE_CHECKING:
    import kopf


def _in_cluster(kubeconfig: str | None) -> bool:
    return bool(not kubeconfig and not os.environ.get("KUBECONFIG")
                and os.environ.get("KUBERNETES_SERVICE_HOST")
                and not os.path.exists(os.path.expanduser("~/.kube/config")))


def connection(kubeconfig: str | None) -> kubeconfig_.Connection:
    """The server and credentials of --kubeconfig, $KUBECONFIG, the service account or
    ~/.kube/config, in kubectl's order."""
    if _in_cluster(kubeconfig):
        return kubeconfig_.in_cluster()
    return kubeconfig_.from_kubeconfig(kubeconfig)


def api_client(kubeconfig: str | None, **kwargs: Any) -> ApiClient:
    return ApiClient.from_connection(connection(kubeconfig), **kwargs)


def budget(args: Any) -> dict[str, Any]:
    """The client-side request budget of --kube-api-qps and --kube-api-burst, as
    ApiClient's keyword arguments (a negative QPS: none)."""
    qps = float(getattr(args, "kube_api_qps", 0.0) or 0.0)
    if qps <= 0:
        return {}
    return {"limits": ClientLimits(qps=qps, burst=int(getattr(args, "kube_api_burst", 0) or 0))}


def connection_info(kubeconfig: str | None) -> kopf.ConnectionInfo:
    """kopf's credentials, read as kopf.login_via_client does but from our source."""
    from polsched.controller.process.kopf_import import kopf

    conn = connection(kubeconfig)
    header = conn.authorization()
    scheme: str | None = None
    token: str | None = None
    if header:
        parts = header.split(" ", 1)
        if len(parts) == 2:
            scheme, token = parts
        else:
            token = parts[0]
    return kopf.ConnectionInfo(
        server=conn.host,
        ca_path=conn.ssl_ca_cert,
        insecure=not conn.verify_ssl,
        scheme=scheme,
        token=token,
        certificate_path=conn.cert_file,
        private_key_path=conn.key_file,
    )
