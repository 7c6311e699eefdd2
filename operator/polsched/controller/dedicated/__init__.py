"""Dedicated mode: a SchedulingPolicy with spec.runtime.mode Dedicated gets a scheduler
process of its own.

For: the Deployment the operator renders and applies for such a policy (deployments.py),
and that Deployment's process, `polsched scheduler --policy NAME` (scheduler.py), which
runs the same Process as the operator, restricted to its one policy.

What it must not do: touch anything but its own Deployment (and its ServiceAccount and
RBAC) in the operator's namespace; the policy lifecycle stays controller.policies'.
"""
