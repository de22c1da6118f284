"""Each graph's Linked Data Notifications inbox (docs/streams.md, "Inboxes"): partners post
activities about a graph (a mirror announces each patch it applied); the graph's writers
read them all, each sender its own; a follower hears of each new one at once.

A notification is kept as the statements it carried (N-Triples), so that it is served in any
RDF syntax, with what the listing and the admin view need beside them (its activities'
types and objects). Its IRI is `/inbox/notifications/{uuid}`, and relative IRIs in the body
resolve against it (`"@id": ""` is the notification itself).
"""

from __future__ import annotations

import hashlib
import threading
import time
import uuid
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import pyoxigraph as ox
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError

from lucid_hub.db.models import Notification
from lucid_hub.db.session import Database
from lucid_hub.errors import InputError, NotFoundError, RateLimitedError, ReplayError
from lucid_hub.streams.activities import AS, AS_HTTPS, RDF_TYPE, activities, parse_notification

MAX_STATEMENTS = 10_000
LIST_MAX = 1000  # notifications one listing names at most (`size=`)


class AlreadyReceived(ReplayError):
    """The same sender posted the same body to the same inbox before: nothing new is stored."""


class ConstraintsUnmet(InputError):
    """The notification is RDF but not what the inbox takes (LDN §4.2: 4xx + ldp:constrainedBy)."""


@dataclass(frozen=True)
class Received:
    seq: int
    id: str
    graph: str
    sender: str
    kinds: tuple[str, ...]
    objects: tuple[str, ...]
    body: str
    created_at: datetime

    @classmethod
    def of(cls, row: Notification) -> Received:
        return cls(row.seq, row.id, row.graph, row.sender, tuple(row.kinds.split()),
                   tuple(o for o in row.objects.split("\n") if o), row.body, row.created_at)


class SenderLimiter:
    """At most `limit` notifications per sender and minute (a sliding window), per process."""

    def __init__(self, limit: int, window: float = 60.0) -> None:
        self.limit, self.window = limit, window
        self._sent: defaultdict[str, deque[float]] = defaultdict(deque)
        self._lock = threading.Lock()
        # sender -> (notifications refused, first and last refusal: wall-clock seconds), for
        # the console: an inbox refusing a partner needs attention (the last 1,000 senders)
        self.refused: dict[str, tuple[int, float, float]] = {}

    def refusals(self, since: float) -> dict[str, tuple[int, float, float]]:
        """The senders refused since `since` (wall-clock seconds): (count, first, last)."""
        with self._lock:
            return {k: v for k, v in self.refused.items() if v[2] >= since}

    def take(self, sender: str) -> None:
        now = time.monotonic()
        with self._lock:
            sent = self._sent[sender]
            while sent and sent[0] <= now - self.window:
                sent.popleft()
            if len(sent) >= self.limit:
                count, first, _last = self.refused.pop(sender, (0, time.time(), 0.0))
                self.refused[sender] = (count + 1, first, time.time())
                while len(self.refused) > 1_000:
                    self.refused.pop(next(iter(self.refused)))
                wait = max(1, int(sent[0] + self.window - now + 0.999))
                raise RateLimitedError(f"at most {self.limit} notifications a minute per sender; "
                                       f"try again in {wait} s", wait)
            sent.append(now)
            if len(self._sent) > 10_000:  # forget idle senders
                for key in [k for k, v in self._sent.items() if not v or v[-1] <= now - self.window][:5_000]:
                    del self._sent[key]


class Inbox:
    """The inboxes of a hub's graphs (one table; one condition to wake followers)."""

    def __init__(self, db: Database, url_of: Callable[[str], str], *, max_bytes: int, per_minute: int,
                 poll: float = 1.0) -> None:
        self.db = db
        self.url_of = url_of  # a notification's IRI from its id
        self.max_bytes = max_bytes
        self.limiter = SenderLimiter(per_minute)
        self.poll = poll
        self._cond = threading.Condition()
        self._generation = 0

    def receive(self, graph: str, sender: str, endpoint_id: str, body: bytes, media_type: str) -> Received:
        """Store a notification; AlreadyReceived for a replay, ConstraintsUnmet when it holds no
        activity, RateLimitedError past the sender's rate."""
        digest = hashlib.sha256(b"\n".join([graph.encode(), sender.encode(), body])).hexdigest()
        with self.db.session() as session:
            seen = session.scalar(select(Notification.id).where(Notification.digest == digest))
        if seen is not None:
            raise AlreadyReceived(f"this notification was received before: {self.url_of(seen)}", self.url_of(seen))
        self.limiter.take(sender)
        ident = str(uuid.uuid4())
        triples = parse_notification(body, media_type, self.url_of(ident), MAX_STATEMENTS, self.max_bytes)
        found = activities(triples)
        if not found:
            raise ConstraintsUnmet("the notification holds no ActivityStreams activity with an actor and an "
                                   "object (see the inbox's ldp:constrainedBy)")
        kinds = sorted({t.object.value.rsplit("#", 1)[1] for t in triples if t.subject in found
                        and t.predicate.value == RDF_TYPE and isinstance(t.object, ox.NamedNode)
                        and t.object.value.startswith((AS, AS_HTTPS))})
        objects = sorted({t.object.value for t in triples if t.subject in found
                          and t.predicate.value in (AS + "object", AS_HTTPS + "object")
                          and isinstance(t.object, ox.NamedNode)})
        row = Notification(id=ident, graph=graph, sender=sender, endpoint_id=endpoint_id, digest=digest,
                           kinds=" ".join(kinds)[:1024], objects="\n".join(objects),
                           body="".join(f"{t} .\n" for t in triples), created_at=datetime.now(UTC))
        try:
            with self.db.session() as session:
                session.add(row)
        except IntegrityError:  # the same replay, at the same moment, from another request
            with self.db.session() as session:
                seen = session.scalar(select(Notification.id).where(Notification.digest == digest))
            if seen is None:
                raise
            raise AlreadyReceived(f"this notification was received before: {self.url_of(seen)}",
                                  self.url_of(seen)) from None
        self.wake()
        return Received.of(row)

    def wake(self) -> None:
        """A notification was stored: followers look."""
        with self._cond:
            self._generation += 1
            self._cond.notify_all()

    def listing(self, graph: str, sender: str | None, *, size: int = 100, before: int | None = None,
                after: int | None = None) -> list[Received]:
        """The graph's notifications, newest first (`after`: oldest first); only `sender`'s
        when given (a party that does not write the graph sees its own)."""
        query = select(Notification).where(Notification.graph == graph)
        if sender is not None:
            query = query.where(Notification.sender == sender)
        if before is not None:
            query = query.where(Notification.seq < before)
        if after is not None:
            query = query.where(Notification.seq > after).order_by(Notification.seq)
        else:
            query = query.order_by(Notification.seq.desc())
        with self.db.session() as session:
            return [Received.of(r) for r in session.scalars(query.limit(min(size, LIST_MAX)))]

    def latest_per_sender(self, graph: str, kind: str) -> list[Received]:
        """Each sender's newest notification about the graph holding an activity of `kind`
        (receipts: each partner's newest Announce)."""
        newest = (select(func.max(Notification.seq)).where(Notification.graph == graph)
                  .where(Notification.kinds.contains(kind)).group_by(Notification.sender))
        with self.db.session() as session:
            rows = session.scalars(select(Notification).where(Notification.seq.in_(newest))
                                   .order_by(Notification.sender))
            return [Received.of(r) for r in rows if kind in r.kinds.split()]

    def get(self, ident: str) -> Received:
        try:
            uuid.UUID(ident)
        except ValueError:
            raise NotFoundError("no such notification") from None
        with self.db.session() as session:
            row = session.scalar(select(Notification).where(Notification.id == ident))
            if row is None:
                raise NotFoundError("no such notification")
            return Received.of(row)

    def last_seq(self, graph: str) -> int:
        newest = self.listing(graph, None, size=1)
        return newest[0].seq if newest else 0

    def after(self, graph: str, sender: str | None, after: int) -> list[Received]:
        """The graph's notifications after position `after` (up to LIST_MAX; a push channel's poll)."""
        return self.listing(graph, sender, size=LIST_MAX, after=after)

    def generation(self) -> int:
        """A counter of notifications received by this process (for `wait`)."""
        return self._generation

    def wait(self, generation: int, timeout: float) -> int:
        """Until a notification after `generation` arrives (another process's are found
        within `poll` seconds: the wait is that long at most); the generation now."""
        with self._cond:
            if self._generation == generation:
                self._cond.wait(min(self.poll, timeout))
            return self._generation


def senders(db: Database, limit: int = 200) -> list[dict[str, object]]:
    """Who sent what to which inbox: per graph and sender, how many notifications and the
    newest one's time; the most recently active first (the console's inboxes page)."""
    last = func.max(Notification.created_at)
    query = (select(Notification.graph, Notification.sender, func.count().label("count"), last.label("last"))
             .group_by(Notification.graph, Notification.sender).order_by(last.desc()).limit(limit))
    with db.engine.connect() as conn:
        return [{"graph": r.graph, "sender": r.sender, "count": int(r[2]), "last": r.last}
                for r in conn.execute(query)]
