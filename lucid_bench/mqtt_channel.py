"""The MQTT channel in `lucid-hub bench queries`: the same subscriptions, their notifications
published by the hub to a Mosquitto broker (started here, on loopback, when the machine has
one) and read by a paho-mqtt client; publish-to-arrival latency at the steady rate, against
the WebSocket's in the same run (the ratio)."""

from __future__ import annotations

import contextlib
import json
import queue
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lucid_bench.arrivals import Arrivals
from lucid_hub.demo.ports import free_port


@contextlib.contextmanager
def broker() -> Iterator[str | None]:
    """A Mosquitto broker on a loopback port (anonymous: the bench's own); None without one."""
    binary = shutil.which("mosquitto")
    if binary is None:
        yield None
        return
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="lucid-bench-mqtt-") as tmp:
        conf = Path(tmp) / "mosquitto.conf"
        conf.write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\nlog_dest none\n",
                        encoding="utf-8")
        proc = subprocess.Popen([binary, "-c", str(conf)])
        try:
            for _ in range(200):
                with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
                time.sleep(0.05)  # the broker starting (a benchmark's setup, not a measurement)
            yield f"mqtt://127.0.0.1:{port}"
        finally:
            proc.terminate()
            proc.wait(timeout=10)


class MqttReader(Arrivals):
    """A paho-mqtt client on the hub's topics: when each status value arrived."""

    def __init__(self, url: str) -> None:
        import paho.mqtt.client as mqtt
        from paho.mqtt.enums import CallbackAPIVersion

        self.arrived: dict[str, float] = {}
        self.changed = threading.Condition()
        ready: queue.Queue[bool] = queue.Queue()
        host, port = url.removeprefix("mqtt://").split(":")
        self.client = mqtt.Client(callback_api_version=CallbackAPIVersion.VERSION2, client_id="bench-reader",
                                  protocol=mqtt.MQTTv5)
        self.client.on_connect = lambda c, u, f, reason, p: c.subscribe("lucid-hub/#", qos=1)
        self.client.on_subscribe = lambda c, u, mid, codes, p: ready.put(True)
        self.client.on_message = self._message
        self.client.connect(host, int(port))
        self.client.loop_start()
        ready.get(timeout=30)

    def _message(self, client: Any, userdata: Any, message: Any) -> None:
        at = time.perf_counter()
        note = json.loads(message.payload).get("notification") or {}
        with self.changed:
            for row in note.get("addedResults", {}).get("results", {}).get("bindings", []):
                status = row.get("s", {}).get("value", "")
                if status.startswith("st-"):
                    self.arrived.setdefault(status, at)
            self.changed.notify_all()

    def close(self) -> None:
        self.client.loop_stop()
        self.client.disconnect()
