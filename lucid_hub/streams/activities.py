"""What an inbox accepts: a notification's body parsed as RDF, with the ActivityStreams 2.0
context known here, and its one constraint (docs/streams.md, "Inboxes").

JSON-LD notifications name their context by URL, almost always ActivityStreams 2.0's. The
hub fetches no document from elsewhere (a receiver that dereferences what a sender names is
a server-side request forgery waiting to happen), so the AS 2.0 context is written here from
the vocabulary (https://www.w3.org/TR/activitystreams-vocabulary/): every term maps into
the namespace, IRI-valued properties are `@id`-typed, times are xsd:dateTime. Any other
remote context is refused with a 400 saying to inline it.
"""

from __future__ import annotations

import json
from typing import Any

import pyoxigraph as ox

from lucid_hub import nesting
from lucid_hub.errors import InputError, UnsupportedMediaTypeError
from lucid_hub.rdf.syntax import ParseBudget, read_quads

# The namespace the AS 2.0 context maps to, and the one its specification writes; senders
# use both, and so does this hub's own stream vocabulary (https).
AS = "http://www.w3.org/ns/activitystreams#"
AS_HTTPS = "https://www.w3.org/ns/activitystreams#"
LDP = "http://www.w3.org/ns/ldp#"
XSD = "http://www.w3.org/2001/XMLSchema#"
RDF_TYPE = "http://www.w3.org/1999/02/22-rdf-syntax-ns#type"
CONTEXT_URLS = frozenset({"https://www.w3.org/ns/activitystreams", "http://www.w3.org/ns/activitystreams",
                          "https://www.w3.org/ns/activitystreams.jsonld",
                          "http://www.w3.org/ns/activitystreams.jsonld"})

# What a notification may be sent as (Accept-Post), and how each is read.
FORMATS = {
    "application/ld+json": ox.RdfFormat.JSON_LD,
    "text/turtle": ox.RdfFormat.TURTLE,
    "application/n-triples": ox.RdfFormat.N_TRIPLES,
    "application/rdf+xml": ox.RdfFormat.RDF_XML,
}

_TYPES = """Accept Activity IntransitiveActivity Add Announce Application Arrive Article Audio Block
Collection CollectionPage Relationship Create Delete Dislike Document Event Follow Flag Group Ignore
Image Invite Join Leave Like Link Mention Note Object Offer OrderedCollection OrderedCollectionPage
Organization Page Person Place Profile Question Reject Remove Service TentativeAccept TentativeReject
Tombstone Undo Update Video View Listen Read Move Travel IsFollowing IsFollowedBy IsContact IsMember"""
_IRI_VALUED = """subject relationship actor attributedTo attachment bcc bto cc context current first generator
icon image inReplyTo items instrument last location next object oneOf anyOf origin prev preview replies
result audience partOf tag target to url href describes formerType outbox following followers streams
endpoints uploadMedia proxyUrl"""
_PLAIN = "content name hreflang mediaType rel summary units preferredUsername source"
_TYPED = {"closed": "dateTime", "deleted": "dateTime", "endTime": "dateTime", "published": "dateTime",
          "startTime": "dateTime", "updated": "dateTime", "duration": "duration", "accuracy": "float",
          "altitude": "float", "latitude": "float", "longitude": "float", "radius": "float",
          "height": "nonNegativeInteger", "width": "nonNegativeInteger", "startIndex": "nonNegativeInteger",
          "totalItems": "nonNegativeInteger"}


def activity_context() -> dict[str, Any]:
    """The ActivityStreams 2.0 JSON-LD context (its term definitions; see the module doc)."""
    terms: dict[str, Any] = {"@vocab": "_:", "xsd": XSD, "as": AS, "ldp": LDP, "id": "@id", "type": "@type"}
    terms.update({name: f"as:{name}" for name in _TYPES.split()})
    terms.update({name: f"as:{name}" for name in _PLAIN.split()})
    terms.update({name: {"@id": f"as:{name}", "@type": "@id"} for name in _IRI_VALUED.split()})
    terms.update({name: {"@id": f"as:{name}", "@type": f"xsd:{kind}"} for name, kind in _TYPED.items()})
    terms["orderedItems"] = {"@id": "as:items", "@type": "@id", "@container": "@list"}
    terms["inbox"] = {"@id": "ldp:inbox", "@type": "@id"}
    for name in ("content", "name", "summary"):
        terms[f"{name}Map"] = {"@id": f"as:{name}", "@container": "@language"}
    return terms


_CONTEXT = activity_context()


def _local_contexts(node: Any) -> Any:
    """The JSON-LD document with every reference to the AS 2.0 context replaced by the
    context itself; 400 for any other remote context."""
    if isinstance(node, list):
        return [_local_contexts(item) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "@context":
            out[key] = [_context(v) for v in value] if isinstance(value, list) else _context(value)
        else:
            out[key] = _local_contexts(value)
    return out


def _context(value: Any) -> Any:
    if isinstance(value, str):
        if value.rstrip("#/") in CONTEXT_URLS:
            return _CONTEXT
        raise InputError(f"the JSON-LD context {value[:200]!r} is not fetched by this hub: inline it, or use "
                         "ActivityStreams 2.0's (https://www.w3.org/ns/activitystreams)")
    return _local_contexts(value)


def parse_notification(body: bytes, media_type: str, base: str, max_statements: int,
                       max_bytes: int) -> list[ox.Triple]:
    """A notification's statements; 415 for a syntax not accepted, 400 for a body that is not
    one RDF graph of at most `max_statements` statements, 413 for one that parses into more
    than a notification of `max_bytes` may (`ParseBudget.for_body`)."""
    fmt = FORMATS.get(media_type)
    if fmt is None:
        raise UnsupportedMediaTypeError(f"Content-Type {media_type or '(none)'} is not accepted; send one of "
                                        f"{', '.join(FORMATS)}")
    if fmt == ox.RdfFormat.JSON_LD:
        document = nesting.loads(body, "notification")
        body = json.dumps(_local_contexts(document)).encode()
    triples: list[ox.Triple] = []
    budget = ParseBudget.for_body(max_bytes, "the notification", "LUCID_INBOX_MAX_BYTES")
    for quad in read_quads(body, fmt, base_iri=base, name=f"the notification is not valid {media_type}",
                           budget=budget):
        if not isinstance(quad.graph_name, ox.DefaultGraph):
            raise InputError("a notification is one graph: named graphs are not accepted")
        triples.append(quad.triple)
        if len(triples) > max_statements:
            raise InputError(f"a notification holds at most {max_statements:,} statements")
    if not triples:
        raise InputError("the notification is empty")
    return triples


def activities(triples: list[ox.Triple]) -> list[ox.NamedNode | ox.BlankNode]:
    """The activities a notification holds: nodes typed in the ActivityStreams namespace with
    both an actor and an object (the inbox's constraint: anything else is refused)."""
    typed = {t.subject for t in triples if t.predicate.value == RDF_TYPE and isinstance(t.object, ox.NamedNode)
             and t.object.value.startswith((AS, AS_HTTPS))}
    having: dict[str, set[Any]] = {"actor": set(), "object": set()}
    for t in triples:
        for name, found in having.items():
            if t.predicate.value in (AS + name, AS_HTTPS + name):
                found.add(t.subject)
    return sorted((s for s in typed if s in having["actor"] and s in having["object"]), key=str)  # type: ignore[misc]
