"""Query subscriptions and their notifications in the database: every statement on
`query_subscriptions` and `query_notifications`. What is here survives restarts and is what
processes that do not evaluate (and channels in any process) read."""

from __future__ import annotations

import json
import time
from typing import Any, cast

from sqlalchemy import Table, bindparam, delete, insert, select, update

from lucid_hub.auth.tokens import Principal
from lucid_hub.config import Settings
from lucid_hub.db.models import QueryNotification, QuerySubscription
from lucid_hub.db.session import Database
from lucid_hub.db.times import now
from lucid_hub.errors import (
    ForbiddenError,
    InputError,
    InputTooLargeError,
    NotFoundError,
    QueryLimitExceeded,
    StoreError,
)
from lucid_hub.queries import results as rs
from lucid_hub.queries.index import Live

POLL = 0.25  # seconds between looks at the database for other processes' work

# What a process that does not evaluate answers a request the evaluating process refused.
REFUSALS: dict[str, type[Exception]] = {e.__name__: e for e in (
    InputError, InputTooLargeError, ForbiddenError, QueryLimitExceeded, StoreError)}


def iri_list(value: str | None) -> list[str] | None:
    """A stored list of graph IRIs (None: not given)."""
    return None if value is None else list(json.loads(value))


class QueryRecords:
    """The query subscriptions' rows and notifications."""

    def __init__(self, settings: Settings, db: Database) -> None:
        self.settings = settings
        self.db = db

    def held(self, account: str) -> int:
        """How many subscriptions the party holds (active or waiting to be)."""
        with self.db.session() as session:
            return len(session.scalars(select(QuerySubscription.id).where(
                QuerySubscription.account == account,
                QuerySubscription.state.in_(("active", "pending")))).all())

    def add_pending(self, row: QuerySubscription) -> None:
        with self.db.session() as session:
            session.add(row)

    def await_first(self, sid: str) -> None:
        """In a process that does not evaluate: wait for the leader to take the subscription
        (raises what the leader refused it with)."""
        deadline = time.monotonic() + self.settings.query_budget + 30
        while time.monotonic() < deadline:
            with self.db.session() as session:
                row = session.get(QuerySubscription, sid)
                assert row is not None
                if row.state == "ended":
                    session.delete(row)
                    raise REFUSALS.get(row.refusal, InputError)(row.reason)
                if row.state == "active":
                    return
            time.sleep(POLL)  # polling the database: the leader is another process
        raise StoreError("the hub's evaluating process did not take the subscription in time; try again")

    def store_first(self, row: QuerySubscription, message: dict[str, Any], *, new: bool) -> None:
        """An activated subscription with its first notification (sequence 0)."""
        with self.db.session() as session:
            if new:
                session.add(row)
            else:
                session.merge(row)
            session.flush()  # the notification refers to it
            session.add(QueryNotification(subscription=row.id, sequence=0, body=json.dumps(message),
                                          created_at=row.updated_at))

    def write(self, written: list[tuple[Live, dict[str, Any]]]) -> None:
        """Notifications with their subscriptions' new results and sequences (one
        transaction); what is no longer kept (LUCID_QUERY_RETAIN) pruned."""
        stamp = now()
        subscriptions = cast(Table, QuerySubscription.__table__)
        notifications = cast(Table, QueryNotification.__table__)
        with self.db.session() as session:
            session.execute(update(subscriptions).where(subscriptions.c.id == bindparam("b_id")).values(
                sequence=bindparam("b_sequence"), results=bindparam("b_results"), updated_at=stamp), [
                {"b_id": live.id, "b_sequence": live.sequence, "b_results": json.dumps(live.results.as_dict())}
                for live, _message in written])
            session.execute(insert(notifications), [
                {"subscription": live.id, "sequence": live.sequence, "body": json.dumps(message), "created_at": stamp}
                for live, message in written])
            for live, _message in written:
                if live.sequence % 100 == 0 or live.sequence > self.settings.query_retain:
                    session.execute(delete(QueryNotification).where(
                        QueryNotification.subscription == live.id,
                        QueryNotification.sequence <= live.sequence - self.settings.query_retain))

    def end(self, sid: str, reason: str, refusal: str = "") -> None:
        with self.db.session() as session:
            session.execute(update(QuerySubscription).where(QuerySubscription.id == sid).values(
                state="ended", reason=reason[:1024], refusal=refusal, updated_at=now()))

    def rows(self, state: str) -> list[QuerySubscription]:
        with self.db.session() as session:
            rows = list(session.scalars(select(QuerySubscription).where(QuerySubscription.state == state)
                                        .order_by(QuerySubscription.created_at)))
            session.expunge_all()
            return rows

    def own(self, caller: Principal, sid: str) -> QuerySubscription:
        """The subscription, when it is the caller's (404 otherwise: ids are not disclosed)."""
        with self.db.session() as session:
            row = session.get(QuerySubscription, sid[:64])
            if row is None or row.account != caller.account:
                raise NotFoundError(f"no query subscription {sid[:64]} of yours")
            session.expunge(row)
            return row

    def state(self, sid: str) -> tuple[str, str, int]:
        """(state, reason, last sequence) of a subscription."""
        with self.db.session() as session:
            row = session.get(QuerySubscription, sid)
            if row is None:
                return "ended", "the subscription does not exist", -1
            return row.state, row.reason, row.sequence

    def messages(self, sid: str, after: int, limit: int = 100) -> list[tuple[int, dict[str, Any]]]:
        """Notifications after sequence `after`, in order; when the first of them is no longer
        kept, one reset message (the current results, marked `reset`) in their place."""
        with self.db.session() as session:
            rows = session.execute(select(QueryNotification.sequence, QueryNotification.body).where(
                QueryNotification.subscription == sid, QueryNotification.sequence > after)
                .order_by(QueryNotification.sequence).limit(limit)).all()
            if rows and rows[0][0] == after + 1:
                return [(seq, json.loads(body)) for seq, body in rows]
            sub = session.get(QuerySubscription, sid)
            if sub is None or sub.sequence <= after or sub.state == "pending":
                return []
            current = rs.Results.of(json.loads(sub.results))
            reset = rs.notification(sid, sub.alias, sub.sequence, rs.first(current), reset=True)
            return [(sub.sequence, reset)]
