"""The destination policy refuses what is never an extender (issue 36), whatever
--extender-deny and --extender-allow say: unspecified addresses (0.0.0.0 and [::] reach
loopback), multicast and reserved ones, the cloud metadata endpoints by address and by
name, and IPv6 forms that embed a refused IPv4 address (NAT64, mapped, compatible,
translated, 6to4); loopback stays as the flags set it (allowed outside a cluster, where
the tests' extenders listen on 127.0.0.1)."""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest

from polsched.extender import HTTPExtender
from polsched.extender.destinations import OPEN, DestinationPolicy, parse_networks
from polsched.framework.interfaces import ExtenderError
from tests.unit.extender.conftest import StartExtender
from tests.unit.extender.fake_extender import config, make_node, make_pod, run

pytestmark = pytest.mark.unit

# The defaults of `polsched run --extender-deny` (its help and docs/api-reference.md):
# outside a pod, and in one.
OUTSIDE = DestinationPolicy(deny=parse_networks("169.254.0.0/16,fe80::/10", "deny"))
IN_POD = DestinationPolicy(deny=parse_networks(
    "169.254.0.0/16,fe80::/10,127.0.0.0/8,::1/128", "deny"))
# An admin who allows everything still cannot open these.
ALLOW_ALL = DestinationPolicy(allow=(ipaddress.ip_network("0.0.0.0/0"),
                                     ipaddress.ip_network("::/0")))


@pytest.mark.parametrize(("host", "why"), [
    ("0.0.0.0", "unspecified"),
    ("0.1.2.3", "unspecified"),
    ("[::]", "unspecified"),
    ("224.0.0.1", "multicast"),
    ("ff02::1", "multicast"),
    ("240.0.0.1", "reserved"),
    ("255.255.255.255", "reserved"),
    ("169.254.169.254", "metadata"),
    ("fd00:ec2::254", "metadata"),
    ("100.100.100.200", "metadata"),
    ("192.0.0.192", "metadata"),
    ("168.63.129.16", "metadata"),
    ("metadata.google.internal", "metadata"),
    ("metadata.google.internal.", "metadata"),
    ("64:ff9b::a9fe:a9fe", "IPv4 169.254.169.254"),      # NAT64 well-known prefix
    ("64:ff9b::0.0.0.0", "unspecified"),
    ("::ffff:169.254.169.254", "IPv4 169.254.169.254"),  # IPv4-mapped
    ("::169.254.169.254", "IPv4 169.254.169.254"),       # IPv4-compatible
    ("::ffff:0:169.254.169.254", "IPv4 169.254.169.254"),  # IPv4-translated
    ("2002:a9fe:a9fe::1", "IPv4 169.254.169.254"),       # 6to4
    ("64:ff9b:1::a9fe:a9fe", "local-use NAT64"),
])
@pytest.mark.parametrize("policy", [OUTSIDE, IN_POD, ALLOW_ALL], ids=["outside", "in-pod",
                                                                     "allow-all"])
def test_never_an_extender(policy: DestinationPolicy, host: str, why: str) -> None:
    assert why in policy.refuses_address(host, 80)


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "localhost", "64:ff9b::127.0.0.1",
                                  "::ffff:127.0.0.1"])
def test_loopback_follows_the_flags(host: str) -> None:
    assert OUTSIDE.refuses_address(host, 80) == ""
    assert "loopback" in IN_POD.refuses_address(host, 80)


@pytest.mark.parametrize("host", ["10.1.2.3", "192.168.0.9", "2001:4860::1",
                                  "64:ff9b::8.8.8.8", "extender.team-a.svc"])
def test_ordinary_destinations_pass(host: str) -> None:
    assert IN_POD.refuses_address(host, 80) == ""


def test_open_applies_no_policy() -> None:
    assert OPEN.refuses_address("0.0.0.0", 80) == ""
    assert OPEN.refuses_address("169.254.169.254", 80) == ""


def test_zero_address_is_refused_when_connecting(start_extender: StartExtender) -> None:
    # An extender on 127.0.0.1, which the out-of-cluster default allows: by 0.0.0.0 (the
    # same socket, reached through the unspecified address) it is refused.
    server = start_extender({"/filter": lambda args: {"NodeNames": ["n1"]}})
    port = int(server.url.rsplit(":", 1)[1].strip("/"))

    async def call(url: str) -> Any:
        ext = HTTPExtender(config(url, filter_verb="filter", node_cache_capable=True),
                           destinations=OUTSIDE)
        try:
            return await ext.filter(make_pod(), [make_node("n1")])
        finally:
            await ext.close()

    with pytest.raises(ExtenderError, match="0.0.0.0 is an unspecified"):
        run(call(f"http://0.0.0.0:{port}/"))
    assert server.requests == []
    feasible, _, _ = run(call(f"http://127.0.0.1:{port}/"))
    assert [n.name for n in feasible] == ["n1"]
