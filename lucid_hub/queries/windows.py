"""Windowed continuous queries (C-SPARQL's model, on the hub's patch stream).

A party registers a named query over the patch stream of graphs it may read, with a window
(`range`) and how often it is evaluated (`step`): both durations (`30s`, `10m`, `1h`, `1d`)
or both patch counts (`100`). Each evaluation is a new element of the query's output
stream (kept in the database, read and resumed like the query subscriptions' notifications).

What the query sees (its dataset): the default graph `urn:lucid-hub:window` describes the
patches in the window and their changes (see WINDOW_VOCABULARY in docs/queries.md); with
`state`, each graph at its last version in the window is a named graph too.

Time is each patch's commit time (`created`, signed in the patch: the same on every hub
that mirrors it). A time window (E - range, E] ends at a multiple of `step` since the Unix
epoch and is evaluated `GRACE` seconds after E; a count window holds the `range` patches
ending at a position of the graphs' merged history (ordered by time, graph, sequence) and
is evaluated once that position is reached. So a window's results depend only on the
archive: `replay` evaluates any past window again and gets the same element.

`WindowService` is the face the web layer sees; `window_content.py` says what a window holds
and evaluates it, `window_records.py` keeps the rows and results.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from lucid_hub.auth.tokens import Principal, TokenService
from lucid_hub.config import Settings
from lucid_hub.db.models import WindowedQuery
from lucid_hub.db.session import Database
from lucid_hub.db.times import aware, iso, now
from lucid_hub.errors import (
    ConflictError,
    ForbiddenError,
    InputError,
    NotFoundError,
    QueryLimitExceeded,
)
from lucid_hub.policy.decisions import Party
from lucid_hub.policy.policy_graph import PolicyService
from lucid_hub.publish.publisher import Publisher
from lucid_hub.queries.evaluator import BudgetExceeded, Overruns, QueryEngine, Refusal
from lucid_hub.queries.webhooks import Webhooks, webhook_state
from lucid_hub.queries.window_content import WINDOW_GRAPH, Window, WindowContent, dataset_of, graphs_of, read_by
from lucid_hub.queries.window_records import WindowRecords
from lucid_hub.queries.window_registration import Registrar
from lucid_hub.rdf.canon import Canonicalizer
from lucid_hub.supervisor import Supervisor

log = logging.getLogger(__name__)

GRACE = 2.0  # seconds after a time window's end before it is evaluated (commits in flight)
LOOK = 0.5  # seconds between looks for windows that have ended
CATCH_UP = 100  # missed windows evaluated after a pause or restart (older ones are skipped)

__all__ = ["GRACE", "WINDOW_GRAPH", "Window", "WindowService"]


class WindowService:
    """Windowed queries of one hub: registration, evaluation (in the evaluating process)
    and their output streams."""

    def __init__(self, settings: Settings, db: Database, publisher: Publisher, policies: PolicyService,
                 tokens: TokenService, engine: QueryEngine, canonicalizer: Canonicalizer, *, evaluates: bool,
                 trial: QueryEngine | None = None, clock: Callable[[], float] = time.time,
                 on_written: Callable[[], None] = lambda: None) -> None:
        """`on_written` hears of each window's results written (the WebSockets observe them).
        `engine` evaluates the windows that end; `trial` (else `engine`) a new query's check on an
        empty window. Neither holds graphs (a window carries its data), so a worker killed at a
        party's budget is back at once, and the continuous queries' worker, which holds the followed
        graphs, is never the one killed."""
        self.settings = settings
        self.policies = policies
        self.tokens = tokens
        self.engine = engine
        self.trial = trial or engine
        self.overruns = Overruns(settings.query_budget)
        self.evaluates = evaluates
        self.clock = clock
        self.content = WindowContent(settings, db, publisher, canonicalizer, engine)
        self.records = WindowRecords(settings, db)
        self.registrar = Registrar(settings, policies, self.records, self.content, self.trial, self.overruns,
                                   lambda: self.clock())  # the service's clock, as tests move it
        self._stop = threading.Event()
        self._started = False
        self._cond = threading.Condition()
        self._written = 0
        self._evaluating = threading.Lock()  # one evaluation round at a time (the thread, tests)
        self.webhooks = Webhooks(settings, db, self.records.messages, self._may_deliver, self._end,
                                 model=WindowedQuery, header="X-Lucid-Window", label=lambda row: str(row.name))
        self.on_written = on_written  # wakes the WebSocket observers

    # --- lifecycle ---------------------------------------------------------------------
    def lead(self) -> None:
        """This process took the leadership over: it is the one to evaluate the windows (`start` follows)."""
        self.evaluates = True

    def start(self, roles: Supervisor) -> None:
        """Evaluate the windows that end (the role `windowed-queries`) and send their webhooks."""
        if not self.evaluates or self._started:
            return
        self._started = True
        roles.add("windowed-queries", self.evaluate_due, every=LOOK)
        self.webhooks.start(roles, "window-webhooks")

    def stop(self) -> None:
        self._stop.set()
        self.webhooks.stop()
        self.engine.close()
        self.trial.close()

    # --- evaluation ----------------------------------------------------------------------
    def evaluate_due(self) -> int:
        """Evaluate every window that has ended; how many were evaluated."""
        done = 0
        with self._evaluating:
            for ident in self.records.active_ids():
                done += self._evaluate_due(ident)
        return done

    def _evaluate_due(self, ident: str) -> int:
        row = self.records.active(ident)
        if row is None:
            return 0
        window = Window.parse(row.range_spec, row.step_spec)
        graphs = graphs_of(row)
        done = 0
        while True:
            if window.by_time:
                assert row.next_end_at is not None
                end_at = aware(row.next_end_at)
                if end_at.timestamp() + GRACE > self.clock():
                    return done
                behind = int((self.clock() - GRACE - end_at.timestamp()) // window.step)
                if behind > CATCH_UP:  # long paused or stopped: skip to the most recent windows
                    end_at += timedelta(seconds=(behind - CATCH_UP) * window.step)
            elif self.content.position(graphs) < row.next_end_position:
                return done
            if not self._allowed(row):
                return done
            try:
                element = self.content.element(row, window, end_at if window.by_time else row.next_end_position)
            except (Refusal, BudgetExceeded, QueryLimitExceeded) as exc:
                reason = exc.message if isinstance(exc, Refusal) else str(exc.args[0] if exc.args else exc)
                self._end(ident, f"a window could not be evaluated: {reason}")
                return done
            row.sequence += 1
            element["sequence"] = row.sequence
            if window.by_time:
                row.next_end_at = end_at + timedelta(seconds=window.step)
            else:
                row.next_end_position += int(window.step)
            if not self.records.advance(row, element):  # paused or deleted meanwhile
                return done
            done += 1
            self._wake()

    def _allowed(self, row: WindowedQuery) -> bool:
        """Whether the query may still see its graphs (ends it when not)."""
        graphs = read_by(row)
        party = Party(row.account, row.endpoint_id, frozenset(row.groups.split()))
        lost = [g for g in graphs if g not in set(self.policies.readable(party, graphs))]
        if lost:
            self._end(row.id, f"access to {', '.join(lost[:5])} was withdrawn: the windowed query ended")
            return False
        if self.tokens.is_revoked(row.token_id):
            self._end(row.id, "the access token the query was registered with was revoked")
            return False
        return True

    def _may_deliver(self, ident: str) -> bool:
        row = self.records.active(ident)
        return row is not None and self._allowed(row)

    def _wake(self) -> None:
        with self._cond:
            self._written += 1
            self._cond.notify_all()
        self.webhooks.wake()
        self.on_written()

    def replay(self, caller: Principal, name: str, sequence: int) -> dict[str, Any]:
        """A past element evaluated again from the archive (the same, unless the graphs'
        history changed: it does not, patches are immutable)."""
        row = self.readable(caller, name)
        body = self.records.stored(row.id, sequence)
        if body is None:
            raise NotFoundError(f"{name} has no result {sequence} (kept: the last LUCID_QUERY_RETAIN)")
        end = body["windowEnd"]
        window = Window.parse(row.range_spec, row.step_spec)
        element = self.content.element(row, window, datetime.fromisoformat(end) if isinstance(end, str) else int(end))
        element["sequence"] = sequence
        return element

    def readable(self, caller: Principal, name: str) -> WindowedQuery:
        """The caller's query, while the caller may read what it stored (403 with the reason
        once it may not: the query has then ended)."""
        row = self.records.own(caller, name)
        lapse = self._lapse(caller, row)
        if lapse is not None:
            raise ForbiddenError(lapse)
        return row

    # --- management ----------------------------------------------------------------------
    def _lapse(self, caller: Principal, row: WindowedQuery) -> str | None:
        """Why the caller may no longer read what was stored for its query (None while it
        may), ending the query when it lost access. Asked at each read of stored results:
        access is decided when they are read, not only when they were made."""
        graphs = read_by(row)
        lost = [g for g in graphs if g not in set(self.policies.readable(caller.party, graphs))]
        if not lost:
            return None
        reason = f"access to {', '.join(lost[:5])} was withdrawn: the windowed query ended"
        if row.state != "ended":
            self._end(row.id, reason)
        return f"{caller.account} may no longer read {', '.join(lost[:5])}: {reason}"

    def describe(self, caller: Principal, name: str) -> dict[str, Any]:
        row = self.records.own(caller, name)
        return {"name": row.name, "query": row.query, "graphs": graphs_of(row), "range": row.range_spec,
                "webhook": webhook_state(row),
                "step": row.step_spec, "state": row.state, "reason": row.reason or None, "view": row.view,
                "static": dataset_of(row), "csparql": row.source,
                "withState": row.with_state, "lastSequence": row.sequence,
                "nextWindowEnd": iso(aware(row.next_end_at)) if row.next_end_at else row.next_end_position,
                "created": iso(row.created_at)}

    def act(self, caller: Principal, name: str, action: str) -> dict[str, Any]:
        """pause or restart (restart: the next window ends a step from now)."""
        row = self.records.own(caller, name)
        if action not in ("pause", "restart"):
            raise InputError("action must be pause or restart")
        if row.state == "ended":
            raise ConflictError(f"{name} has ended ({row.reason}); register it again")
        values: dict[str, Any] = {"state": "paused" if action == "pause" else "active", "updated_at": now()}
        if action == "restart":
            self.content.schedule(row, Window.parse(row.range_spec, row.step_spec), self.clock())
            values.update(next_end_at=row.next_end_at, next_end_position=row.next_end_position,
                          token_id=caller.jti)
        self.records.change(row.id, **values)
        return self.describe(caller, name)

    def delete(self, caller: Principal, name: str) -> None:
        self.records.delete(self.records.own(caller, name).id)

    def _end(self, ident: str, reason: str) -> None:
        self.records.end(ident, reason)
        log.info("windowed query %s ended: %s", ident, reason)
        self._wake()

    # --- the output stream -------------------------------------------------------------
    def results(self, caller: Principal, name: str, after: int, limit: int = 100) -> tuple[list[tuple[int, Any]],
                                                                                           str, str]:
        """Elements after `after` (up to `limit`), the query's state and reason; none once the
        caller may no longer read its graphs (the query has then ended, and the reason says why)."""
        row = self.records.own(caller, name)
        lapse = self._lapse(caller, row)
        if lapse is not None:
            return [], "ended", lapse
        return self.records.messages(row.id, after, limit), row.state, row.reason

    def generation(self) -> int:
        with self._cond:
            return self._written

    def wait(self, generation: int, timeout: float) -> None:
        with self._cond:
            if self._written == generation:
                self._cond.wait(min(timeout, LOOK) if not self.evaluates else timeout)

