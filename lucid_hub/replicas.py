"""Every replica of the deployment, as each says of itself: a serving process reports every
REPORT_EVERY seconds (the role `replica-report`) its store's lag behind the archive, whether it
leads, and its background roles whose last rounds failed; a clean stop takes its report away.
A report older than SILENT seconds is a replica that stopped without a word (killed, hung, its
database cut off): the console names it until FORGET seconds have passed, then it goes."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from sqlalchemy import delete, select

from lucid_hub import __version__
from lucid_hub.db.models import ReplicaReport
from lucid_hub.db.session import Database
from lucid_hub.db.times import aware, now

REPORT_EVERY = 5.0
SILENT = timedelta(seconds=30)
FORGET = timedelta(days=1)
NOTES = 50  # notes a report carries at most (a flood of refused senders stays a bounded row)
NOTE_CHARS = 1_000  # and characters of each note's text


class Replicas:
    """This process's report, and everyone's."""

    def __init__(self, db: Database, replica: str) -> None:
        self.db = db
        self.name = f"{replica}/{os.getpid()}"
        self.started = now()

    def report(self, lag: int, leader: bool, failing: list[str], notes: list[dict[str, str]] | None = None) -> None:
        """This process's word on itself now (and the reports of replicas long gone pruned).
        `notes`: what needs attention that only this process knows (string fields each)."""
        at = now()
        kept = [{key: str(value)[:NOTE_CHARS] for key, value in note.items()} for note in (notes or [])[:NOTES]]
        values = {"host": socket.gethostname()[:255], "version": __version__, "started_at": self.started,
                  "seen_at": at, "lag": lag, "leader": leader, "failing": json.dumps(sorted(failing)),
                  "notes": json.dumps(kept)}
        statement = self.db.insert(ReplicaReport).values(name=self.name, **values)
        with self.db.write() as conn:
            conn.execute(statement.on_conflict_do_update(index_elements=[ReplicaReport.name], set_=values))
            conn.execute(delete(ReplicaReport).where(ReplicaReport.seen_at < at - FORGET))

    def leave(self) -> None:
        """A clean stop: this process no longer counts as a replica."""
        with self.db.write() as conn:
            conn.execute(delete(ReplicaReport).where(ReplicaReport.name == self.name))

    def all(self) -> list[dict[str, Any]]:
        """Every replica's last report, the leader first; `silent`: none for SILENT seconds."""
        at = now()
        with self.db.engine.connect() as conn:
            rows = conn.execute(select(ReplicaReport).order_by(ReplicaReport.leader.desc(), ReplicaReport.name)).all()
        return [{"name": r.name, "host": r.host, "version": r.version, "started": aware(r.started_at),
                 "seen": aware(r.seen_at), "silent": aware(r.seen_at) < at - SILENT, "lag": r.lag,
                 "leader": r.leader, "failing": json.loads(r.failing), "notes": json.loads(r.notes or "[]"),
                 "this": r.name == self.name}
                for r in rows]


def reporter(replicas: Replicas, lag: Callable[[], int], leader: Callable[[], bool],
             failing: Callable[[], list[str]], notes: Callable[[], list[dict[str, str]]]) -> Callable[[], None]:
    """The role `replica-report`'s round."""
    return lambda: replicas.report(lag(), leader(), failing(), notes())

