"""An asyncio Kubernetes API client on aiohttp that speaks raw JSON.

Objects are plain dicts exactly as the API server sends them: building the kubernetes
client's model classes costs far more than json.loads (see the engine issue's report) and
the scheduler reads a handful of fields per pod. Where the server is and how to log in
comes from polsched.cluster.kubeconfig (KUBECONFIG, contexts, exec/token auth and client
certificates as with kubectl, or the in-cluster service account).

One aiohttp session with keep-alive serves every request; watches hold their own
connection for as long as they stream.

Client-side budget, as client-go's: with `qps` > 0 every request, watch and write first
takes a token from a bucket (cluster.backoff.TokenBucket: `burst` at once, then `qps` per
second). Events have a bucket of their own with the same settings, as kube-scheduler
makes its event client apart from its main client (cmd/kube-scheduler/app/options
createClients), so a flood of events does not eat the binds' budget. `polsched run` and
`polsched scheduler` pass kube-scheduler's defaults, QPS 50 and burst 100
(--kube-api-qps, --kube-api-burst); a client made without `qps` (tools, tests) has no
client-side limit. An answer 429 or 5xx with Retry-After is retried after that many
seconds, up to `max_retries` times (client-go rest/with_retry.go, 10 by default).

Unlike client-go, a bucket's tokens are shared fairly among tenants (FairTokens): a
write sent with `send` may name its tenant (the binder names the policy whose pod it
binds), and while requests wait for tokens, each tenant with a request waiting gets the
next token in turn, instead of every request reserving a token in the order it asked.
With client-go's order, a burst of writes from one policy (the status writes of a policy
whose extender fails) reserved the bucket seconds ahead, and every other policy's binds
waited behind them (issue 36, finding 5). Requests that name no tenant share the tenant "".
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import ssl
import threading
import time
import urllib.parse
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import aiohttp
import orjson
from multidict import CIMultiDict

from polsched.cluster import http1, kubeconfig, tls
from polsched.cluster.backoff import TokenBucket, parse_retry_after
from polsched.objects import Json

_log = logging.getLogger(__name__)

PatchType = Literal["merge", "strategic", "json", "apply"]

# Told of every request's end, as client-go's RequestResult and RequestLatency metrics:
# (method, host, HTTP status or None when no answer came, seconds). scheduler.metrics
# installs its rest_client_* counters here; cluster/ imports nothing of the scheduler.
RequestObserver = Callable[[str, str, "int | None", float], None]
request_observer: RequestObserver | None = None

_PATCH_CONTENT_TYPES: dict[str, str] = {
    "merge": "application/merge-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "json": "application/json-patch+json",
    "apply": "application/apply-patch+yaml",
}


def loads(raw: bytes | str) -> Any:
    """Decode an API server answer or watch line: orjson, 2-3x faster than json.loads on
    pod objects (the watch decodes every pod two or three times, the initial list all of
    them). What orjson refuses and json accepts (a lone surrogate escape, a number beyond a
    double's range: never in what Go's encoding/json writes) goes to json.loads, which
    decodes it or raises its own ValueError."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw)


# client-go rest.Request: a request answered 429/5xx with Retry-After is tried again at
# most this many times.
DEFAULT_MAX_RETRIES = 10

# How often the bearer token is re-read (in-cluster tokens rotate; exec plugins expire).
_TOKEN_REFRESH_SECONDS = 10.0


class ApiError(Exception):
    """A non-2xx answer from the API server (or an ERROR event in a watch).

    `status` is the HTTP code, `reason` the metav1.Status reason ("NotFound", "Conflict",
    "AlreadyExists", "Expired", ...), `message` the server's message, `retry_after` the
    seconds of a Retry-After header on a 429 or 5xx answer (else None)."""

    def __init__(self, status: int, reason: str, message: str, body: Json | None = None,
                 retry_after: float | None = None) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.body = body or {}
        self.retry_after = retry_after

    @classmethod
    def from_status(cls, http_status: int, body: Any,
                    retry_after: float | None = None) -> ApiError:
        if isinstance(body, dict) and body.get("kind") == "Status":
            return cls(int(body.get("code") or http_status), str(body.get("reason") or ""),
                       str(body.get("message") or ""), body, retry_after)
        return cls(http_status, "", str(body)[:500], retry_after=retry_after)

    @classmethod
    def from_answer(cls, http_status: int, raw: bytes,
                    retry_after_header: str | None = None) -> ApiError:
        """An error answer as the server sent it: a Status object, or any text."""
        try:
            body: Any = loads(raw)
        except ValueError:
            body = raw.decode(errors="replace")
        return cls.from_status(http_status, body,
                               parse_retry_after(http_status, retry_after_header))


def is_unreachable(err: BaseException) -> bool:
    """The API server could not be reached (refused, reset, closed before answering): an
    outage, which the caller retries quietly while `ApiClient.outage` reports it once."""
    # ClientPayloadError: a watch stream cut in the middle (the server went away).
    return isinstance(err, aiohttp.ClientConnectionError | aiohttp.ClientPayloadError
                      | ConnectionError) and not isinstance(err, ApiError)


class Outage:
    """An expected API server outage says one line when it starts and one when it ends,
    for the whole process, however many watches and writes retry meanwhile (issue 11:
    each ~20 s outage printed 18-24 tracebacks). Clients of one process share it (the
    operator's lease renews on a thread and client of its own), hence the lock."""

    def __init__(self, host: str) -> None:
        self.host = host
        self.since: float | None = None  # monotonic start of the outage under way
        self.outages = 0
        self._lock = threading.Lock()

    @property
    def down(self) -> bool:
        return self.since is not None

    def failed(self, err: BaseException) -> None:
        if self.since is not None:
            return
        with self._lock:
            if self.since is not None:
                return
            self.since = time.monotonic()
            self.outages += 1
        _log.warning("API server %s unreachable (%s); retrying until it answers",
                     self.host, str(err) or type(err).__name__)

    def answered(self) -> None:
        if self.since is None:
            return
        with self._lock:
            since, self.since = self.since, None
        if since is not None:
            _log.warning("API server %s answers again after %.1fs", self.host,
                         time.monotonic() - since)


class FairTokens:
    """A TokenBucket's tokens handed out fairly among tenants.

    While no request waits, a request takes its token at once (no await while tokens are
    left, as before). Once one has to wait, the waiting requests queue per tenant and
    one dispatcher takes the bucket's tokens one at a time, as they come due, for the
    tenants with requests waiting in turn (round robin, first come first served within
    a tenant). So a tenant that queued a thousand requests waits behind itself, and
    another tenant's next request waits for at most one token per waiting tenant."""

    def __init__(self, bucket: TokenBucket) -> None:
        self.bucket = bucket
        # tenant -> its waiting requests (futures resolved when their token is due);
        # a tenant is present only while it has one waiting.
        self._waiting: dict[str, collections.deque[asyncio.Future[None]]] = {}
        self._turns: collections.deque[str] = collections.deque()  # round-robin order
        self._dispatcher: asyncio.Task[None] | None = None

    @property
    def qps(self) -> float:
        return self.bucket.qps

    @property
    def burst(self) -> int:
        return self.bucket.burst

    @property
    def throttled(self) -> int:
        return self.bucket.throttled

    @property
    def waiting(self) -> int:
        return sum(len(q) for q in self._waiting.values())

    async def acquire(self, tenant: str = "") -> float:
        """Wait for a token for `tenant`; the seconds waited."""
        first_delay = 0.0
        if self._dispatcher is None or self._dispatcher.done():
            first_delay = self.bucket.reserve()
            if first_delay <= 0:
                return 0.0
        loop = asyncio.get_running_loop()
        started = loop.time()
        fut: asyncio.Future[None] = loop.create_future()
        queue = self._waiting.get(tenant)
        if queue is None:
            queue = self._waiting[tenant] = collections.deque()
            self._turns.append(tenant)
        queue.append(fut)
        if self._dispatcher is None or self._dispatcher.done():
            # This request reserved the first token already: it is served first.
            self._dispatcher = loop.create_task(self._dispatch(first_delay),
                                                name="polsched-api-tokens")
        try:
            await fut
        except asyncio.CancelledError:
            if not fut.done() or fut.cancelled():
                self._discard(tenant, fut)
            raise
        return loop.time() - started

    def _discard(self, tenant: str, fut: asyncio.Future[None]) -> None:
        queue = self._waiting.get(tenant)
        if queue is not None and fut in queue:
            queue.remove(fut)
            if not queue:
                del self._waiting[tenant]

    async def _dispatch(self, first_delay: float) -> None:
        delay = first_delay
        while self._turns:
            if delay > 0:
                await asyncio.sleep(delay)
            # The next tenant in turn that still has a request waiting gets this token.
            while self._turns:
                tenant = self._turns.popleft()
                queue = self._waiting.get(tenant)
                if not queue:
                    self._waiting.pop(tenant, None)
                    continue
                fut = queue.popleft()
                if queue:
                    self._turns.append(tenant)
                else:
                    del self._waiting[tenant]
                if not fut.done():
                    fut.set_result(None)
                    break
            if not self._turns:
                return
            delay = self.bucket.reserve()


@dataclass(frozen=True)
class ClientLimits:
    """How much a client may ask of the API server: a client-side rate limit (qps 0: none;
    burst 0: twice qps), how many times a request is retried, and the most connections
    its session keeps open."""

    qps: float = 0.0
    burst: int = 0
    max_retries: int = DEFAULT_MAX_RETRIES
    connections: int = 200


class ApiClient:
    """get / list / watch / post / patch / delete on API paths ("/api/v1/nodes")."""

    def __init__(
        self,
        host: str,
        *,
        ssl_context: ssl.SSLContext | Literal[False] | None = None,
        token: Callable[[], str | None] | None = None,
        basic_auth: tuple[str, str] | None = None,
        server_hostname: str | None = None,
        limits: ClientLimits = ClientLimits(),
        headers: Sequence[tuple[str, str]] = (),
    ) -> None:
        """`headers` go with every request: a User-Agent other than polsched's, kubectl's
        --as (Impersonate-User, Impersonate-Group: repeated keys are kept)."""
        self.host = host.rstrip("/")
        user_agent = next((v for k, v in headers if k.lower() == "user-agent"), "polsched")
        self._extra_headers = tuple((k, v) for k, v in headers if k.lower() != "user-agent")
        self._token = token
        self._token_value: str | None = None
        self._token_read = 0.0
        self._basic = aiohttp.BasicAuth(*basic_auth) if basic_auth else None
        qps, burst = limits.qps, limits.burst
        # client-go: QPS <= 0 builds no limiter; a burst of 0 is taken as 2 x QPS here.
        bucket_size = burst if burst > 0 else max(int(qps * 2), 1)
        self.limiter = FairTokens(TokenBucket(qps, bucket_size)) if qps > 0 else None
        self.event_limiter = FairTokens(TokenBucket(qps, bucket_size)) if qps > 0 else None
        self.max_retries = max(limits.max_retries, 0)
        self._throttle_logged = -1.0
        self._connection_limit = limits.connections
        self._user_agent = user_agent
        self._session: aiohttp.ClientSession | None = None
        # TLS settings for every request, built once.
        self._conn_kwargs: dict[str, Any] = {}
        if ssl_context is not None:
            self._conn_kwargs["ssl"] = ssl_context
        if server_hostname:
            self._conn_kwargs["server_hostname"] = server_hostname
        # The lean write path (send): its connections and cached request heads.
        self._writer: http1.Http1Writer | None = None
        self._host_header = ""
        self._fixed_head: dict[tuple[str | None, str], bytes] = {}
        self.outage = Outage(self.host)
        self._metrics_host = urllib.parse.urlsplit(self.host).netloc

    # -- construction from configuration ------------------------------------------------
    @classmethod
    def from_kubeconfig(cls, config_file: str | None = None, context: str | None = None,
                        **kwargs: Any) -> ApiClient:
        """As kubectl: `config_file`, else $KUBECONFIG (a ':'-separated list, merged), else
        ~/.kube/config; `context` or the current-context."""
        return cls.from_connection(kubeconfig.from_kubeconfig(config_file, context), **kwargs)

    @classmethod
    def in_cluster(cls, **kwargs: Any) -> ApiClient:
        """The pod's service account (token re-read as it rotates)."""
        return cls.from_connection(kubeconfig.in_cluster(), **kwargs)

    @classmethod
    def from_connection(cls, conn: kubeconfig.Connection, **kwargs: Any) -> ApiClient:
        ctx: ssl.SSLContext | Literal[False]
        if not conn.verify_ssl:
            ctx = False
        else:
            # Its connections resume the first one's TLS session (cluster.tls).
            ctx = tls.client_context(conn.ssl_ca_cert or None)
            if conn.cert_file:
                ctx.load_cert_chain(conn.cert_file, conn.key_file or None)
        return cls(conn.host, ssl_context=ctx, token=conn.authorization,
                   server_hostname=conn.tls_server_name, **kwargs)

    # -- plumbing -------------------------------------------------------------------------
    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=self._connection_limit, keepalive_timeout=60)
            self._session = aiohttp.ClientSession(
                connector=connector, auth=self._basic,
                headers=CIMultiDict([("User-Agent", self._user_agent),
                                     ("Accept", "application/json"), *self._extra_headers]),
                timeout=aiohttp.ClientTimeout(total=None, connect=10, sock_read=60),
                json_serialize=json.dumps,
                # The API server sets no cookies; a real jar filters them on every request.
                cookie_jar=aiohttp.DummyCookieJar(),
            )
        return self._session

    def _headers(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        headers = dict(extra or {})
        token = self._bearer()
        if token:
            headers["Authorization"] = token
        return headers

    def _bearer(self) -> str | None:
        """The Authorization value of the bearer token, re-read every
        _TOKEN_REFRESH_SECONDS; None without one."""
        if self._token is None:
            return None
        now = time.monotonic()
        if self._token_value is None or now - self._token_read > _TOKEN_REFRESH_SECONDS:
            self._token_value = self._token()
            self._token_read = now
        return self._token_value or None

    def tls_handshakes(self) -> tuple[int, int]:
        """(resumed, full) TLS handshakes of the connections made so far (cluster.tls);
        (0, 0) without TLS or with another context than from_connection's."""
        ctx = self._conn_kwargs.get("ssl")
        return ctx.counts() if isinstance(ctx, tls.ResumingContext) else (0, 0)

    async def close(self) -> None:
        if self._session is not None and not self._session.closed:
            await self._session.close()
        self._session = None
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    async def __aenter__(self) -> ApiClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def request(self, method: str, path: str, *, params: Mapping[str, Any] | None = None,
                      body: Any = None, content_type: str = "application/json",
                      timeout: float | None = 60.0, events: bool = False) -> Json:
        """One request; the decoded JSON answer. Raises ApiError on a non-2xx answer. An
        answer 429 or 5xx with Retry-After is tried again after that wait, at most
        `max_retries` times (client-go with_retry.go: the server said it did not act).
        `events`: take the token from the event bucket."""
        data: bytes | None = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
        attempt = 0
        while True:
            try:
                return await self._request_once(method, path, params, data, content_type,
                                                timeout, events)
            except ApiError as err:
                if err.retry_after is None or attempt >= self.max_retries:
                    raise
                attempt += 1
                _log.debug("%s %s: %s; retrying in %.0fs (Retry-After, attempt %d)", method,
                           path, err.status, err.retry_after, attempt)
                await asyncio.sleep(err.retry_after)

    async def _request_once(self, method: str, path: str, params: Mapping[str, Any] | None,
                            data: bytes | None, content_type: str, timeout: float | None,
                            events: bool) -> Json:
        limiter = self.event_limiter if events else self.limiter
        if limiter is not None:
            await self._throttle(limiter, method, path)
        headers = self._headers({"Content-Type": content_type} if data is not None else None)
        began = time.perf_counter()
        code: int | None = None
        try:
            async with self._get_session().request(
                method, self.host + path, params=_params(params), data=data, headers=headers,
                timeout=aiohttp.ClientTimeout(total=timeout), **self._conn_kwargs,
            ) as resp:
                code = resp.status
                raw = await resp.read()
        except (aiohttp.ClientConnectionError, ConnectionError) as err:
            self.outage.failed(err)
            raise
        finally:
            self._observed(method, code, began)
        self.outage.answered()
        if resp.status >= 400:
            raise ApiError.from_answer(resp.status, raw, resp.headers.get("Retry-After"))
        if not raw:
            return {}
        result: Json = loads(raw)
        return result

    async def send(self, method: str, path: str, body: bytes,
                   content_type: str = "application/json", timeout: float = 60.0,
                   events: bool = False, tenant: str = "") -> int:
        """A write whose answer nobody reads (a Binding, an Event): `body` is already
        encoded, and a 2xx answer is dropped undecoded. Returns the HTTP status; raises
        ApiError (the answer decoded) on a non-2xx one, as request does.
        The bind and the Scheduled event of every pod go this way, over the lean
        HTTP/1.1 connections of cluster.http1 rather than aiohttp: aiohttp's per-request
        work was the largest part of the scheduler's CPU per pod after the decision.
        `events`: take the token from the event bucket. Not retried here: the binder
        decides what a failed bind means. `tenant`: whose token it is (FairTokens)."""
        limiter = self.event_limiter if events else self.limiter
        if limiter is not None:
            await self._throttle(limiter, method, path, tenant)
        writer = self._writer
        if writer is None:
            writer = self._writer = self._make_writer()
        head = self._head(method, path, content_type)
        began = time.perf_counter()
        try:
            status, raw = await writer.send(head, body, timeout)
        except (aiohttp.ClientConnectionError, ConnectionError) as err:
            self.outage.failed(err)
            self._observed(method, None, began)
            raise
        self._observed(method, status, began)
        self.outage.answered()
        if status >= 400:
            raise ApiError.from_answer(status, raw)
        return status

    def _observed(self, method: str, code: int | None, began: float) -> None:
        observer = request_observer
        if observer is not None:
            observer(method, self._metrics_host, code, time.perf_counter() - began)

    async def _throttle(self, limiter: FairTokens, method: str, path: str,
                        tenant: str = "") -> None:
        """Wait for the request's token. A wait of a second or more is logged, at most
        once a second (client-go request.go tryThrottleWithInfo: "Waited before sending
        request", extraLongThrottleLatency, through a throttled logger)."""
        delay = await limiter.acquire(tenant)
        if delay >= 1.0:
            now = time.monotonic()
            if now - self._throttle_logged >= 1.0:
                self._throttle_logged = now
                _log.info("waited %.1fs before sending %s %s (client-side throttling at "
                          "QPS %g, burst %d, %d requests waiting; not priority and "
                          "fairness)", delay, method, path, limiter.qps, limiter.burst,
                          limiter.waiting)

    def _make_writer(self) -> http1.Http1Writer:
        url = urllib.parse.urlsplit(self.host)
        secure = url.scheme == "https"
        ctx: ssl.SSLContext | None = None
        if secure:
            given = self._conn_kwargs.get("ssl")
            if isinstance(given, ssl.SSLContext):
                ctx = given
            else:
                ctx = ssl.create_default_context()
                if given is False:  # as aiohttp's ssl=False: no verification
                    ctx.check_hostname = False
                    ctx.verify_mode = ssl.CERT_NONE
        port = url.port or (443 if secure else 80)
        self._host_header = url.netloc
        return http1.Http1Writer(url.hostname or "localhost", port, ctx,
                                 self._conn_kwargs.get("server_hostname"))

    def _head(self, method: str, path: str, content_type: str) -> bytes:
        """The request line and headers but Content-Length, for http1.Http1Writer. The
        headers after the request line are built again only when the token changes."""
        auth = self._bearer()
        if auth is None and self._basic is not None:
            auth = self._basic.encode()
        key = (auth, content_type)
        fixed = self._fixed_head.get(key)
        if fixed is None:
            lines = [f"Host: {self._host_header}", f"User-Agent: {self._user_agent}",
                     "Accept: application/json", f"Content-Type: {content_type}",
                     *(f"{k}: {v}" for k, v in self._extra_headers)]
            if auth:
                lines.append(f"Authorization: {auth}")
            if len(self._fixed_head) > 16:  # rotated tokens: keep only the current ones
                self._fixed_head.clear()
            fixed = self._fixed_head[key] = ("\r\n".join(lines) + "\r\n").encode("latin-1")
        try:
            target = path.encode("ascii")
        except UnicodeEncodeError:
            target = urllib.parse.quote(path, safe="/:@!$&'()*+,;=-._~%?").encode("ascii")
        if b" " in target:
            target = target.replace(b" ", b"%20")
        return b"%s %s HTTP/1.1\r\n%s" % (method.encode("ascii"), target, fixed)

    # -- verbs ----------------------------------------------------------------------------
    async def get(self, path: str, params: Mapping[str, Any] | None = None) -> Json:
        return await self.request("GET", path, params=params)

    async def list(self, path: str, *, label_selector: str | None = None,
                   field_selector: str | None = None, resource_version: str | None = None,
                   limit: int | None = None, continue_: str | None = None) -> Json:
        """One page of a collection (follow metadata.continue for the next)."""
        return await self.get(path, {
            "labelSelector": label_selector, "fieldSelector": field_selector,
            "resourceVersion": resource_version, "limit": limit, "continue": continue_,
        })

    async def list_all(self, path: str, *, page_size: int = 500,
                       resource_version: str | None = None, **kwargs: Any) -> Json:
        """A whole collection, pages joined: the last page's metadata and all items."""
        items: list[Json] = []
        cont: str | None = None
        while True:
            page = await self.list(path, limit=page_size,
                                   resource_version=None if cont else resource_version,
                                   continue_=cont, **kwargs)
            items.extend(page.get("items") or ())
            cont = (page.get("metadata") or {}).get("continue") or None
            if not cont:
                page["items"] = items
                return page

    async def watch(self, path: str, *, resource_version: str | None = None,
                    allow_watch_bookmarks: bool = True, timeout_seconds: int | None = 300,
                    label_selector: str | None = None, field_selector: str | None = None,
                    ) -> AsyncIterator[tuple[str, Json]]:
        """Stream (type, object) for ADDED, MODIFIED, DELETED and BOOKMARK until the server
        ends the watch (timeoutSeconds). An ERROR event raises ApiError: 410 Expired
        means the resourceVersion is too old and the caller must list again."""
        params = {
            "watch": "true", "resourceVersion": resource_version,
            "allowWatchBookmarks": "true" if allow_watch_bookmarks else None,
            "timeoutSeconds": timeout_seconds,
            "labelSelector": label_selector, "fieldSelector": field_selector,
        }
        if self.limiter is not None:
            await self._throttle(self.limiter, "WATCH", path)
        # No total timeout: the server closes after timeoutSeconds; a silent connection
        # (no event, no bookmark) for longer than that plus a margin is dead.
        read_timeout = (timeout_seconds or 300) + 30
        began = time.perf_counter()
        try:
            opened = await self._get_session().get(
                self.host + path, params=_params(params), headers=self._headers(),
                timeout=aiohttp.ClientTimeout(total=None, connect=10, sock_read=read_timeout),
                **self._conn_kwargs,
            )
        except (aiohttp.ClientConnectionError, ConnectionError) as err:
            self.outage.failed(err)
            self._observed("GET", None, began)
            raise
        # A watch counts when its answer begins, as client-go's (its latency: the wait
        # for the headers, not the stream).
        self._observed("GET", opened.status, began)
        self.outage.answered()
        async with opened as resp:
            if resp.status >= 400:
                raise ApiError.from_answer(resp.status, await resp.read(),
                                           resp.headers.get("Retry-After"))
            # Split lines ourselves: StreamReader.readline refuses lines over 128 KiB, and
            # a pod with a large last-applied-configuration annotation can exceed that.
            # Each line is sliced once; the unfinished tail is kept once per chunk (cutting
            # the buffer after every line copied the rest of the chunk each time).
            buf = b""
            async for chunk in resp.content.iter_any():
                buf = buf + chunk if buf else chunk
                start = 0
                while True:
                    nl = buf.find(b"\n", start)
                    if nl < 0:
                        break
                    if nl > start:
                        line = buf[start:nl]
                        if not line.isspace():
                            yield _watch_event(line)
                    start = nl + 1
                buf = buf[start:] if start else buf
            if buf.strip():
                yield _watch_event(buf)

    async def post(self, path: str, body: Any, params: Mapping[str, Any] | None = None) -> Json:
        return await self.request("POST", path, params=params, body=body)

    async def put(self, path: str, body: Any, params: Mapping[str, Any] | None = None) -> Json:
        return await self.request("PUT", path, params=params, body=body)

    async def patch(self, path: str, body: Any, patch_type: PatchType = "merge", *,
                    field_manager: str | None = None, force: bool = False,
                    params: Mapping[str, Any] | None = None, events: bool = False) -> Json:
        """`body`: a dict (merge/strategic/apply) or a list of operations (json)."""
        if patch_type == "apply" and not field_manager:
            raise ValueError("patch(..., 'apply') needs a field_manager")
        p = dict(params or {})
        if field_manager:
            p["fieldManager"] = field_manager
        if force:
            p["force"] = "true"
        return await self.request("PATCH", path, params=p, body=body,
                                  content_type=_PATCH_CONTENT_TYPES[patch_type], events=events)

    async def delete(self, path: str, body: Any = None,
                     params: Mapping[str, Any] | None = None) -> Json:
        return await self.request("DELETE", path, params=params, body=body)


def _params(params: Mapping[str, Any] | None) -> dict[str, str]:
    if not params:
        return {}
    return {k: str(v) for k, v in params.items() if v is not None and v != ""}


def _watch_event(line: bytes) -> tuple[str, Json]:
    event = loads(line)
    kind: str = event.get("type") or ""
    obj: Json = event.get("object") or {}
    if kind == "ERROR":
        raise ApiError.from_status(int(obj.get("code") or 500), obj)
    return kind, obj
