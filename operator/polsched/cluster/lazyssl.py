"""aiohttp without loading the system's CA bundle at import.

aiohttp.connector builds two default SSLContexts when it is imported (one verifying, one
not), and both read the system's CA bundle then: ~0.09 s of CPU in every `polsched run`
before anything else can happen (bench/NOTES.md "Issue 15, fifth pass: start-up"). polsched
never uses them: each ApiClient passes its own context (the kubeconfig's CA, cluster.tls).
An extender over https without a CA of its own, or kopf, may.

So the first import of aiohttp.connector goes through import_aiohttp(): the two contexts
are built as before except that their CA loading (load_default_certs,
set_default_verify_paths) is recorded instead of done, and it is done the first time
aiohttp hands one of them to a connection (TCPConnector._get_ssl_context, the only place
that reads them). A caller of the defaults gets the same context, loaded, as before; the
others never pay for it.
"""

from __future__ import annotations

import ssl
import sys
import threading
from typing import Any

# id(context) -> (context, the loading calls skipped at import: method name, args, kwargs)
_skipped: dict[int, tuple[ssl.SSLContext, list[tuple[str, tuple[Any, ...], dict[str, Any]]]]] = {}
_lock = threading.Lock()
_DEFERRED = ("load_default_certs", "set_default_verify_paths")


def loaded(context: ssl.SSLContext) -> ssl.SSLContext:
    """`context` with the CA loading it skipped at import done (once)."""
    if not _skipped:
        return context
    with _lock:
        got = _skipped.pop(id(context), None)
    if got is not None:
        ctx, calls = got
        for name, args, kwargs in calls:
            getattr(ctx, name)(*args, **kwargs)
    return context


def import_aiohttp() -> None:
    """Import aiohttp (its connector module) with the default contexts' CA loading
    deferred. Nothing happens when aiohttp.connector is imported already."""
    if "aiohttp.connector" in sys.modules:
        return
    cls = ssl.SSLContext
    saved = {name: cls.__dict__.get(name) for name in _DEFERRED}

    def deferring(name: str) -> Any:
        def skip(self: ssl.SSLContext, *args: Any, **kwargs: Any) -> None:
            _skipped.setdefault(id(self), (self, []))[1].append((name, args, kwargs))
        return skip

    for name in _DEFERRED:
        setattr(cls, name, deferring(name))
    try:
        import aiohttp.connector
    finally:
        for name, orig in saved.items():
            if orig is None:  # inherited from _ssl._SSLContext
                delattr(cls, name)
            else:
                setattr(cls, name, orig)
    defaults = {id(aiohttp.connector._SSL_CONTEXT_VERIFIED),
                id(aiohttp.connector._SSL_CONTEXT_UNVERIFIED)}
    for key in [k for k in _skipped if k not in defaults]:  # anything else: load it now
        loaded(_skipped[key][0])
    connector: Any = aiohttp.connector.TCPConnector
    get = connector._get_ssl_context

    def _get_ssl_context(self: Any, req: Any) -> Any:
        context = get(self, req)
        return loaded(context) if context is not None else None

    connector._get_ssl_context = _get_ssl_context
