"""HTTPExtender: one kube-scheduler extender (spec.extenders[i]) spoken to over HTTP.

Behaviour follows kube-scheduler's pkg/scheduler/extender.go: POST to the urlPrefix with
its trailing slashes trimmed + "/" + verb; a nodeCacheCapable extender gets and returns
node names, any other gets and returns whole v1.Node objects; anything but 200 is
"failed <verb> with extender at URL <url>, code <status>"; managedResources limits the
pods the extender sees; httpTimeout (default 5s) bounds each whole exchange.

Each extender keeps kept-alive HTTP/1.1 connections (cluster/http1.py's lean client, the
one the Bindings go through) for the event loop it is used on, so a pod costs a request,
not a TCP (and TLS) handshake, nor aiohttp's per-request objects: the request line and
headers of each verb are encoded once, and a call writes them with the body in one
write. Used from a new loop it opens new connections (the old ones cannot be closed from
there and are dropped). A pooled connection the extender dropped while idle is retried
once for the read-only verbs. Everything is awaited: a slow extender delays only the pods
that wait for it.

Deliberate differences from upstream, each to stay safe where Go would not:
- an Error in an answer reads "failed <verb> with extender at URL <url>: <Error>" (upstream
  reports the bare Error text, which does not say which extender failed); that Error, and
  anything else taken from an answer into a message (node names, pod UIDs), is cut to
  MAX_REASON_CHARS with control characters replaced: messages end up in pods' events and
  policies' status, and an answer body is never copied into them;
- an answer's body is bounded: MAX_ANSWER_BYTES plus the size of the request (a filter
  answer of whole nodes is at most the nodes sent); a larger one fails the call as soon as
  its Content-Length or its first bytes past the bound arrive, and the connection is
  closed, so memory stays bounded whatever the extender sends (upstream reads any size);
- the operator's destination policy (extender.destinations.DestinationPolicy) is enforced when
  connecting: the host is resolved and only addresses the policy does not refuse are
  connected to;
- HTTP(S)_PROXY from the environment is not used (Go's transport uses it);
- a preempt answer only narrows what was offered: its UIDs are resolved against the
  victims offered on each node (upstream: every pod on the node), and a node or victim
  outside the offer is dropped and logged (process_preemption).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
import ssl
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from polsched import __version__
from polsched.cluster.http1 import AnswerTooLarge, DestinationRefused, Http1Writer
from polsched.extender import wire
from polsched.extender.config import DEFAULT_EXTENDER_TIMEOUT_SECONDS, ExtenderConfig
from polsched.extender.destinations import OPEN, DestinationPolicy
from polsched.framework import messages
from polsched.framework.interfaces import ExtenderError, Victims
from polsched.framework.types import NodeInfo, PodInfo
from polsched.objects import Json

# An answer's body may be this much larger than the request it answers (upstream has no
# bound; a 300 MB answer was buffered whole, in the process every Shared policy runs in).
MAX_ANSWER_BYTES = 4 * 1024 * 1024
# Text from an answer quoted in a message (an Error, a node name) is cut to this.
MAX_REASON_CHARS = 256
_USER_AGENT = f"polsched/{__version__}"
# The per-node JSON cache (nodeCacheCapable false) is dropped when it holds this many more
# entries than the request that found it too big: nodes deleted from the cluster go then.
_NODE_CACHE_SLACK = 1024
# Refusals of one answer named in its log line; the rest are counted.
_MAX_REFUSALS_LOGGED = 5

log = logging.getLogger(__name__)


def _uid(pod: Json) -> str:
    return str((pod.get("metadata") or {}).get("uid") or "")


def _go_quote(s: str) -> str:
    """Go's %q for the strings we quote (a JSON string is close enough), bounded."""
    return json.dumps(reason(s), ensure_ascii=False)


def reason(text: str, limit: int = MAX_REASON_CHARS) -> str:
    """Text taken from an extender's answer, fit for an event or a condition: terminal
    escape sequences removed, other control characters (newlines included) replaced by
    spaces, cut to `limit` characters."""
    return messages.sanitized(text, limit)


def _pem_from_ca_data(data: str) -> str:
    """tlsConfig.caData: PEM text, or PEM base64-encoded as a []byte field is in YAML."""
    if "-----BEGIN" in data:
        return data
    try:
        return base64.b64decode(data, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return data  # let the ssl module say what is wrong with it


def build_ssl(config: ExtenderConfig, ca_pem: str | None = None) -> ssl.SSLContext | bool:
    """The TLS settings of pkg/scheduler/extender.go makeTransport: enableHTTPS without a
    CA means "do not verify", as upstream; otherwise verify against the given CA, or the
    system roots when none is given. True means aiohttp's default verification."""
    ca = ca_pem or (_pem_from_ca_data(config.ca_data) if config.ca_data else "")
    insecure = config.tls_insecure or (config.enable_https and not ca)
    if insecure:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        return ctx
    if ca:
        try:
            return ssl.create_default_context(cadata=ca)
        except (ssl.SSLError, ValueError) as exc:
            raise ExtenderError(
                f"extender {config.url_prefix}: tlsConfig: the CA certificate (caData or "
                f"the Secret in caSecretRef) is not valid PEM: {exc}") from exc
    return True


class HTTPExtender:
    """A kube-scheduler extender, implementing framework.interfaces.Extender plus binding
    and preemption. Build one per spec.extenders entry when the policy loads; call
    close() when the policy's pipeline is dropped."""

    def __init__(self, config: ExtenderConfig, ca_pem: str | None = None, *,
                 destinations: DestinationPolicy = OPEN) -> None:
        self.config = config
        self._destinations = destinations
        self._base = config.url_prefix.rstrip("/")
        timeout = config.http_timeout_seconds
        self._timeout = timeout if timeout > 0 else DEFAULT_EXTENDER_TIMEOUT_SECONDS
        self._managed = frozenset(r.name for r in config.managed_resources)
        ssl_setting = build_ssl(config, ca_pem)
        target = urlsplit(self._base)
        # As Go's transport: the URL's scheme decides TLS (enableHTTPS sets what is
        # verified, for an https:// urlPrefix).
        self._tls: ssl.SSLContext | None = None
        # What is wrong with urlPrefix (the loader checks the scheme and host): each call
        # fails with it, as each of upstream's does when Go cannot parse the URL.
        self._url_error = ""
        port: int | None = None
        if target.scheme == "https":
            self._tls = (ssl_setting if isinstance(ssl_setting, ssl.SSLContext)
                         else ssl.create_default_context())
        elif target.scheme != "http":
            self._url_error = f"unsupported protocol scheme {target.scheme!r}"
        try:
            port = target.port
        except ValueError as exc:
            self._url_error = str(exc)
        if not target.hostname:
            self._url_error = "no Host in request URL"
        self._host = target.hostname or ""
        self._port = port or (443 if self._tls is not None else 80)
        self._host_header = target.netloc.rpartition("@")[2]
        # verb -> the request line and headers, up to Content-Length (Http1Writer.send).
        self._heads: dict[str, bytes] = {}
        self._writer: Http1Writer | None = None
        self._writer_loop: asyncio.AbstractEventLoop | None = None
        # The last pod encoded, and its JSON: filter and prioritize of one cycle send it.
        self._pod_json: tuple[Json, bytes] | None = None
        # nodeCacheCapable false: node name -> (the node JSON it was encoded from, bytes).
        # NodeInfo.set_node replaces `raw`, so an identity check says the bytes are current.
        self._node_json: dict[str, tuple[Json, bytes]] = {}

    # -- framework.interfaces.Extender --------------------------------------------------

    @property
    def name(self) -> str:
        """The urlPrefix as configured, as upstream's Name()."""
        return self.config.url_prefix

    @property
    def ignorable(self) -> bool:
        return self.config.ignorable

    @property
    def weight(self) -> int:
        return self.config.weight

    @property
    def timeout_seconds(self) -> float:
        return self._timeout

    def url(self, verb: str) -> str:
        return f"{self._base}/{verb}"

    def is_filter(self) -> bool:
        return bool(self.config.filter_verb)

    def is_prioritizer(self) -> bool:
        return bool(self.config.prioritize_verb)

    def is_binder(self) -> bool:
        return bool(self.config.bind_verb)

    def supports_preemption(self) -> bool:
        return bool(self.config.preempt_verb)

    def is_interested(self, pod: PodInfo) -> bool:
        """True when managedResources is empty or a container or init container names one
        of them in its requests or limits (extender.go IsInterested)."""
        managed = self._managed
        if not managed:
            return True
        spec = pod.spec
        for key in ("containers", "initContainers"):
            for container in spec.get(key) or ():
                resources = container.get("resources") or {}
                for section in ("requests", "limits"):
                    names = resources.get(section)
                    if names and not managed.isdisjoint(names):
                        return True
        return False

    async def filter(self, pod: PodInfo, nodes: Sequence[NodeInfo]
                     ) -> tuple[list[NodeInfo], dict[str, str], dict[str, str]]:
        """Feasible nodes (a subset of `nodes`, in the extender's order), then failed and
        failed-and-unresolvable node name -> reason."""
        verb = self.config.filter_verb
        if not verb:
            return list(nodes), {}, {}
        sent = [n.name for n in nodes]
        answer = await self._send(verb, self._args(pod, nodes, sent))
        result = wire.ExtenderFilterResult.from_json(answer)
        if result.error:
            raise ExtenderError(
                f"failed {verb} with extender at URL {self.url(verb)}: {reason(result.error)}")
        if self.config.node_cache_capable and result.node_names is not None:
            names = result.node_names
        elif result.nodes is not None:
            names = [wire.node_name(n) for n in result.nodes]
        else:
            names = []  # upstream: neither list means no node passed
        by_name = dict(zip(sent, nodes, strict=True))
        try:
            feasible = [by_name[name] for name in names]
        except KeyError as missing:
            raise ExtenderError(
                f"extender {_go_quote(self.name)} claims a filtered node "
                f"{_go_quote(missing.args[0])} which is not found in the input node "
                "list") from None
        if len(feasible) > 1 and len(set(names)) != len(names):
            # A name listed twice: the node once, in its first place.
            feasible = [by_name[name] for name in dict.fromkeys(names)]
        refused: list[str] = []
        failed = self._failed(result.failed_nodes, by_name, refused)
        unresolvable = self._failed(result.failed_and_unresolvable_nodes, by_name, refused)
        if refused:
            log.warning("extender %s: filter answer for pod %s/%s names nodes that were not "
                        "sent, ignored: %s%s", _go_quote(self.name), pod.namespace, pod.name,
                        ", ".join(refused[:_MAX_REFUSALS_LOGGED]),
                        f" (and {len(refused) - _MAX_REFUSALS_LOGGED} more)"
                        if len(refused) > _MAX_REFUSALS_LOGGED else "")
        return feasible, failed, unresolvable

    @staticmethod
    def _failed(answered: dict[str, str], sent: Mapping[str, NodeInfo],
                refused: list[str]) -> dict[str, str]:
        """FailedNodes (or FailedAndUnresolvableNodes) narrowed to the nodes that were
        sent (the others are added to `refused`, quoted), each reason sanitised and cut
        to MAX_REASON_CHARS: they go into the pod's condition and events."""
        out: dict[str, str] = {}
        for name, why in answered.items():
            if name in sent:
                out[name] = reason(why)
            elif len(refused) <= _MAX_REFUSALS_LOGGED:
                refused.append(_go_quote(name))
            else:
                refused.append("")  # counted, not quoted
        return out

    async def prioritize(self, pod: PodInfo, nodes: Sequence[NodeInfo]) -> dict[str, int]:
        """Host -> score, nominally in 0..MaxExtenderPriority but taken as it comes, not
        clamped: upstream (prioritizeNodes) adds score x weight x (MaxNodeScore /
        MaxExtenderPriority) whatever the score, and extenders written for kube-scheduler
        rely on it. A host listed twice gets the sum, as upstream adds every entry."""
        verb = self.config.prioritize_verb
        if not verb:
            return {n.name: 0 for n in nodes}
        answer = await self._send(verb, self._args(pod, nodes, [n.name for n in nodes]))
        return wire.host_scores(answer)

    # -- binding and preemption -------------------------------------------------------

    async def bind(self, pod: PodInfo, node_name: str) -> None:
        """Ask the extender to bind `pod` to `node_name` instead of posting a Binding."""
        verb = self.config.bind_verb
        if not verb:
            raise ExtenderError("unexpected empty bindVerb in extender")
        args = wire.ExtenderBindingArgs(pod.name, pod.namespace, pod.uid, node_name)
        answer = await self._send(verb, wire.dumps(args.to_json()), read_only=False)
        result = wire.ExtenderBindingResult.from_json(answer)
        if result.error:
            raise ExtenderError(
                f"failed {verb} with extender at URL {self.url(verb)}: {reason(result.error)}")

    async def process_preemption(
        self, pod: PodInfo, victims_by_node: Mapping[str, Victims],
    ) -> dict[str, Victims]:
        """The candidates the extender keeps, with the victims it chose (extender.go
        ProcessPreemption), narrowed to what was offered: upstream resolves the answer's
        UIDs against every pod on the node and takes the nodes and NumPDBViolations as
        answered, so an extender could have any pod deleted. Here a node that was not
        offered, and a UID that is not one of the victims offered on its node, are
        dropped and logged; a node left with none of the victims it named is dropped too
        (an answer naming no victim is still the caller's error, as upstream). Each kept
        node's NumPDBViolations is the offered one, an upper bound: the caller recomputes
        it from the victims kept."""
        offered = {n: wire.Victims.of(v) for n, v in victims_by_node.items()}
        verb = self.config.preempt_verb
        if not verb:
            raise ExtenderError(f"preempt verb is not defined for extender {self.name} "
                                "but run into ProcessPreemption")
        if self.config.node_cache_capable:
            args = wire.ExtenderPreemptionArgs(
                pod.raw, node_name_to_meta_victims={
                    n: v.to_meta() for n, v in offered.items()})
        else:
            args = wire.ExtenderPreemptionArgs(pod.raw, node_name_to_victims=offered)
        answer = await self._send(verb, wire.dumps(args.to_json()))
        result = wire.ExtenderPreemptionResult.from_json(answer)
        out: dict[str, Victims] = {}
        refused: list[str] = []
        for node_name, meta in result.node_name_to_meta_victims.items():
            sent = offered.get(node_name)
            if sent is None:
                refused.append(f"node {_go_quote(node_name)} was not a candidate")
                continue
            by_uid = {_uid(p): p for p in sent.pods}
            pods: list[Json] = []
            taken: set[str] = set()
            for meta_pod in meta.pods:
                if meta_pod.uid in taken:  # named twice: the victim once
                    continue
                found = by_uid.get(meta_pod.uid)
                if found is None:
                    refused.append(f"pod (UID: {_go_quote(meta_pod.uid)}) on node "
                                   f"{_go_quote(node_name)} was not offered as a victim")
                    continue
                taken.add(meta_pod.uid)
                pods.append(found)
            if meta.pods and not pods:
                refused.append(f"node {_go_quote(node_name)} has none of the offered "
                               "victims left")
                continue
            out[node_name] = wire.Victims(tuple(pods), sent.num_pdb_violations)
        if refused:
            log.warning("extender %s: preempt answer for pod %s/%s narrowed to what was "
                        "offered: %s%s", _go_quote(self.name), pod.namespace, pod.name,
                        "; ".join(refused[:_MAX_REFUSALS_LOGGED]),
                        f" (and {len(refused) - _MAX_REFUSALS_LOGGED} more)"
                        if len(refused) > _MAX_REFUSALS_LOGGED else "")
        return out

    # -- transport ----------------------------------------------------------------------

    async def close(self) -> None:
        """Close the kept-alive connections; the next call opens new ones. Connections
        of another loop than the running one are dropped, not closed (they belong to it)."""
        writer, loop = self._writer, self._writer_loop
        self._writer, self._writer_loop = None, None
        if writer is not None and loop is asyncio.get_running_loop():
            writer.close()

    def _writer_for_loop(self) -> Http1Writer:
        """The connections of the running loop, created on first use: a connection
        belongs to the loop it was made on."""
        loop = asyncio.get_running_loop()
        writer = self._writer
        if writer is None or self._writer_loop is not loop:
            check = (self._destinations.refuses_address
                     if self._destinations is not OPEN else None)
            writer = Http1Writer(self._host, self._port, self._tls,
                                 self._host if self._tls is not None else None,
                                 address_check=check)
            self._writer, self._writer_loop = writer, loop
        return writer

    def _head(self, verb: str) -> bytes:
        """The request line and headers of a POST to the verb's URL (Content-Length and
        the body follow)."""
        head = self._heads.get(verb)
        if head is None:
            # As Go parses the URL: a query in urlPrefix gets the "/" + verb appended.
            url = urlsplit(self.url(verb))
            path = (url.path or "/") + (f"?{url.query}" if url.query else "")
            head = self._heads[verb] = (
                f"POST {path} HTTP/1.1\r\nHost: {self._host_header}\r\n"
                f"User-Agent: {_USER_AGENT}\r\nContent-Type: application/json\r\n"
                "Accept: application/json\r\n").encode("latin-1")
        return head

    async def _send(self, verb: str, body: bytes, read_only: bool = True) -> Any:
        """POST `body` to the verb's URL; the decoded JSON answer. Every failure is an
        ExtenderError naming the URL."""
        if self._url_error:
            raise ExtenderError(f'Post "{self.url(verb)}": {self._url_error}')
        writer = self._writer_for_loop()
        head = self._head(verb)
        # Like Go's http.Client.Timeout: connecting, sending and reading the whole answer.
        deadline = asyncio.get_running_loop().time() + self._timeout
        retry = read_only
        limit = MAX_ANSWER_BYTES + len(body)
        while True:
            try:
                async with asyncio.timeout_at(deadline):
                    status, payload = await writer.send(head, body, timeout=None,
                                                        max_body=limit)
                break
            except AnswerTooLarge as exc:
                raise ExtenderError(
                    f"failed {verb} with extender at URL {self.url(verb)}: its answer is "
                    f"larger than the {limit} bytes allowed ({MAX_ANSWER_BYTES // 2**20} MiB "
                    "more than the request); not read") from exc
            except aiohttp.ClientConnectorError as exc:
                if isinstance(exc.os_error, DestinationRefused):
                    raise ExtenderError(f'Post "{self.url(verb)}": {exc.os_error}') from exc
                raise ExtenderError(
                    f'Post "{self.url(verb)}": {exc or type(exc).__name__}') from exc
            except aiohttp.ServerDisconnectedError as exc:
                # A pooled connection the extender closed while idle (many servers drop
                # idle connections after a few seconds) fails like this. Filter,
                # prioritize and preempt change nothing, so they are tried once more on a
                # fresh connection within what is left of httpTimeout.
                if not retry:
                    raise ExtenderError(f'Post "{self.url(verb)}": {exc}') from exc
                retry = False
            except TimeoutError:
                raise ExtenderError(f'Post "{self.url(verb)}": no answer within httpTimeout '
                                    f"({self._timeout:g}s)") from None
            except (aiohttp.ClientError, OSError, ValueError) as exc:
                raise ExtenderError(
                    f'Post "{self.url(verb)}": {exc or type(exc).__name__}') from exc
        if status != 200:
            raise ExtenderError(
                f"failed {verb} with extender at URL {self.url(verb)}, code {status}")
        return wire.loads(payload,
                          f"decoding the {verb} answer of the extender at URL {self.url(verb)}")

    def _args(self, pod: PodInfo, nodes: Sequence[NodeInfo], names: list[str]) -> bytes:
        """ExtenderArgs for filter and prioritize; whole nodes come from the per-node
        cache, which matters at thousands of nodes per pod. The pod is encoded once for
        the filter and prioritize calls of its cycle."""
        raw = pod.raw
        cached = self._pod_json
        if cached is not None and cached[0] is raw:
            pod_json = cached[1]
        else:
            pod_json = wire.dumps(raw)
            self._pod_json = (raw, pod_json)
        if self.config.node_cache_capable:
            return wire.encode_args(pod_json, None, names)
        return wire.encode_args(pod_json, self._nodes_json(nodes), None)
    def _nodes_json(self, nodes: Sequence[NodeInfo]) -> list[bytes]:
        cache = self._node_json
        if len(cache) > len(nodes) + _NODE_CACHE_SLACK:
            cache.clear()
        out: list[bytes] = []
        for n in nodes:
            entry = cache.get(n.name)
            if entry is None or entry[0] is not n.raw:
                entry = (n.raw, wire.dumps(n.raw))
                cache[n.name] = entry
            out.append(entry[1])
        return out


# (namespace, name) -> the Secret object, as the API server returns it.
SecretReader = Callable[[str, str], Awaitable[Json]]
# (namespace, name, the field's path) -> the PEM CA bundle of a caSecretRef.
CAReader = Callable[[str, str, str], Awaitable[str]]


class ExtenderSetupError(Exception):
    """An extender of a policy cannot be built: its caSecretRef Secret cannot be read or
    has no ca.crt, or the client refuses its config. `path` is the field
    ("spec.extenders[1].tlsConfig.caSecretRef", "spec.extenders[1]")."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


async def build_extenders(configs: Sequence[ExtenderConfig], read_ca: CAReader | None, *,
                          destinations: DestinationPolicy = OPEN) -> list[HTTPExtender]:
    """One HTTPExtender per spec.extenders entry, each with the CA its caSecretRef names
    (read with `read_ca`) and the operator's destination policy: how the operator builds
    a policy's extenders (its reader also knows the CAs mounted in a Dedicated pod), and
    `polsched explain` and `simulate` with it (secret_ca_reader over the API). `read_ca`
    is None where there is no cluster to read from (a policy read from a file): a
    caSecretRef is then an error. Raises ExtenderSetupError, or what `read_ca` raises;
    nothing built is left open when it does."""
    out: list[HTTPExtender] = []
    try:
        for i, cfg in enumerate(configs):
            path = f"spec.extenders[{i}]"
            ca_pem: str | None = None
            if cfg.ca_secret_ref is not None:
                namespace, name = cfg.ca_secret_ref
                if read_ca is None:
                    raise ExtenderSetupError(f"{path}.tlsConfig.caSecretRef",
                                             f"Secret {namespace}/{name} can only be read "
                                             "from the cluster, and there is none here")
                ca_pem = await read_ca(namespace, name, f"{path}.tlsConfig.caSecretRef")
            try:
                out.append(HTTPExtender(cfg, ca_pem, destinations=destinations))
            except Exception as err:  # noqa: BLE001 - named, contained in the policy
                why = " ".join(str(err).split())[:MAX_REASON_CHARS]
                raise ExtenderSetupError(path, f"the extender client could not be built: "
                                               f"{why}") from err
    except BaseException:
        for ext in out:
            await ext.close()
        raise
    return out


def secret_ca_reader(read_secret: SecretReader) -> CAReader:
    """A CAReader over `read_secret`: the Secret's ca.crt, base64-decoded, each problem an
    ExtenderSetupError naming the field."""
    async def read_ca(namespace: str, name: str, path: str) -> str:
        try:
            secret = await read_secret(namespace, name)
        except asyncio.CancelledError:
            raise
        except Exception as err:  # the reader's own error (cluster.ApiError) says why
            raise ExtenderSetupError(path, f"cannot read Secret {namespace}/{name}: {err}"
                                     ) from err
        data = (secret.get("data") or {}).get("ca.crt")
        if not data:
            raise ExtenderSetupError(path, f"Secret {namespace}/{name} has no key ca.crt")
        try:
            return base64.b64decode(data, validate=True).decode()
        except (binascii.Error, UnicodeDecodeError) as err:
            raise ExtenderSetupError(path, f"Secret {namespace}/{name}: ca.crt is not "
                                           f"base64-encoded text: {err}") from err
    return read_ca
