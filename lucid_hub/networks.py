"""Address ranges: CIDR lists from settings, and which address a request comes from."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_networks(text: str) -> list[Network]:
    """Comma-separated CIDRs (ValueError names a bad one)."""
    return [ipaddress.ip_network(part.strip(), strict=False) for part in text.split(",") if part.strip()]


def client_address(remote: str, forwarded_for: Sequence[str], trusted: Iterable[Network]) -> str:
    """The address a request comes from: the peer's, unless the peer is a proxy the operator
    trusts (LUCID_TRUSTED_PROXIES); then the nearest address in X-Forwarded-For that is not a
    trusted proxy. X-Forwarded-For from anyone else is ignored (it is the sender's to invent)."""
    networks = list(trusted)

    def is_trusted(text: str) -> bool:
        try:
            address = ipaddress.ip_address(text)
        except ValueError:
            return False
        return any(address in net for net in networks)

    if not networks or not is_trusted(remote):
        return remote
    hops = [hop.strip() for header in forwarded_for for hop in header.split(",") if hop.strip()]
    for hop in reversed(hops):  # right to left: each was added by the proxy before it
        try:
            ipaddress.ip_address(hop)
        except ValueError:
            return remote  # a malformed hop: nothing beyond it can be believed
        if not is_trusted(hop):
            return hop
    return hops[0] if hops else remote
