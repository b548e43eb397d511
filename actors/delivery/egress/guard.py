"""The destination guard: which addresses an egress actor may connect to.

Checked on the resolved address at connect time (aiohttp's `socket_factory` hook, called
for every address a connection attempt uses), so a name that resolves somewhere else
later (DNS rebinding) cannot pass, and IP literals in any spelling are checked as the
socket sees them. A denied address fails that attempt with `DestinationDenied` (an
`OSError`), which the egress actor reports as a connection error: retried, then
dead-lettered like any unreachable endpoint, never dropped.

Rules (`[egress]` in the config): an address in `deny_networks` is refused; when
`allow_networks` is not empty, an address outside it is refused too. The defaults deny
link-local and cloud metadata ranges and allow everything else, private networks and
loopback included, because internal receivers are the normal case.

The guard also carries `references`, the `[egress] allow_references` patterns: which
`${env:...}`/`${file:...}` secret references a subscription may make an egress read
(actors/delivery/document/secrets.py); None allows all.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Sequence
from typing import Final

from aiohappyeyeballs.types import AddrInfoType

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

DEFAULT_DENY: Final = (
    "169.254.0.0/16",     # IPv4 link-local, incl. 169.254.169.254 (AWS, GCP, Azure metadata)
    "fe80::/10",          # IPv6 link-local
    "fd00:ec2::254/128",  # AWS metadata over IPv6
    "100.100.100.200/32",  # Alibaba Cloud metadata
    "0.0.0.0/8",          # "this network": 0.0.0.0 reaches local services on Linux
    "::/128",
)
MULTI_TENANT_DENY: Final = (
    *DEFAULT_DENY, "127.0.0.0/8", "::1/128", "10.0.0.0/8", "172.16.0.0/12",
    "192.168.0.0/16", "100.64.0.0/10", "fc00::/7",
    "64:ff9b::/96",    # NAT64 (RFC 6052): a gateway turns it into any IPv4 address
    "64:ff9b:1::/48",  # local-use NAT64 (RFC 8215)
    "::/96",           # IPv4-compatible IPv6 (deprecated): ::10.0.0.1 and the like
)
"""For multi-tenant use (endpoints posted by people you do not trust): no loopback, no
private or carrier-grade NAT ranges (IPv4-mapped IPv6 spellings are checked as IPv4), and
no IPv6 prefix that a translator turns into an IPv4 address of its choosing."""


class DestinationDenied(OSError):
    """A connection attempt to an address the guard refuses."""


def parse_networks(cidrs: Sequence[str]) -> tuple[Network, ...]:
    """CIDR strings -> networks; `ValueError` naming the bad entry."""
    networks: list[Network] = []
    for cidr in cidrs:
        try:
            networks.append(ipaddress.ip_network(cidr, strict=False))
        except ValueError:
            raise ValueError(f"{cidr!r} is not a CIDR network (e.g. 10.0.0.0/8)") from None
    return tuple(networks)


class DestinationGuard:
    def __init__(self, allow: Sequence[str] = (), deny: Sequence[str] = DEFAULT_DENY,
                 references: Sequence[str] | None = None) -> None:
        self.allow = parse_networks(allow)
        self.deny = parse_networks(deny)
        self.references = None if references is None else tuple(references)

    def refusal(self, address: str) -> str | None:
        """Why `address` may not be connected to, or None when it may."""
        try:
            ip = ipaddress.ip_address(address.split("%", 1)[0])  # drop an IPv6 zone id
        except ValueError:
            return f"{address!r} is not an IP address"
        mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
        candidates = (ip,) if mapped is None else (ip, mapped)
        for candidate in candidates:
            for network in self.deny:
                if candidate.version == network.version and candidate in network:
                    return f"{address} is in denied network {network}"
        if self.allow and not any(c.version == n.version and c in n
                                  for c in candidates for n in self.allow):
            return f"{address} is outside allow_networks"
        return None

    def socket_factory(self, addr_info: AddrInfoType) -> socket.socket:
        """aiohttp's `socket_factory`: refuse before the socket exists."""
        family, type_, proto, _, address = addr_info
        reason = self.refusal(str(address[0]))
        if reason is not None:
            raise DestinationDenied(f"destination guard: {reason}")
        return socket.socket(family=family, type=type_, proto=proto)

    def __repr__(self) -> str:
        return f"<DestinationGuard allow={len(self.allow)} deny={len(self.deny)}>"
