"""Streams as Linked Data (docs/streams.md): each graph's event stream (LDES), its views and
push channel, the hub's DCAT catalogue and each graph's description of its channels."""

from __future__ import annotations

import hashlib
import json
from functools import partial
from typing import Any

from flask import Blueprint, Response, jsonify, request

from lucid_hub.archive import ChainLink
from lucid_hub.errors import InputError, NotFoundError
from lucid_hub.rdf.patch import parse_created
from lucid_hub.rdf.rdfpatch import MEDIA_TYPE as RDF_PATCH
from lucid_hub.resources import graph_url, hub_url, patch_url
from lucid_hub.streams import ldes
from lucid_hub.streams.ldes import DCAT, DCT, LDNS, LDP, LH, TYPE, Document, Urls, View, iri, literal
from lucid_hub.streams.members import GraphStream, made_by
from lucid_hub.web import push
from lucid_hub.web.authz import anonymous, principal, public, read_lapse, readable_graph
from lucid_hub.web.http import entity_tags, etag, negotiate, runtime

blueprint = Blueprint("streams", __name__)
IMMUTABLE = "max-age=31536000, immutable"
SHORT = "max-age=1"  # the newest page, the root and views: they change with every patch


def _stream(graph: str) -> GraphStream:
    return runtime().streams.current(graph)


def _answer(graph: str, document: Document, tag: str, cache: str) -> Response:
    """A stream document in the negotiated syntax, with its validators and caching."""
    media_type = negotiate(ldes.MEDIA_TYPES, "application/trig")
    scope = "public" if public(graph) else "private"
    strong = hashlib.sha256(f"{tag}\n{media_type}".encode()).hexdigest()[:32]
    headers = {"ETag": etag(strong), "Vary": "Accept, Authorization", "Cache-Control": f"{scope}, {cache}",
               "Link": f'<{runtime().settings.public_url}/contexts/lucid-hub.jsonld>; '
                       'rel="http://www.w3.org/ns/json-ld#context"; type="application/ld+json"'}
    none_match = entity_tags("If-None-Match")
    if none_match is not None and none_match.match_weak(strong):
        return Response(status=304, headers=headers)
    return Response(document.render(media_type), mimetype=media_type, headers=headers)


def _urls(graph: str) -> Urls:
    return Urls(runtime().settings.public_url, graph)


def _number(name: str) -> int:
    raw = request.args.get(name, "0")
    if not raw.isdigit() or len(raw) > 9:
        raise InputError(f"{name} must be a page number: 0 or more")
    return int(raw)


@blueprint.get("/streams")
def event_stream() -> Response:
    graph = readable_graph()
    stream = _stream(graph)
    return _answer(graph, ldes.event_stream(_urls(graph), stream), f"es\n{graph}\n{stream.last_id}", SHORT)


@blueprint.get("/streams/pages")
def pages() -> Response:
    """The full-history view: its root node, a page (`page=N`), or the page that holds the
    members after a time (`after=2026-01-01T00:00:00Z`: 303 to it)."""
    graph = readable_graph()
    stream, size = _stream(graph), runtime().settings.stream_page_members
    urls = _urls(graph)
    after = request.args.get("after")
    if after is not None:
        try:
            moment = parse_created(after) if "." in after else parse_created(after[:-1] + ".000Z")
        except Exception:
            raise InputError("after must be a UTC time: YYYY-MM-DDTHH:MM:SS[.mmm]Z") from None
        stamp = moment.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
        return Response(status=303, headers={"Location": urls.page(ldes.first_page_after(stream, stamp, size)),
                                             "Cache-Control": "private, max-age=1"})
    if "page" not in request.args:
        return _answer(graph, ldes.root_node(urls, stream, size), f"root\n{graph}\n{stream.last_id}", SHORT)
    number = _number("page")
    if number >= ldes.page_count(stream, size):
        raise NotFoundError(f"page {number} of the stream of <{graph}> does not exist (yet): it has "
                            f"{ldes.page_count(stream, size)} pages")
    full = ldes.is_full(stream, number, size)
    tag = f"page\n{graph}\n{number}\n{size}" if full else f"page\n{graph}\n{number}\n{stream.last_id}"
    return _answer(graph, ldes.page(urls, stream, number, size), tag, IMMUTABLE if full else SHORT)


@blueprint.get("/streams/views/<path:name>")
def view(name: str) -> Response:
    """A view: `latest`, `last/N` (versions per entity), `since/DURATION` (e.g. PT1H)."""
    graph = readable_graph()
    chosen = View.parse(name)
    stream = _stream(graph)
    number = _number("page")
    kept = chosen.select(stream)
    document = ldes.view_page(_urls(graph), chosen, kept, number, runtime().settings.stream_page_members)
    # A view is fixed by the stream's head and, as the clock moves a duration's window (a
    # suffix of the stream: timestamps never decrease), by its first member.
    first = kept[0].index if kept else -1
    return _answer(graph, document, f"view\n{graph}\n{chosen.name}\n{number}\n{stream.last_id}\n{first}", SHORT)


@blueprint.get("/streams/events")
def events() -> Response:
    """The stream's push channel (Server-Sent Events): one event `members` per patch, id =
    its chain position; `Last-Event-ID` (or `after=N`) resumes after it for as long as the
    archive holds the patches. `type=` adds the members in that syntax (TriG, N-Quads,
    JSON-LD, Turtle) or the signed patch itself (application/rdf-patch)."""
    graph = readable_graph()
    wanted = request.args.get("type")
    if wanted is not None and wanted not in (*ldes.MEDIA_TYPES, RDF_PATCH):
        raise InputError(f"type must be one of {', '.join((*ldes.MEDIA_TYPES, RDF_PATCH))}")
    patch_stream = runtime().stream
    after = _resume_position(patch_stream.position(graph))
    urls, streams = _urls(graph), runtime().streams
    lapsed = read_lapse(graph)

    def render(link: ChainLink) -> bytes:
        members = made_by(streams.current(graph, upto=link.seq), link.seq)
        data: dict[str, Any] = {"graph": graph, "patch": link.id, "seq": link.seq,
                                "link": patch_url(urls.base, link.id), "stream": urls.stream,
                                "members": [urls.version(m) for m in members]}
        if wanted == RDF_PATCH:
            data["body"] = link.body.decode()
        elif wanted:
            data["body"] = ldes.page_of_members(urls, members).render(wanted).decode()
        return f"event: members\nid: {link.seq}\ndata: {json.dumps(data)}\n\n".encode()

    def cached(link: ChainLink) -> bytes:
        # Every client of the graph gets the same event: rendered once (bench streams).
        return push.RENDERED.get(("members", urls.base, graph, link.id, wanted or ""), partial(render, link))

    return push.answer(push.patch_channel(patch_stream, graph, after, b": lucid-hub event stream\n\n", cached,
                                          lapsed, bodies=wanted == RDF_PATCH,
                                          share=("members", urls.base, wanted or "", push.reader_key())))




def _resume_position(now: int) -> int:
    raw = request.headers.get("Last-Event-ID") or request.args.get("after")
    if raw is None or raw == "":
        return now
    if raw.isdigit() and len(raw) <= 12:
        return int(raw)
    raise InputError("Last-Event-ID (or after=) must be a position in the graph's chain: 0 or more")


@blueprint.get("/contexts/lucid-hub.jsonld")
def jsonld_context() -> Response:
    response = jsonify(ldes.context())
    response.mimetype = "application/ld+json"
    response.headers["Cache-Control"] = "public, max-age=86400"
    return response


# --- discovery: the catalogue and each graph's channels ---------------------------------------

def _readable_graphs() -> list[str]:
    graphs = [row.iri for row in runtime().archive.graphs()]
    if anonymous():
        return [g for g in graphs if public(g)]
    party = principal().party
    return runtime().policies.readable(party, graphs)


@blueprint.get("/catalog")
def catalog() -> Response:
    """The hub's DCAT catalogue: every graph the caller may read (without credentials: the
    public ones), its distributions and the services that serve it."""
    base = runtime().settings.public_url
    cat = iri(f"{base}/catalog")
    out = [f"{cat} {TYPE} <{DCAT}Catalog>", f"{cat} <{DCT}title> {literal('lucid-hub graphs')}"]
    for graph in _readable_graphs():
        urls = Urls(base, graph)
        ds, dist, svc = iri(graph), iri(graph_url(base, graph)), iri(urls.stream)
        out += [f"{cat} <{DCAT}dataset> {ds}", f"{ds} {TYPE} <{DCAT}Dataset>",
                f"{ds} <{DCAT}distribution> {dist}", f"{dist} {TYPE} <{DCAT}Distribution>",
                f"{dist} <{DCAT}accessURL> {dist}", f"{dist} <{DCAT}downloadURL> {dist}",
                f"{cat} <{DCAT}service> {svc}", f"{svc} {TYPE} <{DCAT}DataService>",
                f"{svc} {TYPE} <https://w3id.org/ldes#EventStream>", f"{svc} <{DCAT}servesDataset> {ds}",
                f"{svc} <{DCAT}endpointURL> {svc}", f"{svc} <{DCT}conformsTo> <https://w3id.org/ldes/specification>",
                f"{ds} <{LDP}inbox> {iri(urls.inbox)}", f"{ds} <{LH}channels> {iri(urls.channels)}"]
        for media_type in ("text/turtle", "application/trig", "application/n-quads", "application/ld+json"):
            out.append(f"{dist} <{DCAT}mediaType> <https://www.iana.org/assignments/media-types/{media_type}>")
    media_type = negotiate(ldes.MEDIA_TYPES, "text/turtle") if request.headers.get("Accept") else "text/turtle"
    headers = {"Vary": "Accept, Authorization", "Cache-Control": "private, max-age=5"}
    return Response(Document(out, []).render(media_type), mimetype=media_type, headers=headers)


CHANNELS_TYPES = ["application/json", *ldes.MEDIA_TYPES]


@blueprint.get("/channels")
def channels() -> Response:
    """Everything a partner can subscribe to for one graph, how, and in which formats."""
    graph = readable_graph()
    base = runtime().settings.public_url
    urls = Urls(base, graph)
    q = urls.q
    described: dict[str, Any] = {
        "graph": graph,
        "resource": {"url": graph_url(base, graph), "formats": ["text/turtle", "application/trig",
                     "application/n-quads", "application/n-triples", "application/ld+json"]},
        "channels": [
            {"kind": "websub", "hub": hub_url(base), "topic": graph_url(base, graph),
             "description": "WebSub (W3C): signed patches POSTed to your callback; OAuth token with hub:subscribe"},
            {"kind": "patch-archive", "url": f"{base}/patches?graph={q}",
             "formats": ["text/turtle", "application/ld+json", "application/n-triples", "application/json"],
             "description": "LDP container of every signed patch, newest pages by ?since=, latest N by ?size=N"},
            {"kind": "patch-events", "url": f"{base}/patches/events?graph={q}", "formats": ["text/event-stream"],
             "description": "Server-Sent Events, one per patch; Last-Event-ID resumes; ?body=1 adds the patch"},
            {"kind": "ldes", "url": urls.stream, "root": urls.root,
             "views": [urls.view("latest"), urls.view("last/10"), urls.view("since/PT1H")],
             "formats": ldes.MEDIA_TYPES,
             "description": "Linked Data Event Stream: version objects by time; views latest, last/N, since/DURATION"},
            {"kind": "ldes-events", "url": urls.events, "formats": ["text/event-stream"],
             "description": "Server-Sent Events of the stream's members per patch; ?type= a syntax or the patch"},
            {"kind": "ldn-inbox", "url": urls.inbox, "accepts": ["application/ld+json", "text/turtle",
                                                                  "application/n-triples"],
             "description": "Linked Data Notifications: POST an Announce, Offer or Flag; ?size=N the latest N"},
            {"kind": "stream-input", "url": urls.input, "accepts": ["application/ld+json", "application/trig",
                                                                    "application/n-quads"],
             "description": "LDN for RDF streams: POST a stream element (a named graph with prov:generatedAtTime); "
                            "it becomes your signed patch (who may write the graph)"},
            {"kind": "inbox-events", "url": f"{base}/inbox/events?graph={q}", "formats": ["text/event-stream"],
             "description": "Server-Sent Events of the notifications the inbox receives (who may read the inbox)"},
            {"kind": "query-subscriptions", "url": f"{base}/subscriptions", "websocket": f"{base}/subscribe",
             "description": "continuous SPARQL queries (SEPA SE protocol over WebSocket, SSE, webhooks)"},
            {"kind": "windowed-queries", "url": f"{base}/windows/NAME",
             "description": "C-SPARQL windows over the change stream"},
            {"kind": "sparql", "url": f"{base}/sparql", "description": "SPARQL 1.1 query protocol"},
        ],
    }
    media_type = negotiate(CHANNELS_TYPES, "application/json")
    headers = {"Vary": "Accept, Authorization", "Cache-Control": "private, max-age=60"}
    if media_type == "application/json":
        response = jsonify(described)
        response.headers.update(headers)
        return response
    node = iri(urls.channels)
    out = [f"{node} {TYPE} <{LH}Channels>", f"{node} <{DCT}subject> {iri(graph)}",
           f"{iri(graph_url(base, graph))} <{LDP}inbox> {iri(urls.inbox)}",
           f"{iri(urls.stream)} <{LDNS}input> {iri(urls.input)}",
           f"{iri(urls.stream)} <{LDNS}output> {iri(urls.output)}"]
    for number, channel in enumerate(described["channels"]):
        b = f"_:c{number}"
        out += [f"{node} <{LH}channel> {b}", f"{b} <{LH}kind> {literal(channel['kind'])}",
                f"{b} <{DCT}description> {literal(channel['description'])}"]
        if "url" in channel:
            out.append(f"{b} <{LH}endpoint> {iri(channel['url'])}")
        for fmt in channel.get("formats", []):
            out.append(f"{b} <{DCAT}mediaType> {literal(fmt)}")
    return Response(Document(out, []).render(media_type), mimetype=media_type, headers=headers)
