"""One HTTP status per error family, with a one-line plain-text reason; never a 500 for input."""

from __future__ import annotations

import logging

from flask import Flask, Response, g, request
from werkzeug.exceptions import HTTPException

from lucid_hub import errors as e
from lucid_hub.web.bodies import BodyTooLarge, BoundedRequest

log = logging.getLogger(__name__)

# Most specific first: the first matching family decides the status.
STATUS: list[tuple[type[Exception], int]] = [
    (e.AuthenticationError, 401),
    (e.ForbiddenError, 403),
    (e.RateLimitedError, 429),
    (e.InputTooLargeError, 413),
    (e.UnsupportedMediaTypeError, 415),
    (e.NotAcceptableError, 406),
    (e.QueryLimitExceeded, 422),
    (e.PatchVerificationError, 422),
    (e.CanonicalizationLimitExceeded, 422),
    (e.PreconditionFailedError, 412),
    (e.ConflictError, 409),
    (e.ReplayError, 409),
    (e.ChainError, 409),
    (e.PatchApplyError, 409),
    (e.NotFoundError, 404),
    (e.InputError, 400),
    (e.StoreError, 503),
    (e.LogUnavailableError, 503),
    (e.ConfigError, 500),
    (e.RemoteError, 502),
]


def status_of(exc: Exception) -> int:
    for family, status in STATUS:
        if isinstance(exc, family):
            return status
    return 500


def text(status: int, reason: str, headers: dict[str, str] | None = None) -> Response:
    return Response(" ".join(reason.split()) + "\n", status=status, mimetype="text/plain", headers=headers)


def bearer_challenge(error: str, description: str, scope: str | None = None) -> str:
    """An RFC 6750 `WWW-Authenticate` value; no error attributes when no token was sent."""
    parts = ['Bearer realm="lucid-hub"']
    if error:
        clean = " ".join(description.split()).replace("\\", "").replace('"', "'")[:300]
        parts += [f'error="{error}"', f'error_description="{clean}"']
    if scope:
        parts.append(f'scope="{scope}"')
    return ", ".join(parts)


def register(app: Flask) -> None:
    @app.errorhandler(e.LucidError)
    def lucid_error(exc: e.LucidError) -> Response:
        status = status_of(exc)
        headers = {}
        if isinstance(exc, e.ConflictError):
            headers["ETag"] = f'"{exc.head or ""}"'
        if isinstance(exc, e.AuthenticationError):
            headers["WWW-Authenticate"] = bearer_challenge(exc.error, str(exc))
            if g.get("basic_challenge"):  # reads that harvesters make: they may use HTTP Basic
                headers["WWW-Authenticate"] += ', Basic realm="lucid-hub", charset="UTF-8"'
        if isinstance(exc, e.ForbiddenError):
            if exc.scope:
                headers["WWW-Authenticate"] = bearer_challenge("insufficient_scope", str(exc), exc.scope)
            if exc.request_id:
                headers["X-Request-Id"] = exc.request_id
        if isinstance(exc, e.ReplayError):
            headers["Location"] = exc.location
        if isinstance(exc, e.RateLimitedError):
            headers["Retry-After"] = str(exc.retry_after)
        if status < 500:  # what a route says every answer of its carries (an inbox: its constraints)
            headers.update(g.get("error_headers") or {})
        if status >= 500:
            log.error("request failed: %s", exc)
        return text(status, str(exc), headers)

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> Response:
        reason = exc.description or exc.name
        if exc.code == 413:
            if not isinstance(exc, BodyTooLarge):
                reason = f"the request body exceeds the limit of {app.config['MAX_CONTENT_LENGTH']:,} bytes"
            if isinstance(request, BoundedRequest):
                request.drain()
        return text(exc.code or 500, f"{exc.name}: {reason}")

    @app.errorhandler(Exception)
    def unexpected(exc: Exception) -> Response:
        if isinstance(exc, RecursionError):  # a library recursing on input nobody bounded yet
            log.warning("input nested too deeply for %s", type(exc).__name__, exc_info=True)
            return text(400, "the input is nested too deeply to be processed")
        log.exception("internal error")
        return text(500, "internal error (logged on the hub)")
