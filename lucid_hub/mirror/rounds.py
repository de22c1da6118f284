"""The mirrors' maintenance rounds: one at a time per mirror, each on a worker of its own and
within its budget, backing off when it fails; what readiness learns from them."""

from __future__ import annotations

import functools
import logging
import random
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime
from typing import Any

import requests

from lucid_hub.config import Settings
from lucid_hub.db.times import now
from lucid_hub.errors import LucidError, NotFoundError
from lucid_hub.mirror.catchup import CatchUp
from lucid_hub.mirror.intent import Subscriptions, publisher_client
from lucid_hub.mirror.receipts import Receipts
from lucid_hub.mirror.registry import MirroredGraphs
from lucid_hub.mirror.rows import MirrorRows
from lucid_hub.patch_stream import PatchStream
from lucid_hub.supervisor import Supervisor

log = logging.getLogger(__name__)


class Rounds:
    """Subscribe, renew, unsubscribe, catch up after start and send receipts, mirror by mirror."""

    def __init__(self, settings: Settings, rows: MirrorRows, mirrored: MirroredGraphs, subscriptions: Subscriptions,
                 catchup: CatchUp, receipts: Receipts, stream: PatchStream, http: requests.Session,
                 stopping: threading.Event) -> None:
        self.settings = settings
        self.rows = rows
        self.mirrored = mirrored
        self.subscriptions = subscriptions
        self.catchup = catchup
        self.receipts = receipts
        self.stream = stream
        self.http = http
        self.stopping = stopping
        self.woken = threading.Event()
        self._pool: ThreadPoolExecutor | None = None
        self._started_at = 0.0
        self._first_pending: set[str] | None = None  # mirrors whose first round after start has not ended
        self._running: set[str] = set()  # mirrors whose round is under way (one at a time each)
        self._caught_up: set[str] = set()  # mirrors caught up since start (or since their keys were pinned again)
        self._failures: dict[str, int] = {}  # failed rounds in a row, for each mirror's back-off
        self._told: dict[str, bool] = {}  # whether each mirror's row says it is failing, as this process set it
        self._not_before: dict[str, float] = {}  # when a failing mirror is tried again (monotonic)
        self._pins: dict[str, str] = {}  # each mirror's pinned JWKS, as the last round saw it

    def start(self, roles: Supervisor) -> None:
        """Keep the mirrors: the role `mirrors` starts each mirror's rounds (see `schedule`)."""
        if self._pool is None:
            self._started_at = time.monotonic()
            self._pool = ThreadPoolExecutor(self.settings.mirror_workers, thread_name_prefix="mirror")
            roles.add("mirrors", self.schedule, every=1.0, wake=self.woken)

    def stop(self) -> None:
        """Rounds in flight end at their next page or chunk of one."""
        self.woken.set()
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)

    def again(self, mirror_id: str) -> None:
        """The mirror is not caught up (a catch-up ran out of budget): on at the next round."""
        self._caught_up.discard(mirror_id)
        self.woken.set()

    @property
    def catching_up(self) -> bool:
        """Whether mirrors are still catching up on what they missed while the hub was down:
        the hub is not ready meanwhile, for one round's time at most (LUCID_MIRROR_ROUND_SECONDS):
        a partner that is down or hostile must not keep this hub from serving (its mirror is
        reported in `stuck()` instead)."""
        if self._pool is None:
            return False
        pending = self._first_pending
        return (pending is None or bool(pending)) and \
            time.monotonic() - self._started_at < self.settings.mirror_round_seconds

    def stuck(self) -> dict[str, tuple[str, datetime]]:
        """Mirrors whose last round failed (graph -> the reason, failing since): what /readyz
        reports beside "ready", since one partner's trouble is not the hub's. From the rows, so
        every replica knows what the leader's rounds found."""
        return self.rows.failing()

    def schedule(self) -> None:
        """Start a round for each mirror that has none under way and is not backing off. Each
        runs on a worker of its own, within its budget: a slow or hostile publisher holds up
        its own mirror, never another's subscription, catch-up or the hub's readiness."""
        rows = self.rows.for_rounds()
        self.mirrored.refresh()
        if self._first_pending is None:
            self._first_pending = {row[0] for row in rows if row[1] in ("new", "active", "subscribing")}
        clock = time.monotonic()
        for mirror_id, state, renew_at, jwks in rows:
            if self.stopping.is_set() or self._pool is None:
                return
            if mirror_id in self._running or (state != "removing" and self._not_before.get(mirror_id, 0.0) > clock):
                continue
            self._running.add(mirror_id)
            future = self._pool.submit(self._round, mirror_id, state, renew_at, jwks)
            future.add_done_callback(functools.partial(self._round_ended, mirror_id))

    def _round_ended(self, mirror_id: str, done: Future[bool]) -> None:
        failed = done.cancelled() or done.exception() is not None or not done.result()
        if done.exception() is not None:
            log.error("mirror %s: maintenance failed", mirror_id, exc_info=done.exception())
        # the row says so at a change (the first failure; the first success after failures, or
        # since this process started: another leader may have left the row failing)
        tell = self._told.get(mirror_id) is not failed
        if failed:  # tried again after 2, 4, 8 … s (jittered), LUCID_MIRROR_MAX_BACKOFF at most
            count = self._failures[mirror_id] = self._failures.get(mirror_id, 0) + 1
            delay = min(self.settings.mirror_max_backoff, 2.0 ** min(count, 30))
            self._not_before[mirror_id] = time.monotonic() + delay * random.uniform(0.5, 1.0)  # noqa: S311 (jitter)
        else:
            self._failures.pop(mirror_id, None)
            self._not_before.pop(mirror_id, None)
        if self._first_pending is not None:
            self._first_pending.discard(mirror_id)
        self._running.discard(mirror_id)
        if tell:
            try:
                self.rows.set_failing(mirror_id, failed)
                self._told[mirror_id] = failed
            except Exception as exc:  # the database away: told after the next round
                self._told.pop(mirror_id, None)
                log.warning("mirror %s: could not note its round's outcome: %s", mirror_id, exc)

    def _round(self, mirror_id: str, state: str, renew_at: Any, jwks: str) -> bool:
        """One mirror's maintenance: subscribe when new, renew a lease that is half over,
        unsubscribe when removed; catch up once after start (patches missed while down), in
        rounds of a budget each; send the receipt. Whether it went well (else: back off)."""
        try:
            return self._round_of(mirror_id, state, renew_at, jwks)
        except NotFoundError:  # removed meanwhile (the rows a schedule read can be a round old): nothing to do
            return True

    def _round_of(self, mirror_id: str, state: str, renew_at: Any, jwks: str) -> bool:
        if self._pins.setdefault(mirror_id, jwks) != jwks:  # keys pinned again (`mirror trust`):
            self._pins[mirror_id] = jwks  # what was quarantined for an unknown key may verify now
            self._caught_up.discard(mirror_id)
        if state == "removing":
            self.subscriptions.remove(mirror_id)
            return True
        if state == "new" or (state in ("subscribing", "active", "error") and renew_at is not None
                              and renew_at <= now()):
            self.subscriptions.subscribe(mirror_id)
        if state in ("new", "active", "subscribing") and mirror_id not in self._caught_up:
            try:
                if self.catchup.run(mirror_id, self.catchup.budget())[1]:
                    self._caught_up.add(mirror_id)
                else:
                    self.woken.set()  # the budget ran out, not the publisher: on at the next round
            except NotFoundError:
                raise
            except LucidError as exc:
                self.rows.record_error(mirror_id, f"catching up failed: {exc}")
                return False
        if state == "active":
            self._send_receipt(mirror_id)
        return True

    def _send_receipt(self, mirror_id: str) -> None:
        """Tell the publisher the mirror's new head, if it has one not told yet (receipts.py)."""
        row = self.rows.get(mirror_id)
        head = self.catchup.head(row.graph)
        if head is None or not self.receipts.due(mirror_id, head):
            return
        try:
            publisher = publisher_client(row, self.http)
        except LucidError as exc:
            log.warning("mirror of <%s>: no token for the receipt: %s", row.graph, exc)
            return
        self.receipts.send(mirror_id, row.graph, head, self.stream.position(row.graph), publisher)
