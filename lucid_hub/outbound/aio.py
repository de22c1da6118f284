"""Outbound HTTP from an event loop: aiohttp (HTTP/1.1, C parser) and httpcore (HTTP/2 by
ALPN) clients that connect only to addresses the outbound policy allows.

The policy is applied where a connection resolves its host (aiohttp's `PolicyResolver`,
httpcore's `PolicyBackend`: both connect only to the addresses the policy checked, so a name
cannot be re-resolved elsewhere in between). A URL named by an IP literal (which aiohttp
never resolves) is checked before the request (`check_literal`).
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import socket
import ssl
from collections.abc import Iterable
from typing import Any

import aiohttp
import httpcore
from aiohttp.abc import AbstractResolver, ResolveResult

from lucid_hub.outbound import AddressPolicy, AddressRefused

# Seconds an idle kept-alive connection stays open (aiohttp's default, for both clients).
KEEPALIVE_SECONDS = 15.0
# What an httpcore request can fail with short of an answer (its exceptions have no common base).
HTTPCORE_FAILURES = (httpcore.TimeoutException, httpcore.NetworkError, httpcore.ProtocolError,
                     httpcore.UnsupportedProtocol, httpcore.PoolTimeout, ssl.SSLError, OSError, ValueError)
# What an aiohttp request can fail with short of an answer.
AIOHTTP_FAILURES = (aiohttp.ClientError, TimeoutError, OSError, ValueError)


def check_literal(policy: AddressPolicy, host: str, what: str) -> None:
    """Refuse (AddressRefused) a host given as an IP literal the policy does not allow; a host
    name passes here (its addresses are checked where it is resolved)."""
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return
    policy.check(address, f"{what} {host!r}")


async def checked_addresses(policy: AddressPolicy, host: str, port: int) -> list[str]:
    """The addresses `host` resolves to, every one allowed by `policy` (looked up on a thread:
    getaddrinfo blocks); AddressRefused otherwise."""
    return await asyncio.get_running_loop().run_in_executor(None, policy.resolve, host, port, "the callback")


class PolicyResolver(AbstractResolver):
    """Host names resolved on a thread (getaddrinfo blocks) and every address checked: a name
    that resolves to one refused address is refused as a whole (AddressPolicy.resolve)."""

    def __init__(self, policy: AddressPolicy) -> None:
        self.policy = policy

    async def resolve(self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
                      ) -> list[ResolveResult]:
        try:
            addresses = await checked_addresses(self.policy, host, port)
        except AddressRefused as exc:  # (aiohttp reports the strerror: the reason reaches the subscription)
            raise OSError(errno.EACCES, str(exc)) from None
        return [ResolveResult(hostname=host, host=address, port=port,
                              family=socket.AF_INET6 if ":" in address else socket.AF_INET, proto=0,
                              flags=socket.AI_NUMERICHOST | socket.AI_NUMERICSERV)
                for address in addresses]

    async def close(self) -> None:
        return None


class PolicyBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network backend (its documented hook for how connections are made) that
    connects only to addresses the policy allows; TLS then verifies the host name as usual
    (httpcore passes the URL's host to the handshake, not the address)."""

    def __init__(self, policy: AddressPolicy) -> None:
        self.policy = policy
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                          socket_options: Iterable[Any] | None = None) -> httpcore.AsyncNetworkStream:
        try:
            addresses = await checked_addresses(self.policy, host, port)
        except AddressRefused as exc:
            raise httpcore.ConnectError(str(exc)) from None
        failure: Exception = httpcore.ConnectError(f"{host!r} resolves to no address")
        for address in addresses:
            try:
                return await self._inner.connect_tcp(address, port, timeout, local_address, socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                failure = exc
        raise failure

    async def connect_unix_socket(self, path: str, timeout: float | None = None,
                                  socket_options: Iterable[Any] | None = None) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("callbacks are not delivered to Unix sockets")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def session(policy: AddressPolicy, *, per_host: int, timeout: float, user_agent: str) -> aiohttp.ClientSession:
    """An aiohttp session (call it on the loop that uses it): keep-alive pools per host, no
    overall limit (the caller bounds what is in flight), every address checked; no proxies or
    .netrc from the environment (trust_env false), no cookies kept."""
    connector = aiohttp.TCPConnector(limit=0, limit_per_host=per_host, keepalive_timeout=KEEPALIVE_SECONDS,
                                     resolver=PolicyResolver(policy), ttl_dns_cache=10, ssl=policy.tls_context())
    return aiohttp.ClientSession(
        connector=connector, timeout=aiohttp.ClientTimeout(total=timeout),
        headers={"User-Agent": user_agent}, cookie_jar=aiohttp.DummyCookieJar(), trust_env=False)


def http2_pool(policy: AddressPolicy) -> httpcore.AsyncConnectionPool:
    """An httpcore pool offering HTTP/2 by ALPN (a host that takes it gets its requests as
    streams of one connection); no overall limit, idle connections kept as long as aiohttp's."""
    return httpcore.AsyncConnectionPool(
        ssl_context=policy.tls_context(),  # its own: httpcore sets its ALPN protocols
        max_connections=None, keepalive_expiry=KEEPALIVE_SECONDS, http1=True,
        http2=True, network_backend=PolicyBackend(policy))
