"""Reading a hub's Server-Sent Events stream (`/mirrors/events`, `/subscriptions/…/events`)."""

from __future__ import annotations

from collections.abc import Iterator

import requests

from lucid_hub.errors import RemoteAnswerError

# The longest line read: an event's data (a notification with its results) is one line; a
# server that never ends one must not fill this process's memory.
MAX_LINE_BYTES = 64 * 1024 * 1024


def event_lines(response: requests.Response, max_line: int = MAX_LINE_BYTES) -> Iterator[str]:
    """The stream's lines, without their ends. Split at "\n" on the bytes, not with
    requests' `iter_lines(decode_unicode=True)`: that splits decoded text with str.splitlines(),
    which also breaks at U+2028, U+0085 and others a literal in an event's data may hold raw
    (the hub's own events escape them; another server's need not)."""
    # (requests' `iter_lines(delimiter=b"\n")` would split right but yields a last empty line
    # that is not in the stream.) Each chunk is looked at once: linear in the stream's bytes.
    line = bytearray()
    for chunk in response.iter_content(chunk_size=None):  # as it arrives
        begin = 0
        while (end := chunk.find(b"\n", begin)) != -1:
            line += chunk[begin:end]
            _bounded(line, max_line)
            yield line.decode("utf-8", errors="replace").removesuffix("\r")
            line.clear()
            begin = end + 1
        line += chunk[begin:]
        _bounded(line, max_line)
    if line:
        yield line.decode("utf-8", errors="replace").removesuffix("\r")


def _bounded(line: bytearray, max_line: int) -> None:
    if len(line) > max_line:
        raise RemoteAnswerError(f"the event stream sent a line longer than {max_line:,} bytes")
