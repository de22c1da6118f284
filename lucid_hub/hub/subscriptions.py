"""The WebSub hub's subscriptions: requests of authorised clients, verification of intent,
leases, the owner rule and the cap per client, denial and cancellation. Delivering the
patches to the subscriptions is `lucid_hub.delivery`'s work."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError

from lucid_hub.archive import Archive
from lucid_hub.config import Settings
from lucid_hub.db.models import Subscription
from lucid_hub.db.session import Database
from lucid_hub.db.times import aware, now
from lucid_hub.errors import ForbiddenError, NotFoundError
from lucid_hub.hub.notices import CallbackNotices
from lucid_hub.hub.protocol import NotYoursError, Request

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
    def subscriptions(self) -> list[dict[str, Any]]:
        with self.db.session() as session:
            rows = session.execute(select(Subscription, Archive.length_of(Subscription.graph))
                                   .order_by(Subscription.id)).all()
            return [{"id": s.id, "graph": s.graph, "callback": s.callback, "account": s.account,
                     "endpoint_id": s.endpoint_id, "state": s.state, "media_type": s.media_type,
                     "lease_expires_at": aware(s.lease_expires_at).isoformat(),
                     "lag": max((length or 0) - s.delivered_seq, 0), "delivered": s.delivered_total,
                     "failures": s.failures_total, "attempts": s.attempts, "last_error": s.last_error,
                     "last_success_at": aware(s.last_success_at).isoformat() if s.last_success_at else None,
                     "signed": bool(s.secret)} for s, length in rows]

    def cancel(self, sid: int, reason: str) -> None:
        """End a subscription (an admin's decision): the row goes, the callback is told why."""
        with self.db.session() as session:
            row = session.get(Subscription, sid)
            if row is None:
                raise NotFoundError(f"no subscription {sid}")
            callback, graph = row.callback, row.graph
            session.delete(row)
        self.notices.deny(callback, graph, reason)
