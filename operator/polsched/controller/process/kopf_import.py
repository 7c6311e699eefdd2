"""kopf, imported without its probe for the kubernetes client.

kopf probes for the kubernetes package at import (kopf._cogs.helpers.thirdparty, for its
adopt()/label() helpers on kubernetes model objects, which polsched never passes it), and
importing the kubernetes package costs ~0.4 s of CPU. It is hidden from that probe only;
polsched.cluster.kubeconfig still imports it when a kubeconfig needs its loaders (exec
plugins, auth providers).

Only what needs kopf imports this module: the admission webhook (controller.webhook) and
kopf's login handler. `polsched run` without --webhook-listen never does (bench/NOTES.md
"Issue 15, fourth pass: start-up").
"""

import sys

_hide = "kopf" not in sys.modules and "kubernetes" not in sys.modules
if _hide:
    sys.modules["kubernetes"] = None  # type: ignore[assignment]  # "not installed"
try:
    import kopf as kopf
finally:
    if _hide:
        del sys.modules["kubernetes"]

__all__ = ["kopf"]
