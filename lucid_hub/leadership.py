"""Leadership by lease in the database: of all the hub's processes on all its replicas, one
does what must be done once (relays the outbox to the patch log, keeps the mirrors, evaluates
query subscriptions and windows, runs deferred rules).

One candidate per data directory (the process with its first store copy) takes the lease, a
row of `leases`, for `seconds`, and renews it every third of that. It holds it under its data
directory's name (runtime.replica_id), so that the same directory's next candidate — after a
crash, a restart — takes it over at once. A holder that cannot renew stops relaying when its
margin runs out; one that finds another holder has taken it (after a stall or a partition)
stops at once (`renew` says "lost": under `serve`, the process exits and is started again, as
Kubernetes' leader election does — the roles' threads are not unwound in place; a database
that does not answer only pauses the relay, whose appends check the lease). The renewals are
a role of the process's supervisor (`Runtime._keep_lease`, every third of the lease).
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
import time
from collections import deque
from typing import Literal

from sqlalchemy import case, or_, select, update

from lucid_hub.db.models import Lease
from lucid_hub.db.session import Database

log = logging.getLogger(__name__)
# The share of a lease its holder does not count on (clock skew, a slow renewal).
MARGIN = 0.2
Change = Literal["gained", "lost"] | None


def lease_of(db: Database, name: str = "hub") -> tuple[str, int, float] | None:
    """(holder, epoch, expires at: Unix seconds) of the lease `name`; None before any holder."""
    with db.session() as session:
        row = session.execute(select(Lease.holder, Lease.epoch, Lease.expires_at).where(Lease.name == name)).first()
    return (str(row.holder), int(row.epoch), float(row.expires_at)) if row is not None else None


HANDOVERS_KEPT = 32
FLAPPING = 3  # handovers within FLAPPING_WINDOW seconds that make the leadership "flapping"
FLAPPING_WINDOW = 600.0


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
        self.handovers: deque[tuple[float, int]] = deque(maxlen=HANDOVERS_KEPT)  # (time.time(), new epoch) seen

    def flapping(self, within: float = FLAPPING_WINDOW) -> list[tuple[float, int]]:
        """The handovers of the lease this process saw in the last `within` seconds when they
        are FLAPPING or more (the leader lost and taken again and again: a database too slow
        for the lease, two processes fighting over it); else none."""
        recent = [h for h in self.handovers if h[0] >= time.time() - within]
        return recent if len(recent) >= FLAPPING else []

    def _saw(self, epoch: int) -> None:
        if not self.handovers:  # the first look: the epoch as it was, at no known time (in no window)
            self.handovers.append((0.0, epoch))
        elif self.handovers[-1][1] != epoch:
            self.handovers.append((time.time(), epoch))

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
        self._saw(int(row.epoch))
        if row.holder != self.holder:
            self._valid_until = 0.0
            return False
        self.epoch = int(row.epoch)
        self._valid_until = started + self.seconds * (1 - MARGIN)
        return True

    def release(self) -> None:
        """End this process's lease now (a clean stop, after its renewals ended): another
        candidate takes it at its next look."""
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

    def acquire(self) -> bool:
        """At the process's start: take the lease if it is free (`try_acquire`), and count it
        as held from now on; whether it was taken."""
        self._was_held = self.try_acquire()
        return self._was_held

    def renew(self, *, take: bool) -> Change:
        """One round of the election (every third of the lease): renew the lease this process
        holds, or with `take`, take it when it is free; "gained" or "lost" when that changed.

        A database that does not answer (or is busy) changes nothing: `held` runs out with the
        margin, which stops the relay; the lease is given up only once the database says
        another process holds it (the roles' work goes through the database anyway). So a
        round never fails, and its rhythm is never stretched by a back-off."""
        if not self._was_held and not take:
            return None  # not a process that takes roles over (a command's short run)
        try:
            holding = self.try_acquire()
        except Exception as exc:
            log.warning("leadership lease not renewed: %s", exc)
            return None
        if holding and not self._was_held:
            self._was_held = True
            log.info("leadership taken (epoch %d, holder %s)", self.epoch, self.holder)
            return "gained"
        if self._was_held and not holding:
            self._was_held = False
            return "lost"
        return None
