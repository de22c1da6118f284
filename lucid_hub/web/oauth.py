"""The authorization server: `/oauth/token` (client credentials, RFC 6749 §4.4),
`/oauth/introspect` (RFC 7662), `/oauth/revoke` (RFC 7009), and its metadata (RFC 8414).

authlib runs the protocol (client authentication, grant and error responses); tokens are
RFC 9068 JWTs from `TokenService`.
"""

from __future__ import annotations

from typing import Any, ClassVar

from authlib.integrations.flask_oauth2 import AuthorizationServer
from authlib.oauth2.rfc6749 import grants
from authlib.oauth2.rfc6749.errors import InvalidScopeError
from authlib.oauth2.rfc6749.util import extract_basic_authorization
from authlib.oauth2.rfc6750 import BearerTokenGenerator
from authlib.oauth2.rfc7009 import RevocationEndpoint
from authlib.oauth2.rfc7662 import IntrospectionEndpoint
from flask import Blueprint, Flask, Response, current_app, jsonify, request

from lucid_hub.auth.basic import BasicCredentials
from lucid_hub.auth.clients import AUTH_METHODS, SCOPES, ClientRecord
from lucid_hub.auth.ratelimit import FailureLimiter
from lucid_hub.auth.tokens import Principal, TokenService
from lucid_hub.errors import AuthenticationError, RateLimitedError
from lucid_hub.web.http import request_address, runtime
from lucid_hub.web.registration import init_registration

blueprint = Blueprint("oauth", __name__)


class ClientCredentials(grants.ClientCredentialsGrant):
    TOKEN_ENDPOINT_AUTH_METHODS: ClassVar[list[str]] = list(AUTH_METHODS)


class _Tokens(BearerTokenGenerator):
    """authlib's bearer token response around our JWT access tokens (no refresh tokens)."""

    def __init__(self, tokens: TokenService) -> None:
        super().__init__(self._access_token, expires_generator=lambda _client, _grant: tokens.lifetime)
        self.tokens = tokens

    def _access_token(self, client: ClientRecord, grant_type: str, user: Any, scope: str) -> str:
        return self.tokens.issue(client, scope)

    def generate(self, grant_type: str, client: ClientRecord, user: Any = None, scope: str | None = None,
                 expires_in: int | None = None, include_refresh_token: bool = True) -> dict[str, Any]:
        """The token response, which always states the granted scope: RFC 6749 §5.1 requires it
        whenever it differs from the requested one (authlib leaves it out when it is empty)."""
        granted = client.get_allowed_scope(scope)
        if scope and not granted:
            raise InvalidScopeError(description=f"this client may have none of the scopes {scope[:200]}; "
                                                f"it may have: {' '.join(client.scopes) or 'none'}")
        token: dict[str, Any] = super().generate(grant_type, client, user=user, scope=scope, expires_in=expires_in,
                                                 include_refresh_token=include_refresh_token)
        token["scope"] = granted
        return token


class _OurTokens:
    """What the revocation and introspection endpoints share: client authentication methods,
    token types, and the token service."""

    CLIENT_AUTH_METHODS: ClassVar[list[str]] = list(AUTH_METHODS)
    SUPPORTED_TOKEN_TYPES = ("access_token",)

    def __init__(self, tokens: TokenService) -> None:
        super().__init__()
        self.tokens = tokens


class _Revocation(_OurTokens, RevocationEndpoint):
    def query_token(self, token_string: str, token_type_hint: str | None) -> Principal | None:
        try:  # an expired token may still be revoked (a no-op in effect, but not an error)
            return self.tokens.validate(token_string, check_expiry=False)
        except AuthenticationError:
            return None  # RFC 7009: invalid tokens do not cause an error response

    def revoke_token(self, token: Principal, request: Any) -> None:
        self.tokens.revoke(token)


class _Introspection(_OurTokens, IntrospectionEndpoint):
    def query_token(self, token_string: str, token_type_hint: str | None) -> Principal | None:
        try:
            return self.tokens.validate(token_string)
        except AuthenticationError:
            return None

    def check_permission(self, token: Principal, client: ClientRecord, request: Any) -> bool:
        """A client may introspect its own tokens; an admin client any token."""
        return token.endpoint_id == client.client_id or "admin" in client.scopes

    def introspect_token(self, token: Principal) -> dict[str, Any]:
        claims = token.claims
        return {"active": True, "client_id": token.endpoint_id, "sub": token.account, "scope": token.get_scope(),
                "groups": sorted(token.groups), "token_type": "Bearer", "exp": token.expires_at,
                "iat": claims.get("iat"), "iss": token.issuer, "aud": claims.get("aud"), "jti": token.jti}


def init_oauth(app: Flask) -> None:
    rt = app.extensions["lucid"]

    def query_client(client_id: str) -> ClientRecord | None:
        return rt.clients.get(client_id) if isinstance(client_id, str) and len(client_id) <= 64 else None

    server = AuthorizationServer(app, query_client=query_client, save_token=lambda token, req: None)
    server.scopes_supported = list(SCOPES)
    server.register_grant(ClientCredentials)
    server.register_token_generator("default", _Tokens(rt.tokens))
    server.register_endpoint(_Revocation(rt.tokens))
    server.register_endpoint(_Introspection(rt.tokens))
    app.extensions["oauth_server"] = server
    init_registration(app, server)
    app.extensions["auth_limiter"] = FailureLimiter(rt.settings.auth_rate_limit)
    app.extensions["basic_credentials"] = BasicCredentials(rt.clients)


def _server() -> AuthorizationServer:
    server: AuthorizationServer = current_app.extensions["oauth_server"]
    return server


def _limited(endpoint: str) -> Response:
    """Run an endpoint that authenticates clients, counting failed client authentications."""
    limiter: FailureLimiter = current_app.extensions["auth_limiter"]
    keys = (_client_id()[:64], request_address())
    wait = limiter.retry_after(*keys)
    if wait:
        raise RateLimitedError(f"too many failed attempts; try again in {wait} s", wait)
    if endpoint == "token":
        response: Response = _server().create_token_response()
    else:
        response = _server().create_endpoint_response(endpoint)
    if response.status_code == 401 or (response.status_code == 400 and b"invalid_client" in response.get_data()):
        limiter.failed(*keys)
    response.headers["Cache-Control"] = "no-store"
    return response


def _client_id() -> str:
    """The client id the request authenticates as, decoded by authlib's own function (RFC 6749
    §2.3.1: percent-encoded inside HTTP Basic), so that "lc%2Dx" counts as "lc-x"."""
    basic_id, _secret = extract_basic_authorization(request.headers)
    return str(basic_id or request.form.get("client_id") or "")


@blueprint.post("/oauth/token")
def token() -> Response:
    return _limited("token")


@blueprint.post("/oauth/revoke")
def revoke() -> Response:
    return _limited(_Revocation.ENDPOINT_NAME)


@blueprint.post("/oauth/introspect")
def introspect() -> Response:
    return _limited(_Introspection.ENDPOINT_NAME)


@blueprint.get("/.well-known/oauth-authorization-server")
def metadata() -> Response:
    base = runtime().settings.public_url
    methods = list(AUTH_METHODS)
    response = jsonify({
        "issuer": base, "token_endpoint": f"{base}/oauth/token", "jwks_uri": f"{base}/.well-known/jwks.json",
        "introspection_endpoint": f"{base}/oauth/introspect", "revocation_endpoint": f"{base}/oauth/revoke",
        "grant_types_supported": ["client_credentials"], "response_types_supported": [],
        "token_endpoint_auth_methods_supported": methods, "revocation_endpoint_auth_methods_supported": methods,
        "introspection_endpoint_auth_methods_supported": methods, "scopes_supported": list(SCOPES),
        "access_token_signing_alg_values_supported": ["Ed25519"],
        **({"registration_endpoint": f"{base}/oauth/register"} if runtime().settings.dcr != "off" else {}),
    })
    response.headers["Cache-Control"] = "public, max-age=300"
    return response
