"""Where extenders may be called: the operator's destination policy (`polsched run
--extender-*`), which the loader checks a policy's urlPrefix against as written and the
extender client checks each resolved address against when it connects.

Below the API layer, as extender/config.py: the extender client needs it and must not
import api/ (tests/unit/test_layers.py); api.admission re-exports it as part of the
admission rules. Purely data-manipulative, no I/O: nothing here resolves a name.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# Link-local: 169.254.169.254 is the cloud metadata service (instance credentials) on
# most clouds, fe80::/10 its IPv6 counterpart. Never a legitimate extender.
LINK_LOCAL: tuple[IPNetwork, ...] = (ipaddress.ip_network("169.254.0.0/16"),
                                     ipaddress.ip_network("fe80::/10"))
LOOPBACK: tuple[IPNetwork, ...] = (ipaddress.ip_network("127.0.0.0/8"),
                                   ipaddress.ip_network("::1/128"))

# The names under which pods reach the API server (the `kubernetes` Service).
API_SERVER_NAMES = ("kubernetes", "kubernetes.default", "kubernetes.default.svc",
                    "kubernetes.default.svc.cluster.local")

# Refused whatever --extender-deny and --extender-allow say (the flags choose among
# destinations that can be legitimate; these never are):
# - "this network" (0.0.0.0/8: connecting to 0.0.0.0 reaches the host's own loopback,
#   as [::] does), multicast, and the reserved 240.0.0.0/4 with the broadcast address;
# - IPv6 unspecified, multicast, and the reserved blocks (::/8 outside the forms that
#   embed an IPv4 address, which are unwrapped and checked as that address first);
# - the cloud metadata endpoints, where instances get their credentials.
ALWAYS_REFUSED_V4: tuple[ipaddress.IPv4Network, ...] = (
    ipaddress.IPv4Network("0.0.0.0/8"), ipaddress.IPv4Network("224.0.0.0/4"),
    ipaddress.IPv4Network("240.0.0.0/4"))
METADATA_ADDRESSES: frozenset[IPAddress] = frozenset(ipaddress.ip_address(a) for a in (
    "169.254.169.254",  # AWS, GCP, Azure, Oracle, OpenStack, DigitalOcean, Hetzner, ...
    "169.254.170.2",    # AWS ECS task metadata and credentials
    "fd00:ec2::254",    # AWS IMDS over IPv6
    "168.63.129.16",    # Azure WireServer (certificates, extension settings)
    "100.100.100.200",  # Alibaba Cloud
    "192.0.0.192",      # Oracle Cloud (OCI classic)
    "169.254.0.23",     # Tencent Cloud (metadata.tencentyun.com)
))
METADATA_NAMES = frozenset({
    "metadata", "metadata.google.internal", "metadata.goog", "instance-data",
    "instance-data.ec2.internal", "metadata.tencentyun.com", "metadata.platformequinix.com",
})
# NAT64 (RFC 6052): the well-known prefix carries an IPv4 address in its last 32 bits,
# and the gateway connects there; the local-use prefix (RFC 8215) embeds it in a place
# that depends on the prefix length the network chose, so its forms cannot be checked.
_NAT64_WELL_KNOWN = ipaddress.IPv6Network("64:ff9b::/96")
_NAT64_LOCAL_USE = ipaddress.IPv6Network("64:ff9b:1::/48")
# SIIT IPv4-translated addresses (RFC 2765, ::ffff:0:a.b.c.d) and the deprecated
# IPv4-compatible ones (::a.b.c.d).
_IPV4_TRANSLATED = ipaddress.IPv6Network("::ffff:0:0:0/96")
_IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")


def _embedded_v4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 form carries and leads to (mapped, NAT64, translated,
    compatible, 6to4), None for any other address."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    low = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip in _NAT64_WELL_KNOWN or ip in _IPV4_TRANSLATED:
        return low
    if ip in _IPV4_COMPATIBLE and int(ip) > 1:  # not :: nor ::1
        return low
    return None


def _never_an_extender(ip: IPAddress, shown: str) -> str:
    """Why `ip` (already unwrapped) is refused whatever the flags say; "" otherwise."""
    if ip in METADATA_ADDRESSES:
        return f"{shown} is a cloud metadata endpoint"
    if isinstance(ip, ipaddress.IPv4Address):
        for net in ALWAYS_REFUSED_V4:
            if ip in net:
                kind = ("an unspecified (this-network)" if net.prefixlen == 8 else
                        "a multicast" if ip.is_multicast else "a reserved")
                return f"{shown} is {kind} address (in {net})"
        return ""
    if ip.is_unspecified:
        return f"{shown} is an unspecified address"
    if ip.is_multicast:
        return f"{shown} is a multicast address"
    if ip in _NAT64_LOCAL_USE:
        return f"{shown} is a local-use NAT64 address (in {_NAT64_LOCAL_USE})"
    if ip.teredo is not None:
        return f"{shown} is a Teredo tunnel address"
    if ip.is_reserved and not ip.is_loopback:
        return f"{shown} is a reserved address"
    return ""


def parse_networks(text: str, what: str) -> tuple[IPNetwork, ...]:
    """Comma-separated CIDRs (a bare address is a /32 or /128). Raises ValueError naming
    `what` and the entry that does not parse."""
    out: list[IPNetwork] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            out.append(ipaddress.ip_network(part, strict=False))
        except ValueError as err:
            raise ValueError(f"{what}: {part!r} is not a CIDR such as 10.0.0.0/8 or "
                             f"fe80::/10 ({err})") from None
    return tuple(out)


def _address(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.strip("[]").split("%", 1)[0])
    except ValueError:
        return None


@dataclass(frozen=True)
class DestinationPolicy:
    """Where extenders may be called (`polsched run --extender-*`).

    An address is refused when it falls in `deny` and in no `allow` network, or when it
    is, with the port, one of the API server's own endpoints (`api_servers`: "host:port"
    as the operator reaches the API server, and the in-cluster Service's); a host named
    like the `kubernetes` Service is refused as the API server too."""

    deny: tuple[IPNetwork, ...] = LINK_LOCAL + LOOPBACK  # the in-cluster default
    allow: tuple[IPNetwork, ...] = ()
    api_servers: frozenset[tuple[str, int]] = frozenset()
    # The destinations that are never an extender (_never_an_extender: unspecified,
    # multicast, reserved, the metadata endpoints, forms of them embedded in IPv6),
    # refused whatever `allow` says. Off only in OPEN, where no policy applies.
    fixed: bool = True

    def with_api_server(self, host: str, port: int) -> DestinationPolicy:
        key = (host.strip("[]").lower(), port)
        return DestinationPolicy(self.deny, self.allow, self.api_servers | {key}, self.fixed)

    def refuses_address(self, host: str, port: int) -> str:
        """Why `host` (an IP address or a name) on `port` is refused; "" when it is not."""
        name = host.strip("[]").lower().rstrip(".")
        if (name, port) in self.api_servers:
            return f"{host}:{port} is the API server's own address"
        if name in API_SERVER_NAMES or name.startswith("kubernetes.default."):
            return f"{host} is the API server's Service"
        if self.fixed and name in METADATA_NAMES:
            return f"{host} is a cloud metadata endpoint"
        # "localhost" is loopback by definition (RFC 6761), whatever a resolver says.
        ip = _address("127.0.0.1" if name == "localhost" or name.endswith(".localhost")
                      else name)
        if ip is None:
            return ""
        shown = str(ip)
        if isinstance(ip, ipaddress.IPv6Address):
            embedded = _embedded_v4(ip)
            if embedded is not None:
                ip = embedded
                shown = f"{shown} (IPv4 {embedded})"
        if self.fixed:
            why = _never_an_extender(ip, shown)
            if why:
                return why
        for net in self.deny:
            if ip.version == net.version and ip in net:
                if any(ip.version == a.version and ip in a for a in self.allow):
                    return ""
                kind = ("link-local" if ip.is_link_local else
                        "loopback" if ip.is_loopback else "refused")
                return f"{shown} is a {kind} address (in {net})"
        return ""


# Load without a destination policy: every address allowed (`polsched validate`, tests
# that build an Engine themselves). The operator always passes one.
OPEN = DestinationPolicy(deny=(), allow=(), fixed=False)
