"""Rules inside a guard process: a replica of the graphs the rules read (the continuous-query
worker's, `queries/query_process.py`, fed the same way), the rules' parsed conditions and actions,
and their firing. The hub process never parses or evaluates SPARQL (see
`lucid_hub.store.sparql`); it asks this process which rules a change fires and what their
actions change, and kills it when a firing overruns its time budget.

Requests (frames, `lucid_hub.guard`):
- `load`, `change`: the replica, as the continuous-query worker takes them;
- `parse`: a rule file (body); answers each rule's parts as JSON (docs/rules.md), the graphs
  each one reads and writes, or a refusal naming the rule and clause at fault;
- `register`: one rule's text (body) under its IRI, with the graphs it may read;
- `fire`: a rule and one change of a graph (JSON body: removed and added N-Triples lines, as
  the store holds them; the replica already holds the graph after it); answers the event's
  instances, how many of them the condition kept, and the action's work: each written
  graph's removed and added triples, or the rows a webhook or notification carries;
- `forget`: drop a rule.

What a condition sees (docs/rules.md): the graphs after the change by their IRIs, the
changed graph before it as `<urn:lucid-hub:before:IRI>`, the change as
`<urn:lucid-hub:inserted:IRI>` and `<urn:lucid-hub:deleted:IRI>`, and the event's bindings as
a VALUES block (one instance for FOR EACH, all of them for FOR ALL).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyoxigraph as ox
import rdflib
from pyparsing import ParseException
from rdflib.graph import Dataset
from rdflib.plugins.sparql import algebra
from rdflib.plugins.sparql.evaluate import evalPart
from rdflib.plugins.sparql.parser import parseQuery, parseUpdate
from rdflib.plugins.sparql.sparql import QueryContext

from lucid_hub.guard import Frame
from lucid_hub.queries import query_process as replica
from lucid_hub.rules.language import Pattern, Rule, RuleSyntaxError, parse_rules, skip_opaque
from lucid_hub.store.sparql_worker import (
    NO_GRAPH,
    Refused,
    _error,
    _field,
    _fresh_blank_nodes,
    _instantiate,
    _nt,
    _Overlay,
    _refuse_service,
    _to_ox,
    _to_rdflib,
    _translate,
    _View,
    _walk,
)

BEFORE, INSERTED, DELETED = "urn:lucid-hub:before:", "urn:lucid-hub:inserted:", "urn:lucid-hub:deleted:"
VIRTUAL = (BEFORE, INSERTED, DELETED)
# Rows an action's webhook or notification carries at most (the rest are counted, not sent).
MAX_ROWS = 1000


@dataclass
class _Compiled:
    rule: Rule
    reads: list[str]
    condition: str | None  # the query text, prefixes included
    form: str | None  # "ask" | "select"
    before: bool  # whether the condition or action reads the graph before the change
    operations: list[Any]  # the action's parsed update operations


_rules: dict[str, _Compiled] = {}


def handle(request: Frame) -> Frame:
    """The guard's entry point (lucid_hub.guard.serve)."""
    op = request.header.get("op")
    try:
        if op in ("load", "change"):
            return replica.handle(request)
        if op == "parse":
            return _parse(request)
        if op == "register":
            return _register(request)
        if op == "fire":
            return _fire(request)
        if op == "forget":
            _rules.pop(str(request.header["iri"]), None)
            return Frame({"status": "ok"})
        raise Refused("internal", f"unknown request {op!r}")
    except Refused as exc:
        return _error(exc.kind, str(exc))
    except RuleSyntaxError as exc:
        return _error("syntax", str(exc))
    except RecursionError:
        return _error("syntax", "the rule is nested too deeply")


# --- parsing -----------------------------------------------------------------------------------

def _parse(request: Frame) -> Frame:
    text = request.body.decode("utf-8")
    rules = parse_rules(text)
    return Frame({"status": "ok"}, json.dumps([describe(rule, _compile(rule)) for rule in rules]).encode())


def describe(rule: Rule, compiled: _Compiled) -> dict[str, Any]:
    """A parsed rule as the hub process keeps it (terms in N3: IRIs, literals, ?variables)."""
    def patterns(items: tuple[Pattern, ...]) -> list[list[str]]:
        return [[t.n3() for t in p.terms()] for p in items]

    return {"iri": rule.iri, "priority": rule.priority, "coupling": rule.coupling, "granularity": rule.granularity,
            "bound": rule.bound, "event": rule.event, "on": patterns(rule.on), "condition": rule.condition,
            "action": rule.action, "target": rule.target, "inserts": patterns(rule.inserts),
            "deletes": patterns(rule.deletes), "reads": compiled.reads,
            "text": f"{rule.prefixes}RULE{rule.text}"}


def _graphs_in(tree: Any) -> set[str]:
    """The IRIs an algebra tree names in GRAPH <iri> { … } (a variable graph ranges over the
    rule's graphs, so it adds none)."""
    return {str(node.term) for node in _walk(tree)
            if node.name == "Graph" and isinstance(_field(node, "term"), rdflib.URIRef)}


def _compile(rule: Rule) -> _Compiled:
    """The rule's condition and action as this process evaluates them; Refused for what the
    hub does not run (SERVICE, a condition with its own trailing VALUES, reading the hub's
    own graphs)."""
    reads = {str(p.graph) for p in rule.on if isinstance(p.graph, rdflib.URIRef)}
    condition, form = None, None
    if rule.condition is not None:
        condition = rule.prefixes + rule.condition
        try:
            parsed = parseQuery(condition)
        except ParseException as exc:  # language.py checked it; kept for a clear answer
            raise RuleSyntaxError(f"rule <{rule.iri}>: IF: {' '.join(str(exc).split())[:300]}") from None
        _refuse_service(parsed)
        if _field(parsed[1], "valuesClause") is not None:
            raise RuleSyntaxError(f"rule <{rule.iri}>: IF may not end with its own VALUES: the event's bindings "
                                  "are joined in as one")
        if _field(parsed[1], "datasetClause"):
            raise RuleSyntaxError(f"rule <{rule.iri}>: IF reads graphs by GRAPH <iri> {{ … }}, not FROM")
        form = "ask" if parsed[1].name == "AskQuery" else "select"
        reads |= _graphs_in(algebra.translateQuery(parsed).algebra)
    operations: list[Any] = []
    if rule.action == "update":
        try:
            parsed_update = parseUpdate(rule.prefixes + rule.target)
        except ParseException as exc:
            raise RuleSyntaxError(f"rule <{rule.iri}>: DO: {' '.join(str(exc).split())[:300]}") from None
        _refuse_service(parsed_update)
        operations = _translate(parsed_update, None)
        for op in operations:
            if _field(op, "using") or _field(op, "withClause") is not None:
                raise RuleSyntaxError(f"rule <{rule.iri}>: DO names its graphs with GRAPH <iri> {{ … }}, "
                                      "not WITH or USING")
            reads |= _graphs_in(_field(op, "where"))
        reads |= {str(p.graph) for p in (*rule.inserts, *rule.deletes)}
    virtual = {g for g in reads if g.startswith(VIRTUAL)}
    own = sorted(g for g in reads - virtual if g.startswith("urn:lucid-hub:"))
    if own:
        raise RuleSyntaxError(f"rule <{rule.iri}> reads the hub's own graph <{own[0]}>; rules read and write "
                              "data graphs")
    before = any(g.startswith(BEFORE) for g in virtual)
    return _Compiled(rule, sorted(reads - virtual), condition, form, before, operations)


def _register(request: Frame) -> Frame:
    iri = str(request.header["iri"])
    rules = parse_rules(request.body.decode("utf-8"))
    if len(rules) != 1 or rules[0].iri != iri:
        raise Refused("internal", f"register expects the one rule <{iri}>")
    compiled = _compile(rules[0])
    description = describe(rules[0], compiled)  # what the graphs it reads are, before the filter
    if request.header.get("readable") is not None:
        allowed = set(request.header["readable"])
        compiled.reads = [g for g in compiled.reads if g in allowed]  # the rest read as empty
    _rules[iri] = compiled
    return Frame({"status": "ok"}, json.dumps(description).encode())


# --- firing ------------------------------------------------------------------------------------

def _triples(lines: list[str]) -> list[ox.Triple]:
    return [q.triple for q in replica._quads(lines, ox.NamedNode("urn:x"))]


def _match(patterns: tuple[Pattern, ...], graph: str, delta: list[ox.Triple]) -> list[dict[str, Any]]:
    """The event's instances: each solution of the patterns as a basic graph pattern over the
    changed triples (variables to pyoxigraph terms). Written here: it is a join over a few
    dozen triples, cheaper than loading them into a store to query."""
    solutions: list[dict[str, Any]] = [{}]
    for pattern in patterns:
        if isinstance(pattern.graph, rdflib.URIRef) and str(pattern.graph) != graph:
            return []
        nxt: list[dict[str, Any]] = []
        for solution in solutions:
            bound = dict(solution)
            if isinstance(pattern.graph, rdflib.Variable) and \
                    bound.setdefault(str(pattern.graph), ox.NamedNode(graph)) != ox.NamedNode(graph):
                continue
            for triple in delta:
                candidate = dict(bound)
                for term, value in zip((pattern.subject, pattern.predicate, pattern.object), triple, strict=True):
                    if isinstance(term, rdflib.Variable | rdflib.BNode):
                        if candidate.setdefault(str(term), value) != value:
                            break
                    elif _to_ox(term) != value:
                        break
                else:
                    nxt.append(candidate)
        solutions = nxt
    unique: dict[str, dict[str, Any]] = {}
    for solution in solutions:
        unique.setdefault(json.dumps(sorted((k, str(v)) for k, v in solution.items())), solution)
    return [unique[key] for key in sorted(unique)]  # in a fixed order: firing is deterministic


def _instances(rule: Rule, graph: str, removed: list[ox.Triple], added: list[ox.Triple]) -> list[dict[str, Any]]:
    if rule.event == "INSERT":
        return _match(rule.on, graph, added)
    if rule.event == "DELETE":
        return _match(rule.on, graph, removed)
    # UPDATE: an added triple whose subject and predicate lost a triple in the same change
    replaced = {(t.subject, t.predicate) for t in removed}
    return _match(rule.on, graph, [t for t in added if (t.subject, t.predicate) in replaced])


def _with_values(query: str, values: str) -> str:
    """The query with the VALUES block first in its WHERE group, where its FILTERs see the
    bindings (a VALUES after the query would join only after the group's filters ran)."""
    i = 0
    while i < len(query):
        after = skip_opaque(query, i)
        if after is not None:
            i = after
            continue
        if query[i] == "{":
            return f"{query[:i + 1]} {values}\n{query[i + 1:]}"
        i += 1
    return query + values


def _values(rows: list[dict[str, Any]]) -> str:
    """A VALUES block of the rows (blank nodes, which a query cannot name, as UNDEF)."""
    names = sorted({name for row in rows for name in row})
    if not names:
        return ""

    def term(value: Any) -> str:
        return "UNDEF" if value is None or isinstance(value, ox.BlankNode) else str(value)

    body = " ".join("(" + " ".join(term(row.get(n)) for n in names) + ")" for row in rows)
    return f"VALUES ({' '.join('?' + n for n in names)}) {{ {body} }}"


def _quad(triple: ox.Triple, graph: ox.NamedNode) -> ox.Quad:
    return ox.Quad(triple.subject, triple.predicate, triple.object, graph)


@dataclass
class _Virtual:
    """The change's graphs, laid into the replica for one firing and taken out after it."""

    graph: str
    removed: list[ox.Triple]
    added: list[ox.Triple]
    before: bool

    def __enter__(self) -> list[ox.NamedNode]:
        store = replica._store
        g = self.graph
        self.names = [ox.NamedNode(INSERTED + g), ox.NamedNode(DELETED + g)]
        store.extend([_quad(t, self.names[0]) for t in self.added] + [_quad(t, self.names[1]) for t in self.removed])
        if self.before:
            before = ox.NamedNode(BEFORE + g)
            self.names.append(before)
            added = set(self.added)
            store.extend([ox.Quad(q.subject, q.predicate, q.object, before)
                          for q in store.quads_for_pattern(None, None, None, ox.NamedNode(g))
                          if q.triple not in added] + [_quad(t, before) for t in self.removed])
        return self.names

    def __exit__(self, *_exc: object) -> None:
        for name in self.names:
            if replica._store.contains_named_graph(name):
                replica._store.remove_graph(name)


def _condition(compiled: _Compiled, group: list[dict[str, Any]], named: list[Any]) -> list[dict[str, Any]]:
    """The group's solutions the condition keeps (an ASK keeps the group, a SELECT gives its rows
    with the event's bindings they agree with)."""
    if compiled.condition is None:
        return group
    try:
        result: Any = replica._store.query(_with_values(compiled.condition, _values(group)), default_graph=[NO_GRAPH],
                                           named_graphs=list(named) or [NO_GRAPH])
    except SyntaxError as exc:
        raise Refused("syntax", f"the condition failed: {' '.join(str(exc).split())[:300]}") from None
    except OSError as exc:
        raise Refused("unprocessable", f"the condition failed: {' '.join(str(exc).split())[:300]}") from None
    if compiled.form == "ask":
        return group if bool(result) else []
    rows = []
    variables = [v.value for v in result.variables]
    for solution in result:
        row = {name: solution[name] for name in variables if solution[name] is not None}
        for instance in group:  # the event's bindings the SELECT did not project
            if all(instance.get(k, v) == v for k, v in row.items()):
                rows.append({**instance, **row})
                break
        else:
            rows.append(row)
    return rows


def _act(compiled: _Compiled, rows: list[dict[str, Any]], named: list[str]) -> dict[str, dict[str, list[str]]]:
    """What the action's update removes from and adds to each graph, for the rows."""
    overlay = _Overlay()
    store = replica._store
    view = _View(store, named, overlay)
    view.scope([], named)
    new_node = _fresh_blank_nodes()
    for op in compiled.operations:
        if op.name in ("InsertData", "DeleteData"):
            fresh: dict[Any, Any] = {}
            for graph, triples in op.quads.items():
                for triple in _instantiate(triples, {}, fresh, new_node):
                    (overlay.add if op.name == "InsertData" else overlay.remove)(store, str(graph), triple)
            continue
        if op.name == "DeleteWhere":
            where: Any = algebra.BGP([])
            for graph, triples in op.quads.items():
                where = algebra.Join(where, algebra.Graph(graph, algebra.BGP(triples)))
            clauses = [(op, overlay.remove)]
        else:  # Modify
            where = op.where
            clauses = [(c, apply) for c, apply in ((_field(op, "delete"), overlay.remove),
                                                     (_field(op, "insert"), overlay.add)) if c is not None]
        solutions = [s for row in rows for s in _solve(view, where, row, op.prologue)]
        for clause, apply in clauses:
            for solution in solutions:
                fresh = {}
                for graph, triples in (_field(clause, "quads") or {}).items():
                    for triple in _instantiate(triples, solution, fresh, new_node):
                        apply(store, str(graph), triple)
    edits = {}
    for graph in sorted(set(overlay.removed) | set(overlay.added)):
        removed, added = overlay.removed.get(graph, set()), overlay.added.get(graph, set())
        if removed or added:
            edits[graph] = {"removed": _nt(removed), "added": _nt(added)}
    return edits


def _solve(view: _View, where: Any, row: dict[str, Any], prologue: Any) -> Iterator[Any]:
    bindings: dict[Any, Any] = {rdflib.Variable(k): _to_rdflib(v) for k, v in row.items()
                                if not isinstance(v, ox.BlankNode)}
    context = QueryContext(graph=Dataset(store=view), initBindings=bindings)
    context.prologue = prologue  # (what IRI() resolves against)
    for solution in evalPart(context, where):
        yield {**bindings, **solution}


def _fire(request: Frame) -> Frame:
    header = request.header
    compiled = _rules.get(str(header["iri"]))
    if compiled is None:
        raise Refused("internal", f"rule <{header['iri']}> is not registered")
    rule, graph = compiled.rule, str(header["graph"])
    change = json.loads(request.body)
    for carried in change.get("changes") or ():  # the replica's next patches, sent along
        held = ox.NamedNode(carried["graph"])
        for quad in replica._quads(carried["removed"], held):
            replica._store.remove(quad)
        replica._store.extend(replica._quads(carried["added"], held))
    removed, added = _triples(change["removed"]), _triples(change["added"])
    instances = _instances(rule, graph, removed, added)
    answer: dict[str, Any] = {"instances": len(instances), "kept": 0, "edits": {}, "rows": []}
    if not instances:
        return Frame({"status": "ok"}, json.dumps(answer).encode())
    groups = [[instance] for instance in instances] if rule.granularity == "each" else [instances]
    with _Virtual(graph, removed, added, compiled.before) as virtual:
        named: list[Any] = [ox.NamedNode(g) for g in compiled.reads] + virtual
        rows = []
        for group in groups:
            kept = _condition(compiled, group, named)
            answer["kept"] += 1 if kept else 0
            rows.extend(kept)
        if rows and rule.action == "update":
            answer["edits"] = _act(compiled, rows, [n.value for n in named])
    if rule.action != "update":
        answer["rows"] = [{k: str(v) for k, v in row.items()} for row in rows[:MAX_ROWS]]
        answer["more_rows"] = max(0, len(rows) - MAX_ROWS)
    return Frame({"status": "ok"}, json.dumps(answer).encode())

