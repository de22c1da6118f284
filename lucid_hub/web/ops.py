"""Operations: liveness, readiness, keys."""

from __future__ import annotations

from flask import Blueprint, Response, jsonify
from sqlalchemy import text

from lucid_hub.web.common import runtime
from lucid_hub.web.errors import text as plain

blueprint = Blueprint("ops", __name__)


@blueprint.get("/healthz")
def healthz() -> Response:
    return plain(200, "ok")


@blueprint.get("/readyz")
def readyz() -> Response:
    try:
        with runtime().db.engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except Exception as exc:  # readiness reports, it does not fail
        return plain(503, f"database unreachable: {type(exc).__name__}")
    return plain(200, "ready")


@blueprint.get("/.well-known/jwks.json")
def jwks() -> Response:
    response = jsonify(runtime().keys.jwks())
    response.headers["Cache-Control"] = "public, max-age=300"
    return response
