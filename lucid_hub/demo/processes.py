"""A lucid-hub running as its own process on a loopback port, with an admin client: for the
demo, the end-to-end benchmark and the end-to-end tests (two companies' hubs on one machine).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import requests

from lucid_hub.client.events import event_lines
from lucid_hub.demo.ports import free_port, wait_for_port

ADMIN_SCOPES = ["graphs:read", "graphs:write", "hub:subscribe", "admin"]


class HubProcess:
    """`lucid-hub serve` for one data directory, in dev mode (loopback callbacks allowed)."""

    def __init__(self, name: str, data: Path, env: dict[str, str] | None = None,
                 callback_prefixes: list[str] | None = None) -> None:
        from lucid_hub.auth.clients import create_client_for

        self.name = name
        self.data = data
        data.mkdir(parents=True, exist_ok=True)  # its log lives there, whatever the database
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, "LUCID_DATA_DIR": str(data), "LUCID_PUBLIC_URL": self.url, "LUCID_DEV_MODE": "1",
                    "LUCID_PORT": str(self.port), **(env or {})}
        self.env.pop("LUCID_ACCESS_TOKEN", None)
        record, self._secret = create_client_for(data, f"{name} administrator", dict(self.env),
                                                 groups=["lucid-hub-admins"], scopes=ADMIN_SCOPES,
                                                 callback_prefixes=callback_prefixes or [])
        self.client_id = record.client_id
        self.proc: subprocess.Popen[bytes] | None = None
        self.http = requests.Session()
        self.http.trust_env = False

    def start(self, timeout: float = 60) -> HubProcess:
        from lucid_hub.client.tokens import client_credentials_token

        log = (self.data / "serve.log").open("ab")
        # Its own process group: a kill takes gunicorn's worker down with the master.
        self.proc = subprocess.Popen([sys.executable, "-m", "lucid_hub.cli", "serve", "--port", str(self.port)],
                                     env=self.env, stdout=log, stderr=log, start_new_session=True)
        log.close()
        try:
            wait_for_port(self.port, timeout)
        except TimeoutError:
            self.stop()
            raise RuntimeError(f"the {self.name} hub did not start; see {self.data / 'serve.log'}") from None
        token = client_credentials_token(self.url, self.client_id, self._secret)
        self.http.headers["Authorization"] = f"Bearer {token}"
        return self

    def stop(self, kill: bool = False) -> None:
        if self.proc is None:
            return
        if kill:  # the whole group at once, as a crash or an OOM kill would
            os.killpg(self.proc.pid, signal.SIGKILL)
        else:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
        self.proc = None

    def __enter__(self) -> HubProcess:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    # --- what the demo and the tests do with a hub ---------------------------------------
    def call(self, method: str, path: str, expect: tuple[int, ...] = (200, 201, 202, 204), **kwargs: Any) -> Any:
        answer = self.http.request(method, f"{self.url}{path}", timeout=60, **kwargs)
        if answer.status_code not in expect:
            raise RuntimeError(f"{self.name}: {method} {path} answered {answer.status_code}: {answer.text[:300]}")
        return answer

    def publish(self, graph: str, turtle: str) -> str:
        answer = self.call("PUT", "/graphs", params={"graph": graph}, data=turtle.encode(),
                           headers={"Content-Type": "text/turtle"})
        return str(answer.json()["patch"] or "")

    def partner_client(self, name: str, group: str, callback_prefix: str) -> tuple[str, str]:
        answer = self.call("POST", "/admin/clients", json={
            "name": name, "groups": [group], "scopes": ["hub:subscribe", "graphs:read"],
            "callback_prefixes": [callback_prefix]})
        body = answer.json()
        return str(body["client_id"]), str(body["client_secret"])

    def grant_read(self, iri: str, group: str, graph: str) -> None:
        self.call("POST", "/admin/conditions", json={"iri": iri, "requiresGroup": [group], "readGraph": [graph]})

    def withdraw(self, iri: str) -> None:
        self.call("DELETE", "/admin/conditions", params={"iri": iri})

    def mirror(self, hub: str, graph: str, client_id: str, secret: str) -> dict[str, Any]:
        return dict(self.call("POST", "/admin/mirrors", json={
            "hub": hub, "graph": graph, "client_id": client_id, "client_secret": secret}).json())

    def mirrors(self) -> list[dict[str, Any]]:
        return list(self.call("GET", "/admin/mirrors").json()["mirrors"])

    def subscriptions(self) -> list[dict[str, Any]]:
        return list(self.call("GET", "/admin/subscriptions").json()["subscriptions"])

    def log_tail(self, lines: int = 20) -> str:
        """The last lines of the hub's log (serve.log in its data directory)."""
        path = self.data / "serve.log"
        text = path.read_text(errors="replace") if path.is_file() else ""
        return "\n".join(text.splitlines()[-lines:])

    def content(self, graph: str, version: str | None = None) -> str:
        params = {"graph": graph, **({"version": version} if version else {})}
        return str(self.call("GET", "/graphs", params=params, headers={"Accept": "application/n-triples"}).text)


def wait_until(what: Callable[[], bool], timeout: float, describe: str,
               explain: Callable[[], str] | None = None) -> None:
    """Until `what` holds, checked every 20 ms (a state of another process); RuntimeError after
    `timeout` seconds naming `describe`, with what `explain` then says (the processes' state)."""
    deadline = time.monotonic() + timeout
    while not what():
        if time.monotonic() > deadline:
            said = ""
            if explain is not None:
                try:
                    said = "\n" + explain()
                except Exception as exc:  # a process that cannot say: that is said instead
                    said = f"\n(no explanation: {exc!r})"
            raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {describe}{said}")
        time.sleep(0.02)  # polling another process's state, with a deadline


class EventStream:
    """A hub's `/mirrors/events` stream of one mirrored graph, each applied patch's arrival
    timestamped (`time.perf_counter()`) by a reader thread."""

    def __init__(self, hub: HubProcess, graph: str) -> None:
        self.times: dict[str, float] = {}
        self._cond = threading.Condition()
        self.response = hub.http.get(f"{hub.url}/mirrors/events", params={"graph": graph}, stream=True, timeout=60)
        if self.response.status_code != 200:
            raise RuntimeError(f"{hub.name}'s event stream answered {self.response.status_code}: "
                               f"{self.response.text[:200]}")
        self._lines = event_lines(self.response)
        next(self._lines)  # the opening comment: listening from now on
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for line in self._lines:
                if line.startswith("data: "):
                    with self._cond:
                        self.times[json.loads(line[6:])["id"]] = time.perf_counter()
                        self._cond.notify_all()
        except (requests.RequestException, ValueError, AttributeError):
            return  # the stream was closed

    def wait(self, ids: list[str], timeout: float) -> bool:
        """Whether all `ids` arrived within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not all(i in self.times for i in ids):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def close(self) -> None:
        # The reader is blocked reading the stream; shutting the socket down ends its read at
        # once (closing alone would wait for the next event or keep-alive comment).
        sock = getattr(getattr(self.response.raw, "connection", None), "sock", None)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self.response.close()
        self._thread.join(10)
