"""PodTopologySpread: a pod's topologySpreadConstraints as a filter (DoNotSchedule) and a
scorer (ScheduleAnyway).

Reimplements kube-scheduler's podtopologyspread plugin (pkg/scheduler/framework/plugins/
podtopologyspread/{common,filtering,scoring,plugin}.go, v1.37), split as upstream's
package: args.py (the args, their defaults and validation: apis/config), common.py,
filtering.py, scoring.py and plugin.py. PreFilter / PreScore count matching pods per
topology domain once per pod; Filter and Score per node are dict lookups
(Score also counts the node's own pods for kubernetes.io/hostname constraints, as upstream).
The counts are kept across cycles (node_memo.Aggregate): the next pod of the same workload
only recounts the nodes that changed since, not every node.

Counted pods: same namespace as the incoming pod, labels matching the constraint's selector
(labelSelector plus matchLabelKeys), not terminating (no metadata.deletionTimestamp). A
node takes part in a constraint only when it has every constraint's topologyKey and passes
the constraint's node inclusion policies: nodeAffinityPolicy Honor (the default) requires
the pod's nodeSelector and required node affinity to match the node, nodeTaintsPolicy Honor
(default Ignore) requires the pod to tolerate the node's NoSchedule/NoExecute taints.

Default constraints (args defaultConstraints / defaultingType) apply, as upstream, only to
pods without constraints of their own, with a selector built from the Services,
ReplicationControllers, ReplicaSets and StatefulSets that select the pod (read from the
Handle's listers), and are skipped when that selector is empty.

Public names are re-exported here; the modules are private to the package.
"""

from __future__ import annotations

from polsched.plugins.pod_topology_spread.args import (
    DEFAULT_ARGS,
    DO_NOT_SCHEDULE,
    HONOR,
    IGNORE,
    LABEL_HOSTNAME,
    LABEL_TOPOLOGY_ZONE,
    LIST_DEFAULTING,
    SCHEDULE_ANYWAY,
    SYSTEM_DEFAULT_CONSTRAINTS,
    SYSTEM_DEFAULTING,
    PodTopologySpreadArgs,
    parse_args,
)
from polsched.plugins.pod_topology_spread.common import (
    NAME,
    SpreadConstraint,
    count_matching,
    pod_constraints,
    required_node_affinity,
)
from polsched.plugins.pod_topology_spread.filtering import (
    ERR_REASON_CONSTRAINTS_NOT_MATCH,
    ERR_REASON_NODE_LABEL_NOT_MATCH,
    PRE_FILTER_KEY,
)
from polsched.plugins.pod_topology_spread.plugin import SPEC, PodTopologySpread, new
from polsched.plugins.pod_topology_spread.scoring import PRE_SCORE_KEY

__all__ = [
    "DEFAULT_ARGS", "DO_NOT_SCHEDULE", "ERR_REASON_CONSTRAINTS_NOT_MATCH",
    "ERR_REASON_NODE_LABEL_NOT_MATCH", "HONOR", "IGNORE", "LABEL_HOSTNAME",
    "LABEL_TOPOLOGY_ZONE", "LIST_DEFAULTING", "NAME", "PRE_FILTER_KEY", "PRE_SCORE_KEY",
    "SCHEDULE_ANYWAY", "SPEC", "SYSTEM_DEFAULTING", "SYSTEM_DEFAULT_CONSTRAINTS",
    "PodTopologySpread", "PodTopologySpreadArgs", "SpreadConstraint", "count_matching",
    "new", "parse_args", "pod_constraints", "required_node_affinity",
]
