"""Who calls, and may they: bearer tokens (RFC 6750), scopes, access conditions.

Every API route names what it needs; 401 when the token is missing or not valid, 403 with
the reason when the scope or the access conditions do not allow it (a policy denial also
carries a request id an admin can explain with /admin/explain?request=ID).
"""

from __future__ import annotations

from flask import g, request

from lucid_hub.auth.tokens import Principal
from lucid_hub.errors import AuthenticationError, ForbiddenError
from lucid_hub.policy.engine import Action
from lucid_hub.web.http import graph_param, runtime


def principal() -> Principal:
    """The caller, from `Authorization: Bearer <token>` (validated once per request)."""
    found: Principal | None = g.get("principal")
    if found is not None:
        return found
    header = request.headers.get("Authorization", "")
    if not header:
        raise AuthenticationError("this endpoint needs an access token: Authorization: Bearer <token> "
                                  "(from /oauth/token)", error="")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise AuthenticationError("use the Authorization scheme Bearer with an access token",
                                  error="invalid_request")
    found = runtime().tokens.validate(token.strip())
    g.principal = found
    return found


def require_scope(scope: str) -> Principal:
    caller = principal()
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


def authorized_graph(action: Action) -> str:
    """The `graph` query parameter, checked for the caller and `action`."""
    graph = graph_param()
    require_graph(graph, action)
    return graph


def author() -> str:
    """The patch author: the authenticated party (its account, and its client when other)."""
    caller = principal()
    name = caller.claims.get("name")
    who = f"{name} ({caller.account})" if isinstance(name, str) and name else caller.account
    return who if caller.endpoint_id == caller.account else f"{who} via {caller.endpoint_id}"
