"""SchedulingPolicy wire model -> internal model: parse, default, validate, construct.

The same pipeline as kubernetes-sigs/scheduler-plugins and kube-scheduler's component
config: read what the user wrote (every field optional), apply defaults (the default
plugins, weights, timeouts), check every field and collect every problem with its path
(`spec.filters[2].args.requirements[0].operator`), then build the plugins. Building a
plugin validates its args (the factory raises ArgsError), so the loader builds each one
once with an empty Handle and keeps only its spec (api.model.PluginEntry): a policy that
loads cannot fail later, when scheduler.pipelines.build_pipeline builds it for real with
the scheduler's Handle. One call reports every problem at once: users fix a policy in one
round trip, and the operator's Valid condition names them all.

Used by the operator (hot reload), the validating webhook and `polsched validate`.
No I/O.
"""

from __future__ import annotations

import base64
import binascii
import re
import ssl
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from polsched.api.admission import DEFAULT_RULES, DEFAULT_SCHEDULER, AdmissionRules
from polsched.api.durations import DurationError, parse_go_duration
from polsched.api.model import (
    API_VERSION,
    FILTER,
    GROUP,
    KIND,
    PRE_ENQUEUE,
    SCORE,
    FieldError,
    PluginEntry,
    Policy,
    PolicyError,
    PreemptionConfig,
    RuntimeConfig,
    RuntimeMode,
)
from polsched.extender.config import (
    DEFAULT_EXTENDER_TIMEOUT_SECONDS,
    ExtenderConfig,
    ManagedResource,
)
from polsched.framework import names, resources
from polsched.framework.interfaces import Handle
from polsched.framework.registry import ArgsError, Catalog, PluginSpec, Registry
from polsched.framework.selectors import Matcher, SelectorError, compile_label_selector

SPEC_FIELDS = (
    "schedulerName", "paused", "shadowOf", "allowedShadows", "defaultPlugins",
    "disabledPlugins",
    "percentageOfNodesToScore", "namespaceSelector", "runtime", "filters", "scorers",
    "extenders", "preemption",
)
PREEMPTION_FIELDS = ("minCandidateNodesPercentage", "minCandidateNodesAbsolute")
# The PostFilter of the default profile: disabled like the other defaults.
DEFAULT_PREEMPTION = "DefaultPreemption"
FILTER_FIELDS = ("name", "args", "when")
SCORER_FIELDS = ("name", "weight", "args", "when")
WHEN_FIELDS = ("podSelector",)
RUNTIME_FIELDS = ("mode", "replicas", "resources")
# A Dedicated policy's Deployment runs in the operator's namespace with the policy
# author's replica count: bounded, as one Lease elects the only replica that binds and
# more than a few standbys buy nothing (kube-scheduler runs one per control-plane node).
# The CRD's schema says the same (spec.runtime.replicas maximum).
MAX_REPLICAS = 5
RUNTIME_MODES = tuple(m.value for m in RuntimeMode)
MAX_DEDICATED_NAME = 63  # a label value
RESOURCES_FIELDS = ("limits", "requests")
EXTENDER_FIELDS = (
    "urlPrefix", "filterVerb", "preemptVerb", "prioritizeVerb", "bindVerb", "weight",
    "enableHTTPS", "tlsConfig", "httpTimeout", "nodeCacheCapable", "managedResources",
    "ignorable",
)
TLS_FIELDS = ("insecure", "caData", "caSecretRef")
SECRET_REF_FIELDS = ("name", "namespace")
MANAGED_RESOURCE_FIELDS = ("name", "ignoredByScheduler")

# Plugins meant to appear several times in one list, each entry with its own args.
REPEATABLE = frozenset({"Expression", "NodeLabel"})

# Score plugin weights. kube-scheduler turns a weight of 0 into 1 (runtime/framework.go
# getScoreWeights: "a weight of zero is not permitted") and only bounds the sum against
# int64 overflow; we refuse 0 outright, since a user writing 0 means "off" and must use
# disabledPlugins for that, and cap at 100 so one scorer cannot drown the others
# by more than the whole score range (MaxNodeScore).
MIN_WEIGHT = 1
MAX_WEIGHT = 100
DEFAULT_WEIGHT = 1

# Upstream has no upper bound. Ours: a pod's cycle (and with a bindVerb, its bind) waits
# for the extender this long at most, and a policy decides one pod at a time while its
# extenders answer; a minute is already far past what a scheduling decision should take.
MAX_EXTENDER_TIMEOUT_SECONDS = 60.0
# A policy may name at most this many shadows allowed to receive its pods.
MAX_ALLOWED_SHADOWS = 16

DISABLE_ALL = "*"


@dataclass
class _Errors:
    items: list[FieldError] = field(default_factory=list)

    def add(self, path: str, message: str) -> None:
        self.items.append(FieldError(path, message))

    def unknown_fields(self, obj: Mapping[str, Any], path: str, known: Sequence[str]) -> None:
        # kubectl's strict field validation refuses unknown fields; a typo such as
        # "scorer:" would otherwise silently drop a user's scorers.
        for key in obj:
            if key not in known:
                self.add(f"{path}.{key}",
                         f"unknown field {key!r}: known fields are {', '.join(known)}")


def _kind(value: Any) -> str:
    """Wording for what the user wrote, in YAML terms."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, Mapping):
        return "an object"
    return type(value).__name__


def _is_int(value: Any) -> bool:
    # YAML true/false are bools, and bool is an int subclass in Python.
    return isinstance(value, int) and not isinstance(value, bool)


class _Loader:
    def __init__(self, registry: Registry, default_filters: Sequence[str],
                 default_scorers: Sequence[tuple[str, int]],
                 default_pre_enqueue: Sequence[str] = (),
                 rules: AdmissionRules = DEFAULT_RULES) -> None:
        self.registry = registry
        self.rules = rules
        self.default_filters = tuple(default_filters)
        self.default_scorers = tuple(default_scorers)
        self.default_pre_enqueue = tuple(default_pre_enqueue)
        self.errors = _Errors()

    # -- typed field readers ---------------------------------------------------------
    def _mapping(self, value: Any, path: str) -> Mapping[str, Any] | None:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            self.errors.add(path, f"must be an object, not {_kind(value)}")
            return None
        return value

    def _list(self, value: Any, path: str) -> list[Any]:
        if value is None:
            return []
        if not isinstance(value, list):
            self.errors.add(path, f"must be a list, not {_kind(value)}")
            return []
        return value

    def _bool(self, obj: Mapping[str, Any], key: str, path: str, default: bool) -> bool:
        value = obj.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            self.errors.add(f"{path}.{key}", f"must be true or false, not {_kind(value)}")
            return default
        return value

    def _str(self, obj: Mapping[str, Any], key: str, path: str, default: str = "") -> str:
        value = obj.get(key)
        if value is None:
            return default
        if not isinstance(value, str):
            self.errors.add(f"{path}.{key}", f"must be a string, not {_kind(value)}")
            return default
        return value

    def _int(self, obj: Mapping[str, Any], key: str, path: str, default: int,
             lo: int | None = None, hi: int | None = None, hint: str = "") -> int:
        value = obj.get(key)
        if value is None:
            return default
        if not _is_int(value):
            self.errors.add(f"{path}.{key}", f"must be an integer, not {_kind(value)}")
            return default
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            if lo is not None and hi is not None:
                bounds = f"between {lo} and {hi}"
            elif lo is not None:
                bounds = f"at least {lo}"
            else:
                bounds = f"at most {hi}"
            self.errors.add(f"{path}.{key}", f"must be {bounds}, not {value}{hint}")
            return default
        return int(value)

    def _selector(self, value: Any, path: str) -> Matcher | None:
        try:
            return compile_label_selector(value, path)
        except SelectorError as err:
            self.errors.add(err.path or path, err.message)
            return None

    # -- the object --------------------------------------------------------------------
    def load(self, obj: Mapping[str, Any]) -> Policy:
        errors = self.errors
        if not isinstance(obj, Mapping):
            raise PolicyError([FieldError("", f"must be an object, not {_kind(obj)}")])
        api_version = obj.get("apiVersion")
        if api_version is not None and api_version != API_VERSION:
            errors.add("apiVersion", f"unsupported apiVersion {api_version!r}: "
                                     f"this version of polsched reads {API_VERSION}")
        kind = obj.get("kind")
        if kind is not None and kind != KIND:
            errors.add("kind", f"must be {KIND}, not {kind!r}")
        meta = self._mapping(obj.get("metadata"), "metadata") or {}
        name = self._str(meta, "name", "metadata")
        if not name:
            errors.add("metadata.name", "required: every SchedulingPolicy needs a name")
        else:
            for msg in names.dns1123_subdomain(name):
                errors.add("metadata.name", msg)
        generation = meta.get("generation")
        if isinstance(generation, bool):
            generation = 0
        uid = meta.get("uid")

        spec = self._mapping(obj.get("spec"), "spec") or {}
        errors.unknown_fields(spec, "spec", SPEC_FIELDS)

        scheduler_name = self._str(spec, "schedulerName", "spec") or name
        if spec.get("schedulerName"):
            # A pod's spec.schedulerName must be a DNS subdomain (core validation
            # ValidatePodSpec), so any other name could never match a pod.
            for msg in names.dns1123_subdomain(scheduler_name):
                errors.add("spec.schedulerName", msg)
        paused = self._bool(spec, "paused", "spec", False)
        shadow_of = self._str(spec, "shadowOf", "spec")
        if shadow_of:
            for msg in names.dns1123_subdomain(shadow_of):
                errors.add("spec.shadowOf", msg + " (the name of a SchedulingPolicy)")
            if shadow_of == name:
                errors.add("spec.shadowOf", "a policy cannot shadow itself")
        elif scheduler_name in self.rules.reserved_scheduler_names:
            # A shadow claims no name, so only a live policy is refused.
            self._reserved_name(scheduler_name, bool(spec.get("schedulerName")))
        allowed_shadows = self._allowed_shadows(spec.get("allowedShadows"), name)
        pct = self._int(spec, "percentageOfNodesToScore", "spec", 0, 0, 100,
                        hint="; 0 or absent means adaptive, as kube-scheduler")
        ns_selector = None
        if spec.get("namespaceSelector") is not None:
            ns_selector = self._selector(spec["namespaceSelector"], "spec.namespaceSelector")
        runtime = self._runtime(spec.get("runtime"))
        extenders = self._extenders(spec.get("extenders"))
        ignored = frozenset(r.name for e in extenders for r in e.managed_resources
                            if r.ignored_by_scheduler)
        handle = Handle(ignored_resources=ignored)

        use_defaults = self._bool(spec, "defaultPlugins", "spec", True)
        disabled = self._disabled(spec.get("disabledPlugins"))
        if DISABLE_ALL in disabled or not use_defaults:
            default_filters: tuple[str, ...] = ()
            default_scorers: tuple[tuple[str, int], ...] = ()
            pre_enqueue_names: tuple[str, ...] = ()
        else:
            pre_enqueue_names = tuple(n for n in self.default_pre_enqueue
                                      if n not in disabled)
            default_filters = tuple(n for n in self.default_filters if n not in disabled)
            default_scorers = tuple((n, w) for n, w in self.default_scorers
                                    if n not in disabled)

        # defaultPlugins is about the default filters and scorers: preemption stays on
        # unless disabledPlugins names it (or "*").
        preemption = None if (DISABLE_ALL in disabled or DEFAULT_PREEMPTION in disabled) \
            else PreemptionConfig()
        if spec.get("preemption") is not None:
            configured = self._preemption(spec["preemption"])
            if preemption is not None:
                preemption = configured
        filters = self._filters(spec.get("filters"), default_filters, handle)
        scorers = self._scorers(spec.get("scorers"), default_scorers, handle)
        pre_enqueue = [e for n in pre_enqueue_names
                       if (e := self._default_entry(n, PRE_ENQUEUE, 0, handle)) is not None]

        if not shadow_of:
            self._protected(filters, bool(spec.get("disabledPlugins")))
        self._dedicated_caps(runtime, name)
        if errors.items:
            raise PolicyError(errors.items, name)
        return Policy(
            name=name,
            scheduler_name=scheduler_name,
            generation=generation if isinstance(generation, int) else 0,
            paused=paused,
            shadow_of=shadow_of,
            allowed_shadows=allowed_shadows,
            percentage_of_nodes_to_score=pct,
            namespace_selector=ns_selector,
            runtime=runtime,
            filters=tuple(filters),
            scorers=tuple(scorers),
            extenders=tuple(extenders),
            pre_enqueue=tuple(pre_enqueue),
            preemption=preemption,
            ignored_resources=ignored,
            uid=uid if isinstance(uid, str) else "",
        )

    def _protected(self, filters: Sequence[PluginEntry | None], disabled: bool) -> None:
        """The default filters that fence nodes (tenancy.PROTECTED_PLUGINS) stay in the
        pipeline, unconditionally, unless the admin allows switching them off: checked on
        the pipeline built, so disabledPlugins, "*", defaultPlugins: false and a `when`
        all count as switching off."""
        kept = {e.name for e in filters if e is not None and e.when is None}
        missing = [n for n in self.rules.tenancy.protected_plugins
                   if n in self.default_filters and n not in kept]
        if missing:
            path = "spec.disabledPlugins" if disabled else "spec.filters"
            self.errors.add(path, f"{', '.join(missing)} must stay in the pipeline, without "
                                  f"`when`: they keep pods off cordoned, tainted and "
                                  f"affinity-fenced nodes; only the cluster admin may allow "
                                  f"switching them off (tenancy allowDisabling)")

    def _dedicated_caps(self, runtime: RuntimeConfig, name: str) -> None:
        """What the API server would refuse in a Dedicated scheduler's objects, and the
        admin's caps on it (tenancy.dedicated): refused here, so that the operator never
        applies (and retries) an object that cannot be made."""
        if runtime.mode is not RuntimeMode.DEDICATED:
            return
        if len(name) > MAX_DEDICATED_NAME:
            # The Deployment's pods carry the policy's name as a label value (at most 63).
            self.errors.add("metadata.name", f"a Dedicated policy's name is at most "
                                             f"{MAX_DEDICATED_NAME} characters (it labels "
                                             f"its scheduler's pods); this one has {len(name)}")
        caps = self.rules.tenancy.dedicated
        if caps.max_policies == 0:
            self.errors.add("spec.runtime.mode", "Dedicated policies are not allowed by the "
                                                 "tenancy configuration (maxPolicies: 0)")
        if caps.max_replicas is not None and runtime.replicas > caps.max_replicas:
            self.errors.add("spec.runtime.replicas",
                            f"at most {caps.max_replicas} (tenancy dedicated.maxReplicas)")
        for part in RESOURCES_FIELDS:
            quantities = runtime.resources.get(part)
            if not isinstance(quantities, Mapping):
                continue
            for rname, qty in quantities.items():
                try:
                    value = resources.parse_quantity(qty)
                except (resources.QuantityError, ValueError, TypeError):
                    continue  # reported by _runtime
                path = f"spec.runtime.resources.{part}.{rname}"
                cap = caps.max_resources.get(str(rname))
                if cap is not None and value > cap:
                    self.errors.add(path, f"{qty} is over the cluster admin's cap {cap} "
                                          f"(tenancy dedicated.maxResources.{rname})")

    def _reserved_name(self, scheduler_name: str, explicit: bool) -> None:
        path = "spec.schedulerName" if explicit else "metadata.name"
        whose = ("kube-scheduler's default profile: a policy claiming it would race "
                 "kube-scheduler for every pod that names no scheduler"
                 if scheduler_name == DEFAULT_SCHEDULER else
                 "reserved by the cluster admin for another scheduler (polsched run "
                 "--reserved-scheduler-names)")
        hint = ("set spec.schedulerName to a name of your own" if not explicit
                else "choose another name")
        if scheduler_name == DEFAULT_SCHEDULER:
            hint += (" (to run polsched instead of kube-scheduler, the cluster admin starts "
                     "it with --allow-default-scheduler-name: "
                     "docs/replacing-kube-scheduler.md)")
        self.errors.add(path, f"schedulerName {scheduler_name!r} is {whose}; {hint}")

    def _allowed_shadows(self, value: Any, name: str) -> frozenset[str]:
        """spec.allowedShadows: the SchedulingPolicies that may shadow this one (receive a
        copy of its pods' decisions). Whoever may edit this policy decides."""
        path = "spec.allowedShadows"
        items = self._list(value, path)
        if len(items) > MAX_ALLOWED_SHADOWS:
            self.errors.add(path, f"at most {MAX_ALLOWED_SHADOWS} names, not {len(items)}")
            return frozenset()
        out: set[str] = set()
        for i, raw in enumerate(items):
            ipath = f"{path}[{i}]"
            if not isinstance(raw, str) or not raw:
                self.errors.add(ipath, f"must be the name of a SchedulingPolicy, not "
                                       f"{_kind(raw)}")
                continue
            for msg in names.dns1123_subdomain(raw):
                self.errors.add(ipath, msg + " (the name of a SchedulingPolicy)")
            if raw == name:
                self.errors.add(ipath, "a policy cannot shadow itself")
            out.add(raw)
        return frozenset(out)

    # -- runtime -----------------------------------------------------------------------
    def _runtime(self, value: Any) -> RuntimeConfig:
        path = "spec.runtime"
        obj = self._mapping(value, path)
        if obj is None:
            return RuntimeConfig()
        self.errors.unknown_fields(obj, path, RUNTIME_FIELDS)
        raw_mode = self._str(obj, "mode", path, RuntimeMode.SHARED.value)
        if raw_mode not in RUNTIME_MODES:
            self.errors.add(f"{path}.mode", f"unsupported mode {raw_mode!r}: must be one of "
                                            f"{', '.join(RUNTIME_MODES)}")
            raw_mode = RuntimeMode.SHARED.value
        mode = RuntimeMode(raw_mode)
        replicas = self._int(obj, "replicas", path, 1, lo=1, hi=MAX_REPLICAS,
                             hint=" (one replica binds; the others are standbys)")
        if replicas > 1 and mode is not RuntimeMode.DEDICATED:
            self.errors.add(f"{path}.replicas",
                            "more than one replica needs mode: Dedicated (a Shared policy "
                            "runs inside the operator process)")
        res = self._mapping(obj.get("resources"), f"{path}.resources") or {}
        if res and mode is not RuntimeMode.DEDICATED:
            self.errors.add(f"{path}.resources",
                            "container resources apply only to mode: Dedicated (a Shared "
                            "policy runs inside the operator process)")
        self.errors.unknown_fields(res, f"{path}.resources", RESOURCES_FIELDS)
        for part in RESOURCES_FIELDS:
            rpath = f"{path}.resources.{part}"
            quantities = self._mapping(res.get(part), rpath) or {}
            for rname, qty in quantities.items():
                try:
                    value = resources.parse_quantity(qty)
                except (resources.QuantityError, ValueError, TypeError):
                    self.errors.add(f"{rpath}.{rname}",
                                    f"{qty!r} is not a quantity (e.g. 500m, 128Mi, 2)")
                    continue
                if value < 0:  # the API server refuses the Deployment
                    self.errors.add(f"{rpath}.{rname}", f"{qty!r} must not be negative")
        return RuntimeConfig(mode=mode, replicas=replicas, resources=dict(res))

    # -- extenders ---------------------------------------------------------------------
    def _extenders(self, value: Any) -> list[ExtenderConfig]:
        """kube-scheduler's Extender fields and validateExtenders rules
        (pkg/scheduler/apis/config/validation/validation.go)."""
        path = "spec.extenders"
        out: list[ExtenderConfig] = []
        binders: list[str] = []
        seen_resources: dict[str, str] = {}
        for i, raw in enumerate(self._list(value, path)):
            epath = f"{path}[{i}]"
            if raw is None:
                self.errors.add(epath, "must be an object with at least urlPrefix")
                continue
            obj = self._mapping(raw, epath)
            if obj is None:
                continue
            self.errors.unknown_fields(obj, epath, EXTENDER_FIELDS)
            url = self._str(obj, "urlPrefix", epath)
            if not url:
                self.errors.add(f"{epath}.urlPrefix",
                                "required: the extender's base URL, e.g. http://extender:8888/")
            else:
                parsed = urllib.parse.urlsplit(url)
                if parsed.scheme not in ("http", "https") or not parsed.netloc:
                    self.errors.add(f"{epath}.urlPrefix",
                                    f"{url!r} is not an http:// or https:// URL")
                else:
                    self._destination(parsed, f"{epath}.urlPrefix")
            verbs = {k: self._str(obj, k, epath)
                     for k in ("filterVerb", "prioritizeVerb", "bindVerb", "preemptVerb")}
            raw_weight = obj.get("weight")
            weight = self._int(obj, "weight", epath, 0)
            if verbs["prioritizeVerb"] and weight <= 0 and (
                    raw_weight is None or _is_int(raw_weight)):
                # Upstream wording; it has no default weight, so an absent one is 0 too.
                self.errors.add(f"{epath}.weight",
                                "must have a positive weight applied to it (prioritizeVerb "
                                "is set): set weight to 1 or more")
            if verbs["bindVerb"]:
                binders.append(epath)
            timeout = DEFAULT_EXTENDER_TIMEOUT_SECONDS
            raw_timeout = obj.get("httpTimeout")
            if raw_timeout is not None:
                if not isinstance(raw_timeout, str):
                    self.errors.add(f"{epath}.httpTimeout",
                                    f"must be a duration string such as 5s, 500ms or 1m30s, "
                                    f"not {_kind(raw_timeout)}")
                else:
                    try:
                        seconds = parse_go_duration(raw_timeout)
                    except DurationError as err:
                        self.errors.add(f"{epath}.httpTimeout",
                                        f"{err}: use a duration such as 5s, 500ms or 1m30s")
                    else:
                        if seconds < 0:
                            self.errors.add(f"{epath}.httpTimeout", "must not be negative")
                        elif seconds > MAX_EXTENDER_TIMEOUT_SECONDS:
                            self.errors.add(
                                f"{epath}.httpTimeout",
                                f"{raw_timeout} is longer than the maximum of "
                                f"{MAX_EXTENDER_TIMEOUT_SECONDS:g}s: a pod waits for the "
                                "extender that long (0 or absent means 5s)")
                        elif seconds > 0:
                            timeout = seconds
            managed = self._managed_resources(obj.get("managedResources"),
                                              f"{epath}.managedResources", seen_resources)
            tls_insecure, ca_data, ca_ref = self._tls(obj.get("tlsConfig"), f"{epath}.tlsConfig")
            out.append(ExtenderConfig(
                url_prefix=url,
                filter_verb=verbs["filterVerb"],
                prioritize_verb=verbs["prioritizeVerb"],
                bind_verb=verbs["bindVerb"],
                preempt_verb=verbs["preemptVerb"],
                weight=weight if raw_weight is not None else 1,
                enable_https=self._bool(obj, "enableHTTPS", epath, False),
                node_cache_capable=self._bool(obj, "nodeCacheCapable", epath, False),
                ignorable=self._bool(obj, "ignorable", epath, False),
                http_timeout_seconds=timeout,
                managed_resources=managed,
                tls_insecure=tls_insecure,
                ca_secret_ref=ca_ref,
                ca_data=ca_data,
            ))
        if len(binders) > 1:
            self.errors.add(path, f"only one extender can implement bind: found "
                                  f"{len(binders)} with bindVerb ({', '.join(binders)})")
        return out

    def _managed_resources(self, value: Any, path: str,
                           seen: dict[str, str]) -> tuple[ManagedResource, ...]:
        out: list[ManagedResource] = []
        for j, raw in enumerate(self._list(value, path)):
            mpath = f"{path}[{j}]"
            obj = self._mapping(raw, mpath)
            if obj is None:
                continue
            self.errors.unknown_fields(obj, mpath, MANAGED_RESOURCE_FIELDS)
            rname = self._str(obj, "name", mpath)
            npath = f"{mpath}.name"
            if not rname:
                self.errors.add(npath, "required: an extended resource name, e.g. example.com/foo")
                continue
            problems = names.qualified_name(rname)
            for msg in problems:
                self.errors.add(npath, msg)
            if not problems and not names.is_extended_resource_name(rname):
                self.errors.add(npath, f"{rname!r} is an invalid extended resource name: it "
                                       "needs a domain outside kubernetes.io, e.g. example.com/foo")
            if rname in seen:
                self.errors.add(npath, f"duplicate extender managed resource name {rname!r} "
                                       f"(also at {seen[rname]})")
            else:
                seen[rname] = npath
            out.append(ManagedResource(
                rname, self._bool(obj, "ignoredByScheduler", mpath, False)))
        return tuple(out)

    def _tls(self, value: Any, path: str) -> tuple[bool, str, tuple[str, str] | None]:
        obj = self._mapping(value, path)
        if not obj:
            return False, "", None
        self.errors.unknown_fields(obj, path, TLS_FIELDS)
        insecure = self._bool(obj, "insecure", path, False)
        ca_data = ""
        raw_ca = self._str(obj, "caData", path)
        if raw_ca:
            # As KubeSchedulerConfiguration's ExtenderTLSConfig.CAData ([]byte): base64 of
            # the PEM bundle.
            try:
                ca_data = base64.b64decode(raw_ca, validate=True).decode("utf-8")
            except (binascii.Error, UnicodeDecodeError):
                self.errors.add(f"{path}.caData", "must be base64-encoded PEM CA certificates")
            else:
                problem = ca_bundle_problem(ca_data)
                if problem:
                    self.errors.add(f"{path}.caData", f"must be base64-encoded PEM CA "
                                                      f"certificates: {problem}")
                    ca_data = ""
        ref: tuple[str, str] | None = None
        rpath = f"{path}.caSecretRef"
        ref_obj = self._mapping(obj.get("caSecretRef"), rpath)
        if ref_obj:
            self.errors.unknown_fields(ref_obj, rpath, SECRET_REF_FIELDS)
            sname = self._str(ref_obj, "name", rpath)
            sns = self._str(ref_obj, "namespace", rpath)
            if not sname:
                self.errors.add(f"{rpath}.name", "required: the Secret holding ca.crt")
            else:
                for msg in names.dns1123_subdomain(sname):
                    self.errors.add(f"{rpath}.name", msg)
            if not sns:
                self.errors.add(f"{rpath}.namespace",
                                "required: the policy is cluster-scoped, so name the "
                                "Secret's namespace")
            else:
                for msg in names.dns1123_label(sns):
                    self.errors.add(f"{rpath}.namespace", msg)
            if sname and sns:
                ref = (sns, sname)
        return insecure, ca_data, ref

    def _destination(self, url: urllib.parse.SplitResult, path: str) -> None:
        """The operator's extender destination policy, on the host as written (the
        client checks the addresses a name resolves to when it connects)."""
        try:
            port = url.port or (443 if url.scheme == "https" else 80)
        except ValueError as err:
            self.errors.add(path, f"{url.netloc!r}: {err}")
            return
        why = self.rules.destinations.refuses_address(url.hostname or "", port)
        if why:
            self.errors.add(path, f"{why}: extenders may not be called there (the "
                                  "operator's extender destination policy, polsched run "
                                  "--extender-deny and --extender-allow)")

    # -- plugins -----------------------------------------------------------------------
    def _preemption(self, value: Any) -> PreemptionConfig:
        """spec.preemption: DefaultPreemptionArgs, validated as
        ValidateDefaultPreemptionArgs."""
        path = "spec.preemption"
        obj = self._mapping(value, path)
        if obj is None:
            return PreemptionConfig()
        for key in obj:
            if key not in PREEMPTION_FIELDS:
                self.errors.add(f"{path}.{key}", f"unknown field; known: "
                                f"{', '.join(PREEMPTION_FIELDS)}")
        pct = self._int(obj, "minCandidateNodesPercentage", path, 10, 0, 100)
        absolute = self._int(obj, "minCandidateNodesAbsolute", path, 100, 0)
        if pct == 0 and absolute == 0:
            self.errors.add(f"{path}.minCandidateNodesPercentage",
                            "cannot be zero at the same time as minCandidateNodesAbsolute")
        return PreemptionConfig(pct, absolute)

    def _disabled(self, value: Any) -> frozenset[str]:
        path = "spec.disabledPlugins"
        defaults = list(dict.fromkeys(
            [*self.default_pre_enqueue, *self.default_filters,
             *(n for n, _ in self.default_scorers), DEFAULT_PREEMPTION]))
        out: set[str] = set()
        for i, raw in enumerate(self._list(value, path)):
            if not isinstance(raw, str):
                self.errors.add(f"{path}[{i}]", f"must be a plugin name, not {_kind(raw)}")
            elif raw != DISABLE_ALL and raw not in defaults:
                what = ("is not a default plugin" if raw in self.registry
                        else "is not a known plugin")
                self.errors.add(f"{path}[{i}]",
                                f"{raw!r} {what}: only default plugins can be disabled "
                                f"({', '.join(defaults)}, or \"*\" for all of them)")
            else:
                out.add(raw)
        return frozenset(out)

    def _plugin_spec(self, name: Any, path: str, point: str) -> PluginSpec | None:
        """The registry entry for `name` if it has extension point `point`."""
        npath = f"{path}.name"
        if name is None or name == "":
            self.errors.add(npath, "required: the plugin's name")
            return None
        if not isinstance(name, str):
            self.errors.add(npath, f"must be a plugin name, not {_kind(name)}")
            return None
        spec = self.registry.get(name)
        known = self.registry.names(point)
        list_name = "filters" if point == "filter" else "scorers"
        if spec is None:
            self.errors.add(npath, f"unknown plugin {name!r} at {npath}: known {list_name} "
                                   f"are {', '.join(known)}")
            return None
        if spec.post_filter is not None and not (spec.filter or spec.score):
            self.errors.add(npath, f"plugin {name} is the PostFilter: configure it with "
                                   "spec.preemption (or disable it in spec.disabledPlugins)")
            return None
        if point not in spec.points:
            other = "scorers" if point == "filter" else "filters"
            self.errors.add(npath, f"plugin {name} has no {point} extension point; use it "
                                   f"under spec.{other}")
            return None
        return spec

    def _when(self, value: Any, path: str) -> tuple[Matcher | None, bool]:
        """The entry's when.podSelector; the flag says whether it was valid."""
        if value is None:
            return None, True
        obj = self._mapping(value, path)
        if obj is None:
            return None, False
        before = len(self.errors.items)
        self.errors.unknown_fields(obj, path, WHEN_FIELDS)
        sel = obj.get("podSelector")
        matcher = None
        if sel is not None:
            matcher = self._selector(sel, f"{path}.podSelector")
        return matcher, len(self.errors.items) == before

    def _args(self, entry: Mapping[str, Any], spec: PluginSpec,
              path: str) -> Mapping[str, Any] | None:
        raw = entry.get("args")
        if raw is None:
            return spec.default_args or {}
        if not isinstance(raw, Mapping):
            self.errors.add(f"{path}.args", f"must be an object, not {_kind(raw)}")
            return None
        return raw

    def _validate(self, factory: Any, args: Mapping[str, Any], handle: Handle,
                  path: str) -> bool:
        """Build the plugin once with an empty Handle and discard it: a factory checks its
        args, so a policy that loads cannot fail when the builder constructs it for real."""
        try:
            factory(args, handle)
        except (ArgsError, SelectorError) as err:
            self.errors.add(f"{path}.args.{err.path}" if err.path else f"{path}.args",
                            err.message)
        except Exception as err:  # noqa: BLE001 - a plugin bug must not crash the loader
            self.errors.add(f"{path}.args", f"invalid args ({type(err).__name__}: {err})")
        else:
            return True
        return False

    def _entries(self, value: Any, path: str, point: str,
                 fields: Sequence[str]) -> list[tuple[str, str, Mapping[str, Any], PluginSpec]]:
        """The valid-looking (name, path, entry, spec) of a list, duplicates refused."""
        out: list[tuple[str, str, Mapping[str, Any], PluginSpec]] = []
        seen: dict[str, str] = {}
        for i, raw in enumerate(self._list(value, path)):
            epath = f"{path}[{i}]"
            if raw is None or not isinstance(raw, Mapping):
                self.errors.add(epath, f"must be an object with a name, not {_kind(raw)}")
                continue
            for key in raw:
                if key not in fields:
                    hint = ("; filters have no weight, only scorers do"
                            if key == "weight" and point == "filter" else "")
                    self.errors.add(f"{epath}.{key}", f"unknown field {key!r}: known fields "
                                                      f"are {', '.join(fields)}{hint}")
            spec = self._plugin_spec(raw.get("name"), epath, point)
            if spec is None:
                continue
            name = spec.name
            if name in seen and name not in REPEATABLE:
                self.errors.add(f"{epath}.name",
                                f"duplicate plugin {name!r} (also at {seen[name]}): list it "
                                f"once; only {' and '.join(sorted(REPEATABLE))} may repeat "
                                "with different args")
                continue
            seen.setdefault(name, epath)
            out.append((name, epath, raw, spec))
        return out

    def _filters(self, value: Any, defaults: Sequence[str],
                 handle: Handle) -> list[PluginEntry]:
        entries = self._entries(value, "spec.filters", "filter", FILTER_FIELDS)
        built: list[PluginEntry | None] = []
        for name, epath, raw, spec in entries:
            when, when_ok = self._when(raw.get("when"), f"{epath}.when")
            args = self._args(raw, spec, epath)
            ok = args is not None and self._validate(spec.filter, args, handle, epath)
            if ok and when_ok and args is not None and spec.filter is not None:
                built.append(PluginEntry(FILTER, name, args, spec.filter, when=when,
                                         path=epath))
            else:
                built.append(None)
        return _merge([name for name, *_rest in entries], built, list(defaults),
                      lambda name: self._default_entry(name, FILTER, 0, handle))

    def _scorers(self, value: Any, defaults: Sequence[tuple[str, int]],
                 handle: Handle) -> list[PluginEntry]:
        entries = self._entries(value, "spec.scorers", "score", SCORER_FIELDS)
        built: list[PluginEntry | None] = []
        for name, epath, raw, spec in entries:
            before = len(self.errors.items)
            weight = self._int(raw, "weight", epath, DEFAULT_WEIGHT, MIN_WEIGHT, MAX_WEIGHT,
                               hint="; to switch a default scorer off use "
                                    "spec.disabledPlugins")
            weight_ok = len(self.errors.items) == before
            when, when_ok = self._when(raw.get("when"), f"{epath}.when")
            args = self._args(raw, spec, epath)
            ok = args is not None and self._validate(spec.score, args, handle, epath)
            if ok and when_ok and weight_ok and args is not None and spec.score is not None:
                built.append(PluginEntry(SCORE, name, args, spec.score, weight=weight,
                                         when=when, path=epath))
            else:
                built.append(None)
        # A re-listed default scorer runs with the user's weight (absent means 1, not the
        # default's weight), as kube-scheduler's mergePluginSet.
        weights = dict(defaults)
        return _merge([name for name, *_rest in entries], built, [n for n, _ in defaults],
                      lambda name: self._default_entry(name, SCORE, weights[name], handle))

    def _default_entry(self, name: str, point: str, weight: int,
                       handle: Handle) -> PluginEntry | None:
        spec = self.registry.get(name)
        factory = None if spec is None else {FILTER: spec.filter, SCORE: spec.score,
                                             PRE_ENQUEUE: spec.pre_enqueue}[point]
        what = {FILTER: "filter", SCORE: "scorer", PRE_ENQUEUE: "PreEnqueue plugin"}[point]
        if spec is None or factory is None:
            self.errors.add("spec.defaultPlugins", f"default {what} {name} is not registered "
                                                   "(a polsched bug; disable it meanwhile)")
            return None
        path = f"spec.defaultPlugins({name})"
        args = spec.default_args or {}
        if not self._validate(factory, args, handle, path):
            return None
        return PluginEntry(point, name, args, factory, weight=weight, path=path)


def load_policy(obj: Mapping[str, Any], catalog: Catalog, *,
                rules: AdmissionRules = DEFAULT_RULES) -> Policy:
    """Build the internal Policy from a whole SchedulingPolicy object (a plain dict, as the
    API server or a YAML file gives it). Raises PolicyError listing every problem.

    `catalog` holds the registry the plugin entries' args are validated with and the
    default profile; the in-tree one is polsched.plugins.CATALOG, passed in by the caller
    (this layer never imports the plugins: framework.registry.Catalog).
    `rules`: the operator's reserved scheduler names and extender destination policy
    (api.admission); by default only default-scheduler is reserved.
    """
    return _Loader(catalog.registry, catalog.filters, catalog.scorers,
                   catalog.pre_enqueue, rules).load(obj)


# A bundle larger than this is not a CA bundle (the system roots are ~200 KiB).
MAX_CA_BUNDLE_BYTES = 1 << 20


def ca_bundle_problem(pem: str) -> str:
    """What is wrong with `pem` as CA certificates for an extender, or "" when OpenSSL
    loads at least one X.509 certificate from it (the same parse the client's TLS
    context does, so a bundle that passes here cannot fail there). No I/O: a bare
    context, without the system's roots."""
    if len(pem) > MAX_CA_BUNDLE_BYTES:
        return f"{len(pem)} bytes, more than the {MAX_CA_BUNDLE_BYTES} a CA bundle may have"
    if "-----BEGIN CERTIFICATE-----" not in pem:
        return "no PEM certificate (-----BEGIN CERTIFICATE-----) in it"
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        ctx.load_verify_locations(cadata=pem)
    except (ssl.SSLError, ValueError) as err:
        why = re.sub(r"\s*\(_ssl\.c:\d+\)", "", str(err))
        return f"not valid PEM X.509 certificates ({why})"
    if not ctx.get_ca_certs() and not ctx.cert_store_stats().get("x509"):
        return "no X.509 certificate could be read from it"
    return ""


def is_policy_object(obj: Any) -> bool:
    """Whether a decoded YAML document claims to be a SchedulingPolicy (any version of our
    group), so that other documents in the same file can be skipped."""
    if not isinstance(obj, Mapping) or obj.get("kind") != KIND:
        return False
    api_version = obj.get("apiVersion")
    return isinstance(api_version, str) and api_version.split("/")[0] == GROUP


def _merge(user_names: list[str], built: list[PluginEntry | None], defaults: list[str],
           make_default: Callable[[str], PluginEntry | None]) -> list[PluginEntry]:
    """kube-scheduler's mergePluginSet: the defaults in their order, a default the user
    listed again replaced in place by the user's entry, then the user's other entries in
    the order written. `built[i]` is None where entry i had errors (already reported)."""
    user = {name: i for i, name in enumerate(user_names)}
    out: list[PluginEntry] = []
    replaced: set[int] = set()
    for name in defaults:
        if name in user:
            replaced.add(user[name])
            entry = built[user[name]]
        else:
            entry = make_default(name)
        if entry is not None:
            out.append(entry)
    out.extend(e for i, e in enumerate(built) if i not in replaced and e is not None)
    return out
