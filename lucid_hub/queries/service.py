"""Continuous SPARQL query subscriptions (SEPA's model, made durable).

A party subscribes with a query over graphs it may read; the first notification (sequence
0) holds the current results, each later one the rows added and removed by a patch that
changed them. Subscriptions, their current results and their recent notifications are in
the database: they survive restarts, and a client that comes back with the last sequence
it saw gets every notification it missed, or a reset when they are no longer kept.

How a patch reaches the subscriptions: the store tells this service each change it
applies (`GraphStore.watch`), in chain order; the service moves its worker's replica by the
same change, finds the subscriptions whose triple patterns the changed triples can match
(an index by graph and predicate, SEPA's LUTT), re-checks each one's access, evaluates it
in the worker within its time budget and notifies when the results differ. One process of
a hub evaluates (the leader); others take subscriptions as `pending` and serve
notifications from the database.
"""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import secrets
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, cast

from sqlalchemy import Table, bindparam, delete, insert, select, update

from lucid_hub.auth.tokens import Principal, TokenService
from lucid_hub.config import Settings
from lucid_hub.db.models import QueryNotification, QuerySubscription
from lucid_hub.db.session import Database
from lucid_hub.db.times import iso, now
from lucid_hub.errors import (
    ForbiddenError,
    InputError,
    InputTooLargeError,
    NotFoundError,
    QueryLimitExceeded,
    StoreError,
)
from lucid_hub.policy.decisions import Party
from lucid_hub.policy.policy_graph import POLICY_GRAPH, PolicyService
from lucid_hub.queries import results as rs
from lucid_hub.queries.evaluator import BudgetExceeded, Overruns, QueryEngine, Refusal, Registration
from lucid_hub.queries.webhooks import Webhooks, webhook_state
from lucid_hub.rdf.statements import terms
from lucid_hub.store.graphs import GraphStore, StoreChange
from lucid_hub.supervisor import Supervisor

log = logging.getLogger(__name__)

POLL = 0.25  # seconds between looks at the database for other processes' work
REVOCATION_CHECK = 5.0  # seconds between checks of the subscriptions' tokens


@dataclass
class _Live:
    """A subscription as the evaluating process holds it."""

    id: str
    alias: str
    party: Party
    token_id: str
    registration: Registration
    results: rs.Results
    sequence: int


@dataclass
class Index:
    """Subscriptions by the graphs and triple patterns they can match (SEPA's LUTT)."""

    by_graph: dict[str, dict[str | None, list[tuple[str, str | None, str | None]]]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(list)))

    def add(self, sid: str, registration: Registration) -> None:
        for graph in registration.graphs:
            for s, p, o in registration.patterns:
                entry = (sid, s, o)
                if entry not in self.by_graph[graph][p]:
                    self.by_graph[graph][p].append(entry)

    def remove(self, sid: str) -> None:
        for graph in list(self.by_graph):
            for p in list(self.by_graph[graph]):
                self.by_graph[graph][p] = [e for e in self.by_graph[graph][p] if e[0] != sid]
                if not self.by_graph[graph][p]:
                    del self.by_graph[graph][p]
            if not self.by_graph[graph]:
                del self.by_graph[graph]

    def graphs(self) -> set[str]:
        return set(self.by_graph)

    def matching(self, graph: str, statements: Iterable[str]) -> set[str]:
        """The subscriptions a change of these triples of `graph` may affect."""
        patterns = self.by_graph.get(graph)
        if not patterns:
            return set()
        found: set[str] = set()
        wildcard = patterns.get(None, [])
        for statement in statements:
            s, p, o = terms(statement)[:3]
            for sid, ps, po in (*patterns.get(p[1:-1], ()), *wildcard):
                if sid in found:
                    continue
                if (ps is None or s == f"<{ps}>") and (po is None or o == f"<{po}>"):
                    found.add(sid)
        return found


def _iri_list(value: str | None) -> list[str] | None:
    return None if value is None else list(json.loads(value))


class QueryService:
    """Query subscriptions of one hub process (thread-safe)."""

    def __init__(self, settings: Settings, db: Database, store: GraphStore, policies: PolicyService,
                 tokens: TokenService, sync: Callable[[], list[str]], *, evaluates: bool) -> None:
        self.settings = settings
        self.db = db
        self.store = store
        self.policies = policies
        self.tokens = tokens
        self.sync = sync  # brings this process's store up to the archive (others' patches)
        self.evaluates = evaluates
        self.engine = QueryEngine(store, settings.query_memory_mb, settings.query_budget,
                                  settings.query_max_result_bytes, base=f"{settings.public_url}/sparql")
        # A new subscription's first evaluation runs here first: a party's query that overruns
        # kills this worker, not the one that holds every followed graph (and the engine's
        # lock is not held meanwhile, so the others' notifications do not wait for it).
        self.trial = QueryEngine(store, settings.query_memory_mb, settings.query_budget,
                                 settings.query_max_result_bytes, base=f"{settings.public_url}/sparql")
        self.overruns = Overruns(settings.query_budget)
        self.index = Index()
        self._live: dict[str, _Live] = {}
        self._changes: queue.SimpleQueue[StoreChange] = queue.SimpleQueue()
        self._cond = threading.Condition()  # notifications written (wakes channels) and work to do
        self._written = 0  # counts notifications written in this process
        self._work = threading.Event()
        self._stop = threading.Event()
        self._started = False
        self._last_poll = 0.0
        self._revocations_checked = 0.0
        self.evaluations = 0  # subscriptions evaluated after changes (for the benchmark)
        self.deltas = 0  # subscriptions that took a patch's rows from the worker (the delta path)
        self.delta_fallbacks = 0  # ... whose rows did not fit (evaluated in full instead)
        self.changes = 0  # store changes processed
        self.busy = 0.0  # seconds spent processing them (matching, evaluating, diffing, writing)
        self.webhooks = Webhooks(settings, db, self.messages, self.may_deliver, self._end)

    # --- lifecycle -------------------------------------------------------------------------
    def lead(self) -> None:
        """This process took the leadership over: it is the one to evaluate the subscriptions (`start` follows)."""
        self.evaluates = True

    def start(self, roles: Supervisor) -> None:
        """Evaluate in this process: load the active subscriptions, catch each up with what
        changed while none ran (one notification each), then follow the store's changes (the
        role `query-subscriptions`, woken by each change)."""
        if not self.evaluates or self._started:
            return
        self._started = True
        self.store.watch(self._changed)
        with self.engine.lock:
            for row in self._rows("active"):
                self._resume(row)
        roles.add("query-subscriptions", self.round, every=POLL, wake=self._work)
        self.webhooks.start(roles, "query-webhooks")

    def stop(self) -> None:
        """After the roles stopped: wake what waits for notifications, close the worker."""
        self._stop.set()
        self._work.set()
        with self._cond:
            self._cond.notify_all()
        self.webhooks.stop()
        self.store.unwatch(self._changed)
        self.engine.close()
        self.trial.close()

    def _changed(self, change: StoreChange) -> None:
        """The store applied a change (called under its lock: only queue it)."""
        self._changes.put(change)
        self._work.set()

    # --- subscribing -----------------------------------------------------------------------
    def subscribe(self, caller: Principal, text: str, *, default: list[str] | None = None,
                  named: list[str] | None = None, alias: str = "", callback: str | None = None,
                  secret: str | None = None) -> dict[str, Any]:
        """Make a subscription; its first notification (sequence 0: the current results)."""
        if len(text.encode()) > self.settings.max_query_bytes:
            raise InputTooLargeError(f"the query is longer than {self.settings.max_query_bytes:,} bytes "
                             "(LUCID_MAX_QUERY_BYTES)")
        if len(alias) > 255:
            raise InputError("the alias is longer than 255 characters")
        party = caller.party
        self.overruns.check(party.account)  # before the database: a refused party's flood costs the least
        with self.db.session() as session:
            held = len(session.scalars(select(QuerySubscription.id).where(
                QuerySubscription.account == party.account,
                QuerySubscription.state.in_(("active", "pending")))).all())
        if held >= self.settings.query_subscriptions_per_party:
            raise QueryLimitExceeded(f"{party.account} holds {held} query subscriptions, the most one party may "
                                     f"hold (LUCID_QUERY_SUBSCRIPTIONS_PER_PARTY); unsubscribe some first")
        sid = "qs-" + secrets.token_hex(12)
        stamp = now()
        row = QuerySubscription(
            id=sid, alias=alias, account=party.account, endpoint_id=party.endpoint_id, groups=" ".join(
                sorted(party.groups)), token_id=caller.jti, query=text,
            default_graphs=None if default is None else json.dumps(default),
            named_graphs=None if named is None else json.dumps(named), form="", state="pending", reason="", refusal="",
            sequence=0, results="", callback=callback, secret=secret, callback_seq=-1, callback_attempts=0,
            callback_next_at=None, callback_error="", created_at=stamp, updated_at=stamp)
        if self.evaluates:
            return self._activate(row, new=True)
        with self.db.session() as session:
            session.add(row)
        return self._await_first(sid)

    def _await_first(self, sid: str) -> dict[str, Any]:
        """In a process that does not evaluate: wait for the leader to answer the request."""
        deadline = time.monotonic() + self.settings.query_budget + 30
        while time.monotonic() < deadline:
            with self.db.session() as session:
                row = session.get(QuerySubscription, sid)
                assert row is not None
                if row.state == "ended":
                    session.delete(row)
                    raise _REFUSALS.get(row.refusal, InputError)(row.reason)
                if row.state == "active":
                    break
            time.sleep(POLL)  # polling the database: the leader is another process
        else:
            raise StoreError("the hub's evaluating process did not take the subscription in time; try again")
        found = self.messages(sid, -1)
        return found[0][1]

    def _activate(self, row: QuerySubscription, *, new: bool) -> dict[str, Any]:
        """Register and evaluate a subscription in this (the evaluating) process; store it
        with its first notification. Raises what the party should be told."""
        party = Party(row.account, row.endpoint_id, frozenset(row.groups.split()))
        # The graphs the party may read: those that exist, and those it names (a graph
        # may be subscribed to before its first version is published).
        asked = (_iri_list(row.default_graphs) or []) + (_iri_list(row.named_graphs) or [])
        readable = self.policies.readable(party, sorted(set(self.sync()) | set(asked)))
        self._try_first(row, readable)
        with self.engine.lock:
            try:
                registration = self.engine.register(row.id, row.query, readable, _iri_list(row.default_graphs),
                                                    _iri_list(row.named_graphs))
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
            with self.db.session() as session:
                if new:
                    session.add(row)
                else:
                    session.merge(row)
                session.flush()  # the notification refers to it
                session.add(QueryNotification(subscription=row.id, sequence=0, body=json.dumps(message),
                                              created_at=row.updated_at))
            live = _Live(row.id, row.alias, party, row.token_id, registration, results, 0)
            self._live[row.id] = live
            self.index.add(row.id, registration)
        self._wake_channels()
        return message

    def _try_first(self, row: QuerySubscription, readable: list[str]) -> None:
        """The subscription's first evaluation in the trial worker, on the graphs as they are
        now: what it refuses or overruns never reaches the worker of the followed graphs.
        (The subscription is then evaluated there once more: a change between the two must
        not be missed, and a query that passed here is known to fit its budget.)"""
        with self.trial.lock:
            try:
                registration = self.trial.register(row.id, row.query, readable, _iri_list(row.default_graphs),
                                                   _iri_list(row.named_graphs))
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

    def _resume(self, row: QuerySubscription) -> None:
        """A subscription that was active when the evaluating process stopped: registered
        again, evaluated on the graphs as they are now, and notified of the difference."""
        party = Party(row.account, row.endpoint_id, frozenset(row.groups.split()))
        default, named = _iri_list(row.default_graphs) or [], _iri_list(row.named_graphs) or []
        try:
            registration = self.engine.register(row.id, row.query, sorted(set(default) | set(named)), default, named)
        except Refusal as refusal:
            self._end(row.id, f"the query could not be registered again: {refusal.message}")
            return
        live = _Live(row.id, row.alias, party, row.token_id, registration,
                     rs.Results.of(json.loads(row.results)), row.sequence)
        self._live[row.id] = live
        self.index.add(row.id, registration)
        self.engine.ensure(registration.graphs)
        message = self._refresh(live, [])
        self._write([] if message is None else [(live, message)])

    # --- following the store ---------------------------------------------------------------
    def round(self) -> None:
        """One round of the role: other processes' work (every POLL s), the queued changes,
        and now and then whether the parties may still read what they subscribed to."""
        if self._stop.is_set():
            return
        if time.monotonic() - self._last_poll >= POLL:
            self._last_poll = time.monotonic()
            self.sync()  # other processes' patches reach this store (and come back as changes)
            self._take_pending()
        self._drain()
        if time.monotonic() - self._revocations_checked >= REVOCATION_CHECK:
            self.check_revocations()

    def drain(self) -> None:
        """Process the store's changes queued so far (tests and the benchmark call it)."""
        self._drain()

    def _drain(self) -> None:
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
        written: list[tuple[_Live, dict[str, Any]]] = []
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

    def _take_delta(self, live: _Live, delta: dict[str, Any], patches: list[str]) -> dict[str, Any] | None:
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
        return self._advance(live, new, patches)

    def _refresh(self, live: _Live, patches: list[str]) -> dict[str, Any] | None:
        """Evaluate a subscription again; the notification of its change (None: none, or
        the subscription ended). The caller writes it."""
        if not self._check_access(live):
            return None
        self.evaluations += 1
        try:
            new = rs.Results.of(self.engine.evaluate(live.id))
        except BudgetExceeded as exc:
            self._end(live.id, f"an evaluation {exc.args[0]} (LUCID_QUERY_BUDGET, {self.settings.query_budget:g} s): "
                               "the subscription was stopped")
            return None
        except Refusal as refusal:
            self._end(live.id, f"the subscription was stopped: {refusal.message}")
            return None
        return self._advance(live, new, patches)

    @staticmethod
    def _advance(live: _Live, new: rs.Results, patches: list[str]) -> dict[str, Any] | None:
        """Move a subscription to its new results; the notification (None: they did not change)."""
        change = rs.diff(live.results, new)
        if change.empty:
            return None
        live.sequence += 1
        live.results = new
        return rs.notification(live.id, live.alias, live.sequence, change, patches=patches)

    def _write(self, written: list[tuple[_Live, dict[str, Any]]]) -> None:
        """Store notifications with their subscriptions' new results and sequences (one
        transaction), prune what is no longer kept, wake the channels."""
        if not written:
            return
        stamp = now()
        subscriptions = cast(Table, QuerySubscription.__table__)
        notifications = cast(Table, QueryNotification.__table__)
        with self.db.session() as session:
            session.execute(update(subscriptions).where(subscriptions.c.id == bindparam("b_id")).values(
                sequence=bindparam("b_sequence"), results=bindparam("b_results"), updated_at=stamp), [
                {"b_id": live.id, "b_sequence": live.sequence, "b_results": json.dumps(live.results.as_dict())}
                for live, _message in written])
            session.execute(insert(notifications), [
                {"subscription": live.id, "sequence": live.sequence, "body": json.dumps(message), "created_at": stamp}
                for live, message in written])
            for live, _message in written:
                if live.sequence % 100 == 0 or live.sequence > self.settings.query_retain:
                    session.execute(delete(QueryNotification).where(
                        QueryNotification.subscription == live.id,
                        QueryNotification.sequence <= live.sequence - self.settings.query_retain))
        self._wake_channels()

    def _wake_channels(self) -> None:
        self.notify_channels()
        self.webhooks.wake()

    def notify_channels(self) -> None:
        """Wake the channels (SSE, WebSockets) to look for what is new: this service's
        notifications, or the windowed queries' results a WebSocket observes."""
        with self._cond:
            self._written += 1
            self._cond.notify_all()

    def _take_pending(self) -> None:
        """Subscriptions other processes took: evaluate them here (or refuse them)."""
        for row in self._rows("pending"):
            try:
                self._activate(row, new=False)
            except (InputError, ForbiddenError, QueryLimitExceeded, StoreError) as exc:
                self._end(row.id, str(exc), refusal=type(exc).__name__)

    # --- access ----------------------------------------------------------------------------
    def _check_access(self, live: _Live) -> bool:
        graphs = sorted(live.registration.graphs)
        readable = set(self.policies.readable(live.party, graphs))
        lost = [g for g in graphs if g not in readable]
        if lost:
            self._end(live.id, f"access to {', '.join(lost[:5])} was withdrawn: the subscription ended")
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
                self._end(sid, "the access token the subscription was made with was revoked")
                return False
            return self._check_access(live)

    def check_revocations(self) -> None:
        """End the subscriptions whose tokens were revoked."""
        self._revocations_checked = time.monotonic()
        for live in list(self._live.values()):
            if self.tokens.is_revoked(live.token_id):
                self._end(live.id, "the access token the subscription was made with was revoked")

    # --- ending ----------------------------------------------------------------------------
    def _end(self, sid: str, reason: str, *, refusal: str = "") -> None:
        with self.engine.lock:
            self._live.pop(sid, None)
            self.index.remove(sid)
            with contextlib.suppress(BudgetExceeded, Refusal):
                self.engine.forget(sid)
            self.engine.unused_graphs(self.index.graphs())
        with self.db.session() as session:
            session.execute(update(QuerySubscription).where(QuerySubscription.id == sid).values(
                state="ended", reason=reason[:1024], refusal=refusal, updated_at=now()))
        log.info("query subscription %s ended: %s", sid, reason)
        self._wake_channels()

    def unsubscribe(self, caller: Principal, sid: str) -> None:
        row = self.describe_row(caller, sid)
        if row.state == "ended":
            return
        if self.evaluates:
            self._end(sid, "unsubscribed")
        else:
            with self.db.session() as session:
                session.execute(update(QuerySubscription).where(QuerySubscription.id == sid).values(
                    state="ended", reason="unsubscribed", updated_at=now()))

    # --- reading ---------------------------------------------------------------------------
    def _rows(self, state: str) -> list[QuerySubscription]:
        with self.db.session() as session:
            rows = list(session.scalars(select(QuerySubscription).where(QuerySubscription.state == state)
                                        .order_by(QuerySubscription.created_at)))
            session.expunge_all()
            return rows

    def describe_row(self, caller: Principal, sid: str) -> QuerySubscription:
        """The subscription, when it is the caller's (404 otherwise: ids are not disclosed)."""
        with self.db.session() as session:
            row = session.get(QuerySubscription, sid[:64])
            if row is None or row.account != caller.account:
                raise NotFoundError(f"no query subscription {sid[:64]} of yours")
            session.expunge(row)
            return row

    def lapse(self, caller: Principal, row: QuerySubscription) -> str | None:
        """Why the caller may no longer read the notifications stored for its subscription
        (None while it may), ending the subscription when it lost access to a graph of its
        dataset. Asked at each read: access is decided when notifications are read, not
        only when they were made."""
        graphs = sorted(set(_iri_list(row.default_graphs) or []) | set(_iri_list(row.named_graphs) or []))
        lost = [g for g in graphs if g not in set(self.policies.readable(caller.party, graphs))]
        if not lost:
            return None
        reason = f"access to {', '.join(lost[:5])} was withdrawn: the subscription ended"
        if row.state != "ended":
            if self.evaluates:
                self._end(row.id, reason)
            else:
                with self.db.session() as session:
                    session.execute(update(QuerySubscription).where(QuerySubscription.id == row.id).values(
                        state="ended", reason=reason, updated_at=now()))
        return f"{caller.account} may no longer read {', '.join(lost[:5])}: {reason}"

    def describe(self, caller: Principal, sid: str) -> dict[str, Any]:
        row = self.describe_row(caller, sid)
        return {"spuid": row.id, "alias": row.alias, "state": row.state, "reason": row.reason or None,
                "query": row.query, "form": row.form, "default-graph-uri": _iri_list(row.default_graphs),
                "named-graph-uri": _iri_list(row.named_graphs), "sequence": row.sequence,
                "created": iso(row.created_at), "updated": iso(row.updated_at),
                "webhook": webhook_state(row)}

    def state(self, sid: str) -> tuple[str, str, int]:
        """(state, reason, last sequence) of a subscription."""
        with self.db.session() as session:
            row = session.get(QuerySubscription, sid)
            if row is None:
                return "ended", "the subscription does not exist", -1
            return row.state, row.reason, row.sequence

    def messages(self, sid: str, after: int, limit: int = 100) -> list[tuple[int, dict[str, Any]]]:
        """Notifications after sequence `after`, in order; when the first of them is no longer
        kept, one reset message (the current results, marked `reset`) in their place."""
        with self.db.session() as session:
            rows = session.execute(select(QueryNotification.sequence, QueryNotification.body).where(
                QueryNotification.subscription == sid, QueryNotification.sequence > after)
                .order_by(QueryNotification.sequence).limit(limit)).all()
            if rows and rows[0][0] == after + 1:
                return [(seq, json.loads(body)) for seq, body in rows]
            sub = session.get(QuerySubscription, sid)
            if sub is None or sub.sequence <= after or sub.state == "pending":
                return []
            current = rs.Results.of(json.loads(sub.results))
            reset = rs.notification(sid, sub.alias, sub.sequence, rs.first(current), reset=True)
            return [(sub.sequence, reset)]

    def catch_up(self, sid: str, after: int,
                 caller: Principal) -> tuple[list[tuple[int, dict[str, Any]]], dict[str, Any] | None]:
        """What a channel of `caller` sends next: the notifications after `after` (up to 100:
        ask again), and, once none is left, the SE error that closes the channel when the
        subscription ended, the caller may no longer read its graphs or the channel's token
        was revoked (None: it goes on)."""
        revoked = self.tokens.is_revoked(caller.jti)
        if self._up_to_date(sid, after) and not revoked:
            return [], None  # (known in this process: no need to ask the database)
        found = self.messages(sid, after)
        if found:
            lapse = self.lapse(caller, self.describe_row(caller, sid))  # every batch is a read
            if lapse is not None:
                return [], rs.error(410, "subscription_ended", lapse, spuid=sid)
            return found, None
        state, reason, _sequence = self.state(sid)
        if state == "ended":
            return [], rs.error(410, "subscription_ended", reason, spuid=sid)
        if revoked:
            return [], rs.error(401, "invalid_token", "the access token was revoked", spuid=sid)
        return [], None

    def _up_to_date(self, sid: str, sequence: int) -> bool:
        """Whether this (the evaluating) process knows the subscription is active and has
        nothing after `sequence` (so a channel need not look at the database)."""
        live = self._live.get(sid)
        return live is not None and live.sequence <= sequence

    def wake_all(self) -> None:
        """Wake every channel waiting for notifications (e.g. one whose client left)."""
        with self._cond:
            self._cond.notify_all()

    def generation(self) -> int:
        with self._cond:
            return self._written

    def wait(self, generation: int, timeout: float) -> int:
        """Until a notification is written in this process after `generation` (others'
        processes' are seen by polling: at most POLL later), or `timeout`."""
        with self._cond:
            if self._written == generation:
                self._cond.wait(min(timeout, POLL) if not self.evaluates else timeout)
            return self._written


# What a process that does not evaluate answers a request the evaluating process refused.
_REFUSALS: dict[str, type[Exception]] = {e.__name__: e for e in (
    InputError, InputTooLargeError, ForbiddenError, QueryLimitExceeded, StoreError)}
