"""The commands: `polsched` and its subcommands (cli.py), and the offline tools they run.

For: the argument parser (cli.py) and one module per tool that reads a policy and a
cluster without running the operator: explain.py and simulate.py (a dry run of the
engine's own pipeline on one pod, or on every pending pod), render.py (the manifests and
RBAC), importer.py (a KubeSchedulerConfiguration to a SchedulingPolicy), snapshot.py (a
cluster snapshot to a file) and dryrun.py (what explain and simulate share: the policy a
pod would get and the extenders it would call).

What it must not do: decide anything the engine decides (the tools call the engine's
functions), or import anything here: `polsched --help` imports cli.py, and cli.py loads
its commands lazily, so that asking for help loads nothing but the argument parser.
`polsched run` and `polsched scheduler` hand over to polsched.controller.
"""
