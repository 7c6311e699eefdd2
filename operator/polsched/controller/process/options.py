"""Command-line options of `polsched run` and `polsched scheduler`, and their defaults.

Kept free of heavy imports (kopf, aiohttp, the engine) so that building the CLI parser
stays fast for every subcommand.
"""

from __future__ import annotations

import argparse
import os

DEFAULT_NAMESPACE = "polsched-system"
# Where Dedicated schedulers elect (manifests/rbac/dedicated.yaml): apart from the
# operator's Lease, which their role therefore cannot reach.
DEDICATED_LEASE_NAMESPACE = "polsched-leases"
LEASE_DURATION_SECONDS = 15
RENEW_PERIOD_SECONDS = 2.0
STATUS_INTERVAL_SECONDS = 0.3
DEFAULT_METRICS_LISTEN = "127.0.0.1:8080"
# cluster.node_metrics.DEFAULT_INTERVAL_SECONDS (not imported: this module stays light).
NODE_METRICS_INTERVAL = 15.0


# framework.budget.DEFAULT_ATTEMPT_BUDGET_SECONDS (the parser imports only the standard
# library: test_layers).
DEFAULT_ATTEMPT_BUDGET = 1.0


def _budget(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 <= value <= 60:
        raise argparse.ArgumentTypeError("must be from 0 (no budget) to 60 seconds")
    return value


def _interval(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 1 <= value <= 3600:
        raise argparse.ArgumentTypeError("must be from 1 to 3600 seconds")
    return value


# The extender destination policy's default (api.admission): link-local (the cloud
# metadata service) always; loopback too in a pod (there it is the operator's own pod),
# not outside a cluster, where `polsched run` reaches extenders run beside it.
DEFAULT_EXTENDER_DENY = "169.254.0.0/16,fe80::/10"
DEFAULT_EXTENDER_DENY_IN_CLUSTER = "169.254.0.0/16,fe80::/10,127.0.0.0/8,::1/128"
# kube-scheduler's clientConnection defaults (KubeSchedulerConfiguration v1: qps 50,
# burst 100), not client-go's 5/10: a scheduler writes a Binding and an Event per pod.
DEFAULT_KUBE_API_QPS = 50.0
DEFAULT_KUBE_API_BURST = 100


def _qps(value: str) -> float:
    try:
        qps = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
    if qps == 0 or qps != qps:
        raise argparse.ArgumentTypeError(
            f"{value!r}: give requests per second > 0, or a negative value for no "
            "client-side limit")
    return qps


def _burst(value: str) -> int:
    try:
        burst = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
    if burst < 1:
        raise argparse.ArgumentTypeError(f"{value!r}: the burst must be at least 1")
    return burst


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kubeconfig", default=None,
                   help="kubeconfig file (default: $KUBECONFIG, in-cluster, ~/.kube/config)")
    p.add_argument("--namespace", default=os.environ.get("POD_NAMESPACE", DEFAULT_NAMESPACE),
                   help="namespace of the Lease (and of Dedicated schedulers) "
                        "(default: $POD_NAMESPACE or %(default)s)")
    p.add_argument("--identity", default=None,
                   help="leader-election identity (default: $POD_NAME, else hostname_random); "
                        "a restarted process with the same identity takes its lease back at once")
    p.add_argument("--lease-duration", type=int, default=LEASE_DURATION_SECONDS,
                   help="leaseDurationSeconds (default %(default)s)")
    p.add_argument("--renew-period", type=float, default=RENEW_PERIOD_SECONDS,
                   help="seconds between lease renewals (default %(default)s)")
    p.add_argument("--status-interval", type=float, default=STATUS_INTERVAL_SECONDS,
                   help="at most one status write per policy per this many seconds "
                        "(default %(default)s)")
    p.add_argument("--metrics-listen", metavar="HOST:PORT", default=None,
                   help="serve /metrics (Prometheus), /healthz and /readyz here; an empty "
                        f"string disables them (default: {DEFAULT_METRICS_LISTEN}, skipped "
                        "with a warning when that port is taken; an address given "
                        "explicitly must bind). Serve it beyond this host only behind "
                        "authentication or a NetworkPolicy: it is plain HTTP, unauthenticated")
    p.add_argument("--metrics-secure-listen", metavar="HOST:PORT", default=None,
                   help="also serve /metrics over HTTPS here, to bearer tokens the API "
                        "server authenticates (TokenReview) and allows to get the "
                        "non-resource URL /metrics (SubjectAccessReview), as kube-scheduler's "
                        "secure port; the process's identity then needs to create both "
                        "reviews (default: off)")
    p.add_argument("--metrics-cert-dir", metavar="DIR", default=None,
                   help="tls.crt and tls.key of --metrics-secure-listen (default: a "
                        "self-signed certificate made at start)")
    p.add_argument("--health-listen", metavar="HOST:PORT", default=None,
                   help="also serve /healthz and /readyz (nothing else) here, for kubelet "
                        "probes on the pod's IP while /metrics stays on --metrics-listen "
                        "(default: not served apart)")
    p.add_argument("--kube-api-qps", type=_qps, default=DEFAULT_KUBE_API_QPS,
                   metavar="QPS",
                   help="requests per second to the API server, sustained, as "
                        "kube-scheduler's clientConnection.qps; events have a budget of "
                        "their own of the same size; negative: no client-side limit "
                        "(default %(default)s)")
    p.add_argument("--kube-api-burst", type=_burst, default=DEFAULT_KUBE_API_BURST,
                   metavar="N",
                   help="requests allowed at once above --kube-api-qps, as kube-scheduler's "
                        "clientConnection.burst (default %(default)s)")
    p.add_argument("--node-metrics-interval", type=_interval, default=NODE_METRICS_INTERVAL,
                   metavar="SECONDS",
                   help="how often the load-aware scorers' node usage is read from the "
                        "Metrics API (metrics.k8s.io), for policies whose scorers do not set "
                        "metricsIntervalSeconds; nothing is read without such a policy "
                        "(default %(default)s)")
    p.add_argument("--attempt-budget", type=_budget, default=DEFAULT_ATTEMPT_BUDGET,
                   metavar="SECONDS",
                   help="the time one scheduling attempt's search may take (PreFilter, "
                        "Filter, Score, DRA allocation); past it the attempt ends with a "
                        "FailedScheduling naming this budget and the pod is retried after "
                        "a backoff, so one pod cannot hold the loop every policy shares; "
                        "0: no budget (default %(default)s)")
    p.add_argument("--reserved-scheduler-names", metavar="NAME,...", default="",
                   help="schedulerNames no policy may claim, besides default-scheduler "
                        "(reserved unless --allow-default-scheduler-name): the profiles of "
                        "the other schedulers in the cluster, which polsched cannot see "
                        "(default: none)")
    p.add_argument("--allow-default-scheduler-name", action="store_true",
                   help="let a policy claim default-scheduler, the name of every pod that "
                        "names no scheduler: only when polsched replaces kube-scheduler, "
                        "which must not run (docs/replacing-kube-scheduler.md; default: "
                        "refused)")
    p.add_argument("--tenancy-config", metavar="FILE", default=None,
                   help="the cluster admin's SchedulingTenancy (YAML): who may claim which "
                        "schedulerName, which of TaintToleration, NodeAffinity and "
                        "NodeUnschedulable a policy may switch off, caps on Dedicated "
                        "policies, the name grace period; see docs/security.md (default: "
                        "anyone claims any free name, none of the three may be switched off, "
                        "no caps, 300 s grace)")
    p.add_argument("--allow-disabling", metavar="PLUGIN,...", default="",
                   help="of TaintToleration, NodeAffinity and NodeUnschedulable, which a "
                        "policy may switch off, besides the tenancy configuration's "
                        "allowDisabling (the operator passes its own to the Dedicated "
                        "schedulers it deploys; default: none)")
    p.add_argument("--extender-deny", metavar="CIDR,...", default=None,
                   help="extender URLs whose host is or resolves into these networks are "
                        "refused, when the policy is applied (spec.extenders[i].urlPrefix) "
                        "and when connecting; the API server's own address is always "
                        "refused. '' refuses only the API server (default: link-local, "
                        f"{DEFAULT_EXTENDER_DENY}, and in a pod loopback too, "
                        f"{DEFAULT_EXTENDER_DENY_IN_CLUSTER})")
    p.add_argument("--extender-allow", metavar="CIDR,...", default="",
                   help="exceptions to --extender-deny, e.g. 127.0.0.0/8 for extenders on "
                        "the same host when running outside a cluster (default: none)")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    _common(p)
    p.add_argument("--webhook-listen", metavar="HOST:PORT", default=None,
                   help="serve the validating admission webhook here with a CA of its own "
                        "and keep the ValidatingWebhookConfiguration 'polsched.io' pointing "
                        "at it (off by default)")
    p.add_argument("--webhook-service", metavar="NAMESPACE/NAME[:PORT]", default=None,
                   help="in-cluster: the apiserver reaches the webhook through this Service "
                        "(port default 443); the CA and serving certificate are kept in "
                        "--webhook-secret and renewed before they expire, and the CA goes into "
                        "the caBundle of the ValidatingWebhookConfiguration polsched.io that "
                        "manifests/ ship (failurePolicy Fail)")
    p.add_argument("--webhook-secret", default=None,
                   help="the Secret (in --namespace, type kubernetes.io/tls) holding the "
                        "webhook's serving certificate and key and the CA bundle (default "
                        "with --webhook-service: polsched-webhook-tls); whatever in it is "
                        "invalid (not PEM, key not matching, not signed by the CA, expiring, "
                        "other names) is made again")
    p.add_argument("--webhook-ca-secret", default=None,
                   help="the Secret (in --namespace) holding the webhook's CA certificate "
                        "and key, apart from --webhook-secret so that only the operator "
                        "reads the CA key (default polsched-webhook-ca; used with "
                        "--webhook-service or --webhook-secret)")
    p.add_argument("--webhook-certificates", choices=("self-managed", "external"),
                   default="self-managed",
                   help="self-managed: the operator makes, renews and injects the webhook's "
                        "CA and serving certificate (--webhook-secret, --webhook-ca-secret); "
                        "external: another issuer (cert-manager) keeps tls.crt and tls.key in "
                        "--webhook-secret, which the operator serves as they are and reloads "
                        "when the Secret changes, never writing it nor the caBundle (which "
                        "cert-manager's CA injector fills); needs --webhook-service "
                        "(default %(default)s)")
    p.add_argument("--webhook-client-ca", metavar="FILE", default=None,
                   help="authenticate the API server: serve the webhook only to clients "
                        "presenting a certificate signed by a CA of this PEM file, as the "
                        "API server does with an AdmissionConfiguration whose "
                        "WebhookAdmissionConfiguration kubeConfigFile names a client "
                        "certificate; read at start (docs/security.md, 'Who may reach the "
                        "webhook'; default: any client)")
    p.add_argument("--annotate-decisions", action="store_true",
                   help="record on each pod bound, through its Binding, the scorer that "
                        "decided (annotation polsched.io/deciding-scorer) and how many nodes "
                        "were feasible (polsched.io/feasible-nodes; on a pod placed on an "
                        "OpportunisticBatching hint, polsched.io/hint-ties: how many kept "
                        "nodes tied for it); off by default since it "
                        "writes to users' pods (`make demo` turns it on for its table)")
    p.add_argument("--shadow-budget", type=float, default=0.2, metavar="SHARE",
                   help="the share of time the shadow policies of one policy may take for "
                        "their decisions (spec.shadowOf); past it attempts are counted as "
                        "skipped, so a saturated policy loses at most about this share of "
                        "its throughput (default %(default)s)")
    p.add_argument("--dedicated-image", default=None,
                   help="image of Dedicated schedulers (default: in a pod, the image of "
                        "its container `operator`; else ghcr.io/polsched/polsched:VERSION)")


def add_scheduler_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--policy", required=True, help="the SchedulingPolicy to run")
    _common(p)
    p.add_argument("--leader-elect", choices=("true", "false", "auto"), default="true",
                   help="elect with a Lease named after the policy (default true, as "
                        "kube-scheduler); false only for a single process run by hand "
                        "(auto: the same as true)")
    p.add_argument("--lease-namespace", default=DEDICATED_LEASE_NAMESPACE,
                   help="the namespace of the policy's Lease; the install grants Dedicated "
                        "schedulers Leases only there, apart from the operator's Lease "
                        "(default %(default)s)")
    p.add_argument("--extender-ca-dir", metavar="DIR", default=None,
                   help="the extenders' CA Secrets of --namespace as mounted in this pod, "
                        "DIR/SECRET/ca.crt (the Deployment the operator renders sets it); "
                        "without it they are read through the API, which the install's "
                        "role for Dedicated schedulers does not allow")
