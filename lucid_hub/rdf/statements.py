"""Canonical N-Quads statements as text: the cheap representation MSG work runs on.

A statement is the canonical N-Quads form of one quad without the terminating ` .`
(`str(quad)` in pyoxigraph). Working on these strings instead of pyoxigraph term objects
(each attribute access allocates one) is what makes diffing a million triples fast.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import pyoxigraph as ox


def terms(statement: str) -> list[str]:
    """The 3 or 4 terms of a canonical statement (subject, predicate, object[, graph]).

    Linear string splits, no regular expression (a backtracking one needs memory in
    proportion to a literal's length). Exact for canonical statements: subject and
    predicate hold no spaces; an object that is not a literal holds none either; and the
    graph term (IRI or blank node) never holds a `"`, while any text after the last space
    inside a literal does (the closing quote).
    """
    subject, predicate, rest = statement.split(" ", 2)
    if not rest.startswith('"'):
        return [subject, predicate, *rest.split(" ")]
    head, space, last = rest.rpartition(" ")
    if space and '"' not in last and last.startswith(("<", "_:")):
        return [subject, predicate, head, last]
    return [subject, predicate, rest]


def blank_labels(statement: str) -> list[str]:
    """Blank-node labels (with `_:`) in subject, object and graph position, in that order."""
    return [t for t in terms(statement) if t.startswith("_:")]


def relabel(statement: str, rename: Callable[[str], str]) -> str:
    """The statement with each blank-node label `_:x` replaced by `rename("_:x")`."""
    return " ".join(rename(t) if t.startswith("_:") else t for t in terms(statement))


def document(statements: list[str]) -> str:
    """Statements as a sorted canonical N-Quads document (code point order, per RDFC-1.0)."""
    return "".join(sorted(f"{s} .\n" for s in statements))


def ntriples(statements: Iterable[str]) -> str:
    """Statements as an N-Triples (or N-Quads) document, in the order given."""
    return "".join(f"{s} .\n" for s in statements)


def statement_quads(statements: Iterable[str], graph: str | None = None) -> Iterator[ox.Quad]:
    """The quads of triple statements, in the default graph or in `graph` when named."""
    quads = ox.parse(ntriples(statements), format=ox.RdfFormat.N_TRIPLES)
    if graph is None:
        return iter(quads)
    name = ox.NamedNode(graph)
    return (ox.Quad(q.subject, q.predicate, q.object, name) for q in quads)
