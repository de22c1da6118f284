"""What the blueprints share: the app's hub parts, request bodies as RDF, negotiation, URLs and entity tags."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyoxigraph as ox
from flask import current_app, request

from lucid_hub import mediatypes, nesting, resources
from lucid_hub.errors import InputError, UnsupportedMediaTypeError
from lucid_hub.networks import client_address
from lucid_hub.rdf.metadata import HEADER as METADATA_HEADER
from lucid_hub.rdf.metadata import Metadata, from_json
from lucid_hub.rdf.syntax import read_quads
from lucid_hub.web.parts import HubParts

RDF_MEDIA_TYPES = {
    "text/turtle": ox.RdfFormat.TURTLE,
    "application/n-triples": ox.RdfFormat.N_TRIPLES,
    "application/n-quads": ox.RdfFormat.N_QUADS,
    "application/trig": ox.RdfFormat.TRIG,
    "application/ld+json": ox.RdfFormat.JSON_LD,
}
MESSAGE_HEADER = "X-Lucid-Message"


def runtime() -> HubParts:
    """The parts of the hub this app serves."""
    rt: HubParts = current_app.extensions["lucid"]
    return rt


def json_object_body(expected: str) -> dict[str, Any]:
    """The request body as a JSON object (an empty body: {}); 400 naming `expected` otherwise."""
    body: Any = nesting.loads(request.get_data(cache=False) or b"{}", "request body")
    if not isinstance(body, dict):
        raise InputError(f"request body must be a JSON object: {expected}")
    return body


def request_address() -> str:
    """The caller's address, behind the proxies LUCID_TRUSTED_PROXIES names."""
    return client_address(request.remote_addr or "", request.headers.getlist("X-Forwarded-For"),
                          runtime().settings.proxies)


def graph_param() -> str:
    """The `graph` query parameter, which must be an absolute IRI."""
    graph = request.args.get("graph")
    if not graph:
        raise InputError("the query parameter graph=IRI is required")
    try:
        ox.NamedNode(graph)
    except ValueError:
        raise InputError(f"graph {graph!r} is not an absolute IRI") from None
    return graph


def body_quads(base_iri: str) -> Iterator[ox.Quad]:
    """The request body parsed as RDF by its Content-Type (415 for others), streaming."""
    media_type = (request.mimetype or "").lower()
    fmt = RDF_MEDIA_TYPES.get(media_type)
    if fmt is None:
        known = ", ".join(RDF_MEDIA_TYPES)
        raise UnsupportedMediaTypeError(f"Content-Type {media_type or '(none)'} is not RDF; use one of {known}")
    return read_quads(request.get_data(cache=False), fmt, base_iri=base_iri, name="request body")


def request_uri() -> str:
    """The URI the client asked for, as it sent it (the container's subject must be exactly
    that, LDP §4.2.1.6): the hub's public base, then the request target before any decoding."""
    raw = request.environ.get("RAW_URI") or request.environ.get("REQUEST_URI")
    if not raw:
        query = request.query_string.decode("latin-1")
        raw = request.environ.get("SCRIPT_NAME", "") + request.environ.get("PATH_INFO", "") + (
            f"?{query}" if query else "")
    return f"{runtime().settings.public_url}{raw}"


def message() -> str:
    return request.headers.get(MESSAGE_HEADER, "")[:4096]


def metadata() -> Metadata:
    """The publisher's metadata for the patch a write makes (`X-Lucid-Metadata`, JSON: rdf.metadata)."""
    value = request.headers.get(METADATA_HEADER)  # (sent twice, the server joins them: not JSON, refused)
    return from_json(value) if value is not None else ()


def negotiate(offers: list[str], default: str) -> str:
    """The offered media type the request's Accept header prefers (lucid_hub.mediatypes.negotiate)."""
    return mediatypes.negotiate(request.headers.get("Accept"), offers, default)


def graph_url(graph: str) -> str:
    return resources.graph_url(runtime().settings.public_url, graph)


def patch_url(patch_id: str) -> str:
    return resources.patch_url(runtime().settings.public_url, patch_id)


def discovery_links(graph: str) -> str:
    """WebSub discovery (`rel=hub`, `rel=self`) for a graph resource."""
    return resources.discovery_links(runtime().settings.public_url, graph)


def etag(version: str | None) -> str:
    return f'"{version or ""}"'


def entity_tags(header: str) -> mediatypes.EntityTags | None:
    """The entity tags of a conditional request header (If-Match, If-None-Match); None when
    absent, 400 when malformed."""
    try:
        return mediatypes.EntityTags.parse(request.headers.get(header))
    except ValueError as exc:
        raise InputError(f"{header}: {exc}") from None
