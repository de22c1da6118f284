"""SPARQL 1.1 Protocol at `/sparql`: queries over the graphs the caller may read (owned and
mirrored), updates of the graphs it may write (each changed graph gets exactly one patch),
and the service description.

This blueprint reads the protocol's parameters only. SPARQL text is parsed and evaluated
in a SPARQL worker process (`lucid_hub.store.sparql`): nothing here looks inside it.
"""

from __future__ import annotations

from typing import Any

import pyoxigraph as ox
from flask import Blueprint, Response, g, jsonify, request

from lucid_hub.errors import InputError, InputTooLargeError, UnsupportedMediaTypeError
from lucid_hub.policy.decisions import Party
from lucid_hub.publish.update import run_update
from lucid_hub.rdf.syntax import serialize
from lucid_hub.web.authz import author, require_graph, require_scope
from lucid_hub.web.http import RDF_MEDIA_TYPES, message, negotiate, patch_url, runtime

blueprint = Blueprint("sparql", __name__)
FORM = "application/x-www-form-urlencoded"
SD = "http://www.w3.org/ns/sparql-service-description#"
FORMATS = "http://www.w3.org/ns/formats/"
LUCID = "https://w3id.org/lucid-hub#"


def _one(params: Any, name: str) -> str | None:
    values = params.getlist(name)
    if len(values) > 1:
        raise InputError(f"the request gives {name} {len(values)} times; send exactly one")
    return values[0] if values else None


def _iris(params: Any, name: str) -> list[str] | None:
    values = params.getlist(name)
    for value in values:
        try:
            ox.NamedNode(value)
        except ValueError:
            raise InputError(f"{name} {value[:200]!r} is not an absolute IRI") from None
    return values or None


def _text(value: str, limit: int, what: str) -> str:
    if len(value.encode()) > limit:
        setting = "LUCID_MAX_QUERY_BYTES" if what == "query" else "LUCID_MAX_UPDATE_BYTES"
        raise InputTooLargeError(f"the {what} is longer than {limit:,} bytes ({setting})")
    return value


@blueprint.get("/sparql")
def sparql_get() -> Response:
    if request.args.getlist("update"):
        raise InputError("send updates with POST (SPARQL 1.1 Protocol §2.2)")
    query = _one(request.args, "query")
    if query is None:
        return _service_description()
    return _query(query, request.args)


@blueprint.post("/sparql")
def sparql_post() -> Response:
    kind = (request.mimetype or "").lower()
    if kind == "application/sparql-query":
        return _query(request.get_data(as_text=True), request.args)
    if kind == "application/sparql-update":
        return _update(request.get_data(as_text=True), request.args)
    if kind == FORM:
        query, update = _one(request.form, "query"), _one(request.form, "update")
        if query is not None and update is not None:
            raise InputError("send either query= or update=, not both")
        if query is not None:
            return _query(query, request.form)
        if update is not None:
            return _update(update, request.form)
        raise InputError("the form has neither query= nor update=")
    raise UnsupportedMediaTypeError("send a query as application/sparql-query, an update as "
                                    "application/sparql-update, or either as a form (query= or update=)")


def _base() -> str:
    """What relative IRIs in a query or an update resolve against (SPARQL 1.1 Query §4.1.1.1):
    the service's own URL, as the W3C protocol tests expect (docs/http-api.md)."""
    return f"{runtime().settings.public_url}/sparql"


def _readable(party: Party) -> list[str]:
    rt = runtime()
    # (another process of this hub, or another hub on the database, may have published)
    return rt.policies.readable(party, rt.publisher.sync.all())


def _query(text: str, params: Any) -> Response:
    """SPARQL 1.1 Protocol query. Its dataset: `default-graph-uri`/`named-graph-uri` when
    given, else the query's FROM/FROM NAMED, else every graph the caller may read (their
    union is the default graph); graphs the caller may not read are empty, as unknown ones
    are. Blank nodes come out as the store's skolem IRIs (urn:lucid-hub:bnode:…)."""
    g.basic_challenge = True  # harvesters may read with HTTP Basic, by GET or POST
    caller = require_scope("graphs:read", read=True)
    rt = runtime()
    text = _text(text, rt.settings.max_query_bytes, "query")
    if params.getlist("using-graph-uri") or params.getlist("using-named-graph-uri"):
        raise InputError("using-graph-uri and using-named-graph-uri belong to updates; a query's dataset is "
                         "default-graph-uri and named-graph-uri")
    media_type, body = rt.sparql.query(
        text, party=caller.party, readable=_readable(caller.party), default=_iris(params, "default-graph-uri"),
        named=_iris(params, "named-graph-uri"), accept=request.headers.get("Accept"), base=_base(),
        default_graph=rt.settings.default_graph_for(caller.account))
    return Response(body, mimetype=media_type, headers={"Vary": "Accept"})


def _update(text: str, params: Any) -> Response:
    """SPARQL 1.1 Update on the graphs the caller may write, as one patch per graph."""
    caller = require_scope("graphs:write")
    rt = runtime()
    text = _text(text, rt.settings.max_update_bytes, "update")
    if params.getlist("default-graph-uri") or params.getlist("named-graph-uri"):
        raise InputError("an update's dataset is using-graph-uri and using-named-graph-uri")

    def may_write(graph: str) -> None:
        require_graph(graph, "write")

    patches = run_update(rt.publisher, rt.sparql, text, party=caller.party, readable=_readable(caller.party),
                         may_write=may_write, author=author(), message=message(),
                         using=_iris(params, "using-graph-uri"), using_named=_iris(params, "using-named-graph-uri"),
                         base=_base(), default_graph=rt.settings.default_graph_for(caller.account))
    return jsonify({"patches": [{"graph": p.graph, "patch": p.id, "url": patch_url(p.id), "removed": len(p.removed),
                                 "added": len(p.added)} for p in patches]})


def _service_description() -> Response:
    """SPARQL 1.1 Service Description of this endpoint (public: it names no graph)."""
    endpoint = ox.NamedNode(f"{runtime().settings.public_url}/sparql")
    dataset, default = ox.BlankNode("dataset"), ox.BlankNode("default")

    def quad(s: Any, p: str, o: Any) -> ox.Quad:
        return ox.Quad(s, ox.NamedNode(p), o if not isinstance(o, str) else ox.NamedNode(o), ox.DefaultGraph())

    rdf_type = "http://www.w3.org/1999/02/22-rdf-syntax-ns#type"
    quads = [quad(endpoint, rdf_type, SD + "Service"), quad(endpoint, SD + "endpoint", endpoint),
             quad(endpoint, SD + "supportedLanguage", SD + "SPARQL11Query"),
             quad(endpoint, SD + "supportedLanguage", SD + "SPARQL11Update"),
             quad(endpoint, SD + "feature", SD + "UnionDefaultGraph"),
             quad(endpoint, SD + "defaultDataset", dataset), quad(dataset, rdf_type, SD + "Dataset"),
             quad(dataset, SD + "defaultGraph", default), quad(default, rdf_type, SD + "Graph")]
    # Continuous queries (docs/queries.md): the SE protocol's WebSocket and the REST resource.
    public = runtime().settings.public_url
    quads.append(quad(endpoint, LUCID + "subscribeEndpoint", public.replace("http", "ws", 1) + "/subscribe"))
    quads.append(quad(endpoint, LUCID + "subscriptionsEndpoint", public + "/subscriptions"))
    for name in ("SPARQL_Results_JSON", "SPARQL_Results_XML", "SPARQL_Results_CSV", "SPARQL_Results_TSV",
                 "N-Triples", "Turtle", "JSON-LD", "RDF_XML", "N-Quads", "TriG"):
        quads.append(quad(endpoint, SD + "resultFormat", FORMATS + name))
    media_type = negotiate(["text/turtle", "application/n-triples", "application/ld+json"], "text/turtle")
    body = serialize(quads, RDF_MEDIA_TYPES[media_type], prefixes={"sd": SD, "lh": LUCID})
    return Response(body, mimetype=media_type, headers={"Vary": "Accept"})
