"""What the cluster admin allows policies to claim and to call: reserved scheduler names,
the extender destination policy and the tenancy configuration (api.tenancy). All are the
operator's configuration (flags of `polsched run`), not the policy author's, and the
loader checks a policy against them so that the webhook refuses, and the operator
reports Valid=False, with the field path.

Purely data-manipulative, no I/O: a hostname in a urlPrefix is checked as written at
load time (no DNS lookup); the extender client checks the addresses it resolves to
when it connects (DestinationPolicy.refuses_address), so a name that resolves to a
refused address later is still refused.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from polsched.api.tenancy import OPEN_TENANCY, Tenancy

# The destination policy lives below the API layer (the extender client enforces it);
# re-exported here with the rest of the admission rules.
from polsched.extender.destinations import (
    API_SERVER_NAMES,
    LINK_LOCAL,
    LOOPBACK,
    OPEN,
    DestinationPolicy,
    IPAddress,
    IPNetwork,
    parse_networks,
)

# kube-scheduler's default profile: a policy claiming it would race kube-scheduler for
# every pod that names no scheduler. Reserved unless the cluster admin replaces
# kube-scheduler with polsched (polsched run --allow-default-scheduler-name,
# docs/replacing-kube-scheduler.md).
DEFAULT_SCHEDULER = "default-scheduler"


@dataclass(frozen=True)
class AdmissionRules:
    """The operator's rules a policy is loaded against (api.loader.load_policy `rules`).
    The defaults are what any process knows without configuration: default-scheduler is
    reserved, and every extender destination is allowed, as is disabling any default
    plugin (the operator's rules come from its flags: admission_rules)."""

    reserved_scheduler_names: frozenset[str] = field(
        default_factory=lambda: frozenset({DEFAULT_SCHEDULER}))
    destinations: DestinationPolicy = OPEN
    # The admin's tenancy configuration (api.tenancy): protected plugins, Dedicated caps,
    # who may claim which name (the webhook checks that one against userInfo).
    tenancy: Tenancy = OPEN_TENANCY

    @staticmethod
    def make(reserved: Iterable[str] = (), destinations: DestinationPolicy = OPEN,
             tenancy: Tenancy = OPEN_TENANCY, *,
             allow_default_scheduler: bool = False) -> AdmissionRules:
        """`allow_default_scheduler`: the admin's opt-in to serve default-scheduler in
        place of kube-scheduler; otherwise that name is reserved with the others."""
        names = frozenset(reserved)
        if not allow_default_scheduler:
            names |= {DEFAULT_SCHEDULER}
        return AdmissionRules(names, destinations, tenancy)


DEFAULT_RULES = AdmissionRules()


__all__ = [
    "API_SERVER_NAMES", "DEFAULT_RULES", "DEFAULT_SCHEDULER", "LINK_LOCAL", "LOOPBACK", "OPEN",
    "AdmissionRules", "DestinationPolicy", "IPAddress", "IPNetwork", "parse_networks",
]
