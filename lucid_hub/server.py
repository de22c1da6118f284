"""`lucid-hub serve`: the embedded hub in one process (HTTP, relay), stopped cleanly by SIGTERM."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable

from werkzeug.serving import make_server

from lucid_hub.config import Settings
from lucid_hub.runtime import Runtime
from lucid_hub.web import create_app

log = logging.getLogger(__name__)
RELAY_INTERVAL = 2.0


def serve(settings: Settings, echo: Callable[[str], None]) -> None:
    runtime = Runtime.open(settings)
    app = create_app(settings, runtime)
    server = make_server(settings.host, settings.port, app, threaded=True)
    stop = threading.Event()

    def relay_loop() -> None:
        # Retries the outbox when the patch log was unavailable at publish time.
        while not stop.wait(RELAY_INTERVAL):
            try:
                runtime.publisher.relay()
            except Exception as exc:  # logged, retried on the next tick
                log.warning("relay to the patch log failed: %s", exc)

    def shutdown(_signum: int, _frame: object) -> None:
        stop.set()
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, shutdown)
    signal.signal(signal.SIGINT, shutdown)
    relay = threading.Thread(target=relay_loop, name="relay", daemon=True)
    relay.start()
    echo(f"lucid-hub serving on http://{settings.host}:{server.port} (public URL {settings.public_url}, "
         f"data in {settings.data_dir})")
    try:
        server.serve_forever()
    finally:
        stop.set()
        relay.join(timeout=5)
        runtime.close()
        echo("lucid-hub stopped")
