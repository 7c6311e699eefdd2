"""TLS to the API server with session resumption.

polsched speaks HTTP/1.1, so it opens many connections to one server: the initial lists
and watches (one per resource), up to 96 bind writers and the event writers, most of
them in the first seconds. Each full handshake cost ~4.4 ms of CPU here (the client
certificate's signature, the server's chain verified), and as much again in the API
server, on the same cores. A handshake that resumes the session of an earlier connection
(a TLS 1.3 ticket, RFC 8446 2.2) skips both: ~2.7 ms per connection and request in the
same measurement (bench/NOTES.md "Issue 15, fourth pass: start-up").

Python's asyncio offers no session argument for a connection, but every client
connection (aiohttp's and http1.Http1Writer's) gets its TLS object from the context's
wrap_bio: ResumingContext hands the newest resumable session it has seen to each new
client connection. The server decides: a ticket it does not take (expired, a restarted
server with new keys) just means a full handshake, as before. One context serves one
ApiClient, i.e. one server and one set of credentials.
"""

from __future__ import annotations

import ssl
import weakref
from typing import Any

_WATCHED = 32  # connections whose ticket is still awaited, at most


class ResumingContext(ssl.SSLContext):
    """An SSLContext whose client connections resume the newest session seen."""

    # SSLContext is built by __new__(protocol); these are set on first use.
    _session: ssl.SSLSession | None
    _pending: list[weakref.ref[ssl.SSLObject]]
    resumed: int
    full: int

    def _harvest(self) -> None:
        """Take the newest resumable session of the connections made so far. A TLS 1.3
        ticket arrives after the handshake, so a connection is looked at again until it
        has one (or is gone)."""
        keep: list[weakref.ref[ssl.SSLObject]] = []
        for ref in self._pending:
            obj = ref()
            if obj is None:
                continue
            if obj.version() is None:  # the handshake is not done (its session would
                keep.append(ref)       # be the one offered, not the one agreed)
                continue
            session = obj.session
            if session is not None and session.has_ticket:
                self._session = session
                if obj.session_reused:
                    self.resumed += 1
                else:
                    self.full += 1
            else:
                keep.append(ref)
        self._pending = keep[-_WATCHED:]

    def wrap_bio(self, incoming: ssl.MemoryBIO, outgoing: ssl.MemoryBIO,
                 server_side: bool = False, server_hostname: Any = None,
                 session: ssl.SSLSession | None = None) -> ssl.SSLObject:
        if server_side:
            return super().wrap_bio(incoming, outgoing, server_side, server_hostname, session)
        if not hasattr(self, "_pending"):
            self._session, self._pending, self.resumed, self.full = None, [], 0, 0
        self._harvest()
        if session is None:
            session = self._session
        obj = super().wrap_bio(incoming, outgoing, server_side, server_hostname, session)
        self._pending.append(weakref.ref(obj))
        return obj

    def counts(self) -> tuple[int, int]:
        """(resumed, full) handshakes of the connections whose session was seen."""
        if not hasattr(self, "_pending"):
            return 0, 0
        self._harvest()
        return self.resumed, self.full


def client_context(cafile: str | None = None) -> ResumingContext:
    """As ssl.create_default_context(cafile=cafile) for a client, resuming sessions."""
    ctx = ResumingContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies the chain and the hostname
    if cafile:
        ctx.load_verify_locations(cafile)
    else:
        ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
    return ctx
