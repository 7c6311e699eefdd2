"""NodePorts, shaped after upstream
pkg/scheduler/framework/plugins/nodeports/node_ports_test.go (TestNodePorts) and
k8s.io/kube-scheduler framework types_test.go (TestHostPortInfo_Check)."""

from __future__ import annotations

from typing import Any

import pytest

from polsched.framework import CycleState, NodeInfo, PodInfo, Snapshot, Status
from polsched.framework.status import Code
from polsched.plugins import node_ports
from polsched.plugins.node_ports import ERR_REASON
from tests.builders import make_node, make_pod
from tests.unit.pipelines import args_errors, build_plugin

pytestmark = pytest.mark.unit


def ports(*specs: str) -> list[dict[str, Any]]:
    """"PROTO/IP/PORT" strings as container ports, as upstream's newPod helper."""
    out = []
    for s in specs:
        proto, ip, port = s.split("/")
        out.append({"containerPort": int(port), "hostPort": int(port), "protocol": proto,
                    "hostIP": ip})
    return out


def pod(*specs: str, name: str = "m1", init: list[dict[str, Any]] | None = None) -> PodInfo:
    p = make_pod().name(name).namespace("ns").container(ports=ports(*specs))
    if init:
        p.spec(initContainers=init)
    return p.info()


def node_with(*existing: PodInfo) -> NodeInfo:
    return make_node().name("n").info(*existing)


def run(p: PodInfo, n: NodeInfo) -> Code:
    plugin = build_plugin(node_ports.NAME)
    state = CycleState()
    pre = plugin.pre_filter(state, p, Snapshot([n]))
    if pre.code is Code.SKIP:
        return Code.SKIP
    st: Status = plugin.filter(state, p, n)
    if not st.ok:
        assert st.reasons == (ERR_REASON,)
    return st.code


OK, CONFLICT = Code.SUCCESS, Code.UNSCHEDULABLE

CASES = [
    ("other port", ["UDP/127.0.0.1/8080"], ["UDP/127.0.0.1/9090"], OK),
    ("same udp port", ["UDP/127.0.0.1/8080"], ["UDP/127.0.0.1/8080"], CONFLICT),
    ("same tcp port", ["TCP/127.0.0.1/8080"], ["TCP/127.0.0.1/8080"], CONFLICT),
    ("different host ip", ["TCP/127.0.0.1/8080"], ["TCP/127.0.0.2/8080"], OK),
    ("different protocol", ["UDP/127.0.0.1/8080"], ["TCP/127.0.0.1/8080"], OK),
    ("second udp port conflict", ["UDP/127.0.0.1/8000", "UDP/127.0.0.1/8080"],
     ["UDP/127.0.0.1/8080"], CONFLICT),
    ("first tcp port conflict", ["TCP/127.0.0.1/8001", "UDP/127.0.0.1/8080"],
     ["TCP/127.0.0.1/8001", "UDP/127.0.0.1/8081"], CONFLICT),
    ("first tcp port conflict due to 0.0.0.0 hostIP", ["TCP/0.0.0.0/8001"],
     ["TCP/127.0.0.1/8001"], CONFLICT),
    ("TCP hostPort conflict due to 0.0.0.0 hostIP", ["TCP/10.0.10.10/8001", "TCP/0.0.0.0/8001"],
     ["TCP/127.0.0.1/8001"], CONFLICT),
    ("second tcp port conflict to 0.0.0.0 hostIP", ["TCP/127.0.0.1/8001"],
     ["TCP/0.0.0.0/8001"], CONFLICT),
    ("second different protocol", ["UDP/127.0.0.1/8001"], ["TCP/0.0.0.0/8001"], OK),
    ("UDP hostPort conflict due to 0.0.0.0 hostIP", ["UDP/127.0.0.1/8001"],
     ["TCP/0.0.0.0/8001", "UDP/0.0.0.0/8001"], CONFLICT),
]


@pytest.mark.parametrize(("wanted", "used", "want"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_node_ports(wanted: list[str], used: list[str], want: Code) -> None:
    assert run(pod(*wanted), node_with(pod(*used, name="existing"))) is want


def test_skip_filter_when_pod_has_no_host_ports() -> None:
    assert run(pod(), node_with(pod("TCP/0.0.0.0/80", name="e"))) is Code.SKIP


def test_empty_host_ip_and_protocol_mean_all_ips_and_tcp() -> None:
    p = make_pod().name("p").container(ports=[{"containerPort": 80, "hostPort": 80}]).info()
    assert run(p, node_with(pod("TCP/10.1.1.1/80", name="e"))) is CONFLICT
    assert run(p, node_with(pod("UDP/10.1.1.1/80", name="e"))) is OK


def test_non_sidecar_init_container_host_port_is_not_requested() -> None:
    init = [{"name": "init", "ports": ports("TCP/0.0.0.0/8001")}]
    p = pod(init=init)
    assert run(p, node_with(pod("TCP/0.0.0.0/8001", name="e"))) is Code.SKIP


def test_sidecar_init_container_host_port_conflicts() -> None:
    init = [{"name": "init", "restartPolicy": "Always", "ports": ports("TCP/0.0.0.0/8001")}]
    p = pod(init=init)
    assert run(p, node_with(pod("TCP/0.0.0.0/8001", name="e"))) is CONFLICT


def test_args_are_refused() -> None:
    assert args_errors(node_ports.NAME, {"ports": []})


def test_existing_pods_non_sidecar_init_container_port_is_free() -> None:
    existing = pod(name="e", init=[{"name": "init", "ports": ports("TCP/0.0.0.0/8001")}])
    assert run(pod("TCP/0.0.0.0/8001"), node_with(existing)) is OK
