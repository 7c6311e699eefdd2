"""The kube-scheduler extender client: spec.extenders entries spoken to over HTTP.

For: HTTPExtender (client.py), which implements framework.interfaces.Extender plus the bind
and preempt verbs, and the k8s.io/kube-scheduler/extender/v1 wire types (wire.py), so
that an extender written for kube-scheduler works with polsched unchanged.

Must not: block the event loop (every exchange is awaited on a pooled aiohttp session;
no synchronous HTTP), talk to the API server (the operator reads a caSecretRef Secret and
passes the PEM in), or decide scheduling itself: how extender answers combine with the
plugins (order, ignorable, weights) is the pipeline's business.
"""

from polsched.extender.client import DEFAULT_EXTENDER_TIMEOUT_SECONDS, HTTPExtender, build_ssl

__all__ = ["DEFAULT_EXTENDER_TIMEOUT_SECONDS", "HTTPExtender", "build_ssl"]
