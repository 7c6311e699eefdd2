"""The webhook's CA and serving certificate as polsched made them before it used the
`cryptography` package: with the openssl 3.0 commands of Debian bookworm's image,

    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj /CN=polsched-webhook-ca \
        -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
    openssl req -newkey rsa:2048 -nodes -subj /CN=NAMES[0]
    openssl x509 -req -CA ca.crt -CAkey ca.key -CAcreateserial -days 365 -extfile san.ext
        (subjectAltName=NAMES, basicConstraints=CA:FALSE,
         keyUsage=digitalSignature,keyEncipherment, extendedKeyUsage=serverAuth)

rebuilt here field by field (openssl added the subject and authority key identifiers of
its default configuration), so that a test can hand the new code what an existing install
has in its Secrets. Made fresh by each test session: no key is committed.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class OldPki:
    ca: str
    ca_key: str
    cert: str
    key: str
    not_before: datetime


def _usage(**on: bool) -> x509.KeyUsage:
    fields = ("digital_signature", "content_commitment", "key_encipherment",
              "data_encipherment", "key_agreement", "key_cert_sign", "crl_sign",
              "encipher_only", "decipher_only")
    return x509.KeyUsage(**{f: on.get(f, False) for f in fields})


def _pem(key: rsa.RSAPrivateKey) -> str:
    # `openssl req -nodes` wrote PKCS#8 ("BEGIN PRIVATE KEY").
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


def old_pki(names: Sequence[str], minted: datetime, *, ca_days: int = 3650,
            serving_days: int = 365) -> OldPki:
    """A CA and a serving certificate for `names`, both made at `minted`."""
    start = minted.replace(microsecond=0)
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "polsched-webhook-ca")])
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca_aki = x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski)
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(start).not_valid_after(start + timedelta(days=ca_days))
          .add_extension(ca_ski, critical=False)
          .add_extension(ca_aki, critical=False)
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(_usage(key_cert_sign=True, crl_sign=True), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    sans: list[x509.GeneralName] = []
    for n in names:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(n)))
        except ValueError:
            sans.append(x509.DNSName(n))
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
            .issuer_name(ca_name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(start + timedelta(days=serving_days))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=False)
            .add_extension(_usage(digital_signature=True, key_encipherment=True),
                           critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
                           critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                           critical=False)
            .add_extension(ca_aki, critical=False)
            .sign(ca_key, hashes.SHA256()))
    return OldPki(ca.public_bytes(serialization.Encoding.PEM).decode(), _pem(ca_key),
                  cert.public_bytes(serialization.Encoding.PEM).decode(), _pem(key), start)
