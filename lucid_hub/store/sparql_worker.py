"""SPARQL inside the guard process: queries, and the evaluation of updates into deletions
and insertions, against a read-only snapshot of the store. Hostile text may make this slow,
huge or crash it; the hub process kills it at its deadline (`lucid_hub.store.sparql`).

Decisions are made on the parsed request, never on its text: SERVICE, LOAD and what an
update writes are read from rdflib's parse tree. No query or update can fetch anything:
SERVICE and LOAD are refused before evaluation, rdflib's graph loading is off, and updates
are evaluated here (by rdflib's algebra evaluator over a view of the snapshot), never by a
store that could follow a URL. Queries run on pyoxigraph with the dataset given explicitly.

Requests (frames, `lucid_hub.guard`):
- `query`: the text, the dataset (default and named graph IRIs, already limited to what the
  caller may read), the Accept header; answers the serialised result.
- `analyse`: an update's text; answers what it writes (static targets; whether `GRAPH ?g`
  templates write graphs known only once evaluated; which graphs it leaves deleted, DROP and
  MOVE's source, and which written), and keeps the parsed update.
- `evaluate`: evaluates the kept update on a snapshot with the caller's readable graphs
  (`absent`: graphs deleted from the Graph Store, which CREATE may make again); answers, per
  written graph, the triples removed and added (N-Triples, existing blank nodes as the
  store's skolem IRIs) and the graph's version in the snapshot.
"""

from __future__ import annotations

import functools
import itertools
import json
from collections import defaultdict
from collections.abc import Generator, Iterator
from typing import Any

import pyoxigraph as ox
import rdflib
import rdflib.plugins.sparql
from pyparsing import ParseException, ParseResults
from rdflib.graph import DATASET_DEFAULT_GRAPH_ID, Dataset, Graph
from rdflib.plugins.sparql import algebra
from rdflib.plugins.sparql.evaluate import evalPart
from rdflib.plugins.sparql.parser import parseQuery, parseUpdate
from rdflib.plugins.sparql.parserutils import CompValue
from rdflib.plugins.sparql.sparql import QueryContext
from rdflib.store import Store

from lucid_hub.errors import NotAcceptableError
from lucid_hub.guard import Frame
from lucid_hub.mediatypes import negotiate
from lucid_hub.rdf.syntax import serialize
from lucid_hub.store import lexical
from lucid_hub.store.layout import RESERVED_PREFIX, read_version

XSD_STRING = "http://www.w3.org/2001/XMLSchema#string"

# This process evaluates nothing it did not check: rdflib must never fetch a graph, and keeps
# lexical forms ("01" stays "01"; FILTERs still compare values).
rdflib.plugins.sparql.SPARQL_LOAD_GRAPHS = False
rdflib.NORMALIZE_LITERALS = False

SELECT_TYPES = {"application/sparql-results+json": ox.QueryResultsFormat.JSON,
                "application/sparql-results+xml": ox.QueryResultsFormat.XML,
                "text/csv": ox.QueryResultsFormat.CSV,
                "text/tab-separated-values": ox.QueryResultsFormat.TSV}
GRAPH_TYPES = {"application/n-triples": ox.RdfFormat.N_TRIPLES, "text/turtle": ox.RdfFormat.TURTLE,
               "application/ld+json": ox.RdfFormat.JSON_LD, "application/rdf+xml": ox.RdfFormat.RDF_XML,
               "application/n-quads": ox.RdfFormat.N_QUADS, "application/trig": ox.RdfFormat.TRIG}
# Clients that ask for plain JSON (SEPA's, some JavaScript libraries) get the JSON form of
# the result, under its own media type.
JSON_ALIAS = "application/json"
NO_GRAPH = ox.NamedNode(f"{RESERVED_PREFIX}no-graph")


class Refused(Exception):
    """A request the hub will not run; `kind` picks the HTTP status in the hub process."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def _error(kind: str, message: str) -> Frame:
    return Frame({"status": "error", "kind": kind, "message": " ".join(message.split())[:1000]})


def handle(request: Frame) -> Frame:
    """The guard's entry point (lucid_hub.guard.serve)."""
    op = request.header.get("op")
    try:
        if op == "query":
            return _query(request)
        if op == "analyse":
            return _analyse(request)
        if op == "evaluate":
            return _evaluate(request)
        raise Refused("internal", f"unknown request {op!r}")
    except Refused as exc:
        return _error(exc.kind, str(exc))
    except NotAcceptableError as exc:
        return _error("unacceptable", str(exc))
    except RecursionError:
        return _error("syntax", "the request is nested too deeply")


# --- the snapshot this process reads ------------------------------------------------------

_open: dict[str, Any] = {}


def _snapshot(path: str) -> Any:
    """The read-only store at `path` (kept open until another snapshot is asked for)."""
    if path not in _open:
        _open.clear()  # closes the previous one
        try:
            _open[path] = ox.Store.read_only(path)
        except OSError as exc:
            raise Refused("internal", f"cannot open the store snapshot: {exc}") from None
    return _open[path]


# --- parse trees -----------------------------------------------------------------------------

def _field(node: Any, name: str) -> Any:
    """A field of an rdflib parse node, None when absent (CompValue.get returns the name)."""
    return dict.get(node, name)


def _walk(node: Any) -> Iterator[Any]:
    """Every node of an rdflib parse tree or algebra (CompValues, lists, dicts)."""
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, CompValue):
            yield item
            stack.extend(item.values())
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list | tuple | ParseResults):
            stack.extend(item)


def _refuse_service(tree: Any) -> None:
    if any(node.name == "ServiceGraphPattern" for node in _walk(tree)):
        raise Refused("forbidden-feature", "SERVICE is not allowed: the hub does not call other endpoints "
                                           "for a query or an update")


def _syntax(exc: Exception, what: str) -> Refused:
    return Refused("syntax", f"malformed SPARQL {what}: {' '.join(str(exc).split())[:300]}")


# --- queries ---------------------------------------------------------------------------------

def _query(request: Frame) -> Frame:
    header = request.header
    text = request.body.decode("utf-8")
    form, from_default, from_named = _shape(text, header.get("base"))
    readable = header["readable"]
    if header.get("default") is not None or header.get("named") is not None:  # the protocol's dataset
        default, named = header.get("default") or [], header.get("named") or []
    else:
        if from_default is None and from_named is None:  # no FROM: every readable graph
            # (the party's default graph, when the hub gives it one, is the default graph)
            default, named = header.get("default_graph") or readable, readable
        else:
            default, named = list(from_default or ()), list(from_named or ())
    # Graphs the caller may not read are as empty as graphs that do not exist.
    default = [g for g in default if g in readable]
    named = [g for g in named if g in readable]
    store = _snapshot(header["snapshot"])
    try:
        result = store.query(text, base_iri=header.get("base"),
                             default_graph=[ox.NamedNode(g) for g in default] or [NO_GRAPH],
                             named_graphs=[ox.NamedNode(g) for g in named] or [NO_GRAPH])
        if form in ("ConstructQuery", "DescribeQuery"):
            media_type = negotiate(header.get("accept"), [*GRAPH_TYPES, JSON_ALIAS], "application/n-triples")
            media_type = "application/ld+json" if media_type == JSON_ALIAS else media_type
            quads = (ox.Quad(t.subject, t.predicate, t.object, ox.DefaultGraph()) for t in result)
            body = serialize(quads, GRAPH_TYPES[media_type])
        else:
            media_type = negotiate(header.get("accept"), [*SELECT_TYPES, JSON_ALIAS], "application/sparql-results+json")
            media_type = "application/sparql-results+json" if media_type == JSON_ALIAS else media_type
            body = result.serialize(format=SELECT_TYPES[media_type])
    except SyntaxError as exc:
        raise _syntax(exc, "query") from None
    except OSError as exc:  # e.g. a result type the format cannot express
        raise Refused("unprocessable", f"the query failed: {' '.join(str(exc).split())[:300]}") from None
    if len(body) > header["max_bytes"]:
        raise Refused("too-large", f"the result is larger than {header['max_bytes']:,} bytes "
                                   "(LUCID_QUERY_MAX_RESULT_BYTES); narrow the query or page it")
    return Frame({"status": "ok", "media_type": media_type}, body)


@functools.lru_cache(maxsize=256)
def _shape(text: str, base: str | None) -> tuple[str, tuple[str, ...] | None, tuple[str, ...] | None]:
    """A query's form and FROM / FROM NAMED graphs, SERVICE refused. Kept for the texts
    asked last: rdflib's parser takes a millisecond or more, a dashboard asks the same again."""
    try:
        parsed = parseQuery(text)
    except ParseException as exc:
        raise _syntax(exc, "query") from None
    _refuse_service(parsed)
    prologue = algebra.translatePrologue(parsed[0], base)
    default, named = _dataset_clause(_field(parsed[1], "datasetClause"), prologue)
    return parsed[1].name, _frozen(default), _frozen(named)


def _frozen(graphs: list[str] | None) -> tuple[str, ...] | None:
    return None if graphs is None else tuple(graphs)


def _dataset_clause(clauses: Any, prologue: Any) -> tuple[list[str] | None, list[str] | None]:
    """The graphs of FROM and FROM NAMED (None each when the query has none of that kind)."""
    default: list[str] | None = None
    named: list[str] | None = None
    for clause in clauses or []:
        which = "default" if _field(clause, "default") is not None else "named"
        iri = str(prologue.absolutize(clause[which]))
        if which == "default":
            default = [*(default or []), iri]
        else:
            named = [*(named or []), iri]
    return default, named


# --- updates: what they write ---------------------------------------------------------------

_parsed: list[CompValue] = []  # the update `analyse` parsed, for `evaluate`


def _data_triples(block: Any) -> list[tuple[Any, Any, Any]]:
    """The triples of a DATA block in one linear pass (rdflib's translateQuads concatenates
    lists pairwise and reorders them quadratically: 39 s for 4,000 triples)."""
    flat = [term for part in block or [] for term in part]
    if len(flat) % 3:
        raise Refused("syntax", "malformed triples in a DATA block")
    return [(flat[i], flat[i + 1], flat[i + 2]) for i in range(0, len(flat), 3)]


def _translate(parsed: Any, base: str | None) -> list[CompValue]:
    """rdflib's translateUpdate, with the DATA blocks translated linearly."""
    out: list[CompValue] = []
    prologue = None
    for part, op in zip(parsed.prologue, parsed.request, strict=False):
        prologue = algebra.translatePrologue(part, base, None, prologue)
        op = algebra.traverse(op, visitPost=functools.partial(algebra.translatePName, prologue=prologue))
        op = algebra._traverse(op, algebra._simplifyFilters)
        op = algebra.traverse(op, visitPost=algebra.translatePath)
        if op.name in ("InsertData", "DeleteData"):
            quads: dict[Any, list[tuple[Any, Any, Any]]] = defaultdict(list)
            for graph_block in _field(op.quads, "quadsNotTriples") or []:
                quads[graph_block.term].extend(_data_triples(_field(graph_block, "triples")))
            op["triples"] = _data_triples(_field(op.quads, "triples"))
            op["quads"] = quads
            op.prologue = prologue
        else:
            op = algebra.translateUpdate1(op, prologue)
        out.append(op)
    return out


def _iri(term: Any, what: str) -> str | None:
    """A graph IRI of an operation; None for a variable; Refused for the default graph."""
    if isinstance(term, rdflib.Variable):
        return None
    if isinstance(term, rdflib.URIRef):
        return str(term)
    raise Refused("syntax", f"{what}: this hub has no default graph; every graph is named (GRAPH <IRI>)")


DEFAULT_WRITE = ("updates write into named graphs: put the triples in GRAPH <IRI> { … }, or name the graph "
                 "with WITH <IRI>; this hub has no default graph")


def _writes(op: CompValue) -> tuple[set[str], bool]:
    """(the graphs an operation writes, whether it writes graphs a variable names)."""
    targets: set[str] = set()
    dynamic = False

    def template(clause: Any, with_graph: str | None) -> None:
        nonlocal dynamic
        if clause is None:
            return
        if _field(clause, "triples"):
            if with_graph is None:
                raise Refused("syntax", DEFAULT_WRITE)
            targets.add(with_graph)
        for graph in (_field(clause, "quads") or {}):
            iri = _iri(graph, "GRAPH")
            if iri is None:
                dynamic = True
            else:
                targets.add(iri)

    name = op.name
    if name == "Load":
        raise Refused("forbidden-feature", "LOAD is not allowed: the hub never fetches a URL for an update")
    if name in ("InsertData", "DeleteData", "DeleteWhere"):
        template(op, None)
        if name == "DeleteData" and any(isinstance(t, rdflib.BNode) for triples in op.quads.values()
                                        for triple in triples for t in triple):
            raise Refused("syntax", "DELETE DATA may not hold blank nodes (SPARQL 1.1 Update §3.1.2)")
    elif name == "Modify":
        with_graph = _iri(op.withClause, "WITH") if _field(op, "withClause") is not None else None
        template(_field(op, "delete"), with_graph)
        template(_field(op, "insert"), with_graph)
    elif name in ("Clear", "Drop"):
        if op.graphiri in ("ALL", "NAMED"):
            raise Refused("syntax", f"{name.upper()} {op.graphiri} is not accepted: name the graphs "
                                    f"({name.upper()} GRAPH <IRI>), one operation each")
        targets.add(_iri(op.graphiri, name.upper()) or "")
    elif name == "Create":
        targets.add(_iri(op.graphiri, "CREATE") or "")
    elif name in ("Add", "Move", "Copy"):
        source, target = (_iri(g, name.upper()) for g in op.graph)
        assert source is not None and target is not None
        targets.add(target)
        if name == "Move":
            targets.add(source)
    else:
        raise Refused("syntax", f"unsupported update operation {name}")
    return targets, dynamic


def _into_default(op: CompValue, graph: rdflib.URIRef) -> CompValue:
    """The operation with the hub's default graph for this party standing for SPARQL's
    default graph (docs/http-api.md, "The default graph"): DATA and DELETE WHERE triples go
    into it, INSERT/DELETE ... WHERE without WITH work as WITH <graph>, and DEFAULT in
    CLEAR, DROP, ADD, MOVE, COPY names it."""
    name = op.name
    if name in ("InsertData", "DeleteData", "DeleteWhere"):
        triples = list(_field(op, "triples") or [])
        if triples:
            quads = op.quads if isinstance(op.quads, dict) else defaultdict(list)
            quads.setdefault(graph, [])
            quads[graph] = list(quads[graph]) + triples
            op["quads"] = quads
            op["triples"] = []
    elif name == "Modify":
        if _field(op, "withClause") is None:
            op["withClause"] = graph
    elif name in ("Clear", "Drop", "Create"):
        if op.graphiri == "DEFAULT":
            op["graphiri"] = graph
    elif name in ("Add", "Move", "Copy"):
        op["graph"] = [graph if g == "DEFAULT" else g for g in op.graph]
    return op


def _check_data_size(ops: list[CompValue], limit: int | None) -> None:
    """DATA blocks parse into at most `limit` bytes of statements: PREFIX and BASE make
    long terms of short text, and this is what the update's text limit is for."""
    if limit is None:
        return
    spent = 0
    for op in ops:
        if op.name in ("InsertData", "DeleteData"):
            for triples in [op.triples, *op.quads.values()]:
                spent += sum(len(term) + 4 for triple in triples for term in triple)
                if spent > limit:
                    raise Refused("body-too-large", f"the update's DATA blocks parse into more than {limit:,} bytes "
                                                    "of statements (4x LUCID_MAX_UPDATE_BYTES); send fewer "
                                                    "statements per update, or shorter prefixes and literals")


def _analyse(request: Frame) -> Frame:
    header = request.header
    text = request.body.decode("utf-8")
    try:
        parsed = parseUpdate(text)
    except ParseException as exc:
        raise _syntax(exc, "update") from None
    _refuse_service(parsed)
    ops = _translate(parsed, header.get("base"))
    _check_data_size(ops, header.get("max_data_bytes"))
    if header.get("default_graph"):
        ops = [_into_default(op, rdflib.URIRef(header["default_graph"])) for op in ops]
    using = [("default", g) for g in header.get("using") or []]
    using += [("named", g) for g in header.get("using_named") or []]
    targets: set[str] = set()
    dynamic = False
    after: dict[str, str] = {}  # graph -> "dropped" or "written": what the update leaves it as
    for op in ops:
        if using and op.name == "Modify":
            if _field(op, "withClause") is not None or _field(op, "using"):
                raise Refused("syntax", "an update with WITH or USING may not be sent with using-graph-uri or "
                                        "using-named-graph-uri (SPARQL 1.1 Protocol §2.2.3)")
            op["using"] = [CompValue("UsingClause", **{kind: rdflib.URIRef(g)}) for kind, g in using]
        written, variable = _writes(op)
        targets |= written
        dynamic = dynamic or variable
        gone = {str(op.graphiri)} if op.name == "Drop" else {str(op.graph[0])} if op.name == "Move" else set()
        after.update({graph: "dropped" if graph in gone else "written" for graph in written})
    _parsed[:] = ops
    return Frame({"status": "ok", "targets": sorted(targets), "dynamic": dynamic, "operations": len(ops),
                  "dropped": sorted(g for g, how in after.items() if how == "dropped"),
                  "written": sorted(g for g, how in after.items() if how == "written")})


# --- updates: evaluation ----------------------------------------------------------------------

def _to_ox(term: Any) -> Any:
    """An rdflib term as the store keeps it (None for variables: a pattern's wildcard)."""
    if term is None or isinstance(term, rdflib.Variable):
        return None
    if isinstance(term, rdflib.URIRef):
        return ox.NamedNode(str(term))
    if isinstance(term, rdflib.Literal):
        if term.language:
            return ox.Literal(str(term), language=term.language)
        return ox.Literal(str(term), datatype=ox.NamedNode(str(term.datatype)) if term.datatype else None)
    return ox.BlankNode(str(term))


def _to_rdflib(term: Any) -> Any:
    if isinstance(term, ox.NamedNode):
        return rdflib.URIRef(term.value)
    if isinstance(term, ox.Literal):
        if term.language:
            return rdflib.Literal(term.value, lang=term.language)
        datatype = term.datatype.value
        if datatype == XSD_STRING:  # rdflib's plain literal, as its parser makes "x"
            return rdflib.Literal(term.value)
        return rdflib.Literal(term.value, datatype=rdflib.URIRef(datatype))
    return rdflib.BNode(term.value)


class _View(Store):
    """The snapshot as rdflib reads it, with this update's changes laid over it: the default
    graph is the union of `default`, GRAPH sees `named`; nothing else exists."""

    context_aware = True
    graph_aware = True

    def __init__(self, store: Any, readable: list[str], overlay: _Overlay) -> None:
        super().__init__()
        self.ox = store
        self.readable = set(readable)
        self.overlay = overlay
        self.default: list[str] = []
        self.named: list[str] = []

    def scope(self, default: list[str], named: list[str]) -> None:
        self.default = [g for g in default if g in self.readable or g in self.overlay.added]
        self.named = [g for g in named if g in self.readable or g in self.overlay.added]

    def triples(self, pattern: Any, context: Any = None) -> Iterator[Any]:
        if context is None or context.identifier == DATASET_DEFAULT_GRAPH_ID:
            graphs = self.default
        else:
            graph = str(context.identifier)
            graphs = [graph] if graph in self.named else []
        seen: set[Any] | None = set() if len(graphs) > 1 else None
        for graph in graphs:
            for triple in self.overlay.matches(self.ox, graph, pattern):
                if seen is not None:
                    if triple in seen:
                        continue
                    seen.add(triple)
                yield triple, iter([context])

    def contexts(self, triple: Any = None) -> Generator[Graph, None, None]:
        for graph in self.named:
            yield Graph(store=self, identifier=rdflib.URIRef(graph))

    def __len__(self, context: Any = None) -> int:
        return 0

    def add_graph(self, graph: Any) -> None:
        pass


class _Overlay:
    """What the update has removed from and added to each graph so far."""

    def __init__(self) -> None:
        self.removed: defaultdict[str, set[Any]] = defaultdict(set)
        self.added: defaultdict[str, set[Any]] = defaultdict(set)
        self._records: dict[str, dict[str, list[str]]] = {}

    def _published(self, store: Any, graph: str, quad: Any) -> Iterator[Any]:
        """A stored triple as the triples published: typed literals in their recorded forms."""
        recorded = self._records.get(graph)
        if recorded is None:
            recorded = self._records[graph] = lexical.records(store, graph)
        statement = str(quad.triple)
        forms = lexical.expand(statement, recorded)
        if forms == [statement]:
            yield (_to_rdflib(quad.subject), _to_rdflib(quad.predicate), _to_rdflib(quad.object))
            return
        for form in forms:
            (parsed,) = ox.parse(f"{form} .", format=ox.RdfFormat.N_TRIPLES)
            yield (_to_rdflib(parsed.subject), _to_rdflib(parsed.predicate), _to_rdflib(parsed.object))

    def matches(self, store: Any, graph: str, pattern: Any) -> Iterator[Any]:
        """Triples of the graph matching the pattern exactly (a literal by its lexical form:
        the store finds values, "01" and "1" alike)."""
        s, p, o = pattern

        def fits(triple: Any) -> bool:
            return all(want is None or isinstance(want, rdflib.Variable) or want == got
                       for want, got in zip(pattern, triple, strict=True))

        removed = self.removed.get(graph, set())
        for q in store.quads_for_pattern(_to_ox(s), _to_ox(p), _to_ox(o), ox.NamedNode(graph)):
            for triple in self._published(store, graph, q):
                if triple not in removed and fits(triple):
                    yield triple
        for triple in self.added.get(graph, ()):
            if fits(triple):
                yield triple

    def _stored(self, store: Any, graph: str, triple: Any) -> bool:
        """Whether the snapshot holds exactly this triple (before this update)."""
        if isinstance(triple[0], rdflib.BNode) or isinstance(triple[2], rdflib.BNode):
            return False  # a blank node of the update's own: new
        return any(got == triple for q in store.quads_for_pattern(*(_to_ox(t) for t in triple), ox.NamedNode(graph))
                   for got in self._published(store, graph, q))

    def remove(self, store: Any, graph: str, triple: Any) -> None:
        if triple in self.added[graph]:
            self.added[graph].discard(triple)
        elif self._stored(store, graph, triple):
            self.removed[graph].add(triple)

    def add(self, store: Any, graph: str, triple: Any) -> None:
        if triple in self.removed[graph]:
            self.removed[graph].discard(triple)
        elif not self._stored(store, graph, triple):
            self.added[graph].add(triple)


def _fresh_blank_nodes() -> Any:
    """A relabelling of blank nodes: each template blank node is a new one per solution."""
    counter = itertools.count()
    prefix = f"u{next(_serial)}"
    return lambda: rdflib.BNode(f"{prefix}x{next(counter)}")


_serial = itertools.count()


def _instantiate(template: list[Any], solution: Any, fresh: dict[Any, Any], new_node: Any) -> Iterator[Any]:
    """Template triples with the solution's bindings; a triple with an unbound variable or
    an impossible term (a literal subject) is left out (SPARQL 1.1 Update §3.1.3)."""
    for triple in template:
        out = []
        for position, term in enumerate(triple):
            if isinstance(term, rdflib.Variable):
                term = solution.get(term)
                if term is None:
                    break
            elif isinstance(term, rdflib.BNode):
                term = fresh.setdefault(term, new_node())
            if (position != 2 and isinstance(term, rdflib.Literal)) or (
                    position == 1 and not isinstance(term, rdflib.URIRef)):
                break
            out.append(term)
        else:
            yield tuple(out)


def _solutions(view: _View, where: Any, default: list[str], named: list[str], prologue: Any) -> list[Any]:
    """The WHERE's solutions; `prologue` (the operation's BASE and PREFIXes) is what IRI()
    and the like resolve against."""
    view.scope(default, named)
    context = QueryContext(graph=Dataset(store=view), initBindings={})
    context.prologue = prologue
    return list(evalPart(context, where))


def _evaluate(request: Frame) -> Frame:
    header = request.header
    store = _snapshot(header["snapshot"])
    readable: list[str] = header["readable"]
    overlay = _Overlay()
    view = _View(store, readable, overlay)
    absent = frozenset(header.get("absent") or ())
    for op in _parsed:
        _run(op, store, view, overlay, readable, absent)
    touched = sorted(set(overlay.removed) | set(overlay.added))
    graphs = {}
    for graph in touched:
        removed, added = overlay.removed.get(graph, set()), overlay.added.get(graph, set())
        if removed or added:
            graphs[graph] = {"version": read_version(store, graph), "removed": _nt(removed), "added": _nt(added)}
    body = json.dumps(graphs).encode()
    return Frame({"status": "ok", "graphs": sorted(graphs)}, body)


def _nt(triples: set[Any]) -> list[str]:
    """Triples as canonical N-Triples statements (literals exactly, blank nodes by label)."""
    return sorted(str(ox.Triple(*(_to_ox(t) for t in triple))) for triple in triples)


def _graph_triples(store: Any, overlay: _Overlay, graph: str) -> list[Any]:
    return list(overlay.matches(store, graph, (None, None, None)))


def _run(op: CompValue, store: Any, view: _View, overlay: _Overlay, readable: list[str],
         absent: frozenset[str] = frozenset()) -> None:
    name = op.name
    new_node = _fresh_blank_nodes()
    if name in ("InsertData", "DeleteData"):
        fresh: dict[Any, Any] = {}
        for graph, triples in op.quads.items():
            for triple in _instantiate(triples, {}, fresh, new_node):
                (overlay.add if name == "InsertData" else overlay.remove)(store, str(graph), triple)
    elif name == "DeleteWhere":
        pattern = algebra.BGP([])
        for graph, triples in op.quads.items():
            pattern = algebra.Join(pattern, algebra.Graph(graph, algebra.BGP(triples)))
        for solution in _solutions(view, pattern, readable, readable, op.prologue):
            for graph, triples in op.quads.items():
                target = solution.get(graph) if isinstance(graph, rdflib.Variable) else graph
                for triple in _instantiate(triples, solution, {}, new_node):
                    overlay.remove(store, str(target), triple)
    elif name == "Modify":
        _modify(op, store, view, overlay, readable, new_node)
    elif name in ("Clear", "Drop"):
        graph = str(op.graphiri)
        for triple in _graph_triples(store, overlay, graph):
            overlay.remove(store, graph, triple)
    elif name == "Create":  # (a graph deleted from the Graph Store does not exist, whatever its history)
        exists = read_version(store, str(op.graphiri)) is not None and str(op.graphiri) not in absent
        if exists and not _field(op, "silent"):
            raise Refused("conflict", f"CREATE GRAPH <{op.graphiri}>: the graph exists (use CREATE SILENT)")
    elif name in ("Add", "Move", "Copy"):
        source, target = (str(g) for g in op.graph)
        if source == target:
            return
        content = _graph_triples(store, overlay, source) if source in readable else []
        if name in ("Move", "Copy"):
            for triple in _graph_triples(store, overlay, target):
                overlay.remove(store, target, triple)
        for triple in content:
            overlay.add(store, target, triple)
        if name == "Move":
            for triple in content:
                overlay.remove(store, source, triple)


def _modify(op: CompValue, store: Any, view: _View, overlay: _Overlay, readable: list[str], new_node: Any) -> None:
    """DELETE/INSERT … WHERE: every solution first, then every deletion, then every
    insertion (SPARQL 1.1 Update §3.1.3), in the dataset USING or WITH give."""
    with_graph = str(op.withClause) if _field(op, "withClause") is not None else None
    using = _field(op, "using") or []
    if using:
        default = [str(u["default"]) for u in using if _field(u, "default") is not None]
        named = [str(u["named"]) for u in using if _field(u, "named") is not None]
    elif with_graph is not None:
        default, named = [with_graph], readable
    else:
        default, named = readable, readable
    solutions = _solutions(view, op.where, default, named, op.prologue)
    for clause, apply in ((_field(op, "delete"), overlay.remove), (_field(op, "insert"), overlay.add)):
        if clause is None:
            continue
        for solution in solutions:
            fresh: dict[Any, Any] = {}
            if _field(clause, "triples"):
                assert with_graph is not None
                for triple in _instantiate(clause.triples, solution, fresh, new_node):
                    apply(store, with_graph, triple)
            for graph, triples in (_field(clause, "quads") or {}).items():
                target = solution.get(graph) if isinstance(graph, rdflib.Variable) else graph
                if not isinstance(target, rdflib.URIRef):
                    continue  # an unbound or non-IRI graph variable writes nothing
                for triple in _instantiate(triples, solution, fresh, new_node):
                    apply(store, str(target), triple)
