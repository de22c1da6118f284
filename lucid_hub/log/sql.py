"""The embedded patch log: a table in the hub's own database (its rows are the archive's,
`archive.log_entries`; the archive writes them in the transaction that archives a patch)."""

from __future__ import annotations

import threading
import time

from sqlalchemy.exc import SQLAlchemyError

from lucid_hub.archive import log_entries
from lucid_hub.db.session import Database
from lucid_hub.errors import LogUnavailableError
from lucid_hub.log import LogRecord


class SqlPatchLog:
    """Patch log in the `log_entries` table; a patch id is appended at most once."""

    written_by_archive = True

    def __init__(self, db: Database) -> None:
        self.db = db

    def append(self, records: list[LogRecord]) -> None:
        if records:
            log_entries.append(self.db, [{"graph": r.graph, "patch_id": r.patch_id, "body": r.body}
                                         for r in records])

    def holding(self, patch_ids: set[str], recent: int) -> set[str]:
        return set()  # written with the archive: never behind an outbox

    def consumer(self, group: str) -> SqlLogConsumer:
        return SqlLogConsumer(self.db, group)

    def check(self, timeout: float = 2.0) -> None:
        try:
            log_entries.probe(self.db)
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

    def poll(self, max_records: int = 100, timeout: float = 1.0) -> list[LogRecord]:
        """The next records, waiting up to `timeout` seconds for one to be appended."""
        if self._position is None:
            self._position = log_entries.committed(self.db, self.group)
        deadline = time.monotonic() + timeout
        while True:
            rows = log_entries.after(self.db, self._position, max_records)
            if rows:
                self._position = rows[-1].offset
                return [LogRecord(r.graph, r.patch_id, r.body, str(r.offset)) for r in rows]
            left = deadline - time.monotonic()
            if left <= 0 or self._closed.wait(min(left, self.IDLE_POLL)):
                return []

    def commit(self, records: list[LogRecord]) -> None:
        if records:
            log_entries.commit(self.db, self.group, max(int(r.position) for r in records))

    def close(self) -> None:
        self._closed.set()
