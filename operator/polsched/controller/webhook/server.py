"""The webhook's HTTPS server, as kopf's WebhookServerProtocol: ManagedWebhookServer
serves kopf's handler with the certificates of a CertificateSource, publishes each new CA
bundle (controller.webhook.configuration) before presenting a certificate of a new CA,
and reloads a renewed certificate into the running server's SSL context (no restart).
Also the parsing of --webhook-listen and --webhook-service.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import ssl
import tempfile
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import aiohttp.web

from polsched.cluster.backoff import Backoff, retry_delay
from polsched.cluster.client import ApiError
from polsched.controller.process.kopf_import import kopf
from polsched.controller.webhook.certificates import Certificates, b64, validity
from polsched.controller.webhook.configuration import CONFIGURATIONS, Publisher
from polsched.controller.webhook.rotator import CertificateSource
from polsched.controller.webhook.watch import watch_named
from polsched.scheduler import metrics

log = logging.getLogger(__name__)

CHECK_INTERVAL = 3600.0
# The largest AdmissionReview read: an UPDATE carries the object and the old object, each
# at most etcd's 1.5 MiB request limit, in a small envelope. Larger bodies are refused
# (413) before they are parsed; aiohttp's implicit 1 MiB refused large valid updates.
MAX_REQUEST_BYTES = 4 * 1024 * 1024
# After a new CA: the bundle (old + new CA) is published first; the server switches to a
# certificate of the new CA once the apiserver has had time to read the new bundle.
CA_SWITCH_DELAY = 10.0


def require_client_certificates(context: ssl.SSLContext, ca_file: str) -> None:
    """Accept only TLS clients presenting a certificate that a CA of `ca_file` (PEM)
    signed: the API server's, as its AdmissionConfiguration presents it to webhooks
    (WebhookAdmissionConfiguration kubeConfigFile). Others fail the handshake before a
    byte of a request is read. ssl.SSLError or OSError for a file that is not a CA bundle."""
    context.verify_mode = ssl.CERT_REQUIRED
    context.load_verify_locations(cafile=ca_file)


def load_into(context: ssl.SSLContext, certs: Certificates) -> None:
    """Serve `certs` on `context` from the next handshake on (ssl reads the files now)."""
    with tempfile.TemporaryDirectory(prefix="polsched-webhook-") as d:
        crt, key = Path(d, "tls.crt"), Path(d, "tls.key")
        crt.write_text(certs.cert)
        key.touch(0o600)
        key.write_text(certs.key)
        context.load_cert_chain(str(crt), str(key))
    metrics.webhook_certificate(validity(certs.cert)[1].timestamp())


@dataclass(frozen=True)
class Timing:
    """How often the served certificates are checked (`check_interval`, seconds), how long a
    new CA is published before its certificate is served (`ca_switch_delay`), and the
    backoff between failed starts."""

    check_interval: float = CHECK_INTERVAL
    ca_switch_delay: float = CA_SWITCH_DELAY
    backoff: Callable[[], Backoff] = Backoff


DEFAULT_TIMING = Timing()


class ManagedWebhookServer:
    """A kopf webhook server whose certificates come from a CertificateManager.

    Listens on `listen` (HOST:PORT); tells kopf how the apiserver reaches it: through
    Service `service` (NAMESPACE, NAME, PORT) when given, else at https://HOST:PORT.
    `publish` (CABundleInjector in-cluster, URLConfiguration locally) gets every new
    client config (CA bundle), before the server presents a certificate of a new CA,
    and `publish.withdraw()` is called when the server stops. Checks the certificates
    every `check_interval` seconds; a renewal goes into the running server's SSL
    context, no restart. `current` is what it serves (None before it serves):
    `current.not_after` is the serving certificate's expiry. With `client_ca` (a PEM
    file), only clients presenting a certificate one of its CAs signed are served
    (require_client_certificates)."""

    def __init__(self, listen: str, manager: CertificateSource, *,
                 service: tuple[str, str, int] | None = None,
                 publish: Publisher | None = None,
                 timing: Timing = DEFAULT_TIMING,
                 client_ca: str | None = None) -> None:
        self.host, self.port = split_listen(listen)
        self.client_ca = client_ca
        self.manager = manager
        self.service = service
        self.publish = publish
        self.check_interval = timing.check_interval
        self.ca_switch_delay = timing.ca_switch_delay
        self.backoff = timing.backoff
        self.current: Certificates | None = None

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
        config = kopf.WebhookClientConfig(caBundle=b64(certs.ca_bundle))
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
            return await serve_review(fn, request)

        certs = await self._first_certificates()
        context = ssl.create_default_context(purpose=ssl.Purpose.CLIENT_AUTH)
        if self.client_ca is not None:
            require_client_certificates(context, self.client_ca)
        load_into(context, certs)
        app = aiohttp.web.Application(client_max_size=MAX_REQUEST_BYTES)
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
            self.current = certs
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
                certs = self.current = fresh
        finally:
            self.current = None
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


async def serve_review(fn: kopf.WebhookFn, request: aiohttp.web.Request
                       ) -> aiohttp.web.Response:
    """One AdmissionReview, served as kopf's public contract for a custom webhook server
    asks (kopf.WebhookFn, kopf.WebhookServerProtocol): the decoded request goes to `fn`
    with the route's id, the headers and the client's TLS certificate, and its response
    goes back as JSON. A body that is not a JSON object, or a review kopf cannot take
    (data missing, a resource without a handler), is answered 400 with the reason, and the
    apiserver applies the configuration's failurePolicy. (kopf's own server answers its
    unknown and ambiguous resources 404 and 409; which of its exceptions those are is not
    public, and to the apiserver each is a failed call.)"""
    try:
        data = json.loads(await request.text())
    except (ValueError, UnicodeDecodeError) as e:
        raise aiohttp.web.HTTPBadRequest(reason=_reason(f"not JSON: {e}")) from e
    if not isinstance(data, dict):
        raise aiohttp.web.HTTPBadRequest(reason="not an AdmissionReview (a JSON object)")
    peer = request.transport.get_extra_info("peercert") if request.transport else None
    try:
        # cast: the request's TypedDict (kopf's reviews.Request) is not in kopf's public API.
        response = await fn(cast(Any, data), webhook=request.match_info.get("id"),
                            headers=dict(request.headers), sslpeer=peer)
    except Exception as e:
        log.warning("admission request not served (400): %s: %s", type(e).__name__, e)
        raise aiohttp.web.HTTPBadRequest(reason=_reason(str(e) or type(e).__name__)) from e
    return aiohttp.web.json_response(response)


def _reason(text: str) -> str:
    """An HTTP reason phrase: one line, bounded."""
    line = " ".join(text.split())
    return line if len(line) <= 200 else line[:197] + "..."


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

