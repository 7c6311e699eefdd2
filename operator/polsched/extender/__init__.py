"""The kube-scheduler extender client: spec.extenders entries spoken to over HTTP.

For: HTTPExtender (client.py), which implements framework.pipeline.Extender plus the bind
and preempt verbs, the k8s.io/kube-scheduler/extender/v1 wire types (wire.py), so
that an extender written for kube-scheduler works with polsched unchanged, and an
extender's configuration (config.py, which the API layer parses into).

Must not: block the event loop (every exchange is awaited on a pooled connection;
no synchronous HTTP), talk to the API server (the operator reads a caSecretRef Secret and
passes the PEM in), or decide scheduling itself: how extender answers combine with the
plugins (order, ignorable, weights) is the pipeline's business.

The client is loaded lazily (PEP 562 __getattr__): importing the config or the wire
types (as the API layer and the plugins do) must not load the HTTP client and aiohttp.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from polsched.extender.config import DEFAULT_EXTENDER_TIMEOUT_SECONDS

if TYPE_CHECKING:
    from polsched.extender.client import HTTPExtender, build_ssl

__all__ = ["DEFAULT_EXTENDER_TIMEOUT_SECONDS", "HTTPExtender", "build_ssl"]

_LAZY = frozenset({"HTTPExtender", "build_ssl"})


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module("polsched.extender.client"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
