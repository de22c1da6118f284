"""Windowed continuous queries over HTTP, in the manner of rsp-services: `PUT` registers,
`GET` describes, `POST` with `action=pause|restart`, `DELETE`; the output stream as JSON
(`/results?after=N`) and as Server-Sent Events (`/events`, `Last-Event-ID`). Thin: every
decision is `lucid_hub.queries.windows.WindowService`'s."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, jsonify, request

from lucid_hub.errors import InputError
from lucid_hub.queries import results as rs
from lucid_hub.web.authz import require_scope
from lucid_hub.web.http import runtime
from lucid_hub.web.queries import SCOPE, _after, event_stream, webhook_of

blueprint = Blueprint("windows", __name__)


def _json() -> dict[str, Any]:
    body = request.get_json(silent=True)
    if not isinstance(body, dict):
        raise InputError('send a JSON object, e.g. {"sparql": "SELECT ...", "graphs": [IRI], "range": "1h", '
                         '"step": "10m"}')
    return body


@blueprint.put("/windows/<name>")
def register(name: str) -> Response:
    caller = require_scope(SCOPE)
    body = _json()
    sparql, graphs = body.get("sparql"), body.get("graphs")
    if not isinstance(sparql, str) or not sparql.strip():
        raise InputError("the windowed query needs its query: sparql")
    if isinstance(graphs, str):
        graphs = [graphs]
    if not isinstance(graphs, list) or not all(isinstance(g, str) for g in graphs):
        raise InputError("graphs must be an IRI or a list of IRIs")
    with_state = body.get("state", False)
    if not isinstance(with_state, bool):
        raise InputError("state must be true or false")
    callback, secret = webhook_of(caller, body)
    described = runtime().windows.register(caller, name, sparql, graphs, body.get("range"), body.get("step"),
                                           with_state=with_state, callback=callback, secret=secret)
    answer = jsonify(described)
    answer.status_code = 201
    answer.headers["Location"] = f"{runtime().settings.public_url}/windows/{name}"
    return answer


@blueprint.get("/windows/<name>")
def describe(name: str) -> Response:
    return jsonify(runtime().windows.describe(require_scope(SCOPE), name))


@blueprint.post("/windows/<name>")
def act(name: str) -> Response:
    caller = require_scope(SCOPE)
    action = request.form.get("action") if request.form else None
    if action is None:
        body = request.get_json(silent=True)
        action = body.get("action") if isinstance(body, dict) else None
    if not isinstance(action, str):
        raise InputError("send action=pause or action=restart (form or JSON)")
    return jsonify(runtime().windows.act(caller, name, action))


@blueprint.delete("/windows/<name>")
def remove(name: str) -> Response:
    runtime().windows.delete(require_scope(SCOPE), name)
    return jsonify({"deleted": name})


@blueprint.get("/windows/<name>/results")
def results(name: str) -> Response:
    found, state, reason = runtime().windows.results(require_scope(SCOPE), name, _after())
    return jsonify({"results": [body for _seq, body in found], "state": state, "reason": reason or None})


@blueprint.get("/windows/<name>/results/<int:sequence>/replay")
def replay(name: str, sequence: int) -> Response:
    """The element evaluated again from the archive (it equals the stored one)."""
    return jsonify(runtime().windows.replay(require_scope(SCOPE), name, sequence))


@blueprint.get("/windows/<name>/events")
def events(name: str) -> Response:
    """Server-Sent Events: each element as an event `result` whose id is its sequence; an
    `ended` event when the query ends."""
    caller = require_scope(SCOPE)
    service = runtime().windows
    service.describe(caller, name)

    def fetch(after: int) -> tuple[list[tuple[int, Any]], dict[str, Any] | None]:
        found, state, reason = service.results(caller, name, after)
        return found, rs.error(410, "query_ended", reason) if state == "ended" else None

    return event_stream(fetch, _after(), "result", service)
