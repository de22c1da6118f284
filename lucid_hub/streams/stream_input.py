"""Each graph's stream input (LDN for RDF streams, Calbimonte et al.: docs/streams.md, "Stream
input"): a sender POSTs a stream element, a timestamped named graph, and its triples become
a signed patch of the graph authored by the sender.

An element as the paper writes it (JSON-LD; TriG and N-Quads say the same):

    {"prov:generatedAtTime": "2017-07-22T05:00:00.000Z", "@id": "ex:Graph1",
     "@graph": [{"@id": "ex:humidityObservation", "ex:hasValue": 34.5}],
     "@context": {"prov": "http://www.w3.org/ns/prov#", "ex": "http://example.org#"}}

one named graph (the element), and in the default graph only statements about it, among
them exactly one `prov:generatedAtTime`. The element is kept in the graph's inbox as well (a
notification of kind `StreamElement` naming its patch), which is what makes a replay a
replay: the same body from the same sender to the same graph is refused with 409 and the
first patch's Location, and never makes a second patch.
"""

from __future__ import annotations

import hashlib
import json
import threading
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

import pyoxigraph as ox
from sqlalchemy import delete, select, update
from sqlalchemy.exc import IntegrityError

from lucid_hub import nesting
from lucid_hub.db.models import Notification
from lucid_hub.errors import InputError, UnsupportedMediaTypeError
from lucid_hub.rdf.canon import Canonicalizer
from lucid_hub.rdf.msg import GraphMsgs, split_graphs
from lucid_hub.rdf.syntax import ParseBudget, read_quads
from lucid_hub.store.layout import check_no_skolem
from lucid_hub.streams.activities import _local_contexts
from lucid_hub.streams.inbox import MAX_STATEMENTS, AlreadyReceived, Inbox

PROV_TIME = "http://www.w3.org/ns/prov#generatedAtTime"
LDNS = "http://w3id.org/rsp/ldn-s#"  # the paper's `input` and `output` terms (its context's base IRI)
KIND = "StreamElement"
_RESERVING = threading.Lock()  # one element at a time takes its digest in this process (the table's
# unique digest is the guard across processes)
FORMATS = {"application/ld+json": ox.RdfFormat.JSON_LD, "application/trig": ox.RdfFormat.TRIG,
           "application/n-quads": ox.RdfFormat.N_QUADS}


@dataclass(frozen=True)
class Element:
    """A stream element: its graph's IRI, when it was generated, its triples."""

    iri: str
    generated: datetime
    quads: list[ox.Quad]
    metadata: list[ox.Triple]


def parse_element(body: bytes, media_type: str, base: str, max_bytes: int) -> Element:
    """The element a body carries; 415 for a syntax not taken, 400 naming what is wrong."""
    fmt = FORMATS.get(media_type)
    if fmt is None:
        raise UnsupportedMediaTypeError(f"Content-Type {media_type or '(none)'} is not accepted for a stream "
                                        f"element; send one of {', '.join(FORMATS)}")
    if fmt == ox.RdfFormat.JSON_LD:
        body = json.dumps(_local_contexts(nesting.loads(body, "stream element"))).encode()
    budget = ParseBudget.for_body(max_bytes, "the stream element", "LUCID_INBOX_MAX_BYTES")
    quads = list(read_quads(body, fmt, base_iri=base, name=f"the stream element is not valid {media_type}",
                            budget=budget))
    if len(quads) > MAX_STATEMENTS:
        raise InputError(f"a stream element holds at most {MAX_STATEMENTS:,} statements")
    names = {q.graph_name for q in quads if not isinstance(q.graph_name, ox.DefaultGraph)}
    if len(names) != 1:
        raise InputError("a stream element is one named graph (a timestamped graph, with prov:generatedAtTime "
                         f"in the default graph); this body holds {len(names)}")
    name = names.pop()
    if not isinstance(name, ox.NamedNode):
        raise InputError("a stream element's graph is named by an IRI, not a blank node")
    metadata = [q.triple for q in quads if isinstance(q.graph_name, ox.DefaultGraph)]
    strays = [t for t in metadata if t.subject != name]
    if strays:
        raise InputError(f"the default graph holds statements about the element only; {strays[0].subject} is not "
                         f"<{name.value}>")
    times = [t.object for t in metadata if t.predicate.value == PROV_TIME]
    if len(times) != 1 or not isinstance(times[0], ox.Literal):
        raise InputError(f"a stream element is a timestamped graph: give <{name.value}> exactly one "
                         "prov:generatedAtTime")
    try:
        generated = datetime.fromisoformat(times[0].value.replace("Z", "+00:00"))
    except ValueError:
        raise InputError(f"prov:generatedAtTime {times[0].value[:60]!r} is not a date and time") from None
    element = [q for q in quads if q.graph_name == name]
    if not element:
        raise InputError(f"the stream element <{name.value}> holds no triple")
    return Element(name.value, generated if generated.tzinfo else generated.replace(tzinfo=UTC), element, metadata)


def element_msgs(element: Element, graph: str, canonicalizer: Canonicalizer) -> GraphMsgs:
    """The element's triples as the graph's MSGs (its blank nodes new nodes of the graph)."""
    target = ox.NamedNode(graph)
    builders = split_graphs((ox.Quad(q.subject, q.predicate, q.object, target) for q in element.quads), graph,
                            "stream element")
    msgs = builders[graph].build(canonicalizer)
    check_no_skolem(msgs.ground, "stream element")
    check_no_skolem(msgs.blank, "stream element")
    return msgs


class StreamInput:
    """Receives stream elements: records each in the graph's inbox (the replay guard) and
    publishes it as the sender's patch."""

    def __init__(self, inbox: Inbox) -> None:
        self.inbox = inbox

    def digest(self, graph: str, sender: str, body: bytes) -> str:
        return hashlib.sha256(b"\n".join([b"stream-element", graph.encode(), sender.encode(), body])).hexdigest()

    def seen(self, digest: str) -> str | None:
        """The patch URL (or the notification's) the same element made before."""
        with self.inbox.db.session() as session:
            row = session.scalars(select(Notification).where(Notification.digest == digest)).one_or_none()
            return None if row is None else (row.objects or self.inbox.url_of(row.id))

    def reserve(self, graph: str, sender: str, endpoint_id: str, digest: str, element: Element) -> str:
        """Record the element in the graph's inbox before its patch is made; its id.
        AlreadyReceived when the same body came first."""
        ident = str(uuid.uuid4())
        lines = [f"{q.triple} ." for q in element.quads] + [f"{t} ." for t in element.metadata]
        row = Notification(id=ident, graph=graph, sender=sender, endpoint_id=endpoint_id, digest=digest, kinds=KIND,
                           objects="", body="\n".join(lines) + "\n", created_at=datetime.now(UTC))
        with _RESERVING:
            seen = self.seen(digest)
            if seen is not None:
                raise AlreadyReceived(f"this stream element was received before: {seen}", seen)
            try:
                with self.inbox.db.session() as session:
                    session.add(row)
            except IntegrityError:
                seen = self.seen(digest) or ""
                raise AlreadyReceived(f"this stream element was received before: {seen}", seen) from None
        return ident

    def made(self, ident: str, location: str) -> None:
        """The element's patch (or the graph, when it added nothing new) is at `location`."""
        with self.inbox.db.session() as session:
            session.execute(update(Notification).where(Notification.id == ident).values(objects=location))
        self.inbox.wake()

    def failed(self, ident: str) -> None:
        """Its patch was not made: the element is forgotten, and may be sent again."""
        with self.inbox.db.session() as session:
            session.execute(delete(Notification).where(Notification.id == ident))
