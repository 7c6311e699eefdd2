"""Issue 26 (findings 4, 5, 6): no policy, CA, extender or name can stop the others, on a
real API server with the operator run as its ServiceAccount.

- A CA that is not PEM (inline caData or a caSecretRef Secret) is reported Valid=False in
  its own policy, naming the field, while another policy keeps binding.
- /healthz and /readyz go 503 when the scheduling loop has died.
- A real HTTP extender on loopback answering 300 MB gives a clear FailedScheduling
  error, the operator's peak RSS (VmHWM, /proc) stays bounded, other policies bind.
- httpTimeout 999h and schedulerName default-scheduler are refused at apply time (the
  CRD's CEL rules; the webhook for reserved names), a shadow its target does not allow is
  refused by the webhook and never attached by the operator.
"""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import threading
import urllib.error
import urllib.request
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from polsched.api import load_policy
from polsched.cluster.client import ApiClient
from polsched.controller.process.endpoints import probes_for
from polsched.controller.process.health import Liveness
from polsched.framework.cycle_state import CycleState
from polsched.framework.interfaces import FilterPlugin, Handle
from polsched.framework.registry import Catalog, PluginSpec, Registry
from polsched.framework.status import SUCCESS, Status
from polsched.framework.types import NodeInfo, PodInfo
from polsched.scheduler import metrics
from polsched.scheduler.engine import Engine
from tests.conftest import Cluster, NodeFactory, unique
from tests.e2e.operators import Harness, response_json, wait_for, zone_policy
from tests.e2e.rbac import OPERATOR_NAMESPACE
from tests.e2e.scheduling import RUN, bound_node, eventually, failed_scheduling, pod_manifest

# The operator's peak RSS may grow by at most this while 300 MB answers arrive (it was
# ~50 MiB before and after on the dev machine; buffering one answer adds 300 MB or more).
RSS_GROWTH_BOUND_BYTES = 64 * 1024 * 1024


def policy_events(h: Harness, name: str) -> list[dict[str, Any]]:
    """events.k8s.io Events regarding SchedulingPolicy `name` (in `default`)."""
    out = h.cluster.kubectl_json("get", "events.events.k8s.io", "-n", "default", "-o", "json")
    return [e for e in out["items"] if (e.get("regarding") or {}).get("kind")
            == "SchedulingPolicy" and e["regarding"].get("name") == name]


def ext_policy(name: str, zone: str, extender: Mapping[str, Any]) -> dict[str, Any]:
    return zone_policy(name, zone, extenders=[{"filterVerb": "filter",
                                               "nodeCacheCapable": True, **extender}])


# -- finding 4: a bad CA is one policy's problem ------------------------------------------


def test_a_non_pem_ca_is_reported_naming_the_field_while_another_policy_binds(
        harness: Harness, namespace: str, nodes: NodeFactory) -> None:
    h = harness
    rid = unique("ca")
    for i in range(2):
        nodes(f"{rid}-a{i}", labels={"zone": "a"})
    secret = f"{rid}-ca"
    h.cluster.kubectl("create", "secret", "generic", secret, "-n", OPERATOR_NAMESPACE,
                      "--from-literal=ca.crt=this is not a certificate")
    try:
        h.operator(f"{rid}-op")
        # Both bad policies first: each was enough to stop every policy's reconcile.
        inline = h.apply_policy(ext_policy(f"{rid}-inline", "a", {
            "urlPrefix": "https://extender.invalid:8443/",
            "tlsConfig": {"caData": base64.b64encode(b"not PEM at all").decode()}}))
        in_secret = h.apply_policy(ext_policy(f"{rid}-secret", "a", {
            "urlPrefix": "https://extender.invalid:8443/",
            "tlsConfig": {"caSecretRef": {"name": secret, "namespace": OPERATOR_NAMESPACE}}}))
        good = h.apply_policy(zone_policy(f"{rid}-good", "a"))
        h.wait_ready(good, 60)
        h.create_pods(namespace, [f"p{i}" for i in range(5)], good)
        wait_for(lambda: len(h.bound(namespace)) == 5, 30, "the good policy's 5 pods bound")

        valid = wait_for(lambda: (c := h.condition(inline, "Valid")).get("status") == "False"
                         and c, 20, "Valid=False on the inline CA policy")
        assert valid["reason"] == "InvalidSpec"
        assert "spec.extenders[0].tlsConfig.caData: must be base64-encoded PEM CA " \
               "certificates" in valid["message"]
        valid = wait_for(lambda: (c := h.condition(in_secret, "Valid")).get("status")
                         == "False" and c, 20, "Valid=False on the Secret CA policy")
        assert valid["reason"] == "BuildFailed", valid
        assert "spec.extenders[0].tlsConfig.caSecretRef" in valid["message"]
        assert f"Secret {OPERATOR_NAMESPACE}/{secret} key ca.crt must be PEM CA " \
               "certificates" in valid["message"]
        assert h.condition(in_secret, "Ready")["status"] == "False"
        event = wait_for(lambda: [e for e in policy_events(h, in_secret)
                                  if e["reason"] == "BuildFailed"], 20,
                         "a BuildFailed Warning event on the policy")[0]
        assert event["type"] == "Warning" and "caSecretRef" in event["note"]

        # The Secret fixed: the policy's next event builds it (no restart, no new spec).
        pem = subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
             "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj", "/CN=ca",
             "-keyout", "/dev/null"], check=True, capture_output=True, text=True).stdout
        h.cluster.apply({"apiVersion": "v1", "kind": "Secret",
                         "metadata": {"name": secret, "namespace": OPERATOR_NAMESPACE},
                         "data": {"ca.crt": base64.b64encode(pem.encode()).decode()}})
        h.cluster.kubectl("annotate", "spol", in_secret, "e2e.polsched.io/touch=1")
        wait_for(lambda: h.condition(in_secret, "Valid").get("status") == "True", 20,
                 "Valid=True once the Secret holds a certificate")
        h.wait_ready(in_secret, 20)
    finally:
        h.cluster.kubectl("delete", "secret", secret, "-n", OPERATOR_NAMESPACE,
                          "--ignore-not-found", check=False)


# -- finding 4: a dead scheduling loop is unhealthy -----------------------------------------


class LoopKiller(BaseException):
    """What the scheduling loop does not catch (it catches Exception)."""


class KillingFilter(FilterPlugin):
    NAME = "KillTheLoop"

    def __init__(self, args: Mapping[str, Any], handle: Handle) -> None:
        pass

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        if pod.labels.get("kill") == "yes":
            raise LoopKiller("a plugin bug that escapes the scheduling loop")
        if pod.labels.get("kill") == "cancel":
            raise asyncio.CancelledError()  # as if an await inside it had been cancelled
        return SUCCESS


def killing_policy(name: str) -> Any:
    registry = Registry([PluginSpec(KillingFilter.NAME, filter=KillingFilter)])
    return load_policy({"apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
                        "metadata": {"name": name, "generation": 1},
                        "spec": {"filters": [{"name": KillingFilter.NAME}]}},
                       Catalog(registry))


def test_a_plugins_stray_cancellation_fails_its_pod_not_the_loop(
        cluster: Cluster, namespace: str, nodes: NodeFactory) -> None:
    """A CancelledError the loop did not ask for (a plugin's) is that pod's error: the
    loop goes on with the next pod."""
    rid = unique("cancel")
    nodes(f"{rid}-n", labels={RUN: rid})
    policy = killing_policy(rid)

    async def main() -> tuple[str, bool]:
        client = ApiClient.from_kubeconfig(cluster.kubeconfig)
        engine = Engine(client)
        try:
            await engine.start()
            engine.apply(policy)
            pods = f"/api/v1/namespaces/{namespace}/pods"
            await client.post(pods, pod_manifest(namespace, "cancelled", rid, rid,
                                                 labels={"kill": "cancel"}))
            note = await failed_scheduling(client, namespace, "cancelled")
            await client.post(pods, pod_manifest(namespace, "after", rid, rid))
            await bound_node(client, namespace, "after")
            return note, engine.loop_alive()
        finally:
            await engine.stop()
            await client.close()

    note, alive = asyncio.run(main())
    assert "internal error: CancelledError" in note
    assert alive


def test_healthz_goes_unhealthy_when_the_scheduling_loop_is_dead(
        cluster: Cluster, namespace: str, nodes: NodeFactory) -> None:
    """The probes the operator serves (probes_for, metrics.serve) over an Engine on the
    real API server: 200 while pods are scheduled, 503 once the loop has died."""
    rid = unique("loop")
    nodes(f"{rid}-n", labels={RUN: rid})
    policy = killing_policy(rid)

    async def main() -> list[int]:
        client = ApiClient.from_kubeconfig(cluster.kubeconfig)
        engine = Engine(client)
        ready, healthy = probes_for(engine, Liveness())
        runner = await metrics.serve("127.0.0.1:0", ready=ready, healthy=healthy)
        port = runner.addresses[0][1]

        def get(path: str) -> int:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
                    return int(r.status)
            except urllib.error.HTTPError as e:
                return e.code

        codes: list[int] = []
        try:
            await engine.start()
            engine.apply(policy)
            pods = f"/api/v1/namespaces/{namespace}/pods"
            await client.post(pods, pod_manifest(namespace, "fine", rid, rid))

            async def bound() -> bool:
                pod = await client.get(f"{pods}/fine")
                return bool(pod["spec"].get("nodeName"))

            await eventually(bound, 30, "the first pod bound")
            codes += [await asyncio.to_thread(get, "/healthz"),
                      await asyncio.to_thread(get, "/readyz")]
            await client.post(pods, pod_manifest(namespace, "killer", rid, rid,
                                                 labels={"kill": "yes"}))

            async def unhealthy() -> bool:
                return await asyncio.to_thread(get, "/healthz") == 503

            await eventually(unhealthy, 30, "/healthz 503")
            codes += [await asyncio.to_thread(get, "/healthz"),
                      await asyncio.to_thread(get, "/readyz")]
            assert not engine.loop_alive()
        finally:
            await runner.cleanup()
            await engine.stop()
            await client.close()
        return codes

    assert asyncio.run(main()) == [200, 200, 503, 503]


# -- finding 5: a 300 MB extender answer ------------------------------------------------------


HUGE = 300 * 1024 * 1024
CHUNK = b"\x20" * (1024 * 1024)


class _Flood(ThreadingHTTPServer):
    daemon_threads = True
    answers = 0

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # the client hung up on the flood: expected


class _FloodHandler(BaseHTTPRequestHandler):
    """A real extender gone wrong: every filter call answers 300 MB (Content-Length
    announced, then streamed as fast as the client reads)."""

    protocol_version = "HTTP/1.1"
    server: _Flood

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers["Content-Length"]))
        self.server.answers += 1
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(HUGE))
        self.end_headers()
        self.wfile.write(b'{"NodeNames": [], "Error": "')
        for _ in range(HUGE // len(CHUNK)):
            self.wfile.write(CHUNK)
        self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass


def peak_rss(pid: int) -> int:
    """The process's peak resident set (VmHWM), in bytes, from /proc."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM in /proc/{pid}/status")


def test_a_300_mb_extender_answer_is_a_clear_error_with_memory_bounded(
        harness: Harness, namespace: str, nodes: NodeFactory) -> None:
    h = harness
    rid = unique("flood")
    for i in range(2):
        nodes(f"{rid}-a{i}", labels={"zone": "a"})
    flood = _Flood(("127.0.0.1", 0), _FloodHandler)
    threading.Thread(target=flood.serve_forever, args=(0.05,), daemon=True).start()
    url = f"http://127.0.0.1:{flood.server_address[1]}/"
    try:
        op = h.operator(f"{rid}-op")
        flooded = h.apply_policy(ext_policy(f"{rid}-flood", "a", {
            "urlPrefix": url, "httpTimeout": "30s"}))
        good = h.apply_policy(zone_policy(f"{rid}-good", "a"))
        h.wait_ready(flooded, 60)
        h.wait_ready(good, 20)
        assert op.proc is not None
        before = peak_rss(op.proc.pid)
        print(f"operator VmHWM before the flood: {before / 2**20:.0f} MiB")
        h.create_pods(namespace, ["victim"], flooded)
        h.create_pods(namespace, [f"p{i}" for i in range(5)], good)

        def note() -> str:
            resp = h.core.list_namespaced_event(namespace, _preload_content=False)
            for e in response_json(resp)["items"]:
                if e.get("reason") == "FailedScheduling" and \
                        e["involvedObject"]["name"] == "victim":
                    return str(e.get("message") or "")
            return ""

        message = wait_for(note, 60, "FailedScheduling for the flooded policy's pod")
        print("FailedScheduling:", message)
        assert f"failed filter with extender at URL {url}filter: its answer is larger " \
               "than the " in message
        assert "bytes allowed" in message
        assert len(message) < 1100 and "          " not in message  # never the body
        wait_for(lambda: len(h.bound(namespace)) == 5, 30, "the good policy's 5 pods bound")
        assert "victim" not in h.bound(namespace)
        # Let it try again (backoff) at least once more: still bounded.
        wait_for(lambda: flood.answers >= 2, 60, "a second answer")
        peak = peak_rss(op.proc.pid)
        print(f"operator VmHWM after {flood.answers} answers of 300 MB: "
              f"{peak / 2**20:.0f} MiB")
        assert peak < before + RSS_GROWTH_BOUND_BYTES, \
            f"peak RSS {peak / 2**20:.0f} MiB, {before / 2**20:.0f} MiB before"
        assert op.alive()
    finally:
        flood.shutdown()
        flood.server_close()


# -- findings 5 and 6: refused at apply time ---------------------------------------------------


def apply_refused(h: Harness, body: dict[str, Any]) -> str:
    p = h.cluster.kubectl("apply", "-f", "-", input=json.dumps(body), check=False)
    print("kubectl apply:", p.stderr.strip())
    assert p.returncode != 0, f"{body['metadata']['name']} was admitted"
    return str(p.stderr)


def test_crd_refuses_a_999h_http_timeout_and_default_scheduler(harness: Harness) -> None:
    """No webhook needed: the CRD's CEL rules refuse both, naming the field."""
    h = harness
    rid = unique("crd")
    err = apply_refused(h, ext_policy(rid, "a", {"urlPrefix": "http://ext.example:80/",
                                                 "httpTimeout": "999h"}))
    assert "spec.extenders[0].httpTimeout" in err and "at most 60s" in err
    err = apply_refused(h, zone_policy(rid, "a", scheduler="default-scheduler"))
    assert "spec.schedulerName" in err and "default-scheduler" in err
    named = zone_policy("default-scheduler", "a")
    del named["spec"]["schedulerName"]
    err = apply_refused(h, named)
    assert "default-scheduler" in err
    # A shadow claims no name; a valid timeout passes.
    h.apply_policy(ext_policy(rid, "a", {"urlPrefix": "http://ext.example:80/",
                                         "httpTimeout": "60s"}))


def test_webhook_refuses_reserved_names_bad_cas_and_unauthorised_shadows(
        harness: Harness, free_port: int) -> None:
    h = harness
    rid = unique("admit")
    h.operator(f"{rid}-op", "--webhook-listen", f"127.0.0.1:{free_port}",
               "--reserved-scheduler-names", f"{rid}-volcano")
    try:
        def configured() -> bool:
            p = h.cluster.kubectl("get", "validatingwebhookconfiguration", "polsched.io",
                                  "-o", "jsonpath={.webhooks[*].clientConfig.url}", check=False)
            return f"127.0.0.1:{free_port}" in p.stdout
        wait_for(configured, 20, "the ValidatingWebhookConfiguration", interval=0.2)

        err = apply_refused(h, zone_policy(f"{rid}-v", "a", scheduler=f"{rid}-volcano"))
        assert "denied the request" in err
        assert "spec.schedulerName" in err and "reserved by the cluster admin" in err

        err = apply_refused(h, ext_policy(f"{rid}-ca", "a", {
            "urlPrefix": "https://ext.example/",
            "tlsConfig": {"caData": base64.b64encode(b"garbage").decode()}}))
        assert "denied the request" in err
        assert "spec.extenders[0].tlsConfig.caData" in err

        h.cluster.kubectl("create", "secret", "generic", f"{rid}-ca", "-n",
                          OPERATOR_NAMESPACE, "--from-literal=ca.crt=garbage")
        err = apply_refused(h, ext_policy(f"{rid}-secret", "a", {
            "urlPrefix": "https://ext.example/",
            "tlsConfig": {"caSecretRef": {"name": f"{rid}-ca",
                                          "namespace": OPERATOR_NAMESPACE}}}))
        assert "denied the request" in err
        assert "spec.extenders[0].tlsConfig.caSecretRef: Secret " \
               f"{OPERATOR_NAMESPACE}/{rid}-ca key ca.crt must be PEM CA certificates" in err

        err = apply_refused(h, ext_policy(f"{rid}-meta", "a", {
            "urlPrefix": "http://169.254.169.254/latest/"}))
        assert "spec.extenders[0].urlPrefix" in err and "cloud metadata endpoint" in err

        live = h.apply_policy(zone_policy(f"{rid}-live", "a"))
        h.wait_ready(live, 30)
        shadow = zone_policy(f"{rid}-shadow", "b", shadowOf=live)
        err = apply_refused(h, shadow)
        assert "spec.shadowOf" in err and "spec.allowedShadows must list" in err
        h.cluster.kubectl("patch", "spol", live, "--type=merge", "-p",
                          json.dumps({"spec": {"allowedShadows": [f"{rid}-shadow"]}}))
        h.apply_policy(shadow)
        ready = wait_for(lambda: (c := h.condition(f"{rid}-shadow", "Ready")).get("status")
                         == "True" and c, 20, "the allowed shadow attached")
        assert ready["reason"] == "Shadowing"
    finally:
        h.cluster.kubectl("delete", "validatingwebhookconfiguration", "polsched.io",
                          "--ignore-not-found", check=False)
        h.cluster.kubectl("delete", "secret", f"{rid}-ca", "-n", OPERATOR_NAMESPACE,
                          "--ignore-not-found", check=False)


def test_an_unauthorised_shadow_is_never_attached(harness: Harness) -> None:
    """Without the webhook (or with the target created after the shadow), the operator
    enforces spec.allowedShadows itself, and follows it both ways."""
    h = harness
    rid = unique("shadow")
    h.operator(f"{rid}-op")
    live = h.apply_policy(zone_policy(f"{rid}-live", "a"))
    h.wait_ready(live, 60)
    shadow = h.apply_policy(zone_policy(f"{rid}-shadow", "b", shadowOf=live))
    ready = wait_for(lambda: (c := h.condition(shadow, "Ready")).get("reason")
                     == "ShadowNotAllowed" and c, 20, "Ready=False ShadowNotAllowed")
    assert ready["status"] == "False"
    assert f"spec.allowedShadows must list '{shadow}'" in ready["message"]
    assert "shadow" not in h.status(shadow)
    wait_for(lambda: [e for e in policy_events(h, shadow)
                      if e["reason"] == "ShadowNotAllowed"], 20,
             "a ShadowNotAllowed Warning event")
    h.cluster.kubectl("patch", "spol", live, "--type=merge", "-p",
                      json.dumps({"spec": {"allowedShadows": [shadow]}}))
    wait_for(lambda: h.condition(shadow, "Ready").get("reason") == "Shadowing", 20,
             "attached once allowed")
    h.cluster.kubectl("patch", "spol", live, "--type=merge", "-p",
                      json.dumps({"spec": {"allowedShadows": []}}))
    wait_for(lambda: h.condition(shadow, "Ready").get("reason") == "ShadowNotAllowed", 20,
             "detached once no longer allowed")
