"""Reading graphs out of the store: as canonical statements labelled as patches label them,
as MSG multisets, one stored MSG instance, ground triples held or not, and SPARQL over a
fixed dataset. Readers do not wait for the writer (pyoxigraph reads a consistent view)."""

from __future__ import annotations

import itertools
import re
from collections import Counter
from collections.abc import Iterable
from typing import Any

import pyoxigraph as ox

from lucid_hub.rdf.msg import GraphMsgs, Msg, chain_label
from lucid_hub.rdf.statements import document, terms
from lucid_hub.store import lexical
from lucid_hub.store.layout import (
    CLOSED,
    MSG,
    OCCURRENCE,
    RESERVED_PREFIX,
    SKOLEM,
    SKOLEM_PREFIX,
    SYSTEM,
    VERSION,
    index_graph,
    iri,
)


class GraphReader:
    """The reading side of the store (the `GraphStore` writes)."""

    def __init__(self, raw: Any) -> None:
        self.raw = raw  # the pyoxigraph Store

    def close(self) -> None:
        self.raw = CLOSED

    def graphs(self) -> list[str]:
        """IRIs of the graphs that have a version."""
        return sorted(iri(q.subject) for q in self.raw.quads_for_pattern(None, VERSION, None, SYSTEM))

    def statements(self, graph: str) -> list[str]:
        """The graph's triples as canonical statements, blank nodes labelled as format-2
        patches label them (`_:hHASHoOCCbN`): a copy of the graph read here, then patched by
        label, stays exactly the graph."""
        text = self._dump(graph)
        instances = self._instances(graph)

        def label(match: re.Match[str]) -> str:
            found = instances.get(match.group(1))
            if found is None:  # (not indexed: cannot happen in a store of this format)
                return f"_:b{match.group(1)}x{match.group(2)}"
            return chain_label(found[0], found[1], f"_:c14n{match.group(2)}")

        return [line[:-2] for line in SKOLEM.sub(label, text).split("\n")[:-1]]

    def _instances(self, graph: str) -> dict[str, tuple[str, int]]:
        """Each stored MSG instance of the graph: its MSG hash and occurrence."""
        hashes: dict[str, str] = {}
        occurrences: dict[str, int] = {}
        for q in self.raw.quads_for_pattern(None, None, None, index_graph(graph)):
            instance = iri(q.subject)[len(SKOLEM_PREFIX):]
            if q.predicate == MSG:
                hashes[instance] = q.object.value
            elif q.predicate == OCCURRENCE:
                occurrences[instance] = int(q.object.value)
        return {i: (h, occurrences.get(i, 0)) for i, h in hashes.items()}

    def held(self, graph: str, msg_hash: str) -> dict[int, str]:
        """The instances of an MSG the graph holds, by occurrence."""
        idx = index_graph(graph)
        out: dict[int, str] = {}
        for q in self.raw.quads_for_pattern(None, MSG, ox.Literal(msg_hash), idx):
            for o in self.raw.quads_for_pattern(q.subject, OCCURRENCE, None, idx):
                out[int(o.object.value)] = iri(q.subject)
        return out

    def graph_msgs(self, graph: str) -> GraphMsgs:
        """The graph's MSG multiset, read without canonicalising: each stored instance is
        its MSG's canonical form with `_:c14nN` renamed `<…INSTANCE.N>`."""
        ground: set[str] = set()
        instances: dict[str, list[str]] = {}
        for line in self._dump(graph).split("\n")[:-1]:
            statement = line[:-2]
            match = SKOLEM.search(statement)
            if match is None:
                ground.add(statement)
            else:
                instances.setdefault(match.group(1), []).append(
                    SKOLEM.sub(lambda m: f"_:c14n{m.group(2)}", statement))
        return GraphMsgs(ground, Counter(document(s) for s in instances.values()))

    def blank_msgs(self, graph: str) -> list[tuple[Msg, int, str]]:
        """Every blank-node MSG instance the graph holds: its MSG, occurrence and instance id."""
        out = []
        for instance, (digest, occurrence) in sorted(self._instances(graph).items()):
            _statements, doc = self.instance(graph, instance)
            out.append((Msg(digest, doc), occurrence, instance))
        return out

    def instance(self, graph: str, instance: str) -> tuple[list[str], str]:
        """One stored MSG instance (the blank nodes `<…bnode:INSTANCE.N>`): its statements as
        stored (skolem IRIs, public literals) and its MSG's canonical document. Empty
        statements when the graph holds no such instance."""
        g = ox.NamedNode(graph)
        statements: set[str] = set()
        for n in itertools.count():
            node = ox.NamedNode(f"{SKOLEM_PREFIX}{instance}.{n}")
            found = [q for q in itertools.chain(self.raw.quads_for_pattern(node, None, None, g),
                                                self.raw.quads_for_pattern(None, None, node, g))]
            if not found:
                break  # canonical labels are consecutive: _:c14n0, _:c14n1, …
            statements.update(str(q.triple) for q in found)
        ordered = sorted(lexical.expand_all(statements, lexical.records(self.raw, graph)))
        return ordered, document([SKOLEM.sub(lambda m: f"_:c14n{m.group(2)}", s) for s in ordered])

    def _dump(self, graph: str) -> str:
        """The graph as published: N-Triples, typed literals in the forms recorded for them."""
        data = self.raw.dump(format=ox.RdfFormat.N_TRIPLES, from_graph=ox.NamedNode(graph))
        assert data is not None
        text = data.decode()
        recorded = lexical.records(self.raw, graph)
        if not recorded:
            return str(text)
        return "".join(f"{s} .\n" for s in lexical.expand_all((line[:-2] for line in text.split("\n")[:-1]),
                                                               recorded))

    def query(self, query: str, graphs: list[ox.NamedNode]) -> Any:
        """A SPARQL query whose dataset is exactly `graphs` (their union as the default graph,
        and as the named graphs), whatever FROM clauses the query has."""
        dataset = graphs or [ox.NamedNode(f"{RESERVED_PREFIX}no-graph")]
        return self.raw.query(query, default_graph=dataset, named_graphs=dataset)

    def published(self, graph: str, statements: list[str]) -> list[str]:
        """Statements as the store holds them (typed literals in value form) as the graph's
        patches wrote them (their recorded lexical forms, lexical.py)."""
        recorded = lexical.records(self.raw, graph)
        return list(lexical.expand_all(statements, recorded)) if recorded else list(statements)

    def holds_any(self, graph: str) -> bool:
        """Whether the graph holds at least one triple (a look at the first, not a count)."""
        return next(iter(self.raw.quads_for_pattern(None, None, None, ox.NamedNode(graph))), None) is not None

    def contains(self, graph: str, statement: str) -> bool:
        """Whether the graph holds this ground triple (given as a canonical statement)."""
        return bool(self.holding(graph, (statement,)))

    def holding(self, graph: str, statements: Iterable[str]) -> set[str]:
        """Those of the ground triples (canonical statements) the graph holds: `contains` for
        many at once, parsed in one go (a POST asks for each triple it adds)."""
        plain: list[str] = []
        typed: list[str] = []
        for statement in statements:
            (typed if lexical.typed(statement) else plain).append(statement)
        found: set[str] = set()
        if plain:
            g = ox.NamedNode(graph)
            quads = ox.parse("".join(f"{s} .\n" for s in plain), format=ox.RdfFormat.N_TRIPLES)
            found.update(s for s, q in zip(plain, quads, strict=True)
                         if ox.Quad(q.subject, q.predicate, q.object, g) in self.raw)
        if typed:
            forms = lexical.Forms(self.raw, graph, lexical.NATIVES.of(terms(s)[2] for s in typed))
            found.update(s for s in typed if forms.holds(s))
        return found
