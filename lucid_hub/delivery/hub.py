"""The WebSub hub's work behind `/hub`: verification of intent, subscriptions with leases,
and delivery of each graph's patches to each subscriber, in chain order, signed.

Delivery is driven by a cursor per subscription (`delivered_seq`, the chain position the
callback last acknowledged), not by the log's offsets: the next POST is always the patch at
seq + 1, so a patch never overtakes an earlier one and retries keep the order. Pending
patches go out in batches and cursor advances are group-committed, so a crash repeats at
most the batch in flight (ids the subscriber has already applied). New patches wake the
deliverer; a scan every second catches retries that fall due and leases that end.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import random
import secrets
import socket
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol
from urllib.parse import urlencode, urlsplit, urlunsplit

import requests
import urllib3
from sqlalchemy import and_, or_, select, update

from lucid_hub.config import Settings
from lucid_hub.db.models import Graph, PatchRecord, Subscription
from lucid_hub.db.session import Database
from lucid_hub.delivery.safety import check_addresses, parse_cidrs
from lucid_hub.errors import InputError, LucidError, NotFoundError
from lucid_hub.policy.engine import Action, Party
from lucid_hub.publish import Publisher
from lucid_hub.rdf.canon import Canonicalizer
from lucid_hub.rdf.rdfpatch import MEDIA_TYPE as RDF_PATCH
from lucid_hub.rdf.rdfpatch import read_rdf_patch
from lucid_hub.rdf.serialization import write_patch

log = logging.getLogger(__name__)
MEDIA_TYPES = {RDF_PATCH: "rdf-patch", "application/trig": "trig", "application/ld+json": "jsonld"}
BATCH = 100  # patches one subscription gets in a row before others have their turn
RECHECK_SECONDS = 30.0  # a callback host's address check holds this long


def with_query(url: str, params: dict[str, str]) -> str:
    """The URL with `params` added to its own query string (which is preserved)."""
    parts = urlsplit(url)
    extra = urlencode(params)
    query = f"{parts.query}&{extra}" if parts.query else extra
    return urlunsplit((parts.scheme, parts.netloc, parts.path, query, parts.fragment))


def now() -> datetime:
    return datetime.now(UTC)


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo else value.replace(tzinfo=UTC)  # SQLite returns naive datetimes


@dataclass(frozen=True)
class Request:
    """A verified-to-be-well-formed (un)subscription request of an authorised party."""

    mode: str
    graph: str
    topic: str
    callback: str
    lease_seconds: int
    secret: str | None
    media_type: str
    account: str
    endpoint_id: str
    groups: frozenset[str]


class _GroupCommit:
    """Records cursor advances of many deliveries in one transaction (one commit instead of
    one per delivery). `advance` returns once its advance is durable."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._pending: list[tuple[int, int, int, str, threading.Event]] = []
        self._cond = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="websub-commit", daemon=True)
        self._thread.start()

    def advance(self, sid: int, start: int, to: int, owner: str) -> None:
        """Record delivery up to `to` and release `owner`'s claim, durably, then return."""
        done = threading.Event()
        with self._cond:
            self._pending.append((sid, start, to, owner, done))
            self._cond.notify()
        done.wait()

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._stopping:
                    self._cond.wait()
                batch, self._pending = self._pending, []
                if not batch and self._stopping:
                    return
            try:
                with self.db.session() as session:
                    for sid, start, to, owner, _done in batch:
                        row = session.get(Subscription, sid)
                        if row is not None and row.delivered_seq == start:  # else moved on meanwhile
                            row.delivered_total += to - start
                            row.delivered_seq, row.attempts, row.last_success_at, row.last_error = to, 0, now(), ""
                        if row is not None and row.claimed_by == owner:
                            row.claimed_by, row.claimed_until = None, None
            except Exception:  # not recorded: those patches are delivered again (at least once)
                log.exception("recording deliveries failed")
            finally:
                for *_rest, done in batch:
                    done.set()


class Decider(Protocol):
    def decide(self, party: Party, graph: str, action: Action) -> tuple[bool, str, str | None]: ...


class WebSubHub:
    def __init__(self, settings: Settings, db: Database, canonicalizer: Canonicalizer, policies: Decider, *,
                 publisher: Publisher | None = None, worker_id: str | None = None) -> None:
        self.settings = settings
        self.db = db
        self.canonicalizer = canonicalizer
        self.policies = policies
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self.claim_seconds = settings.delivery_claim_seconds
        self.allowed = parse_cidrs(settings.callback_allow_cidrs)
        self.http = requests.Session()  # verifications and notices: few, convenience first
        self.http.trust_env = False  # no proxies or .netrc from the environment for callbacks
        self.http.headers["User-Agent"] = "lucid-hub WebSub hub"
        # Deliveries: urllib3 directly (kept-alive pools per callback host). py-spy under
        # fan-out showed requests' per-call work (environment merging, CA path checks) as a
        # large share of each delivery.
        self.pool = urllib3.PoolManager(num_pools=256, maxsize=8, retries=False, headers={
            "User-Agent": "lucid-hub WebSub hub"}, timeout=urllib3.Timeout(total=settings.delivery_timeout))
        self._resolved: dict[tuple[str, int], float] = {}
        self._executor = ThreadPoolExecutor(max_workers=8, thread_name_prefix="websub")
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._in_flight: set[int] = set()
        self._lock = threading.Lock()
        self._committer = _GroupCommit(db)
        self._futures: dict[int, Future[None]] = {}
        if publisher is not None:
            publisher.listeners.append(lambda _patch: self._wake.set())

    # --- subscription requests ------------------------------------------------------
    def accept(self, request: Request) -> None:
        """Queue the verification of intent (the request was answered 202)."""
        self._executor.submit(self._verify, request)

    def deny(self, callback: str, topic: str, reason: str) -> None:
        """Tell a callback its subscription was denied (or has been cancelled)."""
        self._executor.submit(self._send_denied, callback, topic, reason)

    def _send_denied(self, callback: str, topic: str, reason: str) -> None:
        url = with_query(callback, {"hub.mode": "denied", "hub.topic": topic, "hub.reason": reason[:500]})
        try:
            self._check_target(callback)
            self.http.get(url, timeout=self.settings.delivery_timeout, allow_redirects=False)
        except (requests.RequestException, LucidError) as exc:
            log.info("denial notice to a callback failed: %s", type(exc).__name__)

    def _check_target(self, callback: str) -> None:
        """Resolve again before requests: a name may point elsewhere since it was checked.
        A host's check holds for RECHECK_SECONDS (DNS answers are cached about as long)."""
        parts = urlsplit(callback)
        key = (parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80))
        checked = self._resolved.get(key)
        if checked is not None and time.monotonic() - checked < RECHECK_SECONDS:
            return
        check_addresses(key[0], key[1], dev_mode=self.settings.dev_mode, allowed=self.allowed)
        self._resolved[key] = time.monotonic()

    def _verify(self, request: Request) -> None:
        challenge = secrets.token_urlsafe(32)
        params = {"hub.mode": request.mode, "hub.topic": request.topic, "hub.challenge": challenge}
        if request.mode == "subscribe":
            params["hub.lease_seconds"] = str(request.lease_seconds)
        try:
            self._check_target(request.callback)
            answer = self.http.get(with_query(request.callback, params), timeout=self.settings.delivery_timeout,
                                   allow_redirects=False)
            confirmed = 200 <= answer.status_code < 300 and answer.text == challenge
        except (requests.RequestException, LucidError) as exc:
            log.info("verification of intent failed: %s", type(exc).__name__)
            confirmed = False
        if not confirmed:
            return
        if request.mode == "subscribe":
            self._subscribe(request)
        else:
            self._unsubscribe(request)

    def _subscribe(self, request: Request) -> None:
        with self.db.session() as session:
            graph = session.get(Graph, request.graph)
            length = graph.length if graph is not None else 0
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
        self._wake.set()

    def _unsubscribe(self, request: Request) -> None:
        with self.db.session() as session:
            row = session.scalars(select(Subscription).where(
                Subscription.graph == request.graph, Subscription.callback == request.callback)).first()
            if row is not None:
                session.delete(row)

    # --- delivery -------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="websub-delivery", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        self._executor.shutdown(wait=True, cancel_futures=True)
        self._committer.stop()
        self.pool.clear()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.deliver_due()
            except Exception:  # the loop survives a database hiccup; the next round retries
                log.exception("delivery round failed")
            self._wake.wait(1.0)
            self._wake.clear()

    def deliver_due(self) -> list[int]:
        """Start delivering to every subscription that has something due; their ids."""
        with self.db.session() as session:
            for row in session.scalars(select(Subscription).where(
                    Subscription.state == "active", Subscription.lease_expires_at <= now())):
                row.state = "expired"
            due = list(session.scalars(
                select(Subscription.id).join(Graph, Graph.iri == Subscription.graph).where(and_(
                    Subscription.state == "active", Subscription.next_attempt_at <= now(),
                    Subscription.delivered_seq < Graph.length,
                    or_(Subscription.claimed_until.is_(None), Subscription.claimed_until < now())))))
        with self._lock:
            candidates = [sid for sid in due if sid not in self._in_flight]
            self._in_flight.update(candidates)
        claimed = self._claim_many(candidates) if candidates else set()
        started = []
        for sid in candidates:
            if sid not in claimed:  # another process has it
                with self._lock:
                    self._in_flight.discard(sid)
                continue
            started.append(sid)
            self._futures[sid] = self._executor.submit(self._deliver, sid)
        return started

    def _claim_many(self, sids: list[int]) -> set[int]:
        """Claim the free ones of `sids` in one statement; the ids now claimed by this process."""
        until = now() + timedelta(seconds=self.claim_seconds)
        with self.db.engine.begin() as conn:
            conn.execute(update(Subscription).where(
                Subscription.id.in_(sids), or_(Subscription.claimed_until.is_(None),
                                                Subscription.claimed_until < now(),
                                                Subscription.claimed_by == self.worker_id))
                .values(claimed_by=self.worker_id, claimed_until=until))
            mine = conn.execute(select(Subscription.id).where(
                Subscription.id.in_(sids), Subscription.claimed_by == self.worker_id)).scalars()
            return set(mine)

    def wait_for(self, sids: list[int]) -> None:
        """Until the deliveries started for `sids` are recorded (or failed)."""
        for sid in sids:
            future = self._futures.get(sid)
            if future is not None:
                future.result()

    def _extend_claim(self, sid: int) -> bool:
        """Renew this process's claim on a subscription; False if it has lost it meanwhile."""
        with self.db.engine.begin() as conn:
            result = conn.execute(update(Subscription).where(
                Subscription.id == sid, Subscription.claimed_by == self.worker_id)
                .values(claimed_until=now() + timedelta(seconds=self.claim_seconds)))
            return bool(result.rowcount == 1)

    def _release(self, sid: int) -> None:
        with self.db.engine.begin() as conn:
            conn.execute(update(Subscription).where(Subscription.id == sid, Subscription.claimed_by == self.worker_id)
                         .values(claimed_by=None, claimed_until=None))

    def _deliver(self, sid: int) -> None:
        """Deliver the subscription's pending patches in chain order (up to BATCH)."""
        released = False
        try:
            released = self._deliver_batch(sid)
        except Exception:
            log.exception("delivery to subscription %s failed", sid)
        finally:
            try:
                if not released:
                    self._release(sid)
            except Exception:  # the claim runs out by itself
                log.exception("releasing subscription %s failed", sid)
            with self._lock:
                self._in_flight.discard(sid)
                self._futures.pop(sid, None)
            self._wake.set()  # more may be due (this one, after its batch)

    def _deliver_batch(self, sid: int) -> bool:
        """Deliver; True when the claim was released together with the recorded progress."""
        with self.db.session() as session:
            sub = session.get(Subscription, sid)
            if sub is None or sub.state != "active" or _aware(sub.lease_expires_at) <= now():
                return False
            records = [(r.id, r.prev, r.seq, r.body) for r in session.scalars(
                select(PatchRecord).where(PatchRecord.graph == sub.graph, PatchRecord.seq > sub.delivered_seq)
                .order_by(PatchRecord.seq).limit(BATCH))]
            party = (sub.account, sub.endpoint_id, frozenset(sub.groups.split()))
            callback, secret, media_type, graph = sub.callback, sub.secret, sub.media_type, sub.graph
            start = sub.delivered_seq
        delivered = start
        claimed = time.monotonic()
        try:
            for patch_id, prev, seq, body in records:
                if self._stop.is_set() or seq != delivered + 1:
                    return False
                if time.monotonic() - claimed > self.claim_seconds / 2:  # a long batch keeps its claim
                    if not self._extend_claim(sid):
                        return False
                    claimed = time.monotonic()
                allowed, reason, _request_id = self.policies.decide(party, graph, "read")
                if not allowed:
                    self._set(sid, state="cancelled", last_error=f"access withdrawn: {reason}"[:1024])
                    self._send_denied(callback, graph, f"access withdrawn: {reason}")
                    return False
                status, error = self._post(callback, graph, media_type, secret, patch_id, prev, body)
                if 200 <= status < 300:
                    delivered = seq
                    continue
                if status == 410:
                    with self.db.session() as session:
                        row = session.get(Subscription, sid)
                        if row is not None:
                            session.delete(row)
                    delivered = start  # nothing left to record
                    return False
                self._failed(sid, error, advanced_to=delivered if delivered > start else None)
                delivered = start  # recorded together with the failure
                return False
        finally:
            if delivered > start:
                self._committer.advance(sid, start, delivered, self.worker_id)
        return delivered > start

    def _post(self, callback: str, graph: str, media_type: str, secret: str | None, patch_id: str,
              prev: str | None, body: bytes) -> tuple[int, str]:
        if media_type != RDF_PATCH:
            body = write_patch(read_rdf_patch(body, self.canonicalizer), MEDIA_TYPES[media_type])
        base = self.settings.public_url
        headers = {"Content-Type": media_type, "Link": f'<{base}/hub>; rel="hub", <{graph}>; rel="self"',
                   "X-Lucid-Patch-Id": patch_id, "X-Lucid-Prev": prev or "", "X-Lucid-Graph": graph}
        if secret:
            digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
            headers["X-Hub-Signature"] = f"sha256={digest}"
        try:
            self._check_target(callback)
            answer = self.pool.request("POST", callback, body=body, headers=headers, redirect=False,
                                       preload_content=True)
            return answer.status, f"HTTP {answer.status}"
        except (urllib3.exceptions.HTTPError, LucidError) as exc:
            return 0, f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:1024]

    def _failed(self, sid: int, error: str, advanced_to: int | None = None) -> None:
        settings = self.settings
        with self.db.session() as session:
            row = session.get(Subscription, sid)
            if row is None:
                return
            if advanced_to is not None and advanced_to > row.delivered_seq:  # what succeeded before
                row.delivered_total += advanced_to - row.delivered_seq
                row.delivered_seq, row.last_success_at = advanced_to, now()
            row.attempts += 1
            row.failures_total += 1
            row.last_error = error
            if row.attempts >= settings.delivery_max_attempts:
                row.state = "failed"
                return
            delay = min(settings.delivery_backoff_max, settings.delivery_backoff_base * 2 ** (row.attempts - 1))
            jitter = random.uniform(0.5, 1.0)  # noqa: S311 (spreading retries, not security)
            row.next_attempt_at = now() + timedelta(seconds=delay * jitter)

    def _set(self, sid: int, **values: Any) -> None:
        with self.db.session() as session:
            row = session.get(Subscription, sid)
            if row is not None:
                for key, value in values.items():
                    setattr(row, key, value)

    # --- administration -------------------------------------------------------------
    def subscriptions(self) -> list[dict[str, Any]]:
        with self.db.session() as session:
            rows = session.execute(select(Subscription, Graph.length).join(
                Graph, Graph.iri == Subscription.graph, isouter=True).order_by(Subscription.id)).all()
            return [{"id": s.id, "graph": s.graph, "callback": s.callback, "account": s.account,
                     "endpoint_id": s.endpoint_id, "state": s.state, "media_type": s.media_type,
                     "lease_expires_at": _aware(s.lease_expires_at).isoformat(),
                     "lag": max((length or 0) - s.delivered_seq, 0), "delivered": s.delivered_total,
                     "failures": s.failures_total, "attempts": s.attempts, "last_error": s.last_error,
                     "last_success_at": _aware(s.last_success_at).isoformat() if s.last_success_at else None,
                     "signed": bool(s.secret)} for s, length in rows]

    def redeliver(self, sid: int, from_patch: str | None) -> None:
        """Deliver again from `from_patch` (default: the next undelivered one); reactivates."""
        with self.db.session() as session:
            row = session.get(Subscription, sid)
            if row is None:
                raise NotFoundError(f"no subscription {sid}")
            if from_patch:
                record = session.get(PatchRecord, from_patch)
                if record is None or record.graph != row.graph:
                    raise InputError(f"patch {from_patch} is not in the history of <{row.graph}>")
                row.delivered_seq = record.seq - 1
            if _aware(row.lease_expires_at) <= now():
                raise InputError("the subscription's lease has ended; the subscriber must subscribe again")
            row.state, row.attempts, row.next_attempt_at = "active", 0, now()
        self._wake.set()

    def wake(self) -> None:
        """Look for due deliveries now (e.g. after a publisher's notice)."""
        self._wake.set()
