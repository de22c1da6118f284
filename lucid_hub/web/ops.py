"""Operations: liveness, readiness, metrics, keys."""

from __future__ import annotations

import logging
import time
from pathlib import Path

from flask import Blueprint, Flask, Response, g, jsonify, request

from lucid_hub import memory
from lucid_hub.errors import LogUnavailableError, StoreError
from lucid_hub.metrics import CONTENT_TYPE
from lucid_hub.web.errors import text as plain
from lucid_hub.web.http import runtime

blueprint = Blueprint("ops", __name__)


@blueprint.get("/favicon.ico")
def favicon() -> Response:
    """The console's icon where browsers look for one unasked (a plain-text page, a JSON answer)."""
    icon = (Path(__file__).parent / "static" / "favicon.svg").read_bytes()
    return Response(icon, mimetype="image/svg+xml", headers={"Cache-Control": "public, max-age=86400"})


@blueprint.get("/healthz")
def healthz() -> Response:
    return plain(200, "ok")


@blueprint.get("/readyz")
def readyz() -> Response:
    """Ready to take traffic: the database and the patch log answer, and the mirrors have
    caught up on what they missed while this hub was down (for one round's time at most).
    503 names what is not ready; a 200 names the mirrors whose partner stalls them."""
    hub = runtime()
    try:
        hub.database_answers()
    except Exception as exc:  # readiness reports, it does not fail
        return plain(503, f"database unreachable: {type(exc).__name__}")
    try:
        hub.log.check()
    except LogUnavailableError as exc:
        return plain(503, f"patch log unreachable: {exc}")
    if hub.mirrors.catching_up:
        return plain(503, "catching up: mirrors are fetching the patches they missed")
    lag = hub.publisher.sync.lag()
    if lag > hub.settings.ready_max_lag:
        return plain(503, f"catching up: this replica's store is {lag} patches behind the archive "
                          f"(ready at {hub.settings.ready_max_lag} or fewer)")
    for sync in hub.remotes:  # the operator's own stores
        try:
            behind = sync.lag()
        except StoreError as exc:
            return plain(503, f"store {sync.store.config.name} unreachable: {exc}")
        if sync.problem:
            return plain(503, f"store {sync.store.config.name} not ready: {sync.problem}")
        if behind > hub.settings.ready_max_lag:
            return plain(503, f"catching up: the store {sync.store.name} is {behind} patches behind the "
                              f"archive (ready at {hub.settings.ready_max_lag} or fewer)")
    # A partner's trouble is its mirror's, not the hub's: named, and still ready.
    stuck = "".join(f"; mirror of <{graph}> is not following: {reason}" for graph, (reason, _since) in
                    sorted(hub.mirrors.stuck().items()))
    for sync in hub.remotes:
        stuck += "".join(f"; {reason}" for _graph, reason in sorted(sync.refused.items()))
    return plain(200, "ready" + stuck)


@blueprint.get("/.well-known/jwks.json")
def jwks() -> Response:
    response = jsonify(runtime().keys.jwks())
    response.headers["Cache-Control"] = "public, max-age=300"
    return response


@blueprint.get("/metrics")
def metrics() -> Response:
    """Prometheus text format (docs/operations.md lists the metrics); with LUCID_METRICS_PORT
    only there, so that an Ingress in front of this port does not publish them."""
    port = runtime().settings.metrics_port
    if port:
        return plain(404, f"metrics are served on port {port}")
    return Response(runtime().metrics.render(), content_type=CONTENT_TYPE)


def init_request_observation(app: Flask) -> None:
    """Every answered request: counted and timed in the metrics, and one access-log record.
    Routes are recorded as their templates (`/callback/<mirror_id>`), never as the path: a
    mirror's callback path is its secret, and query strings may name graphs."""
    access = logging.getLogger("lucid_hub.access")
    metrics = app.extensions["lucid"].metrics

    @app.before_request
    def started() -> None:
        g.lucid_started = time.perf_counter()

    @app.teardown_request
    def trimmed(_error: BaseException | None) -> None:
        if (request.content_length or 0) >= memory.TRIM_AFTER_BYTES:
            memory.trim()  # what parsing a large body freed goes back to the system, not to an arena

    @app.after_request
    def observed(response: Response) -> Response:
        seconds = time.perf_counter() - g.pop("lucid_started", time.perf_counter())
        route = request.url_rule.rule if request.url_rule is not None else "unmatched"
        metrics.http_requests.labels(request.method, route, str(response.status_code)).inc()
        metrics.http_seconds.labels(route).observe(seconds)
        if access.isEnabledFor(logging.INFO):
            access.info("%s %s %d", request.method, route, response.status_code, extra={
                "method": request.method, "route": route, "status": response.status_code,
                "duration_ms": round(seconds * 1000, 2), "remote": request.remote_addr,
                **({"request_id": response.headers["X-Request-Id"]} if "X-Request-Id" in response.headers else {})})
        return response
