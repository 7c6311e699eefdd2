"""The control plane side of polsched: SchedulingPolicy lifecycle, hot reload, status,
leader election, the validating webhook and Dedicated mode.

What it is for: turning SchedulingPolicy objects into running schedulers (the Engine of
polsched.scheduler) and reporting what runs in the policy's status. `polsched run`
(operator.py; kopf serves its admission webhook, when asked for) serves every Shared
policy in-process and renders a Deployment for every Dedicated one; `polsched scheduler
--policy NAME` (dedicated/scheduler.py) is that Deployment's process. Its subpackages:

- process/: the process both commands run (options, boot, leases, health, the one
  composition root and lifecycle, Process);
- policies/: the policy lifecycle (the book, the watch, the reconciler, status,
  conditions, last good generation, the bind ledger, policy events);
- dedicated/: Dedicated mode (the Deployment, and the process it runs);
- webhook/: the validating admission webhook (admission, certificates, the webhook
  configuration, its server).

What it must not do: schedule (plugins and the engine decide and bind; this package
only hands them a loaded Policy and says who leads), or talk to the API server about
pods and nodes (cluster/ does). It is the only package that writes a policy's status
(policies/status.py), so that counters stay monotonic and writes stay batched.
"""
