"""polsched.api.loader: defaults merged as kube-scheduler's mergePluginSet, every problem
reported at once with its field path.

Most tests use a small fake registry so that they check the loader's own rules (merging,
paths, weights) independently of what each real plugin accepts; the last ones load
policies against the real registry."""

from __future__ import annotations

import base64
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from polsched import plugins
from polsched.api import FieldError, Policy, PolicyError, load_policy
from polsched.api.admission import AdmissionRules, DestinationPolicy
from polsched.api.model import MAX_FIELD_ERROR_CHARS, MAX_POLICY_ERROR_CHARS
from polsched.framework.cycle_state import CycleState
from polsched.framework.interfaces import FilterPlugin, Handle, ScorePlugin
from polsched.framework.listers import Listers
from polsched.framework.registry import ArgsError, Catalog, PluginSpec, Registry
from polsched.framework.selectors import compile_requirements
from polsched.framework.status import SUCCESS, Status
from polsched.framework.types import NodeInfo, PodInfo
from polsched.plugins import CATALOG
from polsched.scheduler.pipelines import build_pipeline

pytestmark = pytest.mark.unit


class FakeFilter(FilterPlugin):
    def __init__(self, name: str, args: Mapping[str, Any], handle: Handle) -> None:
        self.NAME = name  # type: ignore[misc]
        self.args = args
        self.handle = handle

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        return SUCCESS


class FakeScorer(ScorePlugin):
    def __init__(self, name: str, args: Mapping[str, Any], handle: Handle) -> None:
        self.NAME = name  # type: ignore[misc]
        self.args = args
        self.handle = handle

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        return 0


def _check_args(args: Mapping[str, Any]) -> None:
    # Like a real plugin: reject a marker and compile requirements (SelectorError paths).
    if args.get("bad"):
        raise ArgsError("bad", "must not be set")
    compile_requirements(args.get("requirements"), "requirements")


def spec(name: str, filter: bool = False, score: bool = False,
         default_args: Mapping[str, Any] | None = None) -> PluginSpec:
    def new_filter(args: Mapping[str, Any], handle: Handle) -> FilterPlugin:
        _check_args(args)
        return FakeFilter(name, args, handle)

    def new_score(args: Mapping[str, Any], handle: Handle) -> ScorePlugin:
        _check_args(args)
        return FakeScorer(name, args, handle)

    return PluginSpec(name, filter=new_filter if filter else None,
                      score=new_score if score else None, default_args=default_args)


REGISTRY = Registry([
    spec("Gate", filter=True, default_args={"level": "default"}),
    spec("Fit", filter=True, score=True, default_args={"strategy": "LeastAllocated"}),
    spec("Spread", score=True),
    spec("Extra", filter=True, score=True),
    spec("Rank", score=True),
    spec("NodeLabel", filter=True, score=True),
    spec("Expression", filter=True, score=True),
])
DEFAULT_FILTERS = ("Gate", "Fit")
DEFAULT_SCORERS = (("Fit", 3), ("Spread", 2))


def policy(spec: Mapping[str, Any] | None = None, name: str = "p",
           **top: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {"apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
                           "metadata": {"name": name}, "spec": dict(spec or {})}
    obj.update(top)
    return obj


def load(spec: Mapping[str, Any] | None = None, rules: AdmissionRules | None = None,
         **top: Any) -> Policy:
    return load_policy(policy(spec, **top), Catalog(REGISTRY, DEFAULT_FILTERS, DEFAULT_SCORERS),
                       **({"rules": rules} if rules is not None else {}))


def errors(spec: Mapping[str, Any] | None = None, rules: AdmissionRules | None = None,
           **top: Any) -> list[FieldError]:
    with pytest.raises(PolicyError) as exc:
        load(spec, rules, **top)
    return exc.value.errors


@pytest.fixture(scope="module")
def ca_pem(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A real self-signed certificate, PEM (openssl, as the webhook makes its own)."""
    d: Path = tmp_path_factory.mktemp("ca")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj",
                    "/CN=test-ca", "-keyout", str(d / "ca.key"), "-out", str(d / "ca.crt")],
                   check=True, capture_output=True)
    return (d / "ca.crt").read_text()


def paths(spec: Mapping[str, Any] | None = None, rules: AdmissionRules | None = None,
          **top: Any) -> list[str]:
    return [e.path for e in errors(spec, rules, **top)]


def names(p: Policy) -> tuple[list[str], list[str]]:
    return [f.name for f in p.filters], [f"{s.name}:{s.weight}" for s in p.scorers]


# -- defaults ---------------------------------------------------------------------------

def test_empty_spec_runs_the_default_profile_with_default_args_and_weights() -> None:
    p = load()
    assert names(p) == (["Gate", "Fit"], ["Fit:3", "Spread:2"])
    gate = p.filters[0]
    assert (gate.point, gate.args, gate.path) == ("filter", {"level": "default"},
                                                  "spec.defaultPlugins(Gate)")
    assert p.filters[0].when is None


def test_the_policy_carries_specs_that_the_builder_builds_with_its_handle() -> None:
    p = load({"scorers": [{"name": "Rank", "weight": 4, "args": {"k": 1}}]})
    listers = Listers()
    pl = build_pipeline(p, Handle(listers=listers))
    gate = pl.filters[0].plugin
    assert isinstance(gate, FakeFilter) and gate.args == {"level": "default"}
    assert gate.handle.listers is listers
    rank = pl.scorers[2]
    assert (rank.name, rank.weight) == ("Rank", 4)
    assert isinstance(rank.plugin, FakeScorer) and rank.plugin.args == {"k": 1}
    # Two builds, two sets of plugins: the loaded policy holds no plugin instances.
    assert build_pipeline(p).filters[0].plugin is not gate


def test_scalar_defaults() -> None:
    p = load(name="label-priority", metadata={"name": "label-priority", "generation": 7,
                                              "uid": "u-1"})
    assert p.name == p.scheduler_name == "label-priority"
    assert (p.generation, p.uid) == (7, "u-1")
    assert p.paused is False
    assert p.percentage_of_nodes_to_score == 0
    assert p.namespace_selector is None
    assert (p.runtime.mode, p.runtime.replicas) == ("Shared", 1)
    assert p.extenders == () and p.ignored_resources == frozenset()


def test_user_entries_follow_the_defaults_in_the_order_written() -> None:
    p = load({"filters": [{"name": "Extra"}, {"name": "NodeLabel"}],
              "scorers": [{"name": "Rank", "weight": 4}, {"name": "Extra"}]})
    assert names(p) == (["Gate", "Fit", "Extra", "NodeLabel"],
                        ["Fit:3", "Spread:2", "Rank:4", "Extra:1"])


def test_relisted_default_replaces_args_and_weight_in_place() -> None:
    p = load({"filters": [{"name": "Extra"}, {"name": "Gate", "args": {"level": "strict"}}],
              "scorers": [{"name": "Rank"}, {"name": "Fit", "weight": 9,
                                             "args": {"strategy": "MostAllocated"}}]})
    assert names(p) == (["Gate", "Fit", "Extra"], ["Fit:9", "Spread:2", "Rank:1"])
    gate, fit = p.filters[0], p.scorers[0]
    assert gate.args == {"level": "strict"} and gate.path == "spec.filters[1]"
    assert fit.args == {"strategy": "MostAllocated"} and fit.path == "spec.scorers[1]"


def test_relisted_default_scorer_without_weight_gets_1_as_upstream() -> None:
    # kube-scheduler mergePluginSet takes the custom entry whole; weight 0/unset means 1.
    assert names(load({"scorers": [{"name": "Fit"}]}))[1] == ["Fit:1", "Spread:2"]


def test_disabled_plugins_leave_both_lists() -> None:
    p = load({"disabledPlugins": ["Fit"]})
    assert names(p) == (["Gate"], ["Spread:2"])


def test_disable_all_with_star() -> None:
    p = load({"disabledPlugins": ["*"], "filters": [{"name": "Extra"}]})
    assert names(p) == (["Extra"], [])


def test_default_plugins_false_keeps_only_the_lists() -> None:
    p = load({"defaultPlugins": False, "scorers": [{"name": "Spread", "weight": 5}]})
    assert names(p) == ([], ["Spread:5"])


def test_disabled_default_listed_again_is_appended_not_replaced() -> None:
    # Upstream: a disabled default is not in the merged defaults, so the custom entry
    # is one of the "others", appended in the order written.
    p = load({"disabledPlugins": ["Gate"], "filters": [{"name": "Extra"}, {"name": "Gate"}]})
    assert names(p)[0] == ["Fit", "Extra", "Gate"]


def test_unknown_or_non_default_disabled_plugin_is_an_error() -> None:
    errs = errors({"disabledPlugins": ["Fit", "Nope", "Extra", 3]})
    assert [e.path for e in errs] == ["spec.disabledPlugins[1]", "spec.disabledPlugins[2]",
                                      "spec.disabledPlugins[3]"]
    assert "'Nope' is not a known plugin" in errs[0].message
    assert "'Extra' is not a default plugin" in errs[1].message
    assert "Gate, Fit, Spread" in errs[0].message


def test_repeatable_plugins_may_appear_twice_others_not() -> None:
    p = load({"filters": [{"name": "Expression", "args": {}}, {"name": "Expression"},
                          {"name": "NodeLabel"}, {"name": "NodeLabel"}]})
    assert names(p)[0] == ["Gate", "Fit", "Expression", "Expression", "NodeLabel", "NodeLabel"]
    errs = errors({"scorers": [{"name": "Rank"}, {"name": "Rank", "weight": 2}]})
    assert [e.path for e in errs] == ["spec.scorers[1].name"]
    assert "duplicate plugin 'Rank' (also at spec.scorers[0])" in errs[0].message


def test_when_pod_selector_is_compiled() -> None:
    p = load({"filters": [{"name": "Extra", "when": {"podSelector": {
        "matchLabels": {"want": "you"},
        "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["batch"]}]}}}]})
    when = p.filters[2].when
    assert when is not None
    assert when({"want": "you"}) is True
    assert when({"want": "you", "tier": "batch"}) is False
    assert when({}) is False


# -- errors and their paths -------------------------------------------------------------

def test_unknown_plugin_names_the_field_and_lists_the_known_ones() -> None:
    [err] = errors({"filters": [{"name": "Foo"}]})
    assert err.path == "spec.filters[0].name"
    assert err.message == ("unknown plugin 'Foo' at spec.filters[0].name: known filters are "
                           "Expression, Extra, Fit, Gate, NodeLabel")


def test_plugin_at_a_missing_extension_point_says_where_it_belongs() -> None:
    errs = errors({"filters": [{"name": "Rank"}], "scorers": [{"name": "Gate"}]})
    assert [(e.path, e.message) for e in errs] == [
        ("spec.filters[0].name", "plugin Rank has no filter extension point; "
                                 "use it under spec.scorers"),
        ("spec.scorers[0].name", "plugin Gate has no score extension point; "
                                 "use it under spec.filters"),
    ]


def test_args_errors_are_prefixed_with_the_entry_path() -> None:
    errs = errors({"filters": [
        {"name": "Extra"},
        {"name": "Extra", "args": {}},  # duplicate, reported before args
        {"name": "NodeLabel", "args": {"requirements": [
            {"key": "a", "operator": "Exists"}, {"key": "b", "operator": "Near"}]}},
    ], "scorers": [{"name": "Rank", "args": {"bad": True}}, {"name": "Extra", "args": "x"}]})
    assert [e.path for e in errs] == [
        "spec.filters[1].name",
        "spec.filters[2].args.requirements[1].operator",
        "spec.scorers[0].args.bad",
        "spec.scorers[1].args",
    ]
    assert "unsupported operator 'Near'" in errs[1].message


def test_a_plugin_bug_is_reported_not_raised() -> None:
    def broken(args: Mapping[str, Any], handle: Handle) -> FilterPlugin:
        raise KeyError("oops")

    reg = Registry([PluginSpec("Broken", filter=broken)])
    with pytest.raises(PolicyError) as exc:
        load_policy(policy({"filters": [{"name": "Broken"}]}), Catalog(reg))
    assert exc.value.errors[0].path == "spec.filters[0].args"
    assert "KeyError" in exc.value.errors[0].message


@pytest.mark.parametrize("weight", [0, -1, 101, "high", 2.5, True])
def test_scorer_weight_must_be_an_integer_1_to_100(weight: Any) -> None:
    errs = errors({"scorers": [{"name": "Rank"}, {"name": "Extra", "weight": weight}]})
    assert [e.path for e in errs] == ["spec.scorers[1].weight"]


def test_scorer_weight_bounds_are_inclusive() -> None:
    p = load({"scorers": [{"name": "Rank", "weight": 1}, {"name": "Extra", "weight": 100}]})
    assert names(p)[1][-2:] == ["Rank:1", "Extra:100"]


def test_filter_with_a_weight_is_told_only_scorers_have_one() -> None:
    [err] = errors({"filters": [{"name": "Extra", "weight": 2}]})
    assert err.path == "spec.filters[0].weight"
    assert "filters have no weight" in err.message


def test_unknown_fields_are_refused_with_their_path() -> None:
    assert paths({"scorer": [], "filters": [{"name": "Extra", "when": {"nodeSelector": {}}}],
                  "runtime": {"cpu": 1}}) == [
        "spec.scorer", "spec.runtime.cpu", "spec.filters[0].when.nodeSelector"]


def test_bad_pod_selector_names_the_requirement() -> None:
    assert paths({"scorers": [{"name": "Rank", "when": {"podSelector": {
        "matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]}}}]}) == [
        "spec.scorers[0].when.podSelector.matchExpressions[0].operator"]


def test_entries_must_be_objects_with_a_name() -> None:
    assert paths({"filters": ["Gate", {"args": {}}, None], "scorers": {"name": "Rank"}}) == [
        "spec.filters[0]", "spec.filters[1].name", "spec.filters[2]", "spec.scorers"]


@pytest.mark.parametrize(("field", "value"), [
    ("percentageOfNodesToScore", 101), ("percentageOfNodesToScore", -1),
    ("percentageOfNodesToScore", "50%"), ("paused", "yes"), ("defaultPlugins", 1),
    ("schedulerName", "Has_Upper"), ("schedulerName", 5),
])
def test_scalar_field_errors(field: str, value: Any) -> None:
    assert paths({field: value}) == [f"spec.{field}"]


def test_scalars_are_read() -> None:
    p = load({"schedulerName": "other", "paused": True, "percentageOfNodesToScore": 40})
    assert (p.scheduler_name, p.paused, p.percentage_of_nodes_to_score) == ("other", True, 40)


def test_namespace_selector() -> None:
    p = load({"namespaceSelector": {"matchLabels": {"team": "a"}}})
    assert p.namespace_selector is not None
    assert p.namespace_selector({"team": "a"}) and not p.namespace_selector({"team": "b"})
    everything = load({"namespaceSelector": {}}).namespace_selector
    assert everything is not None and everything({})
    assert paths({"namespaceSelector": {"matchExpressions": [{"key": "a"}]}}) == [
        "spec.namespaceSelector.matchExpressions[0].operator"]


def test_metadata_and_type_errors() -> None:
    errs = errors(apiVersion="polsched.io/v1", kind="Policy", metadata={})
    assert [e.path for e in errs] == ["apiVersion", "kind", "metadata.name"]


def test_policy_error_names_the_policy() -> None:
    with pytest.raises(PolicyError) as exc:
        load({"filters": [{"name": "Foo"}]}, name="mine", metadata={"name": "mine"})
    assert str(exc.value).startswith("SchedulingPolicy 'mine' is invalid: spec.filters[0].name")


# -- runtime ---------------------------------------------------------------------------

def test_runtime_dedicated() -> None:
    p = load({"runtime": {"mode": "Dedicated", "replicas": 3,
                          "resources": {"limits": {"cpu": "500m", "memory": "128Mi"}}}})
    assert (p.runtime.mode, p.runtime.replicas) == ("Dedicated", 3)
    assert p.runtime.resources == {"limits": {"cpu": "500m", "memory": "128Mi"}}


def test_runtime_replicas_are_capped() -> None:
    """A Dedicated policy's replicas run in the operator's namespace: at most 5, in the
    loader (the webhook, `polsched validate`) as in the CRD's schema."""
    assert load({"runtime": {"mode": "Dedicated", "replicas": 5}}).runtime.replicas == 5
    (e,) = errors({"runtime": {"mode": "Dedicated", "replicas": 1000}})
    assert e.path == "spec.runtime.replicas"
    assert "between 1 and 5, not 1000" in e.message
    from polsched.api.crd import openapi_schema
    runtime = openapi_schema()["properties"]["spec"]["properties"]["runtime"]
    assert runtime["properties"]["replicas"]["maximum"] == 5


def test_runtime_errors() -> None:
    assert paths({"runtime": {"mode": "Remote"}}) == ["spec.runtime.mode"]
    assert paths({"runtime": {"replicas": 2}}) == ["spec.runtime.replicas"]
    assert paths({"runtime": {"mode": "Dedicated", "replicas": 0}}) == ["spec.runtime.replicas"]
    assert paths({"runtime": {"resources": {"limits": {"cpu": 1}}}}) == ["spec.runtime.resources"]
    assert paths({"runtime": {"mode": "Dedicated", "resources": {
        "requests": {"cpu": "lots"}}}}) == ["spec.runtime.resources.requests.cpu"]


# -- extenders --------------------------------------------------------------------------

EXT = {"urlPrefix": "http://extender.example.svc:8888/", "filterVerb": "filter"}


def test_extender_defaults_and_fields(ca_pem: str) -> None:
    ca = base64.b64encode(ca_pem.encode()).decode()
    p = load({"extenders": [
        dict(EXT),
        {**EXT, "prioritizeVerb": "prioritize", "weight": 5, "bindVerb": "bind",
         "preemptVerb": "preempt", "nodeCacheCapable": True, "ignorable": True,
         "enableHTTPS": True, "httpTimeout": "1m",
         "managedResources": [{"name": "example.com/foo", "ignoredByScheduler": True},
                              {"name": "example.com/bar"}],
         "tlsConfig": {"insecure": True, "caData": ca,
                       "caSecretRef": {"name": "ext-ca", "namespace": "polsched-system"}}},
    ]})
    plain, full = p.extenders
    assert plain.http_timeout_seconds == 5.0 and plain.ca_secret_ref is None
    assert (plain.weight, plain.bind_verb, plain.ignorable) == (1, "", False)
    assert full.http_timeout_seconds == 60.0
    assert (full.weight, full.prioritize_verb, full.bind_verb, full.preempt_verb) == (
        5, "prioritize", "bind", "preempt")
    assert full.node_cache_capable and full.ignorable and full.enable_https
    assert full.tls_insecure and full.ca_data == ca_pem
    assert full.ca_secret_ref == ("polsched-system", "ext-ca")
    assert [(r.name, r.ignored_by_scheduler) for r in full.managed_resources] == [
        ("example.com/foo", True), ("example.com/bar", False)]
    assert p.ignored_resources == frozenset({"example.com/foo"})


def test_ignored_resources_reach_the_plugins_handle() -> None:
    p = load({"extenders": [{**EXT, "managedResources": [
        {"name": "example.com/foo", "ignoredByScheduler": True}]}]})
    # The builder puts them into whatever handle its caller gives.
    fit = build_pipeline(p, Handle(listers=Listers())).scorers[0].plugin
    assert isinstance(fit, FakeScorer)
    assert fit.handle.ignored_resources == frozenset({"example.com/foo"})


@pytest.mark.parametrize(("timeout", "seconds"), [
    ("500ms", 0.5), ("5s", 5.0), ("1m", 60.0), ("0s", 5.0), ("0", 5.0), ("1.5s", 1.5)])
def test_extender_http_timeout(timeout: str, seconds: float) -> None:
    [ext] = load({"extenders": [{**EXT, "httpTimeout": timeout}]}).extenders
    assert ext.http_timeout_seconds == seconds


def test_extender_errors_name_their_fields() -> None:
    errs = errors({"extenders": [
        {"filterVerb": "filter"},                                  # no urlPrefix
        {**EXT, "prioritizeVerb": "prioritize"},                   # no weight
        {**EXT, "prioritizeVerb": "prioritize", "weight": 0, "bindVerb": "bind"},
        {"urlPrefix": "extender:8888", "bindVerb": "bind", "httpTimeout": "5"},
        {**EXT, "httpTimeout": "soon", "managedResources": [
            {"name": "example.com/foo"}, {"name": "cpu"}, {"name": "example.com/foo"},
            {"name": "a/b/c"}]},
        {**EXT, "tlsConfig": {"caData": "not base64!", "caSecretRef": {"name": "x"}},
         "urlprefix": "typo"},
    ]})
    assert [e.path for e in errs] == [
        "spec.extenders[0].urlPrefix",
        "spec.extenders[1].weight",
        "spec.extenders[2].weight",
        "spec.extenders[3].urlPrefix",
        "spec.extenders[3].httpTimeout",
        "spec.extenders[4].httpTimeout",
        "spec.extenders[4].managedResources[1].name",
        "spec.extenders[4].managedResources[2].name",
        "spec.extenders[4].managedResources[3].name",
        "spec.extenders[5].urlprefix",
        "spec.extenders[5].tlsConfig.caData",
        "spec.extenders[5].tlsConfig.caSecretRef.namespace",
        "spec.extenders",
    ]
    by_path = {e.path: e.message for e in errs}
    assert "must have a positive weight applied to it" in by_path["spec.extenders[1].weight"]
    assert "missing unit" in by_path["spec.extenders[3].httpTimeout"]
    assert "invalid extended resource name" in by_path[
        "spec.extenders[4].managedResources[1].name"]
    assert "duplicate extender managed resource name 'example.com/foo'" in by_path[
        "spec.extenders[4].managedResources[2].name"]
    assert by_path["spec.extenders"].startswith("only one extender can implement bind")


def test_managed_resource_names_are_unique_across_extenders() -> None:
    res = {"managedResources": [{"name": "example.com/foo"}]}
    assert paths({"extenders": [{**EXT, **res}, {**EXT, **res}]}) == [
        "spec.extenders[1].managedResources[0].name"]


# -- all at once ------------------------------------------------------------------------

def test_every_problem_is_reported_at_once() -> None:
    errs = errors({
        "percentageOfNodesToScore": 200,
        "disabledPlugins": ["Nope"],
        "filters": [{"name": "Gate"}, {"name": "Foo"},
                    {"name": "NodeLabel", "args": {"requirements": [{"key": "a"}]}}],
        "scorers": [{"name": "Rank", "weight": 0}, {"name": "Gate"}],
        "extenders": [{**EXT, "prioritizeVerb": "p", "weight": -1}],
    }, metadata={"name": "p"})
    assert [e.path for e in errs] == [
        "spec.percentageOfNodesToScore",
        "spec.extenders[0].weight",
        "spec.disabledPlugins[0]",
        "spec.filters[1].name",
        "spec.filters[2].args.requirements[0].operator",
        "spec.scorers[1].name",
        "spec.scorers[0].weight",
    ]


# -- the real registry ------------------------------------------------------------------

def real(spec: Mapping[str, Any]) -> Policy:
    return load_policy(policy(spec), CATALOG)


def test_real_default_profile_is_kube_schedulers() -> None:
    p = real({})
    assert [f.name for f in p.filters] == list(plugins.DEFAULT_FILTERS)
    assert [(s.name, s.weight) for s in p.scorers] == list(plugins.DEFAULT_SCORERS)


def test_real_policy_from_the_contract_loads() -> None:
    p = real({
        "filters": [
            {"name": "NodeLabel", "args": {"requirements": [
                {"key": "priority.lixueduan.com", "operator": "Exists"}]}},
            {"name": "Expression", "args": {"expression": "size(pod.metadata.name) <= 5",
                                            "message": "pod name is longer than 5"},
             "when": {"podSelector": {"matchLabels": {"want": "you"}}}},
        ],
        "scorers": [
            {"name": "NodeLabelValue", "weight": 2,
             "args": {"key": "priority.lixueduan.com", "default": 0}},
            {"name": "Expression", "weight": 1,
             "args": {"expression": "20 - size(node.metadata.name)"}},
            {"name": "NodeResourcesFit", "weight": 1,
             "args": {"scoringStrategy": {"type": "MostAllocated"}}},
        ],
    })
    assert [f.name for f in p.filters] == [*plugins.DEFAULT_FILTERS, "NodeLabel", "Expression"]
    scorers = [(s.name, s.weight) for s in p.scorers]
    fit = [n for n, _ in plugins.DEFAULT_SCORERS].index("NodeResourcesFit")
    assert scorers[fit] == ("NodeResourcesFit", 1)
    assert scorers[-2:] == [("NodeLabelValue", 2), ("Expression", 1)]


def test_real_plugin_args_errors_carry_the_full_path() -> None:
    with pytest.raises(PolicyError) as exc:
        real({"filters": [
            {"name": "NodeLabel", "args": {"requirements": [
                {"key": "a", "operator": "Exists"}, {"key": "b", "operator": "Near"}]}}],
              "scorers": [{"name": "NodeLabelValue", "args": {}}]})
    assert [e.path for e in exc.value.errors] == [
        "spec.filters[0].args.requirements[1].operator", "spec.scorers[0].args.key"]


# -- issue 26: budgets, reserved names, shadows, destinations -----------------------------


@pytest.mark.parametrize("timeout", ["999h", "1h", "60.001s", "1m0.5s"])
def test_extender_http_timeout_has_an_upper_bound(timeout: str) -> None:
    [err] = errors({"extenders": [{**EXT, "httpTimeout": timeout}]})
    assert err.path == "spec.extenders[0].httpTimeout"
    assert f"{timeout} is longer than the maximum of 60s" in err.message


@pytest.mark.parametrize("ca", [
    b"hello, not a certificate",
    b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
    b"-----BEGIN CERTIFICATE-----\nnot base64 at all!\n-----END CERTIFICATE-----\n",
])
def test_a_ca_that_is_not_pem_certificates_is_refused_with_its_field(ca: bytes) -> None:
    [err] = errors({"extenders": [{**EXT, "tlsConfig": {
        "caData": base64.b64encode(ca).decode()}}]})
    assert err.path == "spec.extenders[0].tlsConfig.caData"
    assert "must be base64-encoded PEM CA certificates" in err.message


@pytest.mark.parametrize("data", ["été", "🙂" * 3, "\u202e"])
def test_ca_data_that_is_not_ascii_is_refused_with_its_field(data: str) -> None:
    # A fuzz finding: base64 raises a bare ValueError on non-ASCII text, which escaped
    # the loader.
    [err] = errors({"extenders": [{**EXT, "tlsConfig": {"caData": data}}]})
    assert err.path == "spec.extenders[0].tlsConfig.caData"
    assert err.message == "must be base64-encoded PEM CA certificates"


def test_a_ca_bundle_with_a_good_certificate_loads(ca_pem: str) -> None:
    bundle = base64.b64encode((ca_pem + ca_pem).encode()).decode()
    [ext] = load({"extenders": [{**EXT, "tlsConfig": {"caData": bundle}}]}).extenders
    assert ext.ca_data.count("BEGIN CERTIFICATE") == 2


def test_default_scheduler_is_refused_as_a_scheduler_name() -> None:
    [err] = errors({"schedulerName": "default-scheduler"})
    assert err.path == "spec.schedulerName"
    assert "kube-scheduler's default profile" in err.message
    # Defaulted from metadata.name: the field to change is the name (or schedulerName).
    [err] = errors({}, metadata={"name": "default-scheduler"})
    assert err.path == "metadata.name" and "spec.schedulerName" in err.message
    # A shadow claims no name.
    load({"shadowOf": "other"}, metadata={"name": "default-scheduler"})


def test_reserved_scheduler_names_come_from_the_rules() -> None:
    rules = AdmissionRules.make(["volcano", "yunikorn"])
    [err] = errors({"schedulerName": "volcano"}, rules)
    assert err.path == "spec.schedulerName" and "reserved by the cluster admin" in err.message
    assert "default-scheduler" in rules.reserved_scheduler_names
    load({"schedulerName": "volcano"})  # not reserved without the rule
    load({"schedulerName": "mine"}, rules)


def test_allowed_shadows_are_policy_names() -> None:
    p = load({"allowedShadows": ["canary", "canary-2"]})
    assert p.allowed_shadows == frozenset({"canary", "canary-2"})
    assert load({}).allowed_shadows == frozenset()
    assert paths({"allowedShadows": ["Bad_Name", 3, "p"]}) == [
        "spec.allowedShadows[0]", "spec.allowedShadows[1]", "spec.allowedShadows[2]"]
    assert paths({"allowedShadows": [f"s{i}" for i in range(17)]}) == ["spec.allowedShadows"]


@pytest.mark.parametrize(("url", "why"), [
    ("http://169.254.169.254/latest/", "cloud metadata endpoint"),
    ("http://169.254.10.1/", "link-local"),
    ("http://[fe80::1]:8888/", "link-local"),
    ("http://127.0.0.1:8888/", "loopback"),
    ("http://[::ffff:127.0.0.1]:8888/", "loopback"),
    ("http://localhost:8888/", "loopback"),
    ("https://kubernetes.default.svc/", "API server's Service"),
    ("https://10.0.0.1:6443/", "API server's own address"),
])
def test_extender_destination_policy_refuses_with_the_field(url: str, why: str) -> None:
    rules = AdmissionRules.make(destinations=DestinationPolicy().with_api_server(
        "10.0.0.1", 6443))
    [err] = errors({"extenders": [{**EXT, "urlPrefix": url}]}, rules)
    assert err.path == "spec.extenders[0].urlPrefix"
    assert why in err.message and "--extender-allow" in err.message


def test_extender_destination_policy_allows_exceptions_and_other_hosts() -> None:
    import ipaddress

    allow_loopback = DestinationPolicy(allow=(ipaddress.ip_network("127.0.0.0/8"),))
    rules = AdmissionRules.make(destinations=allow_loopback.with_api_server("127.0.0.1", 6443))
    load({"extenders": [{**EXT, "urlPrefix": "http://127.0.0.1:8888/"}]}, rules)
    load({"extenders": [{**EXT, "urlPrefix": "http://10.0.0.9:8888/"}]}, rules)
    load({"extenders": [{**EXT, "urlPrefix": "https://10.0.0.1:6443/"}]}, rules)
    # Loopback allowed, but never the API server's own port.
    assert paths({"extenders": [{**EXT, "urlPrefix": "https://127.0.0.1:6443/"}]},
                 rules) == ["spec.extenders[0].urlPrefix"]
    # Without rules (polsched validate, an Engine built by hand) nothing is refused.
    load({"extenders": [{**EXT, "urlPrefix": "http://169.254.169.254/"}]})


def test_a_huge_wrong_value_makes_an_error_that_fits_a_condition() -> None:
    # A fuzz finding: the loader quoted a 400 KB `kind` whole, past the 32768 characters
    # of a metav1.Condition's message (the status write would be refused).
    with pytest.raises(PolicyError) as exc:
        load(kind="x" * 400_000)
    text = str(exc.value)
    assert text.startswith("SchedulingPolicy 'p' is invalid: kind: must be SchedulingPolicy")
    assert len(text) <= MAX_FIELD_ERROR_CHARS + 100
    assert len(exc.value.errors[0].message) > 400_000  # the error itself keeps it


def test_a_policy_error_with_thousands_of_problems_says_how_many_it_left_out() -> None:
    problems = [FieldError(f"spec.filters[{i}].name", "x" * 100) for i in range(1000)]
    text = str(PolicyError(problems, "p"))
    assert len(text) <= MAX_POLICY_ERROR_CHARS + 30
    assert text.startswith("SchedulingPolicy 'p' is invalid: spec.filters[0].name: ")
    kept = text.count("spec.filters[")
    assert text.endswith(f"; and {1000 - kept} more") and 100 < kept < 1000
