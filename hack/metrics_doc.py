"""Print docs/metrics.md, the metrics reference, from the metrics polsched registers
(polsched.scheduler.metrics.ALL):

    .venv/bin/python hack/metrics_doc.py > docs/metrics.md

tests/unit/scheduler/test_metrics_doc.py fails when the page and the code disagree."""

from __future__ import annotations

import sys

from polsched.scheduler import metrics

if __name__ == "__main__":
    sys.stdout.write(metrics.reference())
