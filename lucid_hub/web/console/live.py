"""A console page's live updates: its moving figures as Server-Sent Events, on slots of their own."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable
from typing import Any

from flask import Response, current_app

from lucid_hub.web import push
from lucid_hub.web.console.figures import Chart
from lucid_hub.web.http import runtime

# Seconds a live stream stays open (the browser's EventSource then opens the next), the least
# time between two updates of one stream (a burst of patches is one update), and the most while
# the archive does not change (deliveries, mirrors and lags move without a patch of ours).
LIVE_SECONDS = 300.0


LIVE_EVERY = 1.0


LIVE_IDLE = 5.0


# The share of a process's request threads that console streams may hold (each open page holds
# one): the rest stay for the API and the partners' streams, however many tabs are open. With
# every slot taken a new stream waits LIVE_WAIT seconds for one (pages clicked through quickly
# free theirs at the next heartbeat) before it is refused.
LIVE_SHARE = 0.5


LIVE_WAIT = 3.0


HEARTBEAT = 0.5


_slots_made = threading.Lock()  # (one semaphore a process, made at the first stream)


def _live_slots() -> threading.BoundedSemaphore:
    """This process's slots for console streams (LIVE_SHARE of LUCID_WEB_THREADS, at least 1)."""
    extensions = current_app.extensions
    if "console_live" not in extensions:
        with _slots_made:
            extensions.setdefault("console_live", threading.BoundedSemaphore(
                max(1, int(runtime().settings.web_threads * LIVE_SHARE))))
    slots: threading.BoundedSemaphore = extensions["console_live"]
    return slots


def _live(update: Callable[[], tuple[dict[str, Any], dict[str, Chart]]]) -> Response:
    """A page's moving figures as Server-Sent Events: an `update` after every change of the
    archive (at most one a second) and every LIVE_IDLE seconds while nothing changes. The page
    rendered the figures just now, so the first update comes with the first change or pause.
    Each event is {"figures": {name: text}, "charts": {name: bars}} (admin.js applies it)."""

    def event() -> bytes:
        figures, charts = update()
        data = {"figures": figures, "charts": {name: chart.update() for name, chart in charts.items()}}
        return f"event: figures\ndata: {json.dumps(data)}\n\n".encode()

    return _stream(event, LIVE_IDLE, LIVE_EVERY)


def version(signature: object) -> str:
    """A short digest of what a page shows (its `signature`: data, never rendered text, so a
    clock moving on changes nothing)."""
    return hashlib.sha256(repr(signature).encode()).hexdigest()[:16]


def _changes(signature: Callable[[], object], shown: str) -> Response:
    """A page's changes as Server-Sent Events, for a page whose rows come and go (queries, rules,
    inboxes, the hub's roles): a "changed" event whenever the `signature` of what it shows
    differs from the version the page was rendered at (`shown`) or last told of; admin.js then
    fetches the page again and puts its live parts in place. The signature is taken every
    HEARTBEAT seconds (what moves without a patch, such as a role failing or a notification
    arriving, is seen within one) and at every change of the archive; a page is told at most
    once every HEARTBEAT seconds, so it is fetched again at most twice a second however busy
    the hub is, and a change is told at most HEARTBEAT seconds (and the signature's time) after
    it happened."""
    last = shown

    def event() -> bytes | None:
        nonlocal last
        now = version(signature())
        if now == last:
            return None
        last = now
        return f"event: changed\ndata: {json.dumps({'version': now})}\n\n".encode()

    return _stream(event, HEARTBEAT, HEARTBEAT)


def _stream(event: Callable[[], bytes | None], idle: float, pace: float) -> Response:
    """The stream of a console page: `event` after every change of the archive (at most one
    every `pace` seconds) and every `idle` seconds while nothing changes (None: nothing to
    say). A comment goes out every HEARTBEAT seconds in between: a page closed is noticed at
    the next writes, and its thread freed. With every slot taken for LIVE_WAIT seconds the
    answer is 503 (the page stays as rendered)."""
    stream = runtime().stream
    slots = None if push.on_loop() else _live_slots()  # (on the event loop a stream holds no thread)
    if slots is not None and not slots.acquire(timeout=LIVE_WAIT):
        return Response("every live slot of this process is in use (LUCID_WEB_THREADS / 2): the page is not "
                        "updated live; reload it later", status=503, mimetype="text/plain",
                        headers={"Retry-After": "30", "Cache-Control": "no-store"})
    generation, last = stream.generation(), time.monotonic()

    def poll() -> tuple[list[bytes], bool]:
        nonlocal generation, last
        if stream.ended:
            return [], True
        now = stream.generation()
        if now == generation and time.monotonic() - last < idle:
            return [], False
        generation, last = now, time.monotonic()
        said = event()
        return ([said] if said is not None else []), False

    # (a comment: the browser knows the stream is open; another every HEARTBEAT seconds: a page
    # closed is noticed at the next writes)
    channel = push.Channel(b"retry: 2000\n\n: open\n\n", poll, stream, keepalive=HEARTBEAT,
                           keepalive_line=b": -\n\n", pace=pace, lifetime=LIVE_SECONDS, in_app=True)
    if slots is not None:
        channel.on_close.append(slots.release)  # (the server closes every answer, begun or not: no slot is lost)
    return push.answer(channel)
