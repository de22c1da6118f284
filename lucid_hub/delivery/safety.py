"""Callback safety: a hub that makes requests to URLs its clients name must not be turned
against its own network (SSRF). A callback must start with one of the client's registered
prefixes, use https, and resolve only to public addresses — unless the operator allowed
ranges, or dev mode (tests, demos) allows http and loopback."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from urllib.parse import urlsplit

from lucid_hub.errors import InputError

# Cloud instance metadata services (AWS/GCP/Azure/OpenStack and AWS's IPv6 one).
METADATA = {ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254")}

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_cidrs(text: str) -> list[Network]:
    try:
        return [ipaddress.ip_network(part.strip(), strict=False) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        raise InputError(f"LUCID_CALLBACK_ALLOW_CIDRS: {exc}") from None


def check_callback(callback: str, prefixes: Iterable[str], *, dev_mode: bool, allowed: list[Network],
                   resolve: bool = True) -> None:
    """Raise InputError with the reason when the hub must not call `callback`."""
    if len(callback) > 2048:
        raise InputError("hub.callback is longer than 2048 characters")
    parts = urlsplit(callback)
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise InputError(f"hub.callback {callback!r} is not an absolute http(s) URL")
    if parts.scheme != "https" and not dev_mode:
        raise InputError("hub.callback must use https")
    if parts.username or parts.password:
        raise InputError("hub.callback must not carry credentials")
    prefixes = list(prefixes)
    if not any(callback.startswith(p) for p in prefixes):
        registered = ", ".join(prefixes) or "none are registered for this client"
        raise InputError(f"hub.callback must start with one of the client's callback prefixes ({registered})")
    if resolve:
        check_addresses(parts.hostname, parts.port or (443 if parts.scheme == "https" else 80), dev_mode=dev_mode,
                        allowed=allowed)


def check_addresses(host: str, port: int, *, dev_mode: bool, allowed: list[Network]) -> None:
    try:
        infos = socket.getaddrinfo(host, port, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        raise InputError(f"hub.callback host {host!r} does not resolve") from None
    for info in infos:
        address = ipaddress.ip_address(info[4][0])
        if any(address in net for net in allowed):
            continue
        if address in METADATA:
            raise InputError(f"hub.callback resolves to a cloud metadata address ({address})")
        if address.is_loopback and dev_mode:
            continue
        if (address.is_loopback or address.is_private or address.is_link_local or address.is_multicast
                or address.is_reserved or address.is_unspecified):
            raise InputError(f"hub.callback resolves to a non-public address ({address}); an operator can "
                             "allow its range with LUCID_CALLBACK_ALLOW_CIDRS")
