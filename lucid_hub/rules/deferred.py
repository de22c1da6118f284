"""Deferred rules (and every webhook or notification) run in the leader process after commit:
a follower of each rule's graph with a durable cursor (`rule_cursors`), at least once,
idempotent by triggering patch (`rule_firings` holds one row per rule and trigger); a failing
firing is retried with backoff, LUCID_RULES_MAX_ATTEMPTS times, then recorded as failed and
passed over, so one rule never holds up another."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import select, update

from lucid_hub.archive import Archive
from lucid_hub.db.models import RuleCursor
from lucid_hub.db.session import Database
from lucid_hub.errors import LucidError
from lucid_hub.metrics import Metrics
from lucid_hub.policy.decisions import Party
from lucid_hub.publish.hooks import Writer
from lucid_hub.rdf.canon import Canonicalizer
from lucid_hub.rdf.patch import Patch
from lucid_hub.rdf.rdfpatch import read_rdf_patch
from lucid_hub.rules.actions import Actions
from lucid_hub.rules.history import FiringHistory
from lucid_hub.rules.lanes import Lanes
from lucid_hub.rules.model import Firing, Registered, RuleFailed, aware, delta, may_match, refusal
from lucid_hub.rules.ruleset import RuleSet
from lucid_hub.supervisor import Supervisor

log = logging.getLogger(__name__)

BACKOFF_BASE, BACKOFF_MAX = 1.0, 300.0  # seconds between a failing deferred firing's attempts


def start_cursors(db: Database, archive: Archive, rules: list[Registered]) -> None:
    """A new deferred rule starts at its graph's head: it reacts to what comes after it."""
    with db.session() as session:
        known = set(session.scalars(select(RuleCursor.rule)))
        for reg in rules:
            if reg.rule.iri not in known:
                head = archive.current_head(reg.graph)
                session.add(RuleCursor(rule=reg.rule.iri, graph=reg.graph, patch=head, attempts=0, retry_at=None))


class DeferredRules:
    """The role `deferred-rules`: each deferred rule follows its graph's patches."""

    def __init__(self, db: Database, archive: Archive, canonicalizer: Canonicalizer, rule_set: RuleSet,
                 lanes: Lanes, actions: Actions, history: FiringHistory, metrics: Metrics, writer: Writer, *,
                 max_attempts: int, allows: Callable[[Party, str, Any], bool]) -> None:
        self.db = db
        self.archive = archive
        self.canonicalizer = canonicalizer
        self.rule_set = rule_set
        self.lanes = lanes
        self.actions = actions
        self.history = history
        self.metrics = metrics
        self.writer = writer
        self.max_attempts = max_attempts
        self.allows = allows
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._started = False

    def start(self, roles: Supervisor) -> None:
        if self._started:
            return
        self._started = True
        roles.add("deferred-rules", self.round, every=1.0, wake=self.rule_set.wake)

    def stop(self) -> None:
        self._stopping.set()
        self.rule_set.wake.set()

    def round(self) -> bool:
        """A round of the role: the rules as the rules graph says now, then one batch of
        deferred firings; whether more may be waiting (the supervisor runs it again at once)."""
        if self._stopping.is_set():
            return False
        self.rule_set.refresh()
        return bool(self.run(100))

    def run(self, limit: int = 100) -> int:
        """One round of the deferred rules: each handles up to `limit` patches; how many it did."""
        with self._lock:  # one round at a time: two would send the same webhook twice
            done = 0
            for reg in list(self.rule_set.deferred):
                done += self._follow(reg, limit)
            return done

    def _follow(self, reg: Registered, limit: int) -> int:
        """Up to `limit` patches of the rule's graph after its cursor; how many it handled."""
        with self.db.session() as session:
            cursor = session.get(RuleCursor, reg.rule.iri)
            if cursor is None:
                return 0
            at, attempts, retry_at = cursor.patch, cursor.attempts, cursor.retry_at
        if retry_at is not None and aware(retry_at) > datetime.now(UTC):
            return 0
        try:
            records = self.archive.after(reg.graph, at)[:limit]
        except LucidError:
            return 0  # the graph is not there (yet)
        done = 0
        for record in records:
            patch = read_rdf_patch(record.body, self.canonicalizer)
            if patch.author == "rule engine" or not may_match(reg.rule, patch):
                self._advance(reg.rule.iri, record.id)
                continue
            firing = Firing(reg.rule.iri, record.id, reg.graph, reg.rule.coupling, 1, attempts=attempts + 1)
            try:
                self._fire(reg, patch, firing)
            except RuleFailed as exc:
                firing.outcome, firing.reason = "failed", exc.reason
                self.metrics.rule_firings.labels("failed").inc()
                if firing.attempts < self.max_attempts:
                    delay = min(BACKOFF_MAX, BACKOFF_BASE * 2 ** (firing.attempts - 1))
                    self._retry_later(reg.rule.iri, firing, delay)
                    break
            if firing.outcome != "no-match":
                self.history.record([firing], now=True)
            self._advance(reg.rule.iri, record.id)
            attempts = 0
            done += 1
        return done

    def _fire(self, reg: Registered, patch: Patch, firing: Firing) -> None:
        refused = refusal(reg, self.allows)
        if refused:
            firing.outcome, firing.reason = "skipped", refused
            return
        rule = reg.rule
        if rule.action != "update":
            answer = self.lanes.evaluate(reg, patch.graph, *delta(patch))
            if not _kept(answer, firing):
                return
            self.actions.send(reg, patch, answer)
            firing.outcome = "sent"
        else:  # evaluated once, under the locks of what it writes: the graphs hold still for it
            locks = set(rule.writes) | {g for w in rule.writes for g in self.rule_set.locks_for(w)}
            with self.writer.writing(locks):
                answer = self.lanes.evaluate(reg, patch.graph, *delta(patch))
                if not _kept(answer, firing):
                    return
                try:
                    made = self.actions.write(reg, patch, answer["edits"], self.writer) if answer["edits"] else []
                except LucidError as exc:
                    raise RuleFailed(rule.iri, str(exc)) from None
            firing.patches = [p.id for p in made]
            firing.outcome = "patched" if made else "unchanged"
        self.metrics.rule_firings.labels(firing.outcome).inc()

    def _advance(self, rule: str, patch_id: str) -> None:
        with self.db.session() as session:
            session.execute(update(RuleCursor).where(RuleCursor.rule == rule)
                            .values(patch=patch_id, attempts=0, retry_at=None))

    def _retry_later(self, rule: str, firing: Firing, delay: float) -> None:
        with self.db.session() as session:
            session.execute(update(RuleCursor).where(RuleCursor.rule == rule)
                            .values(attempts=firing.attempts, retry_at=datetime.now(UTC) + timedelta(seconds=delay)))
        log.warning("deferred rule <%s> failed on patch %s (attempt %d), retried in %.0f s: %s", rule,
                    firing.trigger, firing.attempts, delay, firing.reason)


def _kept(answer: dict[str, Any], firing: Firing) -> bool:
    """Note the event's instances and the condition's result; whether the action runs."""
    firing.instances, firing.kept = answer["instances"], answer["kept"]
    if not answer["kept"]:
        firing.outcome = "not-met" if answer["instances"] else "no-match"
    return bool(answer["kept"])
