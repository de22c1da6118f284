"""Who calls, and may they: bearer tokens (RFC 6750), scopes, access conditions.

Every API route names what it needs; 401 when the token is missing or not valid, 403 with
the reason when the scope or the access conditions do not allow it (a policy denial also
carries a request id an admin can explain with /admin/explain?request=ID).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable

from flask import current_app, g, request

from lucid_hub.auth.basic import BasicCredentials
from lucid_hub.auth.ratelimit import FailureLimiter
from lucid_hub.auth.tokens import Principal
from lucid_hub.errors import AuthenticationError, ForbiddenError, NotFoundError, RateLimitedError
from lucid_hub.policy.decisions import ANONYMOUS, Action
from lucid_hub.web.http import graph_param, request_address, runtime

# HTTP Basic (a client's id and secret) is for harvesters that know no OAuth: reads only. On
# a request that changes something a browser's remembered Basic credentials would be a CSRF
# hole, so there a bearer token is the only way in. A read sent by POST (a SPARQL query: long
# ones go by POST, as Comunica sends them) is a read: its route says so (`read=True`).
BASIC_METHODS = frozenset({"GET", "HEAD"})


def principal(*, read: bool = False) -> Principal:
    """The caller, from `Authorization: Bearer <token>` (validated once per request), or on a
    read (a GET or HEAD, or a request its route calls a `read`) from `Authorization: Basic`
    with an OAuth client's id and secret."""
    found: Principal | None = g.get("principal")
    if found is not None:
        return found
    header = request.headers.get("Authorization", "")
    if not header:
        raise AuthenticationError("this endpoint needs an access token: Authorization: Bearer <token> "
                                  "(from /oauth/token)", error="")
    scheme, _, token = header.partition(" ")
    if scheme.lower() == "basic" and (read or request.method in BASIC_METHODS):
        found = basic_principal(token.strip())
    elif scheme.lower() != "bearer" or not token.strip():
        raise AuthenticationError("use the Authorization scheme Bearer with an access token"
                                  + (" (HTTP Basic only reads: GET and HEAD, and SPARQL queries by POST)"
                                     if scheme.lower() == "basic" else ""), error="invalid_request")
    else:
        found = runtime().tokens.validate(token.strip())
    g.principal = found
    return found


def basic_principal(encoded: str) -> Principal:
    """The client whose id and secret `Authorization: Basic` carries; failed attempts count
    against the token endpoint's limits (the same secret, the same brute-force guard)."""
    try:
        client_id, sep, secret = base64.b64decode(encoded, validate=True).decode("utf-8").partition(":")
    except (binascii.Error, UnicodeDecodeError):
        raise AuthenticationError("Authorization: Basic needs base64 of client_id:client_secret",
                                  error="invalid_request") from None
    if not sep or not client_id:
        raise AuthenticationError("Authorization: Basic needs base64 of client_id:client_secret",
                                  error="invalid_request")
    limiter: FailureLimiter = current_app.extensions["auth_limiter"]
    keys = (client_id[:64], request_address())
    wait = limiter.retry_after(*keys)
    if wait:
        raise RateLimitedError(f"too many failed attempts; try again in {wait} s", wait)
    basic: BasicCredentials = current_app.extensions["basic_credentials"]
    found = basic.authenticate(client_id, secret)
    if found is None:
        limiter.failed(*keys)
        raise AuthenticationError("HTTP Basic: unknown client or wrong secret")
    return found


def anonymous() -> bool:
    """Whether the request carries no credentials at all."""
    return not request.headers.get("Authorization")


def require_scope(scope: str, *, read: bool = False) -> Principal:
    caller = principal(read=read)
    if scope not in caller.scopes:
        raise ForbiddenError(f"the access token lacks the scope {scope}", scope=scope)
    return caller


def require_graph(graph: str, action: Action) -> Principal:
    """The caller, when it may `action` the graph: scope graphs:read/write and a condition."""
    caller = require_scope("graphs:write" if action == "write" else "graphs:read")
    decision = runtime().policies.decide(caller.party, graph, action)
    if not decision.allowed:
        raise ForbiddenError(f"{decision.reason} (request {decision.request_id})", request_id=decision.request_id)
    return caller


def may_read(graph: str) -> Principal | None:
    """The caller, when it may read the graph; None for a request without credentials on a
    public graph (an access condition for everyone grants it; docs/decisions.md). Without
    credentials on any other graph: 401, so that clients know to authenticate."""
    g.basic_challenge = True
    if anonymous():
        if public(graph):
            return None
        raise AuthenticationError(f"<{graph}> is not public: authenticate with a bearer token (from /oauth/token) "
                                  "or HTTP Basic with a client's id and secret", error="")
    return require_graph(graph, "read")


def public(graph: str) -> bool:
    """Whether everyone, without credentials, may read the graph. Not recorded as a denial
    when not: it is asked on every stream answer (its caching) and for every catalogue entry."""
    return runtime().policies.allows(ANONYMOUS, graph, "read")


def readable_graph() -> str:
    """The `graph` query parameter, readable by the caller (or by everyone)."""
    graph = graph_param()
    may_read(graph)
    return graph


def read_lapse(graph: str) -> Callable[[], str | None]:
    """For a push channel of a graph the caller may read now: a check, asked before each
    event, that says why the caller may no longer read it (None while it may). Each event is
    a read, decided as the access conditions are at its time: a withdrawn permission, a
    revoked token or a graph no longer public ends the channel."""
    caller = None if anonymous() else principal()
    hub = runtime()

    def lapsed() -> str | None:
        if caller is None:
            return None if hub.policies.allows(ANONYMOUS, graph, "read") else f"<{graph}> is no longer public"
        if hub.tokens.is_revoked(caller.jti):
            return "the access token was revoked"
        if not hub.policies.allows(caller.party, graph, "read"):
            return f"{caller.account} may no longer read <{graph}>"
        return None

    return lapsed


def unknown_or_unauthenticated(exc: NotFoundError) -> Exception:
    """What a request without credentials learns of something that does not exist: the same
    401 a non-public graph gives (no probing for names)."""
    if anonymous():
        return AuthenticationError("authenticate with a bearer token or HTTP Basic", error="")
    return exc


def authorized_graph(action: Action) -> str:
    """The `graph` query parameter, checked for the caller and `action`."""
    graph = graph_param()
    require_graph(graph, action)
    return graph


AUTHOR_HEADER = "X-Lucid-Author"


def author() -> str:
    """The patch author: the authenticated party (its account, and its client when other).
    An application publishing for its users may name the user (`X-Lucid-Author`): the patch
    then says so, as the party stated it ("alice, as stated by ...")."""
    caller = principal()
    name = caller.claims.get("name")
    who = f"{name} ({caller.account})" if isinstance(name, str) and name else caller.account
    who = who if caller.endpoint_id == caller.account else f"{who} via {caller.endpoint_id}"
    stated = " ".join(request.headers.get(AUTHOR_HEADER, "").split())[:200]
    return f"{stated}, as stated by {who}" if stated else who
