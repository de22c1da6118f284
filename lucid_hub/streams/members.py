"""A graph's history as version objects of its entities: the members of its event stream.

A patch changes MSGs (docs/patch-format.md); each MSG belongs to one *entity*: the smallest
IRI among its subjects, so an entity's blank-node descriptions stay with it. An MSG with no
IRI subject (a structure of blank nodes only) is an entity of its own, named
`urn:lucid-hub:msg:<hash>:<occurrence>`. After each patch, every entity it touched gets a
version: `create` when the entity had no triples before, `delete` when it has none after,
`update` otherwise, carrying the entity's whole state (its MSGs, blank nodes labelled as
format-2 patches label them).

Members are numbered in stream order (chain order, then entity IRI within a patch); a page
of the stream is a fixed range of that numbering, so a full page never changes. Timestamps
are the patches' creation times, never decreasing along the chain (a later patch with an
earlier clock reading takes its predecessor's time): LDES requires that of the timestamp path.

Built in memory from the archive, incrementally, per graph (`StreamIndex`).
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime

from lucid_hub.archive import Archive
from lucid_hub.errors import NotFoundError
from lucid_hub.rdf.apply import GraphReplica
from lucid_hub.rdf.canon import Canonicalizer
from lucid_hub.rdf.metadata import Metadata, from_header_text
from lucid_hub.rdf.patch import format_created, parse_created
from lucid_hub.rdf.rdfpatch import header_line, read_rdf_patch

READ_BATCH = 200
MSG_ENTITY = "urn:lucid-hub:msg:"


@dataclass(frozen=True)
class Activity:
    """The patch that made some versions: its provenance."""

    id: str
    prev: str | None
    seq: int
    author: str
    message: str
    created: str  # xsd:dateTime lexical form, UTC
    timestamp: str  # the members' timestamp: `created`, never before the previous patch's
    metadata: Metadata = ()  # what the publisher signed with the patch (format 3)


@dataclass(frozen=True)
class Member:
    index: int  # position in the stream, from 0
    activity: Activity
    entity: str
    kind: str  # "create" | "update" | "delete"
    statements: tuple[str, ...]  # the entity's state after the patch (N-Triples, no " .")

    @property
    def version_id(self) -> str:
        """The fragment that names this version under its patch's URL."""
        return "v-" + hashlib.sha256(self.entity.encode()).hexdigest()[:24]


def entity_of(statements: list[str], msg_hash: str, occurrence: int) -> str:
    """The entity an MSG instance belongs to: its smallest IRI subject, else itself."""
    subjects = [s[1:s.index(">")] for s in statements if s.startswith("<")]
    return min(subjects) if subjects else f"{MSG_ENTITY}{msg_hash}:{occurrence}"


@dataclass
class GraphStream:
    """One graph's members so far, and the state they were derived from."""

    graph: str
    canonicalizer: Canonicalizer
    members: list[Member] = field(default_factory=list)
    activities: list[Activity] = field(default_factory=list)  # by seq - 1
    starts: list[int] = field(default_factory=list)  # by seq - 1: the patch's first member
    seq: int = 0
    last_id: str | None = None
    entities: dict[str, dict[tuple[str, int], tuple[str, ...]]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.replica = GraphReplica([], self.canonicalizer)

    def extend(self, records: list[tuple[str, int, bytes]]) -> None:
        """Add the members of the next patches: (id, seq, body) in chain order."""
        for patch_id, seq, body in records:
            if seq != self.seq + 1:
                raise ValueError(f"stream of <{self.graph}> at {self.seq} cannot take patch {seq}")
            ground = ground_patch(body, self.graph)
            if ground is not None:
                prev, author, message, when, removed, added, metadata = ground
                change = self.replica.apply_ground(patch_id, prev, removed, added)
            else:
                patch = read_rdf_patch(body, self.canonicalizer)
                change = self.replica.apply(patch)
                prev, author, message, when = patch.prev, patch.author, patch.message, patch.created
                metadata = patch.metadata
            created = format_created(when)
            previous = self.activities[-1].timestamp if self.activities else created
            activity = Activity(patch_id, prev, seq, author, message, created, max(created, previous), metadata)
            touched: dict[str, bool] = {}  # entity -> it existed before the patch
            for msg_hash, occ, statements in change.gone:
                entity = entity_of(statements, msg_hash, occ)
                touched.setdefault(entity, True)
                held = self.entities[entity]
                del held[(msg_hash, occ)]
                if not held:
                    del self.entities[entity]
            for msg_hash, occ, statements in change.came:
                entity = entity_of(statements, msg_hash, occ)
                touched.setdefault(entity, entity in self.entities)
                self.entities.setdefault(entity, {})[(msg_hash, occ)] = tuple(statements)
            self.starts.append(len(self.members))
            for entity in sorted(touched):
                state = self.entities.get(entity)
                kind = "delete" if state is None else "update" if touched[entity] else "create"
                now = tuple(sorted(s for part in state.values() for s in part)) if state else ()
                self.members.append(Member(len(self.members), activity, entity, kind, now))
            self.activities.append(activity)
            self.seq, self.last_id = seq, patch_id


def ground_patch(body: bytes, graph: str) -> tuple[str | None, str, str, datetime, list[str], list[str],
                                                   Metadata] | None:
    """(prev, author, message, created, removed, added, metadata) of an archived patch whose rows are
    all ground statements of `graph`; None for any other (it takes the full reader). The
    archive is the hub's record of truth, verified when it was written: its rows are the
    canonical statements, so a row is its statement followed by the graph and " ." — sliced,
    not parsed (hand-written: no RDF parser is needed to cut a known suffix)."""
    if b"_:" in body:
        return None
    headers: dict[str, str] = {}
    metas: list[str] = []
    rows: dict[str, list[str]] = {"D": [], "A": []}
    suffix = f" <{graph}> ."
    for number, line in enumerate(body.decode("utf-8").split("\n"), start=1):
        if line.startswith(("D ", "A ")):
            if not line.endswith(suffix):
                return None
            rows[line[0]].append(line[2:-len(suffix)])
        elif line.startswith("H "):
            name, term = header_line(line, number)
            if name == "meta":
                metas.append(term.value)
            headers[name] = term.value
        elif line not in ("TX .", "TC .", ""):
            return None
    if headers.get("format") not in ("2", "3") or not {"author", "message", "created"} <= headers.keys():
        return None
    return (headers.get("prev"), headers["author"], headers["message"], parse_created(headers["created"]),
            rows["D"], rows["A"], tuple(from_header_text(text) for text in metas))


def made_by(stream: GraphStream, seq: int) -> list[Member]:
    """The members the patch at chain position `seq` made (none before the stream has it)."""
    if not 1 <= seq <= stream.seq:
        return []
    end = stream.starts[seq] if seq < len(stream.starts) else len(stream.members)
    return stream.members[stream.starts[seq - 1]:end]


class StreamIndex:
    """The members of the graphs whose streams were read, kept up with their archives; at
    most `capacity` graphs in memory (the least recently read go, and are rebuilt from the
    archive when read again)."""

    def __init__(self, archive: Archive, canonicalizer: Canonicalizer, capacity: int = 64) -> None:
        self.archive = archive
        self.canonicalizer = canonicalizer
        self.capacity = capacity
        self._streams: OrderedDict[str, GraphStream] = OrderedDict()
        self._lock = threading.Lock()

    def current(self, graph: str, upto: int | None = None) -> GraphStream:
        """The graph's stream, up to the archive's head — or, with `upto`, at least up to that
        chain position, without reading the archive when it is there already (what each
        push client needs for the patch it was just told of: a hundred of them must not
        each query the archive under the stream's lock). NotFoundError for an unknown graph."""
        if upto is not None:
            known = self._streams.get(graph)  # without the lock: push clients ask for every patch
            if known is not None and known.seq >= upto:
                return known
        with self._lock:
            stream = self._streams.get(graph)
            if stream is not None:
                self._streams.move_to_end(graph)
        if stream is None:
            if not self.archive.exists(graph):  # before it takes a place: no probing fills memory
                raise NotFoundError(f"unknown graph <{graph}>")
            with self._lock:
                stream = self._streams.setdefault(graph, GraphStream(graph, self.canonicalizer))
                self._streams.move_to_end(graph)
                while len(self._streams) > self.capacity:
                    self._streams.popitem(last=False)
        if upto is not None and stream.seq >= upto:  # seq is set last by extend: its members are there
            return stream
        with stream.lock:
            while upto is None or stream.seq < upto:
                links = self.archive.chain(graph, stream.seq, READ_BATCH, bodies=True)
                if not links:
                    break
                stream.extend([(link.id, link.seq, link.body) for link in links])
                if len(links) < READ_BATCH:
                    break
        return stream

    def forget(self, graph: str) -> None:
        with self._lock:
            self._streams.pop(graph, None)
