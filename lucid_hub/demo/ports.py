"""Loopback ports: one free now, and waiting for a listener (the demo's hubs, and the tests')."""

from __future__ import annotations

import socket
import time


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, deadline_s: float = 20.0) -> None:
    """Return once something accepts connections on the loopback port; TimeoutError otherwise."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)  # polling a condition with a deadline, not a fixed wait
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {deadline_s} s")
