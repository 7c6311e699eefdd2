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
# every major cloud; fe80::/10 and fd00:ec2::254 likewise. Never a legitimate extender.
LINK_LOCAL: tuple[IPNetwork, ...] = (ipaddress.ip_network("169.254.0.0/16"),
                                     ipaddress.ip_network("fe80::/10"))
LOOPBACK: tuple[IPNetwork, ...] = (ipaddress.ip_network("127.0.0.0/8"),
                                   ipaddress.ip_network("::1/128"))

# The names under which pods reach the API server (the `kubernetes` Service).
API_SERVER_NAMES = ("kubernetes", "kubernetes.default", "kubernetes.default.svc",
                    "kubernetes.default.svc.cluster.local")


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

    def with_api_server(self, host: str, port: int) -> DestinationPolicy:
        key = (host.strip("[]").lower(), port)
        return DestinationPolicy(self.deny, self.allow, self.api_servers | {key})

    def refuses_address(self, host: str, port: int) -> str:
        """Why `host` (an IP address or a name) on `port` is refused; "" when it is not."""
        name = host.strip("[]").lower().rstrip(".")
        if (name, port) in self.api_servers:
            return f"{host}:{port} is the API server's own address"
        if name in API_SERVER_NAMES or name.startswith("kubernetes.default."):
            return f"{host} is the API server's Service"
        # "localhost" is loopback by definition (RFC 6761), whatever a resolver says.
        ip = _address("127.0.0.1" if name == "localhost" or name.endswith(".localhost")
                      else name)
        if ip is None:
            return ""
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        for net in self.deny:
            if ip.version == net.version and ip in net:
                if any(ip.version == a.version and ip in a for a in self.allow):
                    return ""
                kind = ("link-local" if ip.is_link_local else
                        "loopback" if ip.is_loopback else "refused")
                return f"{ip} is a {kind} address (in {net})"
        return ""


# Load without a destination policy: every address allowed (`polsched validate`, tests
# that build an Engine themselves). The operator always passes one.
OPEN = DestinationPolicy(deny=(), allow=())
