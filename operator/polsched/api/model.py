"""The internal model of a SchedulingPolicy: defaulted, validated, immutable.

The wire model is what users write (polsched.io/v1alpha1, every field optional); the
loader (polsched.api.loader) turns it into these frozen dataclasses, or raises
PolicyError listing every problem with its field path. Nothing here performs I/O.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

# Below the API layer: the extender client reads it too (polsched.api re-exports it).
from polsched.extender.config import ExtenderConfig
from polsched.framework.interfaces import Handle, Plugin
from polsched.framework.messages import ELLIPSIS, MAX_CONDITION_MESSAGE_CHARS
from polsched.framework.selectors import Matcher

GROUP = "polsched.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "SchedulingPolicy"
PLURAL = "schedulingpolicies"


# One problem's text at most (a message may quote the value it refuses, and a value may
# be a 1 MB string), and a whole PolicyError's: it becomes the policy's conditions and
# the webhook's answer, and a metav1.Condition's message is at most 32768 characters.
MAX_FIELD_ERROR_CHARS = 4096
MAX_POLICY_ERROR_CHARS = MAX_CONDITION_MESSAGE_CHARS


@dataclass(frozen=True)
class FieldError:
    """One problem in a policy: `path` like spec.filters[2].args.requirements[0].operator."""

    path: str
    message: str

    def __str__(self) -> str:
        text = f"{self.path}: {self.message}"
        if len(text) > MAX_FIELD_ERROR_CHARS:  # cut, not sanitised: CEL's carets span lines
            return text[:MAX_FIELD_ERROR_CHARS] + ELLIPSIS
        return text


class PolicyError(ValueError):
    def __init__(self, errors: list[FieldError], name: str = "") -> None:
        self.errors = errors
        self.name = name
        shown = name[:300] + ELLIPSIS if isinstance(name, str) and len(name) > 300 else name
        what = f"SchedulingPolicy {shown!r}" if name else "SchedulingPolicy"
        text = f"{what} is invalid: "
        for i, e in enumerate(errors):
            part = ("; " if i else "") + str(e)
            if len(text) + len(part) > MAX_POLICY_ERROR_CHARS:
                text += f"; and {len(errors) - i} more"
                break
            text += part
        super().__init__(text)


FILTER = "filter"
SCORE = "score"
PRE_ENQUEUE = "preEnqueue"


@dataclass(frozen=True)
class PluginEntry:
    """One plugin entry of the policy, validated but not built: what to construct and how
    to run it (config.Plugin + config.PluginConfig upstream). The one builder,
    polsched.scheduler.pipelines.build_pipeline, constructs the plugin from it with the
    Handle of the scheduler that runs it; the loader has already built it once with an
    empty Handle to check its args, so building cannot fail on a loaded policy."""

    point: str                    # FILTER, SCORE or PRE_ENQUEUE
    name: str                     # the registry name ("NodeResourcesFit")
    args: Mapping[str, Any]       # as the user wrote them, or the plugin's default args
    # The registry's factory for this point: (args, handle) -> plugin.
    factory: Callable[[Mapping[str, Any], Handle], Plugin] = field(repr=False, compare=False)
    weight: int = 0               # scorers only
    when: Matcher | None = field(default=None, repr=False, compare=False)
    # Where the entry came from, for messages: "spec.filters[1]" or
    # "spec.defaultPlugins(NodeAffinity)".
    path: str = ""


@dataclass(frozen=True)
class PreemptionConfig:
    """spec.preemption: kube-scheduler's DefaultPreemptionArgs, defaulted."""

    min_candidate_nodes_percentage: int = 10
    min_candidate_nodes_absolute: int = 100


class RuntimeMode(enum.StrEnum):
    """spec.runtime.mode: where a policy's scheduler runs."""

    # Inside the operator process, beside the other Shared policies.
    SHARED = "Shared"
    # In a Deployment of its own (`polsched scheduler --policy NAME`).
    DEDICATED = "Dedicated"


@dataclass(frozen=True)
class RuntimeConfig:
    mode: RuntimeMode = RuntimeMode.SHARED
    replicas: int = 1
    resources: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Policy:
    name: str
    scheduler_name: str
    generation: int
    paused: bool
    percentage_of_nodes_to_score: int
    # Pods of namespaces whose labels do not match are not scheduled; None: every namespace.
    namespace_selector: Matcher | None
    runtime: RuntimeConfig
    filters: tuple[PluginEntry, ...]
    scorers: tuple[PluginEntry, ...]
    extenders: tuple[ExtenderConfig, ...]
    # Resources NodeResourcesFit ignores (managedResources with ignoredByScheduler).
    ignored_resources: frozenset[str] = frozenset()
    uid: str = ""
    # spec.shadowOf: the policy this one shadows (decides beside it, never binds); "".
    shadow_of: str = ""
    # spec.allowedShadows: the policies that may shadow this one (opt-in by its owner).
    allowed_shadows: frozenset[str] = frozenset()
    # PreEnqueue plugins (the default profile's SchedulingGates unless disabled).
    pre_enqueue: tuple[PluginEntry, ...] = ()
    # DefaultPreemption, the PostFilter: its args; None when disabled.
    preemption: PreemptionConfig | None = field(default_factory=lambda: PreemptionConfig())
