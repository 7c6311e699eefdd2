"""Webhook certificates the operator did not make (`--webhook-certificates external`, the
chart's cert-manager mode) on a real API server: a Secret written as cert-manager writes
it (tls.crt, tls.key, ca.crt; an ECDSA key, not the operator's RSA layout) is served as it
is, a replaced Secret is served at once without a restart, an unusable one leaves the
previous certificate served, and the operator never writes the Secret, never makes a CA
Secret and never touches the caBundle (cert-manager's CA injector owns it)."""

from __future__ import annotations

import base64
import ipaddress
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.conftest import Cluster, unique
from tests.e2e.operators import Harness, wait_for
from tests.e2e.rbac import OPERATOR_NAMESPACE
from tests.e2e.test_webhook_certs import (
    CA_SECRET,
    SECRET,
    bare_configuration,
    ca_bundle,
    put_secret,
    refuses_invalid_policy,
    same_cert,
    secret,
    served_certificate,
)

SERVICE = f"{OPERATOR_NAMESPACE}/polsched-webhook:443"


@pytest.fixture(scope="module")
def harness(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    h = Harness(cluster, Path(tmp_path_factory.mktemp("polsched-external-certs")))
    yield h
    h.reset()
    cluster.kubectl("delete", "validatingwebhookconfiguration", "polsched.io",
                    "--ignore-not-found", check=False)
    cluster.kubectl("delete", "secret", SECRET, CA_SECRET, "-n", OPERATOR_NAMESPACE,
                    "--ignore-not-found", check=False)


def issue(names: list[str]) -> dict[str, str]:
    """What cert-manager's Certificate writes into its Secret: a CA of its Issuer, a
    serving certificate it signed for `names`, the key (SEC1 PEM, cert-manager's default
    PKCS1 encoding for ECDSA) and ca.crt."""
    now = datetime.now(UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, unique("issuer"))])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - timedelta(minutes=1)).not_valid_after(now + timedelta(days=90))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
            .issuer_name(ca_name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(minutes=1)).not_valid_after(now + timedelta(days=90))
            .add_extension(x509.SubjectAlternativeName(
                [x509.DNSName(n) for n in names[1:]]
                + [x509.IPAddress(ipaddress.ip_address(names[0]))]),
                critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    return {"tls.crt": cert.public_bytes(pem).decode(),
            "tls.key": key.private_bytes(pem, serialization.PrivateFormat.TraditionalOpenSSL,
                                         serialization.NoEncryption()).decode(),
            "ca.crt": ca.public_bytes(pem).decode()}


def inject(h: Harness, port: int, ca: str) -> dict[str, Any]:
    """The configuration as cert-manager's CA injector leaves it (the caBundle is the
    Certificate's ca.crt); it calls the webhook at its URL, as a local process serves it."""
    conf = bare_configuration(port)
    conf["webhooks"][0]["clientConfig"]["caBundle"] = base64.b64encode(ca.encode()).decode()
    # Fail, as the chart installs it: a call that fails (the apiserver still on the
    # previous caBundle) refuses the policy without its field path, and the check is
    # retried, rather than admitting the invalid policy unchecked.
    conf["webhooks"][0]["failurePolicy"] = "Fail"
    h.cluster.apply(conf)
    return conf


def stored(h: Harness) -> tuple[dict[str, str], str]:
    """The Secret's data and resourceVersion."""
    obj = h.cluster.kubectl_json("get", "secret", SECRET, "-n", OPERATOR_NAMESPACE)
    return secret(h), str(obj["metadata"]["resourceVersion"])


def serves(port: int, cert: str) -> bool:
    try:
        return same_cert(served_certificate(port), cert)
    except OSError:
        return False


def test_the_operator_serves_and_reloads_a_certificate_it_did_not_make(
        harness: Harness, free_port: int) -> None:
    h = harness
    rid = unique("external")
    first = issue(["127.0.0.1", "polsched-webhook.polsched-system.svc"])
    put_secret(h, SECRET, first)
    inject(h, free_port, first["ca.crt"])
    h.operator(f"{rid}-op", "--webhook-listen", f"127.0.0.1:{free_port}",
               "--webhook-service", SERVICE, "--webhook-certificates", "external")
    wait_for(lambda: serves(free_port, first["tls.crt"]) or None, 60,
             "the webhook serving the Secret's certificate")
    # The apiserver, trusting the injected CA, gets the webhook's answers.
    assert wait_for(lambda: refuses_invalid_policy(h, rid) or None, 30,
                    "an invalid policy refused through the webhook")

    # cert-manager renews: a new key and certificate (of a new CA, as after the Issuer's
    # CA rotated) replace the Secret's; the injector updates the caBundle.
    second = issue(["127.0.0.1", "polsched-webhook.polsched-system.svc"])
    put_secret(h, SECRET, second)
    inject(h, free_port, second["ca.crt"])
    wait_for(lambda: serves(free_port, second["tls.crt"]) or None, 30,
             "the webhook serving the replaced certificate")
    assert wait_for(lambda: refuses_invalid_policy(h, rid) or None, 30,
                    "an invalid policy refused with the new certificate")

    # A Secret that cannot be served (a key of another certificate) is not loaded: the
    # running certificate stays, and the operator does not "repair" the Secret.
    broken = {**second, "tls.key": issue(["127.0.0.1"])["tls.key"]}
    put_secret(h, SECRET, broken)
    written = stored(h)
    wait_for(lambda: "tls.key is not the key of tls.crt" in h.procs[-1].log() or None, 30,
             "the operator reporting the unusable Secret")
    assert serves(free_port, second["tls.crt"])
    assert h.procs[-1].alive()

    # Never minted, never written, never injected: the Secret is the one written last
    # (same resourceVersion), no CA Secret exists, the caBundle is the injector's.
    assert stored(h) == written
    assert h.cluster.kubectl("get", "secret", CA_SECRET, "-n", OPERATOR_NAMESPACE,
                             check=False).returncode != 0
    assert ca_bundle(h) == second["ca.crt"]
    h.cluster.kubectl("delete", "schedulingpolicy", rid, "--ignore-not-found", check=False)


def test_external_certificates_need_the_in_cluster_service(harness: Harness,
                                                           free_port: int) -> None:
    p = harness.operator(unique("external-local"), "--webhook-listen",
                         f"127.0.0.1:{free_port}", "--webhook-certificates", "external")
    wait_for(lambda: not p.alive() or None, 30, "the operator exiting")
    assert "--webhook-certificates external needs --webhook-service" in p.log()
