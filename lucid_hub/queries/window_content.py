"""What a window holds: its range and step, the patches of its graphs in merged order (by
time, or by position in the graphs' merged history), each graph's state at the window's end,
the window's changes described in RDF, and the query's results over all of that."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pyoxigraph as ox
from sqlalchemy import and_, func, or_, select

from lucid_hub.config import Settings
from lucid_hub.db.models import PatchRecord, WindowedQuery
from lucid_hub.db.session import Database
from lucid_hub.db.times import aware, iso
from lucid_hub.errors import InputError, QueryLimitExceeded
from lucid_hub.publish.publisher import Publisher
from lucid_hub.queries.evaluator import QueryEngine
from lucid_hub.rdf.canon import Canonicalizer
from lucid_hub.rdf.rdfpatch import read_rdf_patch

WINDOW_GRAPH = "urn:lucid-hub:window"
LH = "https://w3id.org/lucid-hub#"
RDF = "http://www.w3.org/1999/02/22-rdf-syntax-ns#"
XSD = "http://www.w3.org/2001/XMLSchema#"
MAX_PATCHES = 10_000  # patches one window may hold
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


class WindowContent:
    """A window's patches, states and changes, read from the archive, and its element."""

    def __init__(self, settings: Settings, db: Database, publisher: Publisher, canonicalizer: Canonicalizer,
                 engine: QueryEngine) -> None:
        self.settings = settings
        self.db = db
        self.publisher = publisher
        self.canonicalizer = canonicalizer
        self.engine = engine  # evaluates the windows that end

    def schedule(self, row: WindowedQuery, window: Window, clock: float) -> None:
        """The end of the row's next window, from `clock` (seconds since the epoch)."""
        if window.by_time:
            row.next_end_at = datetime.fromtimestamp(math.floor(clock / window.step + 1) * window.step, UTC)
        else:
            row.next_end_position = self.position(graphs_of(row)) + int(window.step)

    def position(self, graphs: list[str]) -> int:
        with self.db.session() as session:
            return int(session.scalar(select(func.count()).select_from(PatchRecord).where(
                PatchRecord.graph.in_(graphs))) or 0)

    def records(self, graphs: list[str], *, start: datetime | None = None, end: datetime | None = None,
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

    def states(self, graphs: list[str], records: list[PatchRecord], end: datetime | None) -> dict[str, list[str]]:
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

    def element(self, row: WindowedQuery, window: Window, end: datetime | int) -> dict[str, Any]:
        """The output element of the window ending at `end` (a time, or a position in the
        merged history): what it held and the query's results over it."""
        graphs = graphs_of(row)
        if isinstance(end, datetime):
            start = end - timedelta(seconds=window.range)
            records = self.records(graphs, start=start, end=end)
            bounds: dict[str, Any] = {"windowStart": iso(start), "windowEnd": iso(end)}
            states = self.states(graphs, records, end) if row.with_state else {}
        else:
            first = max(1, end - int(window.range) + 1)
            records = self.records(graphs, first=first, last=end)
            bounds = {"windowStart": first, "windowEnd": end}
            states = self.states(graphs, records, None) if row.with_state else {}
        results = self.engine.window(row.query, WINDOW_GRAPH, self.changes(records), states)
        return {"query": row.name, **bounds, "patches": [r.id for r in records], "results": _as_sparql_json(results)}


def graphs_of(row: WindowedQuery) -> list[str]:
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
