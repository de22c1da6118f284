"""The embedded patch log: a table in the hub's own database."""

from __future__ import annotations

import threading
import time

from sqlalchemy import bindparam, case, select
from sqlalchemy.exc import SQLAlchemyError

from lucid_hub.db.models import LogEntry, LogOffset
from lucid_hub.db.session import Database
from lucid_hub.errors import LogUnavailableError
from lucid_hub.log import LogRecord

_NEXT = (select(LogEntry.offset, LogEntry.graph, LogEntry.patch_id, LogEntry.body)
         .where(LogEntry.offset > bindparam("after")).order_by(LogEntry.offset).limit(bindparam("limit")))


class SqlPatchLog:
    """Patch log in the `log_entries` table; a patch id is appended at most once."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def append(self, records: list[LogRecord]) -> None:
        if not records:
            return
        rows = [{"graph": r.graph, "patch_id": r.patch_id, "body": r.body} for r in records]
        with self.db.session() as session:
            # Appending again after a crash is a no-op, not a duplicate.
            session.execute(self.db.insert(LogEntry).values(rows).on_conflict_do_nothing(index_elements=["patch_id"]))

    def consumer(self, group: str) -> SqlLogConsumer:
        return SqlLogConsumer(self.db, group)

    def check(self, timeout: float = 2.0) -> None:
        try:
            with self.db.engine.connect() as conn:
                conn.execute(select(LogEntry.offset).limit(1))
        except SQLAlchemyError as exc:
            raise LogUnavailableError(f"the SQL patch log is unreachable: {type(exc).__name__}") from None

    def close(self) -> None:
        pass


class SqlLogConsumer:
    """A consumer group's reader of the SQL log, with Kafka's semantics: its position starts
    after the group's committed offset and advances with every poll; commits are for the
    next consumer of the group (after a restart)."""

    IDLE_POLL = 0.005  # s between reads while waiting: a table has no push notification

    def __init__(self, db: Database, group: str) -> None:
        self.db = db
        self.group = group
        self._position: int | None = None
        self._closed = threading.Event()

    def _committed(self) -> int:
        with self.db.session() as session:
            row = session.get(LogOffset, self.group)
            return row.offset if row is not None else 0

    def poll(self, max_records: int = 100, timeout: float = 1.0) -> list[LogRecord]:
        """The next records, waiting up to `timeout` seconds for one to be appended."""
        if self._position is None:
            self._position = self._committed()
        deadline = time.monotonic() + timeout
        while True:
            with self.db.engine.connect() as conn:
                rows = conn.execute(_NEXT, {"after": self._position, "limit": max_records}).all()
            if rows:
                self._position = rows[-1].offset
                return [LogRecord(r.graph, r.patch_id, r.body, str(r.offset)) for r in rows]
            left = deadline - time.monotonic()
            if left <= 0 or self._closed.wait(min(left, self.IDLE_POLL)):
                return []

    def commit(self, records: list[LogRecord]) -> None:
        if not records:
            return
        last = max(int(r.position) for r in records)
        # One upsert that never moves the offset back: the group's consumers (delivery
        # workers) commit concurrently, the first commit included (a read, then an insert,
        # let two workers started together collide on the group's row, and one exited).
        statement = self.db.insert(LogOffset).values(group=self.group, offset=last)
        later = case((statement.excluded.offset > LogOffset.offset, statement.excluded.offset),
                     else_=LogOffset.offset)
        with self.db.session() as session:
            session.execute(statement.on_conflict_do_update(index_elements=[LogOffset.group],
                                                            set_={"offset": later}))

    def close(self) -> None:
        self._closed.set()
