"""Preemption, as kube-scheduler's pkg/scheduler/framework/preemption: what DefaultPreemption
(polsched.plugins.default_preemption, the plugin) decides with, and the executor that
carries the decision out.

- victims.py: the facts read of a victim (util.go): terminating by preemption, start
  time, importance, the PodDisruptionBudgets an eviction breaks;
- evaluator.py: the Evaluator (preemption.go Preempt, findCandidates), asking the
  plugin what is the plugin's (eligibility, SelectVictimsOnNode, how many candidates);
- candidates.py: a node with its victims, the extenders' narrowing and the choice of
  one (candidate.go, preemption.go's callExtenders and pickOneNodeForPreemption);
- pod_group.py: workload-aware preemption (podgrouppreemption.go);
- executor.py: the API writes, off the scheduling loop (executor.go).

All but the executor are computation on a snapshot: they import the framework only, so
the plugin can use them. The executor is a scheduler part (it holds the API client); no
module here imports a plugin, and this file imports none of them.
"""
