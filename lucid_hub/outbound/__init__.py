"""Outbound HTTP to addresses partners choose: WebSub callbacks, and the hubs we mirror from.

A hub that calls URLs other parties name must not be turned against its own network (SSRF).
`AddressPolicy` says which addresses may be called: globally reachable unicast ones only
(the IANA special-purpose registries, IPv4 embedded in IPv6 included), unless the operator
allowed a range (LUCID_CALLBACK_ALLOW_CIDRS) or dev mode allows loopback. The check runs
inside the connection, on the very address the socket then connects to: a name checked
once and resolved again at connect time (DNS rebinding) could point anywhere by then.
Python's `ipaddress.is_global` is not enough: it calls 192.0.0.192, 6to4 addresses of
private IPv4 (2002:a9fe:a9fe::) and NAT64 ones global.
"""

from __future__ import annotations

import contextvars
import hashlib
import hmac
import ipaddress
import socket
import ssl
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import certifi
import requests
import urllib3
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import NewConnectionError
from urllib3.util import connection

from lucid_hub.config import Settings
from lucid_hub.errors import InputError
from lucid_hub.networks import Network, parse_networks

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

# Cloud instance metadata services, named in the refusal (they are refused as non-public anyway).
METADATA = {ipaddress.ip_address(a) for a in ("169.254.169.254", "fd00:ec2::254", "100.100.100.200")}

# IANA IPv4 Special-Purpose Address Registry, and multicast and broadcast: never a callback.
_IPV4_SPECIAL = [ipaddress.ip_network(n) for n in (
    "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
    "192.0.0.0/24", "192.0.2.0/24", "192.31.196.0/24", "192.52.193.0/24", "192.88.99.0/24", "192.168.0.0/16",
    "192.175.48.0/24", "198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4")]
# IPv6: only global unicast (2000::/3), without the special-purpose blocks inside it.
_IPV6_GLOBAL = ipaddress.ip_network("2000::/3")
_IPV6_SPECIAL = [ipaddress.ip_network(n) for n in (
    "2001::/23", "2001:db8::/32", "2620:4f:8000::/48", "3fff::/20")]
# IPv6 forms that carry an IPv4 address, which decides: 6to4 and NAT64 (checked below).
_SIX_TO_FOUR = ipaddress.ip_network("2002::/16")
_NAT64 = [ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48")]


def embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address stands for, if it stands for one."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if any(address in net for net in _NAT64):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if int(address) >> 32 == 0 and int(address) > 1:  # ::a.b.c.d (IPv4-compatible, deprecated)
        return ipaddress.IPv4Address(int(address))
    return None


def is_public(address: Address) -> bool:
    """Whether an address is a globally reachable unicast address (not special-purpose)."""
    if isinstance(address, ipaddress.IPv6Address):
        inner = embedded_ipv4(address)
        if inner is not None:
            return is_public(inner)
        return address in _IPV6_GLOBAL and not any(address in net for net in _IPV6_SPECIAL)
    return not any(address in net for net in _IPV4_SPECIAL) and address != ipaddress.IPv4Address("255.255.255.255")


class AddressRefused(InputError):
    """The hub may not call this address (its reason says why and how an operator allows it)."""


class AddressPolicy:
    """Which addresses outbound requests may reach."""

    def __init__(self, *, dev_mode: bool, allowed: list[Network], ca_file: str = "") -> None:
        self.dev_mode = dev_mode
        self.allowed = allowed
        self.ca_file = ca_file  # authorities trusted besides certifi's (tls_context)

    @classmethod
    def of(cls, settings: Settings) -> AddressPolicy:
        """The policy the settings give (LUCID_DEV_MODE, LUCID_CALLBACK_ALLOW_CIDRS,
        LUCID_OUTBOUND_CA_FILE)."""
        try:
            allowed = parse_networks(settings.callback_allow_cidrs)
        except ValueError as exc:
            raise InputError(f"LUCID_CALLBACK_ALLOW_CIDRS: {exc}") from None
        return cls(dev_mode=settings.dev_mode, allowed=allowed, ca_file=settings.outbound_ca_file)

    def tls_context(self) -> ssl.SSLContext:
        """A new TLS context for outbound https: certifi's authorities (as requests trusts),
        and the operator's `ca_file` besides; host names verified."""
        context = ssl.create_default_context(cafile=certifi.where())
        if self.ca_file:
            context.load_verify_locations(cafile=self.ca_file)
        return context

    def check(self, address: Address, what: str = "the host") -> None:
        """AddressRefused unless `address` (what `what` resolves to) may be called."""
        if any(address in net for net in self.allowed):
            return
        plain = embedded_ipv4(address) if isinstance(address, ipaddress.IPv6Address) else None
        if self.dev_mode and (address.is_loopback or (plain is not None and plain.is_loopback)):
            return
        if address in METADATA or plain in METADATA:
            raise AddressRefused(f"{what} resolves to a cloud metadata address ({address})")
        if not is_public(address):
            raise AddressRefused(f"{what} resolves to a non-public address ({address}): allow its range on this hub "
                                 "with LUCID_CALLBACK_ALLOW_CIDRS (e.g. 127.0.0.0/8 for hubs on one machine)")

    def resolve(self, host: str, port: int, what: str = "the host") -> list[str]:
        """The addresses `host` resolves to, each checked; AddressRefused if any is refused
        (a name that resolves to one private address is refused as a whole)."""
        try:
            infos = socket.getaddrinfo(host, port, proto=socket.IPPROTO_TCP)
        except (OSError, UnicodeError):
            raise AddressRefused(f"{what} {host!r} does not resolve") from None
        addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
        for text in addresses:
            self.check(ipaddress.ip_address(text.split("%", 1)[0]), f"{what} {host!r}")
        return addresses


class _Guarded:
    """A urllib3 connection that resolves its host itself, checks every address with the
    policy and connects to a checked one (TLS still verifies the host name)."""

    policy: AddressPolicy
    _dns_host: str
    port: int
    timeout: Any
    source_address: Any
    socket_options: Any

    def _new_conn(self) -> socket.socket:
        try:
            addresses = self.policy.resolve(self._dns_host, self.port)
        except AddressRefused as exc:
            raise NewConnectionError(self, str(exc)) from exc  # type: ignore[arg-type]  # (`explain` finds it)
        problem: OSError | None = None
        for address in addresses:
            try:
                return connection.create_connection((address, self.port), self.timeout,
                                                    source_address=self.source_address,
                                                    socket_options=self.socket_options)
            except OSError as exc:
                problem = exc
        raise NewConnectionError(self, f"Failed to establish a new connection: {problem}")  # type: ignore[arg-type]


def _pool_classes(policy: AddressPolicy) -> dict[str, type[HTTPConnectionPool]]:
    plain = type("GuardedHTTPConnection", (_Guarded, HTTPConnection), {"policy": policy})
    tls = type("GuardedHTTPSConnection", (_Guarded, HTTPSConnection), {"policy": policy})
    return {"http": type("GuardedHTTPConnectionPool", (HTTPConnectionPool,), {"ConnectionCls": plain}),
            "https": type("GuardedHTTPSConnectionPool", (HTTPSConnectionPool,), {"ConnectionCls": tls})}


def pool_manager(policy: AddressPolicy, **kwargs: Any) -> urllib3.PoolManager:
    """A urllib3 PoolManager whose every connection obeys `policy` (addresses, authorities)."""
    if policy.ca_file:
        kwargs.setdefault("ssl_context", policy.tls_context())
    manager = urllib3.PoolManager(**kwargs)
    manager.pool_classes_by_scheme = _pool_classes(policy)
    return manager


# --- bounded answers ------------------------------------------------------------------------
# A partner's answer is read whole before anything parses it, so it is read at most this many
# bytes (after content decoding: a compressed bomb counts as it unpacks) and for at most
# ANSWER_SECONDS in all, whatever it claims: a server streaming an endless JSON document as
# its keys sent 2.8 GiB in 4 s into a worker with a 1 GiB limit. A request that expects a small
# document asks for less (`answer_limit`); one that streams (stream=True: archive pages, event
# streams) reads under bounds of its own.
ANSWER_BYTES = 16 * 1024 * 1024
ANSWER_SECONDS = 60.0
_answer_bytes: contextvars.ContextVar[int] = contextvars.ContextVar("answer_bytes", default=ANSWER_BYTES)


@contextmanager
def answer_limit(max_bytes: int) -> Iterator[None]:
    """Within it, this thread's requests through `session` read answers of at most `max_bytes`."""
    token = _answer_bytes.set(max_bytes)
    try:
        yield
    finally:
        _answer_bytes.reset(token)


class AnswerRefused(requests.RequestException):
    """A partner's answer was longer, or slower, than its bound (a failed request to callers)."""


class _GuardedAdapter(requests.adapters.HTTPAdapter):
    def __init__(self, policy: AddressPolicy) -> None:
        self.policy = policy
        # One more try for a read that cannot change anything, and for a request that never
        # reached the other side: a server that closes an idle keep-alive connection just as
        # it is reused resets the request (gunicorn closed them after 2 s; docs/decisions.md).
        super().__init__(max_retries=urllib3.util.Retry(
            total=1, connect=1, read=1, status=0, other=0, redirect=False, backoff_factor=0,
            allowed_methods=frozenset({"GET", "HEAD", "OPTIONS"}), raise_on_status=False))

    def init_poolmanager(self, connections: int, maxsize: int, block: bool = False, **pool_kwargs: Any) -> None:
        if self.policy.ca_file:  # (requests adds certifi's authorities to the context's own)
            pool_kwargs.setdefault("ssl_context", self.policy.tls_context())
        super().init_poolmanager(connections, maxsize, block, **pool_kwargs)
        self.poolmanager.pool_classes_by_scheme = _pool_classes(self.policy)

    def send(self, request: requests.PreparedRequest, stream: bool = False,
             timeout: float | tuple[float, float] | tuple[float, None] | None = None, verify: bool | str = True,
             cert: bytes | str | tuple[bytes | str, bytes | str] | None = None,
             proxies: Mapping[str, str] | None = None) -> requests.Response:
        response = super().send(request, stream=True, timeout=timeout, verify=verify, cert=cert, proxies=proxies)
        if stream:
            return response
        limit, deadline = _answer_bytes.get(), time.monotonic() + ANSWER_SECONDS
        body = bytearray()
        try:
            for chunk in response.iter_content(1 << 16):
                body += chunk
                if len(body) > limit:
                    raise AnswerRefused(f"the answer of {request.url} is longer than {limit:,} bytes",
                                        response=response)
                if time.monotonic() > deadline:
                    raise AnswerRefused(f"the answer of {request.url} took longer than {ANSWER_SECONDS:g} s",
                                        response=response)
        except BaseException:
            response.close()
            raise
        response._content = bytes(body)  # (what `Response.content` would have read: read, bounded)
        return response


def session(policy: AddressPolicy, user_agent: str) -> requests.Session:
    """A requests Session whose every connection obeys `policy`; no proxies or .netrc from
    the environment (they would route around the policy)."""
    http = requests.Session()
    http.trust_env = False
    http.headers["User-Agent"] = user_agent
    adapter = _GuardedAdapter(policy)
    http.mount("http://", adapter)
    http.mount("https://", adapter)
    return http


def hub_signature(headers: dict[str, str], body: bytes, secret: str | None) -> dict[str, str]:
    """`headers` with `X-Hub-Signature: sha256=HMAC(secret, body)` when there is a secret."""
    if not secret:
        return headers
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return {**headers, "X-Hub-Signature": f"sha256={digest}"}


def signed_post(pool: urllib3.PoolManager, url: str, body: bytes, headers: dict[str, str],
                secret: str | None) -> tuple[int, str]:
    """POST a callback (query and window webhooks, rules' webhooks; WebSub deliveries go
    through delivery.sender): signed with `X-Hub-Signature: sha256=HMAC(secret, body)` when
    there is a secret, redirects not followed; (HTTP status, a one-line account of it),
    status 0 when no answer came."""
    headers = hub_signature(headers, body, secret)
    try:
        answer = pool.request("POST", url, body=body, headers=headers, redirect=False, preload_content=True)
        return answer.status, f"HTTP {answer.status}"
    except urllib3.exceptions.HTTPError as exc:
        return 0, no_answer(exc)


def no_answer(exc: BaseException) -> str:
    """A one-line account of a POST that got no answer (recorded with the subscription)."""
    refused = refusal(exc)
    if refused is not None:
        return str(refused)[:1024]
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:1024]


def refusal(exc: BaseException) -> AddressRefused | None:
    """The policy's refusal behind a failed request, wherever the HTTP library wrapped it
    (requests' ConnectionError holds urllib3's MaxRetryError, whose reason holds the
    connection error the refusal caused)."""
    seen: set[int] = set()
    todo: list[object] = [exc]
    while todo:
        item = todo.pop()
        if not isinstance(item, BaseException) or id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, AddressRefused):
            return item
        todo += [item.__cause__, item.__context__, getattr(item, "reason", None), *item.args]
    return None


def explain(exc: BaseException) -> str:
    """What to say of a request that failed: the policy's refusal (it names the setting that
    allows the address) rather than the HTTP library's account of it, when that is why."""
    refused = refusal(exc)
    return str(refused) if refused is not None else " ".join(str(exc).split())

