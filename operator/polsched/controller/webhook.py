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
  operator keeps its own CA and serving certificate in a Secret (`--webhook-secret`,
  shared by every replica behind the Service), injects the CA into the configuration's
  caBundle once it serves, and renews both before they expire (CertificateManager).
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
from polsched.cluster.client import ApiClient, ApiError
from polsched.controller import extender_ca
from polsched.controller.kopf_import import kopf
from polsched.plugins import CATALOG

log = logging.getLogger(__name__)

CONFIGURATION_NAME = "polsched.io"
DEFAULT_SECRET = "polsched-webhook-tls"
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


def first_pem(bundle: str) -> str:
    end = "-----END CERTIFICATE-----"
    i = bundle.find(end)
    return bundle[: i + len(end)] + "\n" if i >= 0 else bundle


def validity(cert_pem: str) -> tuple[datetime, datetime]:
    """(notBefore, notAfter) of the first certificate in `cert_pem`, in UTC."""
    out = _openssl("x509", "-noout", "-startdate", "-enddate", stdin=first_pem(cert_pem))
    fields = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    return (datetime.fromtimestamp(ssl.cert_time_to_seconds(fields["notBefore"]), UTC),
            datetime.fromtimestamp(ssl.cert_time_to_seconds(fields["notAfter"]), UTC))


def due(cert_pem: str, now: datetime, fraction: float = RENEW_FRACTION) -> bool:
    """True when less than `fraction` of the certificate's lifetime remains, or less
    than RENEW_BEFORE (a short-lived certificate someone put in the Secret)."""
    start, end = validity(cert_pem)
    return end - now < max((end - start) * fraction, RENEW_BEFORE)


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
        (p / "ca.key").write_text(ca_key)
        (p / "ca.key").chmod(0o600)
        (p / "san.ext").write_text(
            f"subjectAltName={_san(names)}\nbasicConstraints=CA:FALSE\n"
            "keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n")
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(p / "tls.key"),
                 "-out", str(p / "tls.csr"), "-subj", f"/CN={names[0]}")
        _openssl("x509", "-req", "-in", str(p / "tls.csr"), "-CA", str(p / "ca.crt"),
                 "-CAkey", str(p / "ca.key"), "-CAcreateserial", "-out", str(p / "tls.crt"),
                 "-days", str(days), "-extfile", str(p / "san.ext"))
        return (p / "tls.crt").read_text(), (p / "tls.key").read_text()


def renewed(current: Certificates | None, names: Sequence[str], now: datetime, *,
            ca_days: int = CA_DAYS, serving_days: int = SERVING_DAYS) -> Certificates | None:
    """The certificates to store instead of `current`, or None when it can stay: a new CA
    when there is none or it is due (the old one stays in the bundle while valid), a new
    serving certificate when the CA changed, it is due, or it names other hosts."""
    names = tuple(names)
    ca_bundle = ca_key = None
    if current is not None and current.ca_key and not due(current.ca, now):
        ca_bundle, ca_key = current.ca_bundle, current.ca_key
    if ca_bundle is None or ca_key is None:
        ca, ca_key = new_ca(ca_days)
        ca_bundle = ca
        if current is not None and current.ca and validity(current.ca)[1] > now:
            ca_bundle = ca + current.ca  # still trusted until it expires
    elif current is not None and current.ca_bundle != current.ca:
        # Drop a previous CA from the bundle once it has expired.
        rest = current.ca_bundle[len(current.ca):]
        if rest.strip() and validity(rest)[1] <= now:
            ca_bundle = current.ca
    assert ca_key is not None
    if (current is not None and current.cert and ca_key == current.ca_key
            and current.names == names and not due(current.cert, now)):
        if ca_bundle == current.ca_bundle:
            return None
        return Certificates(ca_bundle, ca_key, current.cert, current.key, names)
    cert, key = new_serving(first_pem(ca_bundle), ca_key, names, serving_days)
    return Certificates(ca_bundle, ca_key, cert, key, names)


def _b64(s: str) -> str:
    return base64.b64encode(s.encode()).decode()


def _unb64(data: dict[str, Any], key: str) -> str:
    v = data.get(key)
    return base64.b64decode(v).decode() if v else ""


class CertificateManager:
    """The webhook's CA and serving certificate in Secret NAMESPACE/SECRET (keys ca.crt,
    ca.key, tls.crt, tls.key), created when missing and renewed when due. Replicas share
    it: every write carries the resourceVersion read, and a conflict re-reads."""

    def __init__(self, client: ApiClient, namespace: str, secret: str, names: Sequence[str],
                 *, now: Callable[[], datetime] | None = None, ca_days: int = CA_DAYS,
                 serving_days: int = SERVING_DAYS) -> None:
        self.client = client
        self.namespace = namespace
        self.secret = secret
        self.names = tuple(names)
        self.now = now or (lambda: datetime.now(UTC))
        self.ca_days = ca_days
        self.serving_days = serving_days

    @property
    def path(self) -> str:
        return f"/api/v1/namespaces/{self.namespace}/secrets/{self.secret}"

    async def ensure(self) -> Certificates:
        for _ in range(5):
            try:
                obj: dict[str, Any] | None = await self.client.get(self.path)
            except ApiError as e:
                if e.status != 404:
                    raise RuntimeError(f"reading the webhook's Secret {self.namespace}/"
                                       f"{self.secret}: {e}") from e
                obj = None
            current = self._parse(obj) if obj is not None else None
            fresh = await asyncio.to_thread(renewed, current, self.names, self.now(),
                                            ca_days=self.ca_days,
                                            serving_days=self.serving_days)
            if fresh is None:
                assert current is not None
                return current
            try:
                await self._write(obj, fresh)
            except ApiError as e:
                if e.status in (404, 409):  # another replica wrote first: read theirs
                    continue
                raise RuntimeError(f"writing the webhook's Secret {self.namespace}/"
                                   f"{self.secret}: {e}") from e
            log.info("webhook certificates %s in Secret %s/%s (serving certificate valid "
                     "until %s)", "created" if current is None else "renewed",
                     self.namespace, self.secret, validity(fresh.cert)[1].isoformat())
            return fresh
        raise RuntimeError(f"the webhook's Secret {self.namespace}/{self.secret} kept "
                           "changing under us")

    def _parse(self, obj: dict[str, Any]) -> Certificates:
        data = obj.get("data") or {}
        names = ((obj.get("metadata") or {}).get("annotations") or {}).get(NAMES_ANNOTATION, "")
        return Certificates(_unb64(data, "ca.crt"), _unb64(data, "ca.key"),
                            _unb64(data, "tls.crt"), _unb64(data, "tls.key"),
                            tuple(n for n in names.split(",") if n))

    async def _write(self, obj: dict[str, Any] | None, c: Certificates) -> None:
        body: dict[str, Any] = {
            "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {"name": self.secret, "namespace": self.namespace,
                         "labels": {"app.kubernetes.io/part-of": "polsched"},
                         "annotations": {NAMES_ANNOTATION: ",".join(c.names)}},
            "data": {"ca.crt": _b64(c.ca_bundle), "ca.key": _b64(c.ca_key),
                     "tls.crt": _b64(c.cert), "tls.key": _b64(c.key)},
        }
        if obj is None:
            await self.client.post(f"/api/v1/namespaces/{self.namespace}/secrets", body)
        else:
            body["metadata"]["resourceVersion"] = obj["metadata"]["resourceVersion"]
            await self.client.put(self.path, body)


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


class CertificateSource(Protocol):
    async def ensure(self) -> Certificates: ...


def load_into(context: ssl.SSLContext, certs: Certificates) -> None:
    """Serve `certs` on `context` from the next handshake on (ssl reads the files now)."""
    with tempfile.TemporaryDirectory(prefix="polsched-webhook-") as d:
        crt, key = Path(d, "tls.crt"), Path(d, "tls.key")
        crt.write_text(certs.cert)
        key.touch(0o600)
        key.write_text(certs.key)
        context.load_cert_chain(str(crt), str(key))


class Publisher(Protocol):
    async def __call__(self, config: kopf.WebhookClientConfig) -> None: ...

    async def withdraw(self) -> None: ...


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
                 ca_switch_delay: float = CA_SWITCH_DELAY) -> None:
        self.host, self.port = split_listen(listen)
        self.manager = manager
        self.service = service
        self.publish = publish
        self.check_interval = check_interval
        self.ca_switch_delay = ca_switch_delay

    async def _publish(self, certs: Certificates) -> bool:
        if self.publish is None:
            return True
        try:
            await self.publish(self.client_config(certs))
            return True
        except Exception as e:  # serve anyway; try again at the next check
            log.warning("webhook CA bundle not published: %s", e)
            return False

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

        certs = await self.manager.ensure()
        context = ssl.create_default_context(purpose=ssl.Purpose.CLIENT_AUTH)
        load_into(context, certs)
        app = aiohttp.web.Application()
        app.add_routes([aiohttp.web.post("/{id:.*}", serve)])
        runner = aiohttp.web.AppRunner(app, handle_signals=False)
        await runner.setup()
        try:
            site = aiohttp.web.TCPSite(runner, self.host, self.port, ssl_context=context,
                                       reuse_address=True)
            await site.start()
            log.info("serving the validating webhook on https://%s:%d%s", self.host,
                     self.port, "" if self.service is None else
                     f" (Service {self.service[0]}/{self.service[1]}:{self.service[2]})")
            published = await self._publish(certs)
            yield self.client_config(certs)
            while True:
                await asyncio.sleep(self.check_interval if published else
                                    min(self.check_interval, 5.0))
                try:
                    fresh = await self.manager.ensure()
                except Exception as e:  # keep serving what we have; try again later
                    log.warning("webhook certificates not renewed: %s", e)
                    continue
                if fresh == certs:
                    if not published:
                        published = await self._publish(certs)
                    continue
                if fresh.ca_bundle != certs.ca_bundle or not published:
                    published = await self._publish(fresh)
                    yield self.client_config(fresh)
                    if fresh.ca != certs.ca:
                        await asyncio.sleep(self.ca_switch_delay)
                if fresh.cert != certs.cert:
                    load_into(context, fresh)
                    log.info("webhook now serves its renewed certificate")
                certs = fresh
        finally:
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
