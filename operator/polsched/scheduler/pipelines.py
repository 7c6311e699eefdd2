"""Building a policy's Pipeline: one function for every caller that runs a policy.

The engine runs it for real and `polsched explain` runs it to show why; both must build
it the same way (same plugins, order, weights, extenders and PostFilter), or explain
would explain some other scheduler. Pure: no I/O.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TYPE_CHECKING

from polsched.framework.pipeline import Extender, Pipeline, PostFilter

if TYPE_CHECKING:
    from polsched.api.model import Policy

post_filter: PostFilter | None
try:
    from polsched.plugins.default_preemption import preemption_message as post_filter
except ImportError:  # pragma: no cover - the plugin is optional
    post_filter = None


def build_pipeline(policy: Policy, extenders: Sequence[Extender] = (),
                   rng: random.Random | None = None) -> Pipeline:
    """The Pipeline that schedules pods for `policy` (a loaded, validated Policy). `rng`
    breaks ties between equally scored nodes (`polsched simulate` seeds it to repeat)."""
    return Pipeline(policy.filters, policy.scorers, extenders,
                    policy.percentage_of_nodes_to_score, post_filter=post_filter, rng=rng)
