"""The webhook's own certificates on a real API server: the operator (as its
ServiceAccount) makes its CA and serving certificate into a Secret, injects the CA into
the ValidatingWebhookConfiguration, renews a certificate that is about to expire, and a
running server renews in place; and `polsched run` creates its namespace where RBAC
allows, else exits saying how to fix it."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import socket
import ssl
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from polsched.cluster.client import ApiClient
from polsched.controller import webhook
from tests.conftest import Cluster, unique
from tests.e2e.operators import Harness, wait_for, zone_policy
from tests.e2e.rbac import OPERATOR_NAMESPACE

SECRET = "polsched-webhook-tls"


@pytest.fixture(scope="session")
def harness_session(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Harness:
    return Harness(cluster, Path(tmp_path_factory.mktemp("polsched-webhook")))


@pytest.fixture
def harness(harness_session: Harness) -> Iterator[Harness]:
    yield harness_session
    harness_session.reset()
    c = harness_session.cluster
    c.kubectl("delete", "validatingwebhookconfiguration", "polsched.io", "--ignore-not-found",
              check=False)
    c.kubectl("delete", "secret", SECRET, "-n", OPERATOR_NAMESPACE, "--ignore-not-found",
              check=False)


@pytest.fixture
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def secret(h: Harness) -> dict[str, str]:
    p = h.cluster.kubectl("get", "secret", SECRET, "-n", OPERATOR_NAMESPACE, "-o",
                          "jsonpath={.data}", check=False)
    if p.returncode != 0 or not p.stdout:
        return {}
    import json
    return {k: base64.b64decode(v).decode() for k, v in json.loads(p.stdout).items()}


def served_certificate(port: int) -> str:
    """The PEM certificate the webhook presents on 127.0.0.1:port."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), 5) as raw, \
            ctx.wrap_socket(raw) as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return ssl.DER_cert_to_PEM_cert(der)


def same_cert(a: str, b: str) -> bool:
    return ssl.PEM_cert_to_DER_cert(a) == ssl.PEM_cert_to_DER_cert(b)


def ca_bundle(h: Harness) -> str:
    p = h.cluster.kubectl("get", "validatingwebhookconfiguration", "polsched.io", "-o",
                          "jsonpath={.webhooks[0].clientConfig.caBundle}", check=False)
    return base64.b64decode(p.stdout).decode() if p.returncode == 0 and p.stdout else ""


def test_operator_keeps_its_certificates_in_a_secret(harness: Harness, free_port: int) -> None:
    h = harness
    rid = unique("certs")
    h.operator(f"{rid}-op", "--webhook-listen", f"127.0.0.1:{free_port}",
               "--webhook-secret", SECRET)
    stored = wait_for(lambda: secret(h).get("tls.crt") and secret(h), 60, "Secret " + SECRET)
    assert set(stored) == {"ca.crt", "ca.key", "tls.crt", "tls.key"}
    wait_for(lambda: ca_bundle(h) == stored["ca.crt"], 15, "caBundle = the Secret's CA")
    assert webhook.validity(stored["tls.crt"])[1] - datetime.now(UTC) > timedelta(days=300)
    assert same_cert(served_certificate(free_port), stored["tls.crt"])
    bad = zone_policy(rid, "a")
    bad["spec"]["filters"].append(  # type: ignore[index]
        {"name": "Expression", "args": {"expression": "node.metadata.name =="}})
    import json
    p = h.cluster.kubectl("apply", "-f", "-", input=json.dumps(bad), check=False)
    print("kubectl apply of an invalid policy:", p.stderr.strip())
    assert p.returncode != 0 and "spec.filters[1].args.expression" in p.stderr


def test_a_certificate_about_to_expire_is_renewed_at_start(harness: Harness,
                                                          free_port: int) -> None:
    h = harness
    ca, ca_key = webhook.new_ca()
    cert, key = webhook.new_serving(ca, ca_key, ["127.0.0.1"], days=1)
    b64 = {k: base64.b64encode(v.encode()).decode() for k, v in
           {"ca.crt": ca, "ca.key": ca_key, "tls.crt": cert, "tls.key": key}.items()}
    h.cluster.apply({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                     "metadata": {"name": SECRET, "namespace": OPERATOR_NAMESPACE,
                                  "annotations": {webhook.NAMES_ANNOTATION: "127.0.0.1"}},
                     "data": b64})
    h.operator(unique("renew"), "--webhook-listen", f"127.0.0.1:{free_port}",
               "--webhook-secret", SECRET)
    renewed = wait_for(lambda: (s := secret(h)) and s.get("tls.crt") != cert and s, 60,
                       "the serving certificate renewed")
    assert renewed["ca.crt"] == ca  # the CA has years left: kept, and so is the caBundle
    assert webhook.validity(renewed["tls.crt"])[1] - datetime.now(UTC) > timedelta(days=300)
    wait_for(lambda: ca_bundle(h) == ca, 15, "caBundle = the kept CA")
    assert same_cert(served_certificate(free_port), renewed["tls.crt"])


def test_a_running_server_renews_in_place(cluster: Cluster, harness: Harness,
                                          free_port: int) -> None:
    """The production server and manager against the real API server, with a clock that
    jumps ahead: the served certificate changes without a restart, and a new CA is
    published (next to the old one) before certificates of it are served."""
    jumps: list[timedelta] = []

    def now() -> datetime:
        # The next check sees the clock moved ahead, once; openssl dates the certificates
        # it makes by the real clock, so the check after that finds them fresh.
        return datetime.now(UTC) + (jumps.pop() if jumps else timedelta(0))

    async def scenario() -> tuple[list[Any], str, str, str]:
        client = ApiClient.from_kubeconfig(cluster.kubeconfig)
        manager = webhook.CertificateManager(client, OPERATOR_NAMESPACE, SECRET,
                                             ["127.0.0.1"], now=now)
        server = webhook.ManagedWebhookServer(f"127.0.0.1:{free_port}", manager,
                                              check_interval=0.1, ca_switch_delay=0.1)

        async def fn(*_: Any, **__: Any) -> Any:
            return {}

        configs: list[Any] = []
        agen = server(fn)
        configs.append(await agen.__anext__())

        async def drain() -> None:
            async for config in agen:
                configs.append(config)

        task = asyncio.get_running_loop().create_task(drain())
        loop = asyncio.get_running_loop()
        try:
            first = await loop.run_in_executor(None, served_certificate, free_port)
            jumps.append(timedelta(days=250))  # the serving certificate's last third

            async def served_changes(old: str) -> str:
                for _ in range(200):
                    now = await loop.run_in_executor(None, served_certificate, free_port)
                    if not same_cert(now, old):
                        return now
                    await asyncio.sleep(0.05)
                raise AssertionError("the served certificate did not change")

            second = await served_changes(first)
            jumps.append(timedelta(days=2500))  # the CA's last third
            third = await served_changes(second)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await agen.aclose()
            await client.close()
        return configs, first, second, third

    configs, first, second, third = asyncio.run(scenario())
    stored = secret(harness)
    assert same_cert(third, stored["tls.crt"])
    assert len(configs) == 2, configs  # the start, and the CA rotation (not the renewal)
    old_ca = base64.b64decode(configs[0]["caBundle"]).decode()
    new_bundle = base64.b64decode(configs[1]["caBundle"]).decode()
    assert new_bundle == stored["ca.crt"] and new_bundle.endswith(old_ca)
    assert configs[1]["url"] == f"https://127.0.0.1:{free_port}"


def test_run_creates_its_missing_namespace(harness: Harness) -> None:
    h = harness
    ns = unique("polsched-ns")
    admin = Path(h.cluster.kubeconfig)
    p = h.process(admin, "run", "--namespace", ns, "--metrics-listen", "")
    try:
        wait_for(lambda: h.cluster.kubectl("get", "lease", "polsched-operator", "-n", ns,
                                           check=False).returncode == 0, 60,
                 f"the operator's Lease in the namespace {ns} it created")
        assert p.alive()
        assert "created namespace " + ns in p.log()
    finally:
        p.stop()
        h.cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def test_run_without_rights_to_create_its_namespace_exits_clearly(harness: Harness) -> None:
    h = harness
    ns = unique("polsched-ns")
    p = h.process(h.operator_kubeconfig, "run", "--namespace", ns, "--metrics-listen", "")
    assert p.proc is not None
    code = p.proc.wait(90)
    print(p.log())
    assert code != 0
    assert f"namespace '{ns}' does not exist and this user may not create it" in p.log()
    assert f"kubectl create namespace {ns}" in p.log()
