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
"""

from __future__ import annotations

import json
import logging
import math
import re
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pyoxigraph as ox
from sqlalchemy import CursorResult, and_, delete, func, or_, select, update
from sqlalchemy.exc import IntegrityError

from lucid_hub.auth.tokens import Principal, TokenService
from lucid_hub.config import Settings
from lucid_hub.db.models import PatchRecord, WindowedQuery, WindowedResult
from lucid_hub.db.session import Database
from lucid_hub.db.times import aware, iso, now
from lucid_hub.errors import (
    ConflictError,
    ForbiddenError,
    InputError,
    InputTooLargeError,
    NotFoundError,
    QueryLimitExceeded,
)
from lucid_hub.policy.decisions import Party
from lucid_hub.policy.policy_graph import PolicyService
from lucid_hub.publish.publisher import Publisher
from lucid_hub.queries.evaluator import BudgetExceeded, Overruns, QueryEngine, Refusal
from lucid_hub.queries.webhooks import Webhooks, webhook_state
from lucid_hub.rdf.canon import Canonicalizer
from lucid_hub.rdf.rdfpatch import read_rdf_patch
from lucid_hub.supervisor import Supervisor

log = logging.getLogger(__name__)

WINDOW_GRAPH = "urn:lucid-hub:window"
LH = "https://w3id.org/lucid-hub#"
RDF = "http://www.w3.org/1999/02/22-rdf-syntax-ns#"
XSD = "http://www.w3.org/2001/XMLSchema#"
GRACE = 2.0  # seconds after a time window's end before it is evaluated (commits in flight)
LOOK = 0.5  # seconds between looks for windows that have ended
MAX_PATCHES = 10_000  # patches one window may hold
CATCH_UP = 100  # missed windows evaluated after a pause or restart (older ones are skipped)
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_DURATION = re.compile(r"(\d{1,9})(ms|s|m|h|d)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


@dataclass(frozen=True)
class Window:
    """A window's range and step: seconds (time windows) or patches (count windows)."""

    range: float
    step: float
    by_time: bool

    @classmethod
    def parse(cls, range_spec: Any, step_spec: Any) -> Window:
        size, by_time = _spec(range_spec, "range")
        step, step_by_time = _spec(step_spec, "step")
        if by_time != step_by_time:
            raise InputError("range and step must both be durations (e.g. 1h and 10m) or both patch counts")
        if by_time and step < 1:
            raise InputError("a step shorter than 1s is not offered")
        return cls(size, step, by_time)


def _spec(value: Any, what: str) -> tuple[float, bool]:
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        raise InputError(f"{what} must be a duration (30s, 10m, 1h, 1d) or a number of patches")
    text = value.strip()
    if text.isdigit() and len(text) <= 6:
        count = int(text)
        if not 1 <= count <= MAX_PATCHES:
            raise InputError(f"{what} must be between 1 and {MAX_PATCHES:,} patches")
        return float(count), False
    found = _DURATION.fullmatch(text)
    if found is None:
        raise InputError(f"{what} {text[:40]!r} is neither a duration (30s, 10m, 1h, 1d) nor a number of patches")
    seconds = int(found.group(1)) * _UNITS[found.group(2)]
    if not 0 < seconds <= 366 * 86400:
        raise InputError(f"{what} must be longer than 0 and at most a year")
    return seconds, True


def _iri_term(iri: str) -> str:
    return f"<{iri}>"


def _literal(value: str, datatype: str | None = None) -> str:
    escaped = json.dumps(value, ensure_ascii=False)  # a valid N-Triples string literal
    return escaped + (f"^^<{datatype}>" if datatype else "")


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
        self.db = db
        self.publisher = publisher
        self.policies = policies
        self.tokens = tokens
        self.engine = engine
        self.trial = trial or engine
        self.overruns = Overruns(settings.query_budget)
        self.canonicalizer = canonicalizer
        self.evaluates = evaluates
        self.clock = clock
        self._stop = threading.Event()
        self._started = False
        self._cond = threading.Condition()
        self._written = 0
        self._evaluating = threading.Lock()  # one evaluation round at a time (the thread, tests)
        self.webhooks = Webhooks(settings, db, self._messages, self._may_deliver, self._end, model=WindowedQuery,
                                 header="X-Lucid-Window", label=lambda row: str(row.name))
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

    # --- registration ------------------------------------------------------------------
    def register(self, caller: Principal, name: str, text: str, graphs: list[str], range_spec: Any,
                 step_spec: Any, *, with_state: bool = False, callback: str | None = None,
                 secret: str | None = None) -> dict[str, Any]:
        self.overruns.check(caller.party.account)  # first: a refused party's flood costs the least
        if not _NAME.fullmatch(name):
            raise InputError("a windowed query's name is 1-64 letters, digits, '.', '_' or '-', starting with a "
                             "letter or digit")
        if len(text.encode()) > self.settings.max_query_bytes:
            raise InputTooLargeError(f"the query is longer than {self.settings.max_query_bytes:,} bytes "
                                     "(LUCID_MAX_QUERY_BYTES)")
        window = Window.parse(range_spec, step_spec)
        if not graphs or len(graphs) > 100 or not all(isinstance(g, str) and g for g in graphs):
            raise InputError("graphs must list 1-100 graph IRIs whose patches the window holds")
        party = caller.party
        unreadable = [g for g in graphs if g not in set(self.policies.readable(party, graphs))]
        if unreadable:
            raise ForbiddenError(f"{party.account} may not read {', '.join(unreadable[:5])}")
        with self.db.session() as session:
            held = session.scalar(select(func.count()).select_from(WindowedQuery).where(
                WindowedQuery.account == party.account, WindowedQuery.state != "ended")) or 0
            if held >= self.settings.query_subscriptions_per_party:
                raise QueryLimitExceeded(f"{party.account} holds {held} windowed queries, the most one party may "
                                         "hold (LUCID_QUERY_SUBSCRIPTIONS_PER_PARTY)")
            if session.scalar(select(WindowedQuery.id).where(WindowedQuery.account == party.account,
                                                             WindowedQuery.name == name)) is not None:
                raise _taken(name)
        self._check_query(text, party.account)
        stamp = now()
        row = WindowedQuery(id="wq-" + secrets.token_hex(12), name=name, account=party.account,
                            endpoint_id=party.endpoint_id, groups=" ".join(sorted(party.groups)),
                            token_id=caller.jti, query=text,
                            graphs=json.dumps(sorted(set(graphs))), range_spec=str(range_spec).strip(),
                            step_spec=str(step_spec).strip(), with_state=with_state, state="active", reason="",
                            next_end_at=None, next_end_position=0, sequence=-1, callback=callback, secret=secret,
                            callback_seq=-1, callback_attempts=0, callback_next_at=None, callback_error="",
                            created_at=stamp, updated_at=stamp)
        self._schedule(row, window)
        try:
            with self.db.session() as session:
                session.add(row)
        except IntegrityError:  # the same name registered at the same moment
            raise _taken(name) from None
        return self.describe(caller, name)

    def _check_query(self, text: str, account: str) -> None:
        """Evaluate the query once on an empty window: a query that does not parse (or is
        not SELECT/ASK/CONSTRUCT) is refused now, not at its first window."""
        try:
            self.trial.window(text, WINDOW_GRAPH, [], {})
        except Refusal as refusal:
            raise refusal.as_error() from None
        except BudgetExceeded as exc:
            self.overruns.overran(account)
            raise QueryLimitExceeded(f"the query on an empty window {exc.args[0]} (LUCID_QUERY_BUDGET)") from None
        self.overruns.completed(account)

    def _schedule(self, row: WindowedQuery, window: Window) -> None:
        """The end of the row's next window, from now."""
        if window.by_time:
            row.next_end_at = datetime.fromtimestamp(math.floor(self.clock() / window.step + 1) * window.step, UTC)
        else:
            row.next_end_position = self._position(_graphs(row)) + int(window.step)

    # --- the merged history ------------------------------------------------------------
    def _position(self, graphs: list[str]) -> int:
        with self.db.session() as session:
            return int(session.scalar(select(func.count()).select_from(PatchRecord).where(
                PatchRecord.graph.in_(graphs))) or 0)

    def _records(self, graphs: list[str], *, start: datetime | None = None, end: datetime | None = None,
                 first: int | None = None, last: int | None = None) -> list[PatchRecord]:
        """Patches of the graphs in merged order: created in (start, end], or at positions
        first..last (1-based, inclusive)."""
        query = select(PatchRecord).where(PatchRecord.graph.in_(graphs)).order_by(
            PatchRecord.created, PatchRecord.graph, PatchRecord.seq)
        if start is not None and end is not None:
            query = query.where(PatchRecord.created > start, PatchRecord.created <= end).limit(MAX_PATCHES + 1)
        if first is not None and last is not None:
            query = query.offset(max(0, first - 1)).limit(last - max(1, first) + 1)
        with self.db.session() as session:
            found = list(session.scalars(query))
            session.expunge_all()
        if len(found) > MAX_PATCHES:
            raise QueryLimitExceeded(f"the window holds more than {MAX_PATCHES:,} patches; use a shorter range")
        return found

    def _states(self, graphs: list[str], records: list[PatchRecord], end: datetime | None) -> dict[str, list[str]]:
        """Each graph at its last version up to the window's end: a time, or (count windows)
        the window's last patch in the merged order; a graph with no patch before the end is
        empty. Never a version after the end: a replay must not show what came later."""
        states: dict[str, list[str]] = {}
        last = records[-1] if records else None
        for graph in graphs:
            query = select(PatchRecord.id).where(PatchRecord.graph == graph)
            if end is not None:
                query = query.where(PatchRecord.created <= end)
            elif last is not None:  # (created, graph, seq) at most the last one's: merged order
                query = query.where(or_(PatchRecord.created < last.created,
                                        and_(PatchRecord.created == last.created, PatchRecord.graph < last.graph),
                                        and_(PatchRecord.created == last.created, PatchRecord.graph == last.graph,
                                             PatchRecord.seq <= last.seq)))
            else:
                states[graph] = []
                continue
            with self.db.session() as session:
                version = session.scalar(query.order_by(PatchRecord.seq.desc()).limit(1))
            states[graph] = self.publisher.content(graph, version)[1] if version else []
        return states

    def changes(self, records: list[PatchRecord]) -> list[str]:
        """The window's changes described in RDF (docs/queries.md, "What a window holds")."""
        lines: list[str] = []
        base = self.settings.public_url
        for record in records:
            patch_iri = _iri_term(f"{base}/patches/{record.id}")
            patch = read_rdf_patch(record.body, self.canonicalizer)
            lines += [f"{patch_iri} <{RDF}type> <{LH}Patch>", f"{patch_iri} <{LH}graph> {_iri_term(record.graph)}",
                      f"{patch_iri} <{LH}time> {_literal(aware(record.created).isoformat(), XSD + 'dateTime')}",
                      f"{patch_iri} <{LH}author> {_literal(record.author)}",
                      f"{patch_iri} <{LH}id> {_literal(record.id)}",
                      f"{patch_iri} <{LH}sequence> {_literal(str(record.seq), XSD + 'integer')}"]
            n = 0
            for kind, msgs in (("Removed", patch.removed), ("Added", patch.added)):
                for msg_index, msg in enumerate(msgs):
                    for statement in msg.statements:
                        s, p, o = _split(statement, f"m{record.seq}x{kind[0]}{msg_index}")
                        change = f"_:c{record.seq}x{n}"
                        n += 1
                        lines += [f"{change} <{LH}patch> {patch_iri}", f"{change} <{LH}change> <{LH}{kind}>",
                                  f"{change} <{RDF}subject> {s}", f"{change} <{RDF}predicate> {p}",
                                  f"{change} <{RDF}object> {o}"]
        return lines

    # --- evaluation ----------------------------------------------------------------------
    def evaluate_due(self) -> int:
        """Evaluate every window that has ended; how many were evaluated."""
        done = 0
        with self._evaluating:
            with self.db.session() as session:
                ids = list(session.scalars(select(WindowedQuery.id).where(WindowedQuery.state == "active")))
            for ident in ids:
                done += self._evaluate_due(ident)
        return done

    def _evaluate_due(self, ident: str) -> int:
        with self.db.session() as session:
            row = session.get(WindowedQuery, ident)
            if row is None or row.state != "active":
                return 0
            session.expunge(row)
        window = Window.parse(row.range_spec, row.step_spec)
        graphs = _graphs(row)
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
            elif self._position(graphs) < row.next_end_position:
                return done
            if not self._allowed(row):
                return done
            try:
                element = self.element(row, window, end_at if window.by_time else row.next_end_position)
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
            with self.db.session() as session:
                changed = cast(CursorResult[Any], session.execute(update(WindowedQuery).where(
                    WindowedQuery.id == ident, WindowedQuery.state == "active").values(
                    sequence=row.sequence, next_end_at=row.next_end_at, next_end_position=row.next_end_position,
                    updated_at=now()))).rowcount
                if not changed:  # paused or deleted meanwhile
                    return done
                session.add(WindowedResult(query=ident, sequence=row.sequence, body=json.dumps(element),
                                           created_at=now()))
                kept_from = row.sequence - self.settings.query_retain
                session.execute(delete(WindowedResult).where(WindowedResult.query == ident,
                                                             WindowedResult.sequence <= kept_from))
            done += 1
            self._wake()

    def _allowed(self, row: WindowedQuery) -> bool:
        """Whether the query may still see its graphs (ends it when not)."""
        graphs = _graphs(row)
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
        with self.db.session() as session:
            row = session.get(WindowedQuery, ident)
            if row is None or row.state != "active":
                return False
            session.expunge(row)
        return self._allowed(row)

    def _messages(self, ident: str, after: int, limit: int) -> list[tuple[int, dict[str, Any]]]:
        with self.db.session() as session:
            found = session.execute(select(WindowedResult.sequence, WindowedResult.body).where(
                WindowedResult.query == ident, WindowedResult.sequence > after)
                .order_by(WindowedResult.sequence).limit(limit)).all()
        return [(seq, json.loads(body)) for seq, body in found]

    def _wake(self) -> None:
        with self._cond:
            self._written += 1
            self._cond.notify_all()
        self.webhooks.wake()
        self.on_written()

    def element(self, row: WindowedQuery, window: Window, end: datetime | int) -> dict[str, Any]:
        """The output element of the window ending at `end` (a time, or a position in the
        merged history): what it held and the query's results over it."""
        graphs = _graphs(row)
        if isinstance(end, datetime):
            start = end - timedelta(seconds=window.range)
            records = self._records(graphs, start=start, end=end)
            bounds: dict[str, Any] = {"windowStart": iso(start), "windowEnd": iso(end)}
            states = self._states(graphs, records, end) if row.with_state else {}
        else:
            first = max(1, end - int(window.range) + 1)
            records = self._records(graphs, first=first, last=end)
            bounds = {"windowStart": first, "windowEnd": end}
            states = self._states(graphs, records, None) if row.with_state else {}
        results = self.engine.window(row.query, WINDOW_GRAPH, self.changes(records), states)
        return {"query": row.name, **bounds, "patches": [r.id for r in records], "results": _as_sparql_json(results)}

    def replay(self, caller: Principal, name: str, sequence: int) -> dict[str, Any]:
        """A past element evaluated again from the archive (the same, unless the graphs'
        history changed: it does not, patches are immutable)."""
        row = self._row(caller, name)
        lapse = self._lapse(caller, row)
        if lapse is not None:
            raise ForbiddenError(lapse)
        with self.db.session() as session:
            stored = session.get(WindowedResult, (row.id, sequence))
            if stored is None:
                raise NotFoundError(f"{name} has no result {sequence} (kept: the last LUCID_QUERY_RETAIN)")
            body = json.loads(stored.body)
        end = body["windowEnd"]
        window = Window.parse(row.range_spec, row.step_spec)
        element = self.element(row, window, datetime.fromisoformat(end) if isinstance(end, str) else int(end))
        element["sequence"] = sequence
        return element

    # --- management ----------------------------------------------------------------------
    def _row(self, caller: Principal, name: str) -> WindowedQuery:
        """The caller's query of that name (names are each party's own: another's is unknown)."""
        with self.db.session() as session:
            row = session.scalars(select(WindowedQuery).where(WindowedQuery.account == caller.account,
                                                              WindowedQuery.name == name[:64])).one_or_none()
            if row is None:
                raise NotFoundError(f"no windowed query {name[:64]} of yours")
            session.expunge(row)
            return row

    def _lapse(self, caller: Principal, row: WindowedQuery) -> str | None:
        """Why the caller may no longer read what was stored for its query (None while it
        may), ending the query when it lost access. Asked at each read of stored results:
        access is decided when they are read, not only when they were made."""
        graphs = _graphs(row)
        lost = [g for g in graphs if g not in set(self.policies.readable(caller.party, graphs))]
        if not lost:
            return None
        reason = f"access to {', '.join(lost[:5])} was withdrawn: the windowed query ended"
        if row.state != "ended":
            self._end(row.id, reason)
        return f"{caller.account} may no longer read {', '.join(lost[:5])}: {reason}"

    def describe(self, caller: Principal, name: str) -> dict[str, Any]:
        row = self._row(caller, name)
        return {"name": row.name, "query": row.query, "graphs": _graphs(row), "range": row.range_spec,
                "webhook": webhook_state(row),
                "step": row.step_spec, "state": row.state, "reason": row.reason or None,
                "withState": row.with_state, "lastSequence": row.sequence,
                "nextWindowEnd": iso(aware(row.next_end_at)) if row.next_end_at else row.next_end_position,
                "created": iso(row.created_at)}

    def act(self, caller: Principal, name: str, action: str) -> dict[str, Any]:
        """pause or restart (restart: the next window ends a step from now)."""
        row = self._row(caller, name)
        if action not in ("pause", "restart"):
            raise InputError("action must be pause or restart")
        if row.state == "ended":
            raise ConflictError(f"{name} has ended ({row.reason}); register it again")
        values: dict[str, Any] = {"state": "paused" if action == "pause" else "active", "updated_at": now()}
        if action == "restart":
            self._schedule(row, Window.parse(row.range_spec, row.step_spec))
            values.update(next_end_at=row.next_end_at, next_end_position=row.next_end_position,
                          token_id=caller.jti)
        with self.db.session() as session:
            session.execute(update(WindowedQuery).where(WindowedQuery.id == row.id).values(**values))
        return self.describe(caller, name)

    def delete(self, caller: Principal, name: str) -> None:
        row = self._row(caller, name)
        with self.db.session() as session:
            session.execute(delete(WindowedResult).where(WindowedResult.query == row.id))
            session.execute(delete(WindowedQuery).where(WindowedQuery.id == row.id))

    def _end(self, ident: str, reason: str) -> None:
        with self.db.session() as session:
            session.execute(update(WindowedQuery).where(WindowedQuery.id == ident).values(
                state="ended", reason=reason[:1024], updated_at=now()))
        log.info("windowed query %s ended: %s", ident, reason)
        self._wake()

    # --- the output stream -------------------------------------------------------------
    def results(self, caller: Principal, name: str, after: int, limit: int = 100) -> tuple[list[tuple[int, Any]],
                                                                                           str, str]:
        """Elements after `after` (up to `limit`), the query's state and reason; none once the
        caller may no longer read its graphs (the query has then ended, and the reason says why)."""
        row = self._row(caller, name)
        lapse = self._lapse(caller, row)
        if lapse is not None:
            return [], "ended", lapse
        return self._messages(row.id, after, limit), row.state, row.reason

    def generation(self) -> int:
        with self._cond:
            return self._written

    def wait(self, generation: int, timeout: float) -> None:
        with self._cond:
            if self._written == generation:
                self._cond.wait(min(timeout, LOOK) if not self.evaluates else timeout)


def _taken(name: str) -> ConflictError:
    return ConflictError(f"a windowed query of yours named {name} exists; delete it first or choose another name")


def _graphs(row: WindowedQuery) -> list[str]:
    return list(json.loads(row.graphs))


def _split(statement: str, scope: str) -> tuple[str, str, str]:
    """Subject, predicate and object of a canonical N-Triples line, its blank nodes made
    local to one MSG of one patch (`scope`)."""
    quad = next(iter(ox.parse(statement + " .", format=ox.RdfFormat.N_TRIPLES)))

    def term(t: Any) -> str:
        return f"_:{scope}{t.value}" if isinstance(t, ox.BlankNode) else str(t)

    return term(quad.subject), str(quad.predicate), term(quad.object)


def _as_sparql_json(results: dict[str, Any]) -> dict[str, Any]:
    if "boolean" in results:
        return {"head": {}, "boolean": results["boolean"]}
    return {"head": {"vars": results["vars"]}, "results": {"bindings": results["rows"]}}
