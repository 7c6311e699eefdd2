"""The scheduling queue of one policy, split as upstream's pkg/scheduler/backend/queue:
scheduling_queue.py (SchedulingQueue, the queue the engine uses), active.py (activeQ),
backoff.py (backoffQ), unschedulable.py (the unschedulable pods), pod_groups.py (a pod
group as one queue entity), journal.py (the events kept for pods in flight), types.py
(QueuedPod, QueuedPodGroup, where each waits) and core.py (the state and the moves
between the queues that the others share).

Import from the module that defines a name; this file imports none of them.
"""
