"""What a policy's load-aware scorers can see of node usage: its MetricsAvailable
condition (for the policy's status) and which pipelines read node usage at all.

Pure: reads the LoadSource's state and the snapshot, no I/O.
"""

from __future__ import annotations

from polsched.framework.load import LoadSource, describe_missing
from polsched.framework.runtime import Pipeline
from polsched.framework.types import Snapshot
from polsched.plugins.trimaran import LoadAwareScorer

METRICS_AVAILABLE = "MetricsAvailable"
# Reasons (CamelCase, as Kubernetes condition reasons).
METRICS_FRESH = "MetricsFresh"
NODES_WITHOUT_METRICS = "NodesWithoutMetrics"
METRICS_API_UNAVAILABLE = "MetricsAPIUnavailable"


def reads_node_load(pipeline: Pipeline) -> bool:
    """Whether some scorer of `pipeline` reads node usage: the one answer the engine (its
    MetricsAvailable condition), `polsched explain` (its node usage section) and `polsched
    simulate` (whether to list the Metrics API) share."""
    return any(isinstance(e.plugin, LoadAwareScorer) for e in pipeline.scorers)


def reads_load(source: LoadSource | None, pipeline: Pipeline) -> bool:
    """Whether some scorer of `pipeline` reads node usage (from `source`)."""
    return source is not None and reads_node_load(pipeline)


def condition(source: LoadSource | None, pipeline: Pipeline,
              snapshot: Snapshot) -> tuple[bool, str, str] | None:
    """(status, reason, message) of MetricsAvailable for a policy running `pipeline`;
    None when it has no load-aware scorer. False names the nodes without fresh metrics
    (they get the scorers' neutral score) and how long ago each was last served."""
    if source is None or not reads_load(source, pipeline):
        return None
    names = [n.name for n in snapshot.nodes]
    missing = [st for n in names if (st := source.state(n)).load is None]
    error = getattr(source, "last_error", None)
    if error and len(missing) == len(names):
        return (False, METRICS_API_UNAVAILABLE,
                f"the Metrics API does not answer ({error}); every node gets the neutral "
                "score of the load-aware scorers")
    if missing:
        return (False, NODES_WITHOUT_METRICS,
                f"{describe_missing(missing)}: {len(missing)} of {len(names)} nodes get the "
                "neutral score of the load-aware scorers")
    interval = getattr(source, "interval", None)
    every = f", polled every {interval:g}s" if isinstance(interval, int | float) else ""
    return True, METRICS_FRESH, f"fresh metrics for all {len(names)} nodes{every}"
