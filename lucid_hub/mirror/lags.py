"""How far each mirror is behind its publisher, as the publishers last said: asked once a
minute by the leader's role `mirror-lag` (and whenever the console's mirrors page asks), kept in
the mirror's row, so that every replica's overview can name a mirror that stays behind without
asking anyone while it renders.

A mirror is "behind" when two askings at least BEHIND_FOR seconds apart both found patches
after its head: a delivery in flight (a patch or two for a second) is not named, a publisher
that stopped delivering is."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import select, update

from lucid_hub.db.models import Mirror
from lucid_hub.db.session import Database
from lucid_hub.db.times import aware

EVERY = 60.0  # seconds between two askings of every active mirror's publisher
BEHIND_FOR = 30.0  # a lag seen this long (two askings) makes the mirror behind


@dataclass(frozen=True)
class Lag:
    patches: int  # after our head, on the publisher's first archive page
    more: bool  # further pages after it
    asked: float  # time.time() of the asking
    since: float | None  # when a lag was first seen without a lag-free asking since (None: none now)

    @property
    def behind(self) -> bool:
        return self.since is not None and self.asked - self.since >= BEHIND_FOR


def _at(seconds: float | None) -> datetime | None:
    return None if seconds is None else datetime.fromtimestamp(seconds, UTC)


def _seconds(at: datetime | None) -> float | None:
    return None if at is None else aware(at).timestamp()


def _lag(row: Mirror) -> Lag | None:
    if row.lag_patches is None or row.lag_asked_at is None:
        return None
    return Lag(row.lag_patches, bool(row.lag_more), aware(row.lag_asked_at).timestamp(), _seconds(row.lag_since))


class Lags:
    """The publishers' last word on each mirror's lag, in the mirrors' rows."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def record(self, mirror_id: str, patches: int, more: bool, at: float | None = None) -> Lag:
        """One asking's answer; the lag keeps the time it was first seen while it lasts."""
        at = time.time() if at is None else at
        with self.db.session() as session:
            before = session.get(Mirror, mirror_id)
            since = None
            if (patches or more) and before is not None:
                previous = _lag(before)
                since = previous.since if previous is not None and previous.since is not None else at
            session.execute(update(Mirror).where(Mirror.id == mirror_id).values(
                lag_patches=patches, lag_more=more, lag_asked_at=_at(at), lag_since=_at(since)))
        return Lag(patches, more, at, since)

    def forget(self, mirror_id: str) -> None:
        with self.db.session() as session:
            session.execute(update(Mirror).where(Mirror.id == mirror_id, Mirror.lag_asked_at.is_not(None)).values(
                lag_patches=None, lag_more=False, lag_asked_at=None, lag_since=None))

    def all(self) -> dict[str, Lag]:
        """Every mirror's last word (mirror id -> lag), in one read."""
        with self.db.session() as session:
            return {row.id: lag for row in session.scalars(select(Mirror).where(Mirror.lag_asked_at.is_not(None)))
                    if (lag := _lag(row)) is not None}
