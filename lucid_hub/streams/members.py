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

from lucid_hub.archive import Archive
from lucid_hub.errors import NotFoundError
from lucid_hub.rdf.apply import GraphReplica
from lucid_hub.rdf.canon import Canonicalizer
from lucid_hub.rdf.patch import format_created
from lucid_hub.rdf.rdfpatch import read_rdf_patch

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
            patch = read_rdf_patch(body, self.canonicalizer)
            change = self.replica.apply(patch)
            created = format_created(patch.created)
            previous = self.activities[-1].timestamp if self.activities else created
            activity = Activity(patch_id, patch.prev, seq, patch.author, patch.message, created,
                                max(created, previous))
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

    def current(self, graph: str) -> GraphStream:
        """The graph's stream, up to the archive's head. NotFoundError for an unknown graph."""
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
        with stream.lock:
            while True:
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
