"""Continuous queries inside a guard process: a replica of the subscribed graphs and the
subscriptions' parsed queries. The hub process never parses or evaluates SPARQL (see
`lucid_hub.store.sparql`); it feeds this process the graphs and their changes, asks it to
evaluate a subscription, and kills it when one evaluation overruns its time budget.

The replica holds the graphs as the hub's store does (blank nodes as skolem IRIs, typed
literals in value form), loaded from the store and moved patch by patch with the store's
own changes (`GraphStore.watch`), so an evaluation sees a graph exactly after one patch.

Requests (frames, `lucid_hub.guard`):
- `load`: a graph's triples (N-Triples lines in the body), replacing what was held;
- `change`: one patch's removed and added triples of a graph (JSON body), or its drop;
- `register`: a subscription's query text and the graphs its party may read; answers the
  query's form, its dataset (fixed now) and the triple patterns it can match (for the hub's
  index of subscriptions);
- `evaluate`: a subscription's results now (JSON body);
- `forget`: drop a subscription.
"""

from __future__ import annotations

import functools
import json
import time
from typing import Any

import pyoxigraph as ox
import rdflib
from pyparsing import ParseException
from rdflib.paths import AlternativePath, InvPath, MulPath, NegatedPath, Path, SequencePath
from rdflib.plugins.sparql import algebra
from rdflib.plugins.sparql.parser import parseQuery

from lucid_hub.guard import Frame
from lucid_hub.store.layout import SKOLEM_PREFIX
from lucid_hub.store.sparql_worker import (
    NO_GRAPH,
    Refused,
    _dataset_clause,
    _error,
    _field,
    _refuse_service,
    _syntax,
    _walk,
)

_store = ox.Store()
_subscriptions: dict[str, dict[str, Any]] = {}
_window_stores: dict[str, ox.Store] = {}  # the last windows' contents, by key (windows alike load once)
FORMS = {"SelectQuery": "select", "AskQuery": "ask", "ConstructQuery": "construct"}


def handle(request: Frame) -> Frame:
    """The guard's entry point (lucid_hub.guard.serve)."""
    op = request.header.get("op")
    try:
        if op == "load":
            return _load(request)
        if op == "change":
            return _change(request)
        if op == "register":
            return _register(request)
        if op == "evaluate":
            return _evaluate(request)
        if op == "window":
            return _window(request)
        if op == "forget":
            _subscriptions.pop(str(request.header["id"]), None)
            return Frame({"status": "ok"})
        raise Refused("internal", f"unknown request {op!r}")
    except Refused as exc:
        return _error(exc.kind, str(exc))
    except RecursionError:
        return _error("syntax", "the query is nested too deeply")


# --- the replica -------------------------------------------------------------------------------

def _quads(lines: list[str], graph: ox.NamedNode) -> list[ox.Quad]:
    if not lines:
        return []
    text = "".join(f"{line} .\n" for line in lines)
    return [ox.Quad(q.subject, q.predicate, q.object, graph)
            for q in ox.parse(text, format=ox.RdfFormat.N_TRIPLES)]


def _load(request: Frame) -> Frame:
    graph = ox.NamedNode(request.header["graph"])
    if _store.contains_named_graph(graph):
        _store.clear_graph(graph)
    # Lines split at "\n" only: str.splitlines() also splits at U+2028, U+0085 and others that
    # N-Triples leaves raw in literals (one party's literal broke every worker's load).
    _load_lines(_store, [line for line in request.body.decode().split("\n") if line], graph)
    return Frame({"status": "ok"})


def _load_lines(store: ox.Store, lines: list[str], graph: ox.NamedNode) -> None:
    """Statements into `graph`, parsed into the store by oxigraph itself (a Quad object per
    triple cost four times as much: a quarter of a window's first evaluation)."""
    if lines:
        store.load("".join(f"{line} .\n" for line in lines), format=ox.RdfFormat.N_TRIPLES, to_graph=graph)


def _change(request: Frame) -> Frame:
    """Apply a change; with `candidates` (subscriptions whose patterns the changed triples can
    match), answer which of them it can affect: removed triples are checked on the graph
    before the change, added ones after it (see `_affected`)."""
    graph = ox.NamedNode(request.header["graph"])
    if request.header.get("drop"):
        if _store.contains_named_graph(graph):
            _store.remove_graph(graph)
        return Frame({"status": "ok"})
    change = json.loads(request.body)
    candidates = list(request.header.get("candidates") or [])
    global _deadline
    _deadline = time.monotonic() + float(request.header.get("budget") or 5.0)
    removed, added = _quads(change["removed"], graph), _quads(change["added"], graph)
    # The joins first (shared by subscriptions of one shape), on the graph before the change
    # for removed triples and after it for added ones; then, for the reached subscriptions
    # that take the delta path, their rows through those triples on the same states.
    by_delta = {sid for sid in candidates if _takes_delta(_subscriptions.get(sid))}
    reached_before = _affected(candidates, graph.value, removed)
    went = {sid: _delta_rows(sid, graph.value, removed) for sid in sorted(reached_before & by_delta)}
    for quad in removed:
        _store.remove(quad)
    _store.extend(added)
    reached_after = _affected(candidates, graph.value, added)
    came = {sid: _delta_rows(sid, graph.value, added) for sid in sorted(reached_after & by_delta)}
    affected = (reached_before | reached_after) - by_delta
    deltas: dict[str, dict[str, Any]] = {}
    for sid in (reached_before | reached_after) & by_delta:
        rows_in, rows_out = came.get(sid, []), went.get(sid, [])
        if rows_in is None or rows_out is None:  # too many, or out of time: evaluated in full
            affected.add(sid)
        elif rows_in or rows_out:
            deltas[sid] = {"added": rows_in, "removed": rows_out}
    return Frame({"status": "ok", "affected": sorted(affected)}, json.dumps(deltas).encode())


# --- subscriptions -----------------------------------------------------------------------------

def _parse(text: str, not_a_form: str) -> tuple[Any, str]:
    """The parsed query and its form; Refused when it does not parse, calls a SERVICE, or
    is not SELECT, ASK or CONSTRUCT (`not_a_form` says why)."""
    try:
        parsed = parseQuery(text)
    except ParseException as exc:
        raise _syntax(exc, "query") from None
    _refuse_service(parsed)
    form = FORMS.get(parsed[1].name)
    if form is None:
        raise Refused("unprocessable", not_a_form)
    return parsed, form


def _register(request: Frame) -> Frame:
    header = request.header
    text = request.body.decode("utf-8")
    parsed, form = _parse(text, "subscribe with a SELECT, ASK or CONSTRUCT query (DESCRIBE has no fixed result "
                                "to follow)")
    if any(node.name == "Builtin_BNODE" for node in _walk(parsed)):
        raise Refused("unprocessable", "BNODE() makes new blank nodes at every evaluation, so every result "
                                       "would change every time; use an IRI (e.g. IRI(CONCAT(...)))")
    try:
        query = algebra.translateQuery(parsed, base=header.get("base"))
    except Exception as exc:  # rdflib raises plain Exceptions for semantic errors (e.g. unbound GROUP BY)
        raise _syntax(exc, "query") from None
    if form == "construct" and any(isinstance(t, rdflib.BNode) for triple in query.algebra.template or []
                                   for t in triple):
        raise Refused("unprocessable", "the CONSTRUCT template makes blank nodes, which are new at every "
                                       "evaluation; use IRIs in the template")
    readable = list(header["readable"])
    prologue = algebra.translatePrologue(parsed[0], header.get("base"))
    from_default, from_named = _dataset_clause(_field(parsed[1], "datasetClause"), prologue)
    if header.get("default") is not None or header.get("named") is not None:
        default, named = list(header.get("default") or []), list(header.get("named") or [])
    elif from_default is None and from_named is None:  # the party's default graph, if the hub gives one
        default, named = list(header.get("default_graph") or readable), readable
    else:
        default, named = list(from_default or []), list(from_named or [])
    unreadable = sorted({g for g in default + named if g not in readable})
    if unreadable:
        raise Refused("forbidden", f"the query's dataset names graphs you may not read: {', '.join(unreadable[:5])}")
    patterns = _patterns(query.algebra)
    contexts = _contexts(query.algebra)
    delta = _delta_plan(query.algebra) if form == "select" else None
    _subscriptions[str(header["id"])] = {"text": text, "base": header.get("base"), "default": default,
                                         "named": named, "form": form, "contexts": contexts, "delta": delta}
    return Frame({"status": "ok", "form": form, "default": default, "named": named, "patterns": patterns,
                  "incremental": contexts is not None, "delta": delta is not None})


def _constant(term: Any) -> str | None:
    """An IRI in a pattern, for the index (None: matches anything). Literals are left out:
    the store holds typed literals in value form, which a pattern's lexical form may not be."""
    return str(term) if isinstance(term, rdflib.URIRef) else None


def _path_predicates(path: Any) -> list[str | None]:
    """The predicates a property path can match (None: any, for a negated set)."""
    if isinstance(path, rdflib.URIRef):
        return [str(path)]
    if isinstance(path, NegatedPath):
        return [None]
    if isinstance(path, InvPath):
        return _path_predicates(path.arg)
    if isinstance(path, MulPath):
        return _path_predicates(path.path)
    if isinstance(path, SequencePath | AlternativePath):
        return [p for part in path.args for p in _path_predicates(part)]
    return [None]


def _patterns(tree: Any) -> list[list[str | None]]:
    """Every triple pattern of the query as [s, p, o] IRIs or None (once each)."""
    patterns: list[list[str | None]] = []
    for node in _walk(tree):
        if node.name != "BGP":
            continue
        for s, p, o in node.triples:
            found = ([[None, q, None] for q in _path_predicates(p)] if isinstance(p, Path)
                     else [[_constant(s), _constant(p), _constant(o)]])
            patterns.extend(pattern for pattern in found if pattern not in patterns)
    return patterns


# --- which subscriptions a change can affect ---------------------------------------------------
#
# Written here: no library finds, for a changed triple, the subscriptions it can affect.
#
# A query whose graph pattern is conjunctive (basic graph patterns, FILTER, BIND, OPTIONAL,
# GRAPH <iri>, under any of SELECT/ASK/CONSTRUCT, DISTINCT, ORDER BY, LIMIT, GROUP BY and
# aggregates) can only change its results when a changed triple takes part in a solution
# of the patterns it must hold together with: the required patterns, and for a pattern
# inside OPTIONAL the required patterns with the optional group's. So for a removed triple
# (on the graph before the change) or an added one (after it) that matches pattern P, the
# subscription is affected only if P's context, with P's variables bound to the triple's
# terms, has a solution. Why that is enough: a solution in the old results and not in the
# new holds in the old state and uses a removed triple; one in the new results and not in
# the old holds in the new state and uses an added triple; either way that triple, bound
# into its pattern, leaves the context a solution in that state. Aggregates, DISTINCT,
# ORDER BY and LIMIT are functions of the solutions: unchanged solutions, unchanged
# results. Subscriptions whose contexts differ only in IRIs (the same query
# for another partner) share one query: the IRIs become VALUES rows, and the query answers
# which rows have a solution. Filters are left out (more subscriptions are evaluated, never
# fewer). Anything else (UNION, MINUS, EXISTS, property paths, subqueries, VALUES, GRAPH
# ?g) is evaluated whenever the index says its patterns can match.

Pattern = tuple[str, str, str, str | None]  # s, p, o as SPARQL terms; the graph IRI (None: default)
_MODIFIERS = {"SelectQuery", "AskQuery", "ConstructQuery", "Project", "Distinct", "Reduced", "Slice", "OrderBy",
              "Group", "AggregateJoin", "ToMultiSet"}


class _Open(Exception):
    """The query is not conjunctive: no narrowing."""


def _contexts(tree: Any) -> list[tuple[Pattern, list[Pattern]]] | None:
    """Each triple pattern of a conjunctive query with the patterns it must hold with (None
    when the query is not conjunctive)."""
    node = tree
    try:
        while getattr(node, "name", None) in _MODIFIERS | {"Filter", "Extend"}:
            if node.name in ("Filter", "Extend"):
                _no_pattern_in(node.expr)
            node = node.p
        required, optional = _conjunctive(node, None)
    except _Open:
        return None
    return [(pattern, required) for pattern in required] + optional


def _no_pattern_in(expression: Any) -> None:
    if any(getattr(n, "name", "") in ("Builtin_EXISTS", "Builtin_NOTEXISTS") for n in _walk(expression)):
        raise _Open


def _conjunctive(node: Any, graph: str | None) -> tuple[list[Pattern], list[tuple[Pattern, list[Pattern]]]]:
    """(required patterns, [(optional pattern, its context)]) of a group."""
    name = getattr(node, "name", None)
    if name == "BGP":
        return [(_sparql(s), _sparql(p), _sparql(o), graph) for s, p, o in node.triples], []
    if name in ("Filter", "Extend"):
        _no_pattern_in(node.expr)
        return _conjunctive(node.p, graph)
    if name == "Graph" and isinstance(node.term, rdflib.URIRef):
        return _conjunctive(node.p, f"<{node.term}>")
    if name == "Join":
        r1, o1 = _conjunctive(node.p1, graph)
        r2, o2 = _conjunctive(node.p2, graph)
        return r1 + r2, [(p, c + r2) for p, c in o1] + [(p, c + r1) for p, c in o2]
    if name == "LeftJoin":
        if node.expr is not None:
            _no_pattern_in(node.expr)
        r1, o1 = _conjunctive(node.p1, graph)
        r2, o2 = _conjunctive(node.p2, graph)
        return r1, o1 + [(p, r1 + r2) for p in r2] + [(p, c + r1) for p, c in o2]
    raise _Open


def _sparql(term: Any) -> str:
    if isinstance(term, rdflib.Variable):
        return f"?{term}"
    if isinstance(term, rdflib.BNode):  # a blank node in a pattern is a variable
        return "?_b" + "".join(c if c.isalnum() else "_" for c in str(term))
    if isinstance(term, rdflib.URIRef):
        return f"<{term}>"
    if isinstance(term, rdflib.Literal):
        return str(term.n3())
    raise _Open  # a property path


def _bind(pattern: Pattern, triple: tuple[str, str, str], graph: str, default: list[str]) -> dict[str, str] | None:
    """The pattern's variables bound to the triple's terms; None when it cannot match.
    A literal in the pattern matches any object: the store holds typed literals in value
    form, which the pattern's lexical form may not be (the context query decides)."""
    if (pattern[3] is None and graph not in default) or (pattern[3] is not None and pattern[3] != f"<{graph}>"):
        return None
    binding: dict[str, str] = {}
    for term, value in zip(pattern[:3], triple, strict=True):
        if term.startswith("?"):
            if binding.setdefault(term, value) != value:
                return None
        elif term.startswith("<") and term != value:
            return None
    return binding


def _template(patterns: list[Pattern], binding: dict[str, str], *, parameters: bool = True) -> tuple[str, list[str]]:
    """The context as a group graph pattern, bound variables replaced by the triple's terms
    and (with `parameters`) subject/object IRIs by parameters `?__kN`; and the parameters'
    IRIs."""
    params: list[str] = []
    by_graph: dict[str | None, list[str]] = {}
    for s, p, o, g in patterns:
        terms = []
        for position, term in enumerate((s, p, o)):
            if term in binding:
                term = binding[term]
            elif parameters and term.startswith("<") and position != 1:
                params.append(term)
                term = f"?__k{len(params) - 1}"
            terms.append(term)
        by_graph.setdefault(g, []).append(" ".join(terms) + " .")
    body = " ".join(" ".join(lines) if g is None else f"GRAPH {g} {{ {' '.join(lines)} }}"
                    for g, lines in by_graph.items())
    return body, params


def _affected(candidates: list[str], graph: str, quads: list[ox.Quad]) -> set[str]:
    """The candidates the changed quads can affect (on the store as it is now)."""
    found: set[str] = set()
    triples = [(str(q.subject), str(q.predicate), str(q.object)) for q in quads]
    groups: dict[tuple[str, tuple[str, ...], tuple[str, ...], int], dict[tuple[str, ...], set[str]]] = {}
    for sid in candidates:
        sub = _subscriptions.get(sid)
        if sid in found or sub is None:
            continue
        if sub["contexts"] is None:
            found.add(sid)
            continue
        for pattern, context in sub["contexts"]:
            rest = list(context)
            if pattern in rest:
                rest.remove(pattern)
            for triple in triples:
                binding = _bind(pattern, triple, graph, sub["default"])
                if binding is None:
                    continue
                if not rest:
                    found.add(sid)
                    break
                body, params = _template(rest, binding)
                key = (body, tuple(sub["default"]), tuple(sub["named"]), len(params))
                groups.setdefault(key, {}).setdefault(tuple(params), set()).add(sid)
    for (body, default, named, width), rows in groups.items():
        waiting = {values: sids - found for values, sids in rows.items() if sids - found}
        if not waiting:
            continue
        if time.monotonic() > _deadline:  # the joins took their time: the rest are evaluated (budgeted)
            found.update(s for sids in waiting.values() for s in sids)
            continue
        names = [f"?__k{i}" for i in range(width)]
        if width:
            values = " ".join(f"({' '.join(v)})" for v in waiting)
            text = f"SELECT DISTINCT {' '.join(names)} WHERE {{ VALUES ({' '.join(names)}) {{ {values} }} {body} }}"
        else:
            text = f"ASK {{ {body} }}"
        try:
            result: Any = _store.query(text, default_graph=[ox.NamedNode(g) for g in default] or [NO_GRAPH],
                                       named_graphs=[ox.NamedNode(g) for g in named] or [NO_GRAPH])
        except (SyntaxError, OSError):  # cannot narrow: every one of them is evaluated
            found.update(s for sids in waiting.values() for s in sids)
            continue
        if not width:
            if bool(result):
                found.update(s for sids in waiting.values() for s in sids)
            continue
        for solution in result:
            row = tuple(str(solution[n[1:]]) for n in names)
            found.update(waiting.get(row, set()))
    return found


# --- the delta path: added and removed rows from the patch itself -----------------------------
#
# For a SELECT whose pattern is required triple patterns with FILTERs only (no OPTIONAL,
# BIND, DISTINCT, ORDER BY, LIMIT, aggregates, blank nodes in patterns, paths, subqueries,
# VALUES): its solutions are the mappings of the patterns' variables that satisfy them.
# Solutions(after) = Solutions(before) - those that used a removed triple + those (after)
# that use an added triple, exactly (a solution that used no removed triple still holds;
# one that uses no added triple held before). Each set is found by binding a pattern to a
# changed triple (the join), deduplicated as whole mappings, then the query itself is run
# with those mappings as a trailing VALUES block: it applies the FILTERs and the projection,
# and keeps the multiplicity of projected rows. This needs each solution to be found one
# way only, which a default graph made of several graphs breaks (`_takes_delta`).

MAX_DELTA = 5_000  # mappings one subscription may take incrementally per patch (else: evaluated)
# When the joins of one change must stop: past it, subscriptions are evaluated instead, each
# under its own budget. (A single join query is not interrupted: the worker checks between
# solutions and between queries.)
_deadline = 0.0


def _delta_plan(tree: Any) -> dict[str, Any] | None:
    node = tree
    if getattr(node, "name", None) != "SelectQuery":
        return None
    node = node.p
    if getattr(node, "name", None) != "Project":
        return None
    node = node.p
    try:
        while getattr(node, "name", None) == "Filter":
            _no_pattern_in(node.expr)
            node = node.p
        required, optional = _conjunctive(node, None)
    except _Open:
        return None
    # (DISTINCT, LIMIT, ORDER BY and GROUP BY sit above Project or are not conjunctive: refused
    # above; BIND is conjunctive but makes variables the patterns do not bind.)
    if optional or not required or any(getattr(n, "name", None) == "Extend" for n in _walk(node)):
        return None
    terms = {t for pattern in required for t in pattern[:3]}
    if any(t.startswith("?_b") for t in terms):  # blank nodes in patterns: not variables in scope
        return None
    return {"patterns": required, "vars": sorted(t for t in terms if t.startswith("?"))}


def _takes_delta(sub: dict[str, Any] | None) -> bool:
    """Whether a subscription's rows can come from the patch: a delta plan, and each
    solution found one way only. The store's default graph of several graphs is their
    union as a bag (a triple two of them hold matches twice), so there a solution may be
    found through either copy: then the subscription is evaluated instead."""
    if sub is None or sub["delta"] is None:
        return False
    return len(sub["default"]) <= 1 or all(pattern[3] is not None for pattern in sub["delta"]["patterns"])


def _mappings(sid: str, graph: str, quads: list[ox.Quad]) -> set[tuple[str, ...]] | None:
    """The whole mappings of the subscription's patterns that use one of the changed
    triples, on the store as it is now; None when there are more than MAX_DELTA."""
    sub = _subscriptions[sid]
    plan = sub["delta"]
    names = plan["vars"]
    found: set[tuple[str, ...]] = set()
    for pattern in plan["patterns"]:
        for quad in quads:
            triple = (str(quad.subject), str(quad.predicate), str(quad.object))
            binding = _bind(tuple(pattern), triple, graph, sub["default"])
            if binding is None:
                continue
            body, _none = _template(plan["patterns"], binding, parameters=False)
            rest = [n for n in names if n not in binding]
            bound = [n for n in names if n in binding]
            text = f"SELECT {' '.join(rest) or '*'} WHERE {{ {body} }}"
            result: Any = _store.query(text, default_graph=[ox.NamedNode(g) for g in sub["default"]] or [NO_GRAPH],
                                       named_graphs=[ox.NamedNode(g) for g in sub["named"]] or [NO_GRAPH])
            for solution in result:
                values = {n: binding[n] for n in bound}
                values.update({n: str(solution[n[1:]]) for n in rest})
                found.add(tuple(values[n] for n in names))
                if len(found) > MAX_DELTA or time.monotonic() > _deadline:
                    return None  # evaluated instead, under the subscription's own budget
    return found


def _delta_rows(sid: str, graph: str, quads: list[ox.Quad]) -> list[dict[str, Any]] | None:
    """The subscription's rows from the mappings that use the changed triples: its own
    query, with the mappings as a trailing VALUES block (its FILTERs and projection apply)."""
    if not quads:
        return []
    try:
        found = _mappings(sid, graph, quads)
    except (SyntaxError, OSError):
        return None
    if found is None:
        return None
    if not found:
        return []
    sub = _subscriptions[sid]
    names = sub["delta"]["vars"]
    values = " ".join(f"({' '.join(row)})" for row in sorted(found))
    text = f"{sub['text']}\nVALUES ({' '.join(names)}) {{ {values} }}"
    try:
        answer = _run(_store, text, sub["base"], sub["default"], sub["named"], "select", 0)
    except Refused:
        return None
    rows: list[dict[str, Any]] = json.loads(answer.body)["rows"]
    return rows


# --- evaluation --------------------------------------------------------------------------------

def _term(term: Any) -> dict[str, str]:
    """A term as SPARQL 1.1 Query Results JSON; the store's skolem IRIs are blank nodes again
    (labelled by their MSG instance: stable while the blank-node structure lives)."""
    if isinstance(term, ox.NamedNode):
        if term.value.startswith(SKOLEM_PREFIX):
            return {"type": "bnode", "value": "b" + term.value[len(SKOLEM_PREFIX):].replace(".", "_")}
        return {"type": "uri", "value": term.value}
    if isinstance(term, ox.BlankNode):
        return {"type": "bnode", "value": term.value}
    if isinstance(term, ox.Literal):
        found = {"type": "literal", "value": term.value}
        if term.language:
            found["xml:lang"] = term.language
        elif term.datatype.value != "http://www.w3.org/2001/XMLSchema#string":
            found["datatype"] = term.datatype.value
        return found
    raise Refused("unprocessable", f"the query returns a term the results format cannot carry: {term}")


def _evaluate(request: Frame) -> Frame:
    sub = _subscriptions.get(str(request.header["id"]))
    if sub is None:
        raise Refused("internal", f"subscription {request.header['id']} is not registered")
    return _run(_store, sub["text"], sub["base"], sub["default"], sub["named"], sub["form"],
                int(request.header.get("max_bytes") or 0))


@functools.lru_cache(maxsize=4096)
def _window_form(text: str) -> str:
    """A windowed query's form, its text parsed once: the same query is evaluated at every
    step (rdflib's parser took a third of each evaluation of a 10,000-triple window)."""
    return _parse(text, "a windowed query is a SELECT, ASK or CONSTRUCT query")[1]


def _window(request: Frame) -> Frame:
    """A windowed query over its own dataset: the window's statements (graph `window`) and
    other graphs (`state`); the default graph merges `default` (else the window's), the named
    graphs are `named` (else the window's and the states)."""
    header = request.header
    text = str(header["text"])
    form = _window_form(text)
    window = str(header["window"])
    key = header.get("key")
    store = _window_stores.get(key) if key else None
    if store is None:
        if not request.body:
            raise Refused("reload", "send the window's content again")
        data = json.loads(request.body)
        store = ox.Store()
        for graph, lines in [(window, data["changes"]), *data["state"].items()]:
            _load_lines(store, lines, ox.NamedNode(graph))
        if key:
            _window_stores[key] = store
            while len(_window_stores) > int(header.get("keep") or 1):
                _window_stores.pop(next(iter(_window_stores)))
    default = header.get("default") or [window]
    named = header.get("named") or [window]
    return _run(store, text, header.get("base"), default, named, form, int(header.get("max_bytes") or 0))


def _run(store: ox.Store, text: str, base: str | None, default: list[str], named: list[str], form: str,
         limit: int) -> Frame:
    try:
        result: Any = store.query(text, base_iri=base,
                                  default_graph=[ox.NamedNode(g) for g in default] or [NO_GRAPH],
                                  named_graphs=[ox.NamedNode(g) for g in named] or [NO_GRAPH])
        if form == "ask":
            body: dict[str, Any] = {"boolean": bool(result)}
        elif form == "construct":
            body = {"vars": ["subject", "predicate", "object"],
                    "rows": [{"subject": _term(t.subject), "predicate": _term(t.predicate),
                              "object": _term(t.object)} for t in result]}
        else:
            names = [v.value for v in result.variables]
            rows = []
            for solution in result:
                row = {}
                for name in names:
                    value = solution[name]
                    if value is not None:
                        row[name] = _term(value)
                rows.append(row)
            body = {"vars": names, "rows": rows}
    except SyntaxError as exc:
        raise _syntax(exc, "query") from None
    except OSError as exc:
        raise Refused("unprocessable", f"the query failed: {' '.join(str(exc).split())[:300]}") from None
    encoded = json.dumps(body, separators=(",", ":")).encode()
    if limit and len(encoded) > limit:
        raise Refused("too-large", f"the results are larger than {limit:,} bytes (LUCID_QUERY_MAX_RESULT_BYTES); "
                                   "narrow the query")
    return Frame({"status": "ok"}, encoded)
