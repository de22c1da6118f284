"""`lucid-hub serve`: the hub's HTTP API, relay and mirrors.

gunicorn runs LUCID_WEB_WORKERS processes (each a hub on its own copy of the store, caught up
from the archive; the first serves the metrics port and is the data directory's candidate
for the leadership of all the hub's replicas: the one that holds the lease keeps the
mirrors, relays to Kafka, evaluates queries and windows and runs deferred rules). Each
process serves on uvicorn's event loop (the front, lucid_hub.web.front): push channels and
WebSockets there, requests on LUCID_WEB_THREADS worker threads. gunicorn restarts a worker
that crashed or lost the leadership.
SIGTERM stops it gracefully: the listening socket closes, push channels end, requests in
flight finish (up to LUCID_GRACEFUL_TIMEOUT), then each runtime closes: deliveries in flight
finish and are recorded, the relay empties the outbox.
`--server uvicorn` runs one process without gunicorn; `--server werkzeug`, werkzeug's
threaded server (no front: each push channel holds a thread; the crash tests use it).
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import threading
from collections.abc import Callable
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from lucid_hub import gcpause
from lucid_hub.auth.tokens import TrustedIssuer
from lucid_hub.commands import handoff
from lucid_hub.config import Settings, listening_url
from lucid_hub.db.session import Database
from lucid_hub.errors import ConfigError, LucidError
from lucid_hub.logging_setup import configure_logging, dict_config
from lucid_hub.metrics import mark_process_dead, use_multiprocess_metrics
from lucid_hub.policy.policy_graph import read_policy_dir
from lucid_hub.runtime import Runtime
from lucid_hub.web import create_app
from lucid_hub.web.front import Front, build_front
from lucid_hub.web.serving import server_options

log = logging.getLogger(__name__)
# The exit status of a process that lost the leadership (not gunicorn's 3 or 4, which stop it).
LOST_LEADERSHIP_EXIT = 70


def serve(settings: Settings, echo: Callable[[str], None], server: str = "auto") -> None:
    """Run the hub until SIGTERM or SIGINT."""
    configure_logging(settings.log_format, settings.log_level.upper())
    if server == "auto":
        server = "gunicorn"
    if settings.web_workers > 1 and server != "gunicorn":
        raise ConfigError(f"LUCID_WEB_WORKERS above 1 needs gunicorn ({server} runs one process)")
    check_before_serving(settings)
    echo(f"lucid-hub serving on http://{settings.host}:{settings.port} with {server} "
         f"(public URL {settings.public_url}, data in {settings.data_dir})")
    served = handoff.record(settings, listening_url(settings.host, settings.port))  # for commands beside it
    try:
        if server == "gunicorn":
            metrics_dir = use_multiprocess_metrics() if settings.web_workers > 1 else None
            try:
                _serve_gunicorn(settings)
            finally:
                if metrics_dir is not None:
                    shutil.rmtree(metrics_dir, ignore_errors=True)
        elif server == "uvicorn":
            _serve_uvicorn(settings)
        else:
            _serve_werkzeug(settings)
    finally:
        handoff.forget(served)
    echo("lucid-hub stopped")


def check_before_serving(settings: Settings) -> None:
    """What would stop the hub once its server runs (in a forked worker, as a traceback and
    "Worker failed to boot"), checked first: each failure is one line naming what to change.
    The listening addresses are free; the access conditions and trusted issuers load; the
    database answers, its schema brought up to date."""
    _free(settings.host, settings.port, "--port or LUCID_PORT")
    if settings.metrics_port:
        _free(settings.host, settings.metrics_port, "LUCID_METRICS_PORT")
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    if not settings.policies_dir.is_dir() and settings.policies_dir != Settings().policies_dir:
        raise ConfigError(f"LUCID_POLICIES_DIR {settings.policies_dir} is not a directory (a misspelt one would "
                          "start a hub without access conditions)")
    read_policy_dir(settings.policies_dir)
    TrustedIssuer.parse_all(settings.trusted_issuers)
    database = Database(settings.db_url)
    try:
        database.upgrade()
    except SQLAlchemyError as exc:
        reason = " ".join(str(getattr(exc, "orig", None) or exc).split())[:300]
        source = "LUCID_DATABASE_HOST and its parts" if settings.database_host else "LUCID_DATABASE_URL"
        raise ConfigError(f"cannot use the database {database.engine.url!r} ({source}): {reason}") from None
    finally:
        database.dispose()


def _free(host: str, port: int, setting: str) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds: TIME_WAIT is no use
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc} (another hub there?); "
                              f"choose another port with {setting}") from None


def _serve_werkzeug(settings: Settings) -> None:
    from werkzeug.serving import make_server

    runtime = Runtime.open(settings, on_lost_leadership=_exit_process)
    httpd = make_server(settings.host, settings.port, create_app(settings, runtime), threaded=True)
    runtime.start()
    gcpause.freeze_startup()

    def shutdown(_signum: int, _frame: object) -> None:
        threading.Thread(target=httpd.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, shutdown)
    signal.signal(signal.SIGINT, shutdown)
    try:
        httpd.serve_forever()
    finally:
        runtime.close()


def _serve_uvicorn(settings: Settings) -> None:
    import uvicorn

    runtime = Runtime.open(settings, on_lost_leadership=_exit_process)
    front = build_front(settings, runtime)
    server = _hub_server(uvicorn.Config(front, host=settings.host, port=settings.port, **server_options(settings)),
                         lambda: _end_streams(runtime, front))
    runtime.start()
    gcpause.freeze_startup()
    try:
        server.run()
    finally:
        runtime.close()


def _end_streams(runtime: Runtime, front: Front) -> None:
    """SIGTERM: push channels and event streams never finish by themselves: they end first."""
    runtime.mirrors.end_streams()
    front.end_channels()


def _hub_server(config: Any, on_exit: Callable[[], None]) -> Any:
    """uvicorn's server, ending the push channels at the first SIGTERM or SIGINT."""
    import uvicorn

    class HubServer(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            if not self.should_exit:
                on_exit()
            super().handle_exit(sig, frame)
            # uvicorn raises the signal again once it stopped serving, which kills the process
            # before the runtime closes (the lease released, deliveries recorded, the outbox
            # relayed): the process ends by returning instead (gunicorn's worker_exit, serve's finally).
            self._captured_signals.clear()

    return HubServer(config)


def _worker_class(settings: Settings) -> type:
    """gunicorn's worker: uvicorn's, with the hub's settings and its SIGTERM."""
    from gunicorn.arbiter import Arbiter
    from uvicorn_worker import UvicornWorker

    options = {k: v for k, v in server_options(settings).items() if k not in ("log_config", "timeout_keep_alive")}

    class HubWorker(UvicornWorker):  # type: ignore[misc]
        CONFIG_KWARGS = options

        async def _serve(self) -> None:
            self.config.app = self.wsgi
            front = self.wsgi
            server = _hub_server(self.config, lambda: _end_streams(front.runtime, front))
            self._install_sigquit_handler()
            await server.serve(sockets=self.sockets)
            if not server.started:
                raise SystemExit(Arbiter.WORKER_BOOT_ERROR)

    return HubWorker


def _serve_gunicorn(settings: Settings) -> None:
    from gunicorn.app.base import BaseApplication

    class HubApplication(BaseApplication):  # type: ignore[misc]
        def __init__(self) -> None:
            self.runtime: Runtime | None = None
            super().__init__()

        def load_config(self) -> None:
            self.cfg.set("bind", f"{settings.host}:{settings.port}")
            self.cfg.set("workers", settings.web_workers)
            self.cfg.set("worker_class", _worker_class(settings))
            # An idle keep-alive connection is kept longer than the proxies and clients in
            # front keep theirs (load balancers: 60 s): at gunicorn's 2 s the hub closed
            # connections just as a client reused them, and the request died with a reset
            # (an e2e test after a 2 s pause; a load balancer answers that with a 502).
            self.cfg.set("keepalive", settings.keepalive_seconds)
            self.cfg.set("timeout", 3600)  # bulk publishes run long; liveness is /healthz
            self.cfg.set("graceful_timeout", settings.graceful_timeout)
            self.cfg.set("accesslog", None)  # lucid_hub.access logs requests (routes, not paths)
            self.cfg.set("logconfig_dict", dict_config(settings.log_format, settings.log_level.upper()))
            self.cfg.set("worker_exit", self._worker_exit)
            self.cfg.set("child_exit", _child_exit)
            if "control_socket_disable" in self.cfg.settings:
                # gunicorn >= 25 listens on a Unix socket in $HOME or $XDG_RUNTIME_DIR that can
                # stop, reload and scale it: one path for every hub of a user (the last started
                # takes it over), and a way in besides the API. The hub is run by signals.
                self.cfg.set("control_socket_disable", True)

        def load(self) -> Any:
            # In the worker: open the runtime there, after the fork. With several workers the
            # leader's relay looks at the outbox often: the others' publishes wait for it.
            try:
                self.runtime = Runtime.open(settings, on_lost_leadership=_exit_process)
            except LucidError as exc:  # one line, not gunicorn's traceback; 3: gunicorn stops ("failed to boot")
                log.error("cannot start: %s", exc)
                raise SystemExit(3) from None
            front = build_front(settings, self.runtime)
            self.runtime.start()
            gcpause.freeze_startup()
            return front

        def _worker_exit(self, _arbiter: Any, _worker: Any) -> None:
            if self.runtime is not None:
                self.runtime.close()

    HubApplication().run()


def _exit_process(reason: str) -> None:
    """A leader that lost its lease exits (after it stopped relaying), and is started again as
    a follower (gunicorn starts a new worker; a lone process, its container): the leader's
    threads are not unwound in place (lucid_hub.leadership)."""
    log.critical("exiting: this process lost the leadership (%s); it starts again as a follower", reason)
    for handler in logging.getLogger().handlers:
        handler.flush()
    os._exit(LOST_LEADERSHIP_EXIT)


def _child_exit(_arbiter: Any, worker: Any) -> None:
    """A worker process ended: its live values leave the multiprocess metrics."""
    mark_process_dead(worker.pid)
