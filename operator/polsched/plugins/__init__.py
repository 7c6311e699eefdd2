"""The plugins, one module each, and the registry and default profile built from them.

Each module defines NAME and SPEC (a framework.PluginSpec). Names and args follow
kube-scheduler where it has the plugin; NodeLabel, NodeLabelValue and Expression are ours;
TargetLoadPacking, LoadVariationRiskBalancing and LowRiskOverCommitment follow
scheduler-plugins' Trimaran (load-aware, from the Metrics API: framework.load).
"""

from __future__ import annotations

from polsched.framework.registry import Catalog, Registry
from polsched.plugins import (
    default_preemption,
    dynamic_resources,
    expression,
    gang_scheduling,
    image_locality,
    inter_pod_affinity,
    load_variation_risk_balancing,
    low_risk_over_commitment,
    node_affinity,
    node_declared_features,
    node_label,
    node_label_value,
    node_name,
    node_ports,
    node_resources_balanced_allocation,
    node_resources_fit,
    node_unschedulable,
    node_volume_limits,
    pod_topology_spread,
    scheduling_gates,
    taint_toleration,
    target_load_packing,
    volume_binding,
    volume_restrictions,
    volume_zone,
)

REGISTRY = Registry([
    node_unschedulable.SPEC,
    node_name.SPEC,
    taint_toleration.SPEC,
    node_affinity.SPEC,
    node_ports.SPEC,
    node_resources_fit.SPEC,
    volume_restrictions.SPEC,
    node_volume_limits.SPEC,
    volume_binding.SPEC,
    volume_zone.SPEC,
    node_resources_balanced_allocation.SPEC,
    image_locality.SPEC,
    inter_pod_affinity.SPEC,
    pod_topology_spread.SPEC,
    node_label.SPEC,
    node_label_value.SPEC,
    expression.SPEC,
    scheduling_gates.SPEC,
    dynamic_resources.SPEC,
    default_preemption.SPEC,
    gang_scheduling.SPEC,
    target_load_packing.SPEC,
    load_variation_risk_balancing.SPEC,
    low_risk_over_commitment.SPEC,
    node_declared_features.SPEC,
])

# kube-scheduler v1.37's default profile (pkg/scheduler/apis/config/v1/default_plugins.go,
# DynamicResources added before DefaultPreemption as its feature gate is GA), restricted to
# the plugins polsched implements; filters in upstream order: the first rejection of a node
# is the reason reported for it.
DEFAULT_FILTERS: tuple[str, ...] = (
    "NodeName",
    "NodeUnschedulable",
    "TaintToleration",
    "NodeAffinity",
    "NodePorts",
    "NodeResourcesFit",
    "VolumeRestrictions",
    "NodeVolumeLimits",
    "VolumeBinding",
    "VolumeZone",
    "PodTopologySpread",
    "InterPodAffinity",
    "DynamicResources",
    # applyFeatureGates appends it to MultiPoint (GA and locked on in v1.37), so it runs
    # after DynamicResources, which applyDynamicResources inserts before DefaultPreemption.
    "NodeDeclaredFeatures",
)
# PreEnqueue plugins of the default profile (gate pods before the active queue).
# GangScheduling is upstream's with GenericWorkload on; it lets every pod through when the
# cluster does not serve PodGroups (plugins/gang_scheduling.py).
DEFAULT_PRE_ENQUEUE: tuple[str, ...] = ("SchedulingGates", "DynamicResources",
                                        "GangScheduling")
DEFAULT_SCORERS: tuple[tuple[str, int], ...] = (
    ("TaintToleration", 3),
    ("NodeAffinity", 2),
    ("NodeResourcesFit", 1),
    # StorageCapacityScoring (beta, on in v1.37) gives VolumeBinding a Score; the
    # default profile lists it without a weight, which the framework makes 1.
    ("VolumeBinding", 1),
    ("PodTopologySpread", 2),
    ("InterPodAffinity", 2),
    ("NodeResourcesBalancedAllocation", 1),
    ("ImageLocality", 1),
    # applyDynamicResources adds it with weight 2; it only scores firstAvailable choices.
    ("DynamicResources", 2),
)

# What a policy is loaded against (polsched.api.load_policy(obj, CATALOG)): the in-tree
# registry and the default profile.
CATALOG = Catalog(REGISTRY, DEFAULT_FILTERS, DEFAULT_SCORERS, DEFAULT_PRE_ENQUEUE)

__all__ = ["CATALOG", "DEFAULT_FILTERS", "DEFAULT_PRE_ENQUEUE", "DEFAULT_SCORERS", "REGISTRY"]
