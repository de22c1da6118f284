"""How uvicorn serves the front: its HTTP protocol with a deadline for a request's headers
(and the connection's transport handed to the front, for the push fan-out), its settings for
a hub, and a front served on a thread of its own (tests, benchmarks)."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lucid_hub.web.front import Front

# The scope key under which the hub's HTTP protocol gives the front a connection's transport.
TRANSPORT = "lucid.transport"


def http_protocol(header_seconds: float) -> type:
    """uvicorn's HTTP/1.1 protocol (httptools), with a deadline for a request's headers.

    uvicorn times out a connection idle between requests, not one that never completes its
    first request's headers (or trickles them): each such connection would be held for ever
    and count against the process's connections. Here the headers of each request must be
    complete within `header_seconds` of the connection or of the request's first byte."""
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class HubHttpProtocol(HttpToolsProtocol):
        _header_deadline: asyncio.TimerHandle | None = None

        def _arm(self) -> None:
            self._disarm()
            self._header_deadline = self.loop.call_later(header_seconds, self._headers_late)

        def _disarm(self) -> None:
            if self._header_deadline is not None:
                self._header_deadline.cancel()
                self._header_deadline = None

        def _headers_late(self) -> None:
            self._header_deadline = None
            if not self.transport.is_closing():
                self.transport.close()

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._arm()

        def on_headers_complete(self) -> None:
            self._disarm()
            self.scope[TRANSPORT] = self.transport  # type: ignore[literal-required]
            super().on_headers_complete()

    return HubHttpProtocol


def server_options(settings: Any) -> dict[str, Any]:
    """uvicorn's settings for a hub (what gunicorn's were: keep-alive, graceful stop)."""
    return {
        "http": http_protocol(settings.body_seconds), "ws": "websockets-sansio", "loop": "auto", "lifespan": "on",
        "log_config": None, "access_log": False,
        # An idle keep-alive connection is kept longer than the proxies and clients in front keep
        # theirs (load balancers: 60 s), so a reused connection is not closed under a request.
        "timeout_keep_alive": settings.keepalive_seconds,
        "timeout_graceful_shutdown": settings.graceful_timeout,
        # SE protocol messages: a query and its envelope; pings find sockets whose client went
        # away or stopped reading (no pong within the timeout: closed).
        "ws_max_size": settings.max_query_bytes + 16_384, "ws_ping_interval": settings.ws_ping_seconds,
        "ws_ping_timeout": settings.ws_ping_timeout,
        # Connections and tasks of the process beyond the push limit and the request threads' queue: 503.
        "limit_concurrency": settings.push_max_connections + 1_000,
        "server_header": False,
        # Who the client is behind a proxy is the hub's to decide (LUCID_TRUSTED_PROXIES), not uvicorn's.
        "proxy_headers": False,
    }


class Served:
    """A front served by uvicorn on a thread of its own, for tests and benchmarks (`serve`
    runs it in the process's main thread, with its signals)."""

    def __init__(self, front: Front, settings: Any, host: str, port: int) -> None:
        import uvicorn

        self.front = front
        self.server = uvicorn.Server(uvicorn.Config(front, host=host, port=port, **server_options(settings)))
        self.thread = threading.Thread(target=self.server.run, name="front", daemon=True)

    def start(self, deadline: float = 20.0) -> None:
        self.thread.start()
        until = time.monotonic() + deadline
        while not self.server.started:  # (a flag uvicorn sets once it listens: polled, with a deadline)
            if not self.thread.is_alive() or time.monotonic() > until:
                raise RuntimeError("the front did not start (see the log)")
            time.sleep(0.01)

    def stop(self) -> None:
        self.front.end_channels()
        self.server.should_exit = True
        self.thread.join(timeout=30)
