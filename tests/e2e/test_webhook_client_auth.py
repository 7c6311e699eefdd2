"""The webhook authenticates the API server (issue 36, By construction §7): with
--webhook-client-ca, only a client presenting a certificate of that CA is served. The
API server presents one through its AdmissionConfiguration (hack/cluster.sh configures
the test cluster's as an admin would: DIR/admission.yaml), so policies are still checked
at `kubectl apply`, while a pod that reaches the webhook's port gets no answer."""

from __future__ import annotations

import json
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from polsched.controller.webhook.configuration import WEBHOOK_ID
from tests.conftest import Cluster, unique
from tests.e2e.operators import Harness, wait_for, zone_policy

pytestmark = pytest.mark.e2e


@pytest.fixture
def harness(cluster: Cluster, tmp_path: Path) -> Iterator[Harness]:
    h = Harness(cluster, tmp_path)
    yield h
    h.reset()
    cluster.kubectl("delete", "validatingwebhookconfiguration", "polsched.io",
                    "--ignore-not-found", check=False)


def review(name: str) -> bytes:
    """An AdmissionReview as the API server sends one, for a policy the loader refuses."""
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u-1", "operation": "CREATE", "userInfo": {"username": "x"},
                        "kind": {"group": "polsched.io", "version": "v1alpha1",
                                 "kind": "SchedulingPolicy"},
                        "resource": {"group": "polsched.io", "version": "v1alpha1",
                                     "resource": "schedulingpolicies"},
                        "object": bad_policy(name)}}
    data = json.dumps(body).encode()
    return (f"POST /{WEBHOOK_ID} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
            f"\r\nContent-Length: {len(data)}\r\nConnection: close\r\n\r\n").encode() + data


def bad_policy(name: str) -> dict[str, Any]:
    """Admitted by the CRD's schema, refused by the loader (the webhook's check)."""
    policy = zone_policy(name, "a")
    policy["spec"]["filters"].append(
        {"name": "Expression", "args": {"expression": "node.metadata.name =="}})
    return policy


def call(port: int, request: bytes, cert: tuple[Path, Path] | None) -> bytes:
    """What the webhook answers a TLS client presenting `cert` (or none); b"" when the
    connection ends without an answer. The client does not check the server: the point
    is what the server accepts."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    if cert is not None:
        context.load_cert_chain(str(cert[0]), str(cert[1]))
    answer = b""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
                context.wrap_socket(raw) as tls:
            tls.sendall(request)
            while chunk := tls.recv(65536):
                answer += chunk
    except (ssl.SSLError, ConnectionError):
        pass  # the server refused the handshake (TLS 1.3 says so at the first read)
    return answer


def test_only_the_api_server_reaches_the_webhook(harness: Harness, free_port: int) -> None:
    h = harness
    pki = Path(h.cluster.kubeconfig).parent / "pki"
    client_ca = pki / "webhook-client-ca.crt"
    assert client_ca.exists(), f"{client_ca}: start the cluster with this hack/cluster.sh"
    rid = unique("whauth")
    h.operator(f"{rid}-op", "--webhook-listen", f"127.0.0.1:{free_port}",
               "--webhook-client-ca", str(client_ca))

    def configured() -> bool:
        p = h.cluster.kubectl("get", "validatingwebhookconfiguration", "polsched.io",
                              "-o", "jsonpath={.webhooks[*].clientConfig.url}", check=False)
        return f"127.0.0.1:{free_port}" in p.stdout
    wait_for(configured, 15, "the ValidatingWebhookConfiguration", interval=0.2)

    # The API server's admission still works: it presents its client certificate and the
    # webhook refuses the bad policy with the loader's field. (The local configuration's
    # failurePolicy is Ignore: had the handshake failed, the policy would be admitted.)
    bad = bad_policy(f"{rid}-bad")
    h.policies.append(bad["metadata"]["name"])

    def refused() -> str | None:
        p = h.cluster.kubectl("apply", "--dry-run=server", "-f", "-",
                              input=json.dumps(bad), check=False)
        return p.stderr if p.returncode != 0 else None
    err = wait_for(refused, 30, "the webhook refusing a bad policy", interval=0.5)
    assert "denied the request" in err and "spec.filters[1].args.expression" in err, err
    good = zone_policy(f"{rid}-good", "a")
    p = h.cluster.kubectl("apply", "--dry-run=server", "-f", "-", input=json.dumps(good),
                          check=False)
    assert p.returncode == 0, p.stderr

    # A client without a certificate, and one with a certificate of another CA (the
    # cluster's, which signs its users'), get no answer; the API server's certificate does.
    assert call(free_port, review(f"{rid}-x"), None) == b""
    assert call(free_port, review(f"{rid}-x"), (pki / "admin.crt", pki / "admin.key")) == b""
    answer = call(free_port, review(f"{rid}-x"),
                  (pki / "webhook-client.crt", pki / "webhook-client.key"))
    assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
    assert b'"allowed": false' in answer and b"spec.filters[1].args.expression" in answer, \
        answer[-600:]
