"""Subscriptions whose WebSocket went away (docs/queries.md, "Sockets that go away").

SEPA's engine pings its WebSocket clients and frees what a client that stopped answering
held. Here a subscription outlives its socket (it is durable: the client may `resume`), so a
socket that closes without unsubscribing (no pong within the timeout, a dropped connection)
leaves its subscriptions detached: each is ended once `LUCID_QUERY_ORPHAN_SECONDS` pass
without it being resumed or read. Webhook subscriptions have no socket and are never
detached. This is the leader's role `query-orphans`.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from sqlalchemy import select, update

from lucid_hub.config import Settings
from lucid_hub.db.models import QuerySubscription
from lucid_hub.db.session import Database
from lucid_hub.db.times import now


class Orphans:
    def __init__(self, settings: Settings, db: Database, end: Callable[[str, str], None]) -> None:
        self.settings = settings
        self.db = db
        self.end = end  # ends a subscription with a reason (in the evaluating process, or its row)

    def detach(self, spuids: list[str]) -> None:
        """The socket that carried these subscriptions closed: their grace period starts."""
        if not spuids:
            return
        with self.db.session() as session:
            session.execute(update(QuerySubscription).where(
                QuerySubscription.id.in_(spuids), QuerySubscription.state != "ended",
                QuerySubscription.callback.is_(None)).values(detached_at=now()))

    def attach(self, spuid: str) -> None:
        """The subscription is read again (resumed, its notifications or events asked for)."""
        with self.db.session() as session:
            session.execute(update(QuerySubscription).where(
                QuerySubscription.id == spuid, QuerySubscription.detached_at.is_not(None)).values(detached_at=None))

    def sweep(self) -> int:
        """End the subscriptions detached longer than the grace period; how many."""
        limit = now() - timedelta(seconds=self.settings.query_orphan_seconds)
        with self.db.session() as session:
            expired = list(session.scalars(select(QuerySubscription.id).where(
                QuerySubscription.state != "ended", QuerySubscription.detached_at.is_not(None),
                QuerySubscription.detached_at < limit)))
        for sid in expired:
            self.end(sid, f"its WebSocket closed (the client left or answered no ping) and it was not resumed "
                          f"within {self.settings.query_orphan_seconds:g} s (LUCID_QUERY_ORPHAN_SECONDS)")
        return len(expired)
