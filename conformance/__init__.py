"""The differential conformance suite: polsched's default policy against kube-scheduler.

- `scenarios`: scenarios generated from a seed, one family each (resources, taints, node
  affinity, pod affinity, spreading, volumes, gates, preemption, ... and mixtures): the
  nodes, the supporting objects (namespaces, StorageClasses, PVs, PVCs, Services,
  ReplicaSets, ResourceClaims) and the pods, in order. Pure data, no I/O.
- `runner`: two control planes from hack/cluster.sh, kube-scheduler (hack/build.sh, default
  profile) on one and `polsched run` (a SchedulingPolicy with default plugins) on the other;
  each plays every scenario on a fresh node set, one pod at a time, and records what
  happened to each pod.
- `compare`: the per-pod comparison, the summary table and the JSON of differences.

`python -m conformance --help` (or `make conformance`) runs it.
"""
