"""Addresses and URLs as the hub compares them: CIDR lists from settings, which address a
request comes from, and URL prefixes compared by origin and path segment."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import SplitResult, unquote, urlsplit

from lucid_hub.errors import InputError

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


DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True)
class Origin:
    """A URL as prefixes are compared: scheme, host, port, and the path's segments."""

    scheme: str
    host: str
    port: int
    segments: tuple[str, ...]

    @classmethod
    def of(cls, url: str, what: str) -> Origin:
        try:
            parts: SplitResult = urlsplit(url)
            port = parts.port
        except ValueError:
            raise InputError(f"{what} {url[:200]!r} is not a valid URL") from None
        scheme = parts.scheme.lower()
        if scheme not in DEFAULT_PORTS or not parts.hostname:
            raise InputError(f"{what} {url[:200]!r} is not an absolute http(s) URL")
        if parts.username is not None or parts.password is not None:
            raise InputError(f"{what} must not carry credentials")
        segments = [unquote(s) for s in parts.path.split("/")[1:]]
        if any(s in (".", "..") or "/" in s or "\\" in s for s in segments):
            raise InputError(f"{what} must not hold dot segments or encoded slashes in its path")
        if segments and segments[-1] == "":
            segments.pop()  # "/a/" and "/a" name the same subtree
        return cls(scheme, parts.hostname.rstrip(".").lower(), port or DEFAULT_PORTS[scheme], tuple(segments))

    def covers(self, other: Origin) -> bool:
        """Whether `other` lies at or under this URL (segment by segment)."""
        return ((self.scheme, self.host, self.port) == (other.scheme, other.host, other.port)
                and other.segments[: len(self.segments)] == self.segments)


def check_prefix(prefix: str) -> str:
    """A callback prefix as a client may register it: an http(s) URL without query, fragment,
    credentials or dot segments."""
    Origin.of(prefix, "callback prefix")
    parts = urlsplit(prefix)
    if parts.query or parts.fragment:
        raise InputError(f"callback prefix {prefix[:200]!r} must not have a query or fragment")
    return prefix
