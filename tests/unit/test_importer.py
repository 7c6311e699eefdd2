"""`polsched import`: kube-scheduler configurations become SchedulingPolicies that
validate, with plugins merged as kube-scheduler merges them and the rest reported."""

from __future__ import annotations

from typing import Any

import pytest

from polsched.api import load_policy
from polsched.commands.importer import convert
from polsched.plugins import CATALOG

pytestmark = pytest.mark.unit


def scorers(p: Any) -> dict[str, int]:
    return {s.name: s.weight for s in load_policy(p, CATALOG).scorers}


def filters(p: Any) -> list[str]:
    return [f.name for f in load_policy(p, CATALOG).filters]


def test_profiles_plugins_plugin_config_and_extenders() -> None:
    cfg = {
        "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
        "profiles": [
            {"schedulerName": "packer",
             "plugins": {"score": {"disabled": [{"name": "NodeResourcesBalancedAllocation"}],
                                   "enabled": [{"name": "NodeResourcesFit", "weight": 5}]},
                         "preBind": {"enabled": [{"name": "VolumeBinding"}]}},
             "pluginConfig": [{"name": "NodeResourcesFit",
                               "args": {"kind": "NodeResourcesFitArgs",
                                        "scoringStrategy": {"type": "MostAllocated"}}}]},
            {"schedulerName": "Minimal_One",
             "plugins": {"multiPoint": {"disabled": [{"name": "*"}],
                                        "enabled": [{"name": "TaintToleration"},
                                                    {"name": "ImageLocality", "weight": 3}]}}},
        ],
        "extenders": [{"urlPrefix": "http://ext:8888/", "filterVerb": "filter",
                       "enableHTTPS": True, "httpTimeout": "10s", "nodeCacheCapable": True}],
    }
    policies, notes = convert(cfg, "cfg.yaml", "x")
    packer, minimal = policies
    assert packer["metadata"]["name"] == "packer"
    s = scorers(packer)
    assert s["NodeResourcesFit"] == 5 and "NodeResourcesBalancedAllocation" not in s
    assert s["TaintToleration"] == 3  # the other defaults stay, with upstream weights
    loaded = load_policy(packer, CATALOG)
    assert loaded.extenders[0].url_prefix == "http://ext:8888/"
    assert loaded.extenders[0].enable_https and loaded.extenders[0].http_timeout_seconds == 10
    assert minimal["metadata"]["name"] == "minimal-one"
    assert minimal["spec"]["schedulerName"] == "minimal-one"
    assert any("'Minimal_One' is not a DNS subdomain" in n for n in notes)
    assert filters(minimal) == ["TaintToleration"]
    assert scorers(minimal) == {"TaintToleration": 1, "ImageLocality": 3}
    assert any("VolumeBinding" in n and "profiles[0].plugins.preBind" in n for n in notes)


def test_legacy_policy_file() -> None:
    legacy = {
        "kind": "Policy", "apiVersion": "v1",
        "predicates": [{"name": "PodFitsResources"}, {"name": "NoDiskConflict"},
                       {"name": "zone", "argument": {"labelsPresence": {
                           "labels": ["zone"], "presence": True}}}],
        "priorities": [{"name": "MostRequestedPriority", "weight": 2},
                       {"name": "SelectorSpreadPriority", "weight": 1}],
        "extenders": [{"urlPrefix": "http://127.0.0.1:8888/", "filterVerb": "filter",
                       "prioritizeVerb": "prioritize", "weight": 1, "enableHttps": False,
                       "nodeCacheCapable": True, "httpTimeout": 30000000000}],
    }
    (policy,), notes = convert(legacy, "policy.json", "legacy")
    assert policy["metadata"]["name"] == "legacy"
    # predicates given: only those run (no default filters), likewise priorities
    assert filters(policy) == ["NodeResourcesFit", "NodeLabel"]
    assert scorers(policy) == {"NodeResourcesFit": 2}
    ext = load_policy(policy, CATALOG).extenders[0]
    assert ext.node_cache_capable and ext.http_timeout_seconds == 30
    assert any("NoDiskConflict" in n for n in notes)
    assert any("SelectorSpreadPriority" in n for n in notes)


def test_other_kinds_are_refused() -> None:
    with pytest.raises(ValueError, match="expected KubeSchedulerConfiguration"):
        convert({"kind": "ConfigMap"}, "cm.yaml", "x")


def test_readme_tour_example_imports_into_a_valid_policy() -> None:
    """The README's tour runs `polsched import docs/examples/kube-scheduler-config.yaml`."""
    import yaml

    from tests.conftest import ROOT

    doc = yaml.safe_load((ROOT / "docs/examples/kube-scheduler-config.yaml").read_text())
    (policy,), _ = convert(doc, "kube-scheduler-config.yaml", "kube")
    assert policy["spec"]["schedulerName"] == "bin-packing"
    loaded = load_policy(policy, CATALOG)
    assert scorers(policy)["NodeResourcesFit"] == 5
    assert "NodeResourcesBalancedAllocation" not in scorers(policy)
    assert loaded.extenders[0].url_prefix == "http://127.0.0.1:8888/"


def test_default_preemption_and_scheduling_gates_follow_their_extension_points() -> None:
    cfg = {
        "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
        "profiles": [
            # "*" at multiPoint switches off every default, preemption and gates included.
            {"schedulerName": "minimal",
             "plugins": {"multiPoint": {"disabled": [{"name": "*"}],
                                        "enabled": [{"name": "TaintToleration"}]}}},
            {"schedulerName": "no-preemption",
             "plugins": {"postFilter": {"disabled": [{"name": "DefaultPreemption"}]}}},
            # Only filters and scorers off: preemption (with its args) and gates stay.
            {"schedulerName": "tuned",
             "plugins": {"filter": {"disabled": [{"name": "*"}]},
                         "score": {"disabled": [{"name": "*"}]}},
             "pluginConfig": [{"name": "DefaultPreemption", "args": {
                 "kind": "DefaultPreemptionArgs", "minCandidateNodesPercentage": 20,
                 "minCandidateNodesAbsolute": 5, "extra": 1}}]},
            {"schedulerName": "preempt-only",
             "plugins": {"multiPoint": {"disabled": [{"name": "*"}]},
                         "postFilter": {"enabled": [{"name": "DefaultPreemption"}]}}},
        ],
    }
    policies, notes = convert(cfg, "cfg.yaml", "x")
    loaded = {p["metadata"]["name"]: load_policy(p, CATALOG) for p in policies}
    gates = {n: [e.name for e in p.pre_enqueue] for n, p in loaded.items()}
    assert loaded["minimal"].preemption is None and gates["minimal"] == []
    assert filters(policies[0]) == ["TaintToleration"]
    assert loaded["no-preemption"].preemption is None
    # GangScheduling stays as upstream's with GenericWorkload (a no-op without PodGroups).
    assert gates["no-preemption"] == ["SchedulingGates", "DynamicResources", "GangScheduling"]
    assert len(loaded["no-preemption"].filters) > 1  # the other defaults stay
    tuned = loaded["tuned"]
    assert (tuned.filters, tuned.scorers) == ((), ())
    # DynamicResources is disabled with the filters (disabledPlugins is per plugin;
    # upstream would keep its PreEnqueue).
    assert gates["tuned"] == ["SchedulingGates", "GangScheduling"]
    assert tuned.preemption is not None
    assert (tuned.preemption.min_candidate_nodes_percentage,
            tuned.preemption.min_candidate_nodes_absolute) == (20, 5)
    assert any("pluginConfig[0].args.extra: not imported" in n for n in notes)
    assert loaded["preempt-only"].preemption is not None and gates["preempt-only"] == []


def test_a_default_scheduler_profile_is_imported_under_a_name_of_its_own() -> None:
    """default-scheduler stays kube-scheduler's: a policy may not claim it (issue 26)."""
    cfg = {"apiVersion": "kubescheduler.config.k8s.io/v1",
           "kind": "KubeSchedulerConfiguration"}  # no profiles: the default one
    (policy,), notes = convert(cfg, "cfg.yaml", "x")
    assert policy["spec"]["schedulerName"] == "polsched-default"
    assert any("'default-scheduler' is kube-scheduler's own and reserved: imported as "
               "'polsched-default'" in n for n in notes)
    load_policy(policy, CATALOG)
