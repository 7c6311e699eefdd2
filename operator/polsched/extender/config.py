"""An extender's configuration: kube-scheduler's Extender (KubeSchedulerConfiguration v1,
pkg/scheduler/apis/config/types.go Extender), defaulted.

It lives here, below the API layer, as upstream's config types live apart from the
runtime that uses them: api/ parses spec.extenders[i] into an ExtenderConfig, and the
extender client (client.py) speaks HTTP as one says. Plain frozen data, no I/O, and
nothing imported but the standard library.
"""

from __future__ import annotations

from dataclasses import dataclass

# pkg/scheduler/extender.go: DefaultExtenderTimeout, used when httpTimeout is 0 or absent.
DEFAULT_EXTENDER_TIMEOUT_SECONDS = 5.0


@dataclass(frozen=True)
class ManagedResource:
    """An extended resource the extender manages (Extender.ManagedResources)."""

    name: str
    ignored_by_scheduler: bool = False


@dataclass(frozen=True)
class ExtenderConfig:
    """kube-scheduler's Extender (KubeSchedulerConfiguration v1), defaulted."""

    url_prefix: str
    filter_verb: str = ""
    prioritize_verb: str = ""
    bind_verb: str = ""
    preempt_verb: str = ""
    weight: int = 1
    enable_https: bool = False
    node_cache_capable: bool = False
    ignorable: bool = False
    http_timeout_seconds: float = DEFAULT_EXTENDER_TIMEOUT_SECONDS
    managed_resources: tuple[ManagedResource, ...] = ()
    tls_insecure: bool = False
    # (namespace, name) of a Secret whose ca.crt verifies the extender's certificate.
    ca_secret_ref: tuple[str, str] | None = None
    # Inline PEM CA data (tlsConfig.caData), as kube-scheduler allows.
    ca_data: str = ""


__all__ = ["DEFAULT_EXTENDER_TIMEOUT_SECONDS", "ExtenderConfig", "ManagedResource"]
