"""SPARQL 1.1 Graph Store HTTP Protocol on owned graphs: `/graphs?graph=IRI`.

Where the hub deviates from the protocol (docs/http-api.md): it has no default graph, so
`?default` is refused with a reason; multipart bodies are refused (one RDF document per
request); `POST /graphs` without `graph` creates a graph under a new IRI the hub mints.
"""

from __future__ import annotations

import uuid

from flask import Blueprint, Response, jsonify, request

from lucid_hub import gcpause
from lucid_hub.errors import InputError, PreconditionFailedError, UnsupportedMediaTypeError
from lucid_hub.publish import Precondition, Unchanged
from lucid_hub.rdf.msg import GraphMsgs, split_graphs
from lucid_hub.rdf.patch import Patch
from lucid_hub.rdf.statements import ntriples, statement_quads
from lucid_hub.rdf.syntax import ParseBudget, serialize
from lucid_hub.store.graphs import check_no_skolem
from lucid_hub.streams.ldes import LDP, LH, Urls
from lucid_hub.web.authz import author, authorized_graph, readable_graph, require_graph
from lucid_hub.web.http import (
    RDF_MEDIA_TYPES,
    body_quads,
    discovery_links,
    entity_tags,
    etag,
    graph_url,
    message,
    negotiate,
    patch_url,
    runtime,
)

blueprint = Blueprint("graphs", __name__)
OUTPUT_TYPES = ["text/turtle", "application/trig", "application/n-quads", "application/n-triples",
                "application/ld+json"]
# Link relation of a change's answer to the patch that made it (the patch is not the graph).
PATCH_REL = "urn:lucid-hub:ns:patch"


def _no_default_graph() -> None:
    if "default" in request.args:
        raise InputError("this hub has no default graph: every graph is named (use ?graph=IRI; "
                         "docs/http-api.md)")


@blueprint.get("/graphs")
def get_graph() -> Response:
    _no_default_graph()
    graph = readable_graph()
    version, statements = runtime().publisher.content(graph, request.args.get("version"))
    media_type = negotiate(OUTPUT_TYPES, "text/turtle")
    urls = Urls(runtime().settings.public_url, graph)
    # Beside WebSub's discovery: where continuous queries over the graph are made (docs/queries.md),
    # its event stream, the document of all its channels, and its LDN inbox (docs/streams.md).
    links = [discovery_links(graph), f'<{runtime().settings.public_url}/subscriptions>; rel="{LH}subscriptions"',
             f'<{urls.stream}>; rel="{LH}eventStream"', f'<{urls.channels}>; rel="{LH}channels"',
             f'<{urls.inbox}>; rel="{LDP}inbox"']
    headers = {"ETag": etag(version), "Link": ", ".join(links), "Vary": "Accept"}
    match = entity_tags("If-Match")  # "this version and no other" (RFC 9110 13.1.1): never another one
    if match is not None and not match.match_strong(version):
        raise PreconditionFailedError(f"<{graph}> is at version {version or '(none)'}, which the request's "
                                      "If-Match does not name", version)
    none_match = entity_tags("If-None-Match")
    if none_match is not None and none_match.match_weak(version):
        return Response(status=304, headers=headers)
    body = render(graph, statements, media_type)
    if media_type in ("application/trig", "application/n-quads"):  # the inbox "in its RDF" too (LDN §3):
        # in the default graph, beside the graph's own triples (in their named graph), never among them
        body += f"<{graph_url(graph)}> <{LDP}inbox> <{urls.inbox}> .\n".encode()
    return Response(body, mimetype=media_type, headers=headers)


def render(graph: str, statements: list[str], media_type: str) -> bytes:
    """Statements of one graph in the negotiated syntax (triples, or quads in the graph)."""
    if media_type == "application/n-triples":
        return ntriples(statements).encode()
    return serialize(statement_quads(statements, graph), RDF_MEDIA_TYPES[media_type])


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
    """If-Match (strong comparison) and If-None-Match (weak) on the graph's version."""
    match, none_match = entity_tags("If-Match"), entity_tags("If-None-Match")
    if match is None and none_match is None:
        return None

    def holds(head: str | None) -> bool:
        return ((match is None or match.match_strong(head))
                and (none_match is None or not none_match.match_weak(head)))
    return holds


def _result(graph: str, patch: Patch | None, unchanged: Unchanged, *, minted: bool = False) -> Response:
    created = patch is not None and patch.prev is None
    version = patch.id if patch else unchanged.version
    payload = {"graph": graph, "version": version, "patch": patch.id if patch else None,
               "removed": len(patch.removed) if patch else 0, "added": len(patch.added) if patch else 0}
    response = jsonify(payload)
    response.status_code = 201 if created or minted else 200
    response.headers["ETag"] = etag(version)
    links = [discovery_links(graph)]
    if patch:
        links.append(f'<{patch_url(patch.id)}>; rel="{PATCH_REL}"')
    if response.status_code == 201:
        response.headers["Location"] = graph_url(graph)  # the graph's resource, not the patch
    response.headers["Link"] = ", ".join(links)
    return response


@blueprint.put("/graphs")
def put_graph() -> Response:
    _no_default_graph()
    graph = authorized_graph("write")
    new = _body_msgs(graph)
    unchanged = Unchanged()
    patch = runtime().publisher.replace(graph, new, author=author(), message=message(), if_match=_precondition(),
                                        unchanged=unchanged)
    return _result(graph, patch, unchanged)


@blueprint.post("/graphs")
def post_graph() -> Response:
    _no_default_graph()
    if "graph" not in request.args:  # GSP §5.5: a new graph, named by the hub
        graph = f"{runtime().settings.public_url}/graphs/{uuid.uuid4()}"
        require_graph(graph, "write")
        minted = True
    else:
        graph = authorized_graph("write")
        minted = False
    new = _body_msgs(graph)
    unchanged = Unchanged()
    patch = runtime().publisher.merge(graph, new, author=author(), message=message(), if_match=_precondition(),
                                      unchanged=unchanged)
    if minted and patch is None:
        raise InputError("a new graph needs at least one triple")
    return _result(graph, patch, unchanged, minted=minted)


@blueprint.delete("/graphs")
def delete_graph() -> Response:
    _no_default_graph()
    graph = authorized_graph("write")
    unchanged = Unchanged()
    patch = runtime().publisher.drop(graph, author=author(), message=message(), if_match=_precondition(),
                                     unchanged=unchanged)
    return _result(graph, patch, unchanged)
