"""polsched.controller.webhook certificates: made when missing, renewed before expiry,
a new CA trusted next to the old one until the old one expires."""

from __future__ import annotations

import subprocess
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from polsched.controller.webhook import (
    Certificates,
    first_pem,
    renewed,
    service_names,
    validity,
)

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
    from polsched.controller.webhook import new_serving

    cert, key = new_serving(fresh.ca, fresh.ca_key, NAMES, days=1)
    short = Certificates(fresh.ca_bundle, fresh.ca_key, cert, key, fresh.names)
    out = renewed(short, NAMES, NOW)
    assert out is not None and out.cert != cert and out.ca == fresh.ca
