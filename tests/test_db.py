"""Schema only through Alembic: upgrade from empty, and downgrade then upgrade, on each database."""

from __future__ import annotations

from sqlalchemy import inspect

from lucid_hub.db.session import Database

TABLES = {"graphs", "patches", "outbox", "log_entries", "log_offsets", "alembic_version"}


def test_upgrade_from_empty_then_downgrade_and_upgrade_again(db_url: str) -> None:
    db = Database(db_url)
    try:
        assert not db.is_current()
        db.upgrade()
        assert set(inspect(db.engine).get_table_names()) >= TABLES
        db.downgrade("base")
        assert set(inspect(db.engine).get_table_names()) <= {"alembic_version"}
        db.upgrade()
        assert db.is_current()
    finally:
        db.dispose()
