"""An event stream's lines as another server sends them: split at line ends only."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests

from lucid_hub.client.events import event_lines

BREAKS = "\u2028\u2029\u0085\x0b\x0c\x1c\x1d\x1e"
BODY = (f": opening\r\n\r\nid: 1\r\ndata: {{\"value\": \"a{BREAKS}b\"}}\r\n\r\nid: 2\ndata: plain\n\n").encode()


class Stream(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for at in range(0, len(BODY), 7):  # in small writes: a line's end may fall between chunks
            self.wfile.write(BODY[at:at + 7])
            self.wfile.flush()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Stream)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()
    httpd.server_close()


def test_unicode_line_breaks_in_an_events_data_stay_in_its_line(server: str) -> None:
    with requests.get(server, stream=True, timeout=30) as response:
        lines = list(event_lines(response))
    assert lines == [": opening", "", "id: 1", f'data: {{"value": "a{BREAKS}b"}}', "", "id: 2", "data: plain", ""]


def test_a_line_that_never_ends_is_refused_once_it_passes_the_bound(server: str) -> None:
    from lucid_hub.errors import RemoteAnswerError

    with requests.get(server, stream=True, timeout=30) as response, \
            pytest.raises(RemoteAnswerError, match="longer than 20 bytes"):
        list(event_lines(response, max_line=20))
