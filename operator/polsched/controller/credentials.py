"""Cluster credentials for the controller's two clients, from one source as kubectl:
--kubeconfig, else $KUBECONFIG, else the pod's service account, else ~/.kube/config.

The engine and the status writer use polsched.cluster.client.ApiClient; kopf gets the
same server, CA and token or client certificate through its login handler, so both talk
to the same cluster as the same user.
"""

from __future__ import annotations

import os
from typing import Any

import kopf

from polsched.cluster.client import ApiClient


def _in_cluster(kubeconfig: str | None) -> bool:
    return bool(not kubeconfig and not os.environ.get("KUBECONFIG")
                and os.environ.get("KUBERNETES_SERVICE_HOST")
                and not os.path.exists(os.path.expanduser("~/.kube/config")))


def api_client(kubeconfig: str | None, **kwargs: Any) -> ApiClient:
    if _in_cluster(kubeconfig):
        return ApiClient.in_cluster(**kwargs)
    return ApiClient.from_kubeconfig(kubeconfig, **kwargs)


def kube_configuration(kubeconfig: str | None) -> Any:
    """A kubernetes.client.Configuration for the same source as api_client()."""
    from kubernetes import client as k8s_client
    from kubernetes import config as k8s_config

    cfg = k8s_client.Configuration()
    if _in_cluster(kubeconfig):
        k8s_config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
    else:
        path = kubeconfig or os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
        k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=path, client_configuration=cfg, persist_config=False)
    return cfg


def connection_info(kubeconfig: str | None) -> kopf.ConnectionInfo:
    """kopf's credentials, read as kopf.login_via_client does but from our source."""
    cfg = kube_configuration(kubeconfig)
    header: str | None = (cfg.get_api_key_with_prefix("BearerToken")
                          or cfg.get_api_key_with_prefix("authorization"))
    scheme: str | None = None
    token: str | None = None
    if header:
        parts = header.split(" ", 1)
        if len(parts) == 2:
            scheme, token = parts
        else:
            token = parts[0]
    return kopf.ConnectionInfo(
        server=cfg.host,
        ca_path=cfg.ssl_ca_cert,
        insecure=not cfg.verify_ssl,
        username=cfg.username or None,
        password=cfg.password or None,
        scheme=scheme,
        token=token,
        certificate_path=cfg.cert_file,
        private_key_path=cfg.key_file,
    )
