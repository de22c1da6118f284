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

Why this is written here rather than taken from a2wsgi (whose `build_environ` it uses): its
responder reads the body from the worker thread as it arrives and blocks that thread
without a time limit on a client that does not read the answer; and the hand-over of a push
channel from a view to the loop is ours. docs/architecture.md, "The front", has the picture.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import logging
import tempfile
import threading
import time
from collections import Counter, deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from a2wsgi.wsgi import build_environ
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from lucid_hub.errors import LucidError
from lucid_hub.web import push
from lucid_hub.web.errors import bearer_challenge, status_of

log = logging.getLogger(__name__)

Message = dict[str, Any]
Receive = Callable[[], Any]
Send = Callable[[Message], Any]

SPOOL_BYTES = 1 << 20  # a request body beyond this waits on disk for its worker thread
# An answer up to this size is sent from the loop once the worker thread made it (the thread is
# free at once); a larger one in parts of about this size, the thread waiting for each.
PART_BYTES = 1 << 20
# Bytes a push channel's connection may hold unsent before the fan-out stops writing to it
# and hands it back to its own coroutine, whose send meets LUCID_PUSH_SEND_SECONDS.
DIRECT_BUFFER = 64 * 1024  # (uvicorn pauses its own sends at the same mark)
# The scope key under which the hub's HTTP protocol gives the front a connection's transport.
TRANSPORT = "lucid.transport"
# A client answered 429 with Retry-After that asks again before then is held here (on the loop,
# no thread) until then, this long at most, before its request goes on: a party that ignores
# Retry-After floods itself, not the worker threads the others share.
HOLD_SECONDS = 5.0
HELD_CLIENTS = 10_000  # clients remembered (by the credentials they send): the oldest go
DRAIN_BYTES = 64 * 1024 * 1024  # after a 413, this much more is read so the client gets the answer


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


class LoopWake:
    """A source's changes (lucid_hub.web.push.Wake) heard on the event loop: one thread waits
    on the source and wakes every channel of it at once."""

    def __init__(self, source: push.Wake, loop: asyncio.AbstractEventLoop,
                 fan_out: Callable[[LoopWake, list[_Waiter]], None] | None = None) -> None:
        self.source = source
        self.loop = loop
        self.fan_out = fan_out  # takes the waiters whose events the front writes itself
        self.generation = source.generation()
        self._event = asyncio.Event()
        self.waiters: set[_Waiter] = set()  # push channels waiting for the next change
        self._closed = False
        threading.Thread(target=self._watch, name="push-wake", daemon=True).start()

    def _watch(self) -> None:
        seen = self.generation
        while not self._closed:
            self.source.wait(seen, 1.0)
            now = self.source.generation()
            if now != seen:
                seen = now
                try:
                    self.loop.call_soon_threadsafe(self.changed, now)
                except RuntimeError:  # the loop closed
                    return

    def changed(self, generation: int | None = None) -> None:
        """(On the loop.) Wake every waiter."""
        if generation is not None:
            self.generation = generation
        event, self._event = self._event, asyncio.Event()
        event.set()
        waiters, self.waiters = self.waiters, set()
        direct: list[_Waiter] = []
        for waiter in waiters:
            if waiter.direct is not None and self.fan_out is not None:
                direct.append(waiter)
            else:
                waiter.wake()
        if direct:
            assert self.fan_out is not None
            self.fan_out(self, direct)

    async def wait(self, seen: int, timeout: float | None = None) -> None:
        """Until the generation moves past `seen`, or `timeout` seconds (the SE protocol's
        sockets; push channels wait in the front's wheel instead: a timer each, ten thousand
        of them, was a third of the loop's time in `bench push`)."""
        if self.generation != seen:
            return
        event = self._event
        if timeout is None:
            await event.wait()
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await event.wait()

    def close(self) -> None:
        self._closed = True


class _Waiter:
    """A push channel waiting: for its source's next change, or its own next due time (a
    keep-alive, a poll, its lifetime), whichever comes first. The due times sit in the front's
    wheel of seconds: no timer per channel."""

    __slots__ = ("direct", "future", "second")

    def __init__(self, direct: _Direct | None = None) -> None:
        self.future: asyncio.Future[None] | None = None
        self.second = -1  # its slot in the wheel (-1: none)
        self.direct = direct  # set: a change is written by the front's fan-out, not by waking it

    def wake(self) -> None:
        if self.future is not None and not self.future.done():
            self.future.set_result(None)


class _Clock:
    """A push channel's times (loop time): when it started, last sent something, last polled.
    Shared by its coroutine and the front's fan-out, which writes for it while it waits."""

    __slots__ = ("polled", "quiet", "started")

    def __init__(self, now: float) -> None:
        self.started = self.quiet = self.polled = now

    def due(self, channel: push.Channel) -> float:
        """When the channel must be looked at without a change: a keep-alive, a poll, its end."""
        due = min(self.quiet, self.polled) + channel.keepalive
        return due if channel.lifetime is None else min(due, self.started + channel.lifetime)


class _Direct:
    """What the fan-out needs to write a waiting channel's events itself: its channel, its
    connection's transport (the response is chunked: uvicorn chose it when the channel's
    headers went out) and its clock."""

    __slots__ = ("channel", "clock", "transport")

    def __init__(self, channel: push.Channel, transport: asyncio.WriteTransport, clock: _Clock) -> None:
        self.channel = channel
        self.transport = transport
        self.clock = clock


class Polls:
    """Polls of push channels, in batches: the channels one change woke are polled by a few
    jobs on the push pool (a chunk each), not a thread hop each; their results come back to
    the loop in one call per chunk. A channel whose poll may wait on the network (the
    console's) is polled on its own."""

    CHUNK = 256

    def __init__(self, pool: concurrent.futures.ThreadPoolExecutor) -> None:
        self.pool = pool
        self._pending: list[tuple[push.Channel, asyncio.Future[tuple[list[bytes], bool]]]] = []

    def poll(self, channel: push.Channel) -> asyncio.Future[tuple[list[bytes], bool]]:
        loop = asyncio.get_running_loop()
        if channel.in_app:
            return asyncio.wrap_future(self.pool.submit(channel.poll), loop=loop)
        future: asyncio.Future[tuple[list[bytes], bool]] = loop.create_future()
        if not self._pending:
            loop.call_soon(self._submit, loop)
        self._pending.append((channel, future))
        return future

    def _submit(self, loop: asyncio.AbstractEventLoop) -> None:
        batch, self._pending = self._pending, []
        for start in range(0, len(batch), self.CHUNK):
            try:
                self.pool.submit(self._run, loop, batch[start:start + self.CHUNK])
            except RuntimeError as exc:  # the pool is shut down: the hub is stopping
                for _channel, future in batch[start:]:
                    if not future.done():
                        future.set_exception(exc)
                return

    def batch(self, channels: list[tuple[push.Channel, Any]],
              done: Callable[[list[tuple[Any, Any, Exception | None]]], None]) -> None:
        """Poll these channels (with a tag each) on the pool, a chunk a job; `done` gets each
        chunk's (tag, result, error) on the loop."""
        loop = asyncio.get_running_loop()
        for start in range(0, len(channels), self.CHUNK):
            self.pool.submit(self._run, loop, channels[start:start + self.CHUNK], done)

    @staticmethod
    def _run(loop: asyncio.AbstractEventLoop, batch: list[tuple[push.Channel, Any]],
             done: Callable[[list[tuple[Any, Any, Exception | None]]], None] | None = None) -> None:
        results: list[tuple[Any, Any, Exception | None]] = []
        shared: dict[tuple[object, ...], tuple[tuple[list[bytes], bool], int]] = {}
        for channel, tag in batch:
            key = channel.shared.key() if channel.shared is not None else None
            if key is not None and key in shared:  # another channel's poll at the same position
                result, position = shared[key]
                channel.shared.adopt(position)  # type: ignore[union-attr]
                results.append((tag, result, None))
                continue
            try:
                result = channel.poll()
            except Exception as exc:  # (reported to that channel's connection alone)
                results.append((tag, None, exc))
                continue
            if key is not None:
                shared[key] = (result, channel.shared.position)  # type: ignore[union-attr]
            results.append((tag, result, None))
        with contextlib.suppress(RuntimeError):  # (the loop closed: nobody waits any more)
            loop.call_soon_threadsafe(done or Polls._resolve, results)

    @staticmethod
    def _resolve(results: list[tuple[Any, Any, Exception | None]]) -> None:
        for future, value, exc in results:
            if future.done():
                continue
            if exc is not None:
                future.set_exception(exc)
            else:
                future.set_result(value)


class _Turns:
    """One client's requests on request threads: at most `at_once` of them at a time."""

    def __init__(self, at_once: int) -> None:
        self.gate = asyncio.Semaphore(at_once)
        self.users = 0  # its requests on threads or waiting for one


class _Cut(Exception):
    """The client did not take a part of the answer in time, or went away."""


class _Call:
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
        except _Cut:
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
            raise _Cut from None

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
        self._wakes: dict[int, LoopWake] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self.ending = False
        self.cut_off = 0  # connections cut for not taking what was sent in time
        # Push channels blocked in a send, since when: the tick cuts those over the limit.
        self._sending: dict[asyncio.Task[Any], float] = {}
        self._cut: set[asyncio.Task[Any]] = set()
        self._ticker: asyncio.Task[None] | None = None
        self._wheel: dict[int, set[_Waiter]] = {}  # second -> channels due then
        self._held: dict[bytes, float] = {}  # a client refused with Retry-After -> until when (loop time)
        self._turns: dict[bytes, _Turns] = {}  # a client with requests on threads -> its turns
        self.queued = 0  # requests that waited for their client's turn
        self.holds = 0
        self.direct_writes = 0  # events the fan-out wrote to push channels itself
        runtime.metrics.watch(self.metrics)

    def metrics(self) -> list[Metric]:
        """The front's figures at scrape time (this process's)."""
        open_ = GaugeMetricFamily("lucid_push_channels", "Push channels and WebSockets this process serves now.")
        open_.add_metric([], self.admission.total)
        counts: list[Metric] = [open_]
        for name, text, value in (
                ("lucid_push_refused", "Push channels and WebSockets refused over a limit "
                 "(LUCID_PUSH_MAX_CONNECTIONS, _PER_ADDRESS, _PER_CLIENT).", self.admission.refused),
                ("lucid_connections_cut", "Connections closed because the client did not take an answer's part "
                 "or an event within LUCID_PUSH_SEND_SECONDS.", self.cut_off),
                ("lucid_requests_held", "Requests held at the front because their client asked again before the "
                 "Retry-After of a 429 it was given.", self.holds),
                ("lucid_requests_queued", "Requests that waited at the front for a turn of their client "
                 "(LUCID_REQUESTS_PER_CLIENT of its requests were on threads).", self.queued),
                ("lucid_push_events_direct", "Events of push channels the front's fan-out wrote to their "
                 "connections itself (one shared poll, no wake-up each).", self.direct_writes)):
            counter = CounterMetricFamily(name, text)
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

    def end_channels(self) -> None:
        """Every push channel and socket ends (the server is stopping; safe in a signal
        handler): their clients reconnect to another replica or after the restart."""
        self.ending = True
        loop = self._loop
        if loop is not None and not loop.is_closed():
            for wake in list(self._wakes.values()):
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(wake.changed)

    def close(self) -> None:
        self.ending = True
        for wake in self._wakes.values():
            wake.close()
        self.requests.shutdown(wait=False, cancel_futures=True)
        self.polls.shutdown(wait=False, cancel_futures=True)

    def wake_of(self, source: push.Wake) -> LoopWake:
        wake = self._wakes.get(id(source))
        if wake is None:
            self._loop = asyncio.get_running_loop()
            wake = self._wakes[id(source)] = LoopWake(source, self._loop, self._fan_out)
            if self._ticker is None:
                self._ticker = self._loop.create_task(self._tick())
        return wake

    async def _tick(self) -> None:
        """Every second: cut the push channels blocked in a send for LUCID_PUSH_SEND_SECONDS,
        and wake those whose keep-alive, poll or lifetime is due."""
        loop = asyncio.get_running_loop()
        last = int(loop.time())
        while not self.ending:
            await asyncio.sleep(1.0)  # (the clock of keep-alives and of the send limit)
            now = loop.time()
            for task, since in list(self._sending.items()):
                if now - since > self.limits.send_seconds and task not in self._cut:
                    self._cut.add(task)
                    task.cancel()
            for second in range(last, int(now) + 1):
                for waiter in self._wheel.pop(second, ()):
                    waiter.second = -1
                    waiter.wake()
            last = int(now) + 1

    async def _wait(self, wake: LoopWake, waiter: _Waiter, seen: int, due: float) -> None:
        """Until `wake` moves past `seen` or the tick after `due`."""
        if wake.generation != seen:
            return
        waiter.future = asyncio.get_running_loop().create_future()
        self._wheel_at(waiter, due)
        wake.waiters.add(waiter)
        try:
            await waiter.future
        finally:
            wake.waiters.discard(waiter)
            self._unwheel(waiter)
            waiter.future = None

    def _fan_out(self, wake: LoopWake, waiters: list[_Waiter]) -> None:
        """(On the loop.) A change of `wake`'s source, for channels the front writes to itself:
        they are polled in batches (channels at one position share a poll) and their events
        written straight to their transports, without waking each channel's coroutine or an
        ASGI send each (per channel and event, those were four fifths of the loop's time at
        10,000 channels). A channel whose transport holds more than DIRECT_BUFFER unsent, or
        that is closing, is woken instead: its own send then meets the send limit. So is every
        channel when the server is stopping (they end)."""
        claimed: list[tuple[push.Channel, Any]] = []
        for waiter in waiters:
            if self.ending:
                waiter.wake()
                continue
            direct = waiter.direct
            assert direct is not None
            if waiter.future is None or waiter.future.done():
                continue  # its coroutine is gone, or was woken meanwhile
            transport = direct.transport
            if transport.is_closing() or transport.get_write_buffer_size() > DIRECT_BUFFER:
                waiter.wake()
                continue
            self._unwheel(waiter)  # until written, nothing else wakes it
            claimed.append((direct.channel, (waiter, wake.generation)))
        if claimed:
            try:
                self.channel_polls.batch(claimed, lambda results: self._write_direct(wake, results))
            except RuntimeError:  # the pool is shut down: the hub is stopping
                for _channel, (waiter, _generation) in claimed:
                    waiter.wake()

    def _write_direct(self, wake: LoopWake, results: list[tuple[Any, Any, Exception | None]]) -> None:
        """(On the loop.) The fan-out's polls are back: write each channel's events, then let
        it wait again (in the wheel at its next due time and among `wake`'s waiters)."""
        now = asyncio.get_running_loop().time()
        again: list[_Waiter] = []
        for (waiter, generation), result, error in results:
            direct = waiter.direct
            assert direct is not None
            if waiter.future is None or waiter.future.done():
                continue  # its coroutine ended meanwhile (the client went, or was cut off)
            if error is not None or result[1] or self.ending:  # a failure, the end: its coroutine polls again
                waiter.wake()
                continue
            events: list[bytes] = result[0]
            if events:
                body = b"".join(events)
                direct.transport.write(b"%x\r\n%b\r\n" % (len(body), body))  # (a chunk, as uvicorn frames one)
                direct.clock.quiet = now
                self.direct_writes += 1
            direct.clock.polled = now
            if wake.generation != generation:  # a change came while it was polled
                again.append(waiter)
                continue
            self._wheel_at(waiter, direct.clock.due(direct.channel))
            wake.waiters.add(waiter)
        if again:
            self._fan_out(wake, again)

    def _wheel_at(self, waiter: _Waiter, due: float) -> None:
        waiter.second = int(due) + 1
        self._wheel.setdefault(waiter.second, set()).add(waiter)

    def _unwheel(self, waiter: _Waiter) -> None:
        if waiter.second >= 0:
            slot = self._wheel.get(waiter.second)
            if slot is not None:
                slot.discard(waiter)
                if not slot:
                    del self._wheel[waiter.second]
            waiter.second = -1

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
        body = await self._body(scope, receive, send)
        if body is None:
            return
        loop = asyncio.get_running_loop()
        client = _client_key(scope)
        until = self._held.get(client) if client is not None else None
        if until is not None and client is not None:
            wait = until - loop.time()
            if wait > 0:
                self.holds += 1
                await asyncio.sleep(min(wait, HOLD_SECONDS))  # (throttling the client, not synchronising)
            else:
                del self._held[client]
        environ: dict[str, Any] = dict(build_environ(scope, body))  # type: ignore[arg-type]
        environ["CONTENT_LENGTH"] = str(_size(body))
        environ.pop("HTTP_TRANSFER_ENCODING", None)  # (the body is whole now)
        slot = push.Slot()
        environ[push.SLOT] = slot
        call = _Call(loop, send, self.limits.send_seconds)
        try:
            async with self._turn(client):
                await loop.run_in_executor(self.requests, call.run, self.app, environ)
        except RuntimeError:  # the pool is shut down: the server is stopping
            await _text(send, 503, "the hub is stopping; try again shortly", {"Retry-After": "5"})
            return
        finally:
            body.close()
        if slot.channel is not None:
            await self._push(scope, receive, send, slot.channel, call)
            return
        if call.status == 429 and client is not None:
            self._hold(client, call.headers, loop.time())
        if not call.cut:
            await call.finish()
        if call.cut:
            self.cut_off += 1

    @contextlib.asynccontextmanager
    async def _turn(self, client: bytes | None) -> AsyncIterator[None]:
        """A request thread for this client's request once fewer than LUCID_REQUESTS_PER_CLIENT
        of its requests hold one (the per-party bulkhead of the request threads: a partner
        sending many at once waits for itself, not the others). Without credentials, none."""
        if client is None:
            yield
            return
        turns = self._turns.get(client)
        if turns is None:
            turns = self._turns[client] = _Turns(self.limits.requests_per_client)
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

    def _hold(self, client: bytes, headers: list[tuple[bytes, bytes]], now: float) -> None:
        """Remember a client refused with Retry-After: its next requests wait until then."""
        retry = next((v for k, v in headers if k == b"retry-after"), b"")
        if not retry.isdigit():
            return
        if len(self._held) >= HELD_CLIENTS:
            for key in list(self._held)[: HELD_CLIENTS // 10]:  # (insertion order: the oldest)
                del self._held[key]
        self._held[client] = now + min(float(retry), HOLD_SECONDS)

    async def _body(self, scope: Message, receive: Receive, send: Send) -> Any:
        """The request body, read whole within LUCID_BODY_SECONDS (None: answered already)."""
        limit = self.limits.max_body_bytes
        body = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES)  # noqa: SIM115 (handed to the worker thread)
        size = 0
        try:
            async with asyncio.timeout(self.limits.body_seconds):
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        body.close()
                        return None
                    chunk = message.get("body", b"")
                    size += len(chunk)
                    if size > limit:
                        body.close()
                        await self._drain(receive, message)
                        await _text(send, 413, f"the request body exceeds the limit of {limit:,} bytes "
                                               "(LUCID_MAX_BODY_BYTES)")
                        return None
                    if chunk:
                        body.write(chunk)
                    if not message.get("more_body", False):
                        break
        except TimeoutError:
            body.close()
            await _text(send, 408, f"the request body did not arrive within {self.limits.body_seconds:g} s "
                                   "(LUCID_BODY_SECONDS)", {"Connection": "close"})
            return None
        body.seek(0)
        return body

    @staticmethod
    async def _drain(receive: Receive, message: Message) -> None:
        """Read and drop more of a body too large (so the client, still sending, gets the 413)."""
        budget = DRAIN_BYTES
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(5.0):
                while message.get("more_body", False) and budget > 0:
                    message = await receive()
                    budget -= len(message.get("body", b""))

    # --- push channels --------------------------------------------------------------------------
    async def _push(self, scope: Message, receive: Receive, send: Send, channel: push.Channel, call: _Call) -> None:
        address = (scope.get("client") or ("?", 0))[0]
        refusal = self.admission.take(address, channel.party)
        if refusal is not None:
            channel.close()
            await _text(send, refusal[0], refusal[1], {"Retry-After": "30"})
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

    async def _serve(self, channel: push.Channel, call: _Call, send: Send, scope: Message) -> None:
        loop = asyncio.get_running_loop()
        wake = self.wake_of(channel.wake)
        headers = [(k, v) for k, v in call.headers if k != b"content-length"]  # (the view's empty body)
        await self._send_within(send, {"type": "http.response.start", "status": call.status, "headers": headers})
        if channel.opening:
            await self._send_within(send, {"type": "http.response.body", "body": channel.opening, "more_body": True})
        clock = _Clock(loop.time())
        transport = scope.get(TRANSPORT)  # (the hub's HTTP protocol puts it there: push channels' fan-out)
        direct = transport is not None and scope.get("method") == "GET" and channel.shared is not None \
            and not channel.pace and not channel.in_app
        waiter = _Waiter(_Direct(channel, transport, clock) if direct and transport is not None else None)
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
                await self._wait(wake, waiter, seen, clock.due(channel))
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
                await _deny(scope, send, status_of(exc), str(exc),
                            {"WWW-Authenticate": bearer_challenge("invalid_token", str(exc))})
                return
            client = caller.endpoint_id
        address = (scope.get("client") or ("?", 0))[0]
        refusal = self.admission.take(address, client)
        if refusal is not None:
            await _deny(scope, send, refusal[0], refusal[1], {"Retry-After": "30"})
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
        if code == 0:  # the client closed
            return
        with contextlib.suppress(OSError, RuntimeError, TimeoutError):
            async with asyncio.timeout(1.0):
                await send({"type": "websocket.close", "code": code})


def _client_key(scope: Message) -> bytes | None:
    """Who asks, as far as the front can tell before the app: the credentials sent (None
    without: an address may be a proxy many partners share, so none is held by address)."""
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            return bytes(value)
    return None


def _size(body: Any) -> int:  # (of a spooled body: its file may be on disk)
    position = body.tell()
    body.seek(0, 2)
    size = int(body.tell())
    body.seek(position)
    return size


async def _text(send: Send, status: int, reason: str, headers: dict[str, str] | None = None) -> None:
    """A one-line plain-text answer (as the Flask app's errors are)."""
    data = (" ".join(reason.split()) + "\n").encode()
    fields = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(data)).encode()),
              (b"cache-control", b"no-store")]
    fields += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items()]
    with contextlib.suppress(OSError, RuntimeError, TimeoutError):
        async with asyncio.timeout(5.0):
            await send({"type": "http.response.start", "status": status, "headers": fields})
            await send({"type": "http.response.body", "body": data, "more_body": False})


async def _deny(scope: Message, send: Send, status: int, reason: str, headers: dict[str, str]) -> None:
    """A WebSocket handshake refused with an HTTP answer (where the server can: else a close, 403)."""
    if "websocket.http.response" not in scope.get("extensions", {}):
        await send({"type": "websocket.close", "code": 1008})
        return
    data = (" ".join(reason.split()) + "\n").encode()
    fields = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(data)).encode())]
    fields += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
    await send({"type": "websocket.http.response.start", "status": status, "headers": fields})
    await send({"type": "websocket.http.response.body", "body": data, "more_body": False})


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


def build_front(settings: Any, runtime: Any) -> Front:
    """The front of a hub whose parts the composition root opened."""
    from lucid_hub.web.app import create_app

    return Front(create_app(settings, runtime), runtime, Limits.of(settings), settings.web_threads)


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
        "ws_max_size": settings.max_query_bytes + 16_384, "ws_ping_interval": 25.0, "ws_ping_timeout": 20.0,
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
