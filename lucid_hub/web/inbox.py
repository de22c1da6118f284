"""Linked Data Notifications (W3C LDN) receiver: each graph's inbox `/inbox?graph=IRI`, its
notifications `/inbox/notifications/{id}`, its push channel `/inbox/events?graph=IRI` and
the constraints notifications meet `/inbox/constraints` (docs/streams.md, "Inboxes")."""

from __future__ import annotations

import json

from flask import Blueprint, Response, g, request

from lucid_hub.auth.tokens import Principal
from lucid_hub.errors import AuthenticationError, InputError, InputTooLargeError, NotFoundError
from lucid_hub.policy.decisions import Action
from lucid_hub.resources import graph_url, inbox_url, input_url, notification_url, patch_url
from lucid_hub.streams.activities import FORMATS
from lucid_hub.streams.inbox import LIST_MAX, AlreadyReceived, Received
from lucid_hub.streams.ldes import LDP, TYPE, Document, iri
from lucid_hub.streams.stream_input import FORMATS as INPUT_FORMATS
from lucid_hub.streams.stream_input import StreamInput, element_msgs, parse_element
from lucid_hub.web import push
from lucid_hub.web.authz import anonymous, author, principal, read_lapse, require_graph
from lucid_hub.web.http import graph_param, negotiate, request_uri, runtime

blueprint = Blueprint("inbox", __name__)
ACCEPT_POST = ", ".join(FORMATS)
# JSON-LD first: an LDN consumer that says nothing (or */*) gets JSON-LD (LDN §4.3).
ANSWER_TYPES = ["application/ld+json", "text/turtle", "application/n-triples", "application/trig",
                "application/n-quads"]
CONSTRAINTS = """@prefix sh: <http://www.w3.org/ns/shacl#> .
@prefix as: <http://www.w3.org/ns/activitystreams#> .
@prefix rdfs: <http://www.w3.org/2000/01/rdf-schema#> .

<#notification> a sh:NodeShape ;
    rdfs:comment \"\"\"What a lucid-hub inbox accepts (docs/streams.md, "Inboxes"): one RDF graph
(JSON-LD, Turtle, N-Triples or RDF/XML) of at most {max_bytes} bytes and 10,000 statements,
holding at least one ActivityStreams 2.0 activity (a node typed in the AS namespace, http or
https) with an as:actor and an as:object. JSON-LD may name the AS 2.0 context by its URL; any
other context must be inlined (the hub fetches nothing). The sender is authenticated (a bearer
token), may read the graph, and sends at most {per_minute} notifications a minute; the same body
sent again by the same sender is refused with 409 and the first copy's Location.\"\"\" ;
    sh:property [ sh:path as:actor ; sh:minCount 1 ] , [ sh:path as:object ; sh:minCount 1 ] .
"""


def _links() -> str:
    base = runtime().settings.public_url
    return ", ".join([f'<{LDP}BasicContainer>; rel="type"', f'<{LDP}Container>; rel="type"',
                      f'<{LDP}RDFSource>; rel="type"', f'<{LDP}Resource>; rel="type"',
                      f'<{base}/inbox/constraints>; rel="{LDP}constrainedBy"'])


def _inbox_headers() -> dict[str, str]:
    return {"Link": _links(), "Accept-Post": ACCEPT_POST, "Allow": "GET, HEAD, OPTIONS, POST"}


def _reader(graph: str) -> tuple[Principal, str | None]:
    """Who reads the inbox, and whose notifications it sees: a writer of the graph all (None),
    any other reader its own. Without credentials: 401 (notifications are never public)."""
    g.basic_challenge = True
    if anonymous():
        raise AuthenticationError("an inbox is read with credentials: a bearer token or HTTP Basic", error="")
    caller = require_graph(graph, "read")
    writer = "graphs:write" in caller.scopes and runtime().policies.allows(caller.party, graph, "write")
    return caller, None if writer else caller.account


def _document(subject: str, items: list[Received]) -> Document:
    out = [f"{iri(subject)} {TYPE} <{LDP}BasicContainer>", f"{iri(subject)} {TYPE} <{LDP}Container>"]
    base = runtime().settings.public_url
    out += [f"{iri(subject)} <{LDP}contains> {iri(notification_url(base, item.id))}" for item in items]
    return Document(out, [])


def _size() -> int:
    raw = request.args.get("size", "100")
    if not raw.isdigit() or not 1 <= int(raw) <= LIST_MAX:
        raise InputError(f"size must be a number of notifications from 1 to {LIST_MAX}")
    return int(raw)


def _position(name: str) -> int | None:
    raw = request.args.get(name)
    if raw is None:
        return None
    if not raw.isdigit() or len(raw) > 12:
        raise InputError(f"{name} must be a notification's position (from the listing's Link rel=next)")
    return int(raw)


@blueprint.route("/inbox", methods=["OPTIONS"])
def inbox_options() -> Response:
    """What the inbox takes (LDN senders ask before they post); no credentials needed."""
    graph_param()
    return Response(status=204, headers=_inbox_headers())


@blueprint.get("/inbox")
def inbox() -> Response:
    """The notifications the caller may see, newest first: `size=N` the latest N (default 100),
    `before=P` the ones before position P (the Link rel=next of a full listing)."""
    graph = graph_param()
    g.error_headers = _inbox_headers()
    _caller, sender = _reader(graph)
    size, before = _size(), _position("before")
    items = runtime().inbox.listing(graph, sender, size=size, before=before)
    media_type = negotiate(ANSWER_TYPES, "application/ld+json")
    headers = {**_inbox_headers(), "Vary": "Accept, Authorization", "Cache-Control": "private, no-cache"}
    if len(items) == size:
        older = f"{inbox_url(runtime().settings.public_url, graph)}&size={size}&before={items[-1].seq}"
        headers["Link"] += f', <{older}>; rel="next"'
    return Response(_document(request_uri(), items).render(media_type), mimetype=media_type, headers=headers)


def _posted(graph: str, action: Action, what: str) -> tuple[Principal, bytes]:
    """The caller, when it may `action` the graph (which exists), and the body it posted, of
    at most LUCID_INBOX_MAX_BYTES (413 before more is read)."""
    caller = require_graph(graph, action)
    if not runtime().archive.exists(graph):
        raise NotFoundError(f"no graph <{graph}> on this hub")
    limit = runtime().settings.inbox_max_bytes
    if (request.content_length or 0) > limit:
        raise InputTooLargeError(f"{what} is at most {limit:,} bytes (LUCID_INBOX_MAX_BYTES)")
    body = request.stream.read(limit + 1)
    if len(body) > limit:
        raise InputTooLargeError(f"{what} is at most {limit:,} bytes (LUCID_INBOX_MAX_BYTES)")
    return caller, body


@blueprint.post("/inbox")
def receive() -> Response:
    """A notification (LDN §4.2): 201 with its Location; 409 with the first copy's for a
    replay; 4xx with the constraints' link for a body the inbox does not take."""
    graph = graph_param()
    g.error_headers = _inbox_headers()
    caller, body = _posted(graph, "read", "a notification")
    hub = runtime()
    item = hub.inbox.receive(graph, caller.account, caller.endpoint_id, body, (request.mimetype or "").lower())
    url = notification_url(hub.settings.public_url, item.id)
    return Response(f"{url}\n", status=201, mimetype="text/plain", headers={**_inbox_headers(), "Location": url})


def _input_headers() -> dict[str, str]:
    return {"Accept-Post": ", ".join(INPUT_FORMATS), "Allow": "OPTIONS, POST",
            "Link": f'<{runtime().settings.public_url}/inbox/constraints>; rel="{LDP}constrainedBy"'}


@blueprint.route("/streams/input", methods=["OPTIONS"])
def stream_input_options() -> Response:
    """What a graph's stream input takes (write-only: Allow OPTIONS, POST)."""
    graph_param()
    return Response(status=204, headers=_input_headers())


@blueprint.post("/streams/input")
def stream_input() -> Response:
    """A stream element (a timestamped named graph): its triples become a signed patch of the
    graph authored by the sender, who may write the graph. 201 with the patch's Location; 409
    with it for the same element sent again."""
    graph = graph_param()
    g.error_headers = _input_headers()
    caller, body = _posted(graph, "write", "a stream element")
    hub = runtime()
    limit = hub.settings.inbox_max_bytes
    receiver = StreamInput(hub.inbox)
    digest = receiver.digest(graph, caller.account, body)
    seen = receiver.seen(digest)
    if seen is not None:
        raise AlreadyReceived(f"this stream element was received before: {seen}", seen)
    hub.inbox.limiter.take(caller.account)
    base = input_url(hub.settings.public_url, graph)
    element = parse_element(body, (request.mimetype or "").lower(), base, limit)
    msgs = element_msgs(element, graph, hub.canonicalizer)
    ident = receiver.reserve(graph, caller.account, caller.endpoint_id, digest, element)
    try:
        patch = hub.publisher.merge(graph, msgs, author=author(),
                                    message=f"stream element <{element.iri}> generated at "
                                            f"{element.generated.isoformat()}")
    except BaseException:
        receiver.failed(ident)
        raise
    location = patch_url(hub.settings.public_url, patch.id) if patch else graph_url(hub.settings.public_url, graph)
    receiver.made(ident, location)
    answer = Response(json.dumps({"graph": graph, "element": element.iri, "generatedAtTime":
                                  element.generated.isoformat(), "patch": patch.id if patch else None,
                                  "added": len(patch.added) if patch else 0}),
                      status=201 if patch else 200, mimetype="application/json",
                      headers={**_input_headers(), "Location": location})
    return answer


@blueprint.get("/inbox/notifications/<ident>")
def notification(ident: str) -> Response:
    """One notification, in the syntax asked for (JSON-LD by default): for the graph's writers
    and for its sender; 404 for anyone else (its existence is not theirs to learn)."""
    g.basic_challenge = True
    if anonymous():
        raise AuthenticationError("a notification is read with credentials: a bearer token or HTTP Basic", error="")
    caller = principal()
    item = runtime().inbox.get(ident)
    hub = runtime()
    writer = "graphs:write" in caller.scopes and hub.policies.allows(caller.party, item.graph, "write")
    if not writer and item.sender != caller.account:
        raise NotFoundError("no such notification")
    if not writer:  # its sender, while it may still read the graph (access is decided at each read)
        require_graph(item.graph, "read")
    media_type = negotiate(ANSWER_TYPES, "application/ld+json")
    lines = [line[:-2] for line in item.body.split("\n") if line.endswith(" .")]  # (not splitlines: U+2028)
    return Response(Document(lines, []).render(media_type), mimetype=media_type,
                    headers={"Link": f'<{LDP}RDFSource>; rel="type", <{LDP}Resource>; rel="type"',
                             "Vary": "Accept, Authorization", "Cache-Control": "private, max-age=3600",
                             "Allow": "GET, HEAD, OPTIONS"})


@blueprint.get("/inbox/events")
def inbox_events() -> Response:
    """The inbox's notifications as Server-Sent Events as they arrive (Calbimonte's push):
    an event `notification` each, id = its position; `Last-Event-ID` (or `after=`) resumes,
    without one: from now. A comment every 15 s keeps proxies from closing the stream."""
    graph = graph_param()
    _caller, sender = _reader(graph)
    raw = request.headers.get("Last-Event-ID") or request.args.get("after")
    hub = runtime()
    if raw is None or raw == "":
        after = hub.inbox.last_seq(graph)
    elif raw.isdigit() and len(raw) <= 12:
        after = int(raw)
    else:
        raise InputError("Last-Event-ID (or after=) must be a notification's position: 0 or more")
    base, bodies = hub.settings.public_url, request.args.get("body") in ("1", "true")
    stream = hub.stream
    lapsed = read_lapse(graph)

    position = after

    def poll() -> tuple[list[bytes], bool]:
        nonlocal position
        if stream.ended:
            return [], True
        reason = lapsed()
        if reason is not None:
            return [push.sse("ended", json.dumps({"reason": reason}))], True
        found = hub.inbox.after(graph, sender, position)
        events = []
        for item in found:
            data = {"id": notification_url(base, item.id), "graph": item.graph, "sender": item.sender,
                    "types": list(item.kinds), "objects": list(item.objects),
                    "received": item.created_at.isoformat().replace("+00:00", "Z")}
            if bodies:
                data["statements"] = item.body
            events.append(push.sse("notification", json.dumps(data), item.seq))
            position = item.seq
        return events, False

    return push.answer(push.Channel(b": lucid-hub inbox\n\n", poll, hub.inbox))


@blueprint.get("/inbox/constraints")
def constraints() -> Response:
    """What notifications must meet (the inbox's ldp:constrainedBy): a SHACL shape with the
    rules in words."""
    settings = runtime().settings
    text = CONSTRAINTS.replace("{max_bytes}", f"{settings.inbox_max_bytes:,}").replace(
        "{per_minute}", str(settings.inbox_rate))
    return Response(text, mimetype="text/turtle", headers={"Cache-Control": "public, max-age=3600"})

