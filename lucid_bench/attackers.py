"""A hostile publisher's archive pages, for the hostile-partner tests and `bench hostile`: a
real HTTP server in front of a real publisher (`HostilePublisher`) writes them, so the mirror
meets them on a real connection.

- "empty": pages without patches, each linking to one more, forever;
- "repeat": each page holds the archive's first patch (it verifies, and is known after the
  first page) and links to one more, forever;
- "huge": a page of 100 MB, chunked, of no declared length;
- "trickle": a page that arrives a byte every 0.2 s, chunked;
- "dribble": the same with a declared length (each byte alone).
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler

import requests

from lucid_bench.loopback import Relay, serve_http
from lucid_hub.demo.ports import free_port

ATTACKS = ("empty", "repeat", "huge", "trickle", "dribble")


def write_page(handler: BaseHTTPRequestHandler, attack: str, next_url: str,
               first_patches: Callable[[], list[object]], closed: threading.Event) -> None:
    """Answer the handler's request as the attack's page; `first_patches` gives the real
    archive's first page's patches ("repeat"); `closed` ends a slow page early."""
    if attack in ("empty", "repeat"):
        patches = first_patches()[:1] if attack == "repeat" else []
        body = json.dumps({"patches": patches, "next": next_url}).encode()
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)
        return
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    if attack == "dribble":
        handler.send_header("Content-Length", "3000")
    else:
        handler.send_header("Transfer-Encoding", "chunked")
    handler.end_headers()
    with contextlib.suppress(OSError):  # the reader hangs up: what a bounded one does
        if attack == "huge":
            chunk = b" " * (1 << 20)
            for _ in range(100):
                handler.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        else:
            for _ in range(3000):
                handler.wfile.write(b" " if attack == "dribble" else b"1\r\n \r\n")
                handler.wfile.flush()
                if closed.wait(0.2):
                    break
        if attack != "dribble":
            handler.wfile.write(b"0\r\n\r\n")


class HostilePublisher:
    """A loopback server in front of a real publisher that answers archive pages as `attack`
    and passes everything else on (tokens, keys, the hub, graphs)."""

    def __init__(self, target: str, attack: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.pages = 0
        self.closed = threading.Event()
        first: list[object] = []
        proxy = self

        class Handler(Relay):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def forward(self, method: str) -> None:
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
                if method == "GET" and self.path.startswith("/patches?"):
                    proxy.pages += 1

                    def first_patches() -> list[object]:
                        if not first:
                            first.extend(requests.get(f"{target}{self.path}", headers=headers,
                                                      timeout=30).json()["patches"])
                        return first

                    write_page(self, attack, f"{proxy.url}/patches?graph=x&p={proxy.pages + 1}", first_patches,
                               proxy.closed)
                    return
                body = self.rfile.read(int(self.headers.get("Content-Length", 0) or 0))
                answer = requests.request(method, f"{target}{self.path}", data=body, headers=headers, timeout=30)
                self.answer(answer.status_code, answer.headers, answer.content)

        self.server, _thread = serve_http(self.port, Handler)

    def close(self) -> None:
        self.closed.set()
        self.server.shutdown()
        self.server.server_close()
