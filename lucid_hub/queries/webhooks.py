"""Webhooks of continuous query subscriptions: each notification POSTed to the subscription's
callback, in sequence order, signed, under the same callback safety and retry rules as
WebSub deliveries (`lucid_hub.delivery`).

- The callback was checked at subscription (https, under one of the client's registered
  callback prefixes, a public address unless the operator allowed the range); every
  connection checks the address again (`lucid_hub.outbound`: DNS rebinding).
- A POST carries the notification as JSON, `X-Hub-Signature: sha256=<HMAC of the body with
  the subscription's secret>` when it has one, and `X-Lucid-Subscription` and
  `X-Lucid-Sequence` (the receiver drops a sequence it has already seen: a retry after a lost
  answer sends it again).
- Access is checked again before each POST; a subscription whose access is gone ends.
- 2xx: delivered. 410: the subscription ends. Anything else (or no answer): retried with
  backoff doubling from LUCID_DELIVERY_BACKOFF_BASE up to LUCID_DELIVERY_BACKOFF_MAX, with
  jitter; after LUCID_DELIVERY_MAX_ATTEMPTS failures in a row the subscription ends, with
  the last error as its reason.
- A callback behind the notifications the hub keeps (LUCID_QUERY_RETAIN) receives one reset
  message (the current results) instead of the ones it missed.

Only the evaluating process delivers; state is in the database (`callback_seq`,
`callback_attempts`, `callback_next_at`, `callback_error`), so a restart goes on where it
stopped.
"""

from __future__ import annotations

import json
import logging
import random
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import urllib3
from sqlalchemy import or_, select, update

from lucid_hub import outbound
from lucid_hub.config import Settings
from lucid_hub.db.models import QuerySubscription
from lucid_hub.db.session import Database
from lucid_hub.db.times import iso, now
from lucid_hub.outbound import AddressPolicy
from lucid_hub.outbound.mqtt import SCHEME as MQTT
from lucid_hub.outbound.mqtt import MqttPublisher
from lucid_hub.supervisor import Supervisor

log = logging.getLogger(__name__)

BATCH = 20  # notifications one round POSTs to a callback before others get a turn
LOOK = 1.0  # seconds between looks for due retries when nothing wakes the sender


class Webhooks:
    """Sends query notifications to callbacks (the evaluating process runs one)."""

    def __init__(self, settings: Settings, db: Database,
                 messages: Callable[[str, int, int], list[tuple[int, dict[str, Any]]]],
                 may_deliver: Callable[[str], bool], end: Callable[[str, str], None], *,
                 model: Any = QuerySubscription, header: str = "X-Lucid-Subscription",
                 label: Callable[[Any], str] | None = None) -> None:
        """`model` is the table of what has callbacks (query subscriptions, windowed queries):
        its rows have `callback`, `secret`, `state`, `sequence` and the `callback_*` columns;
        `header` carries what `label` says of the row in each POST (its key, by default)."""
        self.settings = settings
        self.db = db
        self.model = model
        self.key = model.__mapper__.primary_key[0]
        self.header = header
        self.label = label or (lambda row: str(getattr(row, self.key.key)))
        self.messages = messages  # (sid, after, limit) -> notifications, as QueryService gives them
        self.may_deliver = may_deliver  # access re-check (ends the subscription when it fails)
        self.end = end
        self.pool = outbound.pool_manager(AddressPolicy.of(settings), num_pools=64, maxsize=2, retries=False,
                                          headers={"User-Agent": "lucid-hub query webhooks"},
                                          timeout=urllib3.Timeout(total=settings.delivery_timeout))
        self._threads = max(1, min(8, settings.delivery_threads))
        # A party's callbacks take at most this many of the threads at once: one whose
        # callbacks hang (each up to LUCID_DELIVERY_TIMEOUT) waits for itself, not the others.
        self.per_party = max(1, self._threads // 4)
        self._executor: ThreadPoolExecutor | None = None
        self._busy: set[str] = set()
        self._party_busy: dict[str, int] = {}  # account -> its POSTs in flight
        self._held_back: set[str] = set()  # accounts with something due that waited for a thread
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self.posted = 0  # POSTs made (for tests and metrics)
        # Callbacks `mqtt:<topic prefix>` publish to the operator's broker instead (outbound/mqtt.py).
        self.mqtt = MqttPublisher(settings, header.removeprefix("X-Lucid-").lower()) if settings.mqtt_url else None

    def start(self, roles: Supervisor, name: str) -> None:
        """Send the callbacks' notifications: the role `name` finds what is due, a pool sends."""
        if self._executor is not None:
            return
        self._executor = ThreadPoolExecutor(self._threads, thread_name_prefix=name)
        roles.add(name, self.round, every=LOOK, wake=self._wake)

    def stop(self) -> None:
        """After the role stopped: the sends in flight end."""
        self._stop.set()
        self._wake.set()
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None
        self.pool.clear()
        if self.mqtt is not None:
            self.mqtt.close()

    def wake(self) -> None:
        """A notification was written: look for callbacks to send it to."""
        self._wake.set()

    def round(self) -> None:
        if self._stop.is_set():
            return
        for sid, account in self.due_by_party():
            self._submit(sid, account)

    def due(self) -> list[str]:
        """Subscriptions whose callback has notifications to take, now."""
        return [sid for sid, _account in self.due_by_party()]

    def due_by_party(self) -> list[tuple[str, str]]:
        """The same, each with its party's account."""
        q = self.model
        with self.db.session() as session:
            return [(str(sid), str(account)) for sid, account in session.execute(select(self.key, q.account).where(
                q.state == "active", q.callback.is_not(None), q.callback_seq < q.sequence,
                or_(q.callback_next_at.is_(None), q.callback_next_at <= now())))]

    def _submit(self, sid: str, account: str) -> None:
        with self._lock:
            if sid in self._busy or self._executor is None:
                return
            if self._party_busy.get(account, 0) >= self.per_party:
                self._held_back.add(account)  # its turn comes when one of its POSTs ends
                return
            self._busy.add(sid)
            self._party_busy[account] = self._party_busy.get(account, 0) + 1
        self._executor.submit(self._deliver_then_release, sid, account)

    def _deliver_then_release(self, sid: str, account: str) -> None:
        more = False
        try:
            more = self.deliver(sid)  # more to send: another round (others get a turn first)
        except Exception:
            log.exception("query webhooks: delivering to subscription %s failed", sid)
        finally:
            with self._lock:
                self._busy.discard(sid)
                self._party_busy[account] -= 1
                if not self._party_busy[account]:
                    del self._party_busy[account]
                if account in self._held_back:
                    self._held_back.discard(account)
                    more = True
            if more:
                self._wake.set()

    def deliver(self, sid: str) -> bool:
        """POST up to BATCH of a subscription's due notifications; whether more are due."""
        with self.db.session() as session:
            row = session.get(self.model, sid)
            if row is None or row.state != "active" or row.callback is None:
                return False
            callback, secret, after, attempts = row.callback, row.secret, row.callback_seq, row.callback_attempts
            label = self.label(row)
        found = self.messages(sid, after, BATCH)
        for sequence, body in found:
            if not self.may_deliver(sid):
                return False
            status, error = self._post(callback, secret, label, sequence, body)
            self.posted += 1
            if 200 <= status < 300:
                self._record(sid, callback_seq=sequence, callback_attempts=0, callback_next_at=None,
                             callback_error="")
                attempts = 0
                continue
            if status == 410:
                self.end(sid, "the callback answered 410 Gone: the subscription ended")
                return False
            attempts += 1
            # A broker that is down is the operator's outage, not the partner's: MQTT subscriptions
            # wait for it (backoff up to LUCID_DELIVERY_BACKOFF_MAX) rather than end.
            if attempts >= self.settings.delivery_max_attempts and not callback.startswith(MQTT):
                self.end(sid, f"the callback failed {attempts} times in a row (last: {error}): the subscription "
                              "ended (LUCID_DELIVERY_MAX_ATTEMPTS)")
                return False
            delay = min(self.settings.delivery_backoff_max, self.settings.delivery_backoff_base * 2 ** (attempts - 1))
            jitter = random.uniform(0.5, 1.0)  # noqa: S311 (spreading retries, not security)
            self._record(sid, callback_attempts=attempts, callback_error=error[:1024],
                         callback_next_at=now() + timedelta(seconds=delay * jitter))
            return False
        return len(found) == BATCH

    def _record(self, sid: str, **values: Any) -> None:
        with self.db.session() as session:
            session.execute(update(self.model).where(self.key == sid).values(**values))

    def _post(self, callback: str, secret: str | None, label: str, sequence: int,
              message: dict[str, Any]) -> tuple[int, str]:
        if callback.startswith(MQTT):
            if self.mqtt is None:
                return 0, "this hub has no MQTT broker any more (LUCID_MQTT_URL)"
            return self.mqtt.publish(callback[len(MQTT):] + label, json.dumps(message).encode(), sequence, secret)
        headers = {"Content-Type": "application/json", self.header: label, "X-Lucid-Sequence": str(sequence)}
        return outbound.signed_post(self.pool, callback, json.dumps(message).encode(), headers, secret)


def webhook_state(row: Any) -> dict[str, Any] | None:
    """What a subscription's or windowed query's description says of its webhook (never
    the secret); None when it has none."""
    if row.callback is None:
        return None
    if row.callback.startswith(MQTT):
        label = row.name if row.__tablename__ == "windowed_queries" else row.id
        return {"mqtt": {"topic": row.callback[len(MQTT):] + label}, "delivered": row.callback_seq,
                "failures": row.callback_attempts, "error": row.callback_error or None,
                "nextAttempt": iso(row.callback_next_at)}
    return {"callback": row.callback, "delivered": row.callback_seq, "failures": row.callback_attempts,
            "error": row.callback_error or None, "nextAttempt": iso(row.callback_next_at)}
