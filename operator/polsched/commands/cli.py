"""The `polsched` command: a thin dispatcher over subcommands.

Each subcommand lives in its own module and is imported only when it runs, so that
`polsched validate` starts fast and needs no cluster libraries. To add one, write an
`_add_<name>(subparsers)` that registers its arguments and sets `func` to a callable
taking the parsed namespace and returning the exit code, and call it in `build_parser`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from polsched import __version__
from polsched.commands import connection, version


def _run_validate(args: argparse.Namespace) -> int:
    from polsched.api import validate_files
    from polsched.plugins import CATALOG

    return validate_files.run(args.paths, CATALOG, verbose=args.verbose, fmt=args.output)


def _add_validate(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "validate",
        help="check SchedulingPolicy manifests offline (schema and semantics)",
        description="Check SchedulingPolicy manifests against the CRD schema and the same "
                    "rules the operator applies. Prints `file:line:column: path: message` "
                    "per problem (the line of the field, or of its document); exits 1 if "
                    "there is any. Directories are walked for *.yaml and *.yml; `-` reads "
                    "standard input; documents of other kinds are skipped.",
    )
    p.add_argument("paths", nargs="+", metavar="FILE|DIR", help="manifests to check")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="also say which documents were valid or skipped")
    p.add_argument("-o", "--output", choices=("text", "json", "yaml"), default="text",
                   help="text: one line per problem (editors and CI annotate them); "
                        "json or yaml: the problems as a list of objects")
    p.set_defaults(func=_run_validate)


def _run_operator(args: argparse.Namespace) -> int:
    if args.webhook_service and not args.webhook_listen:  # before anything is sent
        raise SystemExit("polsched: --webhook-service needs --webhook-listen (where to serve)")
    if args.webhook_certificates == "external" and not args.webhook_service:
        raise SystemExit("polsched: --webhook-certificates external needs --webhook-service: "
                         "the issuer's certificate names the Service, and its CA injector "
                         "fills the in-cluster configuration's caBundle")
    if (args.webhook_ca_secret or "polsched-webhook-ca") == \
            (args.webhook_secret or "polsched-webhook-tls"):
        raise SystemExit("polsched: --webhook-ca-secret must name another Secret than "
                         "--webhook-secret: the CA key stays apart from the serving "
                         "certificate")
    if args.webhook_client_ca is not None:
        if not args.webhook_listen:
            raise SystemExit("polsched: --webhook-client-ca needs --webhook-listen")
        from polsched.commands.render import read_client_ca_file

        try:  # the webhook's task would otherwise fail later
            read_client_ca_file(args.webhook_client_ca)
        except ValueError as e:
            raise SystemExit(f"polsched: {e}") from e
    from polsched.controller.process import boot

    def load() -> boot.Main:  # imported while the cache's lists are answered
        from polsched.controller import operator

        return operator.operate

    return boot.run(args, load)


def _add_run(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from polsched.controller.process import options

    p = sub.add_parser(
        "run", help="run the operator: a scheduler for every SchedulingPolicy",
        description="The polsched operator. Shared policies are scheduled in this process, "
                    "Dedicated ones get their own Deployment. Only the holder of the Lease "
                    "polsched-operator (in --namespace) binds pods and writes status.")
    options.add_run_arguments(p)
    p.set_defaults(func=_run_operator)


def _run_scheduler(args: argparse.Namespace) -> int:
    from polsched.controller.process import boot

    def load() -> boot.Main:  # imported while the cache's lists are answered
        from polsched.controller.dedicated import scheduler

        return scheduler.schedule

    return boot.run(args, load)


def _add_scheduler(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from polsched.controller.process import options

    p = sub.add_parser(
        "scheduler", help="run the scheduler of one Dedicated SchedulingPolicy",
        description="The process of a Dedicated policy's Deployment: schedules the pods of "
                    "--policy, hot-reloads it and writes its status.")
    options.add_scheduler_arguments(p)
    p.set_defaults(func=_run_scheduler)


def _run_explain(args: argparse.Namespace) -> int:
    from polsched.commands import explain

    return explain.run(args)


def _add_explain(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "explain", help="show why a pod goes to a node: filter verdicts, scores, the winner",
        description="Run a policy's pipeline for one pod, exactly as the scheduler does, and "
                    "show every node's filter verdict (plugin and reason), each scorer's "
                    "raw/normalized/weighted score and the winner. Live: `explain POD -n NS` "
                    "reads the pod, nodes, pods and the policy (by the pod's schedulerName) "
                    "from the cluster. Offline: `explain --policy F --nodes F --pod F` reads "
                    "files (YAML or JSON, a List or several documents). Extenders are called. "
                    "Live, it only reads: the ClusterRole polsched-explain (docs/kubectl.md) "
                    "is all it needs.",
    )
    p.add_argument("name", nargs="?", metavar="POD",
                   help="the pod (live); offline: which pod of --pod's file")
    p.add_argument("--policy", metavar="NAME|FILE",
                   help="live: the SchedulingPolicy's name (default: the one whose "
                        "schedulerName the pod names); offline: a file with the policy")
    p.add_argument("--nodes", metavar="FILE",
                   help="offline: the nodes (and, optionally, pods bound to them)")
    p.add_argument("--pod", metavar="FILE", help="offline: the pod to explain")
    p.add_argument("--pods", metavar="FILE", action="append",
                   help="offline: pods already bound, counted on their nodes (repeatable)")
    p.add_argument("-o", "--output", choices=("table", "json", "yaml"), default="table")
    p.add_argument("--heatmap", metavar="FILE.svg", default=None,
                   help="also draw the node x scorer weighted scores as an SVG heat map")
    connection.add_arguments(p)
    p.set_defaults(func=_run_explain)


def _run_render(args: argparse.Namespace) -> int:
    from polsched.commands import render

    return render.run(args)


def _add_render(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "render", help="print install manifests from the jinja2 templates",
        description="`render operator` prints the install (namespace, CRD, RBAC, operator "
                    "Deployment, webhook and its Service); `render dedicated --policy F` "
                    "prints a Dedicated policy's Deployment as the operator applies it (it "
                    "runs as the install's ServiceAccount polsched-scheduler).")
    p.add_argument("what", choices=("operator", "dedicated"))
    p.add_argument("--policy", metavar="FILE", help="dedicated: the SchedulingPolicy file")
    p.add_argument("--namespace", default="polsched-system",
                   help="where the operator and Dedicated schedulers run (%(default)s)")
    p.add_argument("--image", default=None,
                   help="the polsched image (default: the one this version ships as)")
    p.add_argument("--no-crd", action="store_true", help="operator: leave out the CRD")
    p.add_argument("--no-rbac", action="store_true",
                   help="operator: leave out the Namespace and RBAC")
    p.add_argument("--tenancy-config", metavar="FILE", default=None,
                   help="operator: the admin's SchedulingTenancy (docs/security.md), "
                        "installed as the ConfigMap polsched-tenancy that the operator "
                        "reads (default: none, the operator's protective defaults)")
    p.add_argument("--webhook-allow-from", metavar="CIDR,...", default=None,
                   help="operator: the API server's networks; adds a NetworkPolicy that "
                        "lets only them reach the webhook (default: none, no NetworkPolicy)")
    p.add_argument("--feature-gates", metavar="Name=true,...", default=None,
                   help="operator: Kubernetes feature gates beyond v1.37's defaults that the "
                        "cluster runs with (GenericWorkload, TopologyAwareWorkloadScheduling, "
                        "...), set as the operator's POLSCHED_FEATURE_GATES and handed to "
                        "Dedicated schedulers (default: none)")
    p.add_argument("--webhook-client-ca", metavar="FILE", default=None,
                   help="operator: the CA (PEM) of the API server's webhook client "
                        "certificate; adds the ConfigMap polsched-webhook-client-ca and "
                        "makes the webhook serve only clients it signed (default: none)")
    p.set_defaults(func=_run_render)


def _run_import(args: argparse.Namespace) -> int:
    from polsched.commands import importer

    return importer.run(args)


def _add_import(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "import", help="convert a KubeSchedulerConfiguration or legacy Policy file",
        description="Convert a KubeSchedulerConfiguration (kubescheduler.config.k8s.io/v1, "
                    "one SchedulingPolicy per profile) or a legacy scheduler Policy file "
                    "(kind: Policy: predicates, priorities, extenders) into SchedulingPolicy "
                    "YAML on stdout. What has no equivalent is reported on stderr.")
    p.add_argument("path", metavar="FILE", help="the file to convert (- for stdin)")
    p.add_argument("--name", default=None,
                   help="metadata.name for a legacy Policy (default: the file's stem)")
    p.set_defaults(func=_run_import)


def _run_snapshot(args: argparse.Namespace) -> int:
    from polsched.commands import snapshot

    return snapshot.run(args)


def _add_snapshot(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "snapshot", help="write everything scheduling reads as one diff-friendly file",
        description="List the nodes, pods, namespaces, PVs, PVCs, StorageClasses, CSINodes, "
                    "CSIDrivers, PriorityClasses, Services, ReplicationControllers, "
                    "ReplicaSets, StatefulSets, PodDisruptionBudgets, SchedulingPolicies "
                    "and PodGroups (where served) "
                    "(reads only) and print them as a v1 List sorted by "
                    "kind, namespace and name, without managedFields, resourceVersions and "
                    "heartbeats: a fixture for `polsched simulate --snapshot`. With -f, "
                    "convert a file instead (kwokctl's `snapshot export`, or any objects). "
                    "What scheduling never reads and may be secret (container env values, "
                    "command and args, annotations no plugin reads) is redacted unless "
                    "--no-redact.")
    p.add_argument("-f", "--file", metavar="FILE", default=None,
                   help="read objects from FILE instead of the cluster (- for stdin)")
    p.add_argument("-o", "--output", choices=("json", "yaml"), default="json")
    p.add_argument("--out", metavar="FILE", default=None, help="write there, not to stdout")
    p.add_argument("--no-redact", dest="redact", action="store_false",
                   help="keep env values, command, args and every annotation (the file may "
                        "then hold secrets: do not commit it)")
    connection.add_arguments(p, namespace=False)
    p.add_argument("--node-metrics", action="store_true",
                   help="include every node's usage from the Metrics API (metrics.k8s.io "
                        "NodeMetrics), so that `polsched simulate` previews load-aware "
                        "scorers (TargetLoadPacking, LoadVariationRiskBalancing, "
                        "LowRiskOverCommitment) with it")
    p.set_defaults(func=_run_snapshot)


def _run_simulate(args: argparse.Namespace) -> int:
    from polsched.commands import simulate

    return simulate.run(args)


def _add_simulate(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "simulate", help="what a candidate policy would decide, compared with the current one",
        description="Run the candidate policy's pipeline (the one the operator builds) for "
                    "the pending pods of its schedulerName, in queue order (--replay: the "
                    "bound ones too), against a snapshot file or the live cluster, and "
                    "report where each pod would go or why not, what changes against the "
                    "baseline and the utilisation before and after. PodGroups "
                    "(scheduling.k8s.io/v1beta1) in the snapshot, or served live, are "
                    "placed all or nothing as the operator places them, and reported per "
                    "group. Binds and writes nothing.")
    p.add_argument("-f", "--file", required=True, metavar="FILE",
                   help="the candidate SchedulingPolicy (YAML or JSON)")
    p.add_argument("--policy", metavar="NAME", default=None,
                   help="which policy of FILE, when it holds several")
    p.add_argument("--snapshot", metavar="FILE|live", default="live",
                   help="the cluster: a `polsched snapshot` file (or kwokctl's export), or "
                        "`live` to list it from the API server (default: live)")
    p.add_argument("--baseline", metavar="current|none|FILE", default="current",
                   help="compare with the policy applied now (same name, else same "
                        "schedulerName; from the snapshot or the cluster), with a policy "
                        "file, or with nothing (default: current)")
    p.add_argument("--replay", action="store_true",
                   help="also re-decide the pods of the policy's schedulerName that are "
                        "bound now, in creation order, on the cluster emptied of them")
    p.add_argument("-o", "--output", choices=("table", "json", "yaml", "markdown"),
                   default="table",
                   help="markdown: for a PR comment, with a Mermaid chart of the utilisation")
    p.add_argument("--out", metavar="FILE", default=None, help="write the report there")
    p.add_argument("--plot", metavar="FILE.svg", default=None,
                   help="also draw the utilisation per node (per zone when there are many "
                        "nodes) before and after, and what changed, as an SVG")
    p.add_argument("--fail-on", action="append", metavar="COND", default=[],
                   help="exit non-zero when COND holds (comma-separated or repeated): "
                        "unschedulable (exit 3), new-unschedulable (exit 4), "
                        "changed>N or changed>N%% (exit 5); the smallest code when "
                        "several hold")
    connection.add_arguments(p, namespace=False)
    p.set_defaults(func=_run_simulate)


def _run_completion(args: argparse.Namespace) -> int:
    from polsched.commands import completion

    sys.stdout.write(completion.script(args.shell, build_parser(args.prog)))
    return 0


def _add_completion(sub: argparse._SubParsersAction[argparse.ArgumentParser],
                    prog: str) -> None:
    p = sub.add_parser(
        "completion", help="print a shell completion script (bash, zsh or fish)",
        description="Print the completion script of this command for SHELL. bash: "
                    "`source <(polsched completion bash)`; zsh: `source <(polsched "
                    "completion zsh)`; fish: `polsched completion fish | source`. As "
                    "kubectl-polsched, the script completes `kubectl polsched` too.")
    p.add_argument("shell", choices=("bash", "zsh", "fish"))
    p.set_defaults(func=_run_completion, prog=prog)


PROG = "polsched"
KUBECTL_PROG = "kubectl polsched"  # how kubectl runs us as the plugin kubectl-polsched


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="A Kubernetes-native scheduler driven by SchedulingPolicy resources.")
    parser.add_argument("--version", action="version", version=f"polsched {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _add_validate(sub)
    _add_explain(sub)
    _add_render(sub)
    _add_import(sub)
    _add_snapshot(sub)
    _add_simulate(sub)
    _add_run(sub)
    _add_scheduler(sub)
    version.add_parser(sub)
    _add_completion(sub, prog)
    return parser


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    args = build_parser(prog).parse_args(argv)
    code: int = args.func(args)
    return code


def kubectl_complete() -> int:
    """`kubectl_complete-polsched ARGS... WORD`: kubectl's shell completion runs it to
    complete `kubectl polsched ARGS... WORD`."""
    from polsched.commands import completion

    sys.stdout.write(completion.kubectl_answer(build_parser(KUBECTL_PROG), sys.argv[1:]))
    return 0


def kubectl_main() -> int:
    """The kubectl plugin `kubectl-polsched`: kubectl finds it on PATH and runs it with the
    words after `kubectl polsched`; only the name in help and errors differs."""
    return main(prog=KUBECTL_PROG)


if __name__ == "__main__":
    sys.exit(main())
