"""The archive: every graph's chain of patches and its head, the outbox and the SQL log's
entries. The only module that writes SQL for the `graphs`, `patches`, `outbox` and
`log_entries` tables; publishing, mirrors, policies, delivery and the web read them here.

A head advances only by compare-and-set (`append`): a patch is archived if its `prev` is
still the graph's head, in the same transaction as its outbox row (or its log entry, when
the SQL log is the patch log), so the archive, the outbox and the log never disagree.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import bindparam, delete, exists, func, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import defer

from lucid_hub.db.models import Graph, LogEntry, Mirror, Outbox, PatchRecord, PendingReaction
from lucid_hub.db.session import Database
from lucid_hub.db.times import aware
from lucid_hub.errors import ConflictError, NotFoundError, StoreError

# A condition on a graph's version (its head; None before its first patch) for a change to
# go ahead: HTTP If-Match, or the version an editor read.
Precondition = Callable[[str | None], bool]


def at_version(version: str | None) -> Precondition:
    """The precondition that the graph is exactly at `version`."""
    return lambda head: head == version


class MirroredGraphError(ConflictError):
    """A local change of a mirrored graph (HTTP 409): it changes only through its publisher."""


def read_only(graph: str) -> MirroredGraphError:
    return MirroredGraphError(f"<{graph}> is a mirror of another hub's graph: it changes only through its publisher")


INTERNAL_PREFIX = "urn:lucid-hub:"  # the hub's own graphs (access conditions, rules)


@dataclass(frozen=True)
class Archiving:
    """A patch as the archive records it: its headers and its RDF Patch bytes."""

    id: str
    graph: str
    prev: str | None
    author: str
    message: str
    created: datetime
    removed: int
    added: int
    body: bytes
    reacting: bool = False  # immediate rules will react to it: a pending reaction is recorded with it


@dataclass(frozen=True)
class ChainLink:
    """A patch at its place in a graph's chain (`seq`: 1 for the first), without its body
    unless it was asked for."""

    id: str
    prev: str | None
    seq: int
    removed: int
    added: int
    body: bytes = b""


# Prepared once: building SQLAlchemy statements costs more than running them on SQLite.
# Moves a head by `n` patches (a group commit's chain) if it is still at `prev`.
_ADVANCE = (update(Graph).where(Graph.iri == bindparam("g"), Graph.head == bindparam("prev"))
            .values(head=bindparam("new"), length=Graph.length + bindparam("n"), updated_at=bindparam("now"))
            .returning(Graph.length))
_ADVANCE_FIRST = (update(Graph).where(Graph.iri == bindparam("g"), Graph.head.is_(None))
                  .values(head=bindparam("new"), length=Graph.length + bindparam("n"), updated_at=bindparam("now"))
                  .returning(Graph.length))
# A local change advances the head only if the graph is not mirrored, decided in the same
# statement: another process of the hub may have added the mirror a moment ago.
_NOT_MIRRORED = ~exists().where(Mirror.graph == bindparam("g"))
_ADVANCE_LOCAL = _ADVANCE.where(_NOT_MIRRORED)
_ADVANCE_FIRST_LOCAL = _ADVANCE_FIRST.where(_NOT_MIRRORED)
_MIRRORED = select(Mirror.id).where(Mirror.graph == bindparam("g"))
_INSERT_PATCH = insert(PatchRecord)
_INSERT_LOG = insert(LogEntry)
_INSERT_OUTBOX = insert(Outbox)
_INSERT_REACTION = insert(PendingReaction)
_HEAD = select(Graph.head).where(Graph.iri == bindparam("g"))
_LENGTH = select(Graph.length).where(Graph.iri == bindparam("g"))
_RELAYED = delete(Outbox).where(Outbox.seq <= bindparam("last"))


class Archive:
    """Graphs, heads and patches of one hub's database; the outbox and the SQL log's entries."""

    def __init__(self, db: Database) -> None:
        self.db = db

    # --- reading -------------------------------------------------------------------------
    def head(self, graph: str) -> str | None:
        """The graph's version (None: no patch yet). NotFoundError for an unknown graph."""
        with self.db.session() as session:
            row = session.get(Graph, graph)
            if row is None:
                raise NotFoundError(f"unknown graph <{graph}>")
            return row.head

    def current_head(self, graph: str) -> str | None:
        """The graph's head, None for no patch yet or an unknown graph (one cheap statement)."""
        with self.db.engine.connect() as conn:
            head: str | None = conn.execute(_HEAD, {"g": graph}).scalar()
            return head

    def length(self, graph: str) -> int:
        """The number of patches in the graph's chain (0 for an unknown graph)."""
        with self.db.engine.connect() as conn:
            return conn.execute(_LENGTH, {"g": graph}).scalar() or 0

    def exists(self, graph: str) -> bool:
        with self.db.engine.connect() as conn:
            return conn.execute(select(Graph.iri).where(Graph.iri == graph)).first() is not None

    def deleted(self, graph: str) -> bool:
        """Whether the graph was deleted from the Graph Store and not written since (its
        history stays); False for an unknown graph."""
        with self.db.engine.connect() as conn:
            row = conn.execute(select(Graph.head, Graph.dropped).where(Graph.iri == graph)).first()
        return row is not None and row.dropped is not None and row.dropped == (row.head or "")

    def mark_deleted(self, graph: str, version: str | None) -> None:
        """The graph was deleted at `version` (a later patch brings it back by moving the head)."""
        with self.db.session() as session:
            session.execute(update(Graph).where(Graph.iri == graph).values(dropped=version or ""))

    def restore(self, graph: str) -> None:
        """The graph is written again without a change of content (a PUT of what it held)."""
        with self.db.session() as session:
            session.execute(update(Graph).where(Graph.iri == graph).values(dropped=None))

    def graphs(self) -> list[Graph]:
        with self.db.session() as session:
            return list(session.scalars(select(Graph).order_by(Graph.iri)))

    def graphs_of(self, iris: Iterable[str]) -> dict[str, Graph]:
        with self.db.session() as session:
            return {g.iri: g for g in session.scalars(select(Graph).where(Graph.iri.in_(list(iris))))}

    def heads(self) -> list[tuple[str, str | None]]:
        """(graph, head) of every graph, in IRI order: one statement."""
        with self.db.engine.connect() as conn:
            return [(iri, head) for iri, head in conn.execute(select(Graph.iri, Graph.head).order_by(Graph.iri))]

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

    def graph_page(self, offset: int = 0, limit: int = 100, *, internal: bool = True) -> tuple[list[Graph], int]:
        """A page of the graphs, most recently changed first, and how many there are; without
        `internal`, none of the hub's own (`urn:lucid-hub:…`: access conditions, rules)."""
        only = [] if internal else [~Graph.iri.startswith(INTERNAL_PREFIX)]
        with self.db.session() as session:
            total = int(session.scalar(select(func.count()).select_from(Graph).where(*only)) or 0)
            query = select(Graph).where(*only).order_by(Graph.updated_at.desc(), Graph.iri).offset(offset).limit(limit)
            return list(session.scalars(query)), total

    def timeline(self, graph: str, before: int | None, count: int) -> list[PatchRecord]:
        """The graph's patches before chain position `before` (all when None), newest first,
        at most `count`: what a history page shows (bodies are not read)."""
        with self.db.session() as session:
            query = select(PatchRecord).where(PatchRecord.graph == graph).options(defer(PatchRecord.body))
            if before is not None:
                query = query.where(PatchRecord.seq < before)
            return list(session.scalars(query.order_by(PatchRecord.seq.desc()).limit(count)))

    def size(self, graph: str) -> int:
        """MSGs the graph holds at its head, from its patches' counts (no store read)."""
        with self.db.session() as session:
            total = session.execute(select(func.coalesce(func.sum(PatchRecord.added), 0)
                                           - func.coalesce(func.sum(PatchRecord.removed), 0))
                                    .where(PatchRecord.graph == graph)).scalar()
            return int(total or 0)

    def per_hour(self, since: datetime) -> dict[datetime, int]:
        """Patches archived per hour (hours start on the hour, UTC) since `since`, of every
        graph but the hub's own (access conditions, rules): counted in the database from the
        patches' creation times."""
        if self.db.engine.dialect.name == "postgresql":
            hour: Any = func.date_trunc("hour", PatchRecord.created)
        else:  # SQLite keeps the times as text
            hour = func.strftime("%Y-%m-%d %H:00:00", PatchRecord.created)
        with self.db.session() as session:
            rows = session.execute(select(hour, func.count()).where(
                PatchRecord.created >= since, ~PatchRecord.graph.startswith(INTERNAL_PREFIX)).group_by(hour))
            out: dict[datetime, int] = {}
            for start, count in rows:
                when = start if isinstance(start, datetime) else datetime.fromisoformat(str(start))
                out[when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)] = int(count)
            return out

    def latest(self, graph: str, count: int) -> list[PatchRecord]:
        """The graph's newest `count` patches, in chain order."""
        with self.db.session() as session:
            if session.get(Graph, graph) is None:
                raise NotFoundError(f"unknown graph <{graph}>")
            query = select(PatchRecord).where(PatchRecord.graph == graph).order_by(PatchRecord.seq.desc())
            return list(reversed(list(session.scalars(query.limit(count)))))

    def bodies(self, graph: str) -> tuple[str | None, list[bytes]]:
        """The graph's head and every patch's bytes in chain order, read in one transaction."""
        with self.db.session() as session:
            row = session.get(Graph, graph)
            if row is None:
                return None, []
            return row.head, list(session.scalars(select(PatchRecord.body).where(PatchRecord.graph == graph)
                                                  .order_by(PatchRecord.seq)))

    def after(self, graph: str, version: str | None) -> list[PatchRecord]:
        """The patches of `graph` after `version` (all for None), in chain order: what a store
        at `version` has still to apply. StoreError if the archive does not know `version`."""
        with self.db.session() as session:
            query = select(PatchRecord).where(PatchRecord.graph == graph)
            if version is not None:
                mark = session.get(PatchRecord, version)
                if mark is None:
                    raise StoreError(f"store holds <{graph}> at {version}, which the archive does not know")
                query = query.where(PatchRecord.seq > mark.seq)
            return list(session.scalars(query.order_by(PatchRecord.seq)))

    def created_times(self, positions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], datetime]:
        """When the patches at these (graph, chain position) were made: one statement a graph;
        positions past a chain are left out."""
        wanted: dict[str, set[int]] = {}
        for graph, seq in positions:
            wanted.setdefault(graph, set()).add(seq)
        out: dict[tuple[str, int], datetime] = {}
        with self.db.engine.connect() as conn:
            for graph, seqs in wanted.items():
                rows = conn.execute(select(PatchRecord.seq, PatchRecord.created).where(
                    PatchRecord.graph == graph, PatchRecord.seq.in_(sorted(seqs))))
                out |= {(graph, seq): aware(created) for seq, created in rows}
        return out

    def chain_records(self, graph: str, after: int, until: int) -> list[PatchRecord]:
        """The graph's patches at chain positions after `after` up to `until`, in order."""
        with self.db.session() as session:
            query = select(PatchRecord).where(PatchRecord.graph == graph, PatchRecord.seq > after,
                                              PatchRecord.seq <= until)
            return list(session.scalars(query.order_by(PatchRecord.seq)))

    def chain(self, graph: str, after: int, limit: int, *, bodies: bool = False) -> list[ChainLink]:
        """Up to `limit` patches of `graph` after chain position `after`, in chain order."""
        p = PatchRecord
        columns = [p.id, p.prev, p.seq, p.removed, p.added, *([p.body] if bodies else [])]
        with self.db.engine.connect() as conn:
            rows = conn.execute(select(*columns).where(p.graph == graph, p.seq > after)
                                .order_by(p.seq).limit(limit)).all()
        return [ChainLink(r.id, r.prev, r.seq, r.removed, r.added, r.body if bodies else b"") for r in rows]

    def spans(self, spans: Iterable[tuple[str, int, int]]) -> dict[tuple[str, int], ChainLink]:
        """The patches (with bodies) of each (graph, after, up to) range of chain positions,
        by (graph, seq): one range query per span."""
        p = PatchRecord
        found: dict[tuple[str, int], ChainLink] = {}
        with self.db.engine.connect() as conn:
            for graph, low, high in spans:
                for r in conn.execute(select(p.id, p.prev, p.seq, p.removed, p.added, p.body).where(
                        p.graph == graph, p.seq > low, p.seq <= high).order_by(p.seq)):
                    found[graph, r.seq] = ChainLink(r.id, r.prev, r.seq, r.removed, r.added, r.body)
        return found

    def patch(self, patch_id: str) -> PatchRecord:
        with self.db.session() as session:
            row = session.get(PatchRecord, patch_id)
            if row is None:
                raise NotFoundError(f"unknown patch {patch_id}")
            return row

    def position(self, patch_id: str, graph: str) -> int:
        """The chain position of a patch of `graph`; NotFoundError if it is not in that chain."""
        with self.db.engine.connect() as conn:
            row = conn.execute(select(PatchRecord.graph, PatchRecord.seq).where(PatchRecord.id == patch_id)).first()
        if row is None or row.graph != graph:
            raise NotFoundError(f"patch {patch_id} is not in the history of <{graph}>")
        return int(row.seq)

    def contains(self, patch_id: str) -> bool:
        with self.db.engine.connect() as conn:
            return conn.execute(select(PatchRecord.id).where(PatchRecord.id == patch_id)).first() is not None

    @staticmethod
    def length_of(graph: Any) -> Any:
        """The chain length of the graph a column names, as a correlated subquery (for the
        tables that keep positions in chains: subscriptions)."""
        return select(Graph.length).where(Graph.iri == graph).scalar_subquery()

    # --- changing ------------------------------------------------------------------------
    def append(self, patches: list[Archiving], *, local: bool, log_entries: bool) -> None:
        """Archive the patches and advance their graphs' heads by compare-and-set, all in one
        transaction (all or none). A `local` change (not a mirror's) also requires that the
        graph is not mirrored (MirroredGraphError); a head that moved is a ConflictError.

        `log_entries`: the SQL log is the patch log, and its entries are written in this
        transaction (the log is its own outbox); otherwise an outbox row is, and a relay
        follows. Prepared Core statements, not the ORM: this is the hot path of every publish.
        """
        now = datetime.now(UTC)
        try:
            with self.db.write() as conn:
                for chain in _chains(patches):
                    self._append_in(conn, chain, now, local, log_entries)
        except IntegrityError:
            graphs = ", ".join(f"<{p.graph}>" for p in patches)
            raise ConflictError(f"{graphs} changed concurrently; retry with a fresh diff") from None

    def _append_in(self, conn: Any, chain: list[Archiving], now: datetime, local: bool, log_entries: bool) -> None:
        """Append patches of one graph, each following the one before (a group commit's):
        the head moves by one compare-and-set from the first's prev to the last, and the rows
        go in with one statement per table."""
        first, last = chain[0], chain[-1]
        graph = first.graph
        if first.prev is None:
            conn.execute(self.db.insert(Graph).values(iri=graph, head=None, length=0, created_at=now,
                                                     updated_at=now).on_conflict_do_nothing())
            advance = _ADVANCE_FIRST_LOCAL if local else _ADVANCE_FIRST
        else:
            advance = _ADVANCE_LOCAL if local else _ADVANCE
        length = conn.execute(advance, {"g": graph, "prev": first.prev, "new": last.id, "n": len(chain),
                                        "now": now}).scalar()
        if length is None:
            if local and conn.execute(_MIRRORED, {"g": graph}).first() is not None:
                raise read_only(graph)  # rolls back the graph row a first patch made
            current = conn.execute(_HEAD, {"g": graph}).scalar()
            raise ConflictError(f"<{graph}> changed concurrently; retry with a fresh diff", current)
        first_seq = length - len(chain) + 1
        conn.execute(_INSERT_PATCH, [{
            "id": patch.id, "graph": graph, "seq": first_seq + i, "prev": patch.prev,
            "prev_key": patch.prev or "", "author": patch.author, "message": patch.message,
            "created": patch.created, "removed": patch.removed, "added": patch.added,
            "body": patch.body} for i, patch in enumerate(chain)])
        if log_entries:
            conn.execute(_INSERT_LOG, [{"graph": graph, "patch_id": p.id, "body": p.body} for p in chain])
        else:
            conn.execute(_INSERT_OUTBOX, [{"patch_id": p.id, "graph": graph} for p in chain])
        reacting = [{"patch_id": p.id, "graph": graph} for p in chain if p.reacting]
        if reacting:
            conn.execute(_INSERT_REACTION, reacting)

    # --- pending reactions (rules) -----------------------------------------------------
    def pending_reactions(self) -> list[tuple[str, str]]:
        """(patch id, graph) of patches whose immediate rules have not finished reacting, oldest first."""
        query = (select(PendingReaction.patch_id, PendingReaction.graph)
                 .join(PatchRecord, PatchRecord.id == PendingReaction.patch_id).order_by(PatchRecord.created))
        with self.db.engine.connect() as conn:
            return [(r.patch_id, r.graph) for r in conn.execute(query)]

    def reacted(self, patch_id: str) -> None:
        """The patch's immediate rules are done with it."""
        with self.db.write() as conn:
            conn.execute(delete(PendingReaction).where(PendingReaction.patch_id == patch_id))

    def forget(self, graph: str) -> None:
        """Drop a graph's chain, head, outbox rows and log entries (a mirror that re-clones)."""
        with self.db.session() as session:
            ids = select(PatchRecord.id).where(PatchRecord.graph == graph)
            session.execute(delete(Outbox).where(Outbox.patch_id.in_(ids)))
            session.execute(delete(PendingReaction).where(PendingReaction.graph == graph))
            session.execute(delete(LogEntry).where(LogEntry.graph == graph))
            session.execute(delete(PatchRecord).where(PatchRecord.graph == graph))
            session.execute(delete(Graph).where(Graph.iri == graph))

    # --- the outbox ----------------------------------------------------------------------
    def outbox(self, limit: int) -> list[tuple[int, str, str, bytes]]:
        """The oldest outbox rows: (seq, graph, patch id, body), in order."""
        query = (select(Outbox.seq, PatchRecord.graph, PatchRecord.id, PatchRecord.body)
                 .join(PatchRecord, PatchRecord.id == Outbox.patch_id).order_by(Outbox.seq).limit(limit))
        with self.db.engine.connect() as conn:
            return [(r.seq, r.graph, r.id, r.body) for r in conn.execute(query)]

    def relayed(self, last: int) -> None:
        """The log holds every outbox row up to `last`: they go."""
        with self.db.write() as conn:
            conn.execute(_RELAYED, {"last": last})

    def outbox_ids(self) -> list[str]:
        with self.db.session() as session:
            return list(session.scalars(select(Outbox.patch_id)))

    def drop_outbox(self, patch_ids: Iterable[str]) -> None:
        with self.db.session() as session:
            session.execute(delete(Outbox).where(Outbox.patch_id.in_(list(patch_ids))))


def _chains(patches: list[Archiving]) -> list[list[Archiving]]:
    """The patches as runs of one graph, each following the one before, in their order."""
    chains: list[list[Archiving]] = []
    for patch in patches:
        if chains and chains[-1][-1].graph == patch.graph and chains[-1][-1].id == patch.prev:
            chains[-1].append(patch)
        else:
            chains.append([patch])
    return chains
