"""The embedded patch log's rows: `log_entries` (the patches in log order) and `log_offsets`
(each consumer group's committed position). `log.sql` is the patch log built on them; the
archive writes entries itself when a patch is archived (`Archive.append`)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import bindparam, case, select

from lucid_hub.db.models import LogEntry, LogOffset
from lucid_hub.db.session import Database

_NEXT = (select(LogEntry.offset, LogEntry.graph, LogEntry.patch_id, LogEntry.body)
         .where(LogEntry.offset > bindparam("after")).order_by(LogEntry.offset).limit(bindparam("limit")))


def append(db: Database, rows: list[dict[str, object]]) -> None:
    """Append entries ({graph, patch_id, body}); a patch id already there is skipped (a
    second append after a crash is a no-op, not a duplicate)."""
    with db.session() as session:
        session.execute(db.insert(LogEntry).values(rows).on_conflict_do_nothing(index_elements=["patch_id"]))


def after(db: Database, offset: int, limit: int) -> list[Any]:
    """Up to `limit` entries after `offset`: (offset, graph, patch_id, body), in order."""
    with db.engine.connect() as conn:
        return list(conn.execute(_NEXT, {"after": offset, "limit": limit}).all())


def probe(db: Database) -> None:
    """Read one entry (raises SQLAlchemyError when the database does not answer)."""
    with db.engine.connect() as conn:
        conn.execute(select(LogEntry.offset).limit(1))


def committed(db: Database, group: str) -> int:
    """The group's committed offset (0 for a new group)."""
    with db.session() as session:
        row = session.get(LogOffset, group)
        return row.offset if row is not None else 0


def commit(db: Database, group: str, offset: int) -> None:
    """Move the group's committed offset to `offset`, never back.

    One upsert: the group's consumers (delivery workers) commit concurrently, the first
    commit included (a read, then an insert, let two workers started together collide on
    the group's row, and one exited)."""
    statement = db.insert(LogOffset).values(group=group, offset=offset)
    later = case((statement.excluded.offset > LogOffset.offset, statement.excluded.offset), else_=LogOffset.offset)
    with db.session() as session:
        session.execute(statement.on_conflict_do_update(index_elements=[LogOffset.group], set_={"offset": later}))
