"""The webhook's PKI: a CA and a serving certificate made, inspected and renewed.

Pure functions over PEM text (no API server): new_ca and new_serving make them,
ca_problem and serving_problem say what is wrong with a stored pair, and renewed() decides
whether, and what, to make again (a CA bundle that keeps the old CA while it is still
trusted, so that the apiserver never sees a certificate of a CA it does not know yet).
not_after() is a certificate's expiry, for whoever reports it.

Made and read in-process with the `cryptography` package (no openssl command in the
image, nothing parsed from a command's text output). The certificates are laid out as
the openssl commands of earlier versions made them (RSA 2048 keys in PKCS#8 PEM, SHA-256
signatures, the same names, extensions and validity), so that a pair those versions
stored is read, kept and rotated as it is.
"""

from __future__ import annotations

import base64
import ipaddress
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import dsa, ec, ed448, ed25519, rsa
from cryptography.hazmat.primitives.asymmetric.types import (
    CertificateIssuerPrivateKeyTypes,
    PrivateKeyTypes,
)
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

log = logging.getLogger(__name__)

CA_DAYS = 3650
SERVING_DAYS = 365
# Renew a certificate once less than this fraction of its lifetime remains (as
# controller-runtime's cert-rotator and kubelet's client rotation do, roughly).
RENEW_FRACTION = 1 / 3
RENEW_BEFORE = timedelta(days=7)

CA_NAME = "polsched-webhook-ca"  # the CA's subject and issuer CN
KEY_BITS = 2048
_MAX_CN = 64  # RFC 5280's upper bound on a commonName


_PEM_CERT = re.compile(r"-----BEGIN CERTIFICATE-----\r?\n.+?-----END CERTIFICATE-----",
                       re.DOTALL)


def pem_certificates(bundle: str) -> list[str]:
    """The PEM certificate blocks of `bundle`, in order, each ending in a newline;
    anything between or around them (garbage someone wrote) is left out."""
    return [m.group(0) + "\n" for m in _PEM_CERT.finditer(bundle or "")]


def first_pem(bundle: str) -> str:
    """The first certificate of `bundle` (the current CA of a CA bundle); "" if none."""
    certs = pem_certificates(bundle)
    return certs[0] if certs else ""


def _certificate(cert_pem: str) -> x509.Certificate:
    """The first certificate of `cert_pem`, parsed; RuntimeError when there is none or
    it does not parse."""
    pem = first_pem(cert_pem)
    if not pem:
        raise RuntimeError("no PEM certificate")
    try:
        return x509.load_pem_x509_certificate(pem.encode())
    except ValueError as e:
        raise RuntimeError(f"unreadable certificate: {e}") from e


def _private_key(key_pem: str, *, sign: bool) -> PrivateKeyTypes:
    """The private key of `key_pem` (PEM, unencrypted); RuntimeError otherwise. An RSA
    key is checked for consistency (~60 ms of CPU) only when it is to `sign`: comparing
    its public half with a certificate's needs no more than parsing."""
    if "PRIVATE KEY-----" not in (key_pem or ""):
        raise RuntimeError("no PEM private key")
    try:
        return serialization.load_pem_private_key(
            key_pem.encode(), password=None, unsafe_skip_rsa_key_validation=not sign)
    except (ValueError, TypeError, UnsupportedAlgorithm) as e:
        raise RuntimeError(f"unreadable private key: {e}") from e


@dataclass(frozen=True)
class CertInfo:
    """What the checks read from one certificate."""

    not_before: datetime
    not_after: datetime
    names: frozenset[str]  # subjectAltName DNS names and IP addresses (normalized)
    is_ca: bool


def inspect(cert_pem: str) -> CertInfo:
    """Parse the first certificate of `cert_pem`; RuntimeError when it is not one."""
    cert = _certificate(cert_pem)
    names: set[str] = set()
    try:
        start, end = cert.not_valid_before_utc, cert.not_valid_after_utc
        try:
            san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        except x509.ExtensionNotFound:
            pass
        else:
            names.update(n.lower() for n in san.get_values_for_type(x509.DNSName))
            names.update(str(ip) for ip in san.get_values_for_type(x509.IPAddress))
        try:
            is_ca = cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
        except x509.ExtensionNotFound:
            is_ca = False
    except ValueError as e:  # a malformed extension, or a duplicate one
        raise RuntimeError(f"unreadable certificate: {e}") from e
    return CertInfo(start, end, frozenset(names), is_ca)


def validity(cert_pem: str) -> tuple[datetime, datetime]:
    """(notBefore, notAfter) of the first certificate in `cert_pem`, in UTC."""
    info = inspect(cert_pem)
    return info.not_before, info.not_after


def not_after(cert_pem: str) -> datetime:
    """When the first certificate of `cert_pem` expires (notAfter, UTC): for a
    certificate-expiry metric, say of Certificates.cert or Certificates.ca. RuntimeError
    when it does not parse."""
    return _certificate(cert_pem).not_valid_after_utc


def _due(info: CertInfo, now: datetime, fraction: float) -> bool:
    return info.not_after - now < max((info.not_after - info.not_before) * fraction,
                                      RENEW_BEFORE)


def due(cert_pem: str, now: datetime, fraction: float = RENEW_FRACTION) -> bool:
    """True when less than `fraction` of the certificate's lifetime remains, or less
    than RENEW_BEFORE (a short-lived certificate someone put in the Secret)."""
    return _due(inspect(cert_pem), now, fraction)


def _spki(key: object) -> bytes | None:
    public_bytes = getattr(key, "public_bytes", None)
    if public_bytes is None:
        return None
    spki: bytes = public_bytes(serialization.Encoding.DER,
                               serialization.PublicFormat.SubjectPublicKeyInfo)
    return spki


def key_matches(cert_pem: str, key_pem: str) -> bool:
    """Whether `key_pem` is a private key and the key of the first certificate of
    `cert_pem` (what ssl needs to serve them: load_cert_chain refuses a mismatch)."""
    try:
        cert, key = _certificate(cert_pem), _private_key(key_pem, sign=False)
        cert_key = cert.public_key()
    except (RuntimeError, ValueError, UnsupportedAlgorithm):
        return False
    mine = _spki(cert_key)
    return mine is not None and mine == _spki(key.public_key())


def signed_by(cert_pem: str, ca_pem: str) -> bool:
    """Whether the first certificate of `cert_pem` chains to the CA `ca_pem`: the CA
    (basicConstraints CA:TRUE, keyCertSign if it has a keyUsage) issued it and its
    signature verifies. Validity dates are left to `due`: the clock may be a test's."""
    try:
        cert, ca = _certificate(cert_pem), _certificate(ca_pem)
        if not inspect(ca_pem).is_ca:
            return False
        try:
            usage = ca.extensions.get_extension_for_class(x509.KeyUsage).value
            if not usage.key_cert_sign:
                return False
        except x509.ExtensionNotFound:
            pass
        cert.verify_directly_issued_by(ca)
    except (RuntimeError, ValueError, TypeError, InvalidSignature, UnsupportedAlgorithm):
        return False
    return True


def ca_problem(ca_pem: str, ca_key: str, now: datetime) -> str | None:
    """Why the CA cannot sign the next serving certificate, or None when it can: as
    open-policy-agent/cert-controller's validCACert plus a key check."""
    if not first_pem(ca_pem):
        return "no CA certificate" if not (ca_pem or "").strip() else \
            "the CA certificate is not PEM"
    if not (ca_key or "").strip():
        return "no CA key"
    try:
        info = inspect(ca_pem)
    except RuntimeError:
        return "the CA certificate does not parse"
    if not info.is_ca:
        return "the CA certificate is not a CA (basicConstraints CA:TRUE)"
    if not key_matches(ca_pem, ca_key):
        return "the CA key does not match the CA certificate"
    if _due(info, now, RENEW_FRACTION):
        return f"the CA expires at {info.not_after.isoformat()}"
    return None


def serving_problem(cert: str, key: str, ca_pem: str, names: Sequence[str],
                    now: datetime) -> str | None:
    """Why the serving certificate must be made again, or None when it can serve: it
    parses, its key matches, the CA signed it, it is not due, and its subjectAltNames
    cover `names` (cert-controller's validServerCert)."""
    if not first_pem(cert):
        return "no serving certificate" if not (cert or "").strip() else \
            "tls.crt is not PEM"
    try:
        info = inspect(cert)
    except RuntimeError:
        return "tls.crt does not parse"
    if not key_matches(cert, key):
        return "tls.key does not match tls.crt"
    if not signed_by(cert, ca_pem):
        return "tls.crt is not signed by the CA"
    if _due(info, now, RENEW_FRACTION):
        return f"tls.crt expires at {info.not_after.isoformat()}"
    missing = sorted(_normal(n) for n in names if _normal(n) not in info.names)
    if missing:
        return f"tls.crt does not name {', '.join(missing)}"
    return None


def _normal(name: str) -> str:
    try:
        return str(ipaddress.ip_address(name))
    except ValueError:
        return name.lower()


@dataclass(frozen=True)
class Certificates:
    """A CA bundle (the current CA first, then a previous one still trusted during a CA
    rotation), the current CA's key, and the serving certificate and key."""

    ca_bundle: str
    ca_key: str
    cert: str
    key: str
    names: tuple[str, ...]

    @property
    def ca(self) -> str:
        return first_pem(self.ca_bundle)

    @property
    def not_after(self) -> datetime:
        """When the serving certificate expires (RuntimeError if it does not parse)."""
        return not_after(self.cert)


_ISSUER_KEYS = (rsa.RSAPrivateKey, ec.EllipticCurvePrivateKey, dsa.DSAPrivateKey,
                ed25519.Ed25519PrivateKey, ed448.Ed448PrivateKey)


def _new_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=KEY_BITS)


def _pem_key(key: rsa.RSAPrivateKey) -> str:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


def _pem_cert(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def _general_name(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def _signing_hash(key: CertificateIssuerPrivateKeyTypes) -> hashes.SHA256 | None:
    """SHA-256, as openssl signed; None for the keys that hash for themselves."""
    return None if isinstance(key, ed25519.Ed25519PrivateKey | ed448.Ed448PrivateKey) \
        else hashes.SHA256()


def _builder(subject: x509.Name, issuer: x509.Name, public_key: rsa.RSAPublicKey,
             days: int) -> x509.CertificateBuilder:
    start = datetime.now(UTC).replace(microsecond=0)  # as openssl: valid from now
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
            .public_key(public_key).serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(start + timedelta(days=days)))


def new_ca(days: int = CA_DAYS) -> tuple[str, str]:
    """A self-signed CA valid for `days` from now: (certificate PEM, key PEM)."""
    key = _new_key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, CA_NAME)])
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (_builder(name, name, key.public_key(), days)
            .add_extension(ski, critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, key_cert_sign=True,
                                         crl_sign=True, encipher_only=False,
                                         decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    return _pem_cert(cert), _pem_key(key)


def new_serving(ca_pem: str, ca_key: str, names: Sequence[str],
                days: int = SERVING_DAYS) -> tuple[str, str]:
    """A serving certificate for `names` (its subjectAltNames; the first that fits is its
    CN), signed by the CA, valid for `days` from now: (certificate PEM, key PEM).
    RuntimeError when the CA or its key does not parse or cannot sign."""
    if not names:
        raise RuntimeError("a serving certificate needs at least one name")
    ca = _certificate(ca_pem)
    issuer_key = _private_key(ca_key, sign=True)
    if not isinstance(issuer_key, _ISSUER_KEYS):
        raise RuntimeError(f"the CA key ({type(issuer_key).__name__}) cannot sign "
                           "certificates")
    key = _new_key()
    cn = next((n for n in names if len(n) <= _MAX_CN), "polsched-webhook")
    try:
        aki = x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(
            ca.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value)
    except x509.ExtensionNotFound:
        aki = x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key())
    try:
        cert = (_builder(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)]),
                         ca.subject, key.public_key(), days)
                .add_extension(x509.SubjectAlternativeName([_general_name(n) for n in names]),
                               critical=False)
                .add_extension(x509.BasicConstraints(ca=False, path_length=None),
                               critical=False)
                .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False,
                                             key_encipherment=True, data_encipherment=False,
                                             key_agreement=False, key_cert_sign=False,
                                             crl_sign=False, encipher_only=False,
                                             decipher_only=False), critical=False)
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
                               critical=False)
                .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                               critical=False)
                .add_extension(aki, critical=False)
                .sign(issuer_key, _signing_hash(issuer_key)))
    except (ValueError, TypeError, UnsupportedAlgorithm) as e:
        raise RuntimeError(f"signing the serving certificate: {e}") from e
    return _pem_cert(cert), _pem_key(key)


def _still_trusted(bundle: str, now: datetime) -> list[str]:
    """The certificates of `bundle` that parse and have not expired (garbage and expired
    CAs leave the bundle)."""
    out = []
    for pem in pem_certificates(bundle):
        try:
            if inspect(pem).not_after > now:
                out.append(pem)
        except RuntimeError:
            continue
    return out


def renewed(current: Certificates | None, names: Sequence[str], now: datetime, *,
            ca_days: int = CA_DAYS, serving_days: int = SERVING_DAYS) -> Certificates | None:
    """The certificates to store instead of `current`, or None when it can stay.

    Whatever is invalid is made again, as cert-controller's rotator does, never served or
    trusted as it is: a new CA when there is none, it does not parse, is not a CA, its key
    does not match or it is due (the previous CA stays in the bundle while valid, if it
    parses); a new serving certificate when the CA changed, or it does not parse, its key
    does not match, the CA did not sign it, it is due, or it does not name `names`.
    Certificates and bundle entries that are garbage are dropped. Logs why."""
    names = tuple(names)
    why: list[str] = []
    ca_bundle = ca_key = None
    if current is None:
        why.append("none yet")
    else:
        problem = ca_problem(current.ca, current.ca_key, now)
        if problem is None:
            trusted = _still_trusted(current.ca_bundle, now)
            ca_bundle, ca_key = "".join(trusted), current.ca_key
        else:
            why.append(problem)
    if ca_bundle is None or ca_key is None:
        ca, ca_key = new_ca(ca_days)
        old = _still_trusted(current.ca_bundle, now)[:1] if current is not None else []
        ca_bundle = ca + "".join(old)  # a previous CA still trusted until it expires
    assert ca_key is not None
    serving = None
    if current is not None and ca_key == current.ca_key:
        serving = serving_problem(current.cert, current.key, ca_bundle, names, now)
        if serving is not None:
            why.append(serving)
    if current is not None and ca_key == current.ca_key and serving is None:
        if ca_bundle == current.ca_bundle and names == current.names:
            return None
        return Certificates(ca_bundle, ca_key, current.cert, current.key, names)
    try:
        cert, key = new_serving(first_pem(ca_bundle), ca_key, names, serving_days)
    except RuntimeError as e:
        if current is None or ca_key != current.ca_key:
            raise  # a CA made just now: nothing else to try
        # The kept CA's key matched its certificate but cannot sign (an RSA key whose
        # private numbers are inconsistent, a key type that does not sign): a new CA.
        why.append(f"the CA key cannot sign ({e})")
        ca, ca_key = new_ca(ca_days)
        ca_bundle = ca + "".join(_still_trusted(current.ca_bundle, now)[:1])
        cert, key = new_serving(ca, ca_key, names, serving_days)
    log.info("webhook certificates: %s (%s)",
             "a new CA and serving certificate" if current is None or ca_key != current.ca_key
             else "a new serving certificate", "; ".join(why) or "renewal")
    return Certificates(ca_bundle, ca_key, cert, key, names)


def b64(s: str) -> str:
    """PEM text as a Secret's data or a caBundle carries it."""
    return base64.b64encode(s.encode()).decode()


@dataclass(frozen=True)
class CertificateDays:
    """How long the certificates a CertificateManager makes are valid: its CA's and the
    serving certificate's days."""

    ca: int = CA_DAYS
    serving: int = SERVING_DAYS

