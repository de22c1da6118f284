"""SPARQL 1.1 Graph Store HTTP Protocol on owned graphs: `/graphs?graph=IRI` (indirect
identification) and `/graphs/{path}` (direct: the graph named by that URL itself, as the
graphs `POST /graphs` mints are).

Where the hub deviates from the protocol (docs/http-api.md): it has no default graph, so
`?default` is refused with a reason; multipart bodies are refused (one RDF document per
request). A deleted graph is gone (404) until it is written again; its history stays in
the archive (`/patches?graph=IRI`, `?version=ID`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from urllib.parse import quote

from flask import Blueprint, Response, jsonify, request

from lucid_hub import gcpause
from lucid_hub.errors import InputError, NotFoundError, PreconditionFailedError, UnsupportedMediaTypeError
from lucid_hub.mediatypes import representation_tag
from lucid_hub.publish import Precondition, Unchanged
from lucid_hub.rdf.msg import GraphMsgs, split_graphs
from lucid_hub.rdf.patch import Patch
from lucid_hub.rdf.statements import ntriples, statement_quads
from lucid_hub.rdf.syntax import ParseBudget, serialize
from lucid_hub.store.layout import check_no_skolem
from lucid_hub.streams.ldes import LDNS, LDP, LH, Urls
from lucid_hub.web.authz import author, may_read, require_graph
from lucid_hub.web.http import (
    RDF_MEDIA_TYPES,
    body_quads,
    discovery_links,
    entity_tags,
    etag,
    graph_param,
    graph_url,
    message,
    metadata,
    negotiate,
    patch_url,
    request_uri,
    runtime,
)

blueprint = Blueprint("graphs", __name__)
OUTPUT_TYPES = ["text/turtle", "application/trig", "application/n-quads", "application/n-triples",
                "application/ld+json"]
# Link relation of a change's answer to the patch that made it (the patch is not the graph).
PATCH_REL = "urn:lucid-hub:ns:patch"
# Direct identification: a graph whose IRI is a URL under this prefix of the hub's own.
DIRECT = "/graphs/<path:_path>"


def _graph() -> str:
    """The graph the request identifies: `?graph=IRI` (indirect), or the request's own URL
    (direct identification, GSP §4.1: its path under /graphs/, as the client sent it)."""
    if "default" in request.args:
        raise InputError("this hub has no default graph: every graph is named (use ?graph=IRI; "
                         "docs/http-api.md)")
    if request.view_args and "_path" in request.view_args:
        if "graph" in request.args:
            raise InputError("a graph's own URL names it: send no ?graph= with it")
        return request_uri().split("?", 1)[0]
    return graph_param()


def _writable(graph: str) -> str:
    require_graph(graph, "write")
    return graph


def _existing(graph: str) -> None:
    """404 for a graph deleted from the Graph Store (its history stays readable)."""
    if runtime().archive.deleted(graph):
        history = f"{runtime().settings.public_url}/patches?graph={quote(graph, safe='')}"
        raise NotFoundError(f"<{graph}> was deleted; its history stays at {history}, and a PUT or POST makes it "
                            "again")


def _read(**_direct: str) -> Response:
    graph = _graph()
    may_read(graph)
    asked = request.args.get("version")
    if asked is None:
        _existing(graph)
    version, statements = runtime().publisher.content(graph, asked)
    media_type = negotiate(OUTPUT_TYPES, "text/turtle")
    # N-Triples, the line-based form clients diff and catch up with, carries the version itself
    tag = representation_tag(version or "", media_type, "application/n-triples")
    urls = Urls(runtime().settings.public_url, graph)
    # Beside WebSub's discovery: where continuous queries over the graph are made (docs/queries.md),
    # its event stream, the document of all its channels, and its LDN inbox (docs/streams.md).
    links = [discovery_links(graph), f'<{runtime().settings.public_url}/subscriptions>; rel="{LH}subscriptions"',
             f'<{urls.stream}>; rel="{LH}eventStream"', f'<{urls.channels}>; rel="{LH}channels"',
             f'<{urls.inbox}>; rel="{LDP}inbox"', f'<{urls.input}>; rel="{LDNS}input"',
             f'<{urls.output}>; rel="{LDNS}output"']
    headers = {"ETag": etag(tag), "Link": ", ".join(links), "Vary": "Accept"}
    match = entity_tags("If-Match")  # "this version and no other" (RFC 9110 13.1.1): never another one
    if match is not None and not match.versions().match_strong(version):
        raise PreconditionFailedError(f"<{graph}> is at version {version or '(none)'} (entity tag {etag(tag)} in "
                                      f"{media_type}), which the request's If-Match does not name", version)
    none_match = entity_tags("If-None-Match")  # the cached representation: this one, not another syntax's
    if none_match is not None and none_match.match_weak(tag):
        return Response(status=304, headers=headers)
    return Response(render(graph, statements, media_type), mimetype=media_type, headers=headers)


def render(graph: str, statements: list[str], media_type: str) -> bytes:
    """Statements of one graph in the negotiated syntax: the graph's triples, in quad
    syntaxes in the default graph (GSP §5.2: the representation is the graph; generic
    clients read a document's default graph)."""
    if media_type in ("application/n-triples", "application/n-quads"):
        return ntriples(statements).encode()
    return serialize(statement_quads(statements, None), RDF_MEDIA_TYPES[media_type])


def _body_msgs(graph: str) -> GraphMsgs:
    if (request.mimetype or "").startswith("multipart/"):
        raise UnsupportedMediaTypeError("multipart bodies are not accepted: send one RDF document per request "
                                        "(docs/http-api.md)")
    with gcpause.paused_for_bytes(request.content_length or 0):  # a large body: collection paused while read
        budget = ParseBudget.for_body(runtime().settings.max_body_bytes)
        builders = split_graphs(body_quads(graph), graph, "request body", budget=budget)
        other = sorted(set(builders) - {graph})
        if other:
            raise InputError(f"request body holds graph <{other[0]}>; /graphs?graph=<{graph}> takes its triples only")
        builder = builders.get(graph)
        msgs = builder.build(runtime().canonicalizer) if builder else GraphMsgs()
    check_no_skolem(msgs.ground, "request body")
    check_no_skolem(msgs.blank, "request body")
    return msgs


def _precondition() -> Precondition | None:
    """If-Match (strong comparison) and If-None-Match (weak) on the graph's version; a tag
    of any representation of a version names that version."""
    match, none_match = entity_tags("If-Match"), entity_tags("If-None-Match")
    if match is None and none_match is None:
        return None
    match = match.versions() if match is not None else None
    none_match = none_match.versions() if none_match is not None else None

    def holds(head: str | None) -> bool:
        return ((match is None or match.match_strong(head))
                and (none_match is None or not none_match.match_weak(head)))
    return holds


def _result(graph: str, patch: Patch | None, unchanged: Unchanged, *, created: bool = False,
            location: str | None = None) -> Response:
    version = patch.id if patch else unchanged.version
    payload = {"graph": graph, "version": version, "patch": patch.id if patch else None,
               "removed": len(patch.removed) if patch else 0, "added": len(patch.added) if patch else 0}
    response = jsonify(payload)
    response.status_code = 201 if created or (patch is not None and patch.prev is None) else 200
    response.headers["ETag"] = etag(version or "")
    links = [discovery_links(graph)]
    if patch:
        links.append(f'<{patch_url(patch.id)}>; rel="{PATCH_REL}"')
    if response.status_code == 201:
        response.headers["Location"] = location or graph_url(graph)  # the graph's resource, not the patch
    response.headers["Link"] = ", ".join(links)
    return response


def _write(graph: str, change: Callable[[GraphMsgs, Unchanged], Patch | None], *, minted: bool = False) -> Response:
    """A PUT or POST: the change, and the graph back in the Graph Store if it was deleted
    (a write recreates it, with or without a new patch)."""
    archive = runtime().archive
    # A deleted graph holds no triple: a graph the store holds triples of was not deleted,
    # and the archive's word (a database read) is only asked of an empty one. (A replica whose
    # store lags behind another's DELETE answers 200 instead of 201; the write itself is
    # computed on the caught-up graph.)
    was_deleted = not runtime().publisher.store.read.holds_any(graph) and archive.deleted(graph)
    new = _body_msgs(graph)
    unchanged = Unchanged()
    patch = change(new, unchanged)
    if minted and patch is None:
        raise InputError("a new graph needs at least one triple")
    if was_deleted and patch is None:
        archive.restore(graph)
    return _result(graph, patch, unchanged, created=minted or was_deleted, location=graph if minted else None)


def _replace(**_direct: str) -> Response:
    graph = _writable(_graph())
    return _write(graph, lambda new, unchanged: runtime().publisher.replace(
        graph, new, author=author(), message=message(), if_match=_precondition(), unchanged=unchanged,
        metadata=metadata()))


def _merge(**_direct: str) -> Response:
    minted = not request.view_args and "graph" not in request.args and "default" not in request.args
    # GSP §5.5: without a graph, a new one, named by the hub: its IRI is its own URL here
    graph = _writable(f"{runtime().settings.public_url}/graphs/{uuid.uuid4()}" if minted else _graph())
    return _write(graph, lambda new, unchanged: runtime().publisher.merge(
        graph, new, author=author(), message=message(), if_match=_precondition(), unchanged=unchanged,
        metadata=metadata()), minted=minted)


def _delete(**_direct: str) -> Response:
    graph = _writable(_graph())
    _existing(graph)
    unchanged = Unchanged()
    patch = runtime().publisher.drop(graph, author=author(), message=message(), if_match=_precondition(),
                                     unchanged=unchanged, metadata=metadata())
    runtime().archive.mark_deleted(graph, patch.id if patch else unchanged.version)
    return _result(graph, patch, unchanged)


# The views take the direct route's `_path` as a keyword (unused: `_graph` reads the request).
for _rule in ("/graphs", DIRECT):
    blueprint.add_url_rule(_rule, f"read{_rule}", _read, methods=["GET"])
    blueprint.add_url_rule(_rule, f"replace{_rule}", _replace, methods=["PUT"])
    blueprint.add_url_rule(_rule, f"merge{_rule}", _merge, methods=["POST"])
    blueprint.add_url_rule(_rule, f"delete{_rule}", _delete, methods=["DELETE"])
