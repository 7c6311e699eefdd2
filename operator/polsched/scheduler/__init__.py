"""The scheduler runtime: the queue of pending pods, the scheduling loop per policy
(engine.py), background binding and the events and pod conditions kube-scheduler writes.

The Engine (polsched.scheduler.engine) is the surface the operator builds on; everything
else here is its parts. This package imports none of them itself: importing one part (the
metrics, at the start of `polsched run`) does not import the engine and its plugins.
"""
