"""Where the webhook's certificates are kept, and kept valid: CertificateManager stores
the CA and the serving certificate in two Secrets shared by every replica and renews them
when due (as open-policy-agent/cert-controller's rotator); EphemeralCertificates makes
them once, in memory, for a local process; ExternalCertificates reads what another issuer
(cert-manager) keeps in a Secret and never writes it. Each is a CertificateSource for the
server.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from polsched.api import GROUP
from polsched.cluster.client import ApiClient, ApiError
from polsched.controller.webhook.certificates import (
    CertificateDays,
    Certificates,
    b64,
    key_matches,
    renewed,
    validity,
)
from polsched.controller.webhook.watch import watch_named

log = logging.getLogger(__name__)

DEFAULT_SECRET = "polsched-webhook-tls"
# The CA's Secret: read and written by the operator only (RBAC resourceNames).
DEFAULT_CA_SECRET = "polsched-webhook-ca"
NAMES_ANNOTATION = f"{GROUP}/webhook-names"


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
                 validity: CertificateDays | None = None) -> None:
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
        days = validity or CertificateDays()
        self.ca_days = days.ca
        self.serving_days = days.serving

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
            "data": {k: b64(v) for k, v in data.items()},
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


class ExternalCertificates:
    """`--webhook-certificates external`: the serving certificate and key another issuer
    keeps in the Secret `secret` of `namespace` (cert-manager's Certificate writes tls.crt,
    tls.key and ca.crt there), read as they are and watched by name, so that a renewal is
    served as soon as it is written. Nothing is made, renewed or written here, and the CA
    bundle is not published by the operator (cert-manager's CA injector fills the
    configuration's caBundle). What cannot be served (the Secret missing, a key that is not
    the certificate's) is an error: the server retries before it first serves, and keeps
    the certificate it has afterwards."""

    def __init__(self, client: ApiClient, namespace: str, secret: str) -> None:
        self.client = client
        self.namespace = namespace
        self.secret = secret

    @property
    def path(self) -> str:
        return f"/api/v1/namespaces/{self.namespace}/secrets/{self.secret}"

    async def ensure(self) -> Certificates:
        where = f"the webhook's Secret {self.namespace}/{self.secret}"
        try:
            obj = await self.client.get(self.path)
        except ApiError as e:
            if e.status == 404:
                raise RuntimeError(f"{where} does not exist (yet): with --webhook-certificates "
                                   "external, cert-manager's Certificate (or whoever issues "
                                   "the certificate) writes it") from e
            raise RuntimeError(f"reading {where}: {e}") from e
        data = _data(obj)
        cert, key = data.get("tls.crt", ""), data.get("tls.key", "")
        if not cert or not key:
            raise RuntimeError(f"{where}: tls.crt and tls.key must both be set")
        if not await asyncio.to_thread(key_matches, cert, key):
            raise RuntimeError(f"{where}: tls.key is not the key of tls.crt's certificate "
                               "(or either is not PEM)")
        return Certificates(data.get("ca.crt", ""), "", cert, key, ())

    async def changes(self) -> AsyncIterator[None]:
        """Yields whenever the Secret changes (or is deleted)."""
        wake: asyncio.Queue[None] = asyncio.Queue()
        task = asyncio.get_running_loop().create_task(
            watch_named(self.client, f"/api/v1/namespaces/{self.namespace}/secrets",
                        self.secret, lambda _kind, _obj: wake.put_nowait(None)),
            name=f"polsched-webhook-secret-{self.secret}")
        try:
            while True:
                await wake.get()
                while not wake.empty():
                    wake.get_nowait()
                yield None
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


class CertificateSource(Protocol):
    async def ensure(self) -> Certificates: ...

    def changes(self) -> AsyncIterator[None]: ...

