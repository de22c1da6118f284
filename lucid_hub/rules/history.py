"""The rules' firing history (`rule_firings`): one row per rule and triggering patch, which is
also what makes a deferred firing idempotent."""

from __future__ import annotations

import logging
import threading
from typing import Any

from sqlalchemy import select

from lucid_hub.db.models import RuleFiring
from lucid_hub.db.session import Database
from lucid_hub.rules.model import Firing, aware

log = logging.getLogger(__name__)

HISTORY_LIMIT = 1000
HISTORY_DELAY = 0.05  # seconds the background writer gathers immediate firings before writing them


class FiringHistory:
    """Writes firings (an immediate cascade's in the background) and reads them back."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._rows: list[dict[str, Any]] = []  # immediate firings the background writer has yet to write
        self._lock = threading.Lock()
        # Held while rows taken from `_rows` are written: a reader's flush waits for the
        # background writer's transaction, or it read the history without the rows in flight
        # (a firing missing from /rules/firings right after its patch, seen under load).
        self._writing = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()

    def record(self, firings: list[Firing], now: bool = False) -> None:
        """Add firings to the history: an immediate cascade's in the background (a database
        round trip was a third of a matching rule's cost; the patches themselves are in the
        archive already), a deferred firing's `now` (its row is what makes it idempotent)."""
        if not firings:
            return
        rows = [firing.row() for firing in firings]
        if now:
            self._insert(rows)
            return
        with self._lock:
            self._rows.extend(rows)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._write, name="lucid-rule-history", daemon=True)
                self._thread.start()

    def _write(self) -> None:
        while True:
            self._stopping.wait(HISTORY_DELAY)  # gather a burst into one transaction
            with self._writing:
                with self._lock:
                    rows, self._rows = self._rows, []
                    if not rows:
                        self._thread = None
                        return
                self._insert(rows)

    def flush(self) -> None:
        """Write what the background writer has not written yet, and wait for what it is
        writing (before reading the history)."""
        with self._writing:
            with self._lock:
                rows, self._rows = self._rows, []
            self._insert(rows)

    def stop(self) -> None:
        self._stopping.set()
        self.flush()

    def _insert(self, rows: list[dict[str, Any]]) -> None:
        if not rows:
            return
        try:
            with self.db.session() as session:
                for row in rows:
                    session.execute(self.db.insert(RuleFiring).values(**row)
                                    .on_conflict_do_nothing(index_elements=["rule", "trigger"]))
        except Exception:
            log.exception("recording rule firings failed")  # a record; publishing goes on

    def newest(self, rule: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        """The newest firings first (of one rule, or of all)."""
        self.flush()
        query = select(RuleFiring).order_by(RuleFiring.seq.desc()).limit(max(1, min(limit, HISTORY_LIMIT)))
        if rule is not None:
            query = query.where(RuleFiring.rule == rule)
        with self.db.session() as session:
            return [{"rule": f.rule, "trigger": f.trigger, "graph": f.graph, "coupling": f.coupling,
                     "depth": f.depth, "instances": f.instances, "kept": f.kept, "outcome": f.outcome,
                     "reason": f.reason or None, "patches": f.patches.split() if f.patches else [],
                     "attempts": f.attempts, "firedAt": aware(f.fired_at).isoformat()}
                    for f in session.scalars(query)]
