"""Relational state: SQLAlchemy models and sessions (patch archive, graph heads, outbox,
the embedded patch log). Schema changes only through Alembic (top-level `migrations/`)."""

from lucid_hub.db.models import Base, Graph, LogEntry, LogOffset, Outbox, PatchRecord
from lucid_hub.db.session import Database

__all__ = ["Base", "Database", "Graph", "LogEntry", "LogOffset", "Outbox", "PatchRecord"]
