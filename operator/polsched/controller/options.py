"""Command-line options of `polsched run` and `polsched scheduler`, and their defaults.

Kept free of heavy imports (kopf, aiohttp, the engine) so that building the CLI parser
stays fast for every subcommand.
"""

from __future__ import annotations

import argparse
import os

DEFAULT_NAMESPACE = "polsched-system"
LEASE_DURATION_SECONDS = 15
RENEW_PERIOD_SECONDS = 2.0
STATUS_INTERVAL_SECONDS = 0.3


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
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    _common(p)
    p.add_argument("--webhook-listen", metavar="HOST:PORT", default=None,
                   help="serve the validating admission webhook here with a self-signed CA "
                        "and keep the ValidatingWebhookConfiguration 'polsched.io' pointing "
                        "at it (off by default)")
    p.add_argument("--webhook-cert-dir", default=None,
                   help="where to write the webhook's CA and certificate (default: a temp dir)")
    p.add_argument("--dedicated-image", default=None,
                   help="image of Dedicated schedulers "
                        "(default: ghcr.io/polsched/polsched:VERSION)")


def add_scheduler_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--policy", required=True, help="the SchedulingPolicy to run")
    _common(p)
    p.add_argument("--leader-elect", choices=("auto", "true", "false"), default="auto",
                   help="auto (default): elect with a Lease named after the policy when "
                        "spec.runtime.replicas > 1")
