"""Windowed queries and their results in the database: every statement on `windowed_queries`
and `windowed_results`."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import CursorResult, delete, func, select, update
from sqlalchemy.exc import IntegrityError

from lucid_hub.auth.tokens import Principal
from lucid_hub.config import Settings
from lucid_hub.db.models import WindowedQuery, WindowedResult
from lucid_hub.db.session import Database
from lucid_hub.db.times import aware, now
from lucid_hub.errors import ConflictError, NotFoundError


@dataclass(frozen=True)
class Element:
    """One stored element: its sequence, when it was made, and its body."""

    sequence: int
    received: datetime
    body: dict[str, Any]


def taken(name: str) -> ConflictError:
    return ConflictError(f"a windowed query of yours named {name} exists; delete it first or choose another name")


class WindowRecords:
    """The windowed queries' rows and stored results."""

    def __init__(self, settings: Settings, db: Database) -> None:
        self.settings = settings
        self.db = db

    def held(self, account: str) -> int:
        """How many windowed queries the party holds (not ended)."""
        with self.db.session() as session:
            return session.scalar(select(func.count()).select_from(WindowedQuery).where(
                WindowedQuery.account == account, WindowedQuery.state != "ended")) or 0

    def named(self, account: str, name: str) -> bool:
        with self.db.session() as session:
            return session.scalar(select(WindowedQuery.id).where(WindowedQuery.account == account,
                                                                 WindowedQuery.name == name)) is not None

    def add(self, row: WindowedQuery) -> None:
        try:
            with self.db.session() as session:
                session.add(row)
        except IntegrityError:  # the same name registered at the same moment
            raise taken(row.name) from None

    def active_ids(self) -> list[str]:
        with self.db.session() as session:
            return list(session.scalars(select(WindowedQuery.id).where(WindowedQuery.state == "active")))

    def active(self, ident: str) -> WindowedQuery | None:
        """The query, detached, while it is active."""
        with self.db.session() as session:
            row = session.get(WindowedQuery, ident)
            if row is None or row.state != "active":
                return None
            session.expunge(row)
            return row

    def own(self, caller: Principal, name: str) -> WindowedQuery:
        """The caller's query of that name (names are each party's own: another's is unknown)."""
        with self.db.session() as session:
            row = session.scalars(select(WindowedQuery).where(WindowedQuery.account == caller.account,
                                                              WindowedQuery.name == name[:64])).one_or_none()
            if row is None:
                raise NotFoundError(f"no windowed query {name[:64]} of yours")
            session.expunge(row)
            return row

    def messages(self, ident: str, after: int, limit: int) -> list[tuple[int, dict[str, Any]]]:
        with self.db.session() as session:
            found = session.execute(select(WindowedResult.sequence, WindowedResult.body).where(
                WindowedResult.query == ident, WindowedResult.sequence > after)
                .order_by(WindowedResult.sequence).limit(limit)).all()
        return [(seq, json.loads(body)) for seq, body in found]

    def elements(self, ident: str, first: int, last: int) -> list[Element]:
        """The kept elements numbered first..last, with when each was made."""
        with self.db.session() as session:
            found = session.execute(select(WindowedResult).where(
                WindowedResult.query == ident, WindowedResult.sequence >= first, WindowedResult.sequence <= last)
                .order_by(WindowedResult.sequence)).scalars().all()
            return [Element(r.sequence, aware(r.created_at), json.loads(r.body)) for r in found]

    def stored(self, ident: str, sequence: int) -> dict[str, Any] | None:
        with self.db.session() as session:
            stored = session.get(WindowedResult, (ident, sequence))
            return None if stored is None else dict(json.loads(stored.body))

    def advance(self, row: WindowedQuery, element: dict[str, Any]) -> bool:
        """Store the element of the window that ended and the query's next window; prune
        what is no longer kept. Whether the query was still active (paused or deleted
        meanwhile: nothing is stored)."""
        with self.db.session() as session:
            changed = cast(CursorResult[Any], session.execute(update(WindowedQuery).where(
                WindowedQuery.id == row.id, WindowedQuery.state == "active").values(
                sequence=row.sequence, next_end_at=row.next_end_at, next_end_position=row.next_end_position,
                updated_at=now()))).rowcount
            if not changed:
                return False
            session.add(WindowedResult(query=row.id, sequence=row.sequence, body=json.dumps(element),
                                       created_at=now()))
            kept_from = row.sequence - self.settings.query_retain
            session.execute(delete(WindowedResult).where(WindowedResult.query == row.id,
                                                         WindowedResult.sequence <= kept_from))
            return True

    def change(self, ident: str, **values: Any) -> None:
        with self.db.session() as session:
            session.execute(update(WindowedQuery).where(WindowedQuery.id == ident).values(**values))

    def end(self, ident: str, reason: str) -> None:
        self.change(ident, state="ended", reason=reason[:1024], updated_at=now())

    def delete(self, ident: str) -> None:
        with self.db.session() as session:
            session.execute(delete(WindowedResult).where(WindowedResult.query == ident))
            session.execute(delete(WindowedQuery).where(WindowedQuery.id == ident))
