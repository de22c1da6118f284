"""What deliveries did, recorded: each task's outcome written with many others in one
transaction (cursors, failures and back-off, claims released), and the deliveries counted per
minute for the console's chart."""

from __future__ import annotations

import logging
import random
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import Connection, Table, bindparam, case, delete, select, update
from sqlalchemy.exc import OperationalError

from lucid_hub.archive import ChainLink
from lucid_hub.db.models import DeliveryMinute, Subscription
from lucid_hub.db.session import Database
from lucid_hub.db.times import aware, now
from lucid_hub.policy.decisions import Party

if TYPE_CHECKING:
    from lucid_hub.delivery.deliverer import Deliverer

log = logging.getLogger(__name__)

SUBS = cast(Table, Subscription.__table__)
MINUTES = cast(Table, DeliveryMinute.__table__)
RECORD_RETRIES = (0.2, 1.0)  # seconds before writing a batch's outcomes again after a database error
MINUTES_KEPT = timedelta(days=1)  # deliveries a minute are kept this long (the console's chart)


@dataclass
class Task:
    """One claimed subscription's share of a delivery round: what to send, and to whom."""

    sid: int
    graph: str
    callback: str
    secret: str | None
    media_type: str
    party: Party
    start: int  # the cursor when the round read it
    attempts: int
    patches: list[ChainLink]
    lane: str = "fast"
    host: str = ""


@dataclass
class Outcome:
    """What a task did: the cursor it reached, and why it stopped early (if it did)."""

    task: Task
    reached: int
    error: str | None = None  # a failed POST: retried with backoff
    gone: bool = False  # 410: the subscription is removed
    cancelled: str | None = None  # access withdrawn: the reason


class Recorder:
    """Records many tasks' outcomes in one transaction (one commit instead of one per
    delivery), releases their claims with it, then lets the next round have them."""

    def __init__(self, hub: Deliverer) -> None:
        self.hub = hub
        self._pending: list[Outcome] = []
        self._cond = threading.Condition()
        self._stopping = False
        self._pruned: datetime | None = None  # the minute this recorder last dropped old minutes
        self._thread = threading.Thread(target=self._run, name="websub-record", daemon=True)
        self._thread.start()

    def record(self, outcome: Outcome) -> None:
        with self._cond:
            self._pending.append(outcome)
            self._cond.notify()

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
                self._write_retrying(batch)
                for outcome in batch:
                    if outcome.cancelled is not None:
                        task = outcome.task
                        self.hub.deny(task.callback, task.graph, f"access withdrawn: {outcome.cancelled}")
            except Exception:  # not recorded: those patches are delivered again (at least once)
                log.exception("recording deliveries failed")
                self._release([outcome.task.sid for outcome in batch])
            finally:
                self.hub._finished([outcome.task.sid for outcome in batch])

    def _write_retrying(self, batch: list[Outcome]) -> None:
        """`_write`, again after a database error that may pass (a lock or serialization
        conflict, a dropped connection): the transaction rolled back, and every statement in it
        is conditional or additive, so writing it again records the batch once."""
        for wait in RECORD_RETRIES:
            try:
                self._write(batch)
                return
            except OperationalError as exc:
                log.warning("recording deliveries failed (%s); again in %.1f s", type(exc.orig).__name__, wait)
                time.sleep(wait)  # backing off from a busy database, not synchronising
        self._write(batch)

    def _release(self, sids: list[int]) -> None:
        """Give up this process's claims on subscriptions whose outcomes could not be written,
        so they are delivered again (their cursors did not move) at the next round instead of
        when the claims run out (delivery_claim_seconds: a minute of silence for a partner)."""
        try:
            with self.hub.db.write() as conn:
                conn.execute(update(SUBS).where(SUBS.c.id.in_(sids), SUBS.c.claimed_by == self.hub.worker_id)
                             .values(claimed_by=None, claimed_until=None))
        except Exception as exc:  # the claims then run out by themselves
            log.warning("could not release the claims of %d subscriptions: %s", len(sids), exc)

    def _write(self, batch: list[Outcome]) -> None:
        settings, owner, at = self.hub.settings, self.hub.worker_id, now()
        s = SUBS.c
        mine = s.claimed_by == owner
        advanced = [{"b_sid": o.task.sid, "b_start": o.task.start, "b_to": o.reached, "b_n": o.reached - o.task.start}
                    for o in batch if o.reached > o.task.start and not o.gone]
        done = {o.task.sid for o in batch if o.reached > o.task.start and o.error is None and o.cancelled is None
                and not o.gone}
        with self.hub.db.write() as conn:
            if advanced:  # where nobody moved the cursor meanwhile (a redelivery, a takeover)
                result = conn.execute(update(SUBS).where(
                    s.id == bindparam("b_sid"), s.delivered_seq == bindparam("b_start")).values(
                    delivered_seq=bindparam("b_to"), delivered_total=s.delivered_total + bindparam("b_n"),
                    attempts=0, last_success_at=at, last_error="",
                    claimed_by=case((mine, None), else_=s.claimed_by),
                    claimed_until=case((mine, None), else_=s.claimed_until)), advanced)
                if not conn.dialect.supports_sane_multi_rowcount or result.rowcount != len(advanced):
                    # some moved on (or the driver cannot tell): release those claims below
                    done = set()
            for o in batch:
                if o.gone:
                    conn.execute(delete(SUBS).where(s.id == o.task.sid))
                elif o.cancelled is not None:
                    conn.execute(update(SUBS).where(s.id == o.task.sid).values(
                        state="cancelled", last_error=f"access withdrawn: {o.cancelled}"[:1024]))
                elif o.error is not None:  # progress before the failure starts the count again
                    attempts = 1 if o.reached > o.task.start else o.task.attempts + 1
                    delay = min(settings.delivery_backoff_max, settings.delivery_backoff_base * 2 ** (attempts - 1))
                    jitter = random.uniform(0.5, 1.0)  # noqa: S311 (spreading retries, not security)
                    conn.execute(update(SUBS).where(s.id == o.task.sid).values(
                        attempts=attempts, failures_total=s.failures_total + 1, last_error=o.error,
                        next_attempt_at=at + timedelta(seconds=delay * jitter),
                        state="failed" if attempts >= settings.delivery_max_attempts else s.state))
            release = [{"b_sid": o.task.sid} for o in batch if o.task.sid not in done and not o.gone]
            if release:
                conn.execute(update(SUBS).where(s.id == bindparam("b_sid"), mine).values(
                    claimed_by=None, claimed_until=None), release)
            minute = at.replace(second=0, microsecond=0)
            count_deliveries(self.hub.db, conn, minute, sum(a["b_n"] for a in advanced),
                             sum(o.error is not None for o in batch), prune=self._pruned != minute)
            self._pruned = minute


def count_deliveries(db: Database, conn: Connection, minute: datetime, delivered: int, failed: int, *,
                     prune: bool = False) -> None:
    """Add deliveries to their minute's row (every delivering process adds to the same row, in
    the transaction that records them); `prune` drops minutes older than MINUTES_KEPT."""
    if delivered or failed:
        conn.execute(_count_statement(db), {"m": minute, "d": delivered, "f": failed})
    if prune:
        conn.execute(delete(MINUTES).where(MINUTES.c.minute < minute - MINUTES_KEPT))


_COUNT_STATEMENTS: dict[str, Any] = {}


def _count_statement(db: Database) -> Any:
    """The minute's upsert, built once a dialect (built anew each time it cost 0.5 ms on SQLite,
    six times the statement's own work)."""
    name = db.engine.dialect.name
    if name not in _COUNT_STATEMENTS:
        added = db.insert(MINUTES).values(minute=bindparam("m"), delivered=bindparam("d"), failed=bindparam("f"))
        _COUNT_STATEMENTS[name] = added.on_conflict_do_update(index_elements=[MINUTES.c.minute], set_={
            "delivered": MINUTES.c.delivered + added.excluded.delivered,
            "failed": MINUTES.c.failed + added.excluded.failed})
    return _COUNT_STATEMENTS[name]


def deliveries_by_minute(db: Database, since: datetime) -> dict[datetime, tuple[int, int]]:
    """(delivered, failed) of each minute from `since` on that had any (UTC, aware)."""
    with db.engine.connect() as conn:
        rows = conn.execute(select(MINUTES).where(MINUTES.c.minute >= since)).all()
    return {aware(r.minute): (int(r.delivered), int(r.failed)) for r in rows}
