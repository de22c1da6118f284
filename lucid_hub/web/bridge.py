"""The bridge between the front's event loop and the Flask app on worker threads: a request's
body read whole on the loop, its answer made on a thread and sent from the loop in parts,
each within the send limit; one client's requests taking turns for the threads; a client told
to retry later held at the loop until then.

Why written here rather than taken from a2wsgi (whose `build_environ` the front uses): its
responder reads the body from the worker thread as it arrives and blocks that thread without
a time limit on a client that does not read the answer.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import tempfile
from collections.abc import AsyncIterator, Callable
from typing import Any

from lucid_hub.web import push

Message = dict[str, Any]
Receive = Callable[[], Any]
Send = Callable[[Message], Any]

SPOOL_BYTES = 1 << 20  # a request body beyond this waits on disk for its worker thread
# An answer up to this size is sent from the loop once the worker thread made it (the thread is
# free at once); a larger one in parts of about this size, the thread waiting for each.
PART_BYTES = 1 << 20
# A client answered 429 with Retry-After that asks again before then is held here (on the loop,
# no thread) until then, this long at most, before its request goes on: a party that ignores
# Retry-After floods itself, not the worker threads the others share.
HOLD_SECONDS = 5.0
HELD_CLIENTS = 10_000  # clients remembered (by the credentials they send): the oldest go
DRAIN_BYTES = 64 * 1024 * 1024  # after a 413, this much more is read so the client gets the answer


class _Turns:
    """One client's requests on request threads: at most `at_once` of them at a time."""

    def __init__(self, at_once: int) -> None:
        self.gate = asyncio.Semaphore(at_once)
        self.users = 0  # its requests on threads or waiting for one


class Cut(Exception):
    """The client did not take a part of the answer in time, or went away."""


class Call:
    """One request through the WSGI app on a worker thread; its answer is sent on the loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, send: Send, send_seconds: float) -> None:
        self.loop = loop
        self.send = send
        self.send_seconds = send_seconds
        self.status = 500
        self.headers: list[tuple[bytes, bytes]] = []
        self.started = False
        self.cut = False
        self.rest: list[bytes] = []  # the answer's last part, sent by the loop

    def start_response(self, status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        self.status = int(status.split(" ", 1)[0])
        self.headers = [(name.strip().lower().encode("latin-1"), value.strip().encode("latin-1"))
                        for name, value in headers]
        return self._write

    def _write(self, data: bytes) -> None:  # (WSGI's write callable; Flask does not use it)
        self._emit([data], more=True)

    def run(self, app: Any, environ: dict[str, Any]) -> None:
        iterable = app(environ, self.start_response)
        try:
            slot = environ[push.SLOT]
            if slot.channel is not None:
                return  # the front serves the channel
            parts: list[bytes] = []
            size = 0
            for chunk in iterable:
                if chunk:
                    parts.append(chunk)
                    size += len(chunk)
                if size >= PART_BYTES:
                    self._emit(parts, more=True)
                    parts, size = [], 0
            self.rest = parts
        except Cut:
            self.cut = True
        finally:
            close = getattr(iterable, "close", None)
            if close is not None:
                close()

    def _emit(self, parts: list[bytes], *, more: bool) -> None:
        messages: list[Message] = []
        if not self.started:
            self.started = True
            messages.append({"type": "http.response.start", "status": self.status, "headers": self.headers})
        messages.append({"type": "http.response.body", "body": b"".join(parts), "more_body": more})
        future = asyncio.run_coroutine_threadsafe(self._send_all(messages), self.loop)
        try:
            future.result()
        except (TimeoutError, OSError, RuntimeError, concurrent.futures.CancelledError):
            raise Cut from None

    async def finish(self) -> None:
        """(On the loop.) The answer's start, if not sent yet, and its last part."""
        messages: list[Message] = []
        if not self.started:
            self.started = True
            messages.append({"type": "http.response.start", "status": self.status, "headers": self.headers})
        messages.append({"type": "http.response.body", "body": b"".join(self.rest), "more_body": False})
        try:
            await self._send_all(messages)
        except TimeoutError:
            self.cut = True

    async def _send_all(self, messages: list[Message]) -> None:
        async with asyncio.timeout(self.send_seconds):
            for message in messages:
                await self.send(message)


class Clients:
    """Each client's turns at the request threads, and the clients held until their Retry-After."""

    def __init__(self, requests_per_client: int) -> None:
        self.requests_per_client = requests_per_client
        self._held: dict[bytes, float] = {}  # a client refused with Retry-After -> until when (loop time)
        self._turns: dict[bytes, _Turns] = {}  # a client with requests on threads -> its turns
        self.queued = 0  # requests that waited for their client's turn
        self.holds = 0

    def held_for(self, client: bytes | None, now: float) -> float:
        """Seconds a client that asks again before the Retry-After it was given waits first (0:
        none; a plain look-up for every other request, nothing awaited)."""
        until = self._held.get(client) if client is not None else None
        if until is None or client is None:
            return 0.0
        wait = until - now
        if wait <= 0:
            del self._held[client]
            return 0.0
        self.holds += 1
        return min(wait, HOLD_SECONDS)

    @contextlib.asynccontextmanager
    async def turn(self, client: bytes | None) -> AsyncIterator[None]:
        """A request thread for this client's request once fewer than LUCID_REQUESTS_PER_CLIENT
        of its requests hold one (the per-party bulkhead of the request threads: a partner
        sending many at once waits for itself, not the others). Without credentials, none."""
        if client is None:
            yield
            return
        turns = self._turns.get(client)
        if turns is None:
            turns = self._turns[client] = _Turns(self.requests_per_client)
        turns.users += 1
        try:
            if turns.gate.locked():
                self.queued += 1
            async with turns.gate:
                yield
        finally:
            turns.users -= 1
            if not turns.users:
                del self._turns[client]

    def hold(self, client: bytes, headers: list[tuple[bytes, bytes]], now: float) -> None:
        """Remember a client refused with Retry-After: its next requests wait until then."""
        retry = next((v for k, v in headers if k == b"retry-after"), b"")
        if not retry.isdigit():
            return
        if len(self._held) >= HELD_CLIENTS:
            for key in list(self._held)[: HELD_CLIENTS // 10]:  # (insertion order: the oldest)
                del self._held[key]
        self._held[client] = now + min(float(retry), HOLD_SECONDS)


async def read_body(receive: Receive, send: Send, limit: int, seconds: float) -> Any:
    """The request body, read whole within LUCID_BODY_SECONDS (None: answered already)."""
    body = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES)  # noqa: SIM115 (handed to the worker thread)
    size = 0
    try:
        async with asyncio.timeout(seconds):
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    body.close()
                    return None
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > limit:
                    body.close()
                    await _drain(receive, message)
                    await text(send, 413, f"the request body exceeds the limit of {limit:,} bytes "
                                          "(LUCID_MAX_BODY_BYTES)")
                    return None
                if chunk:
                    body.write(chunk)
                if not message.get("more_body", False):
                    break
    except TimeoutError:
        body.close()
        await text(send, 408, f"the request body did not arrive within {seconds:g} s "
                              "(LUCID_BODY_SECONDS)", {"Connection": "close"})
        return None
    body.seek(0)
    return body


async def _drain(receive: Receive, message: Message) -> None:
    """Read and drop more of a body too large (so the client, still sending, gets the 413)."""
    budget = DRAIN_BYTES
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(5.0):
            while message.get("more_body", False) and budget > 0:
                message = await receive()
                budget -= len(message.get("body", b""))


def client_key(scope: Message) -> bytes | None:
    """Who asks, as far as the front can tell before the app: the credentials sent (None
    without: an address may be a proxy many partners share, so none is held by address)."""
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            return bytes(value)
    return None


def size_of(body: Any) -> int:  # (of a spooled body: its file may be on disk)
    position = body.tell()
    body.seek(0, 2)
    size = int(body.tell())
    body.seek(position)
    return size


async def text(send: Send, status: int, reason: str, headers: dict[str, str] | None = None) -> None:
    """A one-line plain-text answer (as the Flask app's errors are)."""
    data = (" ".join(reason.split()) + "\n").encode()
    fields = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(data)).encode()),
              (b"cache-control", b"no-store")]
    fields += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items()]
    with contextlib.suppress(OSError, RuntimeError, TimeoutError):
        async with asyncio.timeout(5.0):
            await send({"type": "http.response.start", "status": status, "headers": fields})
            await send({"type": "http.response.body", "body": data, "more_body": False})


async def deny(scope: Message, send: Send, status: int, reason: str, headers: dict[str, str]) -> None:
    """A WebSocket handshake refused with an HTTP answer (where the server can: else a close, 403)."""
    if "websocket.http.response" not in scope.get("extensions", {}):
        await send({"type": "websocket.close", "code": 1008})
        return
    data = (" ".join(reason.split()) + "\n").encode()
    fields = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(data)).encode())]
    fields += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
    await send({"type": "websocket.http.response.start", "status": status, "headers": fields})
    await send({"type": "websocket.http.response.body", "body": data, "more_body": False})
