"""Push channels: what a long-lived answer sends, apart from who serves it.

A view of a push channel (Server-Sent Events) checks the request as any view does (the
caller, the graph, the position to resume from) and then describes the channel: its
opening, `poll` (the events after the last one sent and whether the channel ended: short
reads, run on a worker thread), the source whose generation says when there may be more,
and its keep-alive. The ASGI front (lucid_hub.web.front) serves the channel on its event
loop: no request thread is held while a client waits, so an open channel costs a few
kilobytes. Where no front serves the app (Flask's test client, werkzeug's server), the same
channel runs on the request's thread (`blocking`).
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

from flask import Response, current_app, g, request, stream_with_context

from lucid_hub.archive import ChainLink
from lucid_hub.patch_stream import PatchStream

# The WSGI environ key under which the front offers to take a push channel over.
SLOT = "lucid.push"
HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}  # proxies: pass events on at once
KEEP_ALIVE = 15.0
# A poll of a patch channel renders about this much at most: what waits for a slow reader is
# bounded by it (and the transport's buffer), however large the patches.
POLL_BYTES = 1 << 20


class Wake(Protocol):
    """What says there may be more: a counter of changes and a wait for the next one."""

    def generation(self) -> int: ...

    def wait(self, generation: int, timeout: float) -> object: ...


@dataclass
class Channel:
    """One push channel. `poll` keeps the channel's position itself; it is called again after
    each change of `wake` and every `keepalive` seconds, never by two threads at once."""

    opening: bytes
    poll: Callable[[], tuple[list[bytes], bool]]
    wake: Wake
    party: str | None = None  # the OAuth client it serves (its limit), None: anonymous (`answer` says)
    keepalive: float = KEEP_ALIVE
    keepalive_line: bytes = b": keep-alive\n\n"
    pace: float = 0.0  # least seconds between two polls that found events (the console's pages)
    lifetime: float | None = None  # the channel ends after this many seconds (the client reconnects)
    in_app: bool = False  # `poll` uses the Flask app's context (the console's pages)
    shared: PatchPoll | None = None  # a poll other channels at the same position may share
    on_close: list[Callable[[], None]] = field(default_factory=list)

    def close(self) -> None:
        for action in self.on_close:
            action()


class Slot:
    """The front's offer, in the environ: a view puts its channel here instead of streaming."""

    def __init__(self) -> None:
        self.channel: Channel | None = None


def on_loop() -> bool:
    """Whether the front serves this request (a push channel then holds no thread)."""
    return isinstance(request.environ.get(SLOT), Slot)


def answer(channel: Channel) -> Response:
    """The response of a push view: handed to the front when one serves the request, else
    streamed by this thread. The channel served is the view's, for the caller (its limit) and,
    for a poll that needs the app's context, with it."""
    caller = g.get("principal")
    served = dataclasses.replace(channel, party=caller.endpoint_id if caller is not None else None)
    slot = request.environ.get(SLOT)
    if isinstance(slot, Slot):
        if channel.in_app:
            app, inner = current_app._get_current_object(), channel.poll  # type: ignore[attr-defined]

            def poll() -> tuple[list[bytes], bool]:
                with app.app_context():
                    return inner()

            served = dataclasses.replace(served, poll=poll)
        slot.channel = served
        return Response(status=200, mimetype="text/event-stream", headers=HEADERS)
    response = Response(stream_with_context(blocking(served)), mimetype="text/event-stream", headers=HEADERS)
    response.call_on_close(served.close)
    return response


def blocking(channel: Channel) -> Iterator[bytes]:
    """The channel served by the calling thread (where no event loop serves it)."""
    if channel.opening:
        yield channel.opening
    started = quiet = time.monotonic()
    while True:
        seen = channel.wake.generation()
        events, ended = channel.poll()
        yield from events
        if ended:
            return
        now = time.monotonic()
        if channel.lifetime is not None and now - started >= channel.lifetime:
            return
        if events:
            quiet = now
            if channel.pace:
                time.sleep(channel.pace)  # (pacing the stream, not synchronising anything)
            continue
        if now - quiet >= channel.keepalive:
            quiet = now
            yield channel.keepalive_line
        channel.wake.wait(seen, channel.keepalive)


def sse(event: str, data: str, ident: int | str | None = None) -> bytes:
    """One Server-Sent Event."""
    head = f"event: {event}\n" if ident is None else f"event: {event}\nid: {ident}\n"
    return f"{head}data: {data}\n\n".encode()


class Rendered:
    """The last events rendered, shared by the push clients of a graph (a small LRU): every
    client of a graph gets the same event, rendered once (bench streams, bench push)."""

    def __init__(self, capacity: int = 512) -> None:
        self.capacity = capacity
        self._items: OrderedDict[tuple[str, ...], bytes] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[str, ...], make: Callable[[], bytes]) -> bytes:
        found = self._items.get(key)  # without the lock first: every client asks for the same
        if found is not None:
            return found
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
                return found
        made = make()
        with self._lock:
            self._items[key] = made
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)
        return made


RENDERED = Rendered()


class PatchPoll:
    """The poll of a patch channel: its position in the graph's chain, and a key under which
    channels at the same position, rendering alike for the same reader, share one poll (ten
    thousand anonymous readers of a public graph make one read and one render per event)."""

    def __init__(self, stream: PatchStream, graph: str, after: int, render: Callable[[ChainLink], bytes],
                 lapsed: Callable[[], str | None] | None, bodies: bool, stopped: Callable[[], bool],
                 share: tuple[str, ...] | None) -> None:
        self.stream, self.graph, self.position = stream, graph, after
        self.render, self.lapsed, self.bodies, self.stopped, self.share = render, lapsed, bodies, stopped, share

    def key(self) -> tuple[object, ...] | None:
        return None if self.share is None else (*self.share, self.graph, self.bodies, self.position)

    def adopt(self, position: int) -> None:
        """Take the outcome of the poll of a channel with the same key."""
        self.position = position

    def __call__(self) -> tuple[list[bytes], bool]:
        stream = self.stream
        if stream.ended or self.stopped():
            return [], True
        reason = self.lapsed() if self.lapsed is not None else None
        if reason is not None:
            return [sse("ended", json.dumps({"reason": reason}))], True
        events: list[bytes] = []
        size = 0
        for link in stream.read_now(self.graph, self.position, bodies=self.bodies):
            event = self.render(link)
            events.append(event)
            self.position = link.seq
            size += len(event)
            if size >= POLL_BYTES:  # (the rest at the next poll, once these were taken)
                break
        return events, False


def reader_key() -> str:
    """Who reads, for sharing polls: channels of one reader (or of anonymous readers) decide
    their reads alike."""
    caller = g.get("principal")
    return "anonymous" if caller is None else f"token:{caller.jti}"


def patch_channel(stream: PatchStream, graph: str, after: int, opening: bytes, render: Callable[[ChainLink], bytes],
                  lapsed: Callable[[], str | None] | None = None, *, bodies: bool = False,
                  stopped: Callable[[], bool] = lambda: False, share: tuple[str, ...] | None = None) -> Channel:
    """A channel of a graph's patches after chain position `after`, each rendered by
    `render`; `lapsed` (asked at each poll) ends it with an `ended` event saying why the
    caller may no longer read the graph. Channels with the same `share` (what their render
    depends on, and who reads) at the same position share their polls."""
    poll = PatchPoll(stream, graph, after, render, lapsed, bodies, stopped, share)
    return Channel(opening, poll, stream, shared=poll)
