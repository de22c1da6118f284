"""The event-loop sender of WebSub deliveries (delivery/sender.py): signed POSTs over kept-alive
connections, the outbound address policy on every connection, answers read within a bound."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from lucid_hub.delivery.sender import ANSWER_BYTES, AsyncSender
from lucid_hub.outbound import AddressPolicy


class Server:
    """A loopback HTTP/1.1 server that records requests and the connections they came on."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, str], bytes, int]] = []  # path, headers, body, connection
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                server.requests.append((self.path, dict(self.headers.items()), body, id(self.connection)))
                if self.path == "/moved":
                    self.send_response(302)
                    self.send_header("Location", f"http://127.0.0.1:{server.port}/elsewhere")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                answer = b"x" * (4 * ANSWER_BYTES) if self.path == "/big" else b""
                self.send_response(200 if self.path != "/gone" else 410)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *_args: object) -> None:
                return

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"


@pytest.fixture
def server() -> Iterator[Server]:
    s = Server()
    yield s
    s.httpd.shutdown()


def send(sender: AsyncSender, url: str, body: bytes = b"patch", secret: str | None = None) -> tuple[int, str]:
    result: list[tuple[int, str]] = []

    async def work() -> None:
        result.append(await sender.post(url, body, {"Content-Type": "text/plain"}, secret))

    sender.submit(work()).result(timeout=30)
    return result[0]


def test_posts_are_signed_kept_alive_and_not_redirected(server: Server) -> None:
    sender = AsyncSender(AddressPolicy(dev_mode=True, allowed=[]), timeout=10, per_host=4, user_agent="test")
    try:
        assert send(sender, server.url("/a"), b"one", secret="s3cret") == (200, "HTTP 200")
        assert send(sender, server.url("/b"), b"two") == (200, "HTTP 200")
        assert send(sender, server.url("/big")) == (200, "HTTP 200")  # a long answer is cut, not a failure
        assert send(sender, server.url("/gone")) == (410, "HTTP 410")
        assert send(sender, server.url("/moved")) == (302, "HTTP 302")  # not followed
    finally:
        sender.stop()
    paths = [path for path, _h, _b, _c in server.requests]
    assert paths == ["/a", "/b", "/big", "/gone", "/moved"]  # nothing at /elsewhere
    first, second = server.requests[0], server.requests[1]
    expected = "sha256=" + hmac.new(b"s3cret", b"one", hashlib.sha256).hexdigest()
    assert first[1]["X-Hub-Signature"] == expected and "X-Hub-Signature" not in second[1]
    assert first[2] == b"one" and first[1]["User-Agent"] == "test"
    assert first[3] == second[3]  # the second POST reused the first one's connection


def test_the_address_policy_holds_for_ip_literals_and_for_names(server: Server) -> None:
    sender = AsyncSender(AddressPolicy(dev_mode=False, allowed=[]), timeout=10, per_host=4, user_agent="test")
    try:
        status, account = send(sender, server.url("/a"))
        assert status == 0 and "non-public address (127.0.0.1)" in account
        status, account = send(sender, f"http://localhost:{server.port}/a")  # a name that resolves to loopback
        assert status == 0 and "non-public" in account
        status, account = send(sender, "http://169.254.169.254/latest/meta-data")
        assert status == 0 and "metadata" in account
    finally:
        sender.stop()
    assert server.requests == []  # nothing reached the loopback server


def test_no_answer_is_status_zero_with_the_reason() -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    sender = AsyncSender(AddressPolicy(dev_mode=True, allowed=[]), timeout=5, per_host=4, user_agent="test")
    try:
        status, account = send(sender, f"http://127.0.0.1:{port}/a")
        assert status == 0 and "Connect" in account
    finally:
        sender.stop()


def test_stop_waits_for_the_work_in_flight(server: Server) -> None:
    sender = AsyncSender(AddressPolicy(dev_mode=True, allowed=[]), timeout=10, per_host=4, user_agent="test")
    finished = threading.Event()

    async def slow() -> None:
        await asyncio.sleep(0.2)  # (work in flight, not synchronisation: stop must wait for it)
        await sender.post(server.url("/late"), b"late", {}, None)
        finished.set()

    sender.submit(slow())
    sender.stop()
    assert finished.is_set() and [p for p, _h, _b, _c in server.requests] == ["/late"]
