"""The mirrors' rows as the running hub moves them: every statement the subscriber side makes on
`mirrors` and `quarantined` (the registry's commands write the rows an admin adds or removes).

Each state change is a single conditional UPDATE: `lucid-hub mirror remove` may run meanwhile,
in another process, and must never be undone by a round that read the row before it."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, select, update

from lucid_hub.db.models import Mirror, Quarantined
from lucid_hub.db.session import Database
from lucid_hub.db.times import aware, now
from lucid_hub.errors import NotFoundError

log = logging.getLogger(__name__)
LIVE = ("new", "subscribing", "active", "error")  # states in which a mirror follows its publisher


class MirrorRows:
    """The subscriber side's statements on the mirrors' tables."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def get(self, mirror_id: str) -> Mirror:
        """The mirror's row, detached (raises NotFoundError when it is gone)."""
        with self.db.session() as session:
            row = session.get(Mirror, mirror_id)
            if row is None:
                raise NotFoundError(f"no mirror {mirror_id}")
            session.expunge(row)
            return row

    def for_rounds(self) -> list[tuple[str, str, Any, str]]:
        """(id, state, renew_at, pinned JWKS) of every mirror: what a schedule decides on."""
        with self.db.session() as session:
            return [(r.id, r.state, aware(r.renew_at) if r.renew_at is not None else None, r.jwks)
                    for r in session.scalars(select(Mirror))]

    def failing(self) -> dict[str, tuple[str, datetime]]:
        """graph -> (last error, failing since), for the mirrors whose last round failed."""
        with self.db.session() as session:
            rows = session.execute(select(Mirror.graph, Mirror.last_error, Mirror.failing_since)
                                   .where(Mirror.failing_since.is_not(None))).all()
        return {graph: (error, aware(since)) for graph, error, since in rows if since is not None}

    def set_failing(self, mirror_id: str, failing: bool) -> None:
        """A round failed (the first of a row of failures is kept), or one went well."""
        with self.db.session() as session:
            if failing:
                session.execute(update(Mirror).where(Mirror.id == mirror_id, Mirror.failing_since.is_(None))
                                .values(failing_since=now()))
            else:
                session.execute(update(Mirror).where(Mirror.id == mirror_id).values(failing_since=None))

    def subscribing(self, mirror_id: str, retry_seconds: float) -> None:
        """A (re)subscription is asked for: asked again after `retry_seconds` unless verified."""
        with self.db.session() as session:
            session.execute(update(Mirror).where(Mirror.id == mirror_id).values(
                renew_at=now() + timedelta(seconds=retry_seconds)))
            session.execute(update(Mirror).where(Mirror.id == mirror_id, Mirror.state.in_(("new", "error")))
                            .values(state="subscribing"))

    def subscribing_failed(self, mirror_id: str, error: str) -> None:
        with self.db.session() as session:
            session.execute(update(Mirror).where(Mirror.id == mirror_id).values(last_error=error[:1024]))
            session.execute(update(Mirror).where(Mirror.id == mirror_id, Mirror.state == "subscribing")
                            .values(state="error"))

    def activate(self, mirror_id: str, lease_seconds: int) -> bool:
        """The publisher's hub verified our subscription: active for the lease, renewed at
        its half. Whether the mirror was waiting for it (else it was removed or revoked)."""
        with self.db.session() as session:
            result = session.execute(update(Mirror).where(Mirror.id == mirror_id, Mirror.state.in_(LIVE)).values(
                state="active", last_error="", lease_expires_at=now() + timedelta(seconds=lease_seconds),
                renew_at=now() + timedelta(seconds=lease_seconds / 2)))
            return getattr(result, "rowcount", 0) == 1

    def revoke(self, mirror_id: str, reason: str) -> bool:
        """The publisher withdrew access (unless the mirror is being removed); whether the
        mirror still exists."""
        with self.db.session() as session:
            if session.get(Mirror, mirror_id) is None:
                return False
            session.execute(update(Mirror).where(Mirror.id == mirror_id, Mirror.state != "removing").values(
                state="revoked", last_error=f"denied by the publisher: {reason}"[:1024]))
            return True

    def delete(self, mirror_id: str) -> None:
        with self.db.session() as session:
            session.execute(delete(Mirror).where(Mirror.id == mirror_id))

    def delivery_keys(self, mirror_id: str) -> tuple[str, str, str] | None:
        """(HMAC secret, pinned JWKS, graph) of a mirror that takes deliveries; None when it
        is gone, revoked or being removed."""
        with self.db.session() as session:
            row = session.get(Mirror, mirror_id)
            if row is None or row.state in ("revoked", "removing"):
                return None
            return row.hmac_secret, row.jwks, row.graph

    def count_hmac_failure(self, mirror_id: str) -> None:
        with self.db.session() as session:
            session.execute(update(Mirror).where(Mirror.id == mirror_id).values(
                hmac_failures_total=Mirror.hmac_failures_total + 1))

    def count_applied(self, mirror_id: str, count: int) -> None:
        if count:
            with self.db.session() as session:
                session.execute(update(Mirror).where(Mirror.id == mirror_id).values(
                    applied_total=Mirror.applied_total + count, last_applied_at=now()))

    def quarantine(self, mirror_id: str, patch_id: str | None, body: bytes, reason: str) -> None:
        log.warning("mirror %s: patch %s quarantined: %s", mirror_id, patch_id or "(unidentified)", reason)
        with self.db.session() as session:
            session.add(Quarantined(mirror_id=mirror_id, patch_id=patch_id, reason=reason[:1024], body=body,
                                    received_at=now()))
            session.execute(update(Mirror).where(Mirror.id == mirror_id).values(
                quarantined_total=Mirror.quarantined_total + 1, last_error=reason[:1024]))

    def quarantined(self, mirror_id: str) -> list[dict[str, Any]]:
        with self.db.session() as session:
            return [{"patch_id": q.patch_id, "reason": q.reason, "received_at": q.received_at.isoformat(),
                     "bytes": len(q.body)} for q in session.scalars(
                select(Quarantined).where(Quarantined.mirror_id == mirror_id).order_by(Quarantined.id))]

    def record_error(self, mirror_id: str, error: str, state: str | None = None) -> None:
        log.warning("mirror %s: %s", mirror_id, error)
        values: dict[str, Any] = {"last_error": error[:1024]}
        if state:
            values["state"] = state
        with self.db.session() as session:
            session.execute(update(Mirror).where(Mirror.id == mirror_id).values(**values))
