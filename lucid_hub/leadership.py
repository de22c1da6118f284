"""Leadership by lease in the database: of all the hub's processes on all its replicas, one
does what must be done once (relays the outbox to the patch log, keeps the mirrors, evaluates
query subscriptions and windows, runs deferred rules).

One candidate per data directory (the process with its first store copy) takes the lease, a
row of `leases`, for `seconds`, and renews it every third of that. It holds it under its data
directory's name (runtime.replica_id), so that the same directory's next candidate — after a
crash, a restart — takes it over at once. A holder that cannot renew stops relaying when its
margin runs out; one that finds another holder has taken it (after a stall or a partition)
stops at once (`on_loss`: under `serve`, the process exits and is
started again, as Kubernetes' leader election does — the roles' threads are not unwound in
place; a database that does not answer only pauses the relay, whose appends check the lease).
When the holder dies the lease runs out, and a waiting candidate takes it within
`seconds` plus a third: the default 10 s hands over within 15 s. A holder that stops cleanly
ends its lease at once, so a rolling update hands over without waiting.

Times in the row are the holders' wall clocks (replicas keep them by NTP); a holder counts
its own lease on the monotonic clock and gives up `MARGIN` of it early, against clock skew
between hosts and a renewal that took long.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable

from sqlalchemy import case, or_, select, update

from lucid_hub.db.models import Lease
from lucid_hub.db.session import Database

log = logging.getLogger(__name__)
# The share of a lease its holder does not count on (clock skew, a slow renewal).
MARGIN = 0.2


class Leadership:
    """One process's part in the election of the deployment's leader."""

    def __init__(self, db: Database, seconds: float, *, name: str = "hub", holder: str | None = None) -> None:
        self.db = db
        self.seconds = seconds
        self.name = name
        self.holder = holder or f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self.epoch = 0  # of the lease while this process holds it
        self._valid_until = 0.0  # monotonic
        self._was_held = False
        # Called on the election's thread: on taking the lease after waiting for it, and on
        # losing it (with the reason). Until someone sets them, a process only keeps what it holds.
        self.on_gain: Callable[[], None] | None = None
        self.on_loss: Callable[[str], None] = lambda reason: log.error("leadership lost: %s", reason)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def held(self) -> bool:
        """Whether this process holds the lease now, with its margin."""
        return time.monotonic() < self._valid_until

    def try_acquire(self) -> bool:
        """Take the lease if it is free or has run out, or renew it if this process holds it;
        whether it holds it now."""
        started = time.monotonic()
        now = time.time()
        with self.db.write() as session:
            moved = session.execute(
                update(Lease).where(Lease.name == self.name, or_(Lease.holder == self.holder, Lease.expires_at < now))
                .values(epoch=case((Lease.holder == self.holder, Lease.epoch), else_=Lease.epoch + 1),
                        holder=self.holder, expires_at=now + self.seconds)).rowcount
            if not moved:  # the first election on this database: the row does not exist yet
                first = self.db.insert(Lease).values(name=self.name, holder=self.holder, epoch=1,
                                                     expires_at=now + self.seconds)
                session.execute(first.on_conflict_do_nothing())
            row = session.execute(select(Lease.holder, Lease.epoch).where(Lease.name == self.name)).one()
        if row.holder != self.holder:
            self._valid_until = 0.0
            return False
        self.epoch = int(row.epoch)
        self._valid_until = started + self.seconds * (1 - MARGIN)
        return True

    def release(self) -> None:
        """End this process's lease now (a clean stop): another candidate takes it at its next look."""
        self.stop()
        if not self._was_held:
            return
        self._valid_until = 0.0
        self._was_held = False
        try:
            with self.db.write() as session:
                session.execute(update(Lease).where(Lease.name == self.name, Lease.holder == self.holder)
                                .values(expires_at=0.0))
        except Exception as exc:  # it runs out by itself
            log.warning("could not end the leadership lease: %s", exc)

    def start(self, *, acquired: bool) -> None:
        """Keep the lease (renew it) and, with `on_gain` set, wait for it when another holds it."""
        self._was_held = acquired
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="leadership", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)
        self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(self.seconds / 3):
            if not self._was_held and self.on_gain is None:
                continue  # not a process that takes roles over (a command's short run)
            try:
                holding = self.try_acquire()
            except Exception as exc:
                # The database does not answer (or is busy): `held` runs out with the margin, which
                # stops the relay; the roles are given up only once the database says another
                # process holds the lease (the roles' work goes through the database anyway).
                log.warning("leadership lease not renewed: %s", exc)
                continue
            if holding and not self._was_held:
                self._was_held = True
                log.info("leadership taken (epoch %d, holder %s)", self.epoch, self.holder)
                if self.on_gain is not None:  # on a thread of its own: taking roles over can take
                    # longer than a renewal may wait (a mirror catching up)
                    threading.Thread(target=self.on_gain, name="leadership-gained", daemon=True).start()
            elif self._was_held and not holding:
                self._was_held = False
                self.on_loss("another process holds the lease, or it ran out before it could be renewed")
