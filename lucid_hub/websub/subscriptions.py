"""The WebSub hub's subscriptions: requests of authorised clients, verification of intent,
leases, the owner rule and the cap per client, denial and cancellation. Delivering the
patches to the subscriptions is `lucid_hub.delivery`'s work."""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, case, func, or_, select
from sqlalchemy.exc import IntegrityError

from lucid_hub.archive import Archive
from lucid_hub.config import Settings
from lucid_hub.db.models import Graph, Subscription
from lucid_hub.db.session import Database
from lucid_hub.db.times import aware, now
from lucid_hub.errors import ForbiddenError, NotFoundError
from lucid_hub.websub.notices import CallbackNotices
from lucid_hub.websub.protocol import NotYoursError, Request

log = logging.getLogger(__name__)




class WebSubHub:
    """Subscriptions of this hub's graphs (the `subscriptions` table's owner with delivery,
    which moves their cursors)."""

    def __init__(self, settings: Settings, db: Database, archive: Archive, notices: CallbackNotices,
                 on_subscribed: Callable[[str], None] = lambda _graph: None) -> None:
        """`on_subscribed(graph)`: a subscription was recorded (delivery starts looking)."""
        self.settings = settings
        self.db = db
        self.archive = archive
        self.notices = notices
        self.allowed = notices.allowed
        self.on_subscribed = on_subscribed

    # --- subscription requests ------------------------------------------------------
    def accept(self, request: Request) -> None:
        """Queue the verification of intent (the request was answered 202). A subscription
        belongs to the client that made it: another client (not an admin) may neither renew
        nor cancel it, whatever its callback prefixes cover (NotYoursError, before anything
        is sent to the callback; checked again when the verified request is recorded)."""
        with self.db.session() as session:
            self._check_request(session, request)
        self.notices.submit(self._verify, request)

    def _check_request(self, session: Any, request: Request) -> None:
        """The owner rule, and for a new subscription the cap on subscriptions per client."""
        owner = session.scalars(select(Subscription.endpoint_id).where(
            Subscription.graph == request.graph, Subscription.callback == request.callback)).first()
        if owner is not None and owner != request.endpoint_id and not request.admin:
            raise NotYoursError(f"the subscription of this callback to <{request.graph}> belongs to another "
                                "client; only that client or an admin may change it")
        if owner is None and request.mode == "subscribe":
            cap = self.settings.max_subscriptions_per_client
            held = session.scalar(select(func.count()).select_from(Subscription).where(
                Subscription.endpoint_id == request.endpoint_id))
            if held >= cap:
                raise ForbiddenError(f"this client holds {held} subscriptions, its limit "
                                     "(LUCID_MAX_SUBSCRIPTIONS_PER_CLIENT); unsubscribe others first")

    def deny(self, callback: str, topic: str, reason: str) -> None:
        """Tell a callback its subscription was denied (or has been cancelled)."""
        self.notices.deny(callback, topic, reason)

    def _verify(self, request: Request) -> None:
        if not self.notices.confirmed(request):
            return
        try:
            if request.mode == "subscribe":
                self._subscribe(request)
            else:
                self._unsubscribe(request)
        except ForbiddenError as exc:  # another client subscribed the callback since, or the cap
            log.warning("verified %s to <%s> not recorded: %s", request.mode, request.graph, exc)
        except Exception:  # in a pool thread: said here, or nowhere (the request was answered 202)
            log.exception("recording a verified %s to <%s> failed", request.mode, request.graph)

    def _subscribe(self, request: Request) -> None:
        try:
            self._record_subscription(request)
        except IntegrityError:  # the same subscription, verified at the same moment (a replay):
            self._record_subscription(request)  # it exists now; this request renews it
        self.on_subscribed(request.graph)

    def _record_subscription(self, request: Request) -> None:
        with self.db.session() as session:
            self._check_request(session, request)  # another client may have subscribed meanwhile
            length = self.archive.length(request.graph)
            row = session.scalars(select(Subscription).where(
                Subscription.graph == request.graph, Subscription.callback == request.callback)).first()
            expires = now() + timedelta(seconds=request.lease_seconds)
            if row is None:  # new: deliveries start with the graph's next patch
                session.add(Subscription(
                    graph=request.graph, callback=request.callback, account=request.account,
                    endpoint_id=request.endpoint_id, groups=" ".join(sorted(request.groups)), secret=request.secret,
                    media_type=request.media_type, state="active", lease_expires_at=expires, delivered_seq=length,
                    attempts=0, next_attempt_at=now(), last_error="", delivered_total=0, failures_total=0,
                    created_at=now()))
            else:  # renewal: the same subscription, a new lease (and secret, party, format)
                if row.state not in ("active", "failed"):  # a failed one resumes where it stopped
                    row.delivered_seq = length
                row.account, row.endpoint_id = request.account, request.endpoint_id
                row.groups = " ".join(sorted(request.groups))
                row.secret, row.media_type = request.secret, request.media_type
                row.state, row.lease_expires_at, row.attempts, row.next_attempt_at = "active", expires, 0, now()

    def _unsubscribe(self, request: Request) -> None:
        with self.db.session() as session:
            self._check_request(session, request)
            row = session.scalars(select(Subscription).where(
                Subscription.graph == request.graph, Subscription.callback == request.callback)).first()
            if row is not None:
                session.delete(row)

    # --- administration -------------------------------------------------------------
    def subscriptions(self, *, graph: str | None = None, ids: Collection[int] | None = None,
                      worst_first: bool = False, offset: int = 0, limit: int | None = None,
                      troubled: tuple[int, datetime] | None = None) -> list[dict[str, Any]]:
        """Every subscription, or those to `graph`, or those with these `ids`; in id order, or
        `worst_first` (failed first, then the farthest behind); `offset` and `limit` a page.
        `troubled` (lag, quiet since): only those that need attention — failed, cancelled (access
        withdrawn), or active and failing now (attempts since the last success), that many
        patches behind, or behind without a success since then (an expired one is the
        subscriber's choice). (Core, the columns it shows, and the graphs' lengths by a join: a
        thousand rows are read for every console page and live update.)"""
        s = Subscription
        behind = func.coalesce(Graph.length, 0) - s.delivered_seq
        only = self._only(graph, ids)
        if troubled is not None:
            lag, quiet = troubled
            quiet_behind = and_(behind > 0, func.coalesce(s.last_success_at, s.created_at) < quiet)
            only.append(or_(s.state.in_(("failed", "cancelled")),
                            and_(s.state == "active", or_(s.attempts > 0, behind >= lag, quiet_behind))))
        query = (select(s.id, s.graph, s.callback, s.account, s.endpoint_id, s.state, s.media_type,
                        s.lease_expires_at, s.delivered_seq, s.delivered_total, s.failures_total, s.attempts,
                        s.last_error, s.last_success_at, s.created_at, (func.length(s.secret) > 0).label("signed"),
                        Graph.length)
                 .outerjoin(Graph, Graph.iri == s.graph).where(*only)
                 .order_by(*((case((s.state == "failed", 0), else_=1), behind.desc(), s.graph, s.callback, s.id)
                             if worst_first else (s.id,)))
                 .offset(offset).limit(limit))
        with self.db.engine.connect() as conn:
            rows = conn.execute(query).all()
        return [{"id": r.id, "graph": r.graph, "callback": r.callback, "account": r.account,
                 "endpoint_id": r.endpoint_id, "state": r.state, "media_type": r.media_type,
                 "lease_expires_at": aware(r.lease_expires_at).isoformat(),
                 "lag": max((r.length or 0) - r.delivered_seq, 0), "delivered_seq": r.delivered_seq,
                 "delivered": r.delivered_total,
                 "failures": r.failures_total, "attempts": r.attempts, "last_error": r.last_error,
                 "last_success_at": aware(r.last_success_at).isoformat() if r.last_success_at else None,
                 "created_at": aware(r.created_at).isoformat(), "signed": bool(r.signed)} for r in rows]

    def count(self, *, graph: str | None = None) -> int:
        """How many subscriptions there are (to `graph`)."""
        with self.db.engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(Subscription)
                                    .where(*self._only(graph, None))).scalar_one())

    def states(self) -> tuple[dict[str, int], int]:
        """How many subscriptions are in each state, and their delivery failures in total."""
        with self.db.engine.connect() as conn:
            rows = conn.execute(select(Subscription.state, func.count(), func.sum(Subscription.failures_total))
                                .group_by(Subscription.state)).all()
        return {state: int(n) for state, n, _f in rows}, sum(int(f or 0) for _s, _n, f in rows)

    @staticmethod
    def _only(graph: str | None, ids: Collection[int] | None) -> list[Any]:
        return ([Subscription.graph == graph] if graph is not None else []) + \
            ([Subscription.id.in_(list(ids))] if ids is not None else [])

    def cancel(self, sid: int, reason: str) -> None:
        """End a subscription (an admin's decision): the row goes, the callback is told why."""
        with self.db.session() as session:
            row = session.get(Subscription, sid)
            if row is None:
                raise NotFoundError(f"no subscription {sid}")
            callback, graph = row.callback, row.graph
            session.delete(row)
        self.notices.deny(callback, graph, reason)
