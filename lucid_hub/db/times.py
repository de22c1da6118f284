"""Times as the hub's tables hold them: UTC and timezone-aware (SQLite hands them back naive)."""

from __future__ import annotations

from datetime import UTC, datetime


def now() -> datetime:
    return datetime.now(UTC)


def aware(value: datetime) -> datetime:
    """A datetime read from the database, as the UTC time it was written as."""
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def iso(value: datetime | None) -> str | None:
    """ISO 8601 of a datetime read from the database (None stays None)."""
    return aware(value).isoformat() if value is not None else None
