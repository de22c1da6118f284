"""Evaluating query subscriptions in the leader: a new one's first evaluation (tried apart
first), the store's changes followed in chain order, each change matched against the index,
each affected subscription re-checked for access and evaluated (or moved by the rows the
worker derived from the patch), and the notifications written in one transaction."""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from lucid_hub.auth.tokens import TokenService
from lucid_hub.config import Settings
from lucid_hub.db.models import QuerySubscription
from lucid_hub.db.times import now
from lucid_hub.errors import QueryLimitExceeded
from lucid_hub.policy.decisions import Party
from lucid_hub.policy.policy_graph import POLICY_GRAPH, PolicyService
from lucid_hub.queries import results as rs
from lucid_hub.queries.evaluator import BudgetExceeded, Overruns, QueryEngine, Refusal, Registration
from lucid_hub.queries.index import Index, Live
from lucid_hub.queries.records import QueryRecords, iri_list
from lucid_hub.store.graphs import GraphStore, StoreChange

log = logging.getLogger(__name__)


class Evaluation:
    """The evaluating process's subscriptions: registered in the worker, indexed, followed."""

    def __init__(self, settings: Settings, store: GraphStore, policies: PolicyService, tokens: TokenService,
                 records: QueryRecords, sync: Callable[[], list[str]], wake: Callable[[], None]) -> None:
        self.settings = settings
        self.policies = policies
        self.tokens = tokens
        self.records = records
        self.sync = sync  # brings this process's store up to the archive (others' patches)
        self.wake = wake  # notifications were written, or a subscription ended
        self.engine = QueryEngine(store, settings.query_memory_mb, settings.query_budget,
                                  settings.query_max_result_bytes, base=f"{settings.public_url}/sparql")
        # A new subscription's first evaluation runs here first: a party's query that overruns
        # kills this worker, not the one that holds every followed graph (and the engine's
        # lock is not held meanwhile, so the others' notifications do not wait for it).
        self.trial = QueryEngine(store, settings.query_memory_mb, settings.query_budget,
                                 settings.query_max_result_bytes, base=f"{settings.public_url}/sparql")
        self.overruns = Overruns(settings.query_budget)
        self.index = Index()
        self._live: dict[str, Live] = {}
        self._changes: queue.SimpleQueue[StoreChange] = queue.SimpleQueue()
        self.work = threading.Event()  # a change is queued
        self.evaluations = 0  # subscriptions evaluated after changes (for the benchmark)
        self.deltas = 0  # subscriptions that took a patch's rows from the worker (the delta path)
        self.delta_fallbacks = 0  # ... whose rows did not fit (evaluated in full instead)
        self.changes = 0  # store changes processed
        self.busy = 0.0  # seconds spent processing them (matching, evaluating, diffing, writing)

    @property
    def waiting(self) -> int:
        """The store's changes not evaluated yet (the continuous queries' lag)."""
        return self._changes.qsize()

    def changed(self, change: StoreChange) -> None:
        """The store applied a change (called under its lock: only queue it)."""
        self._changes.put(change)
        self.work.set()

    def close(self) -> None:
        self.engine.close()
        self.trial.close()

    # --- taking subscriptions ----------------------------------------------------------------
    def activate(self, row: QuerySubscription, *, new: bool) -> dict[str, Any]:
        """Register and evaluate a subscription in this (the evaluating) process; store it
        with its first notification. Raises what the party should be told."""
        party = Party(row.account, row.endpoint_id, frozenset(row.groups.split()))
        # The graphs the party may read: those that exist, and those it names (a graph
        # may be subscribed to before its first version is published).
        asked = (iri_list(row.default_graphs) or []) + (iri_list(row.named_graphs) or [])
        default_graph = self.settings.default_graph_for(row.account)
        asked += [default_graph] if default_graph else []  # it may not exist yet: it is still the dataset's
        readable = self.policies.readable(party, sorted(set(self.sync()) | set(asked)))
        self._try_first(row, readable)
        with self.engine.lock:
            try:
                registration = self.engine.register(row.id, row.query, readable, iri_list(row.default_graphs),
                                                    iri_list(row.named_graphs),
                                                    default_graph=self.settings.default_graph_for(row.account))
                if not registration.graphs:  # its dataset is fixed now: it would stay empty
                    raise Refusal("forbidden", f"{party.account} may read none of this hub's graphs: the "
                                               "subscription's dataset would be empty")
                self.engine.ensure(registration.graphs)
                results = rs.Results.of(self.engine.evaluate(row.id))
            except Refusal as refusal:
                self.engine.forget(row.id)
                raise refusal.as_error() from None
            except BudgetExceeded as exc:
                self.engine.forget(row.id)
                self.overruns.overran(row.account)
                raise QueryLimitExceeded(f"the query's first evaluation {exc.args[0]} (LUCID_QUERY_BUDGET, "
                                         f"{self.settings.query_budget:g} s); it was stopped") from None
            self.overruns.completed(row.account)
            message = rs.notification(row.id, row.alias, 0, rs.first(results))
            row.form, row.state, row.sequence = registration.form, "active", 0
            row.default_graphs, row.named_graphs = json.dumps(registration.default), json.dumps(registration.named)
            row.results = json.dumps(results.as_dict())
            row.updated_at = now()
            self.records.store_first(row, message, new=new)
            self._hold(Live(row.id, row.alias, party, row.token_id, registration, results, 0))
        self.wake()
        return message

    def _hold(self, live: Live) -> None:
        self._live[live.id] = live
        self.index.add(live.id, live.registration)

    def _try_first(self, row: QuerySubscription, readable: list[str]) -> None:
        """The subscription's first evaluation in the trial worker, on the graphs as they are
        now: what it refuses or overruns never reaches the worker of the followed graphs.
        (The subscription is then evaluated there once more: a change between the two must
        not be missed, and a query that passed here is known to fit its budget.)"""
        with self.trial.lock:
            try:
                registration = self.trial.register(row.id, row.query, readable, iri_list(row.default_graphs),
                                                   iri_list(row.named_graphs),
                                                   default_graph=self.settings.default_graph_for(row.account))
                if not registration.graphs:
                    raise Refusal("forbidden", f"{row.account} may read none of this hub's graphs: the "
                                               "subscription's dataset would be empty")
                self.trial.current(registration.graphs)
                self.trial.evaluate(row.id)
            except Refusal as refusal:
                raise refusal.as_error() from None
            except BudgetExceeded as exc:
                self.overruns.overran(row.account)
                raise QueryLimitExceeded(f"the query's first evaluation {exc.args[0]} (LUCID_QUERY_BUDGET, "
                                         f"{self.settings.query_budget:g} s); it was stopped") from None
            finally:
                self.trial.forget(row.id)

    def resume_all(self) -> None:
        """The subscriptions active when the evaluating process stopped: each registered
        again, evaluated on the graphs as they are now, and notified of the difference."""
        with self.engine.lock:
            for row in self.records.rows("active"):
                self._resume(row)

    def _resume(self, row: QuerySubscription) -> None:
        party = Party(row.account, row.endpoint_id, frozenset(row.groups.split()))
        default, named = iri_list(row.default_graphs) or [], iri_list(row.named_graphs) or []
        try:
            registration: Registration = self.engine.register(row.id, row.query, sorted(set(default) | set(named)),
                                                              default, named)
        except Refusal as refusal:
            self.end(row.id, f"the query could not be registered again: {refusal.message}")
            return
        live = Live(row.id, row.alias, party, row.token_id, registration,
                    rs.Results.of(json.loads(row.results)), row.sequence)
        self._hold(live)
        self.engine.ensure(registration.graphs)
        message = self._refresh(live, [])
        self._write([] if message is None else [(live, message)])

    # --- following the store -----------------------------------------------------------------
    def drain(self) -> None:
        """Process the store's changes queued so far."""
        with self.engine.lock:
            while True:
                try:
                    change = self._changes.get_nowait()
                except queue.Empty:
                    return
                started = time.perf_counter()
                self._process(change)
                self.changes += 1
                self.busy += time.perf_counter() - started

    def _process(self, change: StoreChange) -> None:
        if change.graph == POLICY_GRAPH:
            self.policies.refresh(every=0)
            for live in list(self._live.values()):
                self._check_access(live)
        candidates = (self.index.matching(change.graph, [*change.removed, *change.added])
                      if change.removed is not None and change.added is not None else set())
        applied, affected, deltas = self.engine.apply(change, candidates)
        if applied in ("ignored", "stale"):
            return
        if applied == "reloaded":  # (or dropped) every subscription on the graph may have changed
            affected = {sid for sid, live in self._live.items() if change.graph in live.registration.graphs}
            deltas = {}
        patches = [change.patch] if change.patch else []
        written: list[tuple[Live, dict[str, Any]]] = []
        try:
            for sid in sorted(affected | set(deltas)):
                found = self._live.get(sid)
                if found is None:
                    continue
                if sid in deltas and sid not in affected:
                    message = self._take_delta(found, deltas[sid], patches)
                else:
                    message = self._refresh(found, patches)
                if message is not None:
                    written.append((found, message))
        finally:
            self._write(written)  # one transaction for the patch's notifications

    def _take_delta(self, live: Live, delta: dict[str, Any], patches: list[str]) -> dict[str, Any] | None:
        """A subscription's change from the rows the worker derived from the patch (the
        delta path); a full evaluation if they do not fit its results (never expected:
        counted in `delta_fallbacks`)."""
        if not self._check_access(live):
            return None
        self.deltas += 1
        came, went = rs.Results(live.results.vars, delta["added"]), rs.Results(live.results.vars, delta["removed"])
        try:
            new = rs.apply(live.results, rs.Change(came, went))
        except ValueError:
            self.delta_fallbacks += 1
            log.warning("query subscription %s: the patch's rows did not fit its results; evaluated in full", live.id)
            return self._refresh(live, patches)
        return _advance(live, new, patches)

    def _refresh(self, live: Live, patches: list[str]) -> dict[str, Any] | None:
        """Evaluate a subscription again; the notification of its change (None: none, or
        the subscription ended). The caller writes it."""
        if not self._check_access(live):
            return None
        self.evaluations += 1
        try:
            new = rs.Results.of(self.engine.evaluate(live.id))
        except BudgetExceeded as exc:
            self.end(live.id, f"an evaluation {exc.args[0]} (LUCID_QUERY_BUDGET, {self.settings.query_budget:g} s): "
                              "the subscription was stopped")
            return None
        except Refusal as refusal:
            self.end(live.id, f"the subscription was stopped: {refusal.message}")
            return None
        return _advance(live, new, patches)

    def _write(self, written: list[tuple[Live, dict[str, Any]]]) -> None:
        if written:
            self.records.write(written)
            self.wake()

    # --- access and ending -------------------------------------------------------------------
    def _check_access(self, live: Live) -> bool:
        graphs = sorted(live.registration.graphs)
        readable = set(self.policies.readable(live.party, graphs))
        lost = [g for g in graphs if g not in readable]
        if lost:
            self.end(live.id, f"access to {', '.join(lost[:5])} was withdrawn: the subscription ended")
            return False
        return True

    def may_deliver(self, sid: str) -> bool:
        """Whether a notification of `sid` may still be sent (ends the subscription when its
        access was withdrawn or its token revoked)."""
        with self.engine.lock:
            live = self._live.get(sid)
            if live is None:
                return False
            if self.tokens.is_revoked(live.token_id):
                self.end(sid, "the access token the subscription was made with was revoked")
                return False
            return self._check_access(live)

    def check_revocations(self) -> None:
        """End the subscriptions whose tokens were revoked."""
        for live in list(self._live.values()):
            if self.tokens.is_revoked(live.token_id):
                self.end(live.id, "the access token the subscription was made with was revoked")

    def end(self, sid: str, reason: str, *, refusal: str = "") -> None:
        with self.engine.lock:
            self._live.pop(sid, None)
            self.index.remove(sid)
            with contextlib.suppress(BudgetExceeded, Refusal):
                self.engine.forget(sid)
            self.engine.unused_graphs(self.index.graphs())
        self.records.end(sid, reason, refusal)
        log.info("query subscription %s ended: %s", sid, reason)
        self.wake()

    def up_to_date(self, sid: str, sequence: int) -> bool:
        """Whether this process knows the subscription is active and has nothing after
        `sequence` (so a channel need not look at the database)."""
        live = self._live.get(sid)
        return live is not None and live.sequence <= sequence


def _advance(live: Live, new: rs.Results, patches: list[str]) -> dict[str, Any] | None:
    """Move a subscription to its new results; the notification (None: they did not change)."""
    change = rs.diff(live.results, new)
    if change.empty:
        return None
    live.sequence += 1
    live.results = new
    return rs.notification(live.id, live.alias, live.sequence, change, patches=patches)
