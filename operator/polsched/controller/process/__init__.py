"""The process: what `polsched run` and `polsched scheduler` are made of before and around
the policies they schedule.

For: the command-line options (options.py, kept light: the CLI parser imports it), the
first steps before the heavy imports (boot.py: logging, the garbage collector's policy,
the cache's first lists), the credentials and request budgets of its clients, leader
election on a Lease (leases.py), /healthz and /readyz (health.py), the event loop's
watchdog, the operator's namespace, and the one composition root with the lifecycle that
both commands share (server.py: Process, after kube-scheduler's cmd/kube-scheduler/app).

What it must not do: know what a policy says (controller.policies) or how a Dedicated
Deployment looks (controller.dedicated); the parts here are handed their callbacks.
"""
