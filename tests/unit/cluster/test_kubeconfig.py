"""polsched.cluster.kubeconfig reads the common kubeconfig shapes itself and must yield
what kubernetes.config's loaders yield for them (the reference, and the fallback for the
rest): the same server, TLS material, verification and Authorization header."""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from polsched.cluster import kubeconfig

pytestmark = pytest.mark.unit

CA = b"-----BEGIN CERTIFICATE-----\nca\n-----END CERTIFICATE-----\n"
CERT = b"-----BEGIN CERTIFICATE-----\ncert\n-----END CERTIFICATE-----\n"
KEY = b"-----BEGIN PRIVATE KEY-----\nkey\n-----END PRIVATE KEY-----\n"


def b64(data: bytes) -> str:
    return base64.standard_b64encode(data).decode()


def write(path: Path, cluster: dict[str, Any], user: dict[str, Any] | None,
          others: int = 0) -> str:
    doc: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Config", "current-context": "main",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": user}] if user is not None else [],
        "contexts": [{"name": "main", "context": {"cluster": "c", "namespace": "ns"}}]}
    if user is not None:
        doc["contexts"][0]["context"]["user"] = "u"
    for i in range(others):  # other contexts, with their own server and token
        doc["clusters"].append({"name": f"c{i}", "cluster": {"server": f"http://other{i}:80"}})
        doc["users"].append({"name": f"u{i}", "user": {"token": f"tok{i}"}})
        doc["contexts"].append({"name": f"ctx{i}", "context": {"cluster": f"c{i}",
                                                              "user": f"u{i}"}})
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def content(path: str | None) -> bytes | None:
    return Path(path).read_bytes() if path else None


def same(fast: kubeconfig.Connection, ref: kubeconfig.Connection) -> None:
    """Equal, the temporary files of *-data compared by content."""
    assert (fast.host, fast.verify_ssl, fast.tls_server_name) == \
        (ref.host, ref.verify_ssl, ref.tls_server_name)
    for attr in ("ssl_ca_cert", "cert_file", "key_file"):
        assert content(getattr(fast, attr)) == content(getattr(ref, attr)), attr
    assert fast.authorization() == ref.authorization()


SHAPES: dict[str, tuple[dict[str, Any], dict[str, Any] | None]] = {
    "client certificate as data": (
        {"server": "https://127.0.0.1:6443", "certificate-authority-data": b64(CA)},
        {"client-certificate-data": b64(CERT), "client-key-data": b64(KEY)}),
    "files relative to the kubeconfig, bearer token": (
        {"server": "https://api.example:6443/", "certificate-authority": "pki/ca.crt"},
        {"token": "abc.def", "client-certificate": "pki/c.crt", "client-key": "pki/c.key"}),
    "no verification, username and password": (
        {"server": "https://10.0.0.1", "insecure-skip-tls-verify": True},
        {"username": "admin", "password": "s3cret"}),
    "token before username and password, tls-server-name": (
        {"server": "https://10.0.0.1:443", "certificate-authority-data": b64(CA),
         "tls-server-name": "kubernetes.default"},
        {"token": "t", "username": "admin", "password": "x"}),
    "plain http ignores TLS files": (
        {"server": "http://127.0.0.1:8080", "certificate-authority": "pki/ca.crt"},
        {"client-certificate": "pki/c.crt", "client-key": "pki/c.key"}),
    "a context without a user": ({"server": "https://127.0.0.1:6443"}, None),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_the_fast_path_reads_what_kubernetes_config_reads(tmp_path: Path, shape: str) -> None:
    (tmp_path / "pki").mkdir()
    (tmp_path / "pki" / "ca.crt").write_bytes(CA)
    (tmp_path / "pki" / "c.crt").write_bytes(CERT)
    (tmp_path / "pki" / "c.key").write_bytes(KEY)
    cluster, user = SHAPES[shape]
    path = write(tmp_path / "config", cluster, user)
    fast = kubeconfig._read_kubeconfig(path, None)
    same(fast, kubeconfig._kubernetes_kubeconfig(path, None))
    assert kubeconfig.from_kubeconfig(path) == fast  # taken by from_kubeconfig


def test_a_named_context_and_kubeconfig_from_the_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path / "config", {"server": "https://127.0.0.1:6443"}, {"token": "t"},
                 others=2)
    monkeypatch.setenv("KUBECONFIG", path)
    conn = kubeconfig.from_kubeconfig(None, "ctx1")
    same(conn, kubeconfig._kubernetes_kubeconfig(path, "ctx1"))
    assert (conn.host, conn.authorization()) == ("http://other1:80", "Bearer tok1")
    assert kubeconfig.from_kubeconfig().host == "https://127.0.0.1:6443"


def test_exec_credentials_go_to_kubernetes_config(tmp_path: Path) -> None:
    """An exec plugin is left to kubernetes.config, which runs it (and re-runs it when
    the credential expires)."""
    cred = {"apiVersion": "client.authentication.k8s.io/v1beta1", "kind": "ExecCredential",
            "status": {"token": "from-exec"}}
    user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1beta1",
                     "command": sys.executable,
                     "args": ["-c", f"print({json.dumps(json.dumps(cred))})"]}}
    path = write(tmp_path / "config", {"server": "https://127.0.0.1:6443"}, user)
    with pytest.raises(kubeconfig._Unsupported):
        kubeconfig._read_kubeconfig(path, None)
    assert kubeconfig.from_kubeconfig(path).authorization() == "Bearer from-exec"


def test_several_files_are_merged_by_kubernetes_config(tmp_path: Path) -> None:
    first = write(tmp_path / "a", {"server": "https://first:6443"}, {"token": "one"})
    second = write(tmp_path / "b", {"server": "https://second:6443"}, {"token": "two"})
    conn = kubeconfig.from_kubeconfig(f"{first}:{second}")
    assert (conn.host, conn.authorization()) == ("https://first:6443", "Bearer one")


def test_a_missing_file_fails_as_kubernetes_config_does(tmp_path: Path) -> None:
    with pytest.raises(Exception) as fast:
        kubeconfig.from_kubeconfig(str(tmp_path / "nope"))
    with pytest.raises(Exception) as ref:
        kubeconfig._kubernetes_kubeconfig(str(tmp_path / "nope"), None)
    assert type(fast.value) is type(ref.value)


def test_in_cluster_as_the_kubernetes_loader(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from kubernetes import client as k8s_client
    from kubernetes.config import incluster_config

    token, ca = tmp_path / "token", tmp_path / "ca.crt"
    token.write_text("sa-token-1")
    ca.write_bytes(CA)
    monkeypatch.setattr(kubeconfig, "SERVICE_TOKEN_FILE", str(token))
    monkeypatch.setattr(kubeconfig, "SERVICE_CA_FILE", str(ca))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    cfg = k8s_client.Configuration()
    # The client's config loaders carry no type hints.
    incluster_config.InClusterConfigLoader(  # type: ignore[no-untyped-call]
        token_filename=str(token), cert_filename=str(ca)).load_and_set(cfg)
    conn = kubeconfig.in_cluster()
    same(conn, kubeconfig._from_kubernetes(cfg))
    assert conn.host == "https://[fd00::1]:443"
    token.write_text("sa-token-2")  # rotated by the kubelet: the next read sees it
    assert conn.authorization() == "bearer sa-token-2"


def test_in_cluster_outside_a_pod_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(ValueError, match="KUBERNETES_SERVICE_HOST"):
        kubeconfig.in_cluster()
