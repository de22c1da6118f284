"""`lucid-hub bench tls`: deliveries to an https callback, HTTP/1.1 over aiohttp's kept-alive
pool (the default) against HTTP/2 through httpcore (LUCID_DELIVERY_HTTP2), in one process.

The callback is hypercorn over TLS on loopback (`TlsServer`, also the tests' https callback),
with a certificate of a throw-away authority (trustme) that the sender trusts as an operator's
LUCID_OUTBOUND_CA_FILE. hypercorn and trustme come with the `test` and `bench` extras.
"""

from __future__ import annotations

import asyncio
import socket
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import click

from lucid_hub.delivery.sender import AsyncSender
from lucid_hub.outbound import AddressPolicy

BODY = b"p" * 2000  # about a small patch


class TlsServer:
    """hypercorn over TLS on a loopback port (a certificate of `ca` for localhost and
    127.0.0.1) offering `alpn` (["h2", "http/1.1"], or ["http/1.1"]); answers 202 and records
    each request: path, HTTP version, client port (one per connection), headers, body.
    `max_requests` is hypercorn's requests per connection before it closes it (1,000 by default)."""

    def __init__(self, ca: Any, directory: Path, alpn: list[str], max_requests: int = 1000) -> None:
        import hypercorn.asyncio
        import hypercorn.config

        self.requests: list[tuple[str, str, int, dict[str, str], bytes]] = []
        pem = directory / f"server-{id(self)}.pem"
        ca.issue_cert("localhost", "127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(pem))
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
        self.port = int(sock.getsockname()[1])
        config = hypercorn.config.Config()
        config.bind = [f"fd://{sock.detach()}"]  # hypercorn owns (and closes) the socket
        config.certfile = config.keyfile = str(pem)
        config.alpn_protocols = alpn
        config.keep_alive_max_requests = max_requests
        config.accesslog = config.errorlog = None
        self._loop = asyncio.new_event_loop()
        # A connection hypercorn rotates (max_requests) while a stream is open ends in errors it
        # leaves to the loop: the client's account of it is what is measured, not its log.
        self._loop.set_exception_handler(lambda _loop, _context: None)
        stopped = asyncio.Event()
        self._stopped = stopped
        ready = threading.Event()

        async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope["type"] != "http":
                return
            body = b""
            while True:
                message = await receive()
                body += message.get("body", b"")
                if not message.get("more_body"):
                    break
            headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
            self.requests.append((scope["path"], scope["http_version"], scope["client"][1], headers, body))
            await send({"type": "http.response.start", "status": 202, "headers": [(b"content-length", b"0")]})
            await send({"type": "http.response.body", "body": b""})

        async def main() -> None:
            ready.set()
            await hypercorn.asyncio.serve(app, config, shutdown_trigger=stopped.wait)  # type: ignore[arg-type]

        self.thread = threading.Thread(target=self._loop.run_until_complete, args=(main(),), daemon=True)
        self.thread.start()
        ready.wait(10)

    def url(self, path: str, host: str = "localhost") -> str:
        return f"https://{host}:{self.port}{path}"

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._stopped.set)
        self.thread.join(10)


def _deliveries(sender: AsyncSender, url: str, count: int, in_flight: int) -> tuple[float, list[str]]:
    """Seconds for `count` POSTs with `in_flight` at a time (after a warm-up), and the
    accounts of those that failed."""
    async def one(gate: asyncio.Semaphore) -> str:
        async with gate:
            status, account = await sender.post(url, BODY, {"Content-Type": "application/rdf-patch"}, "secret")
            return "" if status == 202 else account

    async def work() -> tuple[float, list[str]]:
        gate = asyncio.Semaphore(in_flight)
        await asyncio.gather(*(one(gate) for _ in range(2 * in_flight)))
        start = time.perf_counter()
        accounts = await asyncio.gather(*(one(gate) for _ in range(count)))
        return time.perf_counter() - start, [a for a in accounts if a]

    result: list[tuple[float, list[str]]] = []

    async def run() -> None:
        result.append(await work())

    sender.submit(run()).result(timeout=600)
    return result[0]


def run(deliveries: int, in_flight: int) -> None:
    import trustme

    ca = trustme.CA()
    with tempfile.TemporaryDirectory() as tmp:
        ca_file = Path(tmp) / "ca.pem"
        ca.cert_pem.write_to_path(str(ca_file))
        policy = AddressPolicy(dev_mode=True, allowed=[], ca_file=str(ca_file))
        rates: dict[str, float] = {}
        for name, alpn, http2, max_requests in (
                ("HTTP/1.1, aiohttp (default)", ["h2", "http/1.1"], False, 1000),
                ("HTTP/2, httpcore", ["h2", "http/1.1"], True, 1000),
                ("HTTP/2, httpcore, connections never rotated", ["h2", "http/1.1"], True, 10**9),
                ("HTTP/1.1, httpcore", ["http/1.1"], True, 1000)):
            server = TlsServer(ca, Path(tmp), alpn, max_requests)
            sender = AsyncSender(policy, timeout=10, per_host=in_flight, user_agent="bench", http2=http2)
            try:
                seconds, failed = _deliveries(sender, server.url("/callback"), deliveries, in_flight)
            finally:
                sender.stop()
                server.stop()
            rates[name] = deliveries / seconds
            connections = len({port for _p, _v, port, *_ in server.requests})
            versions = sorted({version for _p, version, *_ in server.requests})
            kinds = sorted({a.split(":")[0] for a in failed})
            ratio = rates[name] / next(iter(rates.values()))
            click.echo(f"  {name:46} {rates[name]:7,.0f} deliveries/s  (x{ratio:.2f}; "
                       f"HTTP {'/'.join(versions)}, {connections} connection(s), {len(failed)} failed"
                       f"{' ' + ', '.join(kinds) if kinds else ''})")
