"""SPARQL 1.1 Graph Store HTTP Protocol on owned graphs: `/graphs?graph=IRI`."""

from __future__ import annotations

import pyoxigraph as ox
from flask import Blueprint, Response, jsonify, request

from lucid_hub.errors import InputError
from lucid_hub.rdf.msg import GraphMsgs, split_graphs
from lucid_hub.rdf.patch import Patch
from lucid_hub.rdf.syntax import serialize
from lucid_hub.store.graphs import check_no_skolem
from lucid_hub.web.authz import author, authorized_graph
from lucid_hub.web.common import (
    RDF_MEDIA_TYPES,
    body_quads,
    discovery_links,
    etag,
    message,
    negotiate,
    patch_url,
    runtime,
)

blueprint = Blueprint("graphs", __name__)
OUTPUT_TYPES = ["text/turtle", "application/trig", "application/n-quads", "application/n-triples",
                "application/ld+json"]


@blueprint.get("/graphs")
def get_graph() -> Response:
    graph = authorized_graph("read")
    version, statements = runtime().publisher.content(graph, request.args.get("version"))
    media_type = negotiate(OUTPUT_TYPES, "text/turtle")
    body = render(graph, statements, media_type)
    response = Response(body, mimetype=media_type)
    response.headers["ETag"] = etag(version)
    response.headers["Link"] = discovery_links(graph)
    response.headers["Vary"] = "Accept"
    return response


def render(graph: str, statements: list[str], media_type: str) -> bytes:
    """Statements of one graph in the negotiated syntax (triples, or quads in the graph)."""
    text = "".join(f"{s} .\n" for s in statements)
    if media_type == "application/n-triples":
        return text.encode()
    name = ox.NamedNode(graph)
    quads = (ox.Quad(q.subject, q.predicate, q.object, name)
             for q in ox.parse(text, format=ox.RdfFormat.N_TRIPLES))
    return serialize(quads, RDF_MEDIA_TYPES[media_type])


def _body_msgs(graph: str) -> GraphMsgs:
    builders = split_graphs(body_quads(graph), graph, "request body")
    other = sorted(set(builders) - {graph})
    if other:
        raise InputError(f"request body holds graph <{other[0]}>; /graphs?graph=<{graph}> takes its triples only")
    builder = builders.get(graph)
    msgs = builder.build(runtime().canonicalizer) if builder else GraphMsgs()
    check_no_skolem(msgs.ground, "request body")
    check_no_skolem(msgs.blank, "request body")
    return msgs


def _if_match() -> str | None:
    value = request.headers.get("If-Match")
    return None if value is None or value.strip() == "*" else value.strip()


def _result(graph: str, patch: Patch | None) -> Response:
    created = patch is not None and patch.prev is None
    version = patch.id if patch else runtime().publisher.head(graph)
    payload = {"graph": graph, "version": version, "patch": patch.id if patch else None,
               "removed": len(patch.removed) if patch else 0, "added": len(patch.added) if patch else 0}
    response = jsonify(payload)
    response.status_code = 201 if created else 200
    response.headers["ETag"] = etag(version)
    if patch:
        response.headers["Location"] = patch_url(patch.id)
    response.headers["Link"] = discovery_links(graph)
    return response


@blueprint.put("/graphs")
def put_graph() -> Response:
    graph = authorized_graph("write")
    new = _body_msgs(graph)
    patch = runtime().publisher.replace(graph, new, author=author(), message=message(), if_match=_if_match())
    return _result(graph, patch)


@blueprint.post("/graphs")
def post_graph() -> Response:
    graph = authorized_graph("write")
    new = _body_msgs(graph)
    patch = runtime().publisher.merge(graph, new, author=author(), message=message(), if_match=_if_match())
    return _result(graph, patch)


@blueprint.delete("/graphs")
def delete_graph() -> Response:
    graph = authorized_graph("write")
    patch = runtime().publisher.drop(graph, author=author(), message=message(), if_match=_if_match())
    return _result(graph, patch)
