"""Clients that register themselves (docs/auth.md): RFC 7591 at `/oauth/register`, and SEPA's
registration and token request at `/oauth/sepa/register` and `/oauth/sepa/token`, which SEPA's
own clients send (a JSAP names them: `/jsap`). Every decision is `auth.registration`'s."""

from __future__ import annotations

import json
from typing import Any

from flask import Blueprint, Response, current_app, jsonify, request

from lucid_hub.auth.registration import Endpoint, Registrations
from lucid_hub.errors import AuthenticationError, InputError, RateLimitedError
from lucid_hub.streams.inbox import SenderLimiter
from lucid_hub.web.authz import basic_principal
from lucid_hub.web.http import request_address, runtime

blueprint = Blueprint("registration", __name__)


def init_registration(app: Any, server: Any) -> None:
    """The registrations' parts, made when the app is (a bad setting stops the start)."""
    registrations = Registrations(app.extensions["lucid"].settings, app.extensions["lucid"].clients)
    app.extensions["registrations"] = registrations
    app.extensions["registration_limiter"] = SenderLimiter(app.extensions["lucid"].settings.dcr_rate)
    server.register_endpoint(Endpoint(registrations))


def _registrations() -> Registrations:
    registrations: Registrations = current_app.extensions["registrations"]
    limiter: SenderLimiter = current_app.extensions["registration_limiter"]
    try:
        limiter.take(request_address())
    except RateLimitedError as exc:
        raise RateLimitedError(f"too many registrations from this address; try again in {exc.retry_after} s",
                               exc.retry_after) from None
    return registrations


@blueprint.post("/oauth/register")
def register() -> Response:
    """RFC 7591: client metadata in, client credentials out (201)."""
    _registrations()
    response: Response = current_app.extensions["oauth_server"].create_endpoint_response(Endpoint.ENDPOINT_NAME)
    response.headers["Cache-Control"] = "no-store"
    return response


def _sepa_body() -> dict[str, Any]:
    try:
        body = json.loads(request.get_data() or b"null")
    except (ValueError, UnicodeDecodeError):
        body = None
    register = body.get("register") if isinstance(body, dict) else None
    if not isinstance(register, dict) or not isinstance(register.get("client_identity"), str):
        raise InputError('send {"register": {"client_identity": "...", "grant_types": ["client_credentials"]}}')
    grants = register.get("grant_types", ["client_credentials"])
    if grants != ["client_credentials"]:
        raise InputError('this hub issues client credentials only: "grant_types": ["client_credentials"]')
    return register


@blueprint.post("/oauth/sepa/register")
def sepa_register() -> Response:
    """SEPA's registration: {"register": {"client_identity", "grant_types"}} in, 201
    {"credentials": {"client_id", "client_secret"}} out."""
    registrations = _registrations()
    registrations.admit(request.headers.get("Authorization", ""))
    asked = _sepa_body()
    record, secret = registrations.register(asked["client_identity"], registrations.granted(None))
    answer = jsonify({"credentials": {"client_id": record.client_id, "client_secret": secret},
                      "scope": " ".join(record.scopes)})
    answer.status_code = 201
    answer.headers["Cache-Control"] = "no-store"
    return answer


@blueprint.post("/oauth/sepa/token")
def sepa_token() -> Response:
    """SEPA's token request: the client's id and secret as HTTP Basic, 201 {"token":
    {"access_token", "token_type", "expires_in"}} out; failures count as the token endpoint's."""
    header = request.headers.get("Authorization", "")
    scheme, _, encoded = header.partition(" ")
    if scheme.lower() != "basic":
        raise AuthenticationError("SEPA's token request authenticates with HTTP Basic: the client's id and secret")
    caller = basic_principal(encoded.strip())  # counts failures against the token endpoint's limits
    hub = runtime()
    record = hub.clients.get(caller.endpoint_id)
    if record is None:
        raise AuthenticationError("HTTP Basic: unknown client or wrong secret")
    token = hub.tokens.issue(record, " ".join(record.scopes))
    answer = jsonify({"token": {"access_token": str(token), "token_type": "bearer",
                                "expires_in": hub.settings.token_lifetime}})
    answer.status_code = 201
    answer.headers["Cache-Control"] = "no-store"
    return answer
