"""Alembic environment: the URL and engine come from lucid-hub's settings (Database.upgrade)."""

from __future__ import annotations

from alembic import context

from lucid_hub.db.models import Base

config = context.config
engine = config.attributes.get("engine")

if engine is None:  # run by the alembic CLI: take the URL from lucid-hub's settings
    from lucid_hub.config import Settings
    from lucid_hub.db.session import Database

    engine = Database(Settings.from_env().db_url).engine

with engine.begin() as connection:
    context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()
