"""A store that misbehaves (never answers, answers without end, answers garbage) costs the hub
a bounded wait and bounded memory, is named on /readyz, and never stops it serving."""

from __future__ import annotations

import socket
import socketserver
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import requests

from lucid_hub.config import Settings
from lucid_hub.errors import StoreError
from lucid_hub.store.remote import RemoteConfig, RemoteStore
from tests.conftest import running_hub
from tests.mirror.test_mirror import DEV, publish, version, wait


class _Handler(socketserver.BaseRequestHandler):
    mode = "idle"

    def handle(self) -> None:
        self.request.recv(65536)
        if self.mode == "idle":  # holds the connection, says nothing
            self.server.release.wait(60)  # type: ignore[attr-defined]
        elif self.mode == "endless":
            self.request.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/sparql-results+json\r\n\r\n")
            try:
                while not self.server.release.is_set():  # type: ignore[attr-defined]
                    self.request.sendall(b'{"head": {"vars": []}, "results": {"bindings": [' + b" " * 65536)
            except OSError:
                return
        else:  # garbage
            self.request.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\nConnection: close\r\n\r\nnot json!")


@contextmanager
def misbehaving(mode: str) -> Iterator[str]:
    handler = type("Handler", (_Handler,), {"mode": mode})
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    server.release = threading.Event()  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.release.set()  # type: ignore[attr-defined]
        server.shutdown()
        server.server_close()


def remote(base: str, **extra: str) -> RemoteStore:
    config = RemoteConfig.of(Settings.from_env({"LUCID_STORE_QUERY_URL": f"{base}/query",
                                                "LUCID_STORE_UPDATE_URL": f"{base}/update", **extra}))
    assert config is not None
    return RemoteStore(config)


@pytest.mark.parametrize("mode,reason", [("idle", "does not answer: ReadTimeout"),
                                         ("endless", "more than 1,000,000 bytes (LUCID_STORE_MAX_ANSWER_BYTES)"),
                                         ("garbage", "no SPARQL JSON results")])
def test_a_misbehaving_store_is_a_bounded_error(mode: str, reason: str) -> None:
    with misbehaving(mode) as base:
        store = remote(base, LUCID_STORE_TIMEOUT="1", LUCID_STORE_MAX_ANSWER_BYTES="1000000")
        started = time.monotonic()
        with pytest.raises(StoreError, match=reason.replace("(", r"\(").replace(")", r"\)")):
            store.versions()
        assert time.monotonic() - started < 10
        store.close()


def test_a_hub_whose_store_misbehaves_names_it_and_goes_on_serving(tmp_path: Path) -> None:
    with misbehaving("endless") as base:
        env = {"LUCID_STORE_QUERY_URL": f"{base}/query", "LUCID_STORE_UPDATE_URL": f"{base}/update",
               "LUCID_STORE_TIMEOUT": "2", "LUCID_STORE_MAX_ANSWER_BYTES": "1000000"}
        with running_hub(tmp_path / "acme", f"sqlite:///{tmp_path / 'acme.db'}", {**DEV, **env}) as hub:
            patch = publish(hub, version(0))  # publishing does not wait for the store
            assert hub.runtime.archive.head("https://acme.example/graphs/kpi") == patch

            def ready() -> requests.Response:
                return requests.get(f"{hub.url}/readyz", timeout=30)

            wait(lambda: ready().status_code == 503 and "LUCID_STORE_MAX_ANSWER_BYTES" in ready().text,
                 show=lambda: ready().text)
            assert requests.get(f"{hub.url}/healthz", timeout=5).status_code == 200
            assert publish(hub, version(1)) != patch


def test_nothing_listens_where_the_store_should_be(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    with pytest.raises(StoreError, match="does not answer: ConnectionError"):
        remote(f"http://127.0.0.1:{port}").versions()
