"""Publisher: every accepted change becomes exactly one signed, hash-chained patch.

Order of work for one change, and why nothing is lost at a crash between any two steps:
1. one database transaction appends the patch to the archive, advances the graph's head
   by compare-and-set and adds an outbox row (all or nothing);
2. the store applies the patch (atomically, with its version marker);
3. the relay moves outbox rows into the patch log and deletes them.
On start, `repair` replays archived patches the store has not applied and relays the
outbox again; the log ignores a patch id it already holds (SQL) or consumers drop it.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError

from lucid_hub.db.models import Graph, Outbox, PatchRecord
from lucid_hub.db.session import Database
from lucid_hub.diff import GraphChange
from lucid_hub.diff.local import diff_msgs
from lucid_hub.errors import (
    ConflictError,
    NotFoundError,
    PatchApplyError,
    PreconditionFailedError,
    StoreError,
)
from lucid_hub.log import LogRecord, PatchLog
from lucid_hub.rdf.canon import Canonicalizer
from lucid_hub.rdf.msg import GraphMsgs
from lucid_hub.rdf.patch import Patch
from lucid_hub.rdf.rdfpatch import read_rdf_patch, write_rdf_patch
from lucid_hub.signing import SigningKey, TrustedKeys, jwks_of, sign_patch
from lucid_hub.store import GraphStore

log = logging.getLogger(__name__)

# Test-only crash points (LUCID_FAULT=name): the process exits at once, as a kill would.
FAULT_ENV = "LUCID_FAULT"


def _crash_point(name: str) -> None:
    if os.environ.get(FAULT_ENV) == name:
        log.warning("fault injection: exiting at %s", name)
        os._exit(137)


class Publisher:
    """Versions the owned graphs of one hub."""

    def __init__(self, db: Database, store: GraphStore, patch_log: PatchLog, key: SigningKey,
                 canonicalizer: Canonicalizer, trusted: TrustedKeys | None = None) -> None:
        self.db = db
        self.store = store
        self.log = patch_log
        self.key = key
        self.canonicalizer = canonicalizer
        self.trusted = trusted or TrustedKeys(jwks_of([key]))
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self._relay_lock = threading.Lock()

    # --- reading -------------------------------------------------------------------------

    def head(self, graph: str) -> str | None:
        """The graph's version (None: no patch yet). NotFoundError for an unknown graph."""
        with self.db.session() as session:
            row = session.get(Graph, graph)
            if row is None:
                raise NotFoundError(f"unknown graph <{graph}>")
            return row.head

    def graphs(self) -> list[Graph]:
        with self.db.session() as session:
            return list(session.scalars(select(Graph).order_by(Graph.iri)))

    def history(self, graph: str, since: str | None = None, limit: int | None = None) -> list[PatchRecord]:
        """The graph's patches in chain order, after `since` when given."""
        with self.db.session() as session:
            if session.get(Graph, graph) is None:
                raise NotFoundError(f"unknown graph <{graph}>")
            query = select(PatchRecord).where(PatchRecord.graph == graph)
            if since is not None:
                start = session.get(PatchRecord, since)
                if start is None or start.graph != graph:
                    raise NotFoundError(f"patch {since} is not in the history of <{graph}>")
                query = query.where(PatchRecord.seq > start.seq)
            query = query.order_by(PatchRecord.seq)
            if limit is not None:
                query = query.limit(limit)
            return list(session.scalars(query))

    def patch(self, patch_id: str) -> PatchRecord:
        with self.db.session() as session:
            row = session.get(PatchRecord, patch_id)
            if row is None:
                raise NotFoundError(f"unknown patch {patch_id}")
            return row

    def content(self, graph: str, version: str | None = None) -> tuple[str | None, list[str]]:
        """(version, statements) of the graph now, or at an older version rebuilt from patches."""
        head = self.head(graph)
        with self._lock(graph):
            self._sync(graph)
            if version is None or version == head:
                return head, self.store.statements(graph)
        from lucid_hub.rdf.apply import GraphReplica

        replica = GraphReplica([], self.canonicalizer)
        for record in self.history(graph):
            replica.apply(read_rdf_patch(record.body, self.canonicalizer))
            if record.id == version:
                return version, list(replica.statements())
        raise NotFoundError(f"version {version} is not in the history of <{graph}>")

    # --- changing -----------------------------------------------------------------------

    def publish(self, graph: str, compute: Callable[[GraphMsgs], GraphChange | None], *, author: str,
                message: str, if_match: str | None = None, expect_prev: bool = False,
                prev: str | None = None) -> Patch | None:
        """Make the change `compute` derives from the graph's current MSGs; None if nothing changed.

        `if_match` (HTTP If-Match) and `expect_prev` with `prev` (an uploaded patch's prev)
        require the graph to be at that version.
        """
        with self._lock(graph):
            self._sync(graph)
            head = self.store.version(graph)
            if if_match is not None and if_match != (head or '""'):
                raise PreconditionFailedError(f"<{graph}> is at version {head}, not {if_match}", head)
            if expect_prev and prev != head:
                raise ConflictError(f"patch follows {prev or 'nothing'}, but <{graph}> is at {head}", head)
            change = compute(self.store.graph_msgs(graph) if head is not None else GraphMsgs())
            if change is None or change.is_empty:
                return None
            patch = sign_patch(change.to_patch(head, author=author, message=message), self.key)
            self._append(patch)
            _crash_point("after-archive-commit")
            self.store.apply(patch)
        self.relay()
        return patch

    def replace(self, graph: str, new: GraphMsgs, **kwargs: Any) -> Patch | None:
        """PUT: the graph's content becomes `new`."""
        return self.publish(graph, lambda old: GraphChange(graph, *diff_msgs(old, new)), **kwargs)

    def merge(self, graph: str, new: GraphMsgs, **kwargs: Any) -> Patch | None:
        """POST: `new` is added; its blank nodes are new nodes (RDF merge)."""
        def compute(old: GraphMsgs) -> GraphChange:
            addition = GraphMsgs(new.ground - old.ground, new.blank)
            return GraphChange(graph, (), tuple(addition.msgs()))
        return self.publish(graph, compute, **kwargs)

    def drop(self, graph: str, **kwargs: Any) -> Patch | None:
        """DELETE: every triple of the graph is removed (its history stays)."""
        self.head(graph)
        return self.publish(graph, lambda old: GraphChange(graph, tuple(old.msgs()), ()), **kwargs)

    def upload(self, graph: str, raw: bytes, *, author: str, message: str) -> Patch | None:
        """An RDF Patch sent by a client: its `prev` must be the head (409 otherwise).

        A complete lucid-hub patch (with `H id`) is archived as it is, if its id matches
        its content and its signature (when present) verifies with this hub's keys; a bare
        RDF Patch becomes a new patch with this hub's headers and signature.
        """
        from lucid_hub.rdf.rdfpatch import parse_rdf_patch

        doc = parse_rdf_patch(raw, self.canonicalizer, graph=graph)
        if doc.iri("id") is not None:
            patch = read_rdf_patch(raw, self.canonicalizer)
            if patch.signature is not None:
                self.trusted.verify(patch.id, patch.signature)
            return self._archive_as_is(patch)
        prev = doc.iri("prev")
        change = GraphChange(graph, tuple(doc.removed), tuple(doc.added))
        return self.publish(graph, lambda _old: change, author=author, message=message,
                            expect_prev=True, prev=prev)

    def _archive_as_is(self, patch: Patch) -> Patch:
        if patch.signature is None:
            patch = sign_patch(patch, self.key)
        with self._lock(patch.graph):
            self._sync(patch.graph)
            head = self.store.version(patch.graph)
            if patch.prev != head:
                raise ConflictError(
                    f"patch follows {patch.prev or 'nothing'}, but <{patch.graph}> is at {head}", head)
            self._check_applicable(patch)
            self._append(patch)
            _crash_point("after-archive-commit")
            self.store.apply(patch)
        self.relay()
        return patch

    def _check_applicable(self, patch: Patch) -> None:
        current = self.store.graph_msgs(patch.graph) if patch.prev else GraphMsgs()
        have = current.hashes()
        for msg in patch.removed:
            if have[msg.hash] <= 0:
                raise PatchApplyError(f"patch {patch.id} removes MSG sha256:{msg.hash}, which "
                                      f"<{patch.graph}> does not hold")
            have[msg.hash] -= 1

    def _append(self, patch: Patch) -> None:
        """Archive the patch and advance the head by compare-and-set, with an outbox row."""
        now = datetime.now(UTC)
        try:
            with self.db.session() as session:
                row = session.get(Graph, patch.graph)
                if row is None:
                    if patch.prev is not None:
                        raise ConflictError(
                            f"<{patch.graph}> does not exist, but the patch follows {patch.prev}")
                    row = Graph(iri=patch.graph, head=None, length=0, created_at=now, updated_at=now)
                    session.add(row)
                    session.flush()
                seq = row.length + 1
                result = session.execute(
                    update(Graph)
                    .where(Graph.iri == patch.graph,
                           Graph.head.is_(None) if patch.prev is None else Graph.head == patch.prev)
                    .values(head=patch.id, length=Graph.length + 1, updated_at=now)
                )
                if result.rowcount != 1:  # type: ignore[attr-defined]
                    current = session.get(Graph, patch.graph)
                    raise ConflictError(f"<{patch.graph}> changed concurrently; retry with a fresh diff",
                                        current.head if current else None)
                session.add(PatchRecord(
                    id=patch.id, graph=patch.graph, seq=seq,
                    prev=patch.prev, prev_key=patch.prev or "", author=patch.author, message=patch.message,
                    created=patch.created, removed=len(patch.removed), added=len(patch.added),
                    body=write_rdf_patch(patch)))
                session.flush()
                session.add(Outbox(patch_id=patch.id, graph=patch.graph))
        except IntegrityError:
            raise ConflictError(f"<{patch.graph}> changed concurrently; retry with a fresh diff") from None

    # --- catching up ---------------------------------------------------------------------

    def _sync(self, graph: str) -> None:
        """Apply archived patches the store does not have yet (after a crash, or patches
        another hub process published on the same database)."""
        at = self.store.version(graph)
        with self.db.session() as session:
            query = select(PatchRecord).where(PatchRecord.graph == graph)
            if at is not None:
                mark = session.get(PatchRecord, at)
                if mark is None:
                    raise StoreError(f"store holds <{graph}> at {at}, which the archive does not know")
                query = query.where(PatchRecord.seq > mark.seq)
            pending = list(session.scalars(query.order_by(PatchRecord.seq)))
        for record in pending:
            log.info("store catching up: applying %s to <%s>", record.id, graph)
            self.store.apply(read_rdf_patch(record.body, self.canonicalizer))

    def relay(self) -> int:
        """Move outbox rows into the patch log, in order; returns how many moved."""
        moved = 0
        with self._relay_lock:
            while True:
                with self.db.session() as session:
                    rows = session.execute(
                        select(Outbox.seq, PatchRecord.graph, PatchRecord.id, PatchRecord.body)
                        .join(PatchRecord, PatchRecord.id == Outbox.patch_id)
                        .order_by(Outbox.seq).limit(500)
                    ).all()
                if not rows:
                    return moved
                self.log.append([LogRecord(graph, pid, body) for _, graph, pid, body in rows])
                _crash_point("after-log-append")
                with self.db.session() as session:
                    session.query(Outbox).filter(Outbox.seq <= rows[-1][0]).delete()
                moved += len(rows)

    def repair(self) -> None:
        """Bring store and log up to the archive (run at start)."""
        for graph in self.graphs():
            with self._lock(graph.iri):
                self._sync(graph.iri)
        self.relay()

    def _lock(self, graph: str) -> threading.Lock:
        with self._locks_guard:
            lock = self._locks.get(graph)
            if lock is None:
                lock = self._locks[graph] = threading.Lock()
            return lock
