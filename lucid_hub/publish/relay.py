"""The relay: archived patches move from the transactional outbox into the patch log (Kafka,
or the SQL log), in order, exactly once as the log's consumers see them."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime

from sqlalchemy import func, select

from lucid_hub.archive import Archive
from lucid_hub.db.models import Outbox, PatchRecord
from lucid_hub.db.session import Database
from lucid_hub.db.times import aware
from lucid_hub.log import LogRecord, PatchLog
from lucid_hub.publish.faults import crash_point
from lucid_hub.supervisor import Supervisor

log = logging.getLogger(__name__)

# Outbox rows the relay appends to the log per round (the most a crash can leave behind).
RELAY_BATCH = 500
# Seconds the background relay waits after a publish for more to batch with it.
RELAY_COALESCE = 0.01


def backlog(db: Database) -> tuple[int, datetime | None]:
    """The outbox: how many archived patches are not in the patch log yet, and when the oldest
    of them was archived (None: the outbox is empty). A relay that keeps up leaves it empty
    within a round; one that stalled (no leader, the log refusing) lets it grow old."""
    # (IN, not a join: with a join SQLite scanned every archived patch for the few in the outbox)
    query = select(func.count(), func.min(PatchRecord.created)).where(PatchRecord.id.in_(select(Outbox.patch_id)))
    with db.engine.connect() as conn:
        count, oldest = conn.execute(query).one()
    return int(count), aware(oldest) if oldest is not None else None


class Relay:
    """Moves the outbox into the log: in the role `relay` (woken by each publish), or in the
    publishing thread where no role runs (a command, a test)."""

    def __init__(self, archive: Archive, patch_log: PatchLog, *, enabled: bool = True,
                 may_relay: Callable[[], bool] | None = None) -> None:
        """`enabled`: this process moves outbox rows to the log (with several processes of one
        hub, only one does, or two could append a graph's patches out of order); `may_relay`:
        whether it may append now (the leadership lease, checked before each batch: a leader
        that stalled past its lease must not append after another)."""
        self.archive = archive
        self.log = patch_log
        self.may_relay: Callable[[], bool] = may_relay or (lambda: True)
        self._lock = threading.Lock()
        self._wanted = threading.Event()
        self._in_role = False  # the role `relay` relays (else whoever publishes does)
        self._stopping = threading.Event()
        # The log's tail has been compared with the outbox since this process began to relay
        # (see move): False until then, and again whenever relaying is switched on.
        self._checked = False
        self._enabled = enabled

    @property
    def enabled(self) -> bool:
        """Whether this process relays the outbox to the log (the leader; a lone hub)."""
        return self._enabled

    @enabled.setter
    def enabled(self, on: bool) -> None:
        if on and not self._enabled:
            self._checked = False  # taking over: what the last relay left is looked at first
        self._enabled = on

    def changed(self) -> None:
        """The outbox has new rows (a publish committed)."""
        if self._in_role:
            self._wanted.set()  # the background relay takes it; the caller need not wait
        elif self.enabled:
            self.now("published")
        # else: another process of this hub relays (it polls the outbox)

    def now(self, what: str) -> None:
        """Relay in the caller's thread (a process without the relay role: a command, a test).
        The patches are archived: a log that does not take them now fails nothing — they stay
        in the outbox for the next relay (this process's, or the hub's when it serves)."""
        try:
            self.move()
        except Exception as exc:
            log.warning("%s, but not in the patch log yet (%s): the outbox keeps the patches for the next relay",
                        what, exc)

    def start(self, roles: Supervisor, interval: float = 2.0) -> None:
        """Relay as the role `relay`: woken by each publish, and every `interval` seconds to
        retry when the log was unavailable. Publishing then never waits for the log."""
        if self._in_role or self.log.written_by_archive or not self.enabled:
            return
        self._in_role = True
        roles.add("relay", self._round, every=interval, backoff_max=interval, wake=self._wanted)

    def _round(self) -> None:
        """One round of the role; a log that fails it leaves the rows in the outbox for the next."""
        if self._stopping.wait(RELAY_COALESCE):  # a burst of publishes gathers into one batch: fewer
            return  # round trips, and the relay does not compete with every single request
        self.move()

    def stop(self) -> None:
        """After the role stopped: one last round in the caller's thread."""
        self._stopping.set()
        self._wanted.set()
        if self.enabled:
            self.now("stopping")

    def move(self) -> int:
        """Move outbox rows into the patch log, in order; returns how many moved. The first
        relay of a process, and the first after relaying is switched on, first drops the rows
        the log already holds (a relay before it died between appending and deleting them) —
        in the relay itself, under its lock: a publish's relay on a new leader ran before the
        leader's own repair did and appended a dead leader's last batch again (scale-out test)."""
        if self.log.written_by_archive:
            return 0  # nothing to relay: the archive wrote the log's entries
        moved = 0
        with self._lock:
            if not self._checked and self.may_relay():
                self._drop_relayed_outbox()  # raises when the log's tail cannot be read: nothing moves
                self._checked = True
            while self.may_relay():
                rows = self.archive.outbox(RELAY_BATCH)
                if not rows:
                    return moved
                try:
                    self.log.append([LogRecord(graph, pid, body) for _, graph, pid, body in rows])
                except Exception:  # some may have reached the log: its tail is looked at first next time
                    self._checked = False
                    raise
                crash_point("after-log-append", rows[-1][1])
                self.archive.relayed(rows[-1][0])
                moved += len(rows)
            return moved

    def resume(self) -> None:
        """Relay what a relay before this one left in the outbox (a crash, or a leader that
        died): rows the log already holds are dropped, not appended twice."""
        with self._lock:
            self._checked = False
        self.move()

    def _drop_relayed_outbox(self) -> None:
        """After a crash between the log's acknowledgement and the outbox delete, the log
        already holds some outbox patches: drop those rows rather than append twice."""
        present = self.log.holding(set(self.archive.outbox_ids()), RELAY_BATCH)
        if present:
            log.info("repair: %d outbox patches were already in the log", len(present))
            self.archive.drop_outbox(present)
