"""Push channels' fan-out on the front's event loop: a source's changes (lucid_hub.web.push.Wake)
heard on the loop; channels waiting for a change or for their own next due time (a wheel of
seconds, no timer per channel); their polls run in batches on the push pool; and the events
of channels that share a position written straight to their connections.

Why written here: no ASGI server or library offers a shared write to ten thousand waiting
responses; uvicorn's own send per channel and event was four fifths of the loop's time
(docs/BENCHMARKS.md, push fan-out).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Callable
from typing import Any

from lucid_hub.web import push

# Bytes a push channel's connection may hold unsent before the fan-out stops writing to it
# and hands it back to its own coroutine, whose send meets LUCID_PUSH_SEND_SECONDS.
DIRECT_BUFFER = 64 * 1024  # (uvicorn pauses its own sends at the same mark)


class LoopWake:
    """A source's changes (lucid_hub.web.push.Wake) heard on the event loop: one thread waits
    on the source and wakes every channel of it at once."""

    def __init__(self, source: push.Wake, loop: asyncio.AbstractEventLoop,
                 fan_out: Callable[[LoopWake, list[Waiter]], None] | None = None) -> None:
        self.source = source
        self.loop = loop
        self.fan_out = fan_out  # takes the waiters whose events the front writes itself
        self.generation = source.generation()
        self._event = asyncio.Event()
        self.waiters: set[Waiter] = set()  # push channels waiting for the next change
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
        direct: list[Waiter] = []
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


class Waiter:
    """A push channel waiting: for its source's next change, or its own next due time (a
    keep-alive, a poll, its lifetime), whichever comes first. The due times sit in the front's
    wheel of seconds: no timer per channel."""

    __slots__ = ("direct", "future", "second")

    def __init__(self, direct: Direct | None = None) -> None:
        self.future: asyncio.Future[None] | None = None
        self.second = -1  # its slot in the wheel (-1: none)
        self.direct = direct  # set: a change is written by the front's fan-out, not by waking it

    def wake(self) -> None:
        if self.future is not None and not self.future.done():
            self.future.set_result(None)


class Clock:
    """A push channel's times (loop time): when it started, last sent something, last polled.
    Shared by its coroutine and the front's fan-out, which writes for it while it waits."""

    __slots__ = ("polled", "quiet", "started")

    def __init__(self, now: float) -> None:
        self.started = self.quiet = self.polled = now

    def due(self, channel: push.Channel) -> float:
        """When the channel must be looked at without a change: a keep-alive, a poll, its end."""
        due = min(self.quiet, self.polled) + channel.keepalive
        return due if channel.lifetime is None else min(due, self.started + channel.lifetime)


class Direct:
    """What the fan-out needs to write a waiting channel's events itself: its channel, its
    connection's transport (the response is chunked: uvicorn chose it when the channel's
    headers went out) and its clock."""

    __slots__ = ("channel", "clock", "transport")

    def __init__(self, channel: push.Channel, transport: asyncio.WriteTransport, clock: Clock) -> None:
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


class FanOut:
    """The push channels of one front waiting on their sources, and the fan-out of a change to
    them (on the loop)."""

    def __init__(self, polls: Polls) -> None:
        self.polls = polls
        self.ending = False  # the server is stopping: every waiter is woken, to end
        self.direct_writes = 0  # events the fan-out wrote to push channels itself
        self._wakes: dict[int, LoopWake] = {}
        self._wheel: dict[int, set[Waiter]] = {}  # second -> channels due then
        self._last = -1  # the wheel's next second to look at

    def wake_of(self, source: push.Wake, loop: asyncio.AbstractEventLoop) -> tuple[LoopWake, bool]:
        """The loop's view of a source (made at its first channel); whether it is new."""
        wake = self._wakes.get(id(source))
        if wake is not None:
            return wake, False
        wake = self._wakes[id(source)] = LoopWake(source, loop, self._fan_out)
        return wake, True

    def end(self, loop: asyncio.AbstractEventLoop | None) -> None:
        """Every channel ends (safe in a signal handler): each is woken on the loop."""
        self.ending = True
        if loop is not None and not loop.is_closed():
            for wake in list(self._wakes.values()):
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(wake.changed)

    def close(self) -> None:
        self.ending = True
        for wake in self._wakes.values():
            wake.close()

    def due(self, now: float) -> None:
        """(On the loop, each second.) Wake the channels whose keep-alive, poll or lifetime is due."""
        if self._last < 0:
            self._last = int(now) - 1
        for second in range(self._last, int(now) + 1):
            for waiter in self._wheel.pop(second, ()):
                waiter.second = -1
                waiter.wake()
        self._last = int(now) + 1

    async def wait(self, wake: LoopWake, waiter: Waiter, seen: int, due: float) -> None:
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

    def _fan_out(self, wake: LoopWake, waiters: list[Waiter]) -> None:
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
                self.polls.batch(claimed, lambda results: self._write_direct(wake, results))
            except RuntimeError:  # the pool is shut down: the hub is stopping
                for _channel, (waiter, _generation) in claimed:
                    waiter.wake()

    def _write_direct(self, wake: LoopWake, results: list[tuple[Any, Any, Exception | None]]) -> None:
        """(On the loop.) The fan-out's polls are back: write each channel's events, then let
        it wait again (in the wheel at its next due time and among `wake`'s waiters)."""
        now = asyncio.get_running_loop().time()
        again: list[Waiter] = []
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

    def _wheel_at(self, waiter: Waiter, due: float) -> None:
        waiter.second = int(due) + 1
        self._wheel.setdefault(waiter.second, set()).add(waiter)

    def _unwheel(self, waiter: Waiter) -> None:
        if waiter.second >= 0:
            slot = self._wheel.get(waiter.second)
            if slot is not None:
                slot.discard(waiter)
                if not slot:
                    del self._wheel[waiter.second]
            waiter.second = -1
