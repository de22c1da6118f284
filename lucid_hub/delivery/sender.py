"""Deliveries from one event loop: aiohttp with keep-alive connection pools per callback host,
every connection made to an address the outbound policy allows.

A delivery is mostly waiting for the callback's answer. On threads, each POST in flight held
a thread and every answer handed the interpreter over (py-spy: urllib3's per-request Python
and the thread switches were most of a delivery's cost); here one loop thread holds all of
them, so deliveries in flight are bounded by the fairness shares, not by threads.

The address policy (lucid_hub.outbound) is applied where the loop resolves a host name
(`PolicyResolver`: the connector connects only to addresses it returned, so a name cannot
be re-resolved elsewhere in between) and, for a callback named by an IP literal (which
aiohttp never resolves), before the request.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import errno
import ipaddress
import logging
import socket
import threading
from collections.abc import Coroutine
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult

from lucid_hub.outbound import AddressPolicy, AddressRefused, hub_signature, no_answer

log = logging.getLogger(__name__)
# The most of a callback's answer that is read (the rest is dropped with its connection).
ANSWER_BYTES = 64 * 1024


class PolicyResolver(AbstractResolver):
    """Host names resolved on a thread (getaddrinfo blocks) and every address checked: a name
    that resolves to one refused address is refused as a whole (AddressPolicy.resolve)."""

    def __init__(self, policy: AddressPolicy) -> None:
        self.policy = policy

    async def resolve(self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
                      ) -> list[ResolveResult]:
        try:
            addresses = await asyncio.get_running_loop().run_in_executor(None, self.policy.resolve, host, port,
                                                                         "the callback")
        except AddressRefused as exc:  # (aiohttp reports the strerror: the reason reaches the subscription)
            raise OSError(errno.EACCES, str(exc)) from None
        return [ResolveResult(hostname=host, host=address, port=port,
                              family=socket.AF_INET6 if ":" in address else socket.AF_INET, proto=0,
                              flags=socket.AI_NUMERICHOST | socket.AI_NUMERICSERV)
                for address in addresses]

    async def close(self) -> None:
        return None


class AsyncSender:
    """An event loop on a thread of its own that runs delivery coroutines and POSTs for them."""

    def __init__(self, policy: AddressPolicy, *, timeout: float, per_host: int, user_agent: str) -> None:
        self.policy = policy
        self.timeout = timeout
        self.per_host = per_host
        self.user_agent = user_agent
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._session: aiohttp.ClientSession | None = None
        self._running: set[concurrent.futures.Future[Any]] = set()

    def submit(self, work: Coroutine[Any, Any, None]) -> concurrent.futures.Future[None]:
        """Run `work` on the loop (started at the first call)."""
        loop = self._started()
        future = asyncio.run_coroutine_threadsafe(work, loop)
        with self._lock:
            self._running.add(future)
        future.add_done_callback(self._done)
        return future

    def _done(self, future: concurrent.futures.Future[Any]) -> None:
        with self._lock:
            self._running.discard(future)

    def _started(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                ready = threading.Event()

                def run() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set)
                    loop.run_forever()

                self._thread = threading.Thread(target=run, name="websub-send", daemon=True)
                self._thread.start()
                ready.wait()
                self._loop = loop
            return self._loop

    async def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            # Keep-alive pools per host (aiohttp keeps idle connections 15 s by default); no
            # proxies or .netrc from the environment (trust_env false), no cookies kept.
            connector = aiohttp.TCPConnector(limit=0, limit_per_host=self.per_host,
                                             resolver=PolicyResolver(self.policy), ttl_dns_cache=10)
            self._session = aiohttp.ClientSession(
                connector=connector, timeout=aiohttp.ClientTimeout(total=self.timeout),
                headers={"User-Agent": self.user_agent}, cookie_jar=aiohttp.DummyCookieJar(), trust_env=False)
        return self._session

    async def post(self, url: str, body: bytes, headers: dict[str, str], secret: str | None) -> tuple[int, str]:
        """POST a callback as `outbound.signed_post` does (signed when there is a secret,
        redirects not followed): (HTTP status, a one-line account), status 0 without an answer."""
        host = urlsplit(url).hostname or ""
        try:
            self.policy.check(ipaddress.ip_address(host.split("%", 1)[0]), f"the callback {host!r}")
        except ValueError:
            pass  # a host name: PolicyResolver checks what it resolves to
        except AddressRefused as exc:
            return 0, no_answer(exc)
        session = await self._client()
        try:
            async with session.post(url, data=body, headers=hub_signature(headers, body, secret),
                                    allow_redirects=False) as answer:
                await answer.content.read(ANSWER_BYTES)
                return answer.status, f"HTTP {answer.status}"
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
            return 0, no_answer(exc)

    def stop(self, timeout: float = 30) -> None:
        """Wait for the work submitted (up to `timeout` seconds), then close the pools and the loop."""
        with self._lock:
            running, loop = list(self._running), self._loop
        concurrent.futures.wait(running, timeout=timeout)
        if loop is None:
            return

        async def close() -> None:
            if self._session is not None:
                await self._session.close()
                self._session = None
            await asyncio.get_running_loop().shutdown_default_executor()  # (name lookups, claim renewals)

        try:
            asyncio.run_coroutine_threadsafe(close(), loop).result(timeout=10)
        except Exception:  # the pools go with the loop anyway
            log.exception("closing the delivery connections failed")
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=10)
            if not self._thread.is_alive():
                loop.close()
        with self._lock:
            self._loop = None
            self._thread = None
