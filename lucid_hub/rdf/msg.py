"""MSG decomposition (RDFSync) and MSG hashes: the unit of diff, hash and removal.

A statement without blank nodes is an MSG on its own; statements linked through shared
blank nodes (in subject, object or graph-name position) form one MSG. Each MSG is
canonicalised on its own with RDFC-1.0 and hashed; a graph's state is the multiset of its
MSG hashes. Everything here works on canonical statement text (see `statements`).
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from operator import attrgetter

import pyoxigraph as ox

from lucid_hub.errors import PatchFormatError, UnsupportedRdfError
from lucid_hub.rdf.canon import Canonicalizer
from lucid_hub.rdf.statements import blank_labels
from lucid_hub.rdf.syntax import ParseBudget, has_triple_term, triple_term_error

_BN = ox.BlankNode
_HASH = attrgetter("hash")


def msg_hash(nquads: str) -> str:
    """The MSG hash: lowercase hex SHA-256 of the canonical N-Quads document (UTF-8)."""
    return hashlib.sha256(nquads.encode()).hexdigest()


def by_hash(msgs: Iterable[Msg]) -> list[Msg]:
    """MSGs sorted by hash (a C-level key sort: a million `Msg.__lt__` calls take seconds)."""
    return sorted(msgs, key=_HASH)


@dataclass(frozen=True, order=True)
class Msg:
    """One MSG in canonical form: sorted canonical N-Quads lines, blank nodes `_:c14nN`."""

    hash: str  # msg_hash(nquads); the first field, so MSGs sort by hash
    nquads: str = field(compare=False)

    @classmethod
    def of(cls, nquads: str) -> Msg:
        """The MSG whose canonical N-Quads document is `nquads`."""
        return cls(msg_hash(nquads), nquads)

    @property
    def statements(self) -> list[str]:
        """The canonical lines without the terminating ` .` and newline."""
        # Split on "\n" only: str.splitlines() also breaks at U+2028, U+0085 and other
        # characters that canonical N-Triples leaves unescaped inside literals.
        return [line[:-2] for line in self.nquads.split("\n")[:-1]]


@dataclass
class Component:
    """Statements linked by shared blank nodes, with those nodes' labels."""

    statements: list[str] = field(default_factory=list)
    labels: set[str] = field(default_factory=set)


def blank_components(statements: Iterable[str]) -> list[Component]:
    """Group statements that share blank nodes (union-find); each must hold one."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        root = x
        while parent[root] != root:
            root = parent[root]
        while parent[x] != root:  # path compression
            parent[x], x = root, parent[x]
        return root

    anchored: list[tuple[str, list[str]]] = []
    for statement in statements:
        labels = blank_labels(statement)
        for label in labels:
            parent.setdefault(label, label)
        first = find(labels[0])
        for other in labels[1:]:
            root = find(other)
            if root != first:
                parent[root] = first
        anchored.append((statement, labels))
    groups: dict[str, Component] = {}
    for statement, labels in anchored:
        root = find(labels[0])
        component = groups.get(root)
        if component is None:
            component = groups[root] = Component()
        component.statements.append(statement)
        component.labels.update(labels)
    return list(groups.values())


def dataset_msgs(quads: Iterable[ox.Quad], canonicalizer: Canonicalizer) -> list[Msg]:
    """All MSGs of a dataset, graph names part of the canonical form, sorted by hash.

    Blank-node graph names link all statements of their graph into one MSG.
    """
    ground: set[str] = set()
    blank: set[str] = set()
    for q in quads:
        statement = str(q)
        if "_:" in statement and blank_labels(statement):
            blank.add(statement)
        else:
            ground.add(statement)
    msgs = [Msg.of(f"{s} .\n") for s in ground]
    msgs.extend(Msg.of(canonicalizer.canonicalize(c.statements, labels=c.labels))
                for c in blank_components(blank))
    return by_hash(msgs)


# Hex digits of the MSG hash in a format-2 label (96 bits: unique among a graph's MSGs).
LABEL_HASH_DIGITS = 24
_CHAIN_LABEL = re.compile(r"_:h([0-9a-f]{24})o(\d+)b(\d+)")


def chain_label(msg_hash: str, occurrence: int, canonical_label: str) -> str:
    """Format 2: the label of canonical blank node `c14nN` of the `occurrence`-th copy of an
    MSG in its graph: `_:h<first 24 hex digits of the MSG hash>o<occurrence>b<N>`."""
    return f"_:h{msg_hash[:LABEL_HASH_DIGITS]}o{occurrence}b{canonical_label[len('_:c14n'):]}"


def parse_chain_label(label: str) -> tuple[str, int, int] | None:
    """(hash prefix, occurrence, N) of a format-2 label, None for any other label."""
    match = _CHAIN_LABEL.fullmatch(label)
    return (match.group(1), int(match.group(2)), int(match.group(3))) if match else None


def msgs_with_occurrences(quads: Iterable[ox.Quad], canonicalizer: Canonicalizer,
                          source: str) -> list[tuple[Msg, int]]:
    """A format-2 patch's removed or added MSGs with their occurrences, sorted by hash and
    occurrence: a blank-node MSG's labels all name its hash and one occurrence (ground
    triples: occurrence 0). PatchFormatError names a label that does not fit its MSG."""
    builder = GraphMsgsBuilder(source)
    for q in quads:
        builder.add(q, triple_statement(q))
    out = [(Msg.of(f"{s} .\n"), 0) for s in builder.ground]
    for component in blank_components(builder.blank):
        msg = Msg.of(canonicalizer.canonicalize(component.statements, labels=component.labels))
        named = {parse_chain_label(label) for label in component.labels}
        instances = {(p[0], p[1]) if p else None for p in named}
        if len(instances) != 1 or None in instances:
            raise PatchFormatError(f"{source}: the blank nodes of one MSG must all be labelled _:hHASHoOCCbN "
                                   f"with one hash and occurrence (found {', '.join(sorted(component.labels))[:200]})")
        ((prefix, occurrence),) = instances  # type: ignore[misc]
        if prefix != msg.hash[:LABEL_HASH_DIGITS]:
            raise PatchFormatError(f"{source}: blank node labels _:h{prefix}… do not name their MSG's hash "
                                   f"{msg.hash[:LABEL_HASH_DIGITS]}")
        out.append((msg, occurrence))
    return sorted(out, key=lambda pair: (pair[0].hash, pair[1]))


@dataclass
class GraphMsgs:
    """The MSG multiset of one graph, keyed by canonical text (the hash is a function of it).

    Ground triples are kept as their canonical statement, a set because a graph is a set;
    blank-node MSGs as canonical documents with counts, because a non-lean graph
    `{a p _:x . a p _:y}` holds the same MSG twice.
    """

    ground: set[str] = field(default_factory=set)
    blank: Counter[str] = field(default_factory=Counter)

    def __len__(self) -> int:
        return len(self.ground) + self.blank.total()

    def hashes(self) -> Counter[str]:
        """The graph's state: the multiset of its MSG hashes."""
        counts: Counter[str] = Counter(msg_hash(f"{s} .\n") for s in self.ground)
        for text, n in self.blank.items():
            counts[msg_hash(text)] += n
        return counts

    def msgs(self) -> list[Msg]:
        """Every MSG, repetitions included, sorted by hash."""
        out = [Msg.of(f"{s} .\n") for s in self.ground]
        for text, n in self.blank.items():
            out.extend([Msg.of(text)] * n)
        return by_hash(out)


class GraphMsgsBuilder:
    """Accumulates the triples of one graph, then decomposes them into MSGs."""

    def __init__(self, source: str = "<input>", budget: ParseBudget | None = None) -> None:
        self.source = source
        self.budget = budget
        self.ground: set[str] = set()
        self.blank: set[str] = set()

    def add(self, quad: ox.Quad, statement: str) -> None:
        """Add a triple given with its canonical statement (graph left out)."""
        if self.budget is not None:
            self.budget.spend(len(statement))
        # Hot path: the caller made one str() per quad; term objects are only touched
        # (each access allocates) when the text hints at a blank node or a triple term.
        if "_:" in statement or "<<(" in statement:
            if has_triple_term(quad):
                raise triple_term_error(self.source, quad)
            if type(quad.subject) is _BN or type(quad.object) is _BN:
                self.blank.add(statement)
                return
        self.ground.add(statement)

    def add_default_graph(self, quads: Iterable[ox.Quad]) -> GraphMsgsBuilder:
        """Add quads that are all in the default graph (as any triple syntax gives them)."""
        add, ground_add = self.add, self.ground.add
        if self.budget is not None:  # (what add() spends, for the ground statements too)
            spend = self.budget.spend
            for q in quads:
                statement = str(q)
                if "_:" in statement or "<<(" in statement:
                    add(q, statement)
                else:
                    spend(len(statement))
                    ground_add(statement)
            return self
        for q in quads:
            statement = str(q)
            if "_:" in statement or "<<(" in statement:
                add(q, statement)
            else:
                ground_add(statement)
        return self

    def build(self, canonicalizer: Canonicalizer) -> GraphMsgs:
        """Decompose and canonicalise the blank-node triples; the ground ones are done."""
        blank: Counter[str] = Counter(
            canonicalizer.canonicalize(c.statements, labels=c.labels) for c in blank_components(self.blank)
        )
        return GraphMsgs(self.ground, blank)


def triple_statement(quad: ox.Quad) -> str:
    """The canonical statement of the quad's triple (its graph name left out)."""
    return str(quad) if type(quad.graph_name) is ox.DefaultGraph else str(quad.triple)


def graph_msgs(quads: Iterable[ox.Quad], canonicalizer: Canonicalizer) -> GraphMsgs:
    """The MSG multiset of the triples of `quads` (all taken as one graph)."""
    builder = GraphMsgsBuilder()
    for q in quads:
        builder.add(q, triple_statement(q))
    return builder.build(canonicalizer)


def unnamed_graph_statement(q: ox.Quad, default_graph: str | None, source: str) -> tuple[str, str]:
    """(graph, statement) of a quad not in a named graph: default-graph triples belong to
    `default_graph`; a blank-node graph name, or no graph named, cannot be published."""
    if type(q.graph_name) is ox.DefaultGraph:
        if default_graph is None:
            raise UnsupportedRdfError(f"{source}: holds triples outside a named graph; name their graph (--graph IRI)")
        return default_graph, str(q)
    raise UnsupportedRdfError(
        f"{source}: graph {q.graph_name} is named by a blank node; a published graph needs an IRI")


def split_graphs(
    quads: Iterable[ox.Quad], default_graph: str | None, source: str = "<input>",
    *, triples_only: bool = False, budget: ParseBudget | None = None,
) -> dict[str, GraphMsgsBuilder]:
    """Builders per named graph; default-graph triples go to `default_graph`.

    `triples_only` promises that every quad is in the default graph (the input syntax has
    no graphs), which saves a term access per quad. Blank-node graph names cannot be
    published (a graph is named by an IRI), nor default-graph triples with no graph named.
    Every statement is spent from `budget` (one for all the graphs) when one is given.
    """
    if triples_only:
        if default_graph is None:
            raise UnsupportedRdfError(f"{source}: holds triples; name their graph (--graph IRI)")
        return {default_graph: GraphMsgsBuilder(source, budget).add_default_graph(quads)}
    builders: dict[str, GraphMsgsBuilder] = {}
    for q in quads:
        g = q.graph_name
        if type(g) is ox.NamedNode:  # the common case, inline: this loop runs per quad
            name, statement = g.value, str(q.triple)
        else:
            name, statement = unnamed_graph_statement(q, default_graph, source)
        builder = builders.get(name)
        if builder is None:
            builder = builders[name] = GraphMsgsBuilder(source, budget)
        builder.add(q, statement)
    return builders
