"""The embedded patch log: a table in the hub's own database."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from lucid_hub.db.models import LogEntry, LogOffset
from lucid_hub.db.session import Database
from lucid_hub.log import LogRecord


class SqlPatchLog:
    """Patch log in the `log_entries` table; a patch id is appended at most once."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def append(self, records: list[LogRecord]) -> None:
        if not records:
            return
        insert = pg_insert if self.db.engine.dialect.name == "postgresql" else sqlite_insert
        rows = [{"graph": r.graph, "patch_id": r.patch_id, "body": r.body} for r in records]
        with self.db.session() as session:
            # Appending again after a crash is a no-op, not a duplicate.
            session.execute(insert(LogEntry).values(rows).on_conflict_do_nothing(index_elements=["patch_id"]))

    def consumer(self, group: str) -> SqlLogConsumer:
        return SqlLogConsumer(self.db, group)

    def close(self) -> None:
        pass


class SqlLogConsumer:
    def __init__(self, db: Database, group: str) -> None:
        self.db = db
        self.group = group

    def _committed(self) -> int:
        with self.db.session() as session:
            row = session.get(LogOffset, self.group)
            return row.offset if row is not None else 0

    def poll(self, max_records: int = 100, timeout: float = 1.0) -> list[LogRecord]:
        after = self._committed()
        with self.db.session() as session:
            rows = session.scalars(
                select(LogEntry).where(LogEntry.offset > after).order_by(LogEntry.offset).limit(max_records)
            ).all()
            return [LogRecord(r.graph, r.patch_id, r.body, str(r.offset)) for r in rows]

    def commit(self, records: list[LogRecord]) -> None:
        if not records:
            return
        last = max(int(r.position) for r in records)
        with self.db.session() as session:
            row = session.get(LogOffset, self.group)
            if row is None:
                session.add(LogOffset(group=self.group, offset=last))
            elif last > row.offset:
                row.offset = last

    def close(self) -> None:
        pass
