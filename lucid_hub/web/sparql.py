"""SPARQL 1.1 at `/sparql`: queries over the graphs the caller may read (owned and mirrored),
and updates on owned graphs (each changed graph gets exactly one patch)."""

from __future__ import annotations

import re

import pyoxigraph as ox
import rdflib
from flask import Blueprint, Response, jsonify, request

from lucid_hub.errors import InputError, UnsupportedMediaTypeError
from lucid_hub.rdf.msg import GraphMsgs, graph_msgs
from lucid_hub.rdf.syntax import read_quads
from lucid_hub.store.graphs import RESERVED_PREFIX, check_no_skolem
from lucid_hub.web.authz import author, require_graph, require_scope
from lucid_hub.web.common import message, patch_url, runtime

blueprint = Blueprint("sparql", __name__)
# rdflib must never rewrite lexical forms (a process-wide switch of rdflib's).
rdflib.NORMALIZE_LITERALS = False
_PREFIX = re.compile(r"PREFIX\s+([A-Za-z][\w.-]*)?:\s*<([^>]*)>", re.IGNORECASE)


def _update_text() -> str:
    if request.mimetype == "application/sparql-update":
        return request.get_data(as_text=True)
    if request.mimetype == "application/x-www-form-urlencoded" and "update" in request.form:
        return request.form["update"]
    raise UnsupportedMediaTypeError("send the update as application/sparql-update or as form field update=")


def _mentioned(update: str, graphs: list[str]) -> list[str]:
    """Owned graphs the update names, by full IRI or by a declared prefix."""
    prefixes = _PREFIX.findall(update)
    out = []
    for graph in graphs:
        if f"<{graph}>" in update or any(
            graph.startswith(ns) and f"{name}:{graph[len(ns):]}" in update for name, ns in prefixes if ns
        ):
            out.append(graph)
    return out


QUERY_MAX_CHARS = 100_000


@blueprint.get("/sparql")
def sparql_query_get() -> Response:
    query = request.args.get("query")
    if not query:
        raise InputError("send a SPARQL query as ?query=, or POST it as application/sparql-query")
    return _query(query)


def _query(query: str) -> Response:
    """SPARQL 1.1 Protocol query. The dataset is fixed by the hub, whatever the query's FROM
    says: its default graph is the union of the graphs the caller may read, and those are
    its named graphs. Blank nodes come out as the store's skolem IRIs (urn:lucid-hub:…)."""
    caller = require_scope("graphs:read")
    if len(query) > QUERY_MAX_CHARS:
        raise InputError(f"the query is longer than {QUERY_MAX_CHARS:,} characters")
    if re.search(r"\bSERVICE\b", query, re.IGNORECASE):
        raise InputError("SERVICE is not allowed (the hub does not fetch URLs for queries)")
    rt = runtime()
    rt.publisher.sync_all()  # another process of this hub (or another hub on the database) may have published
    readable = [ox.NamedNode(g.iri) for g in rt.publisher.graphs() if not g.iri.startswith(RESERVED_PREFIX)
                and rt.policies.decide(caller.key, g.iri, "read")[0]]
    try:
        result = rt.store.query(query, readable)
    except SyntaxError as exc:
        raise InputError(f"malformed SPARQL query: {' '.join(str(exc).split())}") from None
    if isinstance(result, ox.QueryTriples):
        return Response(result.serialize(format=ox.RdfFormat.N_TRIPLES), mimetype="application/n-triples")
    return Response(result.serialize(format=ox.QueryResultsFormat.JSON), mimetype="application/sparql-results+json")


@blueprint.post("/sparql")
def sparql_update() -> Response:
    """Run the update on a scratch copy of the graphs it names, then publish each difference.

    The scratch copy makes each patch exactly what changed, whatever the update's form. It
    is an rdflib dataset with literal normalisation off: pyoxigraph's store would turn
    "01"^^xsd:integer into "1", and rdflib still evaluates values for FILTERs.
    """
    if request.mimetype == "application/sparql-query":
        return _query(request.get_data(as_text=True))
    if request.mimetype == "application/x-www-form-urlencoded" and "query" in request.form:
        return _query(request.form["query"])
    require_scope("graphs:write")
    update = _update_text()
    if re.search(r"\b(LOAD|SERVICE)\b", update, re.IGNORECASE):
        raise InputError("LOAD and SERVICE are not allowed (the hub does not fetch URLs for updates)")
    rt = runtime()
    owned = [g.iri for g in rt.publisher.graphs()]
    loaded = _mentioned(update, owned)
    for graph in loaded:  # an update may write any graph it names: it needs write on each
        require_graph(graph, "write")
    scratch = rdflib.Dataset()
    for graph in loaded:
        _, statements = rt.publisher.content(graph)
        scratch.graph(rdflib.URIRef(graph)).parse(data="".join(f"{s} .\n" for s in statements), format="nt")
    try:
        scratch.update(update)
    except Exception as exc:  # rdflib raises parser and evaluation errors of many types
        raise InputError(f"malformed or failing SPARQL update: {' '.join(str(exc).split())[:300]}") from None
    if len(scratch.default_graph) > 0:
        raise InputError("updates must write into named graphs (GRAPH <IRI> { … } or WITH <IRI>)")
    names = {str(g.identifier) for g in scratch.graphs() if isinstance(g.identifier, rdflib.URIRef)}
    names.discard(str(rdflib.graph.DATASET_DEFAULT_GRAPH_ID))
    for graph in sorted(names - set(loaded)):  # created by the update: checked before any publish
        require_graph(graph, "write")
    results = []
    for graph in sorted(set(loaded) | names):
        text = scratch.graph(rdflib.URIRef(graph)).serialize(format="nt", encoding="utf-8")
        quads = list(read_quads(text, ox.RdfFormat.N_TRIPLES, name="update result"))
        check_no_skolem((str(q) for q in quads), "update result")
        new = graph_msgs(quads, rt.canonicalizer) if quads else GraphMsgs()
        patch = rt.publisher.replace(graph, new, author=author(), message=message())
        if patch is not None:
            results.append({"graph": graph, "patch": patch.id, "url": patch_url(patch.id),
                            "removed": len(patch.removed), "added": len(patch.added)})
    return jsonify({"patches": results})
