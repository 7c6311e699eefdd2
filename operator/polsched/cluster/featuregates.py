"""The Kubernetes feature gates of the local control plane, for the tools that start their
own kube-scheduler next to hack/cluster.sh (the conformance oracle, the bench).

`make cluster FEATURE_GATES=GenericWorkload=true` exports POLSCHED_FEATURE_GATES;
hack/cluster.sh hands it to kube-apiserver and kube-controller-manager, and these helpers
hand the same list to kube-scheduler, so that the oracle runs with the gates the API
server has (with GenericWorkload on, kube-scheduler's default profile gains GangScheduling
and PodGroupPodsCount: k8s.io/kubernetes@v1.37.1
pkg/scheduler/apis/config/v1/default_plugins.go getDefaultPlugins). Unset, nothing is
added and every command line stays upstream's default."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from polsched.framework import podgroups, signers

ENV = "POLSCHED_FEATURE_GATES"
# A bounded, plain list: component-base's --feature-gates syntax (Name=bool, comma-separated).
_ITEM = re.compile(r"[A-Za-z][A-Za-z0-9]{0,99}=(true|false)")
MAX_LEN = 4096


def parse(value: str, source: str = ENV) -> dict[str, bool]:
    """`A=true,B=false` as {"A": True, "B": False}; the last setting of a gate wins, as in
    component-base's flag parsing. Raises ValueError naming `source` (the variable or flag)
    and the bad item."""
    if len(value) > MAX_LEN:
        raise ValueError(f"{source}: longer than {MAX_LEN} characters")
    gates: dict[str, bool] = {}
    if not value.strip():
        return gates
    for item in value.split(","):
        if not _ITEM.fullmatch(item):
            raise ValueError(f"{source}: {item!r} is not Name=true|false (in {value!r})")
        name, _, flag = item.partition("=")
        gates[name] = flag == "true"
    return gates


def from_env(env: Mapping[str, str] | None = None) -> str:
    """The validated gate list from the environment, "" when unset."""
    value = (os.environ if env is None else env).get(ENV, "")
    parse(value)
    return value.strip()


def kube_scheduler_args(env: Mapping[str, str] | None = None) -> list[str]:
    """`--feature-gates LIST` for kube-scheduler, or nothing when no gates are set."""
    value = from_env(env)
    return ["--feature-gates", value] if value else []


def enabled(name: str, env: Mapping[str, str] | None = None) -> bool:
    """Whether the environment's gate list turns `name` on (when not listed: on for the
    gates of DEFAULT_ON, off for the others)."""
    return parse(from_env(env)).get(name, name in DEFAULT_ON)


# The gates polsched itself reads (framework.interfaces.Handle.features); every other
# listed gate only reaches the control plane and kube-scheduler.
TOPOLOGY_AWARE_WORKLOAD_SCHEDULING = podgroups.TOPOLOGY_AWARE_WORKLOAD_SCHEDULING
OPPORTUNISTIC_BATCHING = signers.OPPORTUNISTIC_BATCHING
# The gates polsched reads that v1.37 turns on by default: on unless the list says =false.
DEFAULT_ON = frozenset({OPPORTUNISTIC_BATCHING})


def scheduler_features(env: Mapping[str, str] | None = None) -> frozenset[str]:
    """The gates of the environment's list that are on, for the Handle polsched's plugins
    are built with (the engine, explain and simulate read the same variable)."""
    gates = parse(from_env(env))
    return frozenset(name for name, on in gates.items() if on) | frozenset(
        name for name in DEFAULT_ON if gates.get(name, True))
