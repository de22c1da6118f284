"""Deliveries from one event loop, with keep-alive connection pools per callback host, every
connection made to an address the outbound policy allows, through aiohttp (HTTP/1.1, with its
C parser). With `http2` (LUCID_DELIVERY_HTTP2), `https` callbacks go through httpcore instead,
which offers HTTP/2 in the TLS handshake (ALPN) and multiplexes a host's deliveries on one
connection where the callback speaks it: fewer connections at a partner, but measured here
a third of aiohttp's deliveries a second (its HTTP/1.1 and HTTP/2 are pure Python;
docs/BENCHMARKS.md), hence not the default.

A delivery is mostly waiting for the callback's answer. On threads, each POST in flight held
a thread and every answer handed the interpreter over (py-spy: urllib3's per-request Python
and the thread switches were most of a delivery's cost); here one loop thread holds all of
them, so deliveries in flight are bounded by the fairness shares, not by threads.

The clients and the address policy they keep are lucid_hub.outbound's (`outbound.aio`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Coroutine
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import httpcore
import yarl

from lucid_hub.outbound import AddressPolicy, AddressRefused, aio, hub_signature, no_answer

log = logging.getLogger(__name__)
# The most of a callback's answer that is read (the rest is dropped with its connection).
ANSWER_BYTES = 64 * 1024


class AsyncSender:
    """An event loop on a thread of its own that runs delivery coroutines and POSTs for them."""

    def __init__(self, policy: AddressPolicy, *, timeout: float, per_host: int, user_agent: str,
                 http2: bool = False) -> None:
        self.policy = policy
        self.timeout = timeout
        self.per_host = per_host
        self.user_agent = user_agent
        self.http2 = http2
        self._tls_pool: httpcore.AsyncConnectionPool | None = None
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
        if self._session is None:  # (the fairness shares bound what is in flight)
            self._session = aio.session(self.policy, per_host=self.per_host, timeout=self.timeout,
                                        user_agent=self.user_agent)
        return self._session

    def _tls_client(self) -> httpcore.AsyncConnectionPool:
        if self._tls_pool is None:
            self._tls_pool = aio.http2_pool(self.policy)
        return self._tls_pool

    async def post(self, url: str, body: bytes, headers: dict[str, str], secret: str | None) -> tuple[int, str]:
        """POST a callback as `outbound.signed_post` does (signed when there is a secret,
        redirects not followed): (HTTP status, a one-line account), status 0 without an answer."""
        try:
            aio.check_literal(self.policy, urlsplit(url).hostname or "", "the callback")
        except AddressRefused as exc:
            return 0, no_answer(exc)
        if self.http2 and url.startswith("https:"):
            return await self._post_tls(url, body, hub_signature(headers, body, secret))
        session = await self._client()
        try:
            # The callback exactly as the subscriber gave it (WebSub §5.1): yarl would otherwise
            # decode %2F and %3F in its query, which changes what the callback receives.
            async with session.post(yarl.URL(url, encoded=True), data=body,
                                    headers=hub_signature(headers, body, secret), allow_redirects=False) as answer:
                await answer.content.read(ANSWER_BYTES)
                return answer.status, f"HTTP {answer.status}"
        except aio.AIOHTTP_FAILURES as exc:
            return 0, no_answer(exc)

    async def _post_tls(self, url: str, body: bytes, headers: dict[str, str]) -> tuple[int, str]:
        fields = [(b"User-Agent", self.user_agent.encode()), *((k.encode(), v.encode()) for k, v in headers.items())]
        try:
            async with asyncio.timeout(self.timeout):
                async with self._tls_client().stream("POST", url, headers=fields, content=body) as answer:
                    read = 0
                    async for chunk in answer.aiter_stream():
                        read += len(chunk)
                        if read >= ANSWER_BYTES:
                            break
                    return answer.status, f"HTTP {answer.status}"
        except aio.HTTPCORE_FAILURES as exc:
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
            if self._tls_pool is not None:
                await self._tls_pool.aclose()
                self._tls_pool = None
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
