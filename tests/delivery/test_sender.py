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
from pathlib import Path

import pytest
import requests
import trustme

from lucid_bench.tls import TlsServer
from lucid_hub import outbound
from lucid_hub.config import Settings
from lucid_hub.delivery.sender import ANSWER_BYTES, AsyncSender
from lucid_hub.errors import ConfigError
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


# --- https callbacks: HTTP/2 where the callback offers it -------------------------------


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def ca_file(ca: trustme.CA, tmp_path: Path) -> str:
    path = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return str(path)


def post_all(sender: AsyncSender, urls: list[str], secret: str | None = None) -> list[tuple[int, str]]:
    """POST every URL at once from the sender's loop."""
    async def work() -> list[tuple[int, str]]:
        return list(await asyncio.gather(*(sender.post(u, b"patch", {"Content-Type": "text/plain"}, secret)
                                           for u in urls)))

    result: list[list[tuple[int, str]]] = []

    async def run() -> None:
        result.append(await work())

    sender.submit(run()).result(timeout=60)
    return result[0]


def test_https_callbacks_that_speak_http2_get_deliveries_multiplexed_on_one_connection(
        ca: trustme.CA, ca_file: str, tmp_path: Path) -> None:
    server = TlsServer(ca, tmp_path, ["h2", "http/1.1"])
    sender = AsyncSender(AddressPolicy(dev_mode=True, allowed=[], ca_file=ca_file), timeout=10, per_host=4,
                         user_agent="test", http2=True)
    try:
        # A host name: the policy backend resolves it, checks each address, connects to one.
        assert post_all(sender, [f"https://localhost:{server.port}/first"], secret="s3cret") == [(202, "HTTP 202")]
        urls = [f"https://localhost:{server.port}/n{i}" for i in range(20)]
        assert post_all(sender, urls) == [(202, "HTTP 202")] * 20
    finally:
        sender.stop()
        server.stop()
    assert sorted(p for p, *_ in server.requests) == sorted(["/first", *(f"/n{i}" for i in range(20))])
    assert {version for _p, version, *_ in server.requests} == {"2"}
    assert len({port for _p, _v, port, *_ in server.requests}) == 1  # 21 POSTs, one connection
    first = next(r for r in server.requests if r[0] == "/first")
    assert first[3]["x-hub-signature"] == "sha256=" + hmac.new(b"s3cret", b"patch", hashlib.sha256).hexdigest()
    assert first[3]["user-agent"] == "test" and first[4] == b"patch"


@pytest.mark.parametrize("http2", [False, True], ids=["aiohttp", "http2-offered"])
@pytest.mark.parametrize("alpn", [["http/1.1"], ["h2", "http/1.1"]], ids=["server-http1", "server-h2"])
def test_https_callbacks_get_http11_unless_both_sides_speak_http2(
        ca: trustme.CA, ca_file: str, tmp_path: Path, http2: bool, alpn: list[str]) -> None:
    server = TlsServer(ca, tmp_path, alpn)
    sender = AsyncSender(AddressPolicy(dev_mode=True, allowed=[], ca_file=ca_file), timeout=10, per_host=4,
                         user_agent="test", http2=http2)
    try:
        assert post_all(sender, [f"https://127.0.0.1:{server.port}/a"]) == [(202, "HTTP 202")]
        assert post_all(sender, [f"https://127.0.0.1:{server.port}/b"]) == [(202, "HTTP 202")]
    finally:
        sender.stop()
        server.stop()
    version = "2" if http2 and "h2" in alpn else "1.1"
    assert [(p, v) for p, v, *_ in server.requests] == [("/a", version), ("/b", version)]
    assert server.requests[0][2] == server.requests[1][2]  # kept alive


@pytest.mark.parametrize("http2", [False, True], ids=["aiohttp", "http2-offered"])
def test_https_callbacks_are_refused_by_policy_and_by_an_untrusted_certificate(
        ca: trustme.CA, ca_file: str, tmp_path: Path, http2: bool) -> None:
    server = TlsServer(ca, tmp_path, ["h2", "http/1.1"])
    strict = AsyncSender(AddressPolicy(dev_mode=False, allowed=[], ca_file=ca_file), timeout=10, per_host=4,
                         user_agent="test", http2=http2)
    untrusting = AsyncSender(AddressPolicy(dev_mode=True, allowed=[]), timeout=10, per_host=4, user_agent="test",
                             http2=http2)
    try:
        (status, account), = post_all(strict, [f"https://localhost:{server.port}/a"])
        assert status == 0 and "non-public" in account  # a name resolving to loopback
        (status, account), = post_all(strict, [f"https://127.0.0.1:{server.port}/a"])
        assert status == 0 and "non-public address (127.0.0.1)" in account
        (status, account), = post_all(untrusting, [f"https://localhost:{server.port}/a"])
        assert status == 0 and "CERTIFICATE_VERIFY_FAILED" in account
    finally:
        strict.stop()
        untrusting.stop()
        server.stop()
    assert server.requests == []


def test_every_outbound_client_trusts_the_operators_authorities(ca: trustme.CA, ca_file: str, tmp_path: Path) -> None:
    """LUCID_OUTBOUND_CA_FILE reaches requests' sessions (intent verification, mirrors,
    notices) and urllib3's pools (webhooks) as it reaches deliveries; without it, refused."""
    server = TlsServer(ca, tmp_path, ["http/1.1"])
    url = f"https://localhost:{server.port}/check"
    try:
        for ca_given in (ca_file, ""):
            policy = AddressPolicy(dev_mode=True, allowed=[], ca_file=ca_given)
            pool = outbound.pool_manager(policy, retries=False)
            if ca_given:
                assert outbound.session(policy, "test").get(url, timeout=10).status_code == 202
                assert outbound.signed_post(pool, url, b"x", {}, None) == (202, "HTTP 202")
            else:
                with pytest.raises(requests.exceptions.SSLError):
                    outbound.session(policy, "test").get(url, timeout=10)
                status, account = outbound.signed_post(pool, url, b"x", {}, None)
                assert status == 0 and "CERTIFICATE_VERIFY_FAILED" in account
    finally:
        server.stop()
    assert [(p, v) for p, v, *_ in server.requests] == [("/check", "1.1")] * 2


def test_the_authorities_file_must_exist(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="LUCID_OUTBOUND_CA_FILE"):
        Settings.from_env({"LUCID_OUTBOUND_CA_FILE": str(tmp_path / "missing.pem")})


def test_bench_tls_runs(run_cli) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("bench", "tls", "--deliveries", "40", "--in-flight", "4")
    assert result.code == 0, result.err
    assert "HTTP/1.1, aiohttp (default)" in result.out and "HTTP 2, 1 connection(s), 0 failed" in result.out
    bad = run_cli("bench", "tls", "--in-flight", "0")
    assert bad.code == 1 and "must be positive" in bad.err
