"""Windowed continuous queries over HTTP, in the manner of rsp-services: `PUT` registers,
`GET` describes, `POST` with `action=pause|restart`, `DELETE`; the output stream as JSON
(`/results?after=N`) and as Server-Sent Events (`/events`, `Last-Event-ID`). Thin: every
decision is `lucid_hub.queries.windows.WindowService`'s."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, jsonify, render_template, request

from lucid_hub.auth.tokens import Principal
from lucid_hub.db.times import aware
from lucid_hub.errors import InputError, NotFoundError
from lucid_hub.queries import linked
from lucid_hub.queries import results as rs
from lucid_hub.queries.window_content import Window
from lucid_hub.queries.window_registration import WindowRequest
from lucid_hub.streams import ldes
from lucid_hub.web.authz import require_scope
from lucid_hub.web.http import negotiate, runtime
from lucid_hub.web.queries import SCOPE, _after, event_stream, webhook_of

blueprint = Blueprint("windows", __name__)
LINKED = ["application/json", *ldes.MEDIA_TYPES, "text/html"]  # a query and its results, as Linked Data


def _json() -> dict[str, Any]:
    body = request.get_json(silent=True)
    if not isinstance(body, dict):
        raise InputError('send a JSON object, e.g. {"sparql": "SELECT ...", "graphs": [IRI], "range": "1h", '
                         '"step": "10m"}, or a C-SPARQL registration (REGISTER QUERY name AS ...) as text/plain, '
                         'application/sparql-query or the form field query')
    return body


def _csparql() -> str | None:
    """The C-SPARQL text of the request, if it sends one: a text body, the form field
    `query` (as rsp-services takes it), or JSON's `csparql`."""
    if request.mimetype in ("text/plain", "application/sparql-query"):
        try:
            return request.get_data().decode("utf-8")
        except UnicodeDecodeError:
            raise InputError("the C-SPARQL registration is not UTF-8") from None
    if request.mimetype == "application/x-www-form-urlencoded":
        query = request.form.get("query")
        if not query:
            raise InputError("send the C-SPARQL registration in the form field query")
        return query
    body = request.get_json(silent=True)
    if isinstance(body, dict) and "csparql" in body:
        if not isinstance(body["csparql"], str):
            raise InputError("csparql must be the registration's text")
        return str(body["csparql"])
    return None


def _iris(body: dict[str, Any], key: str) -> list[str]:
    value = body.get(key, [])
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(g, str) for g in value):
        raise InputError(f"{key} must be an IRI or a list of IRIs")
    return list(value)


def _register(caller: Principal, name: str | None) -> Response:
    service = runtime().windows
    text = _csparql()
    spec = request.get_json(silent=True) if request.is_json else None
    callback, secret = webhook_of(caller, spec if isinstance(spec, dict) else {}, "windows")
    if text is not None:
        name = service.registrar.csparql(caller, name, text, callback=callback, secret=secret)
    else:
        body = _json()
        sparql = body.get("sparql")
        if not isinstance(sparql, str) or not sparql.strip():
            raise InputError("the windowed query needs its query: sparql (or csparql: a C-SPARQL registration)")
        with_state = body.get("state", False)
        if not isinstance(with_state, bool):
            raise InputError("state must be true or false")
        view = body.get("view", "changes")
        if not isinstance(view, str):
            raise InputError("view must be changes or triples")
        if name is None:
            raise InputError("a windowed query sent as JSON is PUT to /windows/{name}")
        name = service.registrar.register(caller, WindowRequest(
            name, sparql, _iris(body, "graphs"), body.get("range"), body.get("step"), with_state=with_state,
            view=view, static=_iris(body, "from"), named=_iris(body, "fromNamed"), callback=callback,
            secret=secret))
    answer = jsonify(service.describe(caller, name))
    answer.status_code = 201
    answer.headers["Location"] = f"{runtime().settings.public_url}/windows/{name}"
    return answer


@blueprint.put("/windows/<name>")
def register(name: str) -> Response:
    return _register(require_scope(SCOPE), name)


@blueprint.post("/windows")
def register_csparql() -> Response:
    """A C-SPARQL registration: the name is the one it registers."""
    caller = require_scope(SCOPE)
    if _csparql() is None:
        raise InputError("POST /windows takes a C-SPARQL registration (REGISTER QUERY name AS ...); JSON "
                         "registrations are PUT to /windows/{name}")
    return _register(caller, None)


@blueprint.get("/windows/<name>")
def describe(name: str) -> Response:
    """The query's description (JSON), or its s-graph: RDF by content negotiation, HTML for
    browsers."""
    caller = require_scope(SCOPE)
    media_type = negotiate(LINKED, "application/json")
    service = runtime().windows
    if media_type == "application/json":
        return jsonify(service.describe(caller, name))
    row = service.readable(caller, name)
    urls = linked.ResultUrls(runtime().settings.public_url, row.name)
    elements = service.records.elements(row.id, row.sequence - runtime().settings.query_retain + 1, row.sequence)
    next_end = aware(row.next_end_at) if row.next_end_at and row.state == "active" else None
    if media_type == "text/html":
        return Response(render_template("window.html", row=row, urls=urls, elements=elements, next_end=next_end,
                                        description=service.describe(caller, name)), mimetype="text/html")
    return _rdf(linked.sgraph(urls, Window.parse(row.range_spec, row.step_spec), elements, next_end), media_type)


@blueprint.get("/windows/<name>/results/<int:sequence>")
def element(name: str, sequence: int) -> Response:
    """One element (an i-graph): JSON, RDF by content negotiation, or HTML."""
    caller = require_scope(SCOPE)
    service = runtime().windows
    row = service.readable(caller, name)
    found = service.records.elements(row.id, sequence, sequence)
    if not found:
        raise NotFoundError(f"{name} has no result {sequence} (kept: the last LUCID_QUERY_RETAIN)")
    media_type = negotiate(LINKED, "application/json")
    if media_type == "application/json":
        return jsonify(found[0].body)
    urls = linked.ResultUrls(runtime().settings.public_url, row.name)
    if media_type == "text/html":
        return Response(render_template("window_result.html", row=row, urls=urls, element=found[0],
                                        table=linked.table(found[0].body)), mimetype="text/html")
    return _rdf(linked.igraph(urls, found[0]), media_type, immutable=True)


@blueprint.get("/windows/<name>/ldes")
def results_stream(name: str) -> Response:
    """The query's elements as an LDES: the event stream, or (`page=N`) one page of it."""
    caller = require_scope(SCOPE)
    service = runtime().windows
    row = service.readable(caller, name)
    urls = linked.ResultUrls(runtime().settings.public_url, row.name)
    first = max(0, row.sequence - runtime().settings.query_retain + 1)
    raw = request.args.get("page")
    media_type = negotiate(ldes.MEDIA_TYPES, "application/trig")  # (pages change as old elements go)
    if raw is None:
        return _rdf(linked.event_stream(urls, first), media_type)
    if not raw.isdigit() or len(raw) > 9:
        raise InputError("page must be a page number: 0 or more")
    number = int(raw)
    elements = service.records.elements(row.id, max(first, number * linked.PAGE), (number + 1) * linked.PAGE - 1)
    retain = runtime().settings.query_retain
    return _rdf(linked.page(urls, number, elements, row.sequence, retain), media_type)


def _rdf(document: ldes.Document, media_type: str, *, immutable: bool = False) -> Response:
    cache = "private, max-age=31536000, immutable" if immutable else "private, max-age=1"
    return Response(document.render(media_type), mimetype=media_type,
                    headers={"Vary": "Accept, Authorization", "Cache-Control": cache})


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
