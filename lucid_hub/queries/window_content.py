"""What a window holds: its range and step, the patches of its graphs in merged order (by
time, or by position in the graphs' merged history), each graph's state at the window's end,
the window's changes described in RDF, and the query's results over all of that."""

from __future__ import annotations

import hashlib
import json
import math
import re
import threading
from collections import OrderedDict
from collections.abc import Iterator
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
REMOVED_GRAPH = "urn:lucid-hub:window:removed"  # the triples view: what the window's patches removed
LH = "https://w3id.org/lucid-hub#"
RDF = "http://www.w3.org/1999/02/22-rdf-syntax-ns#"
XSD = "http://www.w3.org/2001/XMLSchema#"
MAX_PATCHES = 10_000  # patches one window may hold
HELD = 8  # windows' contents kept for the alike windows evaluated next
CACHED_STATEMENTS = 500_000  # patches' triples kept parsed for the windows' next steps
MAX_TRIPLES = 1_000_000  # triples a triple window may hold
_TRIPLES = re.compile(r"(\d{1,7})\s*triples", re.IGNORECASE)
_DURATION = re.compile(r"(\d{1,9})(ms|s|m|h|d)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


@dataclass(frozen=True)
class Window:
    """A window's range and step: seconds (time windows) or patches (count windows); or, for
    a triple window (C-SPARQL's physical `[RANGE TRIPLES n]`), the last `range` triples added,
    evaluated every `step` (seconds or patches)."""

    range: float
    step: float
    by_time: bool  # whether the step is a duration
    triples: bool = False

    @classmethod
    def parse(cls, range_spec: Any, step_spec: Any) -> Window:
        step, step_by_time = _spec(step_spec, "step")
        if step_by_time and step < 1:
            raise InputError("a step shorter than 1s is not offered")
        counted = _TRIPLES.fullmatch(range_spec.strip()) if isinstance(range_spec, str) else None
        if counted is not None:
            held = int(counted.group(1))
            if not 1 <= held <= MAX_TRIPLES:
                raise InputError(f"a triple window holds 1 to {MAX_TRIPLES:,} triples")
            return cls(float(held), step, step_by_time, triples=True)
        size, by_time = _spec(range_spec, "range")
        if by_time != step_by_time:
            raise InputError("range and step must both be durations (e.g. 1h and 10m) or both patch counts")
        return cls(size, step, by_time)

    def describe(self) -> tuple[str, str]:
        """The window as the Streaming Linked Data vocabulary names it: its sld:windowType
        (local name) and sld:windowSize (an xsd:duration, or a number of triples)."""
        if self.triples:
            return "physical", str(int(self.range))
        if not self.by_time:
            return "count", str(int(self.range))
        kind = "logicalTumbling" if self.step == self.range else "logicalSliding"
        return kind, _xsd_duration(self.range)


def _xsd_duration(seconds: float) -> str:
    whole = int(seconds)
    if whole != seconds:
        return f"PT{seconds:.3f}S"
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    time = "".join(f"{v}{u}" for v, u in ((hours, "H"), (minutes, "M"), (secs, "S")) if v)
    return "P" + (f"{days}D" if days else "") + (f"T{time}" if time else ("" if days else "T0S"))


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


@dataclass(frozen=True)
class Held:
    """What one window holds: its bounds, patches, statements, other graphs, and the dataset
    its query sees (the default graph's parts, the named graphs)."""

    key: str
    bounds: dict[str, Any]
    patches: list[str]
    lines: list[str]
    states: dict[str, list[str]]
    default: list[str]
    named: list[str]


class WindowContent:
    """A window's patches, states and changes, read from the archive, and its element."""

    def __init__(self, settings: Settings, db: Database, publisher: Publisher, canonicalizer: Canonicalizer,
                 engine: QueryEngine) -> None:
        self.settings = settings
        self.db = db
        self.publisher = publisher
        self.canonicalizer = canonicalizer
        self.engine = engine  # evaluates the windows that end
        self._cache: OrderedDict[str, tuple[list[str], list[str]]] = OrderedDict()
        self._cached = 0
        self._cache_lock = threading.Lock()
        self._held: OrderedDict[str, Held] = OrderedDict()

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
        held = self.held(row, window, end)
        results = self.engine.window(row.query, WINDOW_GRAPH, held.lines, held.states, default=held.default,
                                     named=held.named, key=held.key)
        return {"query": row.name, **held.bounds, "patches": held.patches, "results": _as_sparql_json(results)}

    def held(self, row: WindowedQuery, window: Window, end: datetime | int) -> Held:
        """What the window ending at `end` holds. Windows alike (the same streams, window,
        end, view and static graphs: queries over one stream registered by many parties) hold
        the same: it is read once, and the evaluating worker loads it once (`key`)."""
        key = hashlib.sha256(json.dumps([graphs_of(row), window.range, window.step, window.by_time, window.triples,
                                         iso(end) if isinstance(end, datetime) else end, row.view, row.dataset,
                                         row.with_state]).encode()).hexdigest()
        with self._cache_lock:
            found = self._held.get(key)
            if found is not None:
                return found
        found = self._read(row, window, end, key)
        with self._cache_lock:
            self._held[key] = found
            while len(self._held) > HELD:
                self._held.popitem(last=False)
        return found

    def _read(self, row: WindowedQuery, window: Window, end: datetime | int, key: str) -> Held:
        graphs = graphs_of(row)
        bounds: dict[str, Any]
        kept: list[str] | None = None
        if window.triples:
            records, kept = self.last_triples(graphs, int(window.range), end)
            start: Any = (iso(aware(records[0].created)) if isinstance(end, datetime)
                          else self.position_of(graphs, records[0])) if records else None
            bounds = {"windowStart": start, "windowEnd": iso(end) if isinstance(end, datetime) else end,
                      "triples": len(kept)}
        elif isinstance(end, datetime):
            start_at = end - timedelta(seconds=window.range)
            records = self.records(graphs, start=start_at, end=end)
            bounds = {"windowStart": iso(start_at), "windowEnd": iso(end)}
        else:
            first = max(1, end - int(window.range) + 1)
            records = self.records(graphs, first=first, last=end)
            bounds = {"windowStart": first, "windowEnd": end}
        time_end = end if isinstance(end, datetime) else None
        dataset = dataset_of(row)
        states = self.states(graphs, records, time_end) if row.with_state else {}
        statics = [g for g in dataset["default"] + dataset["named"] if g not in states]
        states.update(self.states(statics, records, time_end) if statics else {})
        named = [WINDOW_GRAPH, *(graphs if row.with_state else []), *dataset["named"]]
        if row.view == "triples":
            added, removed = self.statements(records)
            lines = kept if kept is not None else added
            states[REMOVED_GRAPH] = removed
            named.insert(1, REMOVED_GRAPH)
        else:
            lines = self.changes(records)
        return Held(key, bounds, [r.id for r in records], lines, states, [WINDOW_GRAPH, *dataset["default"]], named)

    def statements(self, records: list[PatchRecord]) -> tuple[list[str], list[str]]:
        """The triples the window's patches added and removed, in stream order (blank nodes
        local to one MSG of one patch, as in `changes`)."""
        added: list[str] = []
        removed: list[str] = []
        for record in records:
            plus, minus = self._statements_of(record)
            added += plus
            removed += minus
        return added, removed

    def _statements_of(self, record: PatchRecord) -> tuple[list[str], list[str]]:
        """One patch's added and removed triples, read once: every window over the stream reads
        the same patches at each step (a cache of at most CACHED_STATEMENTS lines)."""
        with self._cache_lock:
            found = self._cache.get(record.id)
            if found is not None:
                self._cache.move_to_end(record.id)
                return found
        patch = read_rdf_patch(record.body, self.canonicalizer)
        out: dict[str, list[str]] = {"A": [], "R": []}
        for kind, msgs in (("R", patch.removed), ("A", patch.added)):
            for index, msg in enumerate(msgs):
                scope = f"m{record.seq}x{kind}{index}"
                out[kind] += [st if "_:" not in st else " ".join(_split(st, scope)) for st in msg.statements]
        found = (out["A"], out["R"])
        with self._cache_lock:
            self._cache[record.id] = found
            self._cached += len(out["A"]) + len(out["R"])
            while self._cached > CACHED_STATEMENTS and self._cache:
                _id, (plus, minus) = self._cache.popitem(last=False)
                self._cached -= len(plus) + len(minus)
        return found

    def last_triples(self, graphs: list[str], count: int, end: datetime | int) -> tuple[list[PatchRecord], list[str]]:
        """A triple window: the last `count` triples added up to `end` (a time, or a position
        in the merged history), and the patches they came from, oldest first. Reads back at
        most MAX_PATCHES patches."""
        taken: list[tuple[PatchRecord, list[str]]] = []
        held = 0
        for record in self._backwards(graphs, end):
            added, _removed = self.statements([record])
            if not added:
                continue
            keep = added[-(count - held):]
            taken.append((record, keep))
            held += len(keep)
            if held >= count:
                break
        taken.reverse()
        return [r for r, _ in taken], [line for _, lines in taken for line in lines]

    def _backwards(self, graphs: list[str], end: datetime | int, batch: int = 200) -> Iterator[PatchRecord]:
        """The graphs' patches up to `end`, newest first (at most MAX_PATCHES)."""
        order = (PatchRecord.created.desc(), PatchRecord.graph.desc(), PatchRecord.seq.desc())
        for offset in range(0, MAX_PATCHES, batch):
            if isinstance(end, datetime):
                query = select(PatchRecord).where(PatchRecord.graph.in_(graphs), PatchRecord.created <= end)
                query = query.order_by(*order).offset(offset).limit(batch)
                with self.db.session() as session:
                    found = list(session.scalars(query))
                    session.expunge_all()
            else:
                last = end - offset
                if last < 1:
                    return
                found = list(reversed(self.records(graphs, first=max(1, last - batch + 1), last=last)))
            yield from found
            if len(found) < batch:
                return

    def position_of(self, graphs: list[str], record: PatchRecord) -> int:
        """The record's position in the graphs' merged history (1-based)."""
        with self.db.session() as session:
            before = session.scalar(select(func.count()).select_from(PatchRecord).where(
                PatchRecord.graph.in_(graphs), or_(
                    PatchRecord.created < record.created,
                    and_(PatchRecord.created == record.created, PatchRecord.graph < record.graph),
                    and_(PatchRecord.created == record.created, PatchRecord.graph == record.graph,
                         PatchRecord.seq < record.seq))))
        return int(before or 0) + 1


def graphs_of(row: WindowedQuery) -> list[str]:
    return list(json.loads(row.graphs))


def read_by(row: WindowedQuery) -> list[str]:
    """Every graph the query reads: its streams and its static graphs."""
    dataset = dataset_of(row)
    return sorted(set(graphs_of(row)) | set(dataset["default"]) | set(dataset["named"]))


def dataset_of(row: WindowedQuery) -> dict[str, list[str]]:
    """The query's static graphs: `default` (merged into the default graph, C-SPARQL's FROM)
    and `named` (FROM NAMED)."""
    found = json.loads(row.dataset or "{}")
    return {"default": list(found.get("default", [])), "named": list(found.get("named", []))}


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
