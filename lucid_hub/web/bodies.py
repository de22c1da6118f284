"""Request bodies: one limit on what a client may send, however the body is framed.

Werkzeug enforces LUCID_MAX_BODY_BYTES on a `Content-Length`, but a chunked body (no
length) is read only up to the limit and then silently ends there: a PUT of a graph larger
than the limit was published truncated. Every body the hub reads comes through
`BoundedRequest.stream`, which raises 413 as soon as one byte more than the limit arrives.
"""

from __future__ import annotations

import io
from typing import IO, Any

from flask import Request
from werkzeug.exceptions import RequestEntityTooLarge
from werkzeug.utils import cached_property
from werkzeug.wsgi import get_input_stream

# After a 413, up to this much more of the body is read and dropped, so that the client,
# still sending, gets the answer: a server that closes a connection with unread data
# resets it, and the client sees "connection aborted" instead of the 413.
DRAIN_BYTES = 64 * 1024 * 1024


class BodyTooLarge(RequestEntityTooLarge):
    """More than the limit arrived (HTTP 413); the message names the limit."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"the request body exceeds the limit of {limit:,} bytes (LUCID_MAX_BODY_BYTES)")


class _AtMost(io.RawIOBase):
    """A body stream that fails once more than `limit` bytes have been read from it."""

    def __init__(self, raw: IO[bytes], limit: int) -> None:
        self._raw = raw
        self._limit = limit
        self._read = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        # Asks for at least one byte beyond the limit, so that a body of exactly limit + 1
        # bytes is noticed rather than read as a complete one of `limit` bytes.
        data = self._raw.read(min(len(buffer), self._limit + 1 - self._read))
        if not data:
            return 0
        self._read += len(data)
        if self._read > self._limit:
            raise BodyTooLarge(self._limit)
        buffer[: len(data)] = data
        return len(data)

    def drain(self, budget: int = DRAIN_BYTES) -> None:
        """Read and drop what is left of the body, up to `budget` bytes."""
        while budget > 0:
            try:
                data = self._raw.read(min(budget, 1 << 16))
            except (OSError, ValueError):  # the client went away: nothing left to drain
                return
            if not data:
                return
            budget -= len(data)


class BoundedRequest(Request):
    """Flask's request, with a body stream that answers 413 whenever the body is too large."""

    _bounded: _AtMost | None = None

    def drain(self) -> None:
        """After a 413: read and drop the rest of the body (bounded), so the answer arrives."""
        if self._bounded is not None:
            self._bounded.drain()

    @cached_property
    def stream(self) -> IO[bytes]:
        limit = self.max_content_length
        # No werkzeug limit on the raw stream: its own stops quietly at the limit. Servers
        # that frame bodies themselves (gunicorn, werkzeug with chunked bodies) set
        # wsgi.input_terminated; otherwise the stream is bounded by Content-Length.
        raw = get_input_stream(self.environ, max_content_length=None)
        if limit is None:
            return raw
        self._bounded = _AtMost(raw, limit)
        if self.content_length is not None and self.content_length > limit:
            raise BodyTooLarge(limit)  # said before a byte is read
        return io.BufferedReader(self._bounded, buffer_size=1 << 16)
