"""`lucid-hub serve`: the embedded hub in one process (HTTP API, relay).

gunicorn (gthread) serves when it is installed: one worker process, since only one process
may open the on-disk store, with threads for concurrent requests; SIGTERM stops it
gracefully. Werkzeug's threaded server is the fallback (and `--server werkzeug`).
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from typing import Any

from lucid_hub.config import Settings
from lucid_hub.runtime import Runtime
from lucid_hub.web import create_app

log = logging.getLogger(__name__)


def serve(settings: Settings, echo: Callable[[str], None], server: str = "auto", threads: int = 8) -> None:
    """Run the hub until SIGTERM or SIGINT."""
    if server == "auto":
        try:
            import gunicorn  # noqa: F401

            server = "gunicorn"
        except ImportError:
            server = "werkzeug"
    echo(f"lucid-hub serving on http://{settings.host}:{settings.port} with {server} "
         f"(public URL {settings.public_url}, data in {settings.data_dir})")
    if server == "gunicorn":
        _serve_gunicorn(settings, threads)
    else:
        _serve_werkzeug(settings)
    echo("lucid-hub stopped")


def _serve_werkzeug(settings: Settings) -> None:
    from werkzeug.serving import make_server

    runtime = Runtime.open(settings)
    runtime.publisher.start_relay()
    httpd = make_server(settings.host, settings.port, create_app(settings, runtime), threaded=True)

    def shutdown(_signum: int, _frame: object) -> None:
        threading.Thread(target=httpd.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, shutdown)
    signal.signal(signal.SIGINT, shutdown)
    try:
        httpd.serve_forever()
    finally:
        runtime.close()


def _serve_gunicorn(settings: Settings, threads: int) -> None:
    from gunicorn.app.base import BaseApplication

    class HubApplication(BaseApplication):  # type: ignore[misc]
        def __init__(self) -> None:
            self.runtime: Runtime | None = None
            super().__init__()

        def load_config(self) -> None:
            self.cfg.set("bind", f"{settings.host}:{settings.port}")
            self.cfg.set("workers", 1)
            self.cfg.set("worker_class", "gthread")
            self.cfg.set("threads", threads)
            self.cfg.set("timeout", 3600)  # bulk publishes run long; liveness is /healthz
            self.cfg.set("graceful_timeout", 30)
            self.cfg.set("accesslog", None)
            self.cfg.set("worker_exit", self._worker_exit)
            self.cfg.set("post_worker_init", self._post_worker_init)

        def load(self) -> Any:
            # In the worker: open the runtime there, after the fork.
            self.runtime = Runtime.open(settings)
            self.runtime.publisher.start_relay()
            return create_app(settings, self.runtime)

        def _post_worker_init(self, _worker: Any) -> None:
            # SIGTERM: gunicorn stops accepting and waits for requests in flight; event
            # streams never finish by themselves, so they are ended here first.
            previous = signal.getsignal(signal.SIGTERM)

            def on_term(signum: int, frame: Any) -> None:
                if self.runtime is not None:
                    self.runtime.mirrors.end_streams()
                if callable(previous):
                    previous(signum, frame)

            signal.signal(signal.SIGTERM, on_term)

        def _worker_exit(self, _arbiter: Any, _worker: Any) -> None:
            if self.runtime is not None:
                self.runtime.close()

    HubApplication().run()
