"""Schema only through Alembic: upgrade from empty, and downgrade then upgrade, on each database."""

from __future__ import annotations

import pytest
from sqlalchemy import inspect

from lucid_hub.db.session import Database

TABLES = {"graphs", "patches", "outbox", "log_entries", "log_offsets", "alembic_version"}


def test_upgrade_from_empty_then_downgrade_and_upgrade_again(empty_db_url: str) -> None:
    db = Database(empty_db_url)
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


def test_every_migration_steps_down_and_up_and_the_schema_matches_the_models(empty_db_url: str) -> None:
    """One revision at a time, down to empty and back up; then Alembic's own comparison of
    the migrated database with the SQLAlchemy models finds nothing to add or change."""
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext
    from alembic.script import ScriptDirectory

    from lucid_hub.db.models import Base

    db = Database(empty_db_url)
    try:
        db.upgrade()
        revisions = [r.revision for r in ScriptDirectory.from_config(db._alembic_config()).walk_revisions()]
        assert len(revisions) >= 4
        for _ in revisions:
            db.downgrade("-1")
        assert set(inspect(db.engine).get_table_names()) <= {"alembic_version"}
        for _ in revisions:
            db.upgrade("+1")
        assert db.is_current()
        with db.engine.connect() as conn:
            drift = compare_metadata(MigrationContext.configure(conn), Base.metadata)
        assert drift == [], drift
    finally:
        db.dispose()


def test_db_downgrade_needs_confirmation_and_a_known_revision(run_cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    env = {"LUCID_DATA_DIR": str(tmp_path / "data"), "LUCID_DATABASE_URL": f"sqlite:///{tmp_path / 'cli.db'}"}
    assert run_cli("db", "upgrade", env=env).code == 0
    unconfirmed = run_cli("db", "downgrade", "base", env=env)
    assert unconfirmed.code == 2 and "--yes" in unconfirmed.err and len(unconfirmed.err.strip().splitlines()) == 1
    unknown = run_cli("db", "downgrade", "no-such-revision", "--yes", env=env)
    assert unknown.code == 1 and unknown.err.startswith("lucid-hub: error: cannot downgrade to 'no-such-revision'")
    assert len(unknown.err.strip().splitlines()) == 1
    db = Database(env["LUCID_DATABASE_URL"])
    try:
        assert db.is_current()  # nothing happened on refusal
        assert run_cli("db", "downgrade", "base", "--yes", env=env).code == 0
        assert set(inspect(db.engine).get_table_names()) <= {"alembic_version"}
        assert run_cli("db", "upgrade", env=env).code == 0 and db.is_current()
    finally:
        db.dispose()


def test_windowed_queries_keep_their_results_when_names_become_each_partys_own(empty_db_url: str) -> None:
    """Upgrading a database with windowed queries (keyed by name before): each keeps its name
    as its id, its results stay its own, and two parties may then use one name."""
    from datetime import UTC, datetime

    from sqlalchemy import select

    from lucid_hub.db.models import WindowedQuery, WindowedResult

    db = Database(empty_db_url)
    try:
        db.upgrade("0011")
        stamp = datetime(2026, 11, 24, 8, 0, tzinfo=UTC)
        row = {"name": "kpi", "account": "acme", "endpoint_id": "acme", "groups": "", "token_id": "t",
               "query": "ASK {}", "graphs": '["urn:g"]', "range_spec": "1", "step_spec": "1", "with_state": True,
               "state": "active", "reason": "", "next_end_at": None, "next_end_position": 3, "sequence": 1,
               "callback": None, "secret": None, "callback_seq": -1, "callback_attempts": 0, "callback_next_at": None,
               "callback_error": "", "created_at": stamp, "updated_at": stamp}
        from sqlalchemy import MetaData, Table

        with db.engine.begin() as conn:
            meta = MetaData()
            queries = Table("windowed_queries", meta, autoload_with=conn)
            results = Table("windowed_results", meta, autoload_with=conn)
            conn.execute(queries.insert().values(**row))
            conn.execute(results.insert(), [{"query": "kpi", "sequence": n, "body": f'{{"n": {n}}}',
                                             "created_at": stamp} for n in (0, 1)])
        db.upgrade()
        with db.session() as session:
            [kept] = session.scalars(select(WindowedQuery)).all()
            assert (kept.id, kept.name, kept.account, kept.with_state, kept.sequence) == ("kpi", "kpi", "acme", True, 1)
            assert [(r.query, r.sequence, r.body) for r in session.scalars(
                select(WindowedResult).order_by(WindowedResult.sequence))] == [("kpi", 0, '{"n": 0}'),
                                                                               ("kpi", 1, '{"n": 1}')]
            session.add(WindowedQuery(**{**row, "id": "wq-other", "account": "globex"}))  # the same name, another party
        with pytest.raises(RuntimeError, match="same name"):
            db.downgrade("0011")  # refused while two parties share a name
    finally:
        db.dispose()
