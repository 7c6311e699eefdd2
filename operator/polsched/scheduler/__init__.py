"""The scheduler runtime: the queue of pending pods, the scheduling loop per policy
(engine.py), background binding and the events and pod conditions kube-scheduler writes.

The Engine is the surface the operator builds on; everything else here is its parts.
"""

from polsched.scheduler.engine import Counters, Engine, SchedulerStats

__all__ = ["Counters", "Engine", "SchedulerStats"]
