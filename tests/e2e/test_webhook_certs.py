"""The webhook's own certificates on a real API server: the operator (as its
ServiceAccount) makes its CA into one Secret and its serving certificate into another,
injects the CA into the ValidatingWebhookConfiguration, renews a certificate that is
about to expire, makes again whatever someone broke in the Secrets (garbage, a key of
another certificate, another CA) while it keeps serving, puts the caBundle back into a
configuration that was re-created or edited, and a running server renews in place; and
`polsched run` creates its namespace where RBAC allows, else exits saying how to fix it."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import http.client
import json
import socket
import ssl
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from polsched.cluster.client import ApiClient
from polsched.controller.webhook import certificates, rotator
from polsched.controller.webhook import configuration as webhook_configuration
from polsched.controller.webhook import server as webhook_server
from tests.conftest import Cluster, unique
from tests.e2e.operators import Harness, wait_for, zone_policy
from tests.e2e.rbac import OPERATOR_NAMESPACE
from tests.old_webhook_pki import old_pki

SECRET = "polsched-webhook-tls"
CA_SECRET = "polsched-webhook-ca"


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
    c.kubectl("delete", "secret", SECRET, CA_SECRET, "-n", OPERATOR_NAMESPACE,
              "--ignore-not-found", check=False)


def secret(h: Harness, name: str = SECRET) -> dict[str, str]:
    p = h.cluster.kubectl("get", "secret", name, "-n", OPERATOR_NAMESPACE, "-o",
                          "jsonpath={.data}", check=False)
    if p.returncode != 0 or not p.stdout:
        return {}
    return {k: base64.b64decode(v).decode(errors="replace")
            for k, v in json.loads(p.stdout).items()}


def put_secret(h: Harness, name: str, data: dict[str, str],
               type_: str = "kubernetes.io/tls") -> None:
    """Write the Secret as an admin would (kubectl apply, what is not given is removed)."""
    h.cluster.kubectl("delete", "secret", name, "-n", OPERATOR_NAMESPACE,
                      "--ignore-not-found", check=False)
    h.cluster.apply({"apiVersion": "v1", "kind": "Secret", "type": type_,
                     "metadata": {"name": name, "namespace": OPERATOR_NAMESPACE},
                     "data": {k: base64.b64encode(v.encode()).decode()
                              for k, v in data.items()}})


def bare_configuration(port: int) -> dict[str, Any]:
    """The ValidatingWebhookConfiguration as an install applies it: no caBundle."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration", "metadata": {"name": "polsched.io"},
        "webhooks": [{
            "name": webhook_configuration.WEBHOOK_NAME, "admissionReviewVersions": ["v1"],
            "sideEffects": "None", "failurePolicy": "Ignore", "timeoutSeconds": 10,
            "clientConfig": {"url": f"https://127.0.0.1:{port}/{webhook_configuration.WEBHOOK_ID}"},
            "rules": [{"apiGroups": ["polsched.io"], "apiVersions": ["v1alpha1"],
                       "operations": ["CREATE", "UPDATE"], "resources": ["schedulingpolicies"],
                       "scope": "Cluster"}]}]}


def install_configuration(h: Harness, port: int) -> None:
    """Applied by an admin first, as the install does: the operator's role may patch the
    configuration but need not create it."""
    h.cluster.apply(bare_configuration(port))


def refuses_invalid_policy(h: Harness, rid: str) -> bool:
    """The webhook answers: an invalid policy is refused naming its field."""
    bad = zone_policy(rid, "a")
    bad["spec"]["filters"].append(
        {"name": "Expression", "args": {"expression": "node.metadata.name =="}})
    p = h.cluster.kubectl("apply", "-f", "-", input=json.dumps(bad), check=False)
    return p.returncode != 0 and "spec.filters[1].args.expression" in p.stderr


def serving(h: Harness, port: int) -> dict[str, str] | None:
    """The stored certificates once they are valid and what the webhook presents:
    the key is the certificate's, the CA signed it, the caBundle is the CA bundle."""
    s, ca = secret(h), secret(h, CA_SECRET)
    try:
        presented = served_certificate(port)
    except OSError:
        return None
    if not (s.get("tls.crt") and ca.get("ca.crt") and ca.get("ca.key")):
        return None
    ok = (certificates.key_matches(s["tls.crt"], s.get("tls.key", ""))
          and certificates.signed_by(s["tls.crt"], ca["ca.crt"])
          and certificates.key_matches(ca["ca.crt"], ca["ca.key"])
          and s.get("ca.crt") == ca["ca.crt"] and ca_bundle(h) == ca["ca.crt"]
          and "-----BEGIN CERTIFICATE-----" in presented
          and same_cert(presented, s["tls.crt"]))
    return {**s, "ca.key": ca["ca.key"]} if ok else None


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
    install_configuration(h, free_port)
    h.operator(f"{rid}-op", "--webhook-listen", f"127.0.0.1:{free_port}",
               "--webhook-secret", SECRET)
    stored = wait_for(lambda: s if (s := secret(h)).get("tls.crt") else None, 60,
                      "Secret " + SECRET)
    # The CA key is not in the serving Secret: it has a Secret of its own.
    assert set(stored) == {"ca.crt", "tls.crt", "tls.key"}
    assert set(secret(h, CA_SECRET)) == {"ca.crt", "ca.key"}
    wait_for(lambda: ca_bundle(h) == stored["ca.crt"], 15, "caBundle = the Secret's CA")
    assert certificates.validity(stored["tls.crt"])[1] - datetime.now(UTC) > timedelta(days=300)
    assert same_cert(served_certificate(free_port), stored["tls.crt"])
    assert refuses_invalid_policy(h, rid)
    # What the apiserver would never send is answered 400 with kopf's reason (the server
    # calls kopf's public WebhookFn), the CA of the Secret verifying the server.
    status, reason = post_review(free_port, stored["ca.crt"], b"not json")
    assert status == 400 and reason.startswith("not JSON")
    unknown = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
               "request": {"uid": "u", "resource": {"group": "example.com", "version": "v1",
                                                    "resource": "widgets"}}}
    status, reason = post_review(free_port, stored["ca.crt"], json.dumps(unknown).encode())
    assert status == 400 and "has no handlers" in reason


def post_review(port: int, ca: str, body: bytes) -> tuple[int, str]:
    """POST `body` to the webhook's route as the apiserver calls it: (status, reason)."""
    ctx = ssl.create_default_context(cadata=ca)
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=10)
    try:
        conn.request("POST", f"/{webhook_configuration.WEBHOOK_ID}", body,
                     {"Content-Type": "application/json"})
        resp = conn.getresponse()
        resp.read()
        return resp.status, resp.reason
    finally:
        conn.close()


def test_a_certificate_about_to_expire_is_renewed_at_start(harness: Harness,
                                                          free_port: int) -> None:
    """An install of an earlier version: certificates its openssl commands made 364 days
    ago, in the serving Secret of the old layout (the CA key in it)."""
    h = harness
    old = old_pki(["127.0.0.1"], datetime.now(UTC) - timedelta(days=364))
    ca, ca_key, cert, key = old.ca, old.ca_key, old.cert, old.key
    b64 = {k: base64.b64encode(v.encode()).decode() for k, v in
           {"ca.crt": ca, "ca.key": ca_key, "tls.crt": cert, "tls.key": key}.items()}
    h.cluster.apply({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                     "metadata": {"name": SECRET, "namespace": OPERATOR_NAMESPACE,
                                  "annotations": {rotator.NAMES_ANNOTATION: "127.0.0.1"}},
                     "data": b64})
    install_configuration(h, free_port)
    h.operator(unique("renew"), "--webhook-listen", f"127.0.0.1:{free_port}",
               "--webhook-secret", SECRET)
    renewed = wait_for(lambda: s if (s := secret(h)) and s.get("tls.crt") != cert else None, 60,
                       "the serving certificate renewed")
    assert renewed["ca.crt"] == ca  # the CA has years left: kept, and so is the caBundle
    # The Secret was of the old layout (the CA key in it): the CA moved to its own Secret.
    assert "ca.key" not in renewed
    assert secret(h, CA_SECRET) == {"ca.crt": ca, "ca.key": ca_key}
    assert certificates.validity(renewed["tls.crt"])[1] - datetime.now(UTC) > timedelta(days=300)
    wait_for(lambda: ca_bundle(h) == ca, 15, "caBundle = the kept CA")
    assert same_cert(served_certificate(free_port), renewed["tls.crt"])


@pytest.mark.parametrize("broken", ["garbage", "mismatched"])
def test_an_invalid_secret_at_start_is_made_again_and_the_webhook_serves(
        harness: Harness, free_port: int, broken: str) -> None:
    """Before: the operator died at start on a garbage or mismatched Secret."""
    h = harness
    rid = unique("badcerts")
    ca, ca_key = certificates.new_ca()
    cert, _ = certificates.new_serving(ca, ca_key, ["127.0.0.1"])
    other_ca, other_ca_key = certificates.new_ca()
    if broken == "garbage":
        put_secret(h, SECRET, {"tls.crt": "garbage", "tls.key": "garbage",
                               "ca.crt": "garbage"})
        put_secret(h, CA_SECRET, {"ca.crt": "garbage", "ca.key": "garbage"}, "Opaque")
    else:  # each part valid alone, none matching: the key of another certificate, the
        _, stray_key = certificates.new_serving(ca, ca_key, ["127.0.0.1"])  # CA key of another
        put_secret(h, SECRET, {"tls.crt": cert, "tls.key": stray_key, "ca.crt": other_ca})
        put_secret(h, CA_SECRET, {"ca.crt": ca, "ca.key": other_ca_key}, "Opaque")
    install_configuration(h, free_port)
    op = h.operator(rid, "--webhook-listen", f"127.0.0.1:{free_port}",
                    "--webhook-secret", SECRET)
    stored = wait_for(lambda: serving(h, free_port), 60,
                      "valid certificates stored, published and served")
    assert stored["ca.crt"] not in (ca, other_ca)  # a CA whose key did not match: new
    assert op.alive()
    assert refuses_invalid_policy(h, rid)


def test_a_secret_broken_while_running_is_made_again_at_once(harness: Harness,
                                                             free_port: int) -> None:
    """Before: the running server kept its certificates in memory, warned at its hourly
    check that it could not read them, and served from a Secret nobody could use."""
    h = harness
    rid = unique("breakcerts")
    install_configuration(h, free_port)
    op = h.operator(rid, "--webhook-listen", f"127.0.0.1:{free_port}",
                    "--webhook-secret", SECRET)
    first = wait_for(lambda: serving(h, free_port), 60, "the first certificates served")
    # The key of another certificate of the same CA into the serving Secret.
    _, stray = certificates.new_serving(first["ca.crt"], first["ca.key"], ["127.0.0.1"])
    h.cluster.kubectl("patch", "secret", SECRET, "-n", OPERATOR_NAMESPACE, "--type", "merge",
                      "-p", json.dumps({"data": {"tls.key": base64.b64encode(
                          stray.encode()).decode()}}))
    second = wait_for(lambda: s if (s := serving(h, free_port)) and s["tls.crt"] != first["tls.crt"]
                      else None, 30, "a new serving certificate, from the same CA")
    assert second["ca.crt"] == first["ca.crt"] and second["tls.key"] != stray
    # Garbage for the CA key: a new CA, published next to the old one, then served.
    h.cluster.kubectl("patch", "secret", CA_SECRET, "-n", OPERATOR_NAMESPACE, "--type",
                      "merge", "-p", json.dumps({"data": {"ca.key": base64.b64encode(
                          b"garbage").decode()}}))
    third = wait_for(lambda: s if (s := serving(h, free_port)) and
                     certificates.first_pem(s["ca.crt"]) != certificates.first_pem(first["ca.crt"])
                     else None, 60, "a new CA, published and served")
    assert certificates.first_pem(first["ca.crt"]) in third["ca.crt"]  # still trusted meanwhile
    assert op.alive()
    assert refuses_invalid_policy(h, rid)


def test_a_deleted_or_edited_configuration_gets_its_ca_bundle_back(harness: Harness,
                                                                  free_port: int) -> None:
    """Before: the caBundle was published once at start (and at renewals): a re-created
    or edited configuration stayed without it."""
    h = harness
    rid = unique("recreate")
    install_configuration(h, free_port)
    h.operator(rid, "--webhook-listen", f"127.0.0.1:{free_port}", "--webhook-secret", SECRET)
    first = wait_for(lambda: serving(h, free_port), 60, "the first certificates served")
    # Deleted, and applied again as the install has it (no caBundle).
    h.cluster.kubectl("delete", "validatingwebhookconfiguration", "polsched.io")
    install_configuration(h, free_port)
    wait_for(lambda: ca_bundle(h) == first["ca.crt"], 30,
             "the re-created configuration has the CA bundle again")
    garbage = base64.b64encode(b"garbage").decode()
    h.cluster.kubectl("patch", "validatingwebhookconfiguration", "polsched.io", "--type",
                      "json", "-p", json.dumps([{"op": "replace",
                                                 "path": "/webhooks/0/clientConfig/caBundle",
                                                 "value": garbage}]))
    wait_for(lambda: ca_bundle(h) == first["ca.crt"], 30, "the caBundle put back")
    assert refuses_invalid_policy(h, rid)


def test_in_cluster_the_ca_bundle_is_injected_again_into_a_recreated_configuration(
        cluster: Cluster, harness: Harness, free_port: int) -> None:
    """The in-cluster publisher (CABundleInjector, as the operator's ServiceAccount):
    the install's configuration, deleted and applied again as `kubectl apply -k` would
    (no caBundle), gets the CA bundle back without a restart."""
    h = harness
    configuration = bare_configuration(free_port)
    h.cluster.apply(configuration)

    async def scenario() -> None:
        client = ApiClient.from_kubeconfig(str(h.operator_kubeconfig))
        manager = rotator.CertificateManager(client, OPERATOR_NAMESPACE, SECRET, ["127.0.0.1"])
        server = webhook_server.ManagedWebhookServer(
            f"127.0.0.1:{free_port}", manager,
            publish=webhook_configuration.CABundleInjector(client))

        async def fn(*_: Any, **__: Any) -> Any:
            return {}

        agen = server(fn)
        config = await agen.__anext__()
        ca_bundle_b64 = config["caBundle"]
        assert ca_bundle_b64 is not None
        bundle = base64.b64decode(ca_bundle_b64).decode()

        async def drain() -> None:
            async for _ in agen:
                pass

        loop = asyncio.get_running_loop()
        task = loop.create_task(drain())

        def recreated() -> None:
            wait_for(lambda: ca_bundle(h) == bundle, 30, "the caBundle injected")
            h.cluster.kubectl("delete", "validatingwebhookconfiguration", "polsched.io")
            h.cluster.apply(configuration)
            wait_for(lambda: ca_bundle(h) == bundle, 30, "the caBundle injected again")

        try:
            await loop.run_in_executor(None, recreated)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            # server() is an async generator; its annotation names the iterator it returns.
            await agen.aclose()  # type: ignore[attr-defined]
            await client.close()

    asyncio.run(scenario())


def test_a_running_server_renews_in_place(cluster: Cluster, harness: Harness,
                                          free_port: int) -> None:
    """The production server and manager against the real API server, with a clock that
    jumps ahead: the served certificate changes without a restart, and a new CA is
    published (next to the old one) before certificates of it are served."""
    jumps: list[timedelta] = []

    def now() -> datetime:
        # The next check sees the clock moved ahead, once; the certificates are dated
        # by the real clock, so the check after that finds them fresh.
        return datetime.now(UTC) + (jumps.pop() if jumps else timedelta(0))

    async def scenario() -> tuple[list[Any], str, str, str]:
        client = ApiClient.from_kubeconfig(cluster.kubeconfig)
        manager = rotator.CertificateManager(client, OPERATOR_NAMESPACE, SECRET,
                                             ["127.0.0.1"], now=now)
        server = webhook_server.ManagedWebhookServer(f"127.0.0.1:{free_port}", manager,
                                                     timing=webhook_server.Timing(
                                                         check_interval=0.1,
                                                         ca_switch_delay=0.1))

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
            # What a certificate-expiry metric reads: the certificate being served.
            assert server.current is not None and same_cert(server.current.cert, third)
            assert server.current.not_after == certificates.not_after(third)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            # server() is an async generator; its annotation names the iterator it returns.
            await agen.aclose()  # type: ignore[attr-defined]
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
