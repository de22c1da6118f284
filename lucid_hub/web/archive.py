"""The patch archive: `/patches?graph=IRI` (LDP container, Linked Data Notifications style)
and `/patches/{id}` (one patch, content negotiation); RDF Patch upload."""

from __future__ import annotations

import html

import pyoxigraph as ox
from flask import Blueprint, Response, jsonify, request

from lucid_hub.errors import UnsupportedMediaTypeError
from lucid_hub.rdf.patch import check_patch_id
from lucid_hub.rdf.rdfpatch import MEDIA_TYPE as RDF_PATCH
from lucid_hub.rdf.rdfpatch import read_rdf_patch
from lucid_hub.rdf.serialization import write_patch
from lucid_hub.web.authz import author, authorized_graph, require_graph, require_scope
from lucid_hub.web.common import (
    RDF_MEDIA_TYPES,
    discovery_links,
    etag,
    graph_url,
    message,
    negotiate,
    patch_url,
    runtime,
)

blueprint = Blueprint("archive", __name__)
LDP = "http://www.w3.org/ns/ldp#"
RDF_TYPE = "http://www.w3.org/1999/02/22-rdf-syntax-ns#type"
PATCH_TYPES = [RDF_PATCH, "application/trig", "application/ld+json", "text/html"]
CONTAINER_TYPES = ["text/turtle", "application/ld+json", "application/n-triples", "application/json"]


@blueprint.get("/patches")
def container() -> Response:
    graph = authorized_graph("read")
    settings = runtime().settings
    since = request.args.get("since")
    if since is not None:
        check_patch_id(since, "since")
    records = runtime().publisher.history(graph, since=since, limit=settings.page_size + 1)
    page, more = records[: settings.page_size], len(records) > settings.page_size
    media_type = negotiate(CONTAINER_TYPES, "text/turtle")
    if media_type == "application/json":  # a page of whole patches: how mirrors catch up
        return jsonify({"graph": graph, "patches": [
            {"id": r.id, "prev": r.prev, "seq": r.seq, "body": r.body.decode("utf-8")} for r in page],
            "next": _page_url(graph, page[-1].id) if more else None})
    self_url = request.url
    quads = [ox.Quad(ox.NamedNode(self_url), ox.NamedNode(RDF_TYPE), ox.NamedNode(LDP + "BasicContainer"))]
    for r in page:
        quads.append(ox.Quad(ox.NamedNode(self_url), ox.NamedNode(LDP + "contains"), ox.NamedNode(patch_url(r.id))))
    body = ox.serialize(quads, format=RDF_MEDIA_TYPES[media_type], prefixes={"ldp": LDP})
    response = Response(body, mimetype=media_type)
    links = [f'<{LDP}BasicContainer>; rel="type"', f'<{graph_url(graph)}>; rel="describes"']
    if more:
        links.append(f'<{_page_url(graph, page[-1].id)}>; rel="next"')
    response.headers["Link"] = ", ".join(links)
    response.headers["Vary"] = "Accept"
    return response


def _page_url(graph: str, since: str) -> str:
    from urllib.parse import urlencode

    return f"{runtime().settings.public_url}/patches?{urlencode({'graph': graph, 'since': since})}"


@blueprint.get("/patches/<path:patch_id>")
def patch_resource(patch_id: str) -> Response:
    check_patch_id(patch_id)
    require_scope("graphs:read")  # before the lookup: no probing which patches exist
    record = runtime().publisher.patch(patch_id)
    require_graph(record.graph, "read")
    media_type = negotiate(PATCH_TYPES, RDF_PATCH)
    if media_type == RDF_PATCH:
        body = record.body
    else:
        patch = read_rdf_patch(record.body, runtime().canonicalizer)
        if media_type == "text/html":
            return Response(_html(record.graph, patch_id, record.body.decode()), mimetype="text/html")
        body = write_patch(patch, "trig" if media_type == "application/trig" else "jsonld")
    response = Response(body, mimetype=media_type)
    response.headers["ETag"] = etag(patch_id)
    response.headers["Cache-Control"] = "public, max-age=31536000, immutable"  # a patch never changes
    response.headers["Vary"] = "Accept"
    response.headers["Link"] = discovery_links(record.graph)
    return response


def _html(graph: str, patch_id: str, text: str) -> str:
    return (f"<!doctype html><html><head><meta charset=utf-8><title>Patch {html.escape(patch_id)}</title></head>"
            f"<body><h1>Patch of <a href=\"{html.escape(graph_url(graph))}\">{html.escape(graph)}</a></h1>"
            f"<p><code>{html.escape(patch_id)}</code></p><pre>{html.escape(text)}</pre></body></html>")


@blueprint.post("/patches")
def upload() -> Response:
    graph = authorized_graph("write")
    if (request.mimetype or "").lower() != RDF_PATCH:
        raise UnsupportedMediaTypeError(f"upload patches as {RDF_PATCH}, not {request.mimetype or '(none)'}")
    patch = runtime().publisher.upload(graph, request.get_data(cache=False), author=author(), message=message())
    if patch is None:
        response = jsonify({"graph": graph, "patch": None, "version": runtime().publisher.head(graph)})
        return response
    response = jsonify({"graph": graph, "patch": patch.id, "version": patch.id,
                        "removed": len(patch.removed), "added": len(patch.added)})
    response.status_code = 201
    response.headers["Location"] = patch_url(patch.id)
    response.headers["ETag"] = etag(patch.id)
    return response
