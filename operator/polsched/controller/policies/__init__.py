"""The policy lifecycle: from SchedulingPolicy objects to running schedulers, and back to
each policy's status.

For: the book of policies and who owns which schedulerName (book.py), the watch that
feeds it (watch.py), the reconciler that loads, builds and hot-reloads pipelines in the
engine (reconciler.py), the last good generation kept on the object (lastgood.py), the
status and its conditions, written batched and monotonic (status.py, conditions.py), the
exact bind count across restarts (ledger.py), the policy's Warning events (events.py) and
its extenders' CA Secrets (extender_ca.py).

What it must not do: schedule or bind (polsched.scheduler does), or decide who leads
(controller.process hands the reconciler its leadership). It is the only writer of a
policy's status.
"""
