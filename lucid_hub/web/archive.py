"""The patch archive: `/patches?graph=IRI` (LDP container, Linked Data Notifications style)
and `/patches/{id}` (one patch, content negotiation); RDF Patch upload."""

from __future__ import annotations

import hashlib
import html
import json
from functools import partial
from typing import Any

import pyoxigraph as ox
from flask import Blueprint, Response, jsonify, request

from lucid_hub.archive import ChainLink
from lucid_hub.errors import InputError, NotFoundError, UnsupportedMediaTypeError
from lucid_hub.publish import Unchanged
from lucid_hub.rdf.patch import check_patch_id
from lucid_hub.rdf.rdfpatch import MEDIA_TYPE as RDF_PATCH
from lucid_hub.rdf.rdfpatch import read_rdf_patch
from lucid_hub.rdf.serialization import write_patch
from lucid_hub.rdf.syntax import serialize
from lucid_hub.web import push
from lucid_hub.web.authz import (
    anonymous,
    author,
    authorized_graph,
    may_read,
    read_lapse,
    readable_graph,
    require_scope,
    unknown_or_unauthenticated,
)
from lucid_hub.web.http import (
    RDF_MEDIA_TYPES,
    discovery_links,
    entity_tags,
    etag,
    graph_url,
    message,
    metadata,
    negotiate,
    patch_url,
    request_uri,
    runtime,
)

blueprint = Blueprint("archive", __name__)
LDP = "http://www.w3.org/ns/ldp#"
RDF_TYPE = "http://www.w3.org/1999/02/22-rdf-syntax-ns#type"
PATCH_TYPES = [RDF_PATCH, "application/trig", "application/ld+json", "text/html"]
CONTAINER_TYPES = ["text/turtle", "application/ld+json", "application/n-triples", "application/json"]


CONTAINER_LINKS = [f'<{LDP}BasicContainer>; rel="type"', f'<{LDP}Resource>; rel="type"']


def _container_headers() -> dict[str, str]:
    """What LDP says every container answer (and OPTIONS) carries: its types, what it accepts."""
    return {"Link": ", ".join(CONTAINER_LINKS), "Accept-Post": RDF_PATCH, "Allow": "GET, HEAD, POST, OPTIONS"}


@blueprint.route("/patches", methods=["OPTIONS"])
def container_options() -> Response:
    return Response(status=204, headers=_container_headers())


@blueprint.get("/patches")
def container() -> Response:
    graph = readable_graph()
    settings = runtime().settings
    since, size = request.args.get("since"), request.args.get("size")
    if since is not None:
        check_patch_id(since, "since")
    if size is not None:  # the latest N (LDN for RDF streams: "pull the latest items")
        if since is not None or not size.isdigit() or not 1 <= int(size) <= settings.page_size:
            raise InputError(f"size must be a number of patches from 1 to {settings.page_size}, without since")
        page, more = runtime().archive.latest(graph, int(size)), False
    else:
        records = runtime().archive.history(graph, since=since, limit=settings.page_size + 1)
        page, more = _cut(records, settings.page_size, settings.page_bytes)
    media_type = negotiate(CONTAINER_TYPES, "text/turtle")
    # A page is fixed by its graph, its start, what it lists and its syntax.
    tag = hashlib.sha256("\n".join([graph, since or "", size or "", media_type, str(more),
                                     *(r.id for r in page)]).encode()).hexdigest()
    headers = {**_container_headers(), "ETag": etag(tag), "Vary": "Accept"}
    links = [*CONTAINER_LINKS, f'<{graph_url(graph)}>; rel="describes"']
    if more:
        links.append(f'<{_page_url(graph, page[-1].id)}>; rel="next"')
    headers["Link"] = ", ".join(links)
    none_match = entity_tags("If-None-Match")
    if none_match is not None and none_match.match_weak(tag):
        return Response(status=304, headers=headers)
    if media_type == "application/json":  # a page of whole patches: how mirrors catch up
        response = jsonify({"graph": graph, "patches": [
            {"id": r.id, "prev": r.prev, "seq": r.seq, "body": r.body.decode("utf-8")} for r in page],
            "next": _page_url(graph, page[-1].id) if more else None})
        response.headers.update(headers)
        return response
    self_url = ox.NamedNode(request_uri())
    quads = [ox.Quad(self_url, ox.NamedNode(RDF_TYPE), ox.NamedNode(LDP + "BasicContainer"))]
    for r in page:
        quads.append(ox.Quad(self_url, ox.NamedNode(LDP + "contains"), ox.NamedNode(patch_url(r.id))))
    body = serialize(quads, RDF_MEDIA_TYPES[media_type], prefixes={"ldp": LDP})
    return Response(body, mimetype=media_type, headers=headers)


def _cut(records: list[Any], size: int, max_bytes: int) -> tuple[list[Any], bool]:
    """The first page of `records` (one more than a page was read): `size` patches, or fewer
    once their bodies pass `max_bytes` (one at least); and whether more follow."""
    total = 0
    for index, record in enumerate(records[:size]):
        total += len(record.body)
        if total > max_bytes and index > 0:
            return records[:index], True
    return records[:size], len(records) > size


def _page_url(graph: str, since: str) -> str:
    from urllib.parse import urlencode

    return f"{runtime().settings.public_url}/patches?{urlencode({'graph': graph, 'since': since})}"


@blueprint.get("/patches/events")
def patch_events() -> Response:
    """A graph's patch stream as Server-Sent Events (its push channel): each archived
    patch, in chain order, as an event `patch` whose id is its position in the chain;
    `Last-Event-ID` (or `?after=N`) resumes after position N for as long as the archive
    holds the patches, without one: from now. `?body=1` adds the signed RDF Patch itself."""
    graph = readable_graph()
    raw = request.headers.get("Last-Event-ID") or request.args.get("after")
    stream = runtime().stream
    if raw is None or raw == "":
        after = stream.position(graph)
    elif raw.isdigit() and len(raw) <= 12:
        after = int(raw)
    else:
        raise InputError("Last-Event-ID (or after=) must be a position in the graph's chain: 0 or more")
    bodies = request.args.get("body") in ("1", "true")
    base = runtime().settings.public_url
    lapsed = read_lapse(graph)

    def make(link: ChainLink) -> bytes:
        data: dict[str, Any] = {"graph": graph, "id": link.id, "prev": link.prev, "seq": link.seq,
                                "removed": link.removed, "added": link.added, "link": f"{base}/patches/{link.id}"}
        if bodies:
            data["patch"] = link.body.decode()
        return f"event: patch\nid: {link.seq}\ndata: {json.dumps(data)}\n\n".encode()

    def render(link: ChainLink) -> bytes:  # (rendered once for every client of the graph)
        return push.RENDERED.get(("patch", base, graph, link.id, "body" if bodies else ""), partial(make, link))

    return push.answer(push.patch_channel(stream, graph, after, b": lucid-hub patch stream\n\n", render, lapsed,
                                          bodies=bodies, share=("patch", base, push.reader_key())))


@blueprint.get("/patches/<path:patch_id>")
def patch_resource(patch_id: str) -> Response:
    check_patch_id(patch_id)
    if not anonymous():
        require_scope("graphs:read")  # before the lookup: no probing which patches exist
    try:
        record = runtime().archive.patch(patch_id)
    except NotFoundError as exc:
        raise unknown_or_unauthenticated(exc) from None
    may_read(record.graph)
    media_type = negotiate(PATCH_TYPES, RDF_PATCH)
    # One strong ETag per representation; a patch never changes, but it is read with a token:
    # only the caller's own cache may keep it (a shared one would serve it to anybody).
    tag = patch_id if media_type == RDF_PATCH else f"{patch_id};{media_type}"
    headers = {"ETag": etag(tag), "Cache-Control": "private, max-age=31536000, immutable", "Vary": "Accept",
               "Link": f'<{LDP}Resource>; rel="type", {discovery_links(record.graph)}'}
    none_match = entity_tags("If-None-Match")
    if none_match is not None and none_match.match_weak(tag):
        return Response(status=304, headers=headers)
    if media_type == RDF_PATCH:
        body = record.body
    elif media_type == "text/html":
        body = _html(record.graph, patch_id, record.body.decode()).encode()
    else:
        patch = read_rdf_patch(record.body, runtime().canonicalizer)
        body = write_patch(patch, "trig" if media_type == "application/trig" else "jsonld")
    return Response(body, mimetype=media_type, headers=headers)


def _html(graph: str, patch_id: str, text: str) -> str:
    return (f"<!doctype html><html><head><meta charset=utf-8><title>Patch {html.escape(patch_id)}</title></head>"
            f"<body><h1>Patch of <a href=\"{html.escape(graph_url(graph))}\">{html.escape(graph)}</a></h1>"
            f"<p><code>{html.escape(patch_id)}</code></p><pre>{html.escape(text)}</pre></body></html>")


@blueprint.post("/patches")
def upload() -> Response:
    graph = authorized_graph("write")
    if (request.mimetype or "").lower() != RDF_PATCH:
        raise UnsupportedMediaTypeError(f"upload patches as {RDF_PATCH}, not {request.mimetype or '(none)'}")
    unchanged = Unchanged()
    patch = runtime().publisher.upload(graph, request.get_data(cache=False), author=author(), message=message(),
                                       unchanged=unchanged, metadata=metadata())
    if patch is None:
        response = jsonify({"graph": graph, "patch": None, "version": unchanged.version})
        return response
    response = jsonify({"graph": graph, "patch": patch.id, "version": patch.id,
                        "removed": len(patch.removed), "added": len(patch.added)})
    response.status_code = 201
    response.headers["Location"] = patch_url(patch.id)
    response.headers["ETag"] = etag(patch.id)
    return response
