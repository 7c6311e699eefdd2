"""Building a policy's Pipeline: one function for every caller that runs a policy.

The engine runs it for real and `polsched explain` runs it to show why; both must build
it the same way (same plugins, order, weights, extenders and PostFilter), or explain
would explain some other scheduler. Pure: no I/O.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TYPE_CHECKING

from polsched.framework.listers import Listers
from polsched.framework.nominator import Nominator
from polsched.framework.pipeline import Extender, Pipeline
from polsched.plugins.default_preemption import DefaultPreemption

if TYPE_CHECKING:
    from polsched.api.model import Policy


def build_pipeline(policy: Policy, extenders: Sequence[Extender] = (),
                   rng: random.Random | None = None, *,
                   listers: Listers | None = None,
                   nominator: Nominator | None = None) -> Pipeline:
    """The Pipeline that schedules pods for `policy` (a loaded, validated Policy). `rng`
    breaks ties between equally scored nodes (`polsched simulate` seeds it to repeat).

    `listers` are the cluster objects DefaultPreemption reads (PodDisruptionBudgets);
    `nominator` the pods nominated to nodes, shared by every pipeline of one engine (the
    filters count them; None: nothing is nominated, as offline)."""
    post_filter = DefaultPreemption(listers, rng=rng)
    return Pipeline(policy.filters, policy.scorers, extenders,
                    policy.percentage_of_nodes_to_score, post_filter=post_filter, rng=rng,
                    nominator=nominator)
