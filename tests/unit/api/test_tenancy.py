"""The admin's tenancy configuration (polsched.api.tenancy): who may claim which name,
which fencing plugins stay in every pipeline, and the caps on Dedicated policies, as the
loader applies them."""

from __future__ import annotations

from typing import Any

import pytest

from polsched.api import PolicyError, load_policy
from polsched.api.admission import DEFAULT_RULES, AdmissionRules
from polsched.api.tenancy import TenancyError, parse_tenancy
from polsched.plugins import CATALOG

pytestmark = pytest.mark.unit

# What the operator runs with when the admin gives no --tenancy-config.
OPERATOR = AdmissionRules(tenancy=parse_tenancy(None))


def policy(name: str = "p", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
            "metadata": {"name": name}, "spec": spec}


def errors(obj: dict[str, Any], rules: AdmissionRules) -> dict[str, str]:
    with pytest.raises(PolicyError) as e:
        load_policy(obj, CATALOG, rules=rules)
    return {err.path: err.message for err in e.value.errors}


@pytest.mark.parametrize(("spec", "path"), [
    ({"disabledPlugins": ["TaintToleration"]}, "spec.disabledPlugins"),
    ({"disabledPlugins": ["*"]}, "spec.disabledPlugins"),
    ({"defaultPlugins": False, "filters": [{"name": "NodeResourcesFit"}]}, "spec.filters"),
    # a `when` that never matches is a switch-off too
    ({"disabledPlugins": ["NodeAffinity"],
      "filters": [{"name": "NodeAffinity",
                   "when": {"podSelector": {"matchLabels": {"never": "x"}}}}]},
     "spec.disabledPlugins"),
])
def test_fencing_plugins_stay_unless_the_admin_allows(spec: dict[str, Any], path: str) -> None:
    found = errors(policy(**spec), OPERATOR)
    assert path in found and "cluster admin" in found[path], found
    allowed = AdmissionRules(tenancy=parse_tenancy(
        {"allowDisabling": ["TaintToleration", "NodeAffinity", "NodeUnschedulable"]}))
    load_policy(policy(**spec), CATALOG, rules=allowed)


def test_other_defaults_may_be_disabled_and_listed_fences_count() -> None:
    load_policy(policy(disabledPlugins=["NodeResourcesBalancedAllocation"]), CATALOG,
                rules=OPERATOR)
    load_policy(policy(defaultPlugins=False, filters=[
        {"name": "NodeUnschedulable"}, {"name": "NodeAffinity"}, {"name": "TaintToleration"}]),
        CATALOG, rules=OPERATOR)


def test_a_process_without_admin_configuration_allows_disabling() -> None:
    # `polsched validate`, explain and tests of one plugin load with DEFAULT_RULES.
    load_policy(policy(disabledPlugins=["TaintToleration"]), CATALOG, rules=DEFAULT_RULES)


def dedicated(name: str = "p", **runtime: Any) -> dict[str, Any]:
    return policy(name, runtime={"mode": "Dedicated", **runtime})


def test_dedicated_objects_the_api_server_would_refuse_are_refused_at_load() -> None:
    found = errors(dedicated("n" * 77), DEFAULT_RULES)
    assert "metadata.name" in found and "63" in found["metadata.name"]
    found = errors(dedicated(resources={"requests": {"cpu": "-1"}}), DEFAULT_RULES)
    assert "negative" in found["spec.runtime.resources.requests.cpu"]
    load_policy(dedicated("n" * 63), CATALOG, rules=DEFAULT_RULES)


def test_dedicated_caps() -> None:
    rules = AdmissionRules(tenancy=parse_tenancy({"dedicated": {
        "maxReplicas": 2, "maxResources": {"cpu": "2", "memory": "4Gi"}}}))
    found = errors(dedicated(replicas=3, resources={"limits": {"cpu": "2500m"},
                                                   "requests": {"memory": "4Gi"}}), rules)
    assert set(found) == {"spec.runtime.replicas", "spec.runtime.resources.limits.cpu"}
    load_policy(dedicated(replicas=2, resources={"limits": {"cpu": "2", "memory": "4Gi"}}),
                CATALOG, rules=rules)
    none = AdmissionRules(tenancy=parse_tenancy({"dedicated": {"maxPolicies": 0}}))
    assert "spec.runtime.mode" in errors(dedicated(), none)


def test_name_grants_by_user_and_group() -> None:
    t = parse_tenancy({"schedulerNames": [
        {"names": ["team-a-*"], "users": ["alice"], "groups": ["team-a"]},
        {"names": ["shared"], "groups": ["system:authenticated"]}]})
    assert t.claim_refusal("team-a-batch", "alice", []) == ""
    assert t.claim_refusal("team-a-batch", "carol", ["team-a"]) == ""
    assert "not granted" in t.claim_refusal("team-a-batch", "bob", ["team-b"])
    assert "covers" in t.claim_refusal("team-c", "alice", ["team-a"])
    assert t.claim_refusal("shared", "bob", ["system:authenticated"]) == ""
    # no grants at all: anyone may claim a free name
    assert parse_tenancy(None).claim_refusal("anything", "bob", []) == ""


@pytest.mark.parametrize(("raw", "field"), [
    ({"allowDisabling": ["NodeResourcesFit"]}, "tenancy.allowDisabling[0]"),
    ({"schedulerNames": [{"users": ["a"]}]}, "tenancy.schedulerNames[0].names"),
    ({"dedicated": {"maxResources": {"cpu": "1e999999999"}}},
     "tenancy.dedicated.maxResources.cpu"),
    ({"nameGraceSeconds": -1}, "tenancy.nameGraceSeconds"),
    ({"teams": []}, "tenancy.teams"),
])
def test_a_bad_configuration_names_the_field(raw: dict[str, Any], field: str) -> None:
    with pytest.raises(TenancyError, match=field.replace("[", r"\[").replace("]", r"\]")):
        parse_tenancy(raw)
