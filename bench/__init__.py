"""`make bench`: polsched, kube-scheduler and a no-op binder side by side on one control
plane (issue 7). The entry point is bench/run.py; bench/RESULTS.md says how to read it.

Must not: be imported by the polsched package or by `make test`'s unit tests; it starts
processes and creates thousands of API objects.
"""
