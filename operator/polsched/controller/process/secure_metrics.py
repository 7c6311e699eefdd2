"""--metrics-secure-listen: /metrics over HTTPS for a Prometheus outside the pod, with
the API server deciding who may read it, as kube-scheduler's secure serving does
(k8s.io/apiserver's delegating authentication and authorization, which Kueue's and
kubebuilder's metrics endpoints use too):

- authentication: the request's bearer token is sent in a TokenReview; an unknown token
  is answered 401;
- authorization: the user it names must be allowed `get` on the non-resource URL
  /metrics, asked in a SubjectAccessReview; a user who is not is answered 403.

Both answers are cached for CACHE_TTL seconds per token (sha256 of it), as the delegating
authenticator and authorizer cache theirs (10 s), so a scrape every 15-30 s costs two
reviews at most. Off by default: the process's identity then needs no review permission
(manifests/monitoring/metrics-auth-rbac.yaml grants it where the listener is on).

The serving certificate comes from --metrics-cert-dir (tls.crt, tls.key: a cert-manager
Certificate's Secret mounted there), else a self-signed one made at start, as
kube-scheduler makes one when given none (Prometheus then scrapes with
insecureSkipVerify, or trusts the cert-manager CA).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import socket
import ssl
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from polsched.cluster.client import ApiClient
from polsched.scheduler import metrics

if TYPE_CHECKING:
    from aiohttp import web

log = logging.getLogger(__name__)

CACHE_TTL = 10.0
METRICS_PATH = "/metrics"
TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"


@dataclass(frozen=True)
class Options:
    """--metrics-secure-listen HOST:PORT and --metrics-cert-dir DIR."""

    listen: str
    cert_dir: str | None = None


def options(args: Any) -> Options | None:
    """The secure listener's options from parsed arguments (None: off)."""
    listen = getattr(args, "metrics_secure_listen", None)
    if not listen:
        return None
    return Options(listen, getattr(args, "metrics_cert_dir", None))


class Reviewer:
    """Who may read /metrics, as the API server says (TokenReview, then
    SubjectAccessReview), with answers cached per token for `ttl` seconds."""

    def __init__(self, client: ApiClient, ttl: float = CACHE_TTL) -> None:
        self.client = client
        self.ttl = ttl
        # sha256(token) -> (HTTP status to answer, monotonic expiry)
        self._cache: dict[str, tuple[int, float]] = {}
        self.reviews = 0

    async def status(self, authorization: str | None) -> int:
        """200 (allowed), 401 (no or unknown token) or 403 (not allowed)."""
        if not authorization or not authorization.startswith("Bearer "):
            return 401
        token = authorization.removeprefix("Bearer ").strip()
        if not token:
            return 401
        key = hashlib.sha256(token.encode()).hexdigest()
        now = time.monotonic()
        hit = self._cache.get(key)
        if hit is not None and hit[1] > now:
            return hit[0]
        status = await self._review(token)
        if len(self._cache) > 1000:  # rotated tokens: keep the map small
            self._cache = {k: v for k, v in self._cache.items() if v[1] > now}
        self._cache[key] = (status, now + self.ttl)
        return status

    async def _review(self, token: str) -> int:
        self.reviews += 1
        review = await self.client.post(TOKEN_REVIEWS, {
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
            "spec": {"token": token}})
        state = review.get("status") or {}
        if not state.get("authenticated"):
            return 401
        user = state.get("user") or {}
        spec: dict[str, Any] = {
            "user": user.get("username", ""), "groups": user.get("groups") or [],
            "nonResourceAttributes": {"path": METRICS_PATH, "verb": "get"}}
        if user.get("uid"):
            spec["uid"] = user["uid"]
        if user.get("extra"):
            spec["extra"] = user["extra"]
        access = await self.client.post(ACCESS_REVIEWS, {
            "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": spec})
        return 200 if (access.get("status") or {}).get("allowed") else 403


def _self_signed(host: str) -> tuple[str, str]:
    """A serving certificate for this pod, signed by a CA made for it alone."""
    from polsched.controller.webhook import certificates

    names = [socket.gethostname(), "localhost", "127.0.0.1"]
    if host and host not in names and host not in ("0.0.0.0", "::"):
        names.append(host)
    ca, ca_key = certificates.new_ca()
    return certificates.new_serving(ca, ca_key, names)


async def ssl_context(opts: Options, host: str) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if opts.cert_dir:
        d = Path(opts.cert_dir)
        context.load_cert_chain(str(d / "tls.crt"), str(d / "tls.key"))
        return context
    cert, key = await asyncio.to_thread(_self_signed, host)
    with tempfile.TemporaryDirectory(prefix="polsched-metrics-tls-") as tmp:
        crt_file, key_file = Path(tmp, "tls.crt"), Path(tmp, "tls.key")
        crt_file.write_text(cert)
        key_file.touch(0o600)
        key_file.write_text(key)
        context.load_cert_chain(str(crt_file), str(key_file))
    return context


async def serve(opts: Options, client: ApiClient) -> web.AppRunner:
    """Serve /metrics on `opts.listen` over HTTPS to those the API server allows. Stop
    with `await runner.cleanup()`."""
    from aiohttp import web

    host, port = metrics.parse_listen(opts.listen)
    reviewer = Reviewer(client)

    async def handler(request: web.Request) -> web.Response:
        try:
            status = await reviewer.status(request.headers.get("Authorization"))
        except Exception as e:  # the API server did not answer: nobody is let in
            log.warning("/metrics: reviewing a scraper's token failed: %s", e)
            return web.Response(status=503, text="authentication unavailable")
        if status == 401:
            return web.Response(status=401, text="Unauthorized",
                                headers={"WWW-Authenticate": 'Bearer realm="polsched"'})
        if status == 403:
            return web.Response(status=403, text='Forbidden: not allowed to get "/metrics"')
        return web.Response(body=metrics.exposition().encode(),
                            headers={"Content-Type": metrics.CONTENT_TYPE})

    app = web.Application()
    app.router.add_get(METRICS_PATH, handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    context = await ssl_context(opts, host)
    await web.TCPSite(runner, host, port, ssl_context=context).start()
    return runner
