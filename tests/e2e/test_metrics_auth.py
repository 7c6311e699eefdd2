"""--metrics-secure-listen on a real API server: /metrics over HTTPS lets in the tokens
the API server authenticates and allows to get /metrics, and no one else, with the RBAC
that manifests/monitoring/metrics-auth-rbac.yaml grants (the install's RBAC has none of
it: the listener is off by default)."""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Cluster, unique
from tests.e2e.operators import Harness, free_port, wait_for
from tests.e2e.rbac import OPERATOR_NAMESPACE

RBAC = Path(__file__).resolve().parents[2] / "manifests" / "monitoring" / \
    "metrics-auth-rbac.yaml"


@pytest.fixture
def harness(cluster: Cluster, tmp_path: Path) -> Iterator[Harness]:
    h = Harness(cluster, tmp_path)
    yield h
    h.reset()


@pytest.fixture
def review_rbac(cluster: Cluster) -> Iterator[None]:
    cluster.kubectl("apply", "-f", str(RBAC))
    yield
    cluster.kubectl("delete", "-f", str(RBAC), "--ignore-not-found")


def get(url: str, token: str | None) -> tuple[int, str]:
    # The listener's certificate is self-signed (no --metrics-cert-dir): as a
    # ServiceMonitor with insecureSkipVerify, the scrape does not verify it.
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    request = urllib.request.Request(url)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=5, context=context) as r:
            return int(r.status), r.read().decode()
    except urllib.error.HTTPError as e:
        return int(e.code), e.read().decode()
    except OSError:
        return 0, ""


def test_only_tokens_allowed_to_get_metrics_read_them(
        harness: Harness, cluster: Cluster, review_rbac: None) -> None:
    rid = unique("scrape")
    reader, other = f"{rid}-prometheus", f"{rid}-other"
    for sa in (reader, other):
        cluster.kubectl("create", "serviceaccount", sa, "-n", OPERATOR_NAMESPACE)
    cluster.kubectl("create", "clusterrolebinding", reader,
                    "--clusterrole=polsched-metrics-reader",
                    f"--serviceaccount={OPERATOR_NAMESPACE}:{reader}")
    try:
        tokens = {sa: cluster.kubectl("create", "token", sa, "-n", OPERATOR_NAMESPACE
                                      ).stdout.strip() for sa in (reader, other)}
        port = free_port()
        url = f"https://127.0.0.1:{port}/metrics"
        op = harness.operator(f"{rid}-op", "--metrics-secure-listen", f"127.0.0.1:{port}")
        code, text = wait_for(lambda: (lambda r: r if r[0] == 200 else None)(
            get(url, tokens[reader])), 30, "the reader's scrape answered 200")
        assert "scheduler_schedule_attempts_total" in text
        assert "polsched_build_info{" in text
        assert get(url, tokens[other])[0] == 403
        assert get(url, None)[0] == 401
        assert get(url, "not-a-token")[0] == 401
        assert "serving /metrics to authorized tokens on https://127.0.0.1" in op.log()
    finally:
        cluster.kubectl("delete", "clusterrolebinding", reader, "--ignore-not-found")
        for sa in (reader, other):
            cluster.kubectl("delete", "serviceaccount", sa, "-n", OPERATOR_NAMESPACE,
                            "--ignore-not-found")
