"""The validating admission webhook for SchedulingPolicy: the loader's validation at
`kubectl apply` time, so an invalid policy is refused with its field paths instead of
being accepted and then reported as Valid=False.

kopf (@kopf.on.validate) answers the AdmissionReviews; the configuration is ours, not
kopf's (kopf would also insist on a MutatingWebhookConfiguration, which the operator's
RBAC rightly cannot create, and exit after its retries). Two ways to serve it:

- In-cluster (`--webhook-service NAMESPACE/NAME`, what manifests/ ship): the apiserver
  calls the Service. The configuration is manifests/' own (failurePolicy Fail: a policy
  is never admitted unchecked), so it outlives any one replica and leaves with `kubectl
  delete -k`; kopf does not manage it (it would empty it whenever a replica stops). The
  operator keeps its own CA in one Secret (`--webhook-ca-secret`: the CA key, which only
  the operator reads) and its serving certificate in another (`--webhook-secret`), both
  shared by every replica behind the Service; it injects the CA into the configuration's
  caBundle once it serves, renews both before they expire and makes again whatever in
  them is invalid (CertificateManager, as open-policy-agent/cert-controller's rotator).
  Both Secrets and the configuration are watched by name: a broken Secret is made good,
  and a re-created or edited configuration gets its caBundle back, at once.
- Local (`--webhook-listen` alone, for `polsched run` on a laptop and the e2e tests):
  the configuration `polsched.io` points at https://HOST:PORT with a CA made in memory
  (or kept in `--webhook-secret`), failurePolicy Ignore, and its webhook is removed
  when the process stops, so a stopped process does not slow or block later edits.

Certificates are made with the openssl command (kopf's own generator needs the
certbuilder package, which we do not ship); the image carries openssl.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ipaddress
import logging
import re
import ssl
import subprocess
import tempfile
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

import aiohttp.web

from polsched.api import GROUP, PLURAL, VERSION, FieldError, Policy, PolicyError, load_policy
from polsched.api.admission import DEFAULT_RULES, AdmissionRules
from polsched.cluster.backoff import Backoff, retry_delay
from polsched.cluster.client import ApiClient, ApiError, is_unreachable
from polsched.controller import extender_ca
from polsched.controller.kopf_import import kopf
from polsched.plugins import CATALOG

log = logging.getLogger(__name__)

CONFIGURATION_NAME = "polsched.io"
DEFAULT_SECRET = "polsched-webhook-tls"
# The CA's Secret: read and written by the operator only (RBAC resourceNames).
DEFAULT_CA_SECRET = "polsched-webhook-ca"
CA_DAYS = 3650
SERVING_DAYS = 365
# Renew a certificate once less than this fraction of its lifetime remains (as
# controller-runtime's cert-rotator and kubelet's client rotation do, roughly).
RENEW_FRACTION = 1 / 3
RENEW_BEFORE = timedelta(days=7)
CHECK_INTERVAL = 3600.0
# After a new CA: the bundle (old + new CA) is published first; the server switches to a
# certificate of the new CA once the apiserver has had time to read the new bundle.
CA_SWITCH_DELAY = 10.0
NAMES_ANNOTATION = f"{GROUP}/webhook-names"


def validate_policy(body: Any, rules: AdmissionRules = DEFAULT_RULES) -> Policy:
    """The loaded policy, or kopf.AdmissionError listing every problem (`path: message`).
    `rules`: the operator's reserved scheduler names and extender destination policy."""
    try:
        return load_policy(plain(body), CATALOG, rules=rules)
    except PolicyError as e:
        raise kopf.AdmissionError(str(e), code=422) from e
    except Exception as e:  # a loader bug: refused with a reason, the webhook stays up
        log.exception("validating a SchedulingPolicy failed")
        raise kopf.AdmissionError(f"SchedulingPolicy could not be validated "
                                  f"({type(e).__name__}); see the operator's log",
                                  code=500) from e


async def check_ca_secrets(client: ApiClient, policy: Policy) -> None:
    """Each caSecretRef Secret this process can read must hold PEM certificates in
    ca.crt; one it cannot read (not there yet, not granted) is left to the operator,
    which reports it as the policy's Valid=False."""
    problems: list[FieldError] = []
    for i, ext in enumerate(policy.extenders):
        if ext.ca_secret_ref is None:
            continue
        namespace, name = ext.ca_secret_ref
        path = f"spec.extenders[{i}].tlsConfig.caSecretRef"
        try:
            secret = await client.get(extender_ca.secret_path(namespace, name))
        except Exception as e:  # noqa: BLE001 - unreadable here: the operator reports it
            log.debug("webhook: Secret %s/%s for %s not read: %r", namespace, name, path, e)
            continue
        try:
            extender_ca.ca_from_secret(secret, namespace, name, path)
        except PolicyError as e:
            problems.extend(e.errors)
    if problems:
        raise kopf.AdmissionError(str(PolicyError(problems, policy.name)), code=422)


async def check_shadow(client: ApiClient, policy: Policy) -> None:
    """spec.shadowOf: refuse it unless the shadowed policy lists this one in its
    spec.allowedShadows. A target that does not exist (yet) or cannot be read is left
    to the operator, which never attaches a shadow its target does not allow."""
    try:
        target = await client.get(f"/apis/{GROUP}/{VERSION}/{PLURAL}/{policy.shadow_of}")
    except ApiError as e:
        if e.status != 404:
            log.warning("reading SchedulingPolicy %s for spec.shadowOf of %s: %s",
                        policy.shadow_of, policy.name, e)
        return
    except Exception as e:  # noqa: BLE001 - unreachable: the operator still enforces
        log.warning("reading SchedulingPolicy %s for spec.shadowOf of %s: %r",
                    policy.shadow_of, policy.name, e)
        return
    allowed = (target.get("spec") or {}).get("allowedShadows") or []
    if not isinstance(allowed, list) or policy.name not in allowed:
        raise kopf.AdmissionError(
            f"SchedulingPolicy {policy.name!r} is invalid: spec.shadowOf: "
            f"SchedulingPolicy {policy.shadow_of!r} does not allow {policy.name!r} to "
            f"shadow it: its spec.allowedShadows must list {policy.name!r} (a shadow sees "
            f"every pod of the policy it shadows, so whoever may edit "
            f"{policy.shadow_of!r} decides)", code=422)


def plain(obj: Any) -> Any:
    """kopf's body views as plain dicts and lists (what the loader expects)."""
    if isinstance(obj, str | bytes | int | float | bool) or obj is None:
        return obj
    if hasattr(obj, "items"):
        return {str(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [plain(v) for v in obj]
    return obj


WEBHOOK_ID = "validate-policy"
WEBHOOK_NAME = f"{WEBHOOK_ID}.{CONFIGURATION_NAME}"  # kopf's naming, and manifests/'


def register(registry: kopf.OperatorRegistry, rules: AdmissionRules = DEFAULT_RULES,
             client: ApiClient | None = None) -> None:
    """The handler (kopf routes /validate-policy to it). With `client`, the CA Secrets
    it can read are checked (check_ca_secrets) and a shadow against the policy it
    shadows (check_shadow)."""
    @kopf.on.validate(GROUP, VERSION, PLURAL, id=WEBHOOK_ID, registry=registry,
                      operations=["CREATE", "UPDATE"], ignore_failures=True)
    async def _validate(body: kopf.Body, **_: Any) -> None:
        policy = validate_policy(body, rules)
        if client is not None:
            await check_ca_secrets(client, policy)
            if policy.shadow_of:
                await check_shadow(client, policy)


# -- certificates ---------------------------------------------------------------------------

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


def _b64(s: str) -> str:
    return base64.b64encode(s.encode()).decode()


class CertificateManager:
    """The webhook's CA and serving certificate in two Secrets of `namespace`, created
    when missing, renewed when due and made again when invalid (`renewed`):

    - `ca_secret` (Opaque; ca.crt: the CA bundle, ca.key: the current CA's key) is read
      and written by the operator only: the CA key never sits next to what others read.
    - `secret` (kubernetes.io/tls; tls.crt, tls.key, ca.crt: the same bundle, for a
      client that wants it) is what the server presents.

    A serving Secret of the old layout (ca.key in it, no CA Secret) has its CA moved to
    the CA Secret and the key taken out. Replicas share both: every write carries the
    resourceVersion read, and a conflict re-reads. The CA Secret is written first, so a
    serving certificate is never stored before the CA that signed it."""

    def __init__(self, client: ApiClient, namespace: str, secret: str, names: Sequence[str],
                 *, ca_secret: str | None = None, now: Callable[[], datetime] | None = None,
                 ca_days: int = CA_DAYS, serving_days: int = SERVING_DAYS) -> None:
        self.client = client
        self.namespace = namespace
        self.secret = secret
        self.ca_secret = ca_secret or DEFAULT_CA_SECRET
        if self.ca_secret == secret:
            raise ValueError(f"--webhook-ca-secret {self.ca_secret!r}: must differ from "
                             "--webhook-secret (the CA key stays apart from the serving "
                             "certificate)")
        self.names = tuple(names)
        self.now = now or (lambda: datetime.now(UTC))
        self.ca_days = ca_days
        self.serving_days = serving_days

    @property
    def path(self) -> str:
        return f"/api/v1/namespaces/{self.namespace}/secrets/{self.secret}"

    @property
    def ca_path(self) -> str:
        return f"/api/v1/namespaces/{self.namespace}/secrets/{self.ca_secret}"

    async def _read(self, path: str, name: str) -> dict[str, Any] | None:
        try:
            return await self.client.get(path)
        except ApiError as e:
            if e.status != 404:
                raise RuntimeError(f"reading the webhook's Secret {self.namespace}/{name}: "
                                   f"{e}") from e
            return None

    async def ensure(self) -> Certificates:
        for _ in range(5):
            obj = await self._read(self.path, self.secret)
            ca_obj = await self._read(self.ca_path, self.ca_secret)
            current = self._parse(obj, ca_obj)
            fresh = await asyncio.to_thread(renewed, current, self.names, self.now(),
                                            ca_days=self.ca_days,
                                            serving_days=self.serving_days)
            certs = fresh if fresh is not None else current
            assert certs is not None
            try:
                wrote = await self._write(ca_obj, obj, certs)
            except ApiError as e:
                if e.status in (404, 409):  # another replica wrote first: read theirs
                    continue
                raise RuntimeError(f"writing the webhook's Secrets {self.namespace}/"
                                   f"{self.ca_secret} and {self.secret}: {e}") from e
            if wrote:
                log.info("webhook certificates %s in Secrets %s/%s and %s (serving "
                         "certificate valid until %s)",
                         "created" if current is None else "updated", self.namespace,
                         self.ca_secret, self.secret,
                         validity(certs.cert)[1].isoformat())
            return certs
        raise RuntimeError(f"the webhook's Secrets {self.namespace}/{self.secret} and "
                           f"{self.ca_secret} kept changing under us")

    @staticmethod
    def _parse(obj: dict[str, Any] | None, ca_obj: dict[str, Any] | None
               ) -> Certificates | None:
        if obj is None and ca_obj is None:
            return None
        data = _data(obj)
        ca_data = _data(ca_obj) if ca_obj is not None else data  # the old layout
        names = ((obj or {}).get("metadata") or {}).get("annotations") or {}
        return Certificates(ca_data.get("ca.crt", ""), ca_data.get("ca.key", ""),
                            data.get("tls.crt", ""), data.get("tls.key", ""),
                            tuple(n for n in names.get(NAMES_ANNOTATION, "").split(",") if n))

    async def _write(self, ca_obj: dict[str, Any] | None, obj: dict[str, Any] | None,
                     c: Certificates) -> bool:
        """Store `c` where it differs from what was read; whether anything was written."""
        wrote = False
        ca_data = {"ca.crt": c.ca_bundle, "ca.key": c.ca_key}
        if ca_obj is None or _data(ca_obj) != ca_data:
            await self._put(ca_obj, self.ca_secret, "Opaque", ca_data, {})
            wrote = True
        data = {"ca.crt": c.ca_bundle, "tls.crt": c.cert, "tls.key": c.key}
        annotations = {NAMES_ANNOTATION: ",".join(c.names)}
        stored = ((obj or {}).get("metadata") or {}).get("annotations") or {}
        if obj is None or _data(obj) != data or \
                stored.get(NAMES_ANNOTATION) != annotations[NAMES_ANNOTATION]:
            await self._put(obj, self.secret, "kubernetes.io/tls", data, annotations)
            wrote = True
        return wrote

    async def _put(self, obj: dict[str, Any] | None, name: str, type_: str,
                   data: dict[str, str], annotations: dict[str, str]) -> None:
        body: dict[str, Any] = {
            "apiVersion": "v1", "kind": "Secret", "type": type_,
            "metadata": {"name": name, "namespace": self.namespace,
                         "labels": {"app.kubernetes.io/part-of": "polsched"},
                         "annotations": annotations},
            "data": {k: _b64(v) for k, v in data.items()},
        }
        if obj is None:
            await self.client.post(f"/api/v1/namespaces/{self.namespace}/secrets", body)
            return
        meta = obj.get("metadata") or {}
        # Keep what others put on it (labels, annotations); the type stays as created.
        body["metadata"]["labels"] = {**(meta.get("labels") or {}), **body["metadata"]["labels"]}
        body["metadata"]["annotations"] = {**(meta.get("annotations") or {}), **annotations}
        body["metadata"]["resourceVersion"] = meta.get("resourceVersion")
        body["type"] = obj.get("type") or type_
        await self.client.put(f"/api/v1/namespaces/{self.namespace}/secrets/{name}", body)

    async def changes(self) -> AsyncIterator[None]:
        """Yields whenever either Secret changes (or is deleted) as the API server sees
        it: a watch of each, by name, retried with the reflector's backoff."""
        wake: asyncio.Queue[None] = asyncio.Queue()
        tasks = [asyncio.get_running_loop().create_task(
            watch_named(self.client, f"/api/v1/namespaces/{self.namespace}/secrets", n,
                        lambda _kind, _obj: wake.put_nowait(None)),
            name=f"polsched-webhook-secret-{n}") for n in (self.secret, self.ca_secret)]
        try:
            while True:
                await wake.get()
                while not wake.empty():  # a burst of events is one change
                    wake.get_nowait()
                yield None
        finally:
            for t in tasks:
                t.cancel()
            for t in tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await t


def _data(obj: dict[str, Any] | None) -> dict[str, str]:
    """A Secret's data, decoded; a value that is not base64 of UTF-8 text reads as ""."""
    out: dict[str, str] = {}
    for k, v in ((obj or {}).get("data") or {}).items():
        try:
            out[str(k)] = base64.b64decode(v or "").decode()
        except (ValueError, UnicodeDecodeError):
            out[str(k)] = ""
    return out


async def watch_named(client: ApiClient, collection: str, name: str,
                      on_event: Callable[[str, dict[str, Any]], None]) -> None:
    """Watch the one object `name` of `collection` (fieldSelector metadata.name, which
    RBAC authorizes by resourceNames) forever: `on_event(type, object)` for each ADDED,
    MODIFIED and DELETED; the first event of each watch is the object as it is (a watch
    from no resourceVersion starts with it). Failures wait the reflector's backoff."""
    backoff = Backoff()
    selector = f"metadata.name={name}"
    while True:
        retry_after: float | None = None
        try:
            async for kind, obj in client.watch(collection, field_selector=selector,
                                                allow_watch_bookmarks=False):
                if kind in ("ADDED", "MODIFIED", "DELETED"):
                    on_event(kind, obj)
            continue  # the server ended the watch: watch again (a fresh ADDED first)
        except asyncio.CancelledError:
            raise
        except ApiError as e:
            log.warning("watching %s %s: %s", collection.rsplit("/", 1)[-1], name, e)
            retry_after = e.retry_after
        except Exception as e:
            if is_unreachable(e):
                client.outage.failed(e)
            else:
                log.warning("watching %s %s: %s", collection.rsplit("/", 1)[-1], name, e)
        await asyncio.sleep(retry_delay(backoff, retry_after))


class EphemeralCertificates:
    """Locally without --webhook-secret: a CA and serving certificate made once, in
    memory, for the life of the process (the configuration goes with it)."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = tuple(names)
        self._certs: Certificates | None = None

    async def ensure(self) -> Certificates:
        if self._certs is None:
            self._certs = await asyncio.to_thread(renewed, None, self.names, datetime.now(UTC))
        assert self._certs is not None
        return self._certs

    async def changes(self) -> AsyncIterator[None]:
        """Nothing outside the process changes them."""
        await asyncio.Event().wait()
        yield None  # pragma: no cover


class CertificateSource(Protocol):
    async def ensure(self) -> Certificates: ...

    def changes(self) -> AsyncIterator[None]: ...


def load_into(context: ssl.SSLContext, certs: Certificates) -> None:
    """Serve `certs` on `context` from the next handshake on (ssl reads the files now)."""
    with tempfile.TemporaryDirectory(prefix="polsched-webhook-") as d:
        crt, key = Path(d, "tls.crt"), Path(d, "tls.key")
        crt.write_text(certs.cert)
        key.touch(0o600)
        key.write_text(certs.key)
        context.load_cert_chain(str(crt), str(key))


class Publisher(Protocol):
    """Puts the webhook's client config (its caBundle) into the configuration."""

    client: ApiClient
    configuration: str

    async def __call__(self, config: kopf.WebhookClientConfig) -> None: ...

    async def withdraw(self) -> None: ...

    def current(self, obj: dict[str, Any] | None, config: kopf.WebhookClientConfig) -> bool:
        """Whether the configuration as read (`obj`, None when deleted) carries `config`
        already, or cannot be helped by publishing it again."""
        ...


def _hook(obj: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((h for h in obj.get("webhooks") or () if h.get("name") == name), None)


CONFIGURATIONS = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"


class URLConfiguration:
    """Locally: keeps the ValidatingWebhookConfiguration CONFIGURATION_NAME pointing at
    this process's URL with failurePolicy Ignore, and empties it when the process stops
    (as kopf's managed mode did)."""

    def __init__(self, client: ApiClient, configuration: str = CONFIGURATION_NAME) -> None:
        self.client = client
        self.configuration = configuration

    def webhooks(self, config: kopf.WebhookClientConfig) -> list[dict[str, Any]]:
        return [{
            "name": WEBHOOK_NAME, "admissionReviewVersions": ["v1"], "sideEffects": "None",
            "failurePolicy": "Ignore", "timeoutSeconds": 10, "matchPolicy": "Equivalent",
            "clientConfig": {"url": f"{config.get('url')}/{WEBHOOK_ID}",
                             "caBundle": config.get("caBundle")},
            "rules": [{"apiGroups": [GROUP], "apiVersions": [VERSION],
                       "operations": ["CREATE", "UPDATE"], "resources": [PLURAL],
                       "scope": "Cluster"}],
        }]

    async def __call__(self, config: kopf.WebhookClientConfig) -> None:
        body = {"apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingWebhookConfiguration",
                "metadata": {"name": self.configuration}, "webhooks": self.webhooks(config)}
        # Patch first: the operator's role may patch only this configuration and create
        # none (manifests/rbac/operator.yaml); it is created only where it is missing, by a
        # user who may (a developer's admin kubeconfig). A merge patch replaces the list.
        try:
            await self.client.patch(f"{CONFIGURATIONS}/{self.configuration}",
                                    {"webhooks": body["webhooks"]}, "merge")
            return
        except ApiError as e:
            if e.status != 404:
                raise RuntimeError(f"updating ValidatingWebhookConfiguration "
                                   f"{self.configuration}: {e}") from e
        try:
            await self.client.post(CONFIGURATIONS, body)
        except ApiError as e:
            if e.status == 409:  # created meanwhile: patch it
                await self.client.patch(f"{CONFIGURATIONS}/{self.configuration}",
                                        {"webhooks": body["webhooks"]}, "merge")
                return
            raise RuntimeError(f"creating ValidatingWebhookConfiguration "
                               f"{self.configuration}: {e} (install it first, as "
                               f"manifests/operator.yaml does)") from e

    async def withdraw(self) -> None:
        await self.client.patch(f"{CONFIGURATIONS}/{self.configuration}", {"webhooks": []},
                                "merge")

    def current(self, obj: dict[str, Any] | None, config: kopf.WebhookClientConfig) -> bool:
        """Deleted, emptied or pointing elsewhere: not current (it is ours to re-create)."""
        hook = _hook(obj, WEBHOOK_NAME) if obj is not None else None
        if hook is None:
            return False
        cc = hook.get("clientConfig") or {}
        return bool(cc.get("url") == f"{config.get('url')}/{WEBHOOK_ID}"
                    and cc.get("caBundle") == config.get("caBundle"))


class CABundleInjector:
    """In-cluster: writes the CA bundle into the caBundle of webhook WEBHOOK_NAME of the
    ValidatingWebhookConfiguration CONFIGURATION_NAME (manifests/ ship it without one).
    Nothing is withdrawn when a replica stops: the others serve the same CA."""

    def __init__(self, client: ApiClient, configuration: str = CONFIGURATION_NAME,
                 webhook: str = WEBHOOK_NAME) -> None:
        self.client = client
        self.configuration = configuration
        self.webhook = webhook

    async def withdraw(self) -> None:
        return None

    def current(self, obj: dict[str, Any] | None, config: kopf.WebhookClientConfig) -> bool:
        """The caBundle differs: not current. Deleted, or without our webhook: nothing
        to inject into (the configuration is the install's; it is injected again when
        it comes back)."""
        if obj is None:
            log.warning("ValidatingWebhookConfiguration %s was deleted; its caBundle is "
                        "set again once it is re-created", self.configuration)
            return True
        hook = _hook(obj, self.webhook)
        if hook is None:
            return True
        return bool((hook.get("clientConfig") or {}).get("caBundle") == config.get("caBundle"))

    async def __call__(self, config: kopf.WebhookClientConfig) -> None:
        ca_bundle_b64 = config.get("caBundle")
        path = f"{CONFIGURATIONS}/{self.configuration}"
        for _ in range(5):
            try:
                obj = await self.client.get(path)
                hooks = obj.get("webhooks") or []
                i = next((i for i, h in enumerate(hooks) if h.get("name") == self.webhook),
                         None)
                if i is None:
                    raise RuntimeError(f"ValidatingWebhookConfiguration {self.configuration} "
                                       f"has no webhook {self.webhook}")
                if (hooks[i].get("clientConfig") or {}).get("caBundle") == ca_bundle_b64:
                    return
                # The test op pins the index we read: a concurrent edit fails it (422).
                await self.client.patch(path, [
                    {"op": "test", "path": f"/webhooks/{i}/name", "value": self.webhook},
                    {"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle",
                     "value": ca_bundle_b64}], "json")
                log.info("caBundle of %s/%s set", self.configuration, self.webhook)
                return
            except ApiError as e:
                if e.status in (409, 422):
                    continue
                raise RuntimeError(f"injecting the webhook's CA into "
                                   f"ValidatingWebhookConfiguration {self.configuration}: "
                                   f"{e}") from e
        raise RuntimeError(f"ValidatingWebhookConfiguration {self.configuration} kept "
                           "changing under us")


class ManagedWebhookServer:
    """A kopf webhook server whose certificates come from a CertificateManager.

    Listens on `listen` (HOST:PORT); tells kopf how the apiserver reaches it: through
    Service `service` (NAMESPACE, NAME, PORT) when given, else at https://HOST:PORT.
    `publish` (CABundleInjector in-cluster, URLConfiguration locally) gets every new
    client config (CA bundle), before the server presents a certificate of a new CA,
    and `publish.withdraw()` is called when the server stops. Checks the certificates
    every `check_interval` seconds; a renewal goes into the running server's SSL
    context, no restart."""

    def __init__(self, listen: str, manager: CertificateSource, *,
                 service: tuple[str, str, int] | None = None,
                 publish: Publisher | None = None,
                 check_interval: float = CHECK_INTERVAL,
                 ca_switch_delay: float = CA_SWITCH_DELAY,
                 backoff: Callable[[], Backoff] = Backoff) -> None:
        self.host, self.port = split_listen(listen)
        self.manager = manager
        self.service = service
        self.publish = publish
        self.check_interval = check_interval
        self.ca_switch_delay = ca_switch_delay
        self.backoff = backoff

    async def _publish(self, certs: Certificates) -> bool:
        if self.publish is None:
            return True
        try:
            await self.publish(self.client_config(certs))
            return True
        except Exception as e:  # serve anyway; try again at the next check
            log.warning("webhook CA bundle not published: %s", e)
            return False

    async def _first_certificates(self) -> Certificates:
        """The certificates to start serving with. A failure to read or write the Secrets
        (the API server restarting, RBAC missing a grant) is retried with the reflector's
        backoff, never raised: the webhook task ending would end the process, and with it
        the scheduling of every policy."""
        backoff = self.backoff()
        while True:
            try:
                return await self.manager.ensure()
            except Exception as e:
                cause = e if isinstance(e, ApiError) else e.__cause__
                delay = retry_delay(backoff, cause.retry_after
                                    if isinstance(cause, ApiError) else None)
                log.warning("webhook certificates not ready, not serving the webhook yet "
                            "(again in %.0fs): %s", delay, e)
                await asyncio.sleep(delay)

    def client_config(self, certs: Certificates) -> kopf.WebhookClientConfig:
        config = kopf.WebhookClientConfig(caBundle=_b64(certs.ca_bundle))
        if self.service is not None:
            ns, name, port = self.service
            config["service"] = kopf.WebhookClientConfigService(namespace=ns, name=name,
                                                                port=port, path="")
        else:
            host = f"[{self.host}]" if ":" in self.host else self.host
            config["url"] = f"https://{host}:{self.port}"
        return config

    async def __call__(self, fn: kopf.WebhookFn) -> AsyncIterator[kopf.WebhookClientConfig]:
        async def serve(request: aiohttp.web.Request) -> aiohttp.web.Response:
            return await kopf.WebhookServer._serve(fn, request)

        certs = await self._first_certificates()
        context = ssl.create_default_context(purpose=ssl.Purpose.CLIENT_AUTH)
        load_into(context, certs)
        app = aiohttp.web.Application()
        app.add_routes([aiohttp.web.post("/{id:.*}", serve)])
        runner = aiohttp.web.AppRunner(app, handle_signals=False)
        await runner.setup()
        wake = asyncio.Event()
        drifted = False
        drift_backoff = self.backoff()
        watchers: list[asyncio.Task[None]] = []

        def on_configuration(kind: str, obj: dict[str, Any]) -> None:
            """The configuration was re-created, edited or deleted: check it now."""
            nonlocal drifted
            assert self.publish is not None
            if not self.publish.current(None if kind == "DELETED" else obj,
                                        self.client_config(certs)):
                log.warning("ValidatingWebhookConfiguration %s %s without this webhook's "
                            "CA bundle: publishing it again", self.publish.configuration,
                            "deleted" if kind == "DELETED" else "changed")
                drifted = True
                wake.set()

        async def on_secrets() -> None:
            async for _ in self.manager.changes():
                wake.set()

        try:
            site = aiohttp.web.TCPSite(runner, self.host, self.port, ssl_context=context,
                                       reuse_address=True)
            await site.start()
            log.info("serving the validating webhook on https://%s:%d%s", self.host,
                     self.port, "" if self.service is None else
                     f" (Service {self.service[0]}/{self.service[1]}:{self.service[2]})")
            published = await self._publish(certs)
            yield self.client_config(certs)
            loop = asyncio.get_running_loop()
            watchers.append(loop.create_task(on_secrets(), name="polsched-webhook-secrets"))
            if self.publish is not None:
                watchers.append(loop.create_task(
                    watch_named(self.publish.client, CONFIGURATIONS,
                                self.publish.configuration, on_configuration),
                    name="polsched-webhook-configuration"))
            while True:
                # A check every check_interval, at once when a Secret or the configuration
                # changed, soon while the CA bundle is not published yet.
                try:
                    await asyncio.wait_for(wake.wait(), self.check_interval if published
                                           else min(self.check_interval, 5.0))
                except TimeoutError:
                    # The periodic check publishes again too (a no-op when the bundle is
                    # there): the configuration's watch may be failing, say for a grant.
                    published = False
                wake.clear()
                try:
                    fresh = await self.manager.ensure()
                except Exception as e:  # keep serving what we have; try again later
                    log.warning("webhook certificates not checked: %s", e)
                    continue
                if drifted:
                    # Two writers that disagree (say, two local processes claiming the
                    # configuration) would otherwise rewrite it back and forth at once.
                    await asyncio.sleep(drift_backoff.step())
                    drifted, published = False, False
                if fresh == certs:
                    if not published:
                        published = await self._publish(certs)
                    continue
                if fresh.ca_bundle != certs.ca_bundle or not published:
                    published = await self._publish(fresh)
                    if fresh.ca_bundle != certs.ca_bundle:  # kopf hears of a new config
                        yield self.client_config(fresh)
                    if fresh.ca != certs.ca:
                        await asyncio.sleep(self.ca_switch_delay)
                if fresh.cert != certs.cert or fresh.key != certs.key:
                    try:
                        load_into(context, fresh)
                        log.info("webhook now serves its renewed certificate")
                    except (ssl.SSLError, OSError) as e:  # checked by renewed(): not expected
                        log.error("webhook certificate not loaded, still serving the "
                                  "previous one: %s", e)
                        continue
                certs = fresh
        finally:
            for t in watchers:  # before withdraw(): its own edit is no drift
                t.cancel()
            for t in watchers:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await t
            if self.publish is not None:
                try:
                    await self.publish.withdraw()
                except Exception as e:
                    log.warning("webhook configuration not withdrawn: %s", e)
            with contextlib.suppress(Exception):
                await runner.cleanup()


def split_listen(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit():
        raise ValueError(f"--webhook-listen {listen!r}: expected HOST:PORT, e.g. 127.0.0.1:9443")
    return host, int(port)


def parse_service(value: str, default_port: int = 443) -> tuple[str, str, int]:
    """NAMESPACE/NAME[:PORT] of --webhook-service."""
    ref, _, port = value.partition(":")
    ns, _, name = ref.partition("/")
    if not ns or not name or (port and not port.isdigit()):
        raise ValueError(f"--webhook-service {value!r}: expected NAMESPACE/NAME[:PORT], "
                         "e.g. polsched-system/polsched-webhook:443")
    return ns, name, int(port) if port else default_port


def service_names(namespace: str, name: str) -> list[str]:
    """The names the apiserver may check the serving certificate against."""
    return [f"{name}.{namespace}.svc", name, f"{name}.{namespace}",
            f"{name}.{namespace}.svc.cluster.local"]
