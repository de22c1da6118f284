"""Callback safety: a callback must lie under one of its client's registered prefixes, use
https (http in dev mode), and reach only addresses the outbound policy allows
(`lucid_hub.outbound`, which checks again at every connection).

Prefixes are compared as URLs, not as strings: scheme, host and port exactly, the path by
whole segments. As strings, `https://hub.globex.example` accepted
`https://hub.globex.example.evil.example/`, and `https://h/r/` accepted `https://h/r/../../x`.
A callback whose path holds dot segments (`.`, `..`, also percent-encoded) is refused.
"""

from __future__ import annotations

from collections.abc import Iterable

from lucid_hub.errors import InputError
from lucid_hub.networks import Network, Origin, parse_networks
from lucid_hub.outbound import AddressPolicy


def parse_cidrs(text: str) -> list[Network]:
    try:
        return parse_networks(text)
    except ValueError as exc:
        raise InputError(f"LUCID_CALLBACK_ALLOW_CIDRS: {exc}") from None


def check_callback(callback: str, prefixes: Iterable[str], *, dev_mode: bool, allowed: list[Network],
                   resolve: bool = True) -> None:
    """Raise InputError with the reason when the hub must not call `callback`."""
    if len(callback) > 2048:
        raise InputError("hub.callback is longer than 2048 characters")
    target = Origin.of(callback, "hub.callback")
    if target.scheme != "https" and not dev_mode:
        raise InputError("hub.callback must use https (a hub with LUCID_DEV_MODE=true takes http callbacks, for "
                         "a trial on one machine)")
    prefixes = list(prefixes)
    if not any(Origin.of(p, "callback prefix").covers(target) for p in prefixes):
        registered = ", ".join(prefixes) or "none are registered for this client"
        raise InputError(f"hub.callback must lie under one of the client's callback prefixes ({registered})")
    if resolve:  # an early, clear refusal; every connection is checked again (lucid_hub.outbound)
        AddressPolicy(dev_mode=dev_mode, allowed=allowed).resolve(target.host, target.port, "hub.callback host")
