"""The hub's front: one event loop (uvicorn) before the Flask app.

What a hostile or careless client can hold is a coroutine on this loop, never a thread:
- a request body is read here, whole (spooled to disk past 1 MiB), within LUCID_BODY_SECONDS,
  before the request reaches a worker thread: a body sent a byte at a time costs no thread;
- the Flask app answers requests on LUCID_WEB_THREADS worker threads; an answer is sent from
  here, each part within LUCID_PUSH_SEND_SECONDS, or the connection is closed (a client that
  stops reading holds neither a thread nor more than one part of the answer);
- push channels (Server-Sent Events, lucid_hub.web.push) are checked by their views like any
  request, then served here: a client waiting for events costs a few kilobytes; the
  channel's reads run on a small pool of their own (the push bulkhead), so a burst of
  events never queues the API's requests; a channel is admitted within limits per OAuth
  client, per address and in total;
- the SE protocol's WebSocket (/subscribe) is served here too (lucid_hub.web.queries.SeSocket).

The parts: the bridge to the Flask app's worker threads (lucid_hub.web.bridge), the push
channels' fan-out (lucid_hub.web.fanout), and how uvicorn serves it all (lucid_hub.web.serving).
The hand-over of a push channel from a view to the loop is ours: docs/architecture.md, "The
front", has the picture.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import logging
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from a2wsgi.wsgi import build_environ
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from lucid_hub.errors import LucidError
from lucid_hub.web import push
from lucid_hub.web.bridge import Call, Clients, Message, Receive, Send, client_key, deny, read_body, size_of, text
from lucid_hub.web.errors import bearer_challenge, status_of
from lucid_hub.web.fanout import Clock, Direct, FanOut, LoopWake, Polls, Waiter
from lucid_hub.web.serving import TRANSPORT

log = logging.getLogger(__name__)



@dataclass(frozen=True)
class Limits:
    """What one client, one address and all of them may hold (LUCID_PUSH_*, LUCID_BODY_SECONDS)."""

    total: int = 10_000  # push channels and sockets of this process
    per_address: int = 256
    per_client: int = 64  # per OAuth client (a partner's hub and its tools)
    send_seconds: float = 30.0  # a part of an answer or an event not taken by then: the connection is cut
    body_seconds: float = 60.0  # the whole request body, once its headers arrived
    auth_seconds: float = 10.0  # a WebSocket opened without a token authenticates within this
    max_body_bytes: int = 64 * 1024 * 1024
    poll_threads: int = 4  # the push bulkhead: reads for channels and sockets
    requests_per_client: int = 2  # requests of one client on request threads at once

    @classmethod
    def of(cls, settings: Any) -> Limits:
        return cls(total=settings.push_max_connections, per_address=settings.push_per_address,
                   per_client=settings.push_per_client, send_seconds=settings.push_send_seconds,
                   body_seconds=settings.body_seconds, auth_seconds=settings.push_auth_seconds,
                   max_body_bytes=settings.max_body_bytes, poll_threads=settings.push_threads,
                   requests_per_client=settings.requests_per_client or max(1, settings.web_threads // 4))


class Admission:
    """Counts of open channels by address and client; each is admitted within the limits."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.total = 0
        self.by_address: Counter[str] = Counter()
        self.by_client: Counter[str] = Counter()
        self.refused = 0

    def take(self, address: str, client: str | None) -> tuple[int, str] | None:
        """None: admitted (give it back with `give`); else the status and reason of the refusal."""
        limits = self.limits
        refusal: tuple[int, str] | None = None
        if self.total >= limits.total:
            refusal = 503, f"this hub serves {limits.total} push channels already (LUCID_PUSH_MAX_CONNECTIONS)"
        elif self.by_address[address] >= limits.per_address:
            refusal = 429, (f"{address} holds {limits.per_address} push channels already "
                            "(LUCID_PUSH_PER_ADDRESS): close one first")
        elif client is not None and self.by_client[client] >= limits.per_client:
            refusal = 429, (f"the client {client} holds {limits.per_client} push channels already "
                            "(LUCID_PUSH_PER_CLIENT): close one first")
        if refusal is not None:
            self.refused += 1
            return refusal
        self.total += 1
        self.by_address[address] += 1
        if client is not None:
            self.by_client[client] += 1
        return None

    def give(self, address: str, client: str | None) -> None:
        self.total -= 1
        self.by_address[address] -= 1
        if self.by_address[address] <= 0:
            del self.by_address[address]
        if client is not None:
            self.by_client[client] -= 1
            if self.by_client[client] <= 0:
                del self.by_client[client]


class Front:
    """The ASGI app: the Flask app on worker threads, push channels and sockets on the loop."""

    def __init__(self, app: Any, runtime: Any, limits: Limits, threads: int) -> None:
        self.app = app
        self.runtime = runtime
        self.limits = limits
        self.admission = Admission(limits)
        self.requests = concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="web")
        self.polls = concurrent.futures.ThreadPoolExecutor(limits.poll_threads, thread_name_prefix="push")
        self.channel_polls = Polls(self.polls)
        self.fanout = FanOut(self.channel_polls)
        self.clients = Clients(limits.requests_per_client)
        self._loop: asyncio.AbstractEventLoop | None = None
        self.cut_off = 0  # connections cut for not taking what was sent in time
        # Push channels blocked in a send, since when: the tick cuts those over the limit.
        self._sending: dict[asyncio.Task[Any], float] = {}
        self._cut: set[asyncio.Task[Any]] = set()
        self._ticker: asyncio.Task[None] | None = None
        runtime.metrics.watch(self.metrics)

    def metrics(self) -> list[Metric]:
        """The front's figures at scrape time (this process's)."""
        open_ = GaugeMetricFamily("lucid_push_channels", "Push channels and WebSockets this process serves now.")
        open_.add_metric([], self.admission.total)
        counts: list[Metric] = [open_]
        for name, help_text, value in (
                ("lucid_push_refused", "Push channels and WebSockets refused over a limit "
                 "(LUCID_PUSH_MAX_CONNECTIONS, _PER_ADDRESS, _PER_CLIENT).", self.admission.refused),
                ("lucid_connections_cut", "Connections closed because the client did not take an answer's part "
                 "or an event within LUCID_PUSH_SEND_SECONDS.", self.cut_off),
                ("lucid_requests_held", "Requests held at the front because their client asked again before the "
                 "Retry-After of a 429 it was given.", self.clients.holds),
                ("lucid_requests_queued", "Requests that waited at the front for a turn of their client "
                 "(LUCID_REQUESTS_PER_CLIENT of its requests were on threads).", self.clients.queued),
                ("lucid_push_events_direct", "Events of push channels the front's fan-out wrote to their "
                 "connections itself (one shared poll, no wake-up each).", self.fanout.direct_writes)):
            counter = CounterMetricFamily(name, help_text)
            counter.add_metric([], value)
            counts.append(counter)
        return counts

    # --- the ASGI entry -------------------------------------------------------------------------
    async def __call__(self, scope: Message, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self._http(scope, receive, send)
        elif kind == "websocket":
            await self._websocket(scope, receive, send)
        elif kind == "lifespan":
            await self._lifespan(receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self._loop = asyncio.get_running_loop()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                self.close()
                await send({"type": "lifespan.shutdown.complete"})
                return

    @property
    def ending(self) -> bool:
        return self.fanout.ending

    def end_channels(self) -> None:
        """Every push channel and socket ends (the server is stopping; safe in a signal
        handler): their clients reconnect to another replica or after the restart."""
        self.fanout.end(self._loop)

    def close(self) -> None:
        self.fanout.close()
        self.requests.shutdown(wait=False, cancel_futures=True)
        self.polls.shutdown(wait=False, cancel_futures=True)

    def wake_of(self, source: push.Wake) -> LoopWake:
        self._loop = asyncio.get_running_loop()
        wake, new = self.fanout.wake_of(source, self._loop)
        if new and self._ticker is None:
            self._ticker = self._loop.create_task(self._tick())
        return wake

    async def _tick(self) -> None:
        """Every second: cut the push channels blocked in a send for LUCID_PUSH_SEND_SECONDS,
        and wake those whose keep-alive, poll or lifetime is due."""
        loop = asyncio.get_running_loop()
        self.fanout.due(loop.time())
        while not self.ending:
            await asyncio.sleep(1.0)  # (the clock of keep-alives and of the send limit)
            now = loop.time()
            for task, since in list(self._sending.items()):
                if now - since > self.limits.send_seconds and task not in self._cut:
                    self._cut.add(task)
                    task.cancel()
            self.fanout.due(now)

    async def _send_within(self, send: Send, message: Message) -> None:
        """A push channel's send; the tick cuts it off if it does not complete in time."""
        task = asyncio.current_task()
        assert task is not None
        self._sending[task] = asyncio.get_running_loop().time()
        try:
            await send(message)
        finally:
            del self._sending[task]

    # --- requests -------------------------------------------------------------------------------
    async def _http(self, scope: Message, receive: Receive, send: Send) -> None:
        body = await read_body(receive, send, self.limits.max_body_bytes, self.limits.body_seconds)
        if body is None:
            return
        loop = asyncio.get_running_loop()
        client = client_key(scope)
        held = self.clients.held_for(client, loop.time())
        if held:
            await asyncio.sleep(held)  # (throttling the client, not synchronising)
        environ: dict[str, Any] = dict(build_environ(scope, body))  # type: ignore[arg-type]
        environ["CONTENT_LENGTH"] = str(size_of(body))
        environ.pop("HTTP_TRANSFER_ENCODING", None)  # (the body is whole now)
        slot = push.Slot()
        environ[push.SLOT] = slot
        call = Call(loop, send, self.limits.send_seconds)
        try:
            async with self.clients.turn(client):
                await loop.run_in_executor(self.requests, call.run, self.app, environ)
        except RuntimeError:  # the pool is shut down: the server is stopping
            await text(send, 503, "the hub is stopping; try again shortly", {"Retry-After": "5"})
            return
        finally:
            body.close()
        if slot.channel is not None:
            await self._push(scope, receive, send, slot.channel, call)
            return
        if call.status == 429 and client is not None:
            self.clients.hold(client, call.headers, loop.time())
        if not call.cut:
            await call.finish()
        if call.cut:
            self.cut_off += 1

    # --- push channels --------------------------------------------------------------------------
    async def _push(self, scope: Message, receive: Receive, send: Send, channel: push.Channel, call: Call) -> None:
        address = (scope.get("client") or ("?", 0))[0]
        refusal = self.admission.take(address, channel.party)
        if refusal is not None:
            channel.close()
            await text(send, refusal[0], refusal[1], {"Retry-After": "30"})
            return
        task = asyncio.current_task()

        async def disconnected() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            if task is not None:
                task.cancel()

        watcher = asyncio.create_task(disconnected())
        try:
            await self._serve(channel, call, send, scope)
        except asyncio.CancelledError:
            if task in self._cut:  # a reader too slow: cut off (its events are not buffered)
                self._cut.discard(task)
                self.cut_off += 1
                return
            if watcher.done():  # the client went away: nothing to report
                return
            raise
        finally:
            watcher.cancel()
            self.admission.give(address, channel.party)
            channel.close()

    async def _serve(self, channel: push.Channel, call: Call, send: Send, scope: Message) -> None:
        loop = asyncio.get_running_loop()
        wake = self.wake_of(channel.wake)
        headers = [(k, v) for k, v in call.headers if k != b"content-length"]  # (the view's empty body)
        await self._send_within(send, {"type": "http.response.start", "status": call.status, "headers": headers})
        if channel.opening:
            await self._send_within(send, {"type": "http.response.body", "body": channel.opening, "more_body": True})
        clock = Clock(loop.time())
        transport = scope.get(TRANSPORT)  # (the hub's HTTP protocol puts it there: push channels' fan-out)
        direct = transport is not None and scope.get("method") == "GET" and channel.shared is not None \
            and not channel.pace and not channel.in_app
        waiter = Waiter(Direct(channel, transport, clock) if direct and transport is not None else None)
        while not self.ending:
            seen = wake.generation
            events, ended = await self.channel_polls.poll(channel)
            clock.polled = loop.time()
            if events:
                clock.quiet = clock.polled
                await self._send_within(send, {"type": "http.response.body", "body": b"".join(events),
                                               "more_body": True})
            if ended or (channel.lifetime is not None and clock.polled - clock.started >= channel.lifetime):
                break
            if events:
                if channel.pace:
                    await asyncio.sleep(channel.pace)  # (pacing the stream, not synchronising anything)
                continue
            while wake.generation == seen and not self.ending:  # until a change, or a poll is due
                now = loop.time()
                if now - clock.quiet >= channel.keepalive:
                    clock.quiet = now
                    await self._send_within(send, {"type": "http.response.body", "body": channel.keepalive_line,
                                                   "more_body": True})
                if now - clock.polled >= channel.keepalive or (
                        channel.lifetime is not None and now - clock.started >= channel.lifetime):
                    break
                # (A channel the front writes to itself is not woken by a change: the fan-out polls
                # for it and writes, and it waits on; it wakes for its due time, or when the
                # fan-out hands it back. Either way the generation moved, and it polls itself.)
                await self.fanout.wait(wake, waiter, seen, clock.due(channel))
        await self._send_within(send, {"type": "http.response.body", "body": b"", "more_body": False})

    # --- the SE protocol's WebSocket ------------------------------------------------------------
    def _in_app(self, action: Callable[..., Any], *args: Any) -> Any:
        """(On a worker thread.) `action` in the Flask app's context (the views' helpers it uses)."""
        with self.app.app_context():
            return action(*args)

    async def _websocket(self, scope: Message, receive: Receive, send: Send) -> None:
        from lucid_hub.web.queries import SeSocket, bearer

        if scope["path"] != "/subscribe":
            await send({"type": "websocket.close", "code": 1008})  # before the accept: HTTP 403
            return
        loop = asyncio.get_running_loop()
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        token = bearer(headers.get("authorization", ""))
        client: str | None = None
        if token is not None:  # a token on the handshake is checked before the upgrade: 401, not 101
            try:
                caller = await loop.run_in_executor(self.polls, self.runtime.tokens.validate, token)
            except LucidError as exc:
                await deny(scope, send, status_of(exc), str(exc),
                            {"WWW-Authenticate": bearer_challenge("invalid_token", str(exc))})
                return
            client = caller.endpoint_id
        address = (scope.get("client") or ("?", 0))[0]
        refusal = self.admission.take(address, client)
        if refusal is not None:
            await deny(scope, send, refusal[0], refusal[1], {"Retry-After": "30"})
            return
        try:
            if (await receive())["type"] != "websocket.connect":
                return
            await send({"type": "websocket.accept"})
            outbox: deque[str] = deque()
            socket = SeSocket(self.runtime, outbox.append, token)
            await self._socket(socket, outbox, receive, send, authenticated=token is not None)
        finally:
            self.admission.give(address, client)

    async def _socket(self, socket: Any, outbox: deque[str], receive: Receive, send: Send, *,
                      authenticated: bool) -> None:
        loop = asyncio.get_running_loop()
        queries, windows = self.wake_of(self.runtime.queries), self.wake_of(self.runtime.windows)
        flushing = asyncio.Lock()
        timeout = self.limits.send_seconds

        async def flush() -> None:
            async with flushing:
                while outbox:
                    async with asyncio.timeout(timeout):
                        await send({"type": "websocket.send", "text": outbox.popleft()})

        async def pusher() -> None:
            while not self.ending:
                seen = (queries.generation, windows.generation)
                await loop.run_in_executor(self.polls, self._in_app, socket.push)
                await flush()
                if (queries.generation, windows.generation) != seen:
                    continue
                waits = [asyncio.ensure_future(queries.wait(seen[0], 15.0)),
                         asyncio.ensure_future(windows.wait(seen[1], 15.0))]
                try:
                    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    for waiting in waits:
                        waiting.cancel()

        async def reader() -> int:
            """Each message handled in turn; the close code to end with (None: the client closed)."""
            deadline = loop.time() + self.limits.auth_seconds
            while True:
                wait = None if authenticated or socket.authenticated else max(0.0, deadline - loop.time())
                try:
                    async with asyncio.timeout(wait):
                        message = await receive()
                except TimeoutError:
                    outbox.append(json.dumps({"error": "invalid_token", "status_code": 401, "error_description":
                                              f"no request with a valid access token within "
                                              f"{self.limits.auth_seconds:g} s of the handshake"}))
                    await flush()
                    return 1008  # policy violation: no valid token in time
                if message["type"] == "websocket.disconnect":
                    return 0
                raw = message.get("text")
                await loop.run_in_executor(self.polls, self._in_app, socket.handle,
                                           raw if raw is not None else message.get("bytes"))
                await flush()

        tasks = [asyncio.create_task(reader()), asyncio.create_task(pusher())]
        code = 1000
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                failure = task.exception()
                if isinstance(failure, TimeoutError):
                    self.cut_off += 1  # a reader too slow: cut off, its messages not buffered
                    code = 1008
                elif failure is not None:
                    raise failure
                elif isinstance(result := task.result(), int):  # (the reader's; the pusher ends when the hub stops)
                    code = result
        finally:
            socket.close()
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            if not self.ending:  # gone without unsubscribing: detached (not when the hub stops)
                with contextlib.suppress(Exception):
                    await loop.run_in_executor(self.polls, self._in_app, socket.detach)
        if code == 0:  # the client closed
            return
        with contextlib.suppress(OSError, RuntimeError, TimeoutError):
            async with asyncio.timeout(1.0):
                await send({"type": "websocket.close", "code": code})


def build_front(settings: Any, runtime: Any) -> Front:
    """The front of a hub whose parts the composition root opened."""
    from lucid_hub.web.app import create_app

    return Front(create_app(settings, runtime), runtime, Limits.of(settings), settings.web_threads)
