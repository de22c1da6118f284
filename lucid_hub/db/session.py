"""Engine and sessions for one database URL; Alembic upgrades."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event, inspect
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from lucid_hub.errors import ConfigError

MIGRATIONS = Path(__file__).resolve().parents[2] / "migrations"


class Database:
    """One database: an engine, a session factory, and the schema upgrade."""

    def __init__(self, url: str) -> None:
        self.url = url
        kwargs: dict[str, Any] = {}
        if url.startswith("sqlite"):
            path = url.split("///", 1)[-1]
            if path and path != ":memory:":
                Path(path).parent.mkdir(parents=True, exist_ok=True)
            kwargs["connect_args"] = {"check_same_thread": False, "timeout": 30}
        else:
            kwargs["pool_pre_ping"] = True
        try:
            self.engine: Engine = create_engine(url, **kwargs)
        except (SQLAlchemyError, ValueError, ImportError) as exc:
            raise ConfigError(f"invalid database URL: {exc}") from None
        # SQLite has one writer at a time, and a thread that finds the database locked polls
        # in SQLite's busy handler with sleeps of up to 100 ms; the hot write paths of this
        # process (publishing, delivery rounds, their records) queue on a lock instead.
        self._write_lock: AbstractContextManager[Any] = nullcontext()
        if url.startswith("sqlite"):
            event.listen(self.engine, "connect", _sqlite_pragmas)
            self._write_lock = threading.RLock()
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A session in a transaction: committed on success, rolled back on error."""
        with self._sessions.begin() as session:
            yield session

    def insert(self, table: Any) -> Any:
        """An INSERT with this dialect's ON CONFLICT clauses (PostgreSQL and SQLite spell them
        alike): writes that other processes of the hub may make at the same moment."""
        from sqlalchemy.dialects import postgresql, sqlite

        return (postgresql.insert if self.engine.dialect.name == "postgresql" else sqlite.insert)(table)

    @contextmanager
    def write(self) -> Iterator[Connection]:
        """A write transaction (SQLAlchemy Core), committed on success."""
        with self._write_lock, self.engine.begin() as conn:
            yield conn

    def upgrade(self, revision: str = "head") -> None:
        """Bring the schema to `revision` with the Alembic migrations."""
        from alembic import command

        command.upgrade(self._alembic_config(), revision)

    def downgrade(self, revision: str) -> None:
        from alembic import command

        command.downgrade(self._alembic_config(), revision)

    def is_current(self) -> bool:
        """Whether the schema exists (the `patches` table is there)."""
        return inspect(self.engine).has_table("patches")

    def _alembic_config(self) -> Any:
        from alembic.config import Config

        if not (MIGRATIONS / "env.py").is_file():
            raise ConfigError(f"Alembic migrations not found at {MIGRATIONS}")
        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS))
        config.attributes["url"] = self.url
        config.attributes["engine"] = self.engine
        return config

    def dispose(self) -> None:
        self.engine.dispose()


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    # WAL lets readers and one writer work at once; foreign keys are off by default in SQLite.
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()
