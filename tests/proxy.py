"""A loopback HTTP proxy in front of a hub, for tests of what happens on the way: it alters
the next POST body it is told to (a delivery tampered with in flight), holds archive
reads while told to (a partner's catch-up that takes its time), and points archive pages'
"next" links elsewhere (a hostile publisher). Given several targets it stands for a Service in
front of replicas: requests go round them, past those that refuse connections. TcpProxy cuts and
restores a TCP path (an outage between the hub and its Kafka broker)."""

from __future__ import annotations

import contextlib
import itertools
import json
import socket
import threading

import requests

from lucid_bench.loopback import Relay, serve_http
from lucid_hub.demo.ports import free_port


class LoopbackProxy:
    def __init__(self, target: str | list[str]) -> None:
        targets = [target] if isinstance(target, str) else target
        turns = itertools.cycle(range(len(targets)))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.alter_next = threading.Event()  # set: the next POST with a literal gets one changed
        self.altered = 0
        self.hold = threading.Event()  # set: GET /patches… waits until `released`
        self.held = threading.Event()
        self.released = threading.Event()
        self.next_link: str | None = None  # set: archive pages' "next" point there (a hostile publisher)
        proxy = self

        class Handler(Relay):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def forward(self, method: str) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0) or 0))
                if method == "POST" and proxy.alter_next.is_set() and b'"' in body:
                    proxy.alter_next.clear()
                    proxy.altered += 1
                    body = body.replace(b'"', b'"X', 1)  # one literal changed in flight
                if method == "GET" and self.path.startswith("/patches") and proxy.hold.is_set():
                    proxy.held.set()
                    proxy.released.wait(60)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
                first = next(turns)
                for index in [*range(first, len(targets)), *range(first)]:
                    try:
                        answer = requests.request(method, f"{targets[index]}{self.path}", data=body, headers=headers,
                                                  timeout=30)
                        break
                    except requests.ConnectionError:
                        continue  # a replica that is down: the next one
                else:
                    self.send_response(502)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                content = answer.content
                if proxy.next_link and self.path.startswith("/patches") and b'"next"' in content:
                    page = json.loads(content)
                    page["next"] = proxy.next_link
                    content = json.dumps(page).encode()
                self.answer(answer.status_code, answer.headers, content)

        self.server, self.thread = serve_http(self.port, Handler)

    def close(self) -> None:
        self.released.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)


class TcpProxy:
    """A TCP forwarder on a loopback port that can be cut — every connection closed, new ones
    refused — and restored: a network outage between a client and a real server (a Kafka
    broker that advertises this port, so the client reaches it through here only)."""

    def __init__(self, port: int, target_port: int) -> None:
        self.port, self.target_port = port, target_port
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self.restore()

    def restore(self) -> None:
        listener = socket.create_server(("127.0.0.1", self.port))  # (SO_REUSEADDR: the same port again)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # cut
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._open += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        with self._lock:
            ends, self._open = self._open, []
        for end in ends:
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)
            end.close()

    def close(self) -> None:
        self.cut()
