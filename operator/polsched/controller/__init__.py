"""The control plane side of polsched: SchedulingPolicy lifecycle, hot reload, status,
leader election, the validating webhook and Dedicated mode.

What it is for: turning SchedulingPolicy objects into running schedulers (the Engine of
polsched.scheduler) and reporting what runs in the policy's status. `polsched run`
(operator.py, on kopf) serves every Shared policy in-process and renders a Deployment for
every Dedicated one; `polsched scheduler --policy NAME` (dedicated.py) is that
Deployment's process.

What it must not do: schedule (plugins and the engine decide and bind; this package
only hands them a loaded Policy and says who leads), or talk to the API server about
pods and nodes (cluster/ does). It is the only package that writes a policy's status
(status.py), so that counters stay monotonic and writes stay batched.
"""

import sys

# kopf probes for the kubernetes client at import (kopf._cogs.helpers.thirdparty, for its
# adopt()/label() helpers on kubernetes model objects, which polsched never passes it) and
# importing the kubernetes package costs ~0.4 s of CPU: a quarter of `polsched run`'s
# start-up. It is hidden from that probe only; polsched.cluster.kubeconfig still imports
# it when a kubeconfig needs its loaders (exec plugins, auth providers).
if "kopf" not in sys.modules and "kubernetes" not in sys.modules:
    sys.modules["kubernetes"] = None  # type: ignore[assignment]  # "not installed"
    try:
        import kopf  # noqa: F401
    finally:
        del sys.modules["kubernetes"]
