"""polsched.controller.webhook certificates: made when missing, renewed before expiry,
a new CA trusted next to the old one until the old one expires."""

from __future__ import annotations

import subprocess
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from polsched.controller.webhook import certificates
from polsched.controller.webhook import server as webhook_server
from polsched.controller.webhook.certificates import Certificates, first_pem, renewed, validity
from polsched.controller.webhook.server import service_names
from tests.old_webhook_pki import OldPki, old_pki

pytestmark = pytest.mark.unit

NAMES = service_names("polsched-system", "polsched-webhook")
NOW = datetime.now(UTC)


def verifies(bundle: str, cert: str, name: str) -> bool:
    """openssl's own chain and hostname check, as the apiserver makes it."""
    with tempfile.TemporaryDirectory() as d:
        Path(d, "ca.crt").write_text(bundle)
        Path(d, "tls.crt").write_text(cert)
        p = subprocess.run(["openssl", "verify", "-CAfile", f"{d}/ca.crt", "-verify_hostname",
                            name, f"{d}/tls.crt"], capture_output=True, text=True)
        return p.returncode == 0


@pytest.fixture(scope="module")
def fresh() -> Certificates:
    certs = renewed(None, NAMES, NOW)
    assert certs is not None
    return certs


def test_first_certificates_serve_the_service_names(fresh: Certificates) -> None:
    assert fresh.names == tuple(NAMES)
    assert verifies(fresh.ca_bundle, fresh.cert, "polsched-webhook.polsched-system.svc")
    assert not verifies(fresh.ca_bundle, fresh.cert, "elsewhere.example")
    ca_end, cert_end = validity(fresh.ca)[1], validity(fresh.cert)[1]
    assert ca_end - NOW > timedelta(days=3000) and cert_end - NOW > timedelta(days=300)


def test_nothing_changes_while_far_from_expiry(fresh: Certificates) -> None:
    assert renewed(fresh, NAMES, NOW + timedelta(days=200)) is None


def test_serving_certificate_renewed_in_its_last_third(fresh: Certificates) -> None:
    later = NOW + timedelta(days=250)  # 115 of 365 days left
    out = renewed(fresh, NAMES, later)
    assert out is not None
    assert out.ca_bundle == fresh.ca_bundle and out.ca_key == fresh.ca_key
    assert out.cert != fresh.cert
    assert verifies(out.ca_bundle, out.cert, NAMES[0])


def test_serving_certificate_renewed_when_the_names_change(fresh: Certificates) -> None:
    other = service_names("elsewhere", "polsched-webhook")
    out = renewed(fresh, other, NOW)
    assert out is not None and out.ca == fresh.ca
    assert verifies(out.ca_bundle, out.cert, "polsched-webhook.elsewhere.svc")


def test_new_ca_trusted_next_to_the_old_one(fresh: Certificates) -> None:
    later = NOW + timedelta(days=2500)  # the CA has < 1/3 of its 10 years left
    out = renewed(fresh, NAMES, later)
    assert out is not None
    assert out.ca != fresh.ca and out.ca_key != fresh.ca_key
    assert first_pem(out.ca_bundle) == out.ca and fresh.ca in out.ca_bundle
    assert verifies(out.ca_bundle, out.cert, NAMES[0])
    # A replica still presenting the old serving certificate stays trusted meanwhile.
    assert verifies(out.ca_bundle, fresh.cert, NAMES[0])


def test_a_short_lived_certificate_is_renewed_at_once(fresh: Certificates) -> None:
    from polsched.controller.webhook.certificates import new_serving

    cert, key = new_serving(fresh.ca, fresh.ca_key, NAMES, days=1)
    short = Certificates(fresh.ca_bundle, fresh.ca_key, cert, key, fresh.names)
    out = renewed(short, NAMES, NOW)
    assert out is not None and out.cert != cert and out.ca == fresh.ca


# -- certificates the openssl commands of earlier versions made ---------------------------

MINTED = NOW - timedelta(days=100)  # an install that has run for 100 days


@pytest.fixture(scope="module")
def old() -> OldPki:
    return old_pki(NAMES, MINTED)


def stored(o: OldPki) -> Certificates:
    return Certificates(o.ca, o.ca_key, o.cert, o.key, tuple(NAMES))


def test_an_old_installs_certificates_are_read_and_kept(old: OldPki) -> None:
    info = certificates.inspect(old.cert)
    assert info.names == frozenset(NAMES) and not info.is_ca
    assert certificates.inspect(old.ca).is_ca
    assert certificates.key_matches(old.cert, old.key)
    assert certificates.key_matches(old.ca, old.ca_key)
    assert certificates.signed_by(old.cert, old.ca)
    assert certificates.not_after(old.cert) == MINTED.replace(microsecond=0) + timedelta(
        days=365)
    assert renewed(stored(old), NAMES, NOW) is None


def test_an_old_installs_serving_certificate_is_renewed_by_its_ca(old: OldPki) -> None:
    later = MINTED + timedelta(days=250)  # 115 of its 365 days left
    out = renewed(stored(old), NAMES, later)
    assert out is not None
    assert out.ca_bundle == old.ca and out.ca_key == old.ca_key
    assert out.cert != old.cert and serves(out)


def test_an_old_installs_ca_is_rotated_and_trusted_meanwhile(old: OldPki) -> None:
    later = MINTED + timedelta(days=2500)  # the CA in its last third
    out = renewed(stored(old), NAMES, later)
    assert out is not None
    assert out.ca != old.ca and out.ca_key != old.ca_key and serves(out)
    assert out.ca_bundle == out.ca + old.ca
    # Replicas still presenting the old serving certificate stay trusted.
    assert verifies(out.ca_bundle, old.cert, NAMES[0])


def _layout(pem: str) -> list[tuple[str, bool, object]]:
    """A certificate's extensions (key identifiers by kind only: they hash the keys)."""
    cert = x509.load_pem_x509_certificate(pem.encode())
    return [(e.oid.dotted_string, e.critical,
             type(e.value).__name__ if isinstance(
                 e.value, x509.SubjectKeyIdentifier | x509.AuthorityKeyIdentifier)
             else e.value) for e in cert.extensions]


def test_new_certificates_are_laid_out_as_the_old_ones(old: OldPki,
                                                       fresh: Certificates) -> None:
    """Same key type and size, signature, subjects, extensions and lifetimes as the
    openssl commands made: what reads an old install's certificates reads the new."""
    for new_pem, old_pem in ((fresh.ca, old.ca), (fresh.cert, old.cert)):
        new, was = (x509.load_pem_x509_certificate(p.encode()) for p in (new_pem, old_pem))
        assert _layout(new_pem) == _layout(old_pem)
        assert new.subject == was.subject and new.issuer == was.issuer
        assert new.signature_hash_algorithm is not None
        assert was.signature_hash_algorithm is not None
        assert new.signature_hash_algorithm.name == was.signature_hash_algorithm.name
        new_key, old_key = new.public_key(), was.public_key()
        assert isinstance(new_key, rsa.RSAPublicKey) and isinstance(old_key, rsa.RSAPublicKey)
        assert new_key.key_size == old_key.key_size == 2048
        assert (new.not_valid_after_utc - new.not_valid_before_utc
                == was.not_valid_after_utc - was.not_valid_before_utc)
    for key in (fresh.key, fresh.ca_key):
        assert key.startswith("-----BEGIN PRIVATE KEY-----")  # PKCS#8, as openssl wrote
    ca, cert = (x509.load_pem_x509_certificate(p.encode()) for p in (fresh.ca, fresh.cert))
    ski = ca.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    aki = cert.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value
    assert aki.key_identifier == ski.digest


def test_not_after_is_the_serving_certificates_expiry(fresh: Certificates) -> None:
    assert fresh.not_after == validity(fresh.cert)[1] == certificates.not_after(fresh.cert)
    assert certificates.not_after(fresh.ca) == validity(fresh.ca)[1]
    assert fresh.not_after - datetime.now(UTC) > timedelta(days=364)
    with pytest.raises(RuntimeError):
        certificates.not_after("garbage")


# -- whatever is invalid is made again (cert-controller's rotator) -----------------------

@pytest.fixture(scope="module")
def stranger() -> Certificates:
    """Certificates of another CA, for mismatches."""
    certs = renewed(None, NAMES, NOW)
    assert certs is not None
    return certs


def replace(c: Certificates, **fields: str) -> Certificates:
    values = {"ca_bundle": c.ca_bundle, "ca_key": c.ca_key, "cert": c.cert, "key": c.key}
    values.update(fields)
    return Certificates(names=c.names, **values)


def serves(out: Certificates) -> bool:
    """The key is the certificate's, the CA signed it, and it names the Service."""
    return (certificates.key_matches(out.cert, out.key) and certificates.signed_by(out.cert, out.ca)
            and verifies(out.ca_bundle, out.cert, NAMES[0]))


@pytest.mark.parametrize("field, value", [
    ("cert", "garbage"),
    ("cert", "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"),
    ("key", "not a key"),
    ("cert", ""),
])
def test_a_garbage_serving_certificate_or_key_is_made_again(
        fresh: Certificates, field: str, value: str) -> None:
    out = renewed(replace(fresh, **{field: value}), NAMES, NOW)
    assert out is not None
    assert out.ca == fresh.ca and out.ca_key == fresh.ca_key  # the CA is fine: kept
    assert serves(out)


def test_a_key_of_another_certificate_is_made_again(fresh: Certificates,
                                                    stranger: Certificates) -> None:
    out = renewed(replace(fresh, key=stranger.key), NAMES, NOW)
    assert out is not None and out.ca == fresh.ca and serves(out)


def test_a_certificate_of_another_ca_is_made_again(fresh: Certificates,
                                                   stranger: Certificates) -> None:
    out = renewed(replace(fresh, cert=stranger.cert, key=stranger.key), NAMES, NOW)
    assert out is not None and out.ca == fresh.ca and out.cert != stranger.cert
    assert serves(out)


def test_a_certificate_for_other_names_is_made_again(fresh: Certificates) -> None:
    cert, key = certificates.new_serving(fresh.ca, fresh.ca_key, ["elsewhere.example"])
    out = renewed(replace(fresh, cert=cert, key=key), NAMES, NOW)
    assert out is not None and serves(out)


@pytest.mark.parametrize("field, value", [
    ("ca_bundle", "garbage"),
    ("ca_key", "garbage"),
    ("ca_key", ""),
])
def test_a_garbage_ca_is_replaced_and_everything_signed_again(
        fresh: Certificates, field: str, value: str) -> None:
    out = renewed(replace(fresh, **{field: value}), NAMES, NOW)
    assert out is not None
    assert out.ca != fresh.ca and out.cert != fresh.cert
    assert "garbage" not in out.ca_bundle
    assert serves(out)


def test_a_ca_key_of_another_ca_is_replaced(fresh: Certificates,
                                            stranger: Certificates) -> None:
    out = renewed(replace(fresh, ca_key=stranger.ca_key), NAMES, NOW)
    assert out is not None and out.ca != fresh.ca and out.ca != stranger.ca
    assert serves(out)


def test_a_ca_key_that_matches_but_cannot_sign_is_replaced(fresh: Certificates) -> None:
    """The CA key's public half is the CA's, its private numbers are not consistent
    (what a corrupted Secret may hold): the CA cannot sign, so a new one is made."""
    numbers = serialization.load_pem_private_key(fresh.ca_key.encode(), None)
    assert isinstance(numbers, rsa.RSAPrivateKey)
    n = numbers.private_numbers()
    broken = rsa.RSAPrivateNumbers(n.p, n.q, n.d + 2, n.dmp1, n.dmq1, n.iqmp,
                                   n.public_numbers).private_key(
        unsafe_skip_rsa_key_validation=True)
    bad_key = broken.private_bytes(serialization.Encoding.PEM,
                                   serialization.PrivateFormat.PKCS8,
                                   serialization.NoEncryption()).decode()
    assert certificates.key_matches(fresh.ca, bad_key)  # the public half matches
    out = renewed(replace(fresh, ca_key=bad_key, cert=""), NAMES, NOW)
    assert out is not None and out.ca != fresh.ca and out.ca_key != bad_key
    assert out.ca_bundle == out.ca + fresh.ca  # the old CA still trusted meanwhile
    assert serves(out)


def test_a_serving_certificate_is_not_a_ca(fresh: Certificates) -> None:
    out = renewed(replace(fresh, ca_bundle=fresh.cert, ca_key=fresh.key), NAMES, NOW)
    assert out is not None and out.ca != fresh.cert and serves(out)


def test_garbage_in_the_bundle_is_dropped_and_the_rest_kept(fresh: Certificates) -> None:
    out = renewed(replace(fresh, ca_bundle=fresh.ca_bundle + "junk\n"), NAMES, NOW)
    assert out is not None
    assert out.ca_bundle == fresh.ca_bundle and out.cert == fresh.cert


def test_the_server_waits_for_certificates_instead_of_ending() -> None:
    """A Secret that cannot be read yet (the API server restarting, a grant missing) is
    retried: the webhook task does not end, which would end the process."""
    import asyncio
    import socket
    from collections.abc import AsyncIterator
    from typing import Any

    from polsched.cluster.backoff import Backoff

    class Flaky:
        def __init__(self) -> None:
            self.calls = 0

        async def ensure(self) -> Certificates:
            self.calls += 1
            if self.calls < 3:
                raise RuntimeError("reading the webhook's Secret: 503 ServiceUnavailable")
            certs = renewed(None, ["127.0.0.1"], NOW)
            assert certs is not None
            return certs

        async def changes(self) -> AsyncIterator[None]:
            await asyncio.Event().wait()
            yield None

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    source = Flaky()

    async def main() -> Any:
        server = webhook_server.ManagedWebhookServer(
            f"127.0.0.1:{port}", source,
            timing=webhook_server.Timing(backoff=lambda: Backoff(initial=0.01, cap=0.02)))

        async def fn(*_: Any, **__: Any) -> Any:
            return {}

        agen = server(fn)
        try:
            return await asyncio.wait_for(agen.__anext__(), 30)
        finally:
            await agen.aclose()  # type: ignore[attr-defined]

    config = asyncio.run(main())
    assert source.calls == 3
    assert config["url"] == f"https://127.0.0.1:{port}"
