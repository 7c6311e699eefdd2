"""The webhook's PKI: a CA and a serving certificate made, inspected and renewed.

Pure functions over PEM text (no API server): new_ca and new_serving make them,
ca_problem and serving_problem say what is wrong with a stored pair, and renewed() decides
whether, and what, to make again (a CA bundle that keeps the old CA while it is still
trusted, so that the apiserver never sees a certificate of a CA it does not know yet).
Certificates are made with the openssl command (kopf's own generator needs the
certbuilder package, which we do not ship); the image carries openssl.
"""

from __future__ import annotations

import base64
import contextlib
import ipaddress
import logging
import re
import ssl
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

log = logging.getLogger(__name__)

CA_DAYS = 3650
SERVING_DAYS = 365
# Renew a certificate once less than this fraction of its lifetime remains (as
# controller-runtime's cert-rotator and kubelet's client rotation do, roughly).
RENEW_FRACTION = 1 / 3
RENEW_BEFORE = timedelta(days=7)


def _san(names: Sequence[str]) -> str:
    out = []
    for n in names:
        try:
            ipaddress.ip_address(n)
            out.append(f"IP:{n}")
        except ValueError:
            out.append(f"DNS:{n}")
    return ",".join(out)


def _openssl(*args: str, stdin: str | None = None) -> str:
    try:
        done = subprocess.run(["openssl", *args], input=stdin, check=True,
                              capture_output=True, text=True)
    except FileNotFoundError as e:
        raise RuntimeError("the webhook's certificates need the openssl command") from e
    except subprocess.CalledProcessError as e:
        raise RuntimeError(f"openssl {args[0]} failed: {e.stderr.strip()}") from e
    return done.stdout


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


@dataclass(frozen=True)
class CertInfo:
    """What the checks read from one certificate (openssl x509)."""

    not_before: datetime
    not_after: datetime
    names: frozenset[str]  # subjectAltName DNS names and IP addresses (normalized)
    is_ca: bool


def inspect(cert_pem: str) -> CertInfo:
    """Parse the first certificate of `cert_pem`; RuntimeError when it is not one."""
    pem = first_pem(cert_pem)
    if not pem:
        raise RuntimeError("no PEM certificate")
    out = _openssl("x509", "-noout", "-startdate", "-enddate", "-ext",
                   "subjectAltName,basicConstraints", stdin=pem)
    fields = dict(line.split("=", 1) for line in out.splitlines()
                  if line.startswith(("notBefore=", "notAfter=")))
    try:
        start = datetime.fromtimestamp(ssl.cert_time_to_seconds(fields["notBefore"]), UTC)
        end = datetime.fromtimestamp(ssl.cert_time_to_seconds(fields["notAfter"]), UTC)
    except (KeyError, ValueError) as e:
        raise RuntimeError(f"unreadable validity: {e}") from e
    names: set[str] = set()
    lines = out.splitlines()
    for i, line in enumerate(lines):
        if "Subject Alternative Name" in line and i + 1 < len(lines):
            for entry in lines[i + 1].split(","):
                kind, _, value = entry.strip().partition(":")
                if kind == "DNS":
                    names.add(value.strip().lower())
                elif kind == "IP Address":
                    with contextlib.suppress(ValueError):
                        names.add(str(ipaddress.ip_address(value.strip())))
    is_ca = any(line.strip() == "CA:TRUE" for line in lines)
    return CertInfo(start, end, frozenset(names), is_ca)


def validity(cert_pem: str) -> tuple[datetime, datetime]:
    """(notBefore, notAfter) of the first certificate in `cert_pem`, in UTC."""
    info = inspect(cert_pem)
    return info.not_before, info.not_after


def _due(info: CertInfo, now: datetime, fraction: float) -> bool:
    return info.not_after - now < max((info.not_after - info.not_before) * fraction,
                                      RENEW_BEFORE)


def due(cert_pem: str, now: datetime, fraction: float = RENEW_FRACTION) -> bool:
    """True when less than `fraction` of the certificate's lifetime remains, or less
    than RENEW_BEFORE (a short-lived certificate someone put in the Secret)."""
    return _due(inspect(cert_pem), now, fraction)


def key_matches(cert_pem: str, key_pem: str) -> bool:
    """Whether `key_pem` is a private key and the key of the first certificate of
    `cert_pem` (what ssl needs to serve them: load_cert_chain refuses a mismatch)."""
    cert = first_pem(cert_pem)
    if not cert or "PRIVATE KEY-----" not in (key_pem or ""):
        return False
    with tempfile.TemporaryDirectory(prefix="polsched-check-") as d:
        crt, key = Path(d, "c.crt"), Path(d, "c.key")
        crt.write_text(cert)
        key.touch(0o600)
        key.write_text(key_pem)
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(str(crt), str(key))
        except (ssl.SSLError, ValueError, OSError):
            return False
    return True


def signed_by(cert_pem: str, ca_pem: str) -> bool:
    """Whether the first certificate of `cert_pem` chains to the CA `ca_pem` (openssl
    verify, validity dates left to `due`: the clock may be a test's)."""
    cert, ca = first_pem(cert_pem), first_pem(ca_pem)
    if not cert or not ca:
        return False
    with tempfile.TemporaryDirectory(prefix="polsched-check-") as d:
        Path(d, "ca.crt").write_text(ca)
        Path(d, "tls.crt").write_text(cert)
        try:
            _openssl("verify", "-no-CApath", "-no-CAstore", "-no_check_time", "-CAfile",
                     str(Path(d, "ca.crt")), str(Path(d, "tls.crt")))
        except RuntimeError:
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


def new_ca(days: int = CA_DAYS) -> tuple[str, str]:
    with tempfile.TemporaryDirectory(prefix="polsched-ca-") as d:
        key, crt = Path(d, "ca.key"), Path(d, "ca.crt")
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
                 "-out", str(crt), "-days", str(days), "-subj", "/CN=polsched-webhook-ca",
                 "-addext", "basicConstraints=critical,CA:TRUE",
                 "-addext", "keyUsage=critical,keyCertSign,cRLSign")
        return crt.read_text(), key.read_text()


def new_serving(ca_pem: str, ca_key: str, names: Sequence[str],
                days: int = SERVING_DAYS) -> tuple[str, str]:
    with tempfile.TemporaryDirectory(prefix="polsched-tls-") as d:
        p = Path(d)
        (p / "ca.crt").write_text(ca_pem)
        (p / "ca.key").touch(0o600)
        (p / "ca.key").write_text(ca_key)
        (p / "san.ext").write_text(
            f"subjectAltName={_san(names)}\nbasicConstraints=CA:FALSE\n"
            "keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n")
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(p / "tls.key"),
                 "-out", str(p / "tls.csr"), "-subj", f"/CN={names[0]}")
        _openssl("x509", "-req", "-in", str(p / "tls.csr"), "-CA", str(p / "ca.crt"),
                 "-CAkey", str(p / "ca.key"), "-CAcreateserial", "-out", str(p / "tls.crt"),
                 "-days", str(days), "-extfile", str(p / "san.ext"))
        return (p / "tls.crt").read_text(), (p / "tls.key").read_text()


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
    cert, key = new_serving(first_pem(ca_bundle), ca_key, names, serving_days)
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

